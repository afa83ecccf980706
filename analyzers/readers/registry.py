"""Which reader reads a file: every reader tracekit has, in the order their sniffs are tried.

A new format is one module (a :class:`~.protocol.Reader`) and one line in :data:`READERS`. The order matters
only where two sniffs could both claim a file: the binary formats first (their magic bytes are unambiguous), then
JSON traces, then JSON lines, then CSV, whose sniff looks deepest into the text.
"""

from __future__ import annotations

from pathlib import Path

from tracekit.errors import UnreadableFileError

from . import jsonl, kineto, ncu, nsys
from .protocol import FormatReader, Reader
from .source import Source

READERS: list[Reader] = [
    ncu.REPORT,  # .ncu-rep: magic bytes
    nsys.SQLITE,  # any SQLite database: an Nsight Systems export, or the precise reason it is not one
    kineto.READER,  # Chrome-trace JSON with traceEvents, plain or gzipped
    nsys.REPORT,  # .nsys-rep / .qdstrm: read through its SQLite export
    *jsonl.READERS,  # tracekit's own JSONL records (moe-curve, moe-routing, moe, failures, measurements)
    ncu.CSV,  # Nsight Compute CSV export (raw or details page)
]
"""Every reader, in the order their sniffs are tried."""

_DEFAULTS = FormatReader()


def register(reader: Reader, *, before: str | None = None) -> None:
    """Add ``reader`` to :data:`READERS` (last, or before the reader of kind ``before``); a reader of the same
    kind is replaced."""
    for i, known in enumerate(READERS):
        if known.kind == reader.kind:
            READERS[i] = reader
            return
    at = next((i for i, r in enumerate(READERS) if r.kind == before), len(READERS))
    READERS.insert(at, reader)


def unregister(kind: str) -> None:
    """Remove the reader of ``kind`` (a test's own reader, after the test)."""
    READERS[:] = [r for r in READERS if r.kind != kind]


def kinds() -> list[str]:
    return [r.kind for r in READERS]


def reader_for(kind: str) -> Reader:
    """The reader of ``kind``; UnreadableFileError-free: an unknown kind is a bug, KeyError."""
    for reader in READERS:
        if reader.kind == kind:
            return reader
    raise KeyError(kind)


def option(reader: Reader, name: str) -> object:
    """One of :class:`~.protocol.FormatReader`'s optional attributes or steps of ``reader``, or its default (a
    reader may implement the protocol alone)."""
    return getattr(reader, name, getattr(_DEFAULTS, name))


def open_source(path: Path) -> Source:
    """``path`` opened as a :class:`Source`. A gzip file is inflated only as far as its head unless no reader
    that inflates gzip itself (Kineto) claims that head: then its head is read as a full decompression would read
    it, so damage near the start is reported as a damaged file."""
    source = Source(path)
    if source.compression == "gz":
        streamed = source.head_ok and any(option(r, "reads_gzip") and r.sniff(source.head) for r in READERS)
        if not streamed:
            source.validate()
    return source


def empty_file_kind(name: str) -> str | None:
    """The kind of an empty file that is a file of that kind with no rows (a sweep's ``failures.jsonl`` when
    nothing failed), from its name; None for others (an empty file is then unreadable)."""
    return jsonl.own_kind(name)


def detect(source: Source) -> Reader:
    """The reader whose sniff claims ``source``'s head (or, in its turn, its name's suffix). Raises
    UnreadableFileError when none does."""
    for reader in READERS:
        if reader.sniff(source.head) or source.name.endswith(tuple(option(reader, "suffixes"))):  # type: ignore[arg-type]
            return reader
    raise UnreadableFileError(
        source.path,
        "is not a file tracekit reads (Nsight Compute .ncu-rep or CSV export, Nsight Systems SQLite export, "
        "PyTorch profiler trace .json/.json.gz, or tracekit JSONL)",
        "check that you passed the profiler's output file",
    )
