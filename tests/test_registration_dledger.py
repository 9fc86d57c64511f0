"""A DLedger group registered with name servers as RocketMQ's DLedger brokers: the leader as
broker id 0, the others as slaves (id: the number in the self id plus one), registered again
at each role change so the routes lead RocketMQ's clients to the new leader. In-process:
three nodes on a memory network, hanet's name server over memory streams."""

from __future__ import annotations

from pathlib import Path

import trio
from test_registration_timing import A, NameServers

from hanet.broker import DLedgerBrokerService, dledger_broker_id
from hanet.dledger import (
    DLedgerNode,
    NodeConfig,
    RaftConfig,
)
from hanet.namesrv import NameServer
from hanet.store import Message, PutStatus
from hanet.testing import MemoryNetwork, wait_until

PEERS = {"n0": "n0:0", "n1": "n1:0", "n2": "n2:0"}
ADDRESS = {"n0": "10.0.0.1:10911", "n1": "10.0.0.2:10911", "n2": "10.0.0.3:10911"}


def test_broker_ids_as_rocketmq_derives_them() -> None:
    assert [dledger_broker_id(n, PEERS) for n in PEERS] == [1, 2, 3]
    assert dledger_broker_id("RaftNode07", ["RaftNode07"]) == 1  # not a number after 'R'
    assert dledger_broker_id("b", ["a", "b"]) == 2
    assert dledger_broker_id("n12", ["n12"]) == 13


def members(server: NameServer) -> dict[int, str]:
    """broker id -> address of the group's broker name ``g``."""
    return {
        b.broker_id: b.broker_address for b in server.registry.brokers() if b.broker_name == "g"
    }


async def test_the_leader_is_broker_id_0_and_a_new_leader_takes_it(tmp_path: Path) -> None:
    raft = RaftConfig(election_timeout=0.3, heartbeat_interval=0.05, retransmit_timeout=0.15)
    network = MemoryNetwork()
    async with trio.open_nursery() as nursery:
        servers = NameServers(nursery)
        server = servers.start(A)
        nodes: dict[str, DLedgerNode] = {}
        services: dict[str, DLedgerBrokerService] = {}
        scopes: dict[str, trio.CancelScope] = {}

        async def member(node_id: str, *, task_status: trio.TaskStatus[None]) -> None:
            config = NodeConfig(
                group="g",
                node_id=node_id,
                peers=PEERS,
                store_dir=tmp_path / node_id,
                raft=raft,
                data_file_size=1 << 20,
                index_file_size=64 * 1024,
                mapped_file_size=1 << 20,
            )
            node = nodes[node_id] = DLedgerNode(
                config, connector=network.connector_for(node_id), listen=False
            )
            service = services[node_id] = DLedgerBrokerService(node, cluster_name="C")
            service.broker_address = ADDRESS[node_id]
            async with trio.open_nursery() as own:
                scopes[node_id] = own.cancel_scope
                network.register(node, own)
                await own.start(node.run)
                await own.start(service.run_registration, servers.client(A))
                task_status.started()

        for node_id in PEERS:
            await nursery.start(member, node_id)

        def leader() -> str | None:
            return next((n for n, node in nodes.items() if node.is_leader), None)

        def settled() -> bool:
            first = leader()
            if first is None:
                return False
            expected = {dledger_broker_id(n, PEERS): ADDRESS[n] for n in PEERS if n != first}
            return members(server) == {0: ADDRESS[first], **expected}

        await wait_until(settled, 10, what="the leader at id 0, the followers at theirs")
        first = leader()
        assert first is not None
        # A topic a send creates on the leader is announced at once (oneway): its route
        # leads there.
        announced = services[first].registrar
        assert announced is not None and announced.announcements == 0
        services[first].topic_table.create_for_send("TopicTest", 4)
        await wait_until(
            lambda: server.registry.route("TopicTest") is not None, 10, what="the route"
        )
        route = server.registry.route("TopicTest")
        assert route is not None
        assert route.broker_datas[0].broker_addrs[0] == ADDRESS[first]
        assert announced.announcements == 1
        status = services[first].status()
        assert status.cluster is not None and status.cluster.broker_id == 0
        # The leader stops: the next leader registers as id 0 at once (not in 30 s), and its
        # entry under its follower id goes (same address).
        network.unregister(first)
        scopes[first].cancel()
        await wait_until(lambda: leader() not in (None, first), 10, what="a new leader")
        second = leader()
        assert second is not None
        others = [n for n in PEERS if n not in (first, second)]
        await wait_until(
            lambda: (
                members(server)
                == {0: ADDRESS[second], **{dledger_broker_id(n, PEERS): ADDRESS[n] for n in others}}
            ),
            5,
            what="the new leader at id 0",
        )
        nursery.cancel_scope.cancel()


async def test_a_followers_topics_follow_what_replication_brings(tmp_path: Path) -> None:
    """The topic table is completed from the view's queues only when the view has a new one
    (it is read on every send): a topic, then another queue of it, reach a follower's table."""
    raft = RaftConfig(election_timeout=0.3, heartbeat_interval=0.05, retransmit_timeout=0.15)
    network = MemoryNetwork()
    async with trio.open_nursery() as nursery:
        services: dict[str, DLedgerBrokerService] = {}
        for node_id in PEERS:
            config = NodeConfig(
                group="g",
                node_id=node_id,
                peers=PEERS,
                store_dir=tmp_path / node_id,
                raft=raft,
                data_file_size=1 << 20,
                index_file_size=64 * 1024,
                mapped_file_size=1 << 20,
            )
            node = DLedgerNode(config, connector=network.connector_for(node_id), listen=False)
            services[node_id] = DLedgerBrokerService(node)
            network.register(node, nursery)
            await nursery.start(node.run)

        def leader() -> str | None:
            return next((n for n, s in services.items() if s.node.is_leader), None)

        await wait_until(lambda: leader() is not None, 10, what="a leader")
        first = leader()
        assert first is not None
        follower = services[next(n for n in PEERS if n != first)]
        assert follower.topic_table.get("Replicated") is None
        for queue_id in (1, 6):
            (result,) = await services[first].put(
                [Message(topic="Replicated", body=b"x", queue_id=queue_id)]
            )
            assert result.status is PutStatus.PUT_OK

            def seen(queues: int = queue_id + 1) -> bool:
                config = follower.topic_table.get("Replicated")
                return config is not None and config.write_queue_nums >= queues

            await wait_until(seen, 10, what=f"queue {queue_id} in the follower's table")
        nursery.cancel_scope.cancel()
