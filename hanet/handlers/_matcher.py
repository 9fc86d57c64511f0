"""Which messages a typed codec accepts: its type parameter, found once per class.

Netty's ``TypeParameterMatcher`` reads the ``I`` of ``MessageToMessageDecoder<I>`` from the
subclass's generic signature. Python keeps the same information in ``__orig_bases__``: for
``class StringDecoder(MessageToMessageDecoder[bytes])`` the accepted type is ``bytes``. This
module walks those bases, substituting type variables through intermediate generic classes
(``MessageToMessageCodec[I, O]`` forwards ``I`` to its decoder half), and turns the result into
something ``isinstance`` understands.
"""

from __future__ import annotations

import types
import typing
import weakref
from typing import Any, TypeVar

__all__ = ["MessageTypes", "find_type_parameter", "message_types"]

#: What ``isinstance`` accepts as its second argument.
MessageTypes = type | tuple[type, ...]

# Per class (weakly: classes made at run time, in tests say, may go away).
_cache: weakref.WeakKeyDictionary[type, dict[tuple[type, int], MessageTypes]] = (
    weakref.WeakKeyDictionary()
)


def find_type_parameter(cls: type, generic_base: type, index: int) -> Any:
    """The type argument ``index`` of ``generic_base`` as seen from ``cls``, or None.

    None when ``cls`` never fills that parameter in (it subclasses the bare base, or the
    argument is still a type variable).
    """
    found = _walk(cls, generic_base, index, {})
    return None if isinstance(found, TypeVar) else found


def _walk(cls: type, target: type, index: int, subst: dict[Any, Any]) -> Any:
    for base in cls.__dict__.get("__orig_bases__", cls.__bases__):
        origin = typing.get_origin(base) or base
        if not isinstance(origin, type) or origin is typing.Generic:
            continue
        args = tuple(
            subst.get(a, a) if isinstance(a, TypeVar) else a for a in typing.get_args(base)
        )
        if origin is target:
            return args[index] if len(args) > index else None
        if not issubclass(origin, target):
            continue
        params = getattr(origin, "__parameters__", ())
        found = _walk(origin, target, index, dict(zip(params, args, strict=False)))
        if found is not None:
            return found
    return None


def _to_types(arg: Any) -> MessageTypes:
    """``bytes`` -> bytes; ``bytes | str`` -> (bytes, str); ``list[int]`` -> list; Any -> object."""
    if arg is None or arg is Any or isinstance(arg, TypeVar):
        return object
    origin = typing.get_origin(arg)
    if origin is typing.Union or origin is types.UnionType:
        flat: list[type] = []
        for member in typing.get_args(arg):
            member_types = _to_types(member)
            flat.extend(member_types if isinstance(member_types, tuple) else (member_types,))
        return tuple(flat)
    if origin is not None and isinstance(origin, type):
        return origin
    if isinstance(arg, type):
        return arg
    raise TypeError(f"cannot match messages against {arg!r}")


def message_types(cls: type, generic_base: type, index: int = 0) -> MessageTypes:
    """The ``isinstance`` argument for the messages ``cls`` accepts (cached per class).

    ``object`` (accept everything) when the parameter is not filled in, as Netty's matcher
    for ``Object``.
    """
    per_class = _cache.get(cls)
    if per_class is None:
        per_class = _cache[cls] = {}
    found = per_class.get((generic_base, index))
    if found is None:
        found = per_class[generic_base, index] = _to_types(
            find_type_parameter(cls, generic_base, index)
        )
    return found
