"""Python clients of a broker port and of the name servers, over RocketMQ 4.9.8's remoting
protocol: they work against hanet's broker and name server and against RocketMQ's own.

Usage::

    from hanet.client import BrokerClient

    async with BrokerClient.connect("127.0.0.1", 10911) as client:
        reply = await client.put("TopicTest", b"hello", tags="TagA")
        print(reply.status, reply.msg_id)
        batch = await client.put_batch([PutMessage("TopicTest", b"x%d" % i) for i in range(100)])
        pulled = await client.pull("TopicTest", queue_id=reply.queue_id, offset=0)
        status = await client.status()  # hanet's HANET_STATUS (30001)
        await client.commit_offset("my-group", "TopicTest", reply.queue_id, pulled.next_offset)

Any number of tasks may call the same client at once: each request gets its own ``opaque``
and answer, and requests written together leave in one send (the channel coalesces them). At
most ``max_in_flight`` requests wait for answers; more callers wait for a slot.

What goes on the wire is what RocketMQ's ``MQClientAPIImpl`` sends: SEND_MESSAGE_V2 with the
one-letter header keys and the ``KEYS``/``UNIQ_KEY``/``WAIT``/``TAGS`` properties (a batch of
one queue: SEND_BATCH_MESSAGE), PULL_MESSAGE with subscription ``*``, QUERY/UPDATE_CONSUMER_OFFSET,
HEART_BEAT with a ``HeartbeatData`` body, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP.

- :class:`FailoverClient` takes several broker addresses (a DLedger group): it connects to the
  first that answers, follows a follower's SERVICE_NOT_AVAILABLE to the leader (named in the
  answer, else by the node's status), and tries the next address when one is down.
- :class:`Consumer` consumes a topic for a group: it follows the topic's route, takes its
  share of the queues among the group's members (:func:`allocate_averagely`, rebalanced at
  once on the broker's NOTIFY_CONSUMER_IDS_CHANGED), pulls them (from a slave when the master
  suggests it or cannot be reached), and commits offsets (to the master, else a slave): at
  least once across a master's loss and a rebalance. Its settings are a
  :class:`ConsumerConfig` (or its fields as keywords of :meth:`Consumer.open`);
  :class:`Assignment` is its sans-IO share of the queues.
- :class:`AdminClient` sends what RocketMQ's ``mqadmin`` sends (topics, consumer progress,
  offset resets, broker settings, write permission) to the name servers and broker ports.
- :class:`NameServerClient` talks to the name servers (``hanet namesrv`` or RocketMQ's):
  registration, topic routes, the cluster list, and where to put or pull a topic::

      names = NameServerClient([("127.0.0.1", 9876)])
      async with FailoverClient.connect(await names.put_addresses("TopicTest")) as producer:
          await producer.put("TopicTest", b"hello")

For a broker or name server with RocketMQ's ACL on, sign every request of the clients opened
in a block (and the tasks started from it) as RocketMQ's ``AclClientRPCHook`` does::

    with signing(Credentials("myAccessKey", "mySecretKey")):
        async with BrokerClient.connect("127.0.0.1", 10911) as client: ...

A put is answered with RocketMQ's status, from the answer's code; a status other than PUT_OK is
not an exception (FLUSH_SLAVE_TIMEOUT, for one, means stored on the master but not yet on a
slave; SERVICE_NOT_AVAILABLE, a slave's refusal). Errors are typed, all
:class:`RemotingError`\\ s: :class:`BrokerConnectionError` (cannot connect, or the connection
was lost: every request in flight fails with it), :class:`BrokerTimeoutError`,
:class:`BrokerRequestError` (the broker answered an error code: ``code`` is a
:class:`~hanet.protocol.ResponseCode`), :class:`BrokerProtocolError` (the broker sent
something malformed). The name server client raises the ``Remoting*`` errors they derive from.

The broker client's requests are built, and their answers read, without IO by
:func:`send_command`, :func:`pull_command`, :func:`heartbeat_body` and :func:`put_replies`,
:func:`pull_result`, :func:`query_offset_result`, :func:`max_offset_result`,
:func:`consumer_list_result`, :func:`status_result` (for a client on another event loop, or a
test with a :class:`~hanet.protocol.RemotingCommand` in hand).
"""

