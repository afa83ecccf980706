"""Nsight Systems: SQLite exports (``nsys export --type sqlite``) to kernels, memcpy / memset operations, NVTX
ranges and devices (``reader.py``, the memcpy / memset tables in ``memops.py``, the NVTX ranges in
``ranges.py``, table access in ``db.py``: from the file's pages through ``pages.py`` / ``_pages.c``, else
SQL); ``.nsys-rep`` reports are recognised and refused with the export command.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import UnreadableFileError

from ..protocol import FormatReader, ReadOptions

if TYPE_CHECKING:
    from ..base import Extract
    from ..source import Source

SQLITE_MAGIC = b"SQLite format 3\x00"


def sidecars(path: Path) -> list[Path]:
    """The files beside the database ``path`` that SQLite reads with it: a write-ahead log or a rollback
    journal that holds anything (``<name>-wal``, ``<name>-journal``)."""
    found = (Path(f"{path}{side}") for side in ("-wal", "-journal"))
    return [p for p in found if p.exists() and p.stat().st_size > 0]


def sqlite_uri(path: Path) -> str:
    """The URI every read opens the database ``path`` with: read-only and, with no journal beside it
    (:func:`sidecars`), immutable: SQLite then takes no lock and makes no ``-shm`` / ``-wal`` file beside it (a
    WAL-mode file's copy in raw/ got both on every read, so a read changed the run)."""
    uri = path.resolve().as_uri() + "?mode=ro"
    return uri if sidecars(path) else uri + "&immutable=1"


class SqliteExportReader(FormatReader):
    """Any SQLite database: an Nsight Systems export is read; any other gets the precise reason it is not one
    (truncated, malformed, another program's database) from :meth:`check`."""

    kind = "nsys"

    def sniff(self, head: bytes) -> bool:
        return head.startswith(SQLITE_MAGIC)

    def check(self, source: Source) -> None:
        from .reader import _check_file, is_nsys_sqlite

        path = source.file()
        if not is_nsys_sqlite(path):
            _check_file(path)  # raises the precise reason: truncated, malformed, not an nsys export

    def reads_beside(self, source: Source) -> bool:
        """SQLite reads a -wal or -journal file beside the database; a copy into raw/ has none."""
        return source.compression is None and bool(sidecars(source.path))

    def read(self, source: Source, options: ReadOptions) -> Extract:
        from .reader import read_nsys_sqlite

        return read_nsys_sqlite(source.file(), engine=options.engine)


class ReportReader(FormatReader):
    """An Nsight Systems report (.nsys-rep, .qdstrm): not read itself, only through its SQLite export."""

    kind = "nsys-rep"
    suffixes = (".nsys-rep",)

    def sniff(self, head: bytes) -> bool:
        return head.startswith(b"QDSTRM") or b"nsys" in head[:16].lower()

    def check(self, source: Source) -> None:
        plain = source.path.with_name(source.name)  # a compressed report: the name nsys needs it under
        raise UnreadableFileError(
            source.path,
            "is an Nsight Systems report; tracekit reads its SQLite export",
            f"run `nsys export --type sqlite -o {plain.with_suffix('.sqlite')} {plain}` and import the .sqlite",
        )

    def read(self, source: Source, options: ReadOptions) -> Extract:
        self.check(source)
        raise AssertionError("unreachable")


SQLITE = SqliteExportReader()
REPORT = ReportReader()
