"""The broker side of reading commit logs from running brokers: :class:`LogReadClient`, a
small synchronous client of HANET_READ_LOG (Spark's Python workers are not trio programs) over
:mod:`hanet.protocol`'s codec, the answers it reads (:class:`LogChunk`) and the TLS files it
connects with (:class:`TlsFiles`). What the reads are planned and turned into is
``_remote.py``'s, over any :class:`~hanet.spark.LogSource`."""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import ssl
import struct
import tempfile
import time
from pathlib import Path

import attrs

from hanet.errors import HanetError
from hanet.protocol import (
    Credentials,
    HanetRequestCode,
    RemotingCommand,
    RemotingCommandError,
    ResponseCode,
    decode_command,
    encode_command,
    sign_request,
)
from hanet.store import ScanStop, StopReason

__all__ = [
    "TIMEOUT",
    "LogChunk",
    "LogReadClient",
    "LogReadError",
    "TlsFiles",
    "split_address",
]

TIMEOUT = 30.0
"""Seconds to connect, and to wait for each answer."""

_LENGTH = struct.Struct(">I")
_MAX_FRAME = 16 * 1024 * 1024 + 64 * 1024


class LogReadError(HanetError):
    """A broker could not be reached, or refused a read (its reason in the message)."""


@attrs.frozen
class TlsFiles:
    """The TLS files' contents (PEM), read on the driver, used on the executors. The
    certificate and key stay out of the repr (a certificate file may hold the key too), which
    logs and tracebacks show, as with :class:`~hanet.protocol.Credentials`."""

    ca: bytes | None = None
    cert: bytes | None = attrs.field(default=None, repr=False)
    key: bytes | None = attrs.field(default=None, repr=False)

    @classmethod
    def load(
        cls, ca: str | None = None, cert: str | None = None, key: str | None = None
    ) -> TlsFiles | None:
        """The contents of the files named (None: no TLS: no CA and no certificate)."""
        if not ca and not cert:
            return None

        def read(path: str | None) -> bytes | None:
            if not path:
                return None
            try:
                return Path(path).read_bytes()
            except OSError as exc:
                raise LogReadError(f"cannot read the TLS file {path}: {exc}") from None

        return cls(read(ca), read(cert), read(key or cert))

    def context(self) -> ssl.SSLContext:
        """A client context: the broker's certificate checked against the CA (the system's
        without one), this side's certificate presented when given (mutual TLS)."""
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            if self.ca is not None:
                context.load_verify_locations(cadata=self.ca.decode("ascii"))
            if self.cert is not None:
                with tempfile.TemporaryDirectory(prefix="hanet-tls-") as directory:
                    cert = Path(directory) / "cert.pem"
                    key = Path(directory) / "key.pem"
                    cert.write_bytes(self.cert)
                    key.write_bytes(self.key or self.cert)
                    os.chmod(key, 0o600)
                    context.load_cert_chain(cert, key)
        except (ssl.SSLError, ValueError, OSError) as exc:
            raise LogReadError(f"cannot load the TLS files: {exc}") from None
        return context


