"""ChannelGroup: a set of open channels to broadcast to and close together (Netty's
``DefaultChannelGroup``)."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ._channel import Channel
from ._errors import ChannelGroupError
from ._future import ChannelFuture

__all__ = ["ChannelGroup", "ChannelGroupFuture", "ChannelMatcher"]

#: Selects the channels of a group an operation applies to (Netty's ``ChannelMatcher``).
ChannelMatcher = Callable[[Channel], bool]

_group_ids = itertools.count(1)


class ChannelGroupFuture(ChannelFuture):
    """The outcome of one operation on every channel of a group (Netty's
    ``ChannelGroupFuture``): done when each channel's future is; succeeded if all succeeded,
    else failed with a :class:`ChannelGroupError` holding each failure by channel.

    ``await`` it from a task (raises that error); ``future[channel]`` is one channel's future,
    iteration yields the channels. A group future over no channel is done at once.
    """

    __slots__ = ("_failures", "_futures", "group")

    def __init__(self, group: ChannelGroup, futures: Mapping[Channel, ChannelFuture]) -> None:
        super().__init__()
        self.group = group
        self._futures = dict(futures)
        self._failures: dict[Channel, BaseException] = {}
        pending = [len(self._futures)]
        if not pending[0]:
            self.set_result()
            return

        def one_done(channel: Channel, future: ChannelFuture) -> None:
            exc = future.exception()
            if exc is not None:
                self._failures[channel] = exc
            pending[0] -= 1
            if pending[0] == 0:
                if self._failures:
                    self.set_exception(
                        ChannelGroupError(
                            f"{len(self._failures)} of {len(self._futures)} channels of "
                            f"{group.name} failed",
                            self._failures,
                        )
                    )
                else:
                    self.set_result()

        for channel, future in self._futures.items():
            future.add_done_callback(functools.partial(one_done, channel))

    def __getitem__(self, channel: Channel) -> ChannelFuture:
        return self._futures[channel]

    def __iter__(self) -> Iterator[Channel]:
        return iter(list(self._futures))

    def __len__(self) -> int:
        return len(self._futures)

    def is_partial_success(self) -> bool:
        """Done, and some but not all channels succeeded."""
        return self.done() and 0 < len(self._failures) < len(self._futures)

    def is_partial_failure(self) -> bool:
        """Done, and some but not all channels failed (the same as a partial success)."""
        return self.is_partial_success()


class ChannelGroup:
    """Open channels to broadcast to and to close together (Netty's ``DefaultChannelGroup``).

    A channel added leaves the group by itself when it closes (its ``close_future``). Every
    operation applies to the channels the optional ``matcher`` selects (all by default; e.g.
    ``lambda c: c is not sender`` to broadcast to the others) and returns a
    :class:`ChannelGroupFuture`: synchronous handlers use its callbacks, tasks ``await`` it.
    Operations start at once on each channel (a write goes through each channel's whole
    pipeline, as ``channel.write_and_flush_nowait``); the group never waits, so a slow channel
    does not hold back the others. Back-pressure is each channel's: a task that must respect
    it awaits ``channel.write_and_flush`` per channel instead.

    With ``stay_closed``, a channel added after :meth:`close` is closed at once (Netty's
    issue #4020). Not bound to a trio run: one group may hold channels of any run's tasks, but
    it must be used from one thread.
    """

    def __init__(self, name: str | None = None, *, stay_closed: bool = False) -> None:
        self.name = name if name is not None else f"group-{next(_group_ids)}"
        self.stay_closed = stay_closed
        self._channels: dict[int, Channel] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"ChannelGroup(name: {self.name}, size: {len(self)})"

    # -- the set ----------------------------------------------------------------------------

    def add(self, channel: Channel) -> bool:
        """Add ``channel``; False if it was already in. A channel already closed leaves again
        at once."""
        added = channel.id not in self._channels
        if added:
            self._channels[channel.id] = channel
            channel.close_future.add_done_callback(lambda f: self._forget(channel))
        if self.stay_closed and self._closed:
            channel.close_nowait("channel group closed")
        return added

    def _forget(self, channel: Channel) -> None:
        if self._channels.get(channel.id) is channel:
            del self._channels[channel.id]

    def remove(self, channel: Channel | int) -> bool:
        """Remove a channel (or the channel with this id); False if it was not in."""
        key = channel if isinstance(channel, int) else channel.id
        found = self._channels.get(key)
        if found is None or (not isinstance(channel, int) and found is not channel):
            return False
        del self._channels[key]
        return True

    def find(self, channel_id: int) -> Channel | None:
        """The channel of this group with ``channel.id == channel_id``, or None."""
        return self._channels.get(channel_id)

    def clear(self) -> None:
        """Forget every channel (nothing is closed)."""
        self._channels.clear()

    def __contains__(self, channel: object) -> bool:
        return isinstance(channel, Channel) and self._channels.get(channel.id) is channel

    def __iter__(self) -> Iterator[Channel]:
        return iter(list(self._channels.values()))

    def __len__(self) -> int:
        return len(self._channels)

    # -- operations on every (matching) channel -----------------------------------------------

    def _select(self, matcher: ChannelMatcher | None) -> list[Channel]:
        channels = list(self._channels.values())
        return channels if matcher is None else [c for c in channels if matcher(c)]

    def write(self, msg: Any, matcher: ChannelMatcher | None = None) -> ChannelGroupFuture:
        """Write ``msg`` to each channel (not flushed); the same object goes to every channel,
        which is safe because a channel never changes a message (bytes-like ones are
        snapshotted at the head)."""
        return ChannelGroupFuture(self, {c: c.pipeline.write(msg) for c in self._select(matcher)})

    def flush(self, matcher: ChannelMatcher | None = None) -> ChannelGroup:
        """Flush each channel."""
        for channel in self._select(matcher):
            channel.pipeline.flush()
        return self

    def write_and_flush(
        self, msg: Any, matcher: ChannelMatcher | None = None
    ) -> ChannelGroupFuture:
        """Write ``msg`` to each channel and flush it; the future is done when every channel
        has sent it (or failed)."""
        return ChannelGroupFuture(
            self, {c: c.write_and_flush_nowait(msg) for c in self._select(matcher)}
        )

    def close(self, matcher: ChannelMatcher | None = None) -> ChannelGroupFuture:
        """Close each channel (what was flushed to it is still sent first); the future is done
        when every one has closed."""
        if self.stay_closed:
            self._closed = True
        return ChannelGroupFuture(
            self, {c: c.close_nowait("channel group closed") for c in self._select(matcher)}
        )

    def new_close_future(self, matcher: ChannelMatcher | None = None) -> ChannelGroupFuture:
        """A future done when every channel now in the group has closed."""
        return ChannelGroupFuture(self, {c: c.close_future for c in self._select(matcher)})
