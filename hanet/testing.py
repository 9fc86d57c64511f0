"""Test utilities: :class:`EmbeddedChannel` drives handlers with no network and a manual clock."""

from hanet.channel import EmbeddedChannel

__all__ = ["EmbeddedChannel"]
