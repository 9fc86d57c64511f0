"""Test utilities: :class:`EmbeddedChannel` drives handlers with no network and a manual clock."""

from ._embedded import EmbeddedChannel

__all__ = ["EmbeddedChannel"]
