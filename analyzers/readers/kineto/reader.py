"""Reader for PyTorch-profiler (Kineto) Chrome-trace JSON: ``.json`` or ``.json.gz`` -> kernels, memops, ranges,
devices.

Parsing streams: the text is never held whole (a 1M-kernel trace is 2.5 GB of JSON). The file is read as blocks
(gzip inflated on the way: ``text.py``); the event array is cut into chunks at event boundaries and each
chunk is decoded by msgspec into typed structs naming only the fields used (``decode.py``), reduced to
columns of the events the frames need (``part.py``), in worker threads on all cores for a large file
(``stream.py``: the C scanner where it was built, else msgspec); the parent joins the columns into frames (``frames.py``). Peak memory is bounded by the
workers' chunks plus the frames themselves, not by the file. Files that are not strict JSON (``NaN``,
``Infinity``, integers past 64 bits) fall back to the stdlib parser, chunk by chunk.

Times: Kineto writes ``ts``/``dur`` in microseconds with up to three decimals (``"ts": 5370240640914.225``),
relative to ``baseTimeNanoseconds`` when the trace has that key (``output_json.cpp``: ``ts = t - base``), and
absolute (Unix) microseconds in older traces. Every time here is integer nanoseconds on the capture's Unix clock:
``base + ts * 1000``, computed from the decimal text of the number, so no float rounding creeps in (a float
holds only 0.25 us at 1.7e15 us). ``displayTimeUnit`` only tells a viewer how to label the axis and is ignored.

Column mapping (Kineto ``args`` -> ``tracekit.frames`` columns):

=====================================  ==========================================================================
kernels column                         Kineto source
=====================================  ==========================================================================
``pid``                                pid of the launching runtime/driver event (``cuda_runtime``, ``Runtime``,
                                       ``cuda_driver``, ``Driver``) with the same ``correlation``; the kernel's own
                                       pid is the device. No launch: the trace's only CPU process, else null.
``launch_tid``, ``launch_start_ns``    tid and start of that launch event; null without one
``device``, ``context``, ``stream``    ``args.device`` (else the kernel pid), ``args.context``, ``args.stream``
                                       (else the number in a ``"stream 7"`` tid)
``correlation_id``                     ``args.correlation``
``grid_*``, ``block_*``                ``args.grid``, ``args.block`` ([x, y, z])
``registers_per_thread``               ``args["registers per thread"]``
``smem_bytes``                         ``args["shared memory"]``: CUPTI's ``staticSharedMemory +
                                       dynamicSharedMemory`` (summed in Kineto's ``metadataJson``), so
                                       ``static_smem_bytes`` and ``dynamic_smem_bytes`` stay null: the split is
                                       not in the file. On AMD it is the group segment size.
``blocks_per_sm``                      ``args["blocks per SM"]`` (grid size / the device's SM count)
``est_occupancy_pct``                  ``args["est. achieved occupancy %"]``: the profiler's estimate from the
                                       launch configuration; null above 48 KiB of shared memory per block, where
                                       it is 0 whatever the kernel does (``part.py`` ``OCCUPANCY_SMEM_LIMIT``)
``short_name``                         the function name: return type, template arguments, parameters and
                                       namespaces dropped
``launch_op``                          name of the innermost ``cpu_op`` (``Operator``) event open on the launching
                                       thread at the launch call (``aten::silu``); null without one
=====================================  ==========================================================================

Ranges: ``user_annotation`` events (``record_function``, including ``ProfilerStep#N``; in 2021-era traces the
steps have category ``Operator``) become ``kind="annotation"`` rows with the event's pid/tid;
``gpu_user_annotation`` events become ``kind="gpu_annotation"`` with ``device`` from ``args.device`` or the pid,
``tid`` = the stream (the event's tid), and ``pid`` from the CPU annotation with the same ``External id``.
``parent_id``, ``depth`` and the GEMM fields are left null: the importer parses names and the join nests ranges.
``cpu_op`` (2021-era: ``Operator``) events of PyTorch GEMM operators (``aten::mm``, ``addmm``, ``bmm``,
``baddbmm``, ``matmul``, ``linear``, ``_scaled_mm``, ``_grouped_mm``, ...: analyzers/readers/torch_ops.py) become
``kind="op"``, ``range_kind="gemm-op"`` rows with ``m``, ``n``, ``k``, ``batch`` and dtypes from ``Input Dims`` /
``Input type`` (``shape_source="kineto-input-dims"``; null without ``record_shapes``) and ``flops`` from the
trace's own ``flops`` arg (``with_flops``). They nest like annotations, so a kernel launched by cuBLAS inside
``aten::addmm`` inside ``aten::linear`` joins to the ``aten::addmm``. Other ops stay out of the frame.

``gpu_memcpy`` / ``gpu_memset`` events (2021-era: ``Memcpy`` / ``Memset``) become ``memops`` rows (``kind``
memcpy / memset, ``name`` as written, ``copy_kind`` from the name's ``Memcpy HtoD``, ``bytes`` from ``args.bytes``;
device, stream and launch as for kernels): GPU time that is no kernel, counted by the step breakdown.

Every kernel is kept, including those outside ``ProfilerStep`` ranges (HolisticTraceAnalysis drops those).
"""

