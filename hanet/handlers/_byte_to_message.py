"""ByteToMessageDecoder: accumulate received bytes and decode messages from them."""

from __future__ import annotations

from collections import deque
from typing import Any

from hanet.channel import MEMORY_BUDGET, BudgetAccount, ChannelInboundHandler, HandlerContext

from ._errors import DecoderError

__all__ = ["ByteCursor", "ByteToMessageDecoder"]

_BYTES_LIKE = (bytes, bytearray, memoryview)


class ByteCursor:
    """The decoder's cumulation: ``data[pos:]`` are the bytes not yet consumed.

    A ``decode`` implementation reads ``data`` from ``pos`` and advances ``pos`` past what it
    consumed (Netty's reader index). ``data`` is a ``bytearray``, compacted and reused: a
    decoder must not keep references into it, and copies what it emits (``bytes(...)`` or
    ``memoryview(...).tobytes()``). Only for a decoder with ``zero_copy`` set may ``data`` also
    be a read-only memoryview of received bytes, which never change: slices of that one may be
    emitted as they are.
    """

    __slots__ = ("data", "pos")

    def __init__(self, data: bytearray | memoryview | None = None, pos: int = 0) -> None:
        self.data = data if data is not None else bytearray()
        self.pos = pos

    @property
    def readable(self) -> int:
        """How many bytes are left to decode."""
        return len(self.data) - self.pos

    def __repr__(self) -> str:
        return f"<ByteCursor {self.readable} readable>"


def _extend(cum: ByteCursor, more: bytes | bytearray | memoryview) -> None:
    owned = cum.data
    assert type(owned) is bytearray, "only an owned cumulation grows"
    owned += more


