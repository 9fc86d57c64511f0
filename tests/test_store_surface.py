"""``hanet.store`` is what a user of the store needs; ``hanet.store.lowlevel`` the plumbing
hanet's own layers build on (as ``trio.lowlevel``): every name is exported by exactly one of
them, once."""

from __future__ import annotations

import subprocess
import sys

import hanet.store
import hanet.store.lowlevel


def test_each_name_is_exported_once_by_one_module() -> None:
    public, low = hanet.store.__all__, hanet.store.lowlevel.__all__
    assert len(public) == len(set(public)) and len(low) == len(set(low))
    assert set(public).isdisjoint(low)
    for module in (hanet.store, hanet.store.lowlevel):
        for name in module.__all__:
            assert getattr(module, name, None) is not None or name.startswith("native_"), name


def test_a_store_user_finds_the_store_and_not_the_plumbing() -> None:
    public = set(hanet.store.__all__)
    assert {"CommitLogStore", "StoreConfig", "Message", "PutStatus", "MessageRecord"} <= public
    assert {"CommitLogReader", "StoreError", "RetentionService", "EpochFile"} <= public
    assert not {"scan_index", "RecordScanner", "MappedFile", "INDEX_ROW", "BLANK_MAGIC"} & public
    assert len(public) < 50


def test_importing_the_store_does_not_load_the_plumbing_module() -> None:
    code = "import sys, hanet.store; print('hanet.store.lowlevel' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
