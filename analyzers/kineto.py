"""Reader for PyTorch-profiler (Kineto) Chrome-trace JSON: ``.json`` or ``.json.gz`` -> kernels, ranges, devices.

Parsing: the file is decompressed whole (gzip is detected from its magic bytes, not its name; zlib-ng when
installed) and decoded once with msgspec into small typed structs that name only the fields tracekit uses; other
fields, and the ``args`` of every event that is not a kernel, launch or annotation, are skipped without building
Python objects for them. The whole read of df_index_resolver (53 MB of JSON, 216k events) takes 0.55 s, where
``orjson.loads`` alone takes 0.93 s and the stdlib ``json.loads`` 1.35 s (both build a dict per event).
Files that are not strict JSON (``NaN``, ``Infinity``, integers past 64 bits) fall back to the stdlib parser.

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
``short_name``                         the function name: return type, template arguments, parameters and
                                       namespaces dropped
=====================================  ==========================================================================

Ranges: ``user_annotation`` events (``record_function``, including ``ProfilerStep#N``; in 2021-era traces the
steps have category ``Operator``) become ``kind="annotation"`` rows with the event's pid/tid;
``gpu_user_annotation`` events become ``kind="gpu_annotation"`` with ``device`` from ``args.device`` or the pid,
``tid`` = the stream (the event's tid), and ``pid`` from the CPU annotation with the same ``External id``.
``parent_id``, ``depth`` and the GEMM fields are left null: the importer parses names and the join nests ranges.
``cpu_op`` (2021-era: ``Operator``) events of PyTorch GEMM operators (``aten::mm``, ``addmm``, ``bmm``,
``baddbmm``, ``matmul``, ``linear``, ``_scaled_mm``, ``_grouped_mm``, ...: analyzers/torch_ops.py) become
``kind="op"``, ``range_kind="gemm-op"`` rows with ``m``, ``n``, ``k``, ``batch`` and dtypes from ``Input Dims`` /
``Input type`` (``shape_source="kineto-input-dims"``; null without ``record_shapes``) and ``flops`` from the
trace's own ``flops`` arg (``with_flops``). They nest like annotations, so a kernel launched by cuBLAS inside
``aten::addmm`` inside ``aten::linear`` joins to the ``aten::addmm``. Other ops stay out of the frame.

Every kernel is kept, including those outside ``ProfilerStep`` ranges (HolisticTraceAnalysis drops those).
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import re
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

try:  # zlib-ng inflates 2.5x faster than the stdlib zlib (0.24 s against 0.62 s for 126 MB of trace JSON)
    from zlib_ng import zlib_ng as _zlib
except ImportError:  # pragma: no cover - same results, slower
    import zlib as _zlib

from tracekit.analyzers.base import Extract, fit_rows, source_name
from tracekit.errors import UnreadableFileError
from tracekit.frames import DEVICES, KERNELS, RANGES

from .torch_ops import GEMM_OPS, op_shape

KIND = "kineto"

KERNEL_CATS = frozenset({"kernel", "Kernel"})
LAUNCH_CATS = {"cuda_runtime": 0, "Runtime": 0, "cuda_driver": 1, "Driver": 1}
"""Categories of CPU launch events, with a preference: a runtime call wins over a driver call of the same id."""
CPU_ANNOTATION_CATS = frozenset({"user_annotation"})
GPU_ANNOTATION_CATS = frozenset({"gpu_user_annotation"})
STEP_CATS = frozenset({"Operator", "cpu_op"})
"""Other CPU categories whose ``ProfilerStep#N`` events are kept as annotation ranges (older traces)."""
_BUCKET: dict[str, int] = {
    **dict.fromkeys(KERNEL_CATS, 0),
    **dict.fromkeys(LAUNCH_CATS, 1),
    **dict.fromkeys(CPU_ANNOTATION_CATS, 2),
    **dict.fromkeys(GPU_ANNOTATION_CATS, 3),
    **dict.fromkeys(STEP_CATS, 4),
}

