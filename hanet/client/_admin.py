"""The admin client: what RocketMQ 4.9.8's ``mqadmin`` (``DefaultMQAdminExt``) sends to the
name servers and to broker ports, one short connection per request, as ``mqadmin`` does.

:class:`AdminClient` has one method per admin request (``runtime_info``, ``topic_stats``,
``consume_stats``, ...: a broker address ``host:port`` first) and the few compositions the
``mqadmin`` commands make of them: a cluster's masters (:meth:`AdminClient.masters`), a group's
progress over every broker of its topics (:meth:`AdminClient.consumer_progress`), a reset of
a group's offsets by time that reaches its live consumers through each broker, or commits the
offsets itself when the group has none online (:meth:`AdminClient.reset_offset_by_time`, as
``mqadmin resetOffsetByTime`` falls back to ``resetOffsetByTimestampOld``).

Every method raises :class:`~hanet.client.RemotingError`\\ s: ``RemotingConnectionError``
(no connection), ``RemotingTimeoutError``, ``RemotingProtocolError`` (a malformed answer),
``RemotingResponseError`` (an answer other than SUCCESS, with the server's remark).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

import attrs

from hanet.protocol import (
    MASTER_ID,
    ClusterInfo,
    ConsumerConnection,
    ConsumeStats,
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    GetTopicStatsInfoRequestHeader,
    KVTable,
    MessageQueue,
    OffsetWrapper,
    ProducerConnection,
    RemotingCommand,
    RequestCode,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    ResponseCode,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    SubscriptionGroupConfig,
    TopicList,
    TopicRouteData,
    TopicStatsTable,
    UpdateConsumerOffsetRequestHeader,
    WritePermOfBrokerRequestHeader,
    WritePermOfBrokerResponseHeader,
    body_json,
    properties_to_text,
    text_to_properties,
)

from ._failover import parse_broker_address
from ._namesrv import NameServerClient, _decoded
from ._remoting import (
    RemotingConnection,
    RemotingConnectionError,
    RemotingResponseError,
)

__all__ = ["AdminClient", "ResetResult", "retry_topic_of"]

log = logging.getLogger("hanet.client")


def retry_topic_of(group: str) -> str:
    """A consumer group's retry topic (``%RETRY%group``): where ``mqadmin`` looks a group's
    brokers up."""
    return f"%RETRY%{group}"


def _count(
    read: Callable[[Mapping[str, str]], WritePermOfBrokerResponseHeader], answer: RemotingCommand
) -> int:
    return _decoded("write permission", lambda: read(answer.fields)).wipe_topic_count


@attrs.frozen
class ResetResult:
    """What :meth:`AdminClient.reset_offset_by_time` did on one broker.

    Attributes:
        broker_address: the master asked.
        offsets: the offset each queue was reset to.
        online: True when the broker told the group's live consumers; False when none was
            online and the offsets were committed directly (``mqadmin``'s old way).
    """

    broker_address: str
    offsets: Mapping[MessageQueue, int]
    online: bool


@attrs.define
class AdminClient:
    """The admin requests of ``mqadmin``, to the name servers and to broker ports.

    Attributes:
        names: the name servers (None: only the broker methods may be called).
        tls: the context to connect to brokers with (None: plain TCP).
        timeout: seconds for connecting and for each answer.
    """

    names: NameServerClient | None = None
    tls: ssl.SSLContext | None = None
    timeout: float = 5.0

    @property
    def name_servers(self) -> NameServerClient:
        """The name server client.

        Raises:
            ValueError: the client was made without name servers.
        """
        if self.names is None:
            raise ValueError("no name server address (-n)")
        return self.names

    @asynccontextmanager
    async def broker(self, address: str) -> AsyncIterator[RemotingConnection]:
        """A connection to the broker port at ``address`` (``host:port``).

        Raises:
            RemotingConnectionError: ``address`` is not ``host:port`` or does not answer.
        """
        parsed = parse_broker_address(address)
        if parsed is None:
            raise RemotingConnectionError(f"{address!r} is not a broker address (HOST:PORT)")
        async with RemotingConnection.connect(
            parsed[0],
            parsed[1],
            connect_timeout=self.timeout,
            request_timeout=self.timeout,
            tls=self.tls,
        ) as connection:
            yield connection

    async def _call(self, address: str, request: RemotingCommand, what: str) -> RemotingCommand:
        async with self.broker(address) as connection:
            return await connection.invoke_checked(request, what=f"{what} on {address}")

    # -- the name servers ---------------------------------------------------------------------

    async def cluster(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO."""
        return await self.name_servers.cluster()

    async def topic_list(self) -> TopicList:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER."""
        return await self.name_servers.topics()

    async def route(self, topic: str) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC (TOPIC_NOT_EXIST raises RemotingResponseError)."""
        return await self.name_servers._first(lambda c: c.route_data(topic))

    async def masters(self, cluster: str) -> list[str]:
        """The master address of each broker name of ``cluster``.

        Raises:
            ValueError: no such cluster.
        """
        info = await self.cluster()
        names = info.cluster_addr_table.get(cluster)
        if names is None:
            known = ", ".join(sorted(info.cluster_addr_table)) or "none"
            raise ValueError(f"cluster {cluster!r} is not registered (clusters: {known})")
        out = []
        for name in names:
            data = info.broker_addr_table.get(name)
            if data is not None and MASTER_ID in data.broker_addrs:
                out.append(data.broker_addrs[MASTER_ID])
        return out

    async def _each_name_server(
        self, request: RemotingCommand, what: str
    ) -> dict[str, RemotingCommand]:
        out = {}
        names = self.name_servers
        for address in names.addresses:
            async with names.connection(address) as connection:
                answer = await connection.invoke_checked(request, what=what)
            out[f"{address[0]}:{address[1]}"] = answer
        return out

    async def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> None:
        """DELETE_TOPIC_IN_NAMESRV to every name server."""
        fields = DeleteTopicFromNamesrvRequestHeader(topic, cluster).to_fields()
        request = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, fields)
        await self._each_name_server(request, "DELETE_TOPIC_IN_NAMESRV")

    async def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        """WIPE_WRITE_PERM_OF_BROKER to every name server: each one's count of topics."""
        read = WritePermOfBrokerResponseHeader.from_fields
        return await self._write_perm(RequestCode.WIPE_WRITE_PERM_OF_BROKER, broker_name, read)

    async def add_write_perm(self, broker_name: str) -> dict[str, int]:
        """ADD_WRITE_PERM_OF_BROKER to every name server: each one's count of topics."""
        read = WritePermOfBrokerResponseHeader.for_add
        return await self._write_perm(RequestCode.ADD_WRITE_PERM_OF_BROKER, broker_name, read)

    async def _write_perm(
        self,
        code: RequestCode,
        broker_name: str,
        read: Callable[[Mapping[str, str]], WritePermOfBrokerResponseHeader],
    ) -> dict[str, int]:
        fields = WritePermOfBrokerRequestHeader(broker_name).to_fields()
        request = RemotingCommand.request(code, fields)
        answers = await self._each_name_server(request, code.name)
        return {address: _count(read, answer) for address, answer in answers.items()}

    # -- one broker ---------------------------------------------------------------------------

    async def runtime_info(self, address: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO: the broker's runtime table."""
        request = RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO)
        answer = await self._call(address, request, "GET_BROKER_RUNTIME_INFO")
        return dict(_decoded("runtime info", lambda: KVTable.decode(answer.body)).table)

    async def topic_stats(self, address: str, topic: str) -> TopicStatsTable:
        """GET_TOPIC_STATS_INFO: each queue's offsets on the broker."""
        fields = GetTopicStatsInfoRequestHeader(topic).to_fields()
        request = RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, fields)
        answer = await self._call(address, request, f"GET_TOPIC_STATS_INFO of {topic}")
        return _decoded("topic stats", lambda: TopicStatsTable.decode(answer.body))

    async def consume_stats(
        self, address: str, group: str, topic: str | None = None
    ) -> ConsumeStats:
        """GET_CONSUME_STATS: the group's progress per queue on the broker."""
        fields = GetConsumeStatsRequestHeader(group, topic).to_fields()
        request = RemotingCommand.request(RequestCode.GET_CONSUME_STATS, fields)
        answer = await self._call(address, request, f"GET_CONSUME_STATS of {group}")
        return _decoded("consume stats", lambda: ConsumeStats.decode(answer.body))

    async def consumer_connections(self, address: str, group: str) -> ConsumerConnection:
        """GET_CONSUMER_CONNECTION_LIST (CONSUMER_NOT_ONLINE raises RemotingResponseError)."""
        fields = GetConsumerConnectionListRequestHeader(group).to_fields()
        request = RemotingCommand.request(RequestCode.GET_CONSUMER_CONNECTION_LIST, fields)
        answer = await self._call(address, request, f"GET_CONSUMER_CONNECTION_LIST of {group}")
        return _decoded("consumer connections", lambda: ConsumerConnection.decode(answer.body))

    async def producer_connections(self, address: str, group: str) -> ProducerConnection:
        """GET_PRODUCER_CONNECTION_LIST."""
        fields = GetProducerConnectionListRequestHeader(group).to_fields()
        request = RemotingCommand.request(RequestCode.GET_PRODUCER_CONNECTION_LIST, fields)
        answer = await self._call(address, request, f"GET_PRODUCER_CONNECTION_LIST of {group}")
        return _decoded("producer connections", lambda: ProducerConnection.decode(answer.body))

    async def create_topic(self, address: str, header: CreateTopicRequestHeader) -> None:
        """UPDATE_AND_CREATE_TOPIC."""
        request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_fields())
        await self._call(address, request, f"UPDATE_AND_CREATE_TOPIC of {header.topic}")

    async def delete_topic_in_broker(self, address: str, topic: str) -> None:
        """DELETE_TOPIC_IN_BROKER."""
        fields = DeleteTopicRequestHeader(topic).to_fields()
        request = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, fields)
        await self._call(address, request, f"DELETE_TOPIC_IN_BROKER of {topic}")

    async def update_subscription_group(
        self, address: str, config: SubscriptionGroupConfig
    ) -> None:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP."""
        request = RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body_json(config.to_json())
        )
        await self._call(
            address, request, f"UPDATE_AND_CREATE_SUBSCRIPTIONGROUP of {config.group_name}"
        )

    async def delete_subscription_group(
        self, address: str, group: str, *, remove_offset: bool = False
    ) -> None:
        """DELETE_SUBSCRIPTIONGROUP."""
        fields = DeleteSubscriptionGroupRequestHeader(group, remove_offset).to_fields()
        request = RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP, fields)
        await self._call(address, request, f"DELETE_SUBSCRIPTIONGROUP of {group}")

    async def broker_config(self, address: str) -> dict[str, str]:
        """GET_BROKER_CONFIG: the broker's settings."""
        request = RemotingCommand.request(RequestCode.GET_BROKER_CONFIG)
        answer = await self._call(address, request, "GET_BROKER_CONFIG")
        return _decoded("broker config", lambda: text_to_properties(answer.body))

    async def update_broker_config(self, address: str, settings: Mapping[str, str]) -> None:
        """UPDATE_BROKER_CONFIG (a setting the broker cannot change live is refused)."""
        body = properties_to_text(sorted(settings.items()))
        request = RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG, body=body)
        await self._call(address, request, "UPDATE_BROKER_CONFIG")

    async def invoke_reset_offset(
        self, address: str, topic: str, group: str, timestamp: int, *, force: bool = True
    ) -> ResetOffsetBody | None:
        """INVOKE_BROKER_TO_RESET_OFFSET: the offsets the broker told the group's live
        consumers, or None when none is online (CONSUMER_NOT_ONLINE)."""
        fields = ResetOffsetRequestHeader(topic, group, timestamp, force).to_fields()
        request = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
        async with self.broker(address) as connection:
            answer = await connection.invoke(request)
        if answer.code == ResponseCode.CONSUMER_NOT_ONLINE:
            return None
        if answer.code != ResponseCode.SUCCESS:
            raise RemotingResponseError(answer, f"INVOKE_BROKER_TO_RESET_OFFSET on {address}")
        return _decoded("reset offset", lambda: ResetOffsetBody.decode(answer.body))

    async def search_offset(self, address: str, topic: str, queue_id: int, timestamp: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP."""
        fields = SearchOffsetRequestHeader(topic, queue_id, timestamp).to_fields()
        request = RemotingCommand.request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, fields)
        answer = await self._call(address, request, "SEARCH_OFFSET_BY_TIMESTAMP")
        header = _decoded(
            "search offset", lambda: SearchOffsetResponseHeader.from_fields(answer.fields)
        )
        return header.offset

    async def commit_offset(
        self, address: str, group: str, queue: MessageQueue, offset: int
    ) -> None:
        """UPDATE_CONSUMER_OFFSET (answered, not oneway)."""
        fields = UpdateConsumerOffsetRequestHeader(
            group, queue.topic, queue.queue_id, offset, queue.broker_name
        ).to_fields()
        request = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, fields)
        await self._call(address, request, "UPDATE_CONSUMER_OFFSET")

    # -- compositions (mqadmin's commands) ----------------------------------------------------

    async def route_masters(self, topic: str) -> list[tuple[str, str]]:
        """``(broker name, master address)`` of each broker name the topic is routed to."""
        route = await self.route(topic)
        return [
            (data.broker_name, data.broker_addrs[MASTER_ID])
            for data in sorted(route.broker_datas, key=lambda d: d.broker_name)
            if MASTER_ID in data.broker_addrs
        ]

    async def consumer_progress(
        self, group: str, topic: str | None = None
    ) -> dict[MessageQueue, OffsetWrapper]:
        """``group``'s progress per queue over every master of its retry topic's route (as
        ``mqadmin consumerProgress``; a group never online has none: then ``topic``'s)."""
        table: dict[MessageQueue, OffsetWrapper] = {}
        try:
            masters = await self.route_masters(retry_topic_of(group))
        except RemotingResponseError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST or topic is None:
                raise
            masters = await self.route_masters(topic)  # a group never online: the topic's
        for _, address in masters:
            stats = await self.consume_stats(address, group, topic)
            table.update(stats.offset_table)
        return dict(sorted(table.items()))

    async def reset_offset_by_time(
        self, topic: str, group: str, timestamp: int, *, force: bool = True
    ) -> list[ResetResult]:
        """Reset ``group``'s offsets of ``topic`` on every master of the topic's route to the
        first message stored at or after ``timestamp`` (ms; -1: the end). A broker whose group
        has no live consumer gets the offsets committed directly (``mqadmin``'s old way:
        GET_CONSUME_STATS, SEARCH_OFFSET_BY_TIMESTAMP and UPDATE_CONSUMER_OFFSET per queue;
        without ``force`` only offsets that move back)."""
        results = []
        for _, address in await self.route_masters(topic):
            body = await self.invoke_reset_offset(address, topic, group, timestamp, force=force)
            if body is not None:
                results.append(ResetResult(address, dict(body.offset_table), True))
                continue
            stats = await self.consume_stats(address, group, topic)
            offsets: dict[MessageQueue, int] = {}
            for queue, wrapper in sorted(stats.offset_table.items()):
                if timestamp == -1:
                    target = wrapper.broker_offset
                else:
                    target = await self.search_offset(address, topic, queue.queue_id, timestamp)
                if force or target <= wrapper.consumer_offset:
                    await self.commit_offset(address, group, queue, target)
                    offsets[queue] = target
                else:
                    offsets[queue] = wrapper.consumer_offset
            results.append(ResetResult(address, offsets, False))
        return results
