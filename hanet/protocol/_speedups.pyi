"""Types of the native remoting header codec (``_speedups.c``); see ``hanet.protocol._remoting``."""

from collections.abc import Sequence
from typing import TypeVar

_T = TypeVar("_T")

def decode_json_header(
    buf: bytes | bytearray | memoryview,
) -> tuple[int, str | int, int, int, int, str | None, dict[str, str] | None] | None: ...
def encode_json_header(
    code: int,
    ext: Sequence[tuple[str, str]] | None,
    flag: int,
    language: str,
    opaque: int,
    remark: str | None,
    version: int,
) -> bytes: ...
def string_to_properties(text: str | None) -> dict[str, str]: ...

# json_command(): the send path's command built natively (send2)
def json_command(
    data: bytes | bytearray | memoryview,
    body: bytes | bytearray | memoryview,
    cls: type[_T],
    languages: dict[str, object],
    other: object,
    serialize_type: object,
) -> _T | None: ...
