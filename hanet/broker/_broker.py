"""The broker: a store, its replication (master or slave) and the broker port, as one service.

:class:`Broker` opens the store, runs its flusher, an :class:`HAMaster` (ASYNC_MASTER and
SYNC_MASTER) or an :class:`HASlave` (SLAVE), and the broker port
(:mod:`hanet.protocol`) in the caller's nursery, and closes the store cleanly
(``abort`` removed) however it stops.

The broker port speaks RocketMQ 4.9.8's remoting protocol through :class:`BrokerPort` (one
dispatch table for every broker mode; see :mod:`hanet.broker._port`), :class:`Broker` being
its backend. Sends are written to the store synchronously, in the order they arrive on a
connection. Then:

- ASYNC_MASTER + ASYNC_FLUSH: the answer is written at once;
- SYNC_FLUSH: the answer waits for the group-commit fsync (FLUSH_DISK_TIMEOUT after
  ``StoreConfig.sync_flush_timeout``);
- SYNC_MASTER: the answer waits for :meth:`HAMaster.wait_for_replicas` (PUT_OK,
  FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE; the message is stored on the master either way).

A slave answers every send SERVICE_NOT_AVAILABLE and serves pulls, offsets and the status
from its replica.

In a cluster (RocketMQ's behaviour throughout):

- Consumer offsets: QUERY/UPDATE_CONSUMER_OFFSET on masters and slaves alike (consumers
  commit to a slave while the master is unreachable), kept in
  ``<store>/config/consumerOffset.json`` (:class:`ConsumerOffsets`: written every
  ``flush_consumer_offset_interval`` and at shutdown).
- Consumer groups: HEART_BEAT / UNREGISTER_CLIENT / GET_CONSUMER_LIST_BY_GROUP on masters
  and slaves alike (:class:`ConsumerRegistry`, in memory; a member not heard from for
  ``consumer_expiry`` seconds, 120, or whose connection closed, leaves its group, and the
  group's other members are told with NOTIFY_CONSUMER_IDS_CHANGED).
- Pull answers suggest a broker id (:func:`suggest_broker_id`): a slave to a consumer far
  behind when ``slave_read_enable``.
- A slave copies its master's topics, offsets, delay offsets and subscription groups
  (:class:`SlaveSync`) 3 s after it knows its master and every ``slave_sync_interval`` (10 s),
  from the master's broker port the name server names (or ``master_broker_address``); the
  master takes the larger offsets the slave holds (commits made to the slave while the
  master was down).
- With ``namesrv_addr`` the broker registers every ``register_broker_interval``
  (:class:`NameServerRegistrar`) and unregisters on a clean shutdown; a slave without
  ``ha_master_address`` follows the master HA address the registration answer names.
- Requests of the name server answer REQUEST_CODE_NOT_SUPPORTED.

A full disk never stops the broker: while the store's file system is used past
``disk_max_used_space_ratio`` (75 %) puts answer SERVICE_NOT_AVAILABLE ("disk full: disk used
91 % > diskMaxUsedSpaceRatio 75 %"); a put that needs a new commit log or consume queue file
the disk cannot hold answers CREATE_MAPPED_FILE_FAILED naming the file and errno. Pulls,
HANET_STATUS and replication of the data held go on; the status shows ``disk_full``,
``disk_used_ratio`` and ``create_error``.

Bounds: frames over ``max_frame_length`` close the connection; a pull answers at most
``MAX_PULL_MESSAGES`` messages and about :data:`MAX_PULL_BYTES`; a connection with
``max_in_flight`` puts waiting for their answers, or whose answers are not read by the client
(the channel is not writable), is not read from until that drains (back-pressure, not
buffering).

The HANET_STATUS answer is :class:`hanet.protocol.BrokerStatus`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial

import attrs
import trio

from hanet.boot import AllowList, serve_on
from hanet.channel import ChannelHandler, HandlerContext, format_address, parse_address
from hanet.client import NameServerClient
from hanet.errors import ConfigError
from hanet.ha import (
    TERM_RETRY_INTERVAL,
    BrokerConfig,
    BrokerRole,
    HAMaster,
    HASlave,
    record_master_term_later,
    start_master_term,
)
from hanet.protocol import (
    MAX_FRAME_LENGTH,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    BrokerRegistration,
    BrokerStatus,
    ClusterLink,
    HanetRequestCode,
    MasterLink,
    PullMessageRequestHeader,
    RegisterBrokerResponse,
    RemotingCommand,
    RequestCode,
    SubscriptionGroupWrapper,
)
from hanet.store import (
    BROKER_INDEX_FLUSH_INTERVAL,
    CommitLogStore,
    EpochHistory,
    FlushDiskType,
    Holder,
    Message,
    PutResult,
    PutStatus,
    RetentionService,
    StoreConfig,
    StoreRole,
)

from ._acl import BrokerAcl, acl_file_path
from ._connection import DEFAULT_MAX_IN_FLIGHT
from ._consumers import CONSUMER_EXPIRY, ConsumerRegistry, consumer_groups
from ._epochs import fetch_epochs, last_epoch
from ._hold import PullHoldService
from ._metrics import BrokerMetrics, serve_metrics
from ._offsets import OFFSETS_FILE, ConsumerOffsets
from ._port import SERVER_CHANNEL_MAX_IDLE, BrokerPort, default_subscription_groups
from ._pull import suggest_broker_id
from ._registration import NameServerRegistrar
from ._repair import auto_repair
from ._retry import SendBackProcessor
from ._schedule import ScheduleService, delay_rewrite
from ._slave_sync import DELAY_OFFSETS_FILE, SlaveSync
from ._status import store_status
from ._topics import TOPICS_FILE, TopicTable
from ._vip import open_vip_listeners

__all__ = ["Broker", "BrokerAddresses"]

log = logging.getLogger("hanet.broker")

AUTO_CREATE_TOPIC = "TBW102"
"""The topic whose route a RocketMQ producer borrows for a topic no name server knows yet
(``TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC``)."""


@attrs.frozen
class BrokerAddresses:
    """Where a running broker listens (reported by :meth:`Broker.run`).

    Attributes:
        broker: the broker port (None when not served).
        ha: the HA port of a master (None on a slave).
        metrics: the Prometheus endpoint (None unless ``metrics_listen`` is set).
    """

    broker: tuple[str, int] | None
    ha: tuple[str, int] | None
    metrics: tuple[str, int] | None = None


class Broker:
    """A broker: store + replication role + broker port, run with :meth:`run`.

    Args:
        config: the settings; ``broker_role`` picks master or slave, ``listen_host`` /
            ``listen_port`` the broker port (port 0: any free one), ``ha_listen_*`` a
            master's HA port, ``ha_master_address`` a slave's master.
        serve_broker_port: False runs no broker port (a slave that only replicates).
        max_frame_length: largest broker port frame accepted (16 MiB as RocketMQ).
        max_in_flight: per connection, puts awaiting their answer before reads pause.
        slave_handlers: a slave's extra HA pipeline handlers, made per connection (see
            :class:`HASlave`): metrics, logging, ... of one's own.
        store_config: overrides the store settings derived from ``config``.
        consumer_expiry: seconds without a heartbeat after which a consumer leaves its group
            (RocketMQ's ``channelExpiredTimeout``, 120).
    """

    def __init__(
        self,
        config: BrokerConfig,
        *,
        serve_broker_port: bool = True,
        max_frame_length: int = MAX_FRAME_LENGTH,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        slave_handlers: Callable[[], Sequence[ChannelHandler]] | None = None,
        store_config: StoreConfig | None = None,
        consumer_expiry: float = CONSUMER_EXPIRY,
        repair_from: str | None = None,
    ) -> None:
        if (
            config.broker_role is BrokerRole.SLAVE
            and not config.ha_master_address
            and not config.namesrv_addr
        ):
            # Fail at construction, not inside the service.
            config.ha_master_host_port  # noqa: B018 - raises ConfigError
        self.config = config
        self.serve_broker_port = serve_broker_port
        self.max_frame_length = max_frame_length
        self.max_in_flight = max_in_flight
        self._slave_handlers = slave_handlers
        self._store_config = store_config
        self.repair_from = repair_from
        """Replicas' broker ports (``HOST:PORT,...``) a master repairs damaged ranges from
        while it serves (:func:`~._repair.auto_repair`), or None."""
        self._store: CommitLogStore | None = None
        self._offsets: ConsumerOffsets | None = None
        self._topics: TopicTable | None = None
        self.port = BrokerPort(self, max_frame_length=max_frame_length)
        """The broker port's dispatch table and pipeline (add processors and hooks to it
        before :meth:`run`)."""
        self.port.register(HanetRequestCode.HANET_METRICS, self._serve_metrics)
        self.port.admin.attach(config, self.reconfigure)
        self.acl = BrokerAcl(acl_file_path(config)) if config.acl_enable else None
        """RocketMQ's plain ACL on the broker port (None: off; ``aclEnable``)."""
        if self.acl is not None:
            self.port.set_guard(self.acl.guard)
        self.stored_listeners: list[Callable[[Sequence[Message], Sequence[PutResult]], None]] = []
        """Called after every put that stored messages (:meth:`put_now`), with the messages
        and their results: long polling wakes the pulls held on their queues."""
        self.consumers = ConsumerRegistry(consumer_expiry, clock=trio.current_time)
        """The live members of each consumer group (served on masters and slaves)."""
        self.master: HAMaster | None = None
        self.slave: HASlave | None = None
        self.schedule: ScheduleService | None = None
        """A master's delivery of delayed messages (None on a slave)."""
        self.sync: SlaveSync | None = None
        """A slave's copy of its master's topics and consumer offsets (None on a master)."""
        self.registrar: NameServerRegistrar | None = None
        self.retention: RetentionService | None = None
        """Deletes expired commit log and consume queue files (while :meth:`run` runs)."""
        self._announced: set[str] = set()  # the topics of the last registration
        """The registration with the name servers (None without ``namesrv_addr``)."""
        self.addresses = BrokerAddresses(None, None)
        self._started = 0.0
        self._sync_master = config.broker_role is BrokerRole.SYNC_MASTER
        self.metrics = BrokerMetrics(lambda: self.status() if self._store is not None else None)
        """Prometheus metrics (served on ``metrics_listen`` when it is set)."""
        self.metrics.add_consumer_lag(
            lambda: self.port.admin.consumer_lag() if self._store is not None else iter(())
        )
        self._sync_flush = config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._suggest = _suggester(config)

    @property
    def role(self) -> BrokerRole:
        """The broker's role."""
        return self.config.broker_role

    @property
    def store(self) -> CommitLogStore:
        """The open store (only while :meth:`run` runs).

        Raises:
            RuntimeError: the broker is not running.
        """
        if self._store is None:
            raise RuntimeError("the broker is not running")
        return self._store

    @property
    def offsets(self) -> ConsumerOffsets:
        """The consumer offsets (only while :meth:`run` runs).

        Raises:
            RuntimeError: the broker is not running.
        """
        if self._offsets is None:
            raise RuntimeError("the broker is not running")
        return self._offsets

    @property
    def topic_table(self) -> TopicTable:
        """The topics served (only while :meth:`run` runs).

        Raises:
            RuntimeError: the broker is not running.
        """
        if self._topics is None:
            raise RuntimeError("the broker is not running")
        return self._topics

    def _make_store_config(self, broker_address: tuple[str, int] | None) -> StoreConfig:
        if self._store_config is not None:
            return self._store_config
        address = broker_address or (self.config.listen_host, self.config.listen_port)
        return StoreConfig(
            mapped_file_size=self.config.mapped_file_size_commit_log,
            flush_disk_type=self.config.flush_disk_type,
            role=StoreRole.SLAVE if self.role is BrokerRole.SLAVE else StoreRole.MASTER,
            store_host=_advertised(address, self.config.broker_ip1),
            disk_max_used_space_ratio=self.config.disk_max_used_space_ratio,
            message_index_enable=self.config.message_index_enable,
            max_hash_slot_num=self.config.max_hash_slot_num,
            max_index_num=self.config.max_index_num,
            index_flush_interval=BROKER_INDEX_FLUSH_INTERVAL,
        )

    # -- the service ----------------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[BrokerAddresses] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Open the store and serve until cancelled; reports the bound addresses.

        Cancellation (Ctrl-C included) closes every connection, writes the consumer offsets,
        then closes the store: its data is flushed, the checkpoint written and ``abort``
        removed, so the next start recovers normally.

        Consumer offsets live in ``<store>/config/consumerOffset.json`` (see
        :class:`ConsumerOffsets`), written every ``flush_consumer_offset_interval`` seconds.

        Raises:
            StoreError: the store cannot be opened (locked by another process, wrong file
                size, ...).
            ConfigFileError: ``consumerOffset.json`` and its ``.bak`` are both unusable.
            OSError: a port cannot be bound.
        """
        config = self.config
        listeners: list[trio.SocketListener] = []
        broker_address: tuple[str, int] | None = None
        if self.serve_broker_port:
            listeners = await trio.open_tcp_listeners(config.listen_port, host=config.listen_host)
            name = listeners[0].socket.getsockname()
            broker_address = (name[0], name[1])
            if config.vip_channel and config.listen_port:
                listeners += await open_vip_listeners(
                    config.listen_host, config.listen_port, avoid=config.ha_listen_port
                )
        try:
            store = CommitLogStore.open(
                config.store_path_root_dir, self._make_store_config(broker_address)
            )
        except BaseException:
            for listener in listeners:
                await listener.aclose()
            raise
        self._store = store
        self._started = trio.current_time()
        try:
            self._offsets = ConsumerOffsets.load(config.store_path_root_dir / OFFSETS_FILE)
            topics = TopicTable.load(
                config.store_path_root_dir / TOPICS_FILE,
                default_queues=config.default_topic_queue_nums,
            )
            topics.add_store_queues(store.queues())
            topics.auto_create = config.auto_create_topic_enable
            if self.role is not BrokerRole.SLAVE and config.auto_create_topic_enable:
                # sends create topics (autoCreateTopicEnable): RocketMQ's clients look a new
                # topic's route up under TBW102's, which the broker registers for that
                topics.ensure(
                    AUTO_CREATE_TOPIC,
                    config.default_topic_queue_nums,
                    perm=PERM_INHERIT | PERM_READ | PERM_WRITE,
                )
            topics.on_change = self._wake_registrar
            self._topics = topics
            async with trio.open_nursery() as nursery:
                await nursery.start(store.run)
                await nursery.start(self._offsets.run, config.flush_consumer_offset_interval)
                if self.acl is not None:
                    nursery.start_soon(self.acl.watch)
                nursery.start_soon(self._housekeeping, config.flush_consumer_offset_interval)
                ha_address: tuple[str, int] | None = None
                if self.role is BrokerRole.SLAVE:
                    self.sync = SlaveSync(
                        self._offsets,
                        topics,
                        config.store_path_root_dir,
                        master_address=config.master_broker_address,
                        interval=config.slave_sync_interval,
                        tls=config.client_tls(),
                    )
                    await nursery.start(self.sync.run)
                    self.slave = HASlave(
                        store,
                        config,
                        extra_handlers=self._slave_handlers,
                        epoch_source=self._master_epochs,
                    )
                    await nursery.start(self.slave.run)
                else:
                    try:
                        start_master_term(store)  # each master term starts an epoch
                    except OSError as exc:  # a full disk: serve what is held all the same
                        log.error(
                            "%s: this master term's epoch could not be recorded (%s): its "
                            "slaves compare epochs as if the previous term went on until it "
                            "is (tried again every %.0f s)",
                            store.root,
                            exc,
                            TERM_RETRY_INTERVAL,
                        )
                        nursery.start_soon(record_master_term_later, store)
                    self.master = HAMaster(store, config)
                    ha_address = await nursery.start(self.master.serve)
                    if self.repair_from:
                        interval = config.ha_housekeeping_interval
                        nursery.start_soon(auto_repair, store, self.repair_from, interval)
                    self.schedule = ScheduleService(
                        store, self._put_internal, config.store_path_root_dir / DELAY_OFFSETS_FILE
                    )
                    await nursery.start(self.schedule.run)
                    self.port.rewrite = delay_rewrite
                    self.port.register(
                        RequestCode.GET_ALL_DELAY_OFFSET, self.schedule.get_all_delay_offset
                    )
                self.retention = RetentionService(
                    store, config.retention, holders=self._retention_holders
                )
                await nursery.start(self.retention.run)
                holds = PullHoldService(self._repull, store.max_queue_offset)
                await nursery.start(holds.run)
                self.port.hold = holds.hold
                self.port.admin.wake_pulls = lambda t, q: holds.notify_message_arriving(
                    t, q, 1 << 62
                )
                self.stored_listeners.append(holds.notify_put)
                self.port.register(
                    RequestCode.CONSUMER_SEND_MSG_BACK,
                    SendBackProcessor(
                        store,
                        self._put_internal,
                        on_topic=topics.ensure,
                        writable=lambda: self.role is not BrokerRole.SLAVE,
                        broker_ip=config.broker_ip1 or config.listen_host,
                    ),
                )
                if listeners:
                    await nursery.start(
                        partial(
                            serve_on,
                            self.port.initialize,
                            listeners,
                            tls=config.server_tls(),
                            allow=AllowList.parse(config.listen_allow)
                            if config.listen_allow
                            else None,
                            name="broker port",
                            idle_timeout=SERVER_CHANNEL_MAX_IDLE,
                            max_partial_bytes=config.max_partial_bytes,
                        )
                    )
                metrics_address: tuple[str, int] | None = None
                if config.metrics_listen:
                    host, port = parse_address(config.metrics_listen)
                    metrics_address = await nursery.start(serve_metrics, self.metrics, host, port)
                if broker_address is not None:
                    log.info(
                        "%s: broker port on %s", self.role.value, format_address(broker_address)
                    )
                self.addresses = BrokerAddresses(broker_address, ha_address, metrics_address)
                if config.namesrv_addr:
                    self.registrar = NameServerRegistrar(
                        NameServerClient(config.namesrv_addresses, tls=config.client_tls()),
                        self.registration,
                        interval=config.register_broker_interval,
                        on_answer=self._registered,
                    )
                    nursery.start_soon(self.registrar.run)
                task_status.started(self.addresses)
        finally:
            self._persist_topics_logged()
            self._offsets = None  # persisted when its flusher stopped
            self._topics = None
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await listener.aclose()  # closed already unless the offsets did not load
                await store.aclose()
            self._store = None
            log.info("store %s closed", config.store_path_root_dir)

    async def _master_epochs(self, mine: EpochHistory) -> EpochHistory | str:
        """A slave's question to its master's broker port (see :mod:`._epochs`)."""
        address = self.sync.master_address if self.sync is not None else None
        return await fetch_epochs(address, mine, tls=self.config.client_tls())

    def _retention_holders(self) -> list[Holder]:
        """A master's connected slaves and the offsets they acknowledged: retention keeps
        the commit log files they have not received (RocketMQ does not)."""
        master = self.master
        if master is None:
            return []
        return [
            Holder(f"slave {s.address}", s.ack_offset)
            for s in master.status().slaves
            if s.request_offset >= 0 and s.ack_offset >= 0
        ]

    async def _housekeeping(self, interval: float) -> None:
        """Every ``interval`` seconds: drop expired consumers (telling their groups) and
        write the topic table when it changed."""
        while True:
            await trio.sleep(min(interval, 10.0))
            self.port.housekeeping()
            topics = self._topics
            if topics is not None and topics.dirty:
                try:
                    await trio.to_thread.run_sync(topics.persist)
                except OSError as exc:
                    log.warning("cannot write the topic config to %s: %s", topics.path, exc)

    def _persist_topics_logged(self) -> None:
        topics = self._topics
        if topics is None:
            return
        try:
            topics.persist()
        except OSError as exc:
            log.warning("cannot write the topic config to %s: %s", topics.path, exc)

    # -- the broker port's backend (see BrokerBackend) -------------------------------------------

    @property
    def is_slave(self) -> bool:
        """A slave takes no sends."""
        return self.role is BrokerRole.SLAVE

    @property
    def cluster_name(self) -> str:
        """The cluster stored with each message (``CLUSTER``)."""
        return self.config.broker_cluster_name

    def send_refusal(self) -> str | None:
        """A slave refuses sends (SERVICE_NOT_AVAILABLE, as RocketMQ's slave store)."""
        if self.config.broker_role is BrokerRole.SLAVE:  # (self.role, without its call)
            return (
                f"the broker[{self.config.broker_name}, id {self.config.effective_broker_id}] "
                "is a slave: sending message is forbidden, send to its master"
            )
        if self._store is None:
            return "the broker is not running"
        return None

    def _wake_registrar(self) -> None:
        """A topic was created (a consumer's retry topic, a DLQ): register it at once."""
        if self.registrar is not None:
            self.registrar.wake()

    def put_now(self, messages: Sequence[Message]) -> list[PutResult]:
        """Write ``messages`` to the store now, in order (one batch); a new topic wakes the
        name server registration so that routes find it at once (as RocketMQ)."""
        store = self._store  # (self.store, without the property's call)
        if store is None:
            raise RuntimeError("the broker is not running")
        results = store.put_batch(messages)
        for listener in self.stored_listeners:
            listener(messages, results)
        registrar = self.registrar
        if registrar is not None:
            announced = self._announced
            for message in messages:  # (a loop: no generator made for every put)
                if message.topic not in announced:
                    registrar.wake()
                    break
        return results

    def put_later(
        self, messages: Sequence[Message], done: Callable[[list[PutResult]], None]
    ) -> None:
        """:meth:`put_now`, ``done`` called with its results at once (the port never needs
        it: a classic broker stores synchronously)."""
        done(self.put_now(messages))

    async def put(self, messages: Sequence[Message]) -> list[PutResult]:
        """Store ``messages`` and wait as the role says (:meth:`settle`); each stored
        message's status is the wait's outcome."""
        stored_at = trio.current_time()
        results = self.put_now(messages)
        ends = [r.end_offset for r in results if r.status is PutStatus.PUT_OK]
        if ends and self.must_wait():
            status = await self.settle(max(ends), stored_at)
        else:
            await trio.lowlevel.checkpoint()
            status = PutStatus.PUT_OK
        return [r._replace(status=status) if r.status is PutStatus.PUT_OK else r for r in results]

    def _put_internal(self, message: Message) -> PutResult:
        """The put path of the broker's own messages (retries, delayed deliveries): stored
        now, not waited for (RocketMQ's ``waitStoreMsgOK=false``)."""
        (result,) = self.put_now([message])
        return result

    def _repull(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand | None:
        """A held pull run again, not allowed to suspend (long polling)."""
        header = PullMessageRequestHeader.from_fields(request.fields)
        return self.port.serve_pull(ctx, request, header, allow_suspend=False)

    def _serve_metrics(self, ctx: HandlerContext, request: RemotingCommand) -> RemotingCommand:
        """HANET_METRICS (30002): the Prometheus text exposition."""
        return request.response(body=self.metrics.exposition())

    def must_wait(self) -> bool:
        """Whether a stored send waits (SYNC_MASTER, SYNC_FLUSH)."""
        return self._sync_master or self._sync_flush  # (not answers_at_once, one call less)

    def suggest(self, behind: int) -> int:
        """The member a consumer ``behind`` bytes behind should pull from next."""
        return self._suggest(behind)

    def in_memory_limit(self) -> int:
        """Commit log bytes behind the end that count as in memory."""
        config = self.config
        return config.memory_bytes * config.access_message_in_memory_max_ratio // 100

    def delay_offsets(self) -> bytes:
        """``delayOffset.json`` (an empty table until the delay service keeps one)."""
        path = self.config.store_path_root_dir / DELAY_OFFSETS_FILE
        try:
            return path.read_bytes()
        except OSError:
            return b'{"offsetTable":{}}'

    def subscription_groups(self) -> SubscriptionGroupWrapper:
        """Every consumer group known, with RocketMQ's default settings (a slave: its
        master's)."""
        known = self.sync.subscription_groups.groups if self.sync is not None else None
        return self.port.admin.subscription_groups(
            default_subscription_groups(self.consumers, known)
        )

    def reconfigure(self, config: BrokerConfig) -> None:
        """Take the settings that may change live (UPDATE_BROKER_CONFIG: see
        :data:`hanet.broker.LIVE_SETTINGS`)."""
        self.config = config
        self._suggest = _suggester(config)
        if self._topics is not None:
            self._topics.default_queues = config.default_topic_queue_nums
        if self.registrar is not None:
            self.registrar.interval = config.register_broker_interval

    def observe_put(self, statuses: Sequence[PutStatus], seconds: float) -> None:
        """A send was answered: count its statuses and its latency."""
        if len(statuses) == 1:  # a send of one message: no comprehension, no property
            self.metrics.observe_put([statuses[0]._value_], seconds)
        else:
            self.metrics.observe_put([status.value for status in statuses], seconds)

    def observe_puts_ok(self, requests: int, seconds: float) -> None:
        """``requests`` sends of one message, each stored PUT_OK and answered after
        ``seconds``: as many :meth:`observe_put` calls (the sends of one read)."""
        self.metrics.observe_puts_ok(requests, seconds)

    def connection_event(self, event: str) -> None:
        """A broker port connection ``opened`` or closed (``event``: why, shortly)."""
        self.metrics.connection_event("broker", event)

    @property
    def answers_at_once(self) -> bool:
        """Whether a stored put is answered without waiting (ASYNC_MASTER, ASYNC_FLUSH)."""
        return not (self._sync_master or self._sync_flush)

    async def settle(self, end_offset: int, stored_at: float | None = None) -> PutStatus:
        """Wait until data before ``end_offset`` counts as put: fsynced under SYNC_FLUSH,
        acknowledged by enough slaves under SYNC_MASTER.

        Timeouts run from ``stored_at`` (trio time; default now): FLUSH_DISK_TIMEOUT after the
        store's ``sync_flush_timeout``, FLUSH_SLAVE_TIMEOUT after ``slave_timeout``;
        SLAVE_NOT_AVAILABLE at once without enough healthy slaves. A replication status other
        than PUT_OK wins over FLUSH_DISK_TIMEOUT, as in RocketMQ. The data stays stored
        whatever the answer; cancellation abandons only the wait.
        """
        if stored_at is None:
            stored_at = trio.current_time()
        status = PutStatus.PUT_OK
        store = self.store
        if self._sync_flush and store.flushed_offset < end_offset:
            with trio.move_on_at(stored_at + store.config.sync_flush_timeout):
                await store.wait_flushed(end_offset)
            if store.flushed_offset < end_offset:
                status = PutStatus.FLUSH_DISK_TIMEOUT
        master = self.master
        if self._sync_master and master is not None and self._replicated() < end_offset:
            replicated = PutStatus.FLUSH_SLAVE_TIMEOUT
            with trio.move_on_at(stored_at + self.config.slave_timeout):
                replicated = await master.wait_for_replicas(end_offset)
            if replicated is not PutStatus.PUT_OK:
                status = replicated
        await trio.lowlevel.checkpoint()
        return status

    def _replicated(self) -> int:
        master = self.master
        return -1 if master is None else master.status().replicated_offset

    def settled_offset(self) -> int:
        """Data before this offset needs no wait to count as put (see :meth:`settle`)."""
        store = self.store
        offset = store.max_offset
        if self._sync_flush:
            offset = min(offset, store.flushed_offset)
        if self._sync_master:
            offset = min(offset, self._replicated())
        return offset

    def topics(self) -> dict[str, int]:
        """The topics served, each with its number of queues (a slave's: those copied from
        its master and those of its store)."""
        table = self.topic_table
        table.add_store_queues(self.store.queues())
        return table.queue_counts()

    def registration(self) -> BrokerRegistration:
        """What this broker registers with the name servers: cluster, names, id, role, its
        broker port and (a master) HA port, its :meth:`topics`."""
        config = self.config
        addresses = self.addresses
        topics = self.topics() if self._store is not None else {}
        self._announced = set(topics)
        return BrokerRegistration(
            cluster=config.broker_cluster_name,
            broker_name=config.broker_name,
            broker_id=config.effective_broker_id,
            role=self.role.value,
            broker_address=_advertised(addresses.broker, config.broker_ip1),
            ha_address=_advertised(addresses.ha, config.broker_ip2 or config.broker_ip1),
            topics=tuple(sorted(topics.items())),
            data_version=self._topics.data_version if self._topics is not None else None,
            topic_configs=self.port.admin.set_topics(),
        )

    def _registered(self, answer: RegisterBrokerResponse) -> None:
        """A slave follows the master the name server names, unless configured with one."""
        config = self.config
        try:
            if self.slave is not None and answer.master_ha_address and not config.ha_master_address:
                self.slave.set_master_address(answer.master_ha_address)
            if self.sync is not None and answer.master_address and not config.master_broker_address:
                self.sync.set_master_address(format_address(parse_address(answer.master_address)))
        except ConfigError as exc:  # a name server's answer is input like any other
            log.warning("ignoring the name server's master addresses: %s", exc)

    def cluster_link(self) -> ClusterLink | None:
        """The status document's ``cluster`` section: the registration with the name servers
        (None without ``namesrv_addr``, or before :meth:`run` started registering)."""
        registrar = self.registrar
        if registrar is None:
            return None
        config = self.config
        last = registrar.last_registered
        answer = registrar.last_answer
        return ClusterLink(
            name=config.broker_cluster_name,
            broker_name=config.broker_name,
            broker_id=config.effective_broker_id,
            name_servers=tuple(format_address(a) for a in config.namesrv_addresses),
            registrations=registrar.registrations,
            failures=registrar.failures,
            last_registered_ago=None if last is None else round(trio.current_time() - last, 3),
            last_error=registrar.last_error,
            master_address=answer.master_address if answer is not None else None,
            master_ha_address=answer.master_ha_address if answer is not None else None,
        )

    def status(self) -> BrokerStatus:
        """The HANET_STATUS answer: role, offsets, replication state, the disk (``disk_full``,
        ``disk_used_ratio``, ``create_error``) and the cluster (``cluster``,
        ``metadata_sync``, ``consumer_offsets``)."""
        stats = self.store.statistics()
        addresses = self.addresses
        offsets = self._offsets
        status = store_status(
            stats,
            role=self.role.value,
            broker_address=format_address(addresses.broker) if addresses.broker else None,
            ha_address=format_address(addresses.ha) if addresses.ha else None,
            puts=stats.puts,
            uptime=round(trio.current_time() - self._started, 3),
            cluster=self.cluster_link(),
            metadata_sync=self.sync.status() if self.sync is not None else None,
            consumer_offsets=offsets.status() if offsets is not None else None,
            consumer_groups=consumer_groups(self.consumers),
            epoch=last_epoch(self.store),
        )
        if self.master is not None:
            master = self.master.status()
            status = attrs.evolve(
                status,
                replicated_offset=master.replicated_offset,
                slaves=master.slaves,
                closed_slaves=master.closed,
                diverged_slaves=self.port.epochs.diverged_slaves(),
            )
        if self.slave is not None:
            link = self.slave.status()
            status = attrs.evolve(
                status,
                master=MasterLink(
                    address=link.master_address,
                    connected=link.connected,
                    connects=link.connects,
                    attempts=link.attempts,
                    last_close_reason=link.last_close_reason,
                    diverged=link.diverged,
                    refused_offset=link.refused_offset,
                    error=link.error,
                    epoch_diverged_at=link.epoch_diverged_at,
                    epoch_check=link.epoch_check,
                ),
            )
        return status


def _suggester(config: BrokerConfig) -> Callable[[int], int]:
    """``suggestWhichBrokerId`` by the bytes a pull left behind, under ``config``'s settings."""
    return partial(
        suggest_broker_id,
        memory=config.memory_bytes * config.access_message_in_memory_max_ratio // 100,
        slave_read_enable=config.slave_read_enable,
        which_broker=config.which_broker_when_consume_slowly,
    )


def _advertised(address: tuple[str, int] | None, host: str | None = None) -> str:
    """``host:port`` others reach a bound address at ("" for none): ``host`` when given
    (``brokerIP1`` / ``brokerIP2``), else the bound host, a wildcard one becoming 127.0.0.1 (as
    in the records' store host)."""
    if address is None:
        return ""
    bound, port = address
    if host is None:
        host = "127.0.0.1" if bound in ("", "0.0.0.0", "::") else bound
    return format_address((host, port))
