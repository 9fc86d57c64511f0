"""Errors raised by codec and timeout handlers."""

from __future__ import annotations

from hanet.errors import HanetError

__all__ = [
    "CorruptedFrameError",
    "DecoderError",
    "EncoderError",
    "ReadTimeoutError",
    "TooLongFrameError",
    "WriteTimeoutError",
]


class DecoderError(HanetError):
    """Bytes could not be decoded. Fired as ``exception_caught`` from the decoder; unhandled,
    it closes a socket channel with a logged reason."""


class TooLongFrameError(DecoderError):
    """A frame is longer than the decoder's ``max_frame_length``; it is discarded."""


class CorruptedFrameError(DecoderError):
    """A frame header makes no sense (a negative or too-short length); the header is skipped."""


class EncoderError(HanetError):
    """A message could not be encoded; the write's future fails with it."""


class ReadTimeoutError(HanetError, TimeoutError):
    """Nothing was read for the configured time (fired by ``ReadTimeoutHandler``)."""


class WriteTimeoutError(HanetError, TimeoutError):
    """A write did not complete in the configured time (fired by ``WriteTimeoutHandler``)."""