_GZIP_MAGIC = b"\x1f\x8b"
_SNIFF_BYTES = 1 << 20
MAX_GZIP_RATIO = 200
"""A gzip-compressed trace may expand at most this many times its size (trace JSON compresses 10-30x)..."""
MIN_GZIP_ALLOWANCE = 256 << 20
"""... or to this many bytes, whichever is more: a small file of repetitive events may compress further."""
MAX_GZIP_BYTES = 32 << 30
"""... and never past this: the trace is held in memory to be decoded."""
_INFLATE_CHUNK = 16 << 20
_SALVAGE_TRIES = 64


# -- decoding ------------------------------------------------------------------------------------------------
class _Args(msgspec.Struct, gc=False):
    device: Any = None
    context: Any = None
    stream: Any = None
    correlation: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")
    smem: Any = msgspec.field(default=None, name="shared memory")
    external_id: Any = msgspec.field(default=None, name="External id")


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = msgspec.Raw(b"")  # the number's text, parsed exactly in _times_ns
    dur: msgspec.Raw = msgspec.Raw(b"")
    args: msgspec.Raw = msgspec.Raw(b"")  # decoded only for the events we keep (_bulk_args)


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None
    deviceProperties: list[dict[str, Any]] | None = None
    distributedInfo: dict[str, Any] | None = None
    baseTimeNanoseconds: Any = None


_TRACE_DECODER = msgspec.json.Decoder(_Trace)
_EVENTS_DECODER = msgspec.json.Decoder(list[_Event])
_ARGS_DECODER = msgspec.json.Decoder(list[_Args | None])
_ONE_ARGS_DECODER = msgspec.json.Decoder(_Args)
_NO_ARGS = _Args()
_EMPTY = msgspec.Raw(b"")


