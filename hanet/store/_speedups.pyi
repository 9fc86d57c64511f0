"""Types of the native record scanner (``_speedups.c``); see ``hanet.store._index``."""

from collections.abc import Mapping, Sequence
from mmap import mmap
from typing import TypeVar

from ._codec import MessageRecord

_M = TypeVar("_M")

ROW_SIZE: int
CLMUL_CRC: int  # 1 when body CRCs use carry-less multiplication (HANET_NO_CLMUL=1: zlib)

def scan(
    buf: bytes | bytearray | memoryview,
    start: int = 0,
    end: int | None = None,
    base_offset: int = 0,
    limit: int | None = None,
    *,
    check_crc: bool = True,
    check_physical_offset: bool = False,
) -> tuple[int, int, str, int, int, bytes]: ...
def columns(
    buf: bytes | bytearray | memoryview,
    rows: bytes,
    base_offset: int,
    names: Sequence[str],
) -> list[bytes | tuple[bytes, bytes, bytes | None, int]]: ...
def scan_columns(
    buf: bytes | bytearray | memoryview,
    start: int,
    end: int | None,
    base_offset: int,
    limit: int | None,
    names: Sequence[str],
    max_rows: int,
    *,
    check_crc: bool = True,
    check_physical_offset: bool = False,
) -> tuple[
    tuple[int, int, str, int, int, bytes], list[bytes | tuple[bytes, bytes, bytes | None, int]]
]: ...
def group_entries(
    rows: bytes | bytearray | memoryview,
) -> list[tuple[int, int, int, int, int, int, bytes, int]]: ...
def seal(buf: mmap | bytearray | memoryview, pos: int, size: int) -> None: ...
def populate(buf: mmap | bytearray | memoryview) -> None: ...
def pull_gather(
    entries: bytes | memoryview,
    log: bytes | memoryview,
    log_base: int,
    floor: int,
    tags: frozenset[int] | None,
    budget: int,
    taken: int,
    topic: bytes,
    queue_id: int,
    queue_offset: int,
    damaged: bytes | None,
    /,
) -> tuple[int, int, int, int, int, bytes]: ...
def decode_records(
    buf: bytes | memoryview, start: int, cls: type[MessageRecord], /
) -> tuple[list[MessageRecord], int]: ...
def key_batch(
    buf: bytes | bytearray | memoryview | mmap,
    base: int,
    rows: bytes,
    indexed: int,
    skip: int,
) -> list[tuple[int, int, int]]: ...
def write_record(
    buf: mmap | bytearray | memoryview,
    pos: int,
    size: int,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    born_port: int,
    store_timestamp: int,
    store_host: bytes,
    store_port: int,
    reconsume_times: int,
    prepared_transaction_offset: int,
    body: bytes | bytearray | memoryview,
    topic: bytes,
    properties: bytes,
) -> None: ...
def put_properties(properties: dict[str, str]) -> bytes: ...
def index_entries(
    buf: bytes | bytearray | memoryview | mmap,
    keys: Sequence[tuple[int, int, int]],
    count: int,
    slots: int,
    begin: int,
    begin_phy: int,
    used: int,
    end_phy: int,
    end_stamp: int,
) -> tuple[bytes, dict[int, int], int, int, int, int, int, int]: ...

# new_message(): the send path's Message built natively (send2)
def new_message(
    cls: type[_M],
    topic: str,
    body: bytes,
    queue_id: int,
    flag: int,
    properties: Mapping[str, str],
    sys_flag: int,
    born_timestamp: int,
    born_host: bytes,
    born_port: int,
    reconsume_times: int,
    /,
) -> _M: ...
