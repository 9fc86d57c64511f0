"""Each status record is defined once: what the replication master and a DLedger node report
is the very record the STATUS document carries, so the two cannot drift apart."""

from __future__ import annotations

from broker_support import broker_status

import hanet.dledger
import hanet.ha
import hanet.protocol
from hanet.protocol import BrokerStatus
from hanet.status import DLedgerInfo, DLedgerPeer, SlaveInfo


def test_the_layers_name_one_record_each() -> None:
    assert hanet.ha.SlaveConnectionStatus is SlaveInfo is hanet.protocol.SlaveInfo
    assert hanet.dledger.NodeStatus is DLedgerInfo is hanet.protocol.DLedgerInfo
    assert hanet.dledger.PeerStatus is DLedgerPeer is hanet.protocol.DLedgerPeer


def test_what_the_services_report_goes_into_the_document_as_it_is() -> None:
    slave = SlaveInfo("127.0.0.1:5000", "transferring", 0, 4096, 4096, 0, 4096, 1024.0, "s1")
    closed = SlaveInfo("127.0.0.1:5001", "closed: reset", 0, 10, 10, 4086, 10, 0.0)
    master = hanet.ha.MasterStatus(0, 4096, 4096, slaves=(slave,), closed=(closed,))
    node = DLedgerInfo(
        group="g",
        id="n0",
        role="LEADER",
        term=3,
        leader="n0",
        commit_index=9,
        applied_index=9,
        last_index=10,
        leader_address="127.0.0.1:10911",
        peers=(DLedgerPeer("n1", "127.0.0.1:40912", True, 9, 1),),
    )
    status = broker_status(
        role="SYNC_MASTER", slaves=master.slaves, closed_slaves=master.closed, dledger=node
    )
    back = BrokerStatus.decode(status.encode())
    assert back == status
    assert back.slaves == (slave,) and back.closed_slaves == (closed,) and back.dledger == node
    document = status.to_json()
    assert document["slaves"][0]["identity"] == "s1"
    assert document["dledger"]["peers"] == [
        {"id": "n1", "address": "127.0.0.1:40912", "connected": True, "match_index": 9, "lag": 1}
    ]