def _read_bytes(path: Path) -> tuple[bytes, str | None]:
    """The file's JSON text, gunzipped if it starts with the gzip magic; a warning if the gzip stream is cut."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UnreadableFileError(path, f"cannot be read ({exc.strerror or exc})") from exc
    if not raw:
        raise UnreadableFileError(path, "is empty", "capture the trace again; the profiler wrote nothing")
    if not raw.startswith(_GZIP_MAGIC):
        return raw, None
    # Inflated in bounded chunks so a decompression bomb is refused before it fills memory.
    limit = min(MAX_GZIP_BYTES, max(MAX_GZIP_RATIO * len(raw), MIN_GZIP_ALLOWANCE))
    parts: list[bytes] = []
    total = 0
    data = raw
    while data:
        d = _zlib.decompressobj(wbits=31)
        pending = data
        try:
            while not d.eof:
                chunk = d.decompress(pending, _INFLATE_CHUNK)
                total += len(chunk)
                if total > limit:
                    raise UnreadableFileError(
                        path,
                        f"expands past {limit:,} bytes, more than {MAX_GZIP_RATIO}x its size (a decompression "
                        "bomb, or not a trace)",
                        "if it is a real trace, decompress it yourself and import the .json",
                    )
                parts.append(chunk)
                pending = d.unconsumed_tail
                if not pending and len(chunk) < _INFLATE_CHUNK:
                    break  # the input is used up and no output is held back: the end, or a cut stream
        except _zlib.error as exc:
            if not parts:
                raise UnreadableFileError(path, f"is not a valid gzip file ({exc})") from exc
            return b"".join(parts), f"gzip data is corrupt after {total} bytes ({exc})"
        if not d.eof:
            with contextlib.suppress(_zlib.error):
                parts.append(d.flush())
            return b"".join(parts), "gzip stream is truncated (the file was cut short)"
        data = d.unused_data  # a further gzip member, or b""
        if data and not data.startswith(_GZIP_MAGIC):
            break  # trailing garbage after a complete member: gzip(1) ignores it too
    return b"".join(parts), None


def _decode(path: Path, text: bytes) -> tuple[Any, list[str]]:
    """Decode ``text`` into a ``_Trace``; salvage a truncated file; never raise anything but our errors."""
    head = _first_byte(text)
    if head not in (b"{", b"["):
        raise UnreadableFileError(
            path, "is not a PyTorch profiler trace (not JSON)", "give a .json or .json.gz from torch.profiler"
        )
    try:
        return _decode_strict(text), []
    except msgspec.ValidationError as exc:
        return _decode_loose(path, text, exc)
    except msgspec.DecodeError as exc:
        damage_at = _error_byte(exc)
    # Not strict JSON (NaN, huge integers) or cut short: the stdlib parser accepts the former.
    try:
        obj = json.loads(text)
    except UnicodeDecodeError:  # before ValueError, its base class
        # a name holding bytes that are not UTF-8: keep every event, those bytes become U+FFFD
        trace, warnings = _decode(path, text.decode("utf-8", "replace").encode())
        return trace, ["some strings hold bytes that are not UTF-8; they are shown as U+FFFD", *warnings]
    except (ValueError, RecursionError):
        obj = None
    if obj is not None:
        # re-encode as strict JSON (NaN -> null, integers past 64 bits -> null) and decode as usual
        strict = msgspec.json.encode(_strict(obj))
        try:
            return _decode_strict(strict), []
        except msgspec.ValidationError as exc:
            return _decode_loose(path, strict, exc)
    salvaged = _salvage(text, damage_at)
    if salvaged is None:
        raise UnreadableFileError(
            path, "is not valid JSON and no complete events could be recovered", "capture the trace again"
        )
    trace, kept_bytes = salvaged
    return trace, [
        f"JSON is truncated or corrupt; read the events in the first {kept_bytes} of {len(text)} bytes"
    ]


class _LooseTrace(msgspec.Struct, gc=False):
    traceEvents: msgspec.Raw = msgspec.Raw(b"")
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None


_ONE_EVENT_DECODER = msgspec.json.Decoder(_Event)
_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])


def _decode_loose(path: Path, text: bytes, exc: msgspec.ValidationError) -> tuple[Any, list[str]]:
    """Valid JSON that does not fit the trace's types (an event that is a number, ``deviceProperties`` that is
    text: a damaged file): keep every event that is an object and say how many were not. Raises
    UnreadableFileError when ``traceEvents`` itself is not a list."""
    try:
        if _first_byte(text) == b"[":
            loose, raw_events = _LooseTrace(), _RAW_LIST_DECODER.decode(text)
        else:
            loose = msgspec.json.decode(text, type=_LooseTrace)
            raw_events = _RAW_LIST_DECODER.decode(loose.traceEvents) if loose.traceEvents else None
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise UnreadableFileError(path, f"is not a PyTorch profiler trace ({exc})") from exc
    events: list[_Event] = []
    for raw in raw_events or ():
        try:
            events.append(_ONE_EVENT_DECODER.decode(raw))
        except msgspec.ValidationError:
            continue
    props = loose.deviceProperties
    trace = _Trace(
        traceEvents=events if raw_events is not None else None,
        deviceProperties=props if isinstance(props, list) else None,
        distributedInfo=loose.distributedInfo if isinstance(loose.distributedInfo, dict) else None,
        baseTimeNanoseconds=loose.baseTimeNanoseconds,
    )
    dropped = len(raw_events or ()) - len(events)
    what = (
        f"{dropped} of {len(raw_events or ())} trace events are not JSON objects and were skipped"
        if dropped
        else "some fields have the wrong type"
    )
    return trace, [f"{what} (first: {exc}); the rest was read"]


def _strict(obj: Any) -> Any:
    """``obj`` with non-finite floats and integers outside 64 bits replaced by None (stdlib-parsed input only)."""
    if isinstance(obj, dict):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_strict(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if type(obj) is int and not -(1 << 63) <= obj < (1 << 64):
        return None
    return obj


def _first_byte(text: bytes) -> bytes:
    """The first non-blank byte (without copying a multi-GB buffer, as ``lstrip`` would)."""
    m = _LEADING_BLANK.match(text)
    return text[m.end() : m.end() + 1] if m else b""


_LEADING_BLANK = re.compile(rb"[ \t\r\n]*")


def _decode_strict(text: bytes) -> Any:
    if _first_byte(text) == b"[":
        return _Trace(traceEvents=_EVENTS_DECODER.decode(text))
    return _TRACE_DECODER.decode(text)


def _error_byte(exc: Exception) -> int | None:
    """Where msgspec stopped reading (``... (byte 1234)``), if it says."""
    m = _AT_BYTE.search(str(exc))
    return int(m[1]) if m else None


_AT_BYTE = re.compile(r"\(byte (\d+)\)")


def _salvage(text: bytes, damage_at: int | None = None) -> tuple[Any, int] | None:
    """Cut a truncated trace after its last complete event and close the JSON; None if nothing parses.

    ``damage_at``: the byte where the decoder first failed. Each try starts before the point the last one failed
    at, so damage in the middle of a 50 MB trace costs a few decodes, not one per event after it."""
    end = len(text) if damage_at is None else min(len(text), damage_at)
    for _ in range(_SALVAGE_TRIES):
        cut = text.rfind(b"}", 0, end)
        if cut < 0:
            return None
        end = cut
        for closing in (b"]}", b"]", b"]}]}"):
            candidate = text[: cut + 1] + closing
            try:
                trace = _decode_strict(candidate)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                at = _error_byte(exc)
                if at is not None and at < cut:  # the candidate breaks before the cut: retry before that
                    end = min(end, at)
                continue
            if trace.traceEvents:
                return trace, cut + 1
    return None


# -- helpers ---------------------------------------------------------------------------------------------------
_DECIMAL = r'^\s*"?(-?)(\d+)(?:\.(\d*))?"?\s*$'


def _times_ns(raw: list[msgspec.Raw], base_ns: int) -> pl.Series:
    """Microsecond numbers as JSON text -> integer ns + ``base_ns``, exactly (no float on the way)."""
    text = pl.Series(b"\n".join(raw).decode().split("\n") if raw else [], dtype=pl.String)
    df = pl.DataFrame({"t": text}).with_columns(m=pl.col("t").str.extract_groups(_DECIMAL))
    sign = pl.when(pl.col("m").struct.field("1") == "-").then(-1).otherwise(1)
    whole = pl.col("m").struct.field("2").cast(pl.Int64, strict=False)
    frac = pl.col("m").struct.field("3").fill_null("")
    digits3 = (frac + "000").str.slice(0, 3).cast(pl.Int64, strict=False)
    round_up = (frac.str.slice(3, 1).fill_null("").replace("", "0").cast(pl.Int64, strict=False) >= 5).cast(
        pl.Int64
    )
    exact = sign * (whole * 1000 + digits3 + round_up)
    # Anything else (exponent notation, NaN) goes through a float; null if that fails too.
    approx = (pl.col("t").cast(pl.Float64, strict=False) * 1000).round(0)
    approx = pl.when(approx.is_finite()).then(approx).cast(pl.Int64, strict=False)
    out = df.select(pl.when(whole.is_not_null()).then(exact).otherwise(approx).alias("ns"))["ns"]
    return out + base_ns


def _bulk_args(events: list[_Event]) -> list[_Args]:
    """The ``args`` of ``events``, decoded in one call (an event without args gets an empty ``_Args``)."""
    if not events:
        return []
    text = b"[" + b",".join([e.args or b"null" for e in events]) + b"]"
    try:
        decoded = _ARGS_DECODER.decode(text)
    except msgspec.ValidationError:  # some event's args is not an object: decode one by one
        decoded = []
        for e in events:
            try:
                decoded.append(_ONE_ARGS_DECODER.decode(e.args) if e.args else None)
            except msgspec.ValidationError:
                decoded.append(None)
    return [a if a is not None else _NO_ARGS for a in decoded]


def _int_series(values: list[Any], dtype: pl.DataType | type[pl.DataType] = pl.Int64) -> pl.Series:
    """Integers as found; anything else (strings like "0x0", floats, out-of-range numbers) as null."""
    return pl.Series([v if type(v) is int else None for v in values], dtype=pl.Int64, strict=False).cast(
        dtype, strict=False
    )


def _as_int(value: Any) -> int | None:
    """An id that may be written as a number or a numeric string ("25738"); None otherwise."""
    if type(value) is int:
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


_STREAM_TID = re.compile(r"stream\s*(\d+)")


def _dims(values: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    xs, ys, zs = [], [], []
    for v in values:
        if isinstance(v, list) and len(v) == 3:
            xs.append(v[0])
            ys.append(v[1])
            zs.append(v[2])
        else:
            xs.append(None)
            ys.append(None)
            zs.append(None)
    return xs, ys, zs


def short_kernel_name(name: str) -> str:
    """``void ns::foo<int, 4>(float*, int)`` -> ``foo``: the function name without return type, templates, args."""
    s = name.strip()
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            c = s[i]
            if c == ")":
                depth += 1
            elif c == "(":
                depth -= 1
                if depth == 0:
                    s = s[:i]
                    break
    out: list[str] = []
    depth = 0
    for c in s:
        if c == "<":
            depth += 1
        elif c == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(c)
    s = "".join(out).strip()
    s = s.rsplit(" ", 1)[-1] if " " in s and "(" not in s else s
    s = s.rsplit("::", 1)[-1]
    return s or name


# -- frames ----------------------------------------------------------------------------------------------------
def _kernels(
    kernels: list[Any],
    launches: dict[int, Any],
    base_ns: int,
    single_pid: int | None,
    source: str,
    rank: int | None,
) -> tuple[pl.DataFrame, int]:
    args = _bulk_args(kernels)
    corr = [a.correlation for a in args]
    launch = [launches.get(c) if type(c) is int else None for c in corr]
    gx, gy, gz = _dims([a.grid for a in args])
    bx, by, bz = _dims([a.block for a in args])
    stream = []
    for a, e in zip(args, kernels, strict=True):
        s = a.stream
        if type(s) is not int:
            s = None
            if isinstance(e.tid, str):
                m = _STREAM_TID.search(e.tid)
                s = int(m.group(1)) if m else None
            elif type(e.tid) is int:
                s = e.tid
        stream.append(s)
    device = [
        a.device if type(a.device) is int else (e.pid if type(e.pid) is int else None)
        for a, e in zip(args, kernels, strict=True)
    ]
    pid = [(_as_int(x.pid) if x is not None else single_pid) for x in launch]
    names = [e.name if isinstance(e.name, str) else "" for e in kernels]
    shorts: dict[str, str] = {}
    for n in set(names):
        shorts[n] = short_kernel_name(n)
    start = _times_ns([e.ts for e in kernels], base_ns)
    dur = _times_ns([e.dur for e in kernels], 0)
    launch_start = _times_ns([x.ts if x is not None else _EMPTY for x in launch], base_ns)
    n_missing_launch = sum(1 for x in launch if x is None)
    df = pl.DataFrame(
        {
            "source": pl.Series([source] * len(kernels), dtype=pl.String),
            "rank": pl.Series([rank] * len(kernels), dtype=pl.Int32),
            "pid": _int_series(pid),
            "device": _int_series(device, pl.Int32),
            "context": _int_series([a.context for a in args]),
            "stream": _int_series(stream),
            "correlation_id": _int_series(corr),
            "name": pl.Series(names, dtype=pl.String),
            "short_name": pl.Series([shorts[n] for n in names], dtype=pl.String),
            "start_ns": start,
            "duration_ns": dur,
            "grid_x": _int_series(gx, pl.Int32),
            "grid_y": _int_series(gy, pl.Int32),
            "grid_z": _int_series(gz, pl.Int32),
            "block_x": _int_series(bx, pl.Int32),
            "block_y": _int_series(by, pl.Int32),
            "block_z": _int_series(bz, pl.Int32),
            "registers_per_thread": _int_series([a.registers for a in args], pl.Int32),
            "smem_bytes": _int_series([a.smem for a in args]),
            "launch_tid": _int_series([_as_int(x.tid) if x is not None else None for x in launch]),
            "launch_start_ns": launch_start,
        }
    )
    df = (
        df.with_columns(end_ns=pl.col("start_ns") + pl.col("duration_ns"))
        .sort("start_ns", "stream", nulls_last=True, maintain_order=True)
        .with_row_index("kernel_id")
        .with_columns(pl.col("kernel_id").cast(pl.Int64))
    )
    return KERNELS.conform(df), n_missing_launch


def _ranges(
    cpu: list[Any],
    gpu: list[Any],
    base_ns: int,
    single_pid: int | None,
    source: str,
    rank: int | None,
    ops: pl.DataFrame | None = None,
) -> pl.DataFrame:
    events = cpu + gpu
    kind = ["annotation"] * len(cpu) + ["gpu_annotation"] * len(gpu)
    cpu_args, gpu_args = _bulk_args(cpu), _bulk_args(gpu)
    ext_pid: dict[int, int] = {}
    for e, a in zip(cpu, cpu_args, strict=True):
        x = a.external_id
        p = _as_int(e.pid)
        if type(x) is int and p is not None:
            ext_pid.setdefault(x, p)
    pid: list[int | None] = [_as_int(e.pid) for e in cpu]
    tid: list[int | None] = [_as_int(e.tid) for e in cpu]
    device: list[int | None] = [None] * len(cpu)
    for e, a in zip(gpu, gpu_args, strict=True):
        x = a.external_id
        pid.append(ext_pid.get(x, single_pid) if type(x) is int else single_pid)
        d = a.device if type(a.device) is int else _as_int(e.pid)
        device.append(d)
        t = _as_int(e.tid)
        if t is None and isinstance(e.tid, str):
            m = _STREAM_TID.search(e.tid)
            t = int(m.group(1)) if m else None
        tid.append(t)
    start = _times_ns([e.ts for e in events], base_ns)
    dur = _times_ns([e.dur for e in events], 0)
    df = pl.DataFrame(
        {
            "source": pl.Series([source] * len(events), dtype=pl.String),
            "rank": pl.Series([rank] * len(events), dtype=pl.Int32),
            "kind": pl.Series(kind, dtype=pl.String),
            "name": pl.Series([e.name if isinstance(e.name, str) else "" for e in events], dtype=pl.String),
            "pid": _int_series(pid),
            "tid": _int_series(tid),
            "device": _int_series(device, pl.Int32),
            "start_ns": start,
            "end_ns": start + dur,
        }
    )
    if ops is not None and ops.height:
        ops = ops.with_columns(
            pl.lit(source, pl.String).alias("source"), pl.lit(rank, pl.Int32).alias("rank")
        )
        df = pl.concat([RANGES.conform(df), RANGES.conform(ops)], how="vertical").drop("range_id")
    df = (
        df.sort("start_ns", "kind", nulls_last=True, maintain_order=True)
        .with_row_index("range_id")
        .with_columns(pl.col("range_id").cast(pl.Int64))
    )
    return RANGES.conform(df)


class _OpArgs(msgspec.Struct, gc=False):
    dims: Any = msgspec.field(default=None, name="Input Dims")
    types: Any = msgspec.field(default=None, name="Input type")
    concrete: Any = msgspec.field(default=None, name="Concrete Inputs")
    flops: Any = None


_OP_ARGS_DECODER = msgspec.json.Decoder(_OpArgs)


def _op_args(event: Any) -> _OpArgs:
    """The shape fields of one op event's args (an empty ``_OpArgs`` when they are missing or malformed)."""
    if not event.args:
        return _OpArgs()
    try:
        return _OP_ARGS_DECODER.decode(event.args)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return _OpArgs()