from __future__ import annotations

from pathlib import Path

from tracekit.errors import UnreadableFileError

from ...workers import default_workers
from ..base import Extract, read_progress, source_name
from . import frames as kineto_frames
from .decode import Meta, Notes, first_byte, gc_paused
from .frames import short_kernel_name
from .part import make_part
from .stream import (
    BLOCK_BYTES,
    CHUNK_BYTES,
    Chunk,
    Collected,
    Decoder,
    Head,
    Job,
    collect,
    find_array,
    range_chunks,
    stream_chunks,
)
from .text import (
    MAX_GZIP_BYTES,
    MAX_GZIP_RATIO,
    MIN_GZIP_ALLOWANCE,
    TraceText,
    is_kineto_trace,
)

__all__ = [
    "KIND",
    "MAX_GZIP_BYTES",
    "MAX_GZIP_RATIO",
    "MIN_GZIP_ALLOWANCE",
    "is_kineto_trace",
    "read_kineto",
    "short_kernel_name",
]

KIND = "kineto"
WHOLE = 1 << 62
"""A ``chunk_bytes`` that makes the whole event array one chunk (the reference the tests compare against)."""


def read_kineto(path: Path, *, workers: int | None = None, chunk_bytes: int | None = None) -> Extract:
    """Read a PyTorch-profiler trace into ``kernels``, ``ranges`` and ``devices`` frames.

    ``workers``: threads that decode chunks (default ``tracekit.analyzers.workers.default_workers``: one per
    core, at most 8, for a file of 48 MB of text or more, else none, and none inside a worker process, where
    the import already spreads files over the cores); ``chunk_bytes``: text per
    chunk (``WHOLE``: one chunk). The frames are the same whatever the two are.

    Raises ``UnreadableFileError`` (one line, no traceback) for an empty file, bad gzip, or JSON that is not a
    trace; a truncated file yields the events before the cut with ``partial=True`` and a warning.
    """
    path = Path(path)
    with gc_paused():
        text = TraceText(path)
        if workers is None:
            workers = default_workers(text.estimated_text_bytes())
        got, head, total = _decode_all(text, max(1, workers), chunk_bytes or CHUNK_BYTES)
        return _extract(path, text, got, head, total)


