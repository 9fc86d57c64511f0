"""With ``ha_sendfile`` the HA master sends transfer bodies with sendfile from its commit log
files on plain TCP (a FileRegion per frame, the validated bytes only); by default the mapping;
the slave gets the same log either way."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pytest
import trio
from ha_support import commit_log_bytes

from hanet.ha import BrokerConfig, HAMaster, HASlave
from hanet.store import CommitLogStore, Message, StoreConfig, StoreRole
from hanet.testing import wait_until

FILE = 64 * 1024


@pytest.mark.parametrize("sendfile", [True, False], ids=["sendfile", "mapping"])
async def test_a_slave_over_tcp_gets_the_same_log_by_sendfile_or_the_mapping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sendfile: bool
) -> None:
    sent: list[int] = []
    real_sendfile = os.sendfile

    def counting_sendfile(out: int, source: int, offset: int | None, count: int) -> int:
        done = real_sendfile(out, source, offset, count)
        sent.append(done)
        return done

    monkeypatch.setattr(os, "sendfile", counting_sendfile)
    config = BrokerConfig(mapped_file_size_commit_log=FILE, full_sync=True, ha_sendfile=sendfile)
    master_store = CommitLogStore.open(tmp_path / "m", StoreConfig(mapped_file_size=FILE))
    slave_store = CommitLogStore.open(
        tmp_path / "s", StoreConfig(mapped_file_size=FILE, role=StoreRole.SLAVE)
    )
    with master_store, slave_store:
        for i in range(600):  # several files, with their blank tails
            body = bytes([i % 251]) * (50 + i % 700)
            assert master_store.put(Message("T", body, queue_id=i % 4)).ok
        master = HAMaster(master_store, config)
        async with trio.open_nursery() as nursery:
            listeners: list[Any] = await nursery.start(
                functools.partial(trio.serve_tcp, master.handle_stream, 0, host="127.0.0.1")
            )
            port = listeners[0].socket.getsockname()[1]

            async def connect() -> trio.abc.Stream:
                return await trio.open_tcp_stream("127.0.0.1", port)

            await nursery.start(HASlave(slave_store, config, connector=connect).run)
            await wait_until(lambda: slave_store.max_offset == master_store.max_offset, seconds=30)
            for i in range(100):  # and what comes after the catch-up
                assert master_store.put(Message("T", b"late %d" % i, queue_id=i % 4)).ok
            await wait_until(lambda: slave_store.max_offset == master_store.max_offset, seconds=30)
            nursery.cancel_scope.cancel()
        assert commit_log_bytes(slave_store) == commit_log_bytes(master_store)
        assert slave_store.dispatch_error is None
    if sendfile:
        # every body byte went out by sendfile (the headers by sendmsg)
        assert sum(sent) == master_store.max_offset
    else:
        assert sent == []