def _op_ranges(ops: list[Any], base_ns: int) -> pl.DataFrame:
    """``kind="op"``, ``range_kind="gemm-op"`` ranges for the ``cpu_op`` events of PyTorch GEMM operators
    (torch_ops.GEMM_OPS), with M, N, K, batch and dtypes from ``Input Dims`` / ``Input type`` and the trace's
    own ``flops``. Other ops are left out: a trace may hold millions of them and they are not GEMMs."""
    if not ops:
        return RANGES.empty()
    rows: list[dict[str, Any]] = []
    for e in ops:
        a = _op_args(e)
        shape = op_shape(e.name, a.dims, a.types, a.concrete)
        known = shape is not None and shape.m is not None
        flops = a.flops if type(a.flops) in (int, float) and math.isfinite(a.flops) and a.flops >= 0 else None
        rows.append(
            {
                "kind": "op",
                "name": e.name,
                "pid": _as_int(e.pid),
                "tid": _as_int(e.tid),
                "range_kind": "gemm-op",
                "op": shape.op if shape else None,
                "m": shape.m if shape else None,
                "n": shape.n if shape else None,
                "k": shape.k if shape else None,
                "batch": shape.batch if shape else None,
                "dtype_a": shape.dtype_a if shape else None,
                "dtype_b": shape.dtype_b if shape else None,
                "dtype_out": shape.dtype_out if shape else None,
                "flops": float(flops) if flops is not None else None,
                "shape_source": "kineto-input-dims" if known else None,
            }
        )
    schema = {k: RANGES.schema[k] for k in rows[0]}
    df = pl.DataFrame(rows, schema=schema)
    start = _times_ns([e.ts for e in ops], base_ns)
    dur = _times_ns([e.dur for e in ops], 0)
    return df.with_columns(start.alias("start_ns"), (start + dur).alias("end_ns"))


