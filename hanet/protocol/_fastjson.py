"""JSON as RocketMQ's fastjson writes and reads it, sans-IO.

RocketMQ serializes its bodies with fastjson, which is not always standard JSON: a map whose
keys are numbers (``BrokerData.brokerAddrs``, keyed by broker id) is written with bare keys
(``{0:"127.0.0.1:10911"}``) unless the writer asks for quoted ones, and fastjson's reader
accepts bare identifiers as keys too. :func:`loads` accepts both; :func:`dumps` writes compact
UTF-8 JSON and, on request, bare integer keys (what RocketMQ's own name server sends to
clients older than 4.9.4, and in every GET_BROKER_CLUSTER_INFO answer) or ASCII-only text
(fastjson's ``BrowserCompatible``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from hanet.errors import HanetError

__all__ = ["FastjsonError", "dumps", "loads"]


class FastjsonError(HanetError, ValueError):
    """Text that is not JSON, even as fastjson reads it."""


# A string (kept as it is), or a bare key after '{' or ',' (quoted). Strings come first in the
# alternation so a key-like text inside a string is consumed with its string.
_TOKENS = re.compile(
    r'"(?:[^"\\]|\\.)*"'
    r"|(?P<lead>[{,]\s*)(?P<key>-?\d+|[A-Za-z_$][A-Za-z0-9_$]*)(?P<tail>\s*:)",
    re.DOTALL,
)


def _quote_keys(match: re.Match[str]) -> str:
    key = match.group("key")
    if key is None:
        return match.group(0)
    return f'{match.group("lead")}"{key}"{match.group("tail")}'


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse fastjson output: standard JSON, or JSON with bare integer or identifier object
    keys (read as strings: ``{0:"a"}`` gives ``{"0": "a"}``). String contents are never
    changed.

    Raises:
        FastjsonError: (a ValueError) not UTF-8, or not JSON even with bare keys.
    """
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FastjsonError(f"not UTF-8: {exc}") from None
    try:
        return json.loads(text)
    except ValueError:
        pass
    except RecursionError:  # a peer's "[[[[...": not a bug of ours
        raise FastjsonError("not JSON: nested too deep") from None
    try:
        return json.loads(_TOKENS.sub(_quote_keys, text))
    except ValueError as exc:
        raise FastjsonError(f"not JSON: {exc}") from None
    except RecursionError:
        raise FastjsonError("not JSON: nested too deep") from None


def _write(obj: Any, out: list[str], bare_int_keys: bool, ascii_only: bool) -> None:
    if isinstance(obj, Mapping):
        out.append("{")
        first = True
        for key, value in obj.items():
            if not first:
                out.append(",")
            first = False
            if isinstance(key, int) and not isinstance(key, bool):
                out.append(str(key) if bare_int_keys else f'"{key}"')
            elif isinstance(key, str):
                out.append(json.dumps(key, ensure_ascii=ascii_only))
            else:
                raise TypeError(f"a JSON object key must be a str or an int, not {key!r}")
            out.append(":")
            _write(value, out, bare_int_keys, ascii_only)
        out.append("}")
    elif isinstance(obj, list | tuple | set | frozenset):
        out.append("[")
        for i, value in enumerate(obj):
            if i:
                out.append(",")
            _write(value, out, bare_int_keys, ascii_only)
        out.append("]")
    else:
        out.append(json.dumps(obj, ensure_ascii=ascii_only))


def dumps(obj: Any, *, bare_int_keys: bool = False, ascii_only: bool = False) -> bytes:
    """Compact JSON in UTF-8, keys in the mapping's own order.

    Args:
        obj: dicts (str or int keys), lists, tuples, sets, strings, numbers, booleans, None.
        bare_int_keys: write int keys bare (``{0:"a"}``), as fastjson does by default;
            otherwise quoted (``{"0":"a"}``).
        ascii_only: escape non-ASCII characters (fastjson's ``BrowserCompatible``).

    Raises:
        TypeError: a value JSON cannot hold.
    """
    out: list[str] = []
    _write(obj, out, bare_int_keys, ascii_only)
    return "".join(out).encode("utf-8")
