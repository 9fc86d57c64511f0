"""Arbitrary bytes into every parser that reads from the network or the disk: only the typed
errors come out, nothing hangs, nothing is buffered past its bound (hypothesis)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hanet.channel import ChannelInboundHandler, HandlerContext
from hanet.handlers import DecoderError
from hanet.handlers.ha import OffsetReportDecoder, TransferFrameDecoder, transfer_frame_decoder
from hanet.protocol import (
    MAX_FRAME_LENGTH,
    HeartbeatData,
    PullMessageRequestHeader,
    RemotingHeaderError,
    SendMessageRequestHeader,
    decode_batch,
    decode_command,
    encode_command,
    remoting_pipeline,
)
from hanet.store import CorruptRecordError as RecordError
from hanet.store import (
    MessageRecord,
    StopReason,
    decode_record,
    encode_record,
    scan_records,
)
from hanet.testing import EmbeddedChannel

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Errors(ChannelInboundHandler):
    """Collects what reaches the end of the pipeline: messages and errors."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.errors: list[BaseException] = []

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        self.messages.append(msg)

    def exception_caught(self, ctx: HandlerContext, exc: BaseException) -> None:
        self.errors.append(exc)


def _feed(channel: EmbeddedChannel, chunks: list[bytes]) -> None:
    for chunk in chunks:
        channel.write_inbound(chunk)


@FUZZ
@given(st.binary(max_size=2048))
def test_remoting_frames_decode_or_raise_decoder_errors(frame: bytes) -> None:
    try:
        command = decode_command(frame)
    except DecoderError:
        return
    # What decodes encodes back to a frame that decodes to the same command.
    again = decode_command(encode_command(command)[4:])
    assert again == command


@FUZZ
@given(st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=16))
def test_broker_headers_read_any_fields_or_name_the_bad_one(fields: dict[str, str]) -> None:
    for read in (
        SendMessageRequestHeader.from_fields,
        SendMessageRequestHeader.from_v2_fields,
        PullMessageRequestHeader.from_fields,
    ):
        try:
            read(fields)
        except RemotingHeaderError as exc:
            assert "field" in str(exc)


@FUZZ
@given(st.binary(max_size=1024))
def test_broker_bodies_decode_or_raise_header_errors(body: bytes) -> None:
    for decode in (HeartbeatData.from_json, decode_batch):
        try:
            decode(body)
        except RemotingHeaderError:
            pass


@FUZZ
@given(st.lists(st.binary(max_size=512), max_size=20))
def test_broker_pipeline_takes_any_bytes(chunks: list[bytes]) -> None:
    sink = Errors()
    channel = EmbeddedChannel(*(handler for _, handler in remoting_pipeline(4096)), sink)
    _feed(channel, chunks)
    channel.finish()
    assert all(isinstance(e, DecoderError) for e in sink.errors)
    assert MAX_FRAME_LENGTH > 4096  # the bound used above is the tighter one


@FUZZ
@given(st.lists(st.binary(max_size=256), max_size=20))
def test_offset_reports_take_any_bytes(chunks: list[bytes]) -> None:
    sink = Errors()
    channel = EmbeddedChannel(OffsetReportDecoder(), sink)
    _feed(channel, chunks)
    assert all(isinstance(e, DecoderError) for e in sink.errors)
    # Reports are 8 bytes: what is held back is less than one report.
    assert sum(len(c) for c in chunks) - 8 * len(sink.messages) >= 0


@FUZZ
@given(st.lists(st.binary(max_size=256), max_size=20), st.integers(1, 64))
def test_transfer_frames_take_any_bytes(chunks: list[bytes], batch: int) -> None:
    sink = Errors()
    channel = EmbeddedChannel(transfer_frame_decoder(batch), TransferFrameDecoder(), sink)
    _feed(channel, chunks)
    channel.finish()
    assert all(isinstance(e, DecoderError) for e in sink.errors)
    assert all(len(frame.body) <= batch for frame in sink.messages)


_RECORD = encode_record(
    MessageRecord.create(topic="TopicTest", body=b"hello world", properties={"TAGS": "a"})
)


@FUZZ
@given(st.binary(max_size=1024))
def test_records_from_random_bytes_are_corrupt_or_valid(data: bytes) -> None:
    scanner = scan_records(data)
    records = list(scanner)
    assert scanner.stop is not None and scanner.position <= len(data)
    for record in records:
        assert record.crc_ok
    try:
        decode_record(data)
    except RecordError as exc:
        assert exc.offset == 0


@FUZZ
@given(st.integers(0, len(_RECORD) - 1), st.integers(1, 255), st.integers(0, len(_RECORD)))
def test_a_damaged_record_never_scans_as_valid(position: int, mask: int, cut: int) -> None:
    damaged = bytearray(_RECORD)
    damaged[position] ^= mask
    for data in (bytes(damaged), _RECORD[:cut]):
        scanner = scan_records(data, check_physical_offset=True)
        records = list(scanner)
        if data == _RECORD or not data:
            continue
        if records:  # a flip in a field no check covers (flag, timestamps, hosts)
            assert records[0] != decode_record(_RECORD)
        else:
            assert scanner.stop is not None
            assert scanner.stop.reason in (StopReason.INVALID, StopReason.INCOMPLETE)
