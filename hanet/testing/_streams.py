"""Reading a trio stream in tests: exactly ``n`` bytes, or an error naming how many came."""

from __future__ import annotations

import trio

__all__ = ["receive_exactly"]

_MOST = 1 << 20


async def receive_exactly(stream: trio.abc.ReceiveStream, n: int) -> bytes:
    """The next ``n`` bytes of ``stream``; :class:`EOFError` if it ends first."""
    data = bytearray()
    while len(data) < n:
        chunk = await stream.receive_some(min(n - len(data), _MOST))
        if not chunk:
            raise EOFError(f"EOF after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)
