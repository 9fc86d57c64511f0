"""The cluster settings of ``hanet master`` / ``hanet slave``: flags and broker.conf keys; and
consumer offsets across real process restarts (SIGTERM and kill -9)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import trio
from broker_support import commit, connect, query

from hanet.broker import apply_properties
from hanet.cli import build_config, build_parser
from hanet.errors import ConfigError
from hanet.ha import BrokerConfig, BrokerRole
from hanet.testing import HanetProcesses


def test_cluster_flags_on_master_and_slave(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "master",
            "--namesrv",
            "10.0.0.1:9876,10.0.0.2:9876",
            "--cluster",
            "C",
            "--broker-name",
            "b-1",
            "--slave-read-enable",
            "--listen",
            "0.0.0.0:10911",
            "--broker-ip",
            "10.0.0.7",
            "--broker-ip2",
            "10.0.1.7",
        ]
    )
    config = build_config(args)
    assert (config.broker_ip1, config.broker_ip2) == ("10.0.0.7", "10.0.1.7")
    assert config.namesrv_addresses == [("10.0.0.1", 9876), ("10.0.0.2", 9876)]
    assert (config.broker_cluster_name, config.broker_name) == ("C", "b-1")
    assert config.slave_read_enable and config.effective_broker_id == 0
    args = build_parser().parse_args(
        [
            "slave",
            "--namesrv",
            "10.0.0.1:9876",
            "--broker-id",
            "2",
            "--master-broker",
            "10.0.0.3:10911",
        ]
    )
    config = build_config(args, BrokerRole.SLAVE)
    assert config.ha_master_address is None  # learned from the name server
    assert config.effective_broker_id == 2
    assert config.master_broker_address == "10.0.0.3:10911"
    assert not config.slave_read_enable


def test_broker_conf_cluster_keys() -> None:
    config = apply_properties(
        {
            "namesrvAddr": "127.0.0.1:9876",
            "brokerClusterName": "C",
            "brokerName": "broker-b",
            "brokerId": "1",
            "brokerRole": "SLAVE",
            "slaveReadEnable": "true",
            "whichBrokerWhenConsumeSlowly": "2",
            "accessMessageInMemoryMaxRatio": "30",
            "registerNameServerPeriod": "10000",
            "flushConsumerOffsetInterval": "1000",
            "slaveSyncInterval": "20000",
            "masterBrokerAddress": "127.0.0.1:10911",
            "totalMemoryBytes": "1048576",
            "brokerIP2": "10.0.1.7",
        }
    )
    assert config == BrokerConfig(
        broker_role=BrokerRole.SLAVE,
        namesrv_addr="127.0.0.1:9876",
        broker_cluster_name="C",
        broker_name="broker-b",
        broker_id=1,
        slave_read_enable=True,
        which_broker_when_consume_slowly=2,
        access_message_in_memory_max_ratio=30,
        register_broker_interval=10.0,
        flush_consumer_offset_interval=1.0,
        slave_sync_interval=20.0,
        master_broker_address="127.0.0.1:10911",
        total_memory_bytes=1048576,
        broker_ip2="10.0.1.7",
    )
    with pytest.raises(ConfigError, match="brokerId"):
        apply_properties({"brokerId": "0", "brokerRole": "SLAVE"})


# -- real processes ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("interval", [1.0, 5.0], ids=["1s", "default-5s"])
async def test_offsets_survive_sigterm_exactly_and_kill_9_within_one_flush_interval(
    processes: HanetProcesses, tmp_path: Path, interval: float
) -> None:
    extra: tuple[str, ...] = ()
    if interval != 5.0:  # the default, RocketMQ's flushConsumerOffsetInterval
        conf = tmp_path / "broker.conf"
        conf.write_text(f"flushConsumerOffsetInterval={int(interval * 1000)}\n")
        extra = ("--config", str(conf))
    ports = ("--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0")
    store = ("--store", str(tmp_path / "store"), "--mapped-file-size", "262144")
    master = processes.add("master", "master", *store, *ports, *extra)
    await master.start()
    async with connect(master.address()) as c:
        await commit(c, "g", "T", 0, 41)
        await commit(c, "g", "T", 1, 7)
    assert await master.stop(signal.SIGTERM) == 0  # flushed on shutdown, not after 1 s
    await master.start()
    async with connect(master.address()) as c:
        assert await query(c, "g", "T", 0) == 41
        assert await query(c, "g", "T", 1) == 7
        # Commit a rising offset every 50 ms for 2.5 intervals, then kill -9.
        committed: list[tuple[float, int]] = []
        for offset in range(100, 100 + int(interval * 50)):
            await commit(c, "g", "T", 0, offset)
            committed.append((time.monotonic(), offset))
            await trio.sleep(0.05)
    killed_at = time.monotonic()
    assert await master.stop(signal.SIGKILL) == -signal.SIGKILL
    await master.start()
    async with connect(master.address()) as c:
        recovered = await query(c, "g", "T", 0)
        assert await query(c, "g", "T", 1) == 7
    assert recovered is not None
    # What was committed more than one interval (plus slack) before the kill is kept:
    # at most the last interval's messages are consumed again.
    safe = [offset for at, offset in committed if at < killed_at - interval - 0.5]
    assert safe and recovered >= max(safe)
    assert recovered <= committed[-1][1]
