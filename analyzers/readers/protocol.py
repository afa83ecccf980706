"""The seam every reader sits behind: a ``kind``, a sniff of the first bytes, a read of a :class:`Source`.

Perfetto's trace processor is the model: one reader per format behind one interface, chosen by guessing the
format from the start of the content, never from the file name. The importer knows no format: it opens a
:class:`~tracekit.analyzers.readers.source.Source`, asks the registry (``registry.py``) which reader claims it,
and calls that reader's ``check`` (before a run is made) and ``read``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .base import Extract
    from .source import Source


@dataclass(frozen=True)
class ReadOptions:
    """How to read, the same for every reader (each uses what applies to it).

    ``workers``: processes a reader may start for one file (Kineto's chunk decoders), None for its default
    (``tracekit.analyzers.workers.default_workers``); ``engine``: how an SQLite export is read (``auto``: from
    the file's pages where the page reader is built and sure of a table, else ``sqlite3``; Nsight Systems,
    ``nsys.db.ENGINES``)."""

    workers: int | None = None
    engine: str = "auto"


@runtime_checkable
class Reader(Protocol):
    """One file format. ``sniff`` sees the first :data:`~tracekit.analyzers.readers.source.HEAD_BYTES` of the
    content (decompressed) and says whether the format is this one; ``read`` turns the file into frames."""

    kind: str

    def sniff(self, head: bytes) -> bool: ...

    def read(self, source: Source, options: ReadOptions) -> Extract: ...


class FormatReader:
    """A base for readers with the optional steps' defaults: nothing to check, nothing to merge, no names
    claimed whatever the content, gzip not streamed by the reader itself."""

    kind: str = ""
    suffixes: tuple[str, ...] = ()
    """File-name suffixes this reader claims in its turn whatever the content (a renamed file keeps its kind
    only through its content; this is for files whose content carries no mark, such as .nsys-rep reports)."""
    reads_gzip: bool = False
    """The reader inflates gzip itself, as it streams (Kineto): a gzip file it sniffs is not decompressed
    first, and damage past the head is the reader's to report."""
    merges: bool = False
    """Several files of this kind in one run are read in one process and passed together to :meth:`merge`."""

    def sniff(self, head: bytes) -> bool:
        raise NotImplementedError

    def read(self, source: Source, options: ReadOptions) -> Extract:
        raise NotImplementedError

    def check(self, source: Source) -> None:
        """Raise a TracekitError when a file of this kind cannot be read here (a missing tool, a file that
        is not complete), before a run is made for it. Reading it would raise the same."""

    def reads_beside(self, source: Source) -> bool:
        """Whether a read of ``source`` also takes in files beside it, which its copy into raw/ leaves behind
        (SQLite's -wal / -journal). Such a file is read from its copy, as a rebuild of the run will read it;
        any other is read where it is while it is copied."""
        return False

    def merge(self, extracts: list[Extract]) -> list[Extract]:
        """The extracts of every file of this kind in one run, after reading: what one file cannot know alone
        (two CSV exports of one Nsight Compute report hold the same launches). Returns the extracts to keep."""
        return extracts
