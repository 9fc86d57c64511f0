"""Typed request headers read from ext fields: the C extension's ``read_header`` (plain fields,
no ``__init__``) and the pure-Python reader give the same header, or the same error, for every
shape of field; with ``HANET_NO_EXTENSIONS=1`` the Python reader alone."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import attrs
import pytest

from hanet.protocol import (
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    RemotingHeaderError,
    RequestCode,
    SendMessageRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    native_header_codec,
)

HERE = Path(__file__).resolve().parent

_INTS = ["0", "7", "007", "-1", "+3", " 5", "5 ", "2147483647", "2147483648", "-2147483648"]
_LONGS = ["9223372036854775807", "9223372036854775808", "1" * 19, "0" * 25 + "1", "9" * 30, ""]
_WORDS = ["true", "false", "TRUE", "1", "x", "\u0663", "caf\u00e9", "G"]
_TEXTS = [*_INTS, *_LONGS, *_WORDS]

# (header class, the send code or None for from_fields)
_CASES: list[tuple[Any, int | None]] = [
    (SendMessageRequestHeader, RequestCode.SEND_MESSAGE_V2),
    (SendMessageRequestHeader, RequestCode.SEND_MESSAGE),
    (PullMessageRequestHeader, None),
    (QueryConsumerOffsetRequestHeader, None),
    (UpdateConsumerOffsetRequestHeader, None),
]


def _fields(rng: random.Random, cls: Any, code: int | None) -> dict[str, str]:
    """Mostly plain values of each field's type, some of any shape, a few left out."""
    fields = {}
    for field in attrs.fields(cls):
        key = field.metadata["wire"]
        if code == RequestCode.SEND_MESSAGE_V2:
            key = SendMessageRequestHeader.V2_KEYS[key]
        roll = rng.random()
        if roll < 0.85:
            kind = str(field.type).split(" ")[0]
            plain = {"bool": rng.choice(["true", "false", "0", "1"]), "int": str(rng.randrange(99))}
            fields[key] = plain.get(kind, "T")
        elif roll < 0.98:
            fields[key] = rng.choice(_TEXTS)
        # else: missing
    return fields


def outcomes(seed: int = 7, count: int = 600) -> list[str]:
    """What decoding gives for ``count`` random field sets: each header's repr or error."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        cls, code = _CASES[i % len(_CASES)]
        fields: Any = _fields(rng, cls, code)
        if i % 17 == 0:
            fields = types.MappingProxyType(fields)  # not a dict: the Python reader
        try:
            header = cls.from_fields(fields) if code is None else cls.decode(code, fields)
            out.append(repr(header))
        except RemotingHeaderError as exc:
            out.append(f"error: {exc}")
    return out


def test_headers_read_the_same_with_and_without_the_extension() -> None:
    here = outcomes()
    assert sum(not o.startswith("error") for o in here) > 100  # many headers read, some not
    assert sum(o.startswith("error") for o in here) > 100
    script = "import json, test_protocol_header_reader as t; print(json.dumps(t.outcomes()))"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE,
        env={**os.environ, "HANET_NO_EXTENSIONS": "1", "PYTHONPATH": str(HERE)},
        timeout=60,
    )
    assert json.loads(done.stdout) == here


STALE = """
import importlib.machinery, importlib.util, json, pathlib, sys, types
import hanet
so = next((pathlib.Path(hanet.__file__).parent / "protocol").glob("_speedups*.so"))
name = "hanet.protocol._speedups"
loader = importlib.machinery.ExtensionFileLoader(name, str(so))
real = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
loader.exec_module(real)
stale = types.ModuleType(name)  # an extension built before read_header existed
stale.__dict__.update({k: v for k, v in vars(real).items() if k != "read_header"})
sys.modules[name] = stale
import test_protocol_header_reader as t
print(json.dumps(t.outcomes()))
"""


@pytest.mark.skipif(native_header_codec is None, reason="the C extension is not built")
def test_an_extension_built_before_read_header_reads_headers_in_python() -> None:
    """A checkout whose extension predates ``read_header`` (not rebuilt after a pull) reads
    headers with the Python reader: the same headers and errors, never an AttributeError."""
    done = subprocess.run(
        [sys.executable, "-c", STALE],
        capture_output=True,
        text=True,
        check=True,
        cwd=HERE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])},
        timeout=60,
    )
    assert json.loads(done.stdout) == outcomes()


@attrs.frozen
class Sample:
    name: str
    count: int
    flag: bool = False
    note: str | None = None


SPEC = (
    ("name", "n", 0, 0, True, None),
    ("count", "c", 2, 2**31 - 1, True, None),
    ("flag", "f", 1, 0, False, False),
    ("note", None, 0, 0, False, None),
)


@pytest.mark.skipif(native_header_codec is None, reason="the C extension is not built")
def test_read_header_builds_what_init_would() -> None:
    read = native_header_codec.read_header
    header = read(Sample, {"n": "x", "c": "0042", "f": "true", "other": "ignored"}, SPEC)
    assert header == Sample("x", 42, True) and hash(header) == hash(Sample("x", 42, True))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        header.count = 1
    assert read(Sample, {"n": "x", "c": "2147483647"}, SPEC) == Sample("x", 2**31 - 1)
    for text, flag in (("1", True), ("0", False), ("", False), ("false", False)):  # C++: 0/1
        assert read(Sample, {"n": "x", "c": "1", "f": text}, SPEC) == Sample("x", 1, flag)
    # Anything but the plain shape is left to the Python reader (None).
    for fields in (
        {"c": "1"},
        {"n": "x", "c": "2147483648"},
        {"n": "x", "c": "-1"},
        {"n": "x", "c": "1", "f": "TRUE"},
        {"n": 5, "c": "1"},
        {"n": "x", "c": "\u0663"},
        {"n": "x", "c": ""},
    ):
        assert read(Sample, fields, SPEC) is None, fields
    assert read(Sample, types.MappingProxyType({"n": "x", "c": "1"}), SPEC) is None
    with pytest.raises(TypeError):
        read(Sample, {}, (("name",),))
