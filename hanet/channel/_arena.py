"""The receive arena: where TCP channels receive, without IO.

A bump allocator over large chunks, shared by the channels of a trio run
(:class:`~hanet.channel.StreamChannel` keeps one per run and reads into the room it
reserves); it decides where each read goes and when a full chunk may be taken again.
"""

from __future__ import annotations

import contextlib
import sys

__all__ = ["ReceiveArena"]

_CHUNK_SIZE = 1024 * 1024  # the receive arena's chunks
_MIN_READ = 16 * 1024  # a chunk with less free room than this is left for a fresh one
_SPARE_CHUNKS = 4  # full chunks kept for reuse once no view of them is left
# Whether full chunks are reused: only where ``sys.getrefcount`` tells that nothing refers to a
# chunk any more, i.e. on CPython (reference counting). Elsewhere (PyPy, GraalPy) the count is
# not exact, so a chunk still seen through a kept frame could be written over: never reused.
_REUSE_CHUNKS = sys.implementation.name == "cpython"
_NO_CHUNK = bytearray()


class ReceiveArena:
    """Where TCP channels receive: the free tail of one large chunk, shared by the channels of a
    trio run (a bump allocator: each byte is written once, by one read).

    A read reserves room, receives into it (``recv_into``) and hands out a read-only view of
    just the received bytes; the next reservation starts after them. Nothing is ever written
    twice: a full chunk is left to the views into it (it lives exactly as long as they do) and
    a fresh chunk takes over. So frames decoded in place stay valid however long a handler
    keeps them; the price is that a kept view keeps its whole chunk alive.

    A full chunk that nothing refers to any more (every view of it is gone, which is the usual
    case: handlers copy what they keep) is taken again instead of a fresh one: a fresh 1 MiB
    ``bytearray`` is zeroed and faulted in page by page, which cost a replicating slave about a
    tenth of its time. Up to :data:`_SPARE_CHUNKS` full chunks are kept for that. Whether
    nothing refers to a chunk is judged by ``sys.getrefcount``, which is exact on CPython only:
    on any other interpreter a full chunk is never taken again (:data:`_REUSE_CHUNKS`).
    """

    __slots__ = ("chunk", "readonly", "spare", "top", "writable")

    def __init__(self) -> None:
        self.chunk = bytearray()
        self.writable = memoryview(self.chunk)
        self.readonly = self.writable.toreadonly()
        self.top = 0
        self.spare: list[bytearray] = []

    def reserve(self, size: int) -> tuple[int, int]:
        """Room for a read of up to ``size`` bytes: ``(start, end)`` in :attr:`chunk`."""
        free = len(self.chunk) - self.top
        if free < min(size, _MIN_READ):
            self.chunk = self._next_chunk(max(_CHUNK_SIZE, size))
            self.writable = memoryview(self.chunk)
            self.readonly = self.writable.toreadonly()
            self.top = 0
            free = len(self.chunk)
        start = self.top
        self.top = end = start + min(size, free)
        return start, end

    def _next_chunk(self, size: int) -> bytearray:
        """A chunk of at least ``size`` bytes: a spare one nothing refers to, else a new one.
        The full chunk is retired to the spares first, on CPython (our own views of it
        released)."""
        spare = self.spare
        if self.chunk and _REUSE_CHUNKS:  # elsewhere no spare is kept: none is ever taken
            spare.append(self.chunk)
            if len(spare) > _SPARE_CHUNKS:
                del spare[0]
        with contextlib.suppress(BufferError):  # exported: that chunk is never taken again
            self.writable.release()
            self.readonly.release()
        self.chunk = _NO_CHUNK  # the caller sets the chunk returned
        for i in range(len(spare)):
            # Referenced by the list and getrefcount's argument only: no view of it is left
            # anywhere (a view holds its buffer through the object it was made from). CPython
            # only: its reference counts are exact (see _REUSE_CHUNKS).
            if sys.getrefcount(spare[i]) <= 2 and len(spare[i]) >= size:
                return spare.pop(i)
        return bytearray(size)

    def give_back(self, chunk: bytearray, end: int, used_end: int) -> None:
        """Return the unused room ``[used_end, end)`` of a reservation, if it is still the
        last one in the current chunk (else it stays a hole)."""
        if chunk is self.chunk and self.top == end:
            self.top = used_end