def _devices(
    props: list[dict[str, Any]] | None, source: str, rank: int | None, warnings: list[str]
) -> pl.DataFrame:
    """``deviceProperties`` as device rows; a value past its column's range (a damaged file) is null and said."""
    rows = []
    for p in props or []:
        if not isinstance(p, dict):
            continue
        major, minor = p.get("computeMajor"), p.get("computeMinor")
        rows.append(
            {
                "source": source,
                "rank": rank,
                "device": _as_int(p.get("id")),
                "name": p.get("name") if isinstance(p.get("name"), str) else None,
                "compute_capability": f"{major}.{minor}"
                if type(major) is int and type(minor) is int
                else None,
                "sm_count": _as_int(p.get("numSms")),
                "memory_bytes": _as_int(p.get("totalGlobalMem")),
                "smem_per_block_optin_bytes": _as_int(p.get("sharedMemPerBlockOptin")),
                "smem_per_sm_bytes": _as_int(
                    p.get("sharedMemPerMultiprocessor", p.get("maxSharedMemoryPerMultiProcessor"))
                ),
                "regs_per_sm": _as_int(p.get("regsPerMultiprocessor")),
            }
        )
    df, bad = fit_rows(rows, DEVICES)
    if bad:
        warnings.append(f"{bad} deviceProperties values are out of range for their column and are left null")
    return DEVICES.conform(df)


