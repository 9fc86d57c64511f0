"""The errors of the framework core.

OS and trio errors are translated into these at the channel boundary (``raise ... from exc``);
a clean EOF is not an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from hanet.errors import HanetError

if TYPE_CHECKING:
    from ._channel import Channel

__all__ = ["ChannelClosedError", "ChannelGroupError", "ChannelPipelineError"]


class ChannelClosedError(HanetError):
    """The channel is closed (or closed while the operation waited).

    A write to a closed channel fails with it; writes still queued when a channel closes fail
    with it.
    """


class ChannelPipelineError(HanetError, ValueError):
    """A pipeline operation is not allowed (a non-sharable handler added twice, a handler whose
    ``handler_added`` raised, ...)."""


class ChannelGroupError(HanetError):
    """An operation failed on some channels of a group (Netty's ``ChannelGroupException``).

    Attributes:
        failures: each failed channel and its exception.
    """

    def __init__(self, message: str, failures: Mapping[Channel, BaseException]) -> None:
        super().__init__(message)
        self.failures = dict(failures)
