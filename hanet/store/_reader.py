"""Read-only access to a commit log directory, for tools (``hanet dump``, ``hanet verify``,
the Spark data source): no lock, no writes, works on read-only copies such as the RocketMQ
fixture.

:class:`CommitLogReader` maps each file read-only in turn and walks records across files,
following blank records, exactly as recovery does.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TypeVar

from ._codec import MessageRecord
from ._errors import StoreLayoutError
from ._index import ScanResult, scan_windows, topic_names
from ._judge import StopKind, judge_stop
from ._mapped_file import file_name
from ._mapped_queue import list_mapped_files
from ._scanner import RecordScanner, ScanStop, StopReason, first_nonzero

__all__ = ["CommitLogReader", "resolve_store_dir"]

T = TypeVar("T")


def resolve_store_dir(path: Path) -> tuple[Path, Path | None]:
    """``(commit log directory, store root or None)`` for a store root or a ``commitlog/`` dir.

    Raises:
        StoreLayoutError: ``path`` is missing or holds no commit log.
    """
    if not path.exists():
        raise StoreLayoutError(f"{path}: no such directory")
    if not path.is_dir():
        raise StoreLayoutError(f"{path}: not a directory")
    if (path / "commitlog").is_dir():
        return path / "commitlog", path
    if list_mapped_files(path) or path.name == "commitlog":
        root = path.parent if (path.parent / "consumequeue").is_dir() else None
        return path, root
    raise StoreLayoutError(f"{path}: not a store (no commitlog/ and no commit log files)")


class CommitLogReader:
    """The files of a commit log directory, checked and mapped read-only on demand.

    Args:
        directory: the ``commitlog/`` directory.
        file_size: the expected file size; by default taken from the files (all must agree).

    Raises:
        StoreLayoutError: no files, files of different (or not the expected) size, a gap, or a
            start offset that is not a multiple of the file size.
    """

    def __init__(self, directory: Path, file_size: int | None = None) -> None:
        self.directory = directory
        self.files = list_mapped_files(directory)
        if not self.files:
            raise StoreLayoutError(f"{directory}: no commit log files")
        sizes = {path.stat().st_size for _, path in self.files}
        if file_size is None:
            if len(sizes) != 1:
                raise StoreLayoutError(
                    f"{directory}: files of different sizes {sorted(sizes)}; "
                    "pass --mapped-file-size"
                )
            file_size = sizes.pop()
        for _, path in self.files:
            actual = path.stat().st_size
            if actual != file_size:
                raise StoreLayoutError(
                    f"{path} has {actual} bytes, not the file size {file_size}"
                    + (
                        f" (this store's files: --mapped-file-size {actual})"
                        if len(sizes) == 1
                        else ""
                    )
                )
        if file_size <= 0:
            raise StoreLayoutError(f"{directory}: empty commit log files")
        self.file_size = file_size
        previous: int | None = None
        for start, path in self.files:
            if start % file_size:
                raise StoreLayoutError(
                    f"{path}: start offset {start} is not a multiple of the file size {file_size}"
                )
            if previous is not None and start != previous + file_size:
                raise StoreLayoutError(
                    f"gap in {directory}: {file_name(previous)} is followed by {path.name}"
                )
            previous = start
        self.stop: ScanStop | None = None
        """Why the last :meth:`records` walk ended (None while it runs)."""
        self.files_read = 0

    @property
    def min_offset(self) -> int:
        """The first file's start offset."""
        return self.files[0][0]

    @property
    def end_offset(self) -> int:
        """The end of the last file."""
        return self.files[-1][0] + self.file_size

    def records(
        self,
        start_offset: int | None = None,
        *,
        check_crc: bool = True,
    ) -> Generator[tuple[int, MessageRecord], None, None]:
        """Yield ``(physical offset, record)`` across files, from ``start_offset`` (a record
        boundary; default the first file's start), following blank records.

        When it ends, :attr:`stop` says why: ``UNWRITTEN`` or ``END`` in the last file is the
        normal end of the data; ``INVALID`` names the first bad record; ``UNWRITTEN`` /
        ``INCOMPLETE`` in a file that is not the last is turned into ``INVALID`` (data goes on
        in the next file, so this one must end with a blank record).
        """

        def scan_file(
            view: memoryview, position: int, start: int
        ) -> Generator[tuple[int, MessageRecord], None, ScanStop | None]:
            scanner = RecordScanner(
                view, position, base_offset=start, check_crc=check_crc, check_physical_offset=True
            )
            for record in scanner:
                yield scanner.record_offset, record
            return scanner.stop

        return self._walk(start_offset, scan_file)

    def index(
        self,
        start_offset: int | None = None,
        *,
        check_crc: bool = True,
    ) -> Generator[tuple[list[str], bytes], None, None]:
        """:meth:`records` as the rows of the record index (``_index.py``): yields
        ``(topics, rows)`` per scanned window, ``rows`` packed :data:`~._index.ROW` structs
        whose topic id indexes ``topics``. Same walk, same :attr:`stop`; no record objects.
        """

        def scan_file(
            view: memoryview, position: int, start: int
        ) -> Generator[tuple[list[str], bytes], None, ScanStop | None]:
            result: ScanResult | None = None
            for result in scan_windows(
                view, position, None, start, check_crc=check_crc, check_physical_offset=True
            ):
                if result.records:
                    yield list(topic_names(view, result.rows)), result.rows
            assert result is not None
            return result.stop(start)

        return self._walk(start_offset, scan_file)

    def _walk(
        self,
        start_offset: int | None,
        scan_file: Callable[[memoryview, int, int], Generator[T, None, ScanStop | None]],
    ) -> Generator[T, None, None]:
        self.stop = None
        offset = self.min_offset if start_offset is None else start_offset
        if not self.min_offset <= offset < self.end_offset:
            detail = f"offset outside the commit log [{self.min_offset}, {self.end_offset})" + (
                " (its older files were deleted)" if offset < self.min_offset else ""
            )
            self.stop = ScanStop(offset, StopReason.INVALID, detail)
            return
        index = (offset - self.min_offset) // self.file_size
        position = offset - self.files[index][0]
        for i in range(index, len(self.files)):
            start, path = self.files[i]
            last = i == len(self.files) - 1
            fd = os.open(path, os.O_RDONLY)
            try:
                mapping = mmap.mmap(fd, self.file_size, access=mmap.ACCESS_READ)
            finally:
                os.close(fd)
            self.files_read += 1
            view = memoryview(mapping)

            def data_after(offset: int, view: memoryview = view, start: int = start) -> int | None:
                following = first_nonzero(view, offset - start)
                return None if following is None else start + following

            try:
                stop = yield from scan_file(view, position, start)
                assert stop is not None
                verdict = judge_stop(
                    stop, start + self.file_size, last_file=last, data_after=data_after
                )
            finally:
                try:
                    view.release()
                    mapping.close()
                except BufferError:  # pragma: no cover - a caller kept a view
                    pass
            position = 0
            if verdict.kind is not StopKind.NEXT_FILE or last:
                self.stop = verdict.stop
                return
