"""A class data sharing archive of Spark's classes, so that short jobs start in seconds.

Most of a short job's start is the JVM loading and verifying some 20,000 classes of Spark's
jars. Java's class data sharing (CDS) maps them from an archive instead. The first quick
session (``spark_session(quick=True)``) asks its JVM to write one when it exits
(``-XX:ArchiveClassesAtExit``, ~150 MB, written in the seconds after the command ends); later
quick sessions map it (``-XX:SharedArchiveFile``, checked with ``-XX:+VerifySharedSpaces``).

The archive lives in ``$XDG_CACHE_HOME/hanet`` (``~/.cache/hanet``), one per pyspark version,
pyspark installation and Java runtime: Java maps an archive only for the class path it was
written with (the jars' paths), so each virtual environment has its own. A JVM writes to a
file of its own (``*.part``); the next session that finds that JVM gone renames it into place.
A JVM that was killed while writing leaves a file that fails the check, and Java then starts
without it (and says nothing: ``-Xlog`` keeps the JVM's own warnings, which it prints on
stdout, quiet). ``HANET_SPARK_CDS=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import attrs

__all__ = ["CdsPlan", "cds_plan"]

_QUIET = ("-Xlog:disable", "-Xlog:all=error:stderr")
_SUFFIX = ".jsa"


@attrs.frozen
class CdsPlan:
    """What the JVM is told, and where a new archive will come from.

    Attributes:
        options: JVM options (map the archive, or write one at exit).
        writing: the ``*.part`` file the JVM writes at exit, or None (it maps one, or CDS
            is off).
    """

    options: tuple[str, ...]
    writing: Path | None

    def launched(self, jvm_pid: int) -> None:
        """Record which JVM writes :attr:`writing` (so a later session knows when it is
        done)."""
        if self.writing is not None:
            self.writing.with_suffix(".pid").write_text(str(jvm_pid))


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hanet"


def _key(spark_version: str, spark_home: str | None) -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java") or ""
    real = os.path.realpath(java)
    stamp = f"{real}:{os.stat(real).st_mtime_ns if os.path.exists(real) else 0}"
    if spark_home is not None:  # the jars' paths: the class path the archive is valid for
        stamp += f":{os.path.realpath(spark_home)}"
    return f"spark-{spark_version}-{hashlib.sha256(stamp.encode()).hexdigest()[:12]}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - someone else's process
        return True
    return True


def _adopt_finished(directory: Path, key: str, archive: Path) -> None:
    """Rename a ``*.part`` archive whose JVM has exited into place; drop the others' leftovers."""
    for part in sorted(directory.glob(f"{key}.*.part")):
        pid_file = part.with_suffix(".pid")
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            continue  # its JVM is starting, or the session did not record it: leave it
        if _alive(pid):
            continue
        pid_file.unlink(missing_ok=True)
        if archive.exists() or part.stat().st_size == 0:
            part.unlink(missing_ok=True)
        else:
            part.replace(archive)


def cds_plan(
    spark_version: str, cache_dir: Path | None = None, *, spark_home: str | None = None
) -> CdsPlan:
    """The CDS options for a quick session's JVM of the pyspark installed at ``spark_home``
    (none with ``HANET_SPARK_CDS=0`` or when the cache directory cannot be written)."""
    if os.environ.get("HANET_SPARK_CDS", "1") == "0":
        return CdsPlan(options=(), writing=None)
    directory = cache_dir or _cache_dir()
    key = _key(spark_version, spark_home)
    archive = directory / f"{key}{_SUFFIX}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _adopt_finished(directory, key, archive)
    except OSError:
        return CdsPlan(options=(), writing=None)
    if archive.exists():
        options = (f"-XX:SharedArchiveFile={archive}", "-XX:+VerifySharedSpaces", *_QUIET)
        return CdsPlan(options=options, writing=None)
    writing = directory / f"{key}.{os.getpid()}.part"
    return CdsPlan(options=(f"-XX:ArchiveClassesAtExit={writing}", *_QUIET), writing=writing)