class ByteToMessageDecoder(ChannelInboundHandler):
    """Netty's ``ByteToMessageDecoder``: subclasses implement :meth:`decode`.

    Received bytes-like messages are appended to one cumulation (amortised: appends extend a
    ``bytearray``; consumed bytes are dropped once per read, so a frame split into many reads
    costs no quadratic copying). :meth:`decode` is called in a loop while it makes progress; a
    call that emits a message without consuming anything is a :class:`DecoderError`. Other
    messages pass through untouched.

    Messages decoded before an error are delivered before the error is fired (to this handler's
    ``exception_caught``, which by default passes it on); unconsumed bytes stay for the next
    read. When the channel closes, the remaining bytes are decoded once more and then offered to
    :meth:`decode_last`; what is still left is dropped. When the decoder is removed from the
    pipeline, its unconsumed bytes are passed on raw, followed by ``channel_read_complete``.

    With ``channel.auto_read`` off, a read batch that produced no message asks for one more read
    (``ctx.read()``), so a partial frame does not stall the channel.

    Memory: when the channel carries a :class:`~hanet.channel.MemoryBudget` (in its
    ``attributes`` under ``MEMORY_BUDGET``; servers started with ``hanet.boot.serve`` do), the
    bytes cumulated at the end of each read are charged to it and given back as frames
    complete and when the channel closes or the decoder leaves: a connection whose unfinished
    frame would take the port past its budget stops reading until there is room.

    Example::

        class Int32Decoder(ByteToMessageDecoder):
            def decode(self, ctx, buf, out):
                if buf.readable >= 4:
                    out.append(int.from_bytes(buf.data[buf.pos : buf.pos + 4], "big"))
                    buf.pos += 4
    """

    #: Emit at most one message per read (the rest waits for the next read or the close).
    single_decode: bool = False

    #: Decode received bytes in place (Netty's cumulator hands ``decode`` the received buffer
    #: itself when nothing is cumulated): ``buf.data`` is then a read-only memoryview of a
    #: ``bytes`` or ``memoryview`` message, whose slices ``decode`` may emit without a copy
    #: (the sender of a memoryview must not change its bytes afterwards; a channel never
    #: does). Only what is left undecoded at the end of a read is copied into the
    #: cumulation; a later read completes it with just the bytes :meth:`bytes_wanted` asks
    #: for, and decoding goes on in place. For decoders that only read ``buf.data`` (index,
    #: slice, ``struct.unpack_from``); ignored with ``single_decode``.
    zero_copy: bool = False

    def __init__(self) -> None:
        self._cum: ByteCursor | None = None
        self._decoding = False  # inside decode (a removal then waits until it returns)
        self._feeding = False  # inside channel_read's decoding of a read
        self._removed_while_decoding = False
        self._reentrant: deque[Any] = deque()
        self._fired_read = False
        self._account: BudgetAccount | None = None

    # -- the subclass API ------------------------------------------------------------------

    def decode(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
        """Decode messages from ``buf.data[buf.pos:]`` into ``out``, advancing ``buf.pos``.

        Return without consuming anything to wait for more bytes. Raise a
        :class:`DecoderError` (after advancing ``buf.pos`` past what must be skipped) for bad
        input; any other exception is wrapped in one.
        """
        raise NotImplementedError

    def decode_last(self, ctx: HandlerContext, buf: ByteCursor, out: list[Any]) -> None:
        """Called once when the channel closes; by default decodes what is left, if anything."""
        if buf.readable:
            self.decode(ctx, buf, out)

    def handler_removed0(self, ctx: HandlerContext) -> None:
        """Hook run after the decoder left the pipeline and passed on its bytes."""

    def bytes_wanted(self, buf: ByteCursor) -> int:
        """For ``zero_copy``: how many more bytes (at least 1) the partial input cumulated in
        ``buf`` needs before :meth:`decode` can emit or skip it; the default takes a whole read.
        """
        return 1 << 62

    @property
    def actual_readable_bytes(self) -> int:
        """Bytes received but not decoded yet."""
        return self._cum.readable if self._cum is not None else 0

    # -- the pipeline side -------------------------------------------------------------------

    def channel_read(self, ctx: HandlerContext, msg: Any) -> None:
        if (
            type(msg) is memoryview
            and self._cum is None
            and self.zero_copy
            and not (self._feeding or self._decoding or self.single_decode)
            and msg.readonly
            and len(msg)
            and msg.ndim == 1
            and msg.format == "B"
        ):
            self._read_in_place(ctx, msg)
            return
        if not isinstance(msg, _BYTES_LIKE):
            ctx.fire_channel_read(msg)
            return
        if self._feeding or self._decoding:
            # Re-entered while a read is decoded (from inside decode, or from a handler the
            # decoded messages were fired to): handled after that read, in order.
            self._reentrant.append(msg)
            return
        out: list[Any] = []
        self._feeding = True
        try:
            self._feed(ctx, msg, out)
            while self._reentrant and not ctx.removed:
                self._feed(ctx, self._reentrant.popleft(), out)
        finally:
            self._feeding = False
            self._compact()
            if self._cum is not None or self._account is not None:
                self._charge(ctx, bool(out) or self._fired_read)
            if out:
                self._fired_read = True
                self._fire(ctx, out)
            if self._removed_while_decoding:
                self._removed_while_decoding = False
                self._pass_on_remaining(ctx)

    def _read_in_place(self, ctx: HandlerContext, msg: memoryview) -> None:
        """:meth:`channel_read` of a received read-only view with nothing cumulated (a socket
        read, for a ``zero_copy`` decoder): :meth:`decode` is called on the view itself,
        without the cumulation's bookkeeping when it consumes the whole read (a lone request:
        one frame a read). The same steps as the general path (``_feed``, ``_call_decode``,
        ``_compact``, ``_fire``) in the same order, with the same errors: a read it does not
        consume whole goes on through ``_call_decode``'s loop, as the general path's would.
        """
        out: list[Any] = []
        buf = self._cum = ByteCursor(msg)
        self._feeding = True
        try:
            self._decoding = True
            try:
                self.decode(ctx, buf, out)
            except DecoderError:
                raise
            except Exception as exc:
                raise DecoderError(f"{type(self).__name__}.decode(): {exc!r}") from exc
            finally:
                self._decoding = False
            pos = buf.pos
            removed = ctx.removed or self._removed_while_decoding
            if pos == len(msg) and not (removed or self._reentrant):
                self._cum = None  # the whole read decoded: nothing to keep
            else:
                if not removed:  # _call_decode's checks after its first decode, then its loop
                    if out and pos == 0:
                        raise DecoderError(
                            f"{type(self).__name__}.decode() did not read anything but "
                            "decoded a message."
                        )
                    if 0 < pos < len(msg):
                        self._call_decode(ctx, out)
                while self._reentrant and not ctx.removed:
                    self._feed(ctx, self._reentrant.popleft(), out)
        finally:
            self._feeding = False
            if self._cum is not None:
                self._compact()
            if self._cum is not None or self._account is not None:
                self._charge(ctx, bool(out) or self._fired_read)
            if out:
                self._fired_read = True
                if len(out) == 1:
                    ctx.fire_channel_read(out[0])
                else:
                    ctx.fire_channel_reads(out)
            if self._removed_while_decoding:
                self._removed_while_decoding = False
                self._pass_on_remaining(ctx)

    def channel_read_complete(self, ctx: HandlerContext) -> None:
        fired, self._fired_read = self._fired_read, False
        if not fired and not ctx.channel.auto_read:
            ctx.read()
        ctx.fire_channel_read_complete()

    def channel_inactive(self, ctx: HandlerContext) -> None:
        out: list[Any] = []
        try:
            cum = self._cum
            if cum is not None:
                self._call_decode(ctx, out)
            if not ctx.removed:
                buf = self._cum if self._cum is not None else ByteCursor()
                self._decoding = True
                try:
                    self.decode_last(ctx, buf, out)
                except DecoderError:
                    raise
                except Exception as exc:
                    raise DecoderError(f"{type(self).__name__}.decode_last(): {exc}") from exc
                finally:
                    self._decoding = False
        finally:
            self._cum = None
            self._release()
            if out:
                self._fire(ctx, out)
                ctx.fire_channel_read_complete()
            ctx.fire_channel_inactive()

    def handler_removed(self, ctx: HandlerContext) -> None:
        if self._decoding:
            self._removed_while_decoding = True
            return
        self._pass_on_remaining(ctx)

    # -- internals ---------------------------------------------------------------------------

    def _feed(
        self, ctx: HandlerContext, msg: bytes | bytearray | memoryview, out: list[Any]
    ) -> None:
        """Decode ``msg`` after what is cumulated."""
        if not self.zero_copy or self.single_decode or type(msg) is bytearray:
            self._append(msg)
            self._call_decode(ctx, out)
            return
        view = memoryview(msg)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        if not view.readonly:
            view = view.toreadonly()
        cum = self._owned_cumulation()
        if cum is not None and not view:
            self._call_decode(ctx, out)  # what an error left undecoded
            return
        # Complete the partial input cumulated from earlier reads, copying only the bytes it
        # asks for; the rest of the read is decoded in place.
        while cum is not None and view:
            wanted = max(self.bytes_wanted(cum), 1)
            part, view = view[:wanted], view[wanted:]
            _extend(cum, part)
            try:
                self._call_decode(ctx, out)
            except BaseException:
                _extend(cum, view)  # unconsumed bytes stay for the next read
                raise
            if ctx.removed or self._removed_while_decoding:
                _extend(cum, view)  # passed on raw
                return
            if not cum.readable:
                self._cum = cum = None
        if view:
            self._cum = ByteCursor(view)
            self._call_decode(ctx, out)

    def _owned_cumulation(self) -> ByteCursor | None:
        """The cumulation as a bytearray (a borrowed view's undecoded bytes copied), or None
        when nothing is cumulated."""
        cum = self._cum
        if cum is None:
            return None
        if type(cum.data) is memoryview or not cum.readable:
            rest = cum.data[cum.pos :]
            self._cum = cum = ByteCursor(bytearray(rest)) if rest else None
        return cum

    def _append(self, msg: bytes | bytearray | memoryview) -> None:
        cum = self._owned_cumulation()
        if cum is None:
            self._cum = ByteCursor(bytearray(msg))
        else:
            _extend(cum, msg)

    def _compact(self) -> None:
        cum = self._owned_cumulation()  # a borrowed view's rest is copied: it spans reads
        if cum is not None and cum.pos:
            assert type(cum.data) is bytearray
            del cum.data[: cum.pos]
            cum.pos = 0

    def _call_decode(self, ctx: HandlerContext, out: list[Any]) -> None:
        cum = self._cum
        assert cum is not None
        single = self.single_decode
        while cum.pos < len(cum.data):
            if out:
                self._fired_read = True
                self._fire(ctx, out)
                out.clear()
                if ctx.removed:
                    return
            before = cum.pos
            self._decoding = True
            try:
                self.decode(ctx, cum, out)
            except DecoderError:
                raise
            except Exception as exc:
                raise DecoderError(f"{type(self).__name__}.decode(): {exc!r}") from exc
            finally:
                self._decoding = False
            if ctx.removed or self._removed_while_decoding:
                return
            if not out:
                if cum.pos == before:
                    return
                continue
            if cum.pos == before:
                raise DecoderError(
                    f"{type(self).__name__}.decode() did not read anything but decoded a message."
                )
            if single:
                return

    @staticmethod
    def _fire(ctx: HandlerContext, out: list[Any]) -> None:
        if len(out) == 1:
            ctx.fire_channel_read(out[0])
        else:
            ctx.fire_channel_reads(out)

    def _charge(self, ctx: HandlerContext, progress: bool) -> None:
        """Tell the channel's memory budget (if any) what the cumulation holds now."""
        cum = self._cum
        account = self._account
        if account is None:
            budget = ctx.channel.attributes.get(MEMORY_BUDGET)
            if budget is None:
                return
            self._account = account = budget.account(ctx.channel)
        # what the cumulation's buffer takes (its allocation, which grows ahead of its length)
        account.update(cum.data.__sizeof__() if cum is not None else 0, progress)

    def _release(self) -> None:
        account, self._account = self._account, None
        if account is not None:
            account.close()

    def _pass_on_remaining(self, ctx: HandlerContext) -> None:
        self._release()
        cum, self._cum = self._cum, None
        if cum is not None and cum.readable:
            ctx.fire_channel_read(bytes(memoryview(cum.data)[cum.pos :]))
            ctx.fire_channel_read_complete()
        self.handler_removed0(ctx)
