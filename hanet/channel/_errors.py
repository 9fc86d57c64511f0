"""The errors of the framework core.

OS and trio errors are translated into these at the channel boundary (``raise ... from exc``);
a clean EOF is not an error.
"""

from __future__ import annotations

from hanet.errors import HanetError

__all__ = ["ChannelClosedError", "ChannelPipelineError"]


class ChannelClosedError(HanetError):
    """The channel is closed (or closed while the operation waited).

    A write to a closed channel fails with it; writes still queued when a channel closes fail
    with it.
    """


class ChannelPipelineError(HanetError, ValueError):
    """A pipeline operation is not allowed (a non-sharable handler added twice, a handler whose
    ``handler_added`` raised, ...)."""