@attrs.frozen
class LogChunk:
    """One HANET_READ_LOG answer.

    Attributes:
        offset: the physical offset of ``data[0]``.
        data: whole records (CRCs unchecked by the broker).
        next_offset: where to read on.
        min_offset, max_offset, file_size: the broker's log.
        stop: where and why the broker's walk stopped on something that is not a record (a
            blank tail, unwritten zeros, bad data), or None.
    """

    offset: int
    data: bytes | bytearray | memoryview
    next_offset: int
    min_offset: int
    max_offset: int
    file_size: int
    stop: ScanStop | None

    @classmethod
    def from_answer(cls, address: str, answer: RemotingCommand) -> LogChunk:
        """The chunk of a SUCCESS answer from ``address``.

        Raises:
            LogReadError: a field missing or malformed.
        """
        return _chunk(address, answer)


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) as ``(host, port)``.

    Raises:
        ValueError: no port number, or one out of range.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad broker address {address!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


class LogReadClient:
    """A synchronous connection to one broker port for HANET_READ_LOG (one request at a
    time). Use as a context manager."""

    def __init__(
        self,
        address: str,
        tls: TlsFiles | None = None,
        timeout: float = TIMEOUT,
        *,
        credentials: Credentials | None = None,
    ):
        self.address = address
        self._timeout = timeout
        self._credentials = credentials
        host, port = split_address(address)
        context = tls.context() if tls is not None else None  # before a socket to leak
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise LogReadError(f"broker {address}: cannot connect: {exc}") from None
        if context is not None:
            try:
                sock = context.wrap_socket(sock, server_hostname=host)
            except (OSError, ssl.SSLError) as exc:
                sock.close()
                raise LogReadError(f"broker {address}: TLS handshake failed: {exc}") from None
        self._sock = sock
        self._opaque = itertools.count(1)

    def __enter__(self) -> LogReadClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(OSError):
            self._sock.close()

    def read(self, offset: int | None, max_bytes: int, *, seek: bool = False) -> LogChunk:
        """One HANET_READ_LOG (``offset`` None: the log's start).

        Raises:
            LogReadError: the connection failed or the broker refused (its reason).
        """
        fields: dict[str, object] = {"maxBytes": max_bytes}
        if offset is not None:
            fields["offset"] = offset
        if seek:
            fields["seek"] = "true"
        opaque = next(self._opaque)
        request = RemotingCommand.request(HanetRequestCode.HANET_READ_LOG, fields, opaque=opaque)
        if self._credentials is not None:
            request = sign_request(request, self._credentials)
        deadline = time.monotonic() + self._timeout
        try:
            self._sock.settimeout(self._timeout)
            self._sock.sendall(encode_command(request))
            while True:
                answer = decode_command(self._frame(deadline))
                if answer.is_response and answer.opaque == opaque:
                    break
        except (OSError, RemotingCommandError) as exc:
            raise LogReadError(f"broker {self.address}: read failed: {exc}") from None
        if answer.code != ResponseCode.SUCCESS:
            reason = answer.remark or f"code {answer.code}"
            if answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                reason = f"not a hanet broker with HANET_READ_LOG ({reason})"
            raise LogReadError(f"broker {self.address}: {reason}")
        return LogChunk.from_answer(self.address, answer)

    def _frame(self, deadline: float) -> bytearray:
        length = _LENGTH.unpack(self._exactly(4, deadline))[0]
        if length > _MAX_FRAME:
            raise LogReadError(f"broker {self.address}: a frame of {length} bytes")
        return self._exactly(length, deadline)

    def _exactly(self, n: int, deadline: float) -> bytearray:
        """``n`` bytes, all by ``deadline`` (a peer trickling bytes does not hold a task)."""
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise TimeoutError
                self._sock.settimeout(left)
                k = self._sock.recv_into(view[got:])
            except TimeoutError:
                raise LogReadError(
                    f"broker {self.address}: no answer in {self._timeout} s"
                ) from None
            if not k:
                raise LogReadError(f"broker {self.address}: the connection closed")
            got += k
        return buf


def _chunk(address: str, answer: RemotingCommand) -> LogChunk:
    """The :class:`LogChunk` of a SUCCESS answer from ``address``.

    Raises:
        LogReadError: a field missing or malformed.
    """
    f = answer.fields
    try:
        stop = None
        if "stopReason" in f:
            stop = ScanStop(
                int(f["stopOffset"]),
                StopReason(f["stopReason"]),
                f.get("stopDetail", ""),
                int(f.get("blankSize", "0")),
            )
        chunk = LogChunk(
            offset=int(f["offset"]),
            data=answer.body,  # a view of the frame read: no copy
            next_offset=int(f["nextOffset"]),
            min_offset=int(f["minOffset"]),
            max_offset=int(f["maxOffset"]),
            file_size=int(f["fileSize"]),
            stop=stop,
        )
        if chunk.file_size <= 0 or not 0 <= chunk.offset <= chunk.next_offset:
            raise ValueError(
                f"fileSize {chunk.file_size}, offset {chunk.offset}, nextOffset {chunk.next_offset}"
            )
        if not 0 <= chunk.min_offset <= chunk.max_offset:  # what plan_broker plans from
            raise ValueError(f"minOffset {chunk.min_offset}, maxOffset {chunk.max_offset}")
        return chunk
    except (KeyError, ValueError) as exc:
        raise LogReadError(f"broker {address}: a malformed HANET_READ_LOG answer: {exc}") from None