def _decode_all(text: TraceText, workers: int, chunk_bytes: int) -> tuple[Collected, Head | None, int]:
    """Decode the file's chunks in order; returns them, the head (None: the file was decoded whole, having no
    event array) and the text's length."""
    step = min(chunk_bytes, BLOCK_BYTES)
    blocks = text.blocks(step)
    read = b""
    head = None
    for block in blocks:
        read += block
        head = find_array(read)
        if head is not None or first_byte(read) not in (b"", b"{", b"["):
            break
    if head is None and first_byte(read) not in (b"{", b"["):
        raise UnreadableFileError(
            text.path,
            "is not a PyTorch profiler trace (not JSON)",
            "give a .json or .json.gz from torch.profiler",
        )
    if head is None:  # no event array: decode what there is whole, for the errors and salvage it gives
        whole = Chunk(0, len(read), len(read), True, read)
        got = collect(iter([Job(whole, str(text.path), "object", whole=True)]), Decoder(1))
        return got, None, len(read)
    rest = head.text[head.start :]
    head.text = b""
    path = str(text.path)
    if text.plain and workers > 1:
        blocks.close()  # the workers read their own ranges
        chunks = range_chunks(text, head.start, chunk_bytes)
    else:
        chunks = stream_chunks(rest, head.start, blocks, chunk_bytes)
    del read, rest
    # a streamed chunk is cut in the block that takes it past chunk_bytes: it holds less than the two together
    decoder = Decoder(workers)
    sink = read_progress()
    on_chunk = None if sink is None else (lambda end: sink(end, max(end, text.estimated_total())))
    got = collect((Job(c, path, head.form) for c in chunks), decoder, on_chunk)
    return got, head, text.size if text.plain else text.total


def _extract(path: Path, text: TraceText, got: Collected, head: Head | None, total: int) -> Extract:
    """The frames and warnings of a decoded file (or the error it is)."""
    if got.not_a_trace is not None:
        raise UnreadableFileError(path, f"is not a PyTorch profiler trace ({got.not_a_trace})")
    if head is None and got.no_events:
        raise UnreadableFileError(
            path,
            "is JSON but not a PyTorch profiler trace (no traceEvents)",
            "give a trace from torch.profiler",
        )
    if got.cut_at is not None and not got.events:
        raise UnreadableFileError(
            path, "is not valid JSON and no complete events could be recovered", "capture the trace again"
        )
    meta = head.meta.merged(got.meta) if head is not None else got.meta
    notes = ([(0, head.notes)] if head is not None else []) + got.notes
    warnings = [text.warning] if text.warning else []
    warnings += _decode_warnings(notes, meta)
    if got.cut_at is not None:
        warnings.append(
            f"JSON is truncated or corrupt; read the events in the first {got.cut_at} of {total} bytes"
        )
    source = source_name(path)
    base = meta.base_time_ns
    dist = meta.distributed_info if isinstance(meta.distributed_info, dict) else {}
    rank = dist.get("rank") if type(dist.get("rank")) is int else None
    parts = got.parts or [make_part([])]
    frames = kineto_frames.build(parts, base if type(base) is int else 0, source, rank, warnings)
    frames["devices"] = kineto_frames.devices(meta.device_properties, source, rank, warnings)
    return Extract(kind=KIND, source=source, frames=frames, partial=bool(warnings), warnings=warnings)


def _decode_warnings(notes: list[tuple[int, Notes]], meta: Meta) -> list[str]:
    """One line each for bytes that are not UTF-8, events that are not objects and metadata of the wrong type."""
    out = []
    if any(n.utf8 for _, n in notes):
        out.append("some strings hold bytes that are not UTF-8; they are shown as U+FFFD")
    dropped = sum(n.dropped for _, n in notes)
    if dropped:
        before, first = next((b, n.first_dropped) for b, n in notes if n.first_dropped is not None)
        assert first is not None
        out.append(
            f"{dropped} trace events are not JSON objects and were skipped (the first, event {before + first[0]}: "
            f"{first[1]}); the rest was read"
        )
    wrong = []
    props = meta.device_properties
    if props is not None and not (isinstance(props, list) and all(isinstance(p, dict) for p in props)):
        wrong.append("deviceProperties is not a list of objects")
    if meta.distributed_info is not None and not isinstance(meta.distributed_info, dict):
        wrong.append("distributedInfo is not an object")
    if wrong:
        out.append(f"some fields have the wrong type ({'; '.join(wrong)}); the rest was read")
    return out
