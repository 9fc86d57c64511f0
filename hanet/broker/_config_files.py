"""A broker's JSON config files (``<store>/config/*.json``), written as RocketMQ writes them.

A write never leaves a half-written file behind (RocketMQ's ``MixAll.string2File``): the new
content goes to ``NAME.tmp`` and is fsynced, the current file becomes ``NAME.bak``, the
temporary file is renamed over ``NAME`` and the directory fsynced. A crash at any point leaves
the old content or the new one.

Reading: a missing file (and no ``.bak``) is an empty start. A file that does not parse (or
whose content the caller rejects) is reported at ERROR with its path and the reason, and the
``.bak`` is read instead, as RocketMQ's ``ConfigManager.load`` does: a start from the previous
write. When the ``.bak`` is missing or unusable too, the broker refuses to start
(:class:`ConfigFileError`, naming the files): the operator decides (move the file away for an
empty start).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from hanet.errors import HanetError
from hanet.protocol import load_body
from hanet.store.lowlevel import fsync_directory

__all__ = ["ConfigFileError", "read_config_file", "write_config_file"]

log = logging.getLogger("hanet.broker")

T = TypeVar("T")


class ConfigFileError(HanetError):
    """A broker config file (``consumerOffset.json``, ``topics.json``) and its ``.bak`` are
    both unusable: the broker does not start."""


def write_config_file(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` as JSON, atomically (see the module docstring).

    Raises:
        OSError: the directory cannot be created or the file written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".tmp")
    data = json.dumps(document, indent=2, sort_keys=True).encode("utf-8")
    with open(temp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    if path.exists():
        os.replace(path, path.with_name(path.name + ".bak"))
    os.replace(temp, path)
    fsync_directory(path.parent)


def _parse(path: Path, parse: Callable[[dict[str, Any]], T]) -> T:
    """Raises ValueError (with the reason) or OSError."""
    # RocketMQ writes maps keyed by numbers with bare keys ({0:12}): read them too.
    document = load_body(path.read_bytes(), path.name)
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    return parse(document)


def read_config_file(path: Path, parse: Callable[[dict[str, Any]], T]) -> T | None:
    """``parse`` of the JSON object in ``path`` (or its ``.bak``), None when neither exists.

    ``parse`` raises ValueError for content it rejects.

    Raises:
        ConfigFileError: the file is unusable and its ``.bak`` missing or unusable too.
    """
    backup = path.with_name(path.name + ".bak")
    if not path.exists():
        if not backup.exists():
            return None
        # A crash between the two renames of a write: the .bak is the last complete one.
        log.warning("%s is missing; reading %s (the previous write)", path, backup)
        try:
            return _parse(backup, parse)
        except (OSError, ValueError) as exc:
            raise ConfigFileError(f"{backup} is unusable: {exc}") from exc
    try:
        return _parse(path, parse)
    except (OSError, ValueError) as exc:
        problem = f"{path} is unusable: {exc}"
    if not backup.exists():
        raise ConfigFileError(
            f"{problem}; no {backup.name} to fall back on: fix the file, or move it away to "
            "start without it"
        )
    try:
        value = _parse(backup, parse)
    except (OSError, ValueError) as exc:
        raise ConfigFileError(
            f"{problem}; {backup} is unusable too: {exc}: fix a file, or move both away to "
            "start without them"
        ) from exc
    log.error("%s; starting from %s (the previous write)", problem, backup)
    return value
