"""Python clients of the broker port and of the name server.

Usage::

    from hanet.client import BrokerClient

    async with BrokerClient.connect("127.0.0.1", 10911) as client:
        reply = await client.put("TopicTest", b"hello", tags="TagA")
        print(reply.status, reply.msg_id)
        batch = await client.put_batch([PutMessage("TopicTest", b"x%d" % i) for i in range(100)])
        pulled = await client.pull("TopicTest", queue_id=reply.queue_id, offset=0)
        status = await client.status()
        await client.commit_offset("my-group", "TopicTest", reply.queue_id, pulled.next_offset)

Any number of tasks may call the same client at once: each request gets an id and its own
answer, and requests written together leave in one send (the channel coalesces them). At most
``max_in_flight`` requests wait for answers; more callers wait for a slot (back-pressure).

- :class:`FailoverClient` takes several broker addresses (a DLedger group): it connects to the
  first that answers, follows NOT_LEADER answers to the leader, and tries the next address
  when one is down.
- :class:`Consumer` consumes a topic for a group: it follows the topic's route, takes its
  share of the queues among the group's members (:func:`allocate_averagely`, rebalanced when
  one joins or leaves), pulls them (from a slave when the master suggests it or cannot be
  reached), and commits offsets (to the master, else a slave): at least once across a
  master's loss and a rebalance.
- :class:`NameServerClient` talks to the name servers (``hanet namesrv``): registration,
  topic routes, the cluster list, and where to put or pull a topic::

      names = NameServerClient([("127.0.0.1", 9876)])
      async with FailoverClient.connect(await names.put_addresses("TopicTest")) as producer:
          await producer.put("TopicTest", b"hello")

- :class:`Consumer` consumes a topic for a consumer group through the name servers: its share
  of the queues, offsets committed, reading from a slave while the master is down.

A put is answered with RocketMQ's status; a status other than PUT_OK is not an exception
(FLUSH_SLAVE_TIMEOUT, for one, means stored on the master but not yet on a slave). Errors are
typed: :class:`BrokerConnectionError` (cannot connect, or the connection was lost: every
request in flight fails with it), :class:`BrokerTimeoutError`, :class:`BrokerRequestError` (the
broker answered ERROR), :class:`BrokerProtocolError` (the broker sent something malformed; the
connection is closed).

The wire format is described in :mod:`hanet.protocol`.
"""

from hanet.protocol import (
    AUTO_QUEUE,
    BrokerMetadata,
    BrokerRegistration,
    BrokerStatus,
    ClusterInfo,
    ErrorCode,
    MasterLink,
    PullStatus,
    PutMessage,
    PutReply,
    RouteBroker,
    SlaveInfo,
    TopicRoute,
)
from hanet.store import MessageRecord, PutStatus

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
from ._consumer import (
    MAX_ROUTE_QUEUES,
    BrokerLink,
    Connector,
    ConsumedMessage,
    Consumer,
    ConsumerStats,
    MembershipLink,
    QueueKey,
    QueuePosition,
    RouteSource,
    allocate_averagely,
    broker_connector,
    default_client_id,
)
from ._failover import FailoverClient, parse_broker_address
from ._namesrv import NameServerClient, NameServerConnection
from ._remoting import (
    RemotingConnection,
    RemotingConnectionError,
    RemotingError,
    RemotingProtocolError,
    RemotingResponseError,
    RemotingTimeoutError,
    ServerRequestHandler,
)

__all__ = [
    "AUTO_QUEUE",
    "DEFAULT_PRODUCER_GROUP",
    "DEFAULT_PULL_GROUP",
    "MAX_ROUTE_QUEUES",
    "BrokerClient",
    "BrokerConnectionError",
    "BrokerError",
    "BrokerLink",
    "BrokerMetadata",
    "BrokerProtocolError",
    "BrokerRegistration",
    "BrokerRequestError",
    "BrokerStatus",
    "BrokerTimeoutError",
    "ClusterInfo",
    "Connector",
    "ConsumedMessage",
    "Consumer",
    "ConsumerStats",
    "ErrorCode",
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
    "QueueKey",
    "QueuePosition",
    "RemotingConnection",
    "RemotingConnectionError",
    "RemotingError",
    "RemotingProtocolError",
    "RemotingResponseError",
    "RemotingTimeoutError",
    "RequestConnection",
    "RouteBroker",
    "RouteSource",
    "ServerRequestHandler",
    "SlaveInfo",
    "TopicRoute",
    "allocate_averagely",
    "broker_connector",
    "default_client_id",
    "parse_broker_address",
]
