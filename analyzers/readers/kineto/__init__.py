"""PyTorch-profiler (Kineto) Chrome-trace JSON, plain or gzipped: kernels, ranges, GEMM ops and devices.

``reader.py`` reads a trace (its docstring maps Kineto's fields to the frames' columns); ``text.py`` gives the
file's text as blocks (gzip inflated on the way), ``stream.py`` cuts it into chunks decoded in worker threads;
``native.py`` reads a chunk
of 16 MB and more with the C scanner (``_scan.c``) straight into arrays, which ``scanned.py`` turns into
columns; smaller text, or text the scanner declines, ``decode.py`` decodes with msgspec and ``part.py`` reduces
to the same columns; ``frames.py`` joins the columns into
frames.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..protocol import FormatReader, ReadOptions

if TYPE_CHECKING:
    from ..base import Extract
    from ..source import Source


class KinetoReader(FormatReader):
    """A Chrome-trace JSON object with ``traceEvents`` (or a bare event array), plain or gzipped."""

    kind = "kineto"
    reads_gzip = True  # streamed: a 2 GB trace is never decompressed to disk

    def sniff(self, head: bytes) -> bool:
        from .text import looks_like_trace

        return looks_like_trace(head)

    def read(self, source: Source, options: ReadOptions) -> Extract:
        from .reader import read_kineto

        path = source.path if source.compression == "gz" else source.file()
        return read_kineto(path, workers=options.workers)


READER = KinetoReader()
