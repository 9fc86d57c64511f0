"""Command lines from keywords: ``cli_flags(ha_listen="127.0.0.1:0", json=True)``."""

from __future__ import annotations

__all__ = ["cli_flags"]


def cli_flags(**options: object) -> list[str]:
    """``--name value`` for each keyword (underscores become dashes, values ``str()``), in the
    order given; ``True`` is the bare flag, ``False`` and ``None`` leave the option out."""
    argv: list[str] = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    return argv