from hanet.protocol import (
    BrokerRegistration,
    BrokerStatus,
    ClusterInfo,
    Credentials,
    MasterLink,
    RouteBroker,
    SlaveInfo,
    TopicRoute,
)
from hanet.store import MessageRecord, PutStatus

from ._admin import AdminClient, ResetResult, retry_topic_of
from ._assignment import (
    MAX_ROUTE_QUEUES,
    Assignment,
    QueueKey,
    Rebalance,
    RebalanceOutcome,
    allocate_averagely,
    queues_of,
)
from ._broker import (
    DEFAULT_PRODUCER_GROUP,
    DEFAULT_PULL_GROUP,
    BrokerClient,
    BrokerConnectionError,
    BrokerError,
    BrokerProtocolError,
    BrokerRequestError,
    BrokerTimeoutError,
    InvalidMessageError,
    PullResult,
    RequestConnection,
)
from ._broker_codec import (
    consumer_list_result,
    heartbeat_body,
    max_offset_result,
    pull_command,
    pull_result,
    put_replies,
    query_offset_result,
    send_command,
    status_result,
)
from ._consumer import Consumer, RouteSource, default_client_id
from ._consumer_config import ConsumerConfig, ConsumerSettings
from ._consumer_state import ConsumedMessage, ConsumerStats, QueuePosition
from ._failover import FailoverClient, parse_broker_address
from ._messages import AUTO_QUEUE, PullStatus, PutMessage, PutReply, message_problem
from ._namesrv import NameServerClient, NameServerConnection
from ._pool import BrokerConnector, BrokerLink, MembershipLink, broker_connector
from ._query import QUERY_MAX_TIMESTAMP, QueryResult, query_message, view_message
from ._remoting import (
    RemotingConnection,
    RemotingConnectionError,
    RemotingError,
    RemotingProtocolError,
    RemotingResponseError,
    RemotingTimeoutError,
    ServerRequestHandler,
    signing,
)

Connector = BrokerConnector
"""Deprecated alias of :class:`BrokerConnector` (renamed: :data:`hanet.boot.Connector` is
another type, a stream connector); kept for code that imports it, to be removed later."""

__all__ = [
    "AUTO_QUEUE",
    "DEFAULT_PRODUCER_GROUP",
    "DEFAULT_PULL_GROUP",
    "MAX_ROUTE_QUEUES",
    "QUERY_MAX_TIMESTAMP",
    "AdminClient",
    "Assignment",
    "BrokerClient",
    "BrokerConnectionError",
    "BrokerConnector",
    "BrokerError",
    "BrokerLink",
    "BrokerProtocolError",
    "BrokerRegistration",
    "BrokerRequestError",
    "BrokerStatus",
    "BrokerTimeoutError",
    "ClusterInfo",
    "Connector",
    "ConsumedMessage",
    "Consumer",
    "ConsumerConfig",
    "ConsumerSettings",
    "ConsumerStats",
    "Credentials",
    "FailoverClient",
    "InvalidMessageError",
    "MasterLink",
    "MembershipLink",
    "MessageRecord",
    "NameServerClient",
    "NameServerConnection",
    "PullResult",
    "PullStatus",
    "PutMessage",
    "PutReply",
    "PutStatus",
    "QueryResult",
    "QueueKey",
    "QueuePosition",
    "Rebalance",
    "RebalanceOutcome",
    "RemotingConnection",
    "RemotingConnectionError",
    "RemotingError",
    "RemotingProtocolError",
    "RemotingResponseError",
    "RemotingTimeoutError",
    "RequestConnection",
    "ResetResult",
    "RouteBroker",
    "RouteSource",
    "ServerRequestHandler",
    "SlaveInfo",
    "TopicRoute",
    "allocate_averagely",
    "broker_connector",
    "consumer_list_result",
    "default_client_id",
    "heartbeat_body",
    "max_offset_result",
    "message_problem",
    "parse_broker_address",
    "pull_command",
    "pull_result",
    "put_replies",
    "query_message",
    "query_offset_result",
    "queues_of",
    "retry_topic_of",
    "send_command",
    "signing",
    "status_result",
    "view_message",
]
