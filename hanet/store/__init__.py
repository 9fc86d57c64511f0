"""RocketMQ-compatible commit log store (to be filled in)."""

__all__: list[str] = []