# -- public API ------------------------------------------------------------------------------------------------
def is_kineto_trace(path: Path) -> bool:
    """True if ``path`` looks like a Chrome-trace JSON (plain or gzipped) with a ``traceEvents`` key near the start."""
    try:
        with Path(path).open("rb") as f:
            head = f.read(1 << 16)
            if head.startswith(_GZIP_MAGIC):
                d = _zlib.decompressobj(wbits=31)
                text = d.decompress(head, _SNIFF_BYTES)
                while len(text) < _SNIFF_BYTES and not d.eof:
                    more = f.read(1 << 16)
                    if not more:
                        break
                    text += d.decompress(d.unconsumed_tail + more, _SNIFF_BYTES - len(text))
            else:
                text = head + f.read(_SNIFF_BYTES - len(head))
    except (OSError, _zlib.error):
        return False
    text = text.lstrip()
    if text[:1] not in (b"{", b"["):
        return False
    return b'"traceEvents"' in text or (text[:1] == b"[" and b'"ph"' in text[:4096])


@contextlib.contextmanager
def _gc_paused() -> Any:
    """Python's cyclic garbage collector off for the duration. Decoding builds millions of small objects (the
    ``grid`` / ``block`` lists of every kernel's args); each automatic collection walks every live object, so on
    a 1M-kernel trace (11M events) the collector took 35 of 56 s (benchmarks/bench_kineto.py). Nothing here
    makes reference cycles, so nothing waits for the collector."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_kineto(path: Path) -> Extract:
    """Read a PyTorch-profiler trace into ``kernels``, ``ranges`` and ``devices`` frames.

    Raises ``UnreadableFileError`` (one line, no traceback) for an empty file, bad gzip, or JSON that is not a
    trace; a truncated file yields the events before the cut with ``partial=True`` and a warning.
    """
    with _gc_paused():
        return _read_kineto(Path(path))


def _read_kineto(path: Path) -> Extract:
    text, gz_warning = _read_bytes(path)
    trace, warnings = _decode(path, text)
    del text
    if gz_warning:
        warnings.insert(0, gz_warning)
    if trace.traceEvents is None:
        raise UnreadableFileError(
            path,
            "is JSON but not a PyTorch profiler trace (no traceEvents)",
            "give a trace from torch.profiler",
        )
    source = source_name(path)
    base = trace.baseTimeNanoseconds
    base_ns = base if type(base) is int else 0
    dist = trace.distributedInfo if isinstance(trace.distributedInfo, dict) else {}
    rank = dist.get("rank") if type(dist.get("rank")) is int else None

    buckets: tuple[list[_Event], ...] = ([], [], [], [], [])
    which = _BUCKET.get
    for e in trace.traceEvents:
        i = which(e.cat) if type(e.cat) is str else None  # a damaged file's "cat": [1] is no category
        if i is not None:
            buckets[i].append(e)
    kern, launch_events, cpu_events, gpu_events, other_cpu = buckets
    kernels = [e for e in kern if e.ph == "X" or e.ph is None]
    cpu_ranges = [e for e in cpu_events if e.ph == "X"]
    cpu_ranges += [
        e for e in other_cpu if e.ph == "X" and isinstance(e.name, str) and e.name.startswith("ProfilerStep#")
    ]
    gpu_ranges = [e for e in gpu_events if e.ph == "X"]
    gemm_ops = [e for e in other_cpu if e.ph == "X" and isinstance(e.name, str) and e.name in GEMM_OPS]
    del buckets, kern, cpu_events, gpu_events, other_cpu

    launches: dict[int, _Event] = {}
    launch_pref: dict[int, int] = {}
    ambiguous: set[int] = set()
    cpu_pids = {p for p in (_as_int(e.pid) for e in cpu_ranges) if p is not None}
    for e, a in zip(launch_events, _bulk_args(launch_events), strict=True):
        c = a.correlation
        if type(c) is not int:
            continue
        pref = LAUNCH_CATS[e.cat]
        p = _as_int(e.pid)
        if p is not None:
            cpu_pids.add(p)
        old = launches.get(c)
        if old is None:
            launches[c] = e
            launch_pref[c] = pref
        elif _as_int(old.pid) != _as_int(e.pid):
            ambiguous.add(c)
        elif pref < launch_pref[c]:
            launches[c] = e
            launch_pref[c] = pref
    for c in ambiguous:
        del launches[c]
    if ambiguous:
        warnings.append(
            f"{len(ambiguous)} correlation ids belong to launches in more than one process; "
            "their kernels have no launching pid/tid"
        )
    single_pid = next(iter(cpu_pids)) if len(cpu_pids) == 1 else None

    kframe, _missing = _kernels(kernels, launches, base_ns, single_pid, source, rank)
    frames = {
        "kernels": kframe,
        "ranges": _ranges(
            cpu_ranges, gpu_ranges, base_ns, single_pid, source, rank, _op_ranges(gemm_ops, base_ns)
        ),
        "devices": _devices(trace.deviceProperties, source, rank, warnings),
    }
    return Extract(kind=KIND, source=source, frames=frames, partial=bool(warnings), warnings=warnings)
