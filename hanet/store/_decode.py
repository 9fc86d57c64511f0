"""Every record of a buffer at once (a pull answer's body): :func:`decode_records`.

The native decoder (``_speedups.decode_records``, built by ``pip install -e .``) checks each
record as the store's scanner does and builds the :class:`MessageRecord` tuples in one call;
:func:`decode_record`, one record at a time, is its reference and fallback (and it names the
first bad record: the native decoder stops there and hands over).
"""

from __future__ import annotations

from collections.abc import Callable

from ._codec import MessageRecord
from ._native import ENABLED, native
from ._scanner import decode_record

__all__ = ["NATIVE_DECODE", "decode_records", "native_decode_records"]

native_decode_records: (
    Callable[[bytes | memoryview, int, type[MessageRecord]], tuple[list[MessageRecord], int]] | None
) = native("decode_records")
"""``hanet.store._speedups.decode_records(buf, start, cls) -> (records, position)``, or None
when the extension is not built."""

NATIVE_DECODE = native_decode_records is not None and ENABLED
"""Whether :func:`decode_records` decodes natively (built, ``HANET_NO_EXTENSIONS`` unset)."""


def decode_records(
    buf: bytes | bytearray | memoryview, *, native: bool | None = None
) -> list[MessageRecord]:
    """The records of ``buf``, one after the other from its start to its end, each checked
    as :func:`decode_record` checks it (its body CRC and whole-record CRC).

    ``native``: use the native decoder (None: when built and ``HANET_NO_EXTENSIONS`` is
    unset); the result is the same either way.

    Raises:
        CorruptRecordError: something in ``buf`` is not a whole valid record (its offset is
            its position in ``buf``).
    """
    view = memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    decode = native_decode_records if (NATIVE_DECODE if native is None else native) else None
    records: list[MessageRecord] = []
    pos = 0
    end = len(view)
    while pos < end:
        if decode is not None:
            found, pos = decode(view, pos, MessageRecord)
            records.extend(found)
            if pos >= end:
                break
        record = decode_record(view, pos)  # raises, naming what is wrong
        records.append(record)
        pos += record.size
    return records
