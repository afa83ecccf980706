"""Decoded Kineto events of one chunk -> a ``Part``: compact polars columns of the events the frames use.

Only five kinds of events are kept (the rest of a trace, often 90% of it, is dropped here, in the worker that
decoded it): kernels, launches (runtime / driver calls that carry the ``correlation`` linking a kernel to the CPU
thread that launched it), CPU annotations (``user_annotation``, and older traces' ``ProfilerStep#N`` operators),
GPU annotations and the ``cpu_op`` events of PyTorch GEMM operators. Everything that depends on one event alone
is computed here (times to integer ns, ids, streams, op shapes), so the parent only concatenates and joins
(``frames.py``). Times are relative to the trace's base time, which may only be known once the file's end
is read; the parent adds it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import msgspec
import polars as pl

from tracekit.frames import RANGES

from ..torch_ops import is_gemm_op, op_shape
from .decode import _Event

KERNEL_CATS = frozenset({"kernel", "Kernel"})
MEMOP_CATS = {"gpu_memcpy": "memcpy", "Memcpy": "memcpy", "gpu_memset": "memset", "Memset": "memset"}
"""Categories of memcpy / memset events (2021-era traces capitalise them), with the memops ``kind`` of each."""
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
    **dict.fromkeys(MEMOP_CATS, 5),
}
_STREAM_TID = re.compile(r"stream\s*(\d+)")
_COPY_KIND = re.compile(r"^Memcpy\s+(\w+)")
"""The direction in Kineto's memcpy names: ``Memcpy HtoD (Pageable -> Device)`` -> ``HtoD``."""


class _Args(msgspec.Struct, gc=False):
    device: Any = None
    context: Any = None
    stream: Any = None
    correlation: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")
    smem: Any = msgspec.field(default=None, name="shared memory")
    blocks_per_sm: Any = msgspec.field(default=None, name="blocks per SM")
    occupancy: Any = msgspec.field(default=None, name="est. achieved occupancy %")
    external_id: Any = msgspec.field(default=None, name="External id")
    bytes: Any = None


class _LaunchArgs(msgspec.Struct, gc=False):
    correlation: Any = None


class _RangeArgs(msgspec.Struct, gc=False):
    device: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")


_ARGS_DECODERS: dict[type, tuple[msgspec.json.Decoder[Any], msgspec.json.Decoder[Any]]] = {
    t: (msgspec.json.Decoder(list[t | None]), msgspec.json.Decoder(t))  # type: ignore[valid-type]
    for t in (_Args, _LaunchArgs, _RangeArgs)
}

OP_SCHEMA = {
    k: RANGES.schema[k]
    for k in (
        "kind",
        "name",
        "pid",
        "tid",
        "range_kind",
        "op",
        "m",
        "n",
        "k",
        "batch",
        "dtype_a",
        "dtype_b",
        "dtype_out",
        "flops",
        "shape_source",
    )
}
"""Columns of the GEMM-op ranges a part holds (``start_rel`` / ``dur`` besides)."""


@dataclass
class Part:
    """The kept events of one chunk, as frames (times in ns relative to the base time; nulls where unknown)."""

    kernels: pl.DataFrame
    launches: pl.DataFrame
    cpu: pl.DataFrame
    """``user_annotation`` ranges."""
    steps: pl.DataFrame
    """``ProfilerStep#N`` operators of older traces (after ``cpu`` in the ranges, as the reader always had it)."""
    gpu: pl.DataFrame
    ops: pl.DataFrame
    cpu_ops: pl.DataFrame
    """Every ``cpu_op`` (2021-era: ``Operator``) event: name, pid, tid, start and duration, to find the op that
    launched each kernel (``frames.py``)."""
    memops: pl.DataFrame
    """``gpu_memcpy`` / ``gpu_memset`` events (2021-era: ``Memcpy`` / ``Memset``)."""


def make_part(events: list[_Event]) -> Part:
    """Sort ``events`` into the kinds the frames use and turn each kind into columns."""
    buckets: tuple[list[_Event], ...] = ([], [], [], [], [], [])
    which = _BUCKET.get
    for e in events:
        i = which(e.cat) if type(e.cat) is str else None  # a damaged file's "cat": [1] is no category
        if i is not None:
            buckets[i].append(e)
    kern, launch, cpu, gpu, other, mem = buckets
    kernels = [e for e in kern if e.ph == "X" or e.ph is None]
    steps: list[_Event] = []
    ops: list[_Event] = []  # a subset of cpu_ops: PyTorch GEMM operators
    cpu_ops: list[_Event] = []
    for e in other:  # one pass: a trace's cpu_op events outnumber its kernels
        name = e.name
        if e.ph == "X" and isinstance(name, str):
            if name.startswith("ProfilerStep#"):
                steps.append(e)
            else:
                cpu_ops.append(e)
                if is_gemm_op(name):
                    ops.append(e)
    cpu = [e for e in cpu if e.ph == "X"]
    gpu = [e for e in gpu if e.ph == "X"]
    mem = [e for e in mem if e.ph == "X"]
    launches, launch = _launches(launch)
    # every time of the part in one conversion (its fixed cost, ~1 ms, is paid once per chunk, not per column)
    kinds = (kernels, launch, cpu, steps, gpu, ops, cpu_ops, mem)
    raw = [e.ts for k in kinds for e in k] + [e.dur for k in kinds for e in k]
    ns = times_ns(raw)
    n = len(raw) // 2
    frames = (
        _kernels(kernels),
        launches,
        _cpu_ranges(cpu),
        _cpu_ranges(steps),
        _gpu_ranges(gpu),
        _op_ranges(ops),
        _cpu_ops(cpu_ops),
        _memops(mem),
    )
    timed = []
    at = 0
    for k, df in zip(kinds, frames, strict=True):
        df = df.with_columns(ns.slice(at, len(k)).alias("start_rel"))
        if k is not launch:
            df = df.with_columns(ns.slice(n + at, len(k)).alias("dur"))
        timed.append(df)
        at += len(k)
    return Part(*timed)


def _stream(a: _Args, e: _Event) -> int | None:
    """A GPU event's stream: ``args.stream``, else the number in a ``"stream 7"`` tid, else an integer tid."""
    if type(a.stream) is int:
        return a.stream
    if isinstance(e.tid, str):
        m = _STREAM_TID.search(e.tid)
        return int(m.group(1)) if m else None
    return e.tid if type(e.tid) is int else None


def _kernels(kernels: list[_Event]) -> pl.DataFrame:
    args = bulk_args(kernels)
    gx, gy, gz = _dims([a.grid for a in args])
    bx, by, bz = _dims([a.block for a in args])
    stream = [_stream(a, e) for a, e in zip(args, kernels, strict=True)]
    device = [
        a.device if type(a.device) is int else (e.pid if type(e.pid) is int else None)
        for a, e in zip(args, kernels, strict=True)
    ]
    return pl.DataFrame(
        {
            "name": pl.Series([e.name if isinstance(e.name, str) else "" for e in kernels], dtype=pl.String),
            "device": int_series(device, pl.Int32),
            "context": int_series([a.context for a in args]),
            "stream": int_series(stream),
            "correlation_id": int_series([a.correlation for a in args]),
            "grid_x": int_series(gx, pl.Int32),
            "grid_y": int_series(gy, pl.Int32),
            "grid_z": int_series(gz, pl.Int32),
            "block_x": int_series(bx, pl.Int32),
            "block_y": int_series(by, pl.Int32),
            "block_z": int_series(bz, pl.Int32),
            "registers_per_thread": int_series([a.registers for a in args], pl.Int32),
            "smem_bytes": int_series([a.smem for a in args]),
            "blocks_per_sm": _estimates([a.blocks_per_sm for a in args]),
            "est_occupancy_pct": _estimates([_occupancy(a) for a in args]),
        }
    )


OCCUPANCY_SMEM_LIMIT = 48 * 1024
"""Shared memory per block (bytes) above which Kineto's occupancy estimate is 0 whatever the kernel does: its
calculator (``kernelOccupancy``, DeviceProperties.cpp) uses the default per-block limit, not the opt-in one the
kernel was launched under, so no CTA fits. In the 20 shared PyTorch-profiler traces that carry the estimate, all
3,726 kernels above the limit read 0; below it, only grids too small to fill 0.5% of the thread slots do."""


def _occupancy(a: _Args) -> Any:
    """Kineto's ``est. achieved occupancy %``, or None where it cannot hold (see :data:`OCCUPANCY_SMEM_LIMIT`)."""
    smem = a.smem
    return None if type(smem) is int and smem > OCCUPANCY_SMEM_LIMIT else a.occupancy


def _estimates(values: list[Any]) -> pl.Series:
    """Kineto's launch estimates (``blocks per SM``, ``est. achieved occupancy %``) as floats; a negative one (its
    value when the device's properties were unknown: -1, -99) or anything not a number as null."""
    return pl.Series(
        [float(v) if type(v) in (int, float) and v >= 0 else None for v in values], dtype=pl.Float64
    )


def _memops(events: list[_Event]) -> pl.DataFrame:
    """memcpy / memset events as columns: kind, name, copy direction, bytes, device, context, stream, id."""
    args = bulk_args(events)
    names = [e.name if isinstance(e.name, str) else "" for e in events]
    copy = [m.group(1) if (m := _COPY_KIND.match(n)) else None for n in names]
    return pl.DataFrame(
        {
            "kind": pl.Series([MEMOP_CATS[e.cat] for e in events], dtype=pl.String),  # type: ignore[index]
            "name": pl.Series(names, dtype=pl.String),
            "copy_kind": pl.Series(copy, dtype=pl.String),
            "bytes": int_series([a.bytes for a in args]),
            "device": int_series(
                [
                    a.device if type(a.device) is int else (e.pid if type(e.pid) is int else None)
                    for a, e in zip(args, events, strict=True)
                ],
                pl.Int32,
            ),
            "context": int_series([a.context for a in args]),
            "stream": int_series([_stream(a, e) for a, e in zip(args, events, strict=True)]),
            "correlation_id": int_series([a.correlation for a in args]),
        }
    )


def _launches(events: list[_Event]) -> tuple[pl.DataFrame, list[_Event]]:
    """Launch events with an integer ``correlation`` (the others link nothing and are left out), and those
    events."""
    kept = []
    corr = []
    for e, a in zip(events, bulk_args(events, _LaunchArgs), strict=True):
        if type(a.correlation) is int:
            kept.append(e)
            corr.append(a.correlation)
    return pl.DataFrame(
        {
            "corr": int_series(corr),
            "pref": pl.Series([LAUNCH_CATS[e.cat] for e in kept], dtype=pl.Int8),
            "pid": int_series([e.pid if type(e.pid) is int else as_int(e.pid) for e in kept]),
            "tid": int_series([e.tid if type(e.tid) is int else as_int(e.tid) for e in kept]),
        }
    ), kept


def _cpu_ranges(events: list[_Event]) -> pl.DataFrame:
    args = bulk_args(events, _RangeArgs)
    return pl.DataFrame(
        {
            "name": pl.Series([e.name if isinstance(e.name, str) else "" for e in events], dtype=pl.String),
            "pid": int_series([as_int(e.pid) for e in events]),
            "tid": int_series([as_int(e.tid) for e in events]),
            "ext": int_series([a.external_id for a in args]),
        }
    )


def _cpu_ops(events: list[_Event]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "name": pl.Series([e.name for e in events], dtype=pl.String),
            "pid": int_series([as_int(e.pid) for e in events]),
            "tid": int_series([as_int(e.tid) for e in events]),
        }
    )


def _gpu_ranges(events: list[_Event]) -> pl.DataFrame:
    args = bulk_args(events, _RangeArgs)
    device: list[int | None] = []
    tid: list[int | None] = []
    for e, a in zip(events, args, strict=True):
        device.append(a.device if type(a.device) is int else as_int(e.pid))
        t = as_int(e.tid)
        if t is None and isinstance(e.tid, str):
            m = _STREAM_TID.search(e.tid)
            t = int(m.group(1)) if m else None
        tid.append(t)
    return pl.DataFrame(
        {
            "name": pl.Series([e.name if isinstance(e.name, str) else "" for e in events], dtype=pl.String),
            "device": int_series(device, pl.Int32),
            "tid": int_series(tid),
            "ext": int_series([a.external_id for a in args]),
        }
    )


class _OpArgsRaw(msgspec.Struct, gc=False):
    """The shape fields of an op's args as their JSON text (the key of the shape cache, ``_shape_of``), and
    PyTorch's own ``flops``."""

    dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    types: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Concrete Inputs")
    flops: Any = None


_OP_ARGS_RAW_DECODER = msgspec.json.Decoder(_OpArgsRaw)
_EMPTY_RAW = _OpArgsRaw()
_SHAPES: dict[tuple[str, bytes, bytes, bytes], Any] = {}
"""``op_shape`` by the op's name and the text of its shape fields. A trace repeats a few shapes thousands of
times (every layer of every step): the 1M-kernel benchmark trace has 138k GEMM ops and a few hundred shapes."""
_SHAPES_MAX = 1 << 16


_OP_ARGS_LIST_DECODER = msgspec.json.Decoder(list[_OpArgsRaw | None])


def _op_args_raw(args: bytes) -> _OpArgsRaw:
    """The shape fields of one op event's args as text (empty when they are missing or malformed)."""
    if not args:
        return _EMPTY_RAW
    try:
        return _OP_ARGS_RAW_DECODER.decode(args)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return _EMPTY_RAW


def _ops_args_raw(args: list[bytes]) -> list[_OpArgsRaw]:
    """``_op_args_raw`` of each, decoded in one call where every one is an object (or missing)."""
    try:
        got = _OP_ARGS_LIST_DECODER.decode(b"[" + b",".join([a or b"null" for a in args]) + b"]")
    except (msgspec.ValidationError, msgspec.DecodeError):
        return [_op_args_raw(a) for a in args]
    return [a if a is not None else _EMPTY_RAW for a in got]


def _shape_of(name: str, a: _OpArgsRaw) -> tuple[tuple[Any, ...], bool]:
    """The shape columns of an op ``name`` with the fields of ``a`` (``op_shape``, decoded once per distinct
    text): op, m, n, k, batch, dtype_a, dtype_b, dtype_out, shape_source; and whether those fields decoded (if
    one does not, the op's args are as good as missing: its ``flops`` is not read either, as when the whole args
    fail to decode)."""
    key = (name, bytes(a.dims), bytes(a.types), bytes(a.concrete))
    got = _SHAPES.get(key)
    if got is None:
        try:
            dims, types, concrete = (msgspec.json.decode(r) if r else None for r in key[1:])
            shape, decoded = op_shape(name, dims, types, concrete), True
        except (msgspec.ValidationError, msgspec.DecodeError):
            shape, decoded = op_shape(name, None, None, None), False
        if shape is None:
            row: tuple[Any, ...] = (None,) * 9
        else:
            source = "kineto-input-dims" if shape.m is not None else None
            row = (
                shape.op,
                shape.m,
                shape.n,
                shape.k,
                shape.batch,
                shape.dtype_a,
                shape.dtype_b,
                shape.dtype_out,
            )
            row += (source,)
        if len(_SHAPES) >= _SHAPES_MAX:
            _SHAPES.clear()
        got = _SHAPES[key] = (row, decoded)
    return got


_SHAPE_COLUMNS = ("op", "m", "n", "k", "batch", "dtype_a", "dtype_b", "dtype_out", "shape_source")


def _flops(value: Any) -> float | None:
    ok = type(value) in (int, float) and math.isfinite(value) and value >= 0
    return float(value) if ok else None


def _op_ranges(ops: list[_Event]) -> pl.DataFrame:
    """``kind="op"``, ``range_kind="gemm-op"`` ranges for the ``cpu_op`` events of PyTorch GEMM operators
    (torch_ops.GEMM_OPS), with M, N, K, batch and dtypes from ``Input Dims`` / ``Input type`` and the trace's
    own ``flops``. Other ops are left out: a trace may hold millions of them and they are not GEMMs."""
    names = [e.name for e in ops]
    pid = pl.Series([as_int(e.pid) for e in ops], dtype=pl.Int64)
    tid = pl.Series([as_int(e.tid) for e in ops], dtype=pl.Int64)
    return op_frame(names, pid, tid, [bytes(e.args) for e in ops])


def op_frame(names: list[str], pid: pl.Series, tid: pl.Series, args: list[bytes]) -> pl.DataFrame:
    """The GEMM-op ranges of ops ``names`` (their pid, tid and the text of their args), as ``_op_ranges``
    describes them (the C scanner's path, ``native.py``, builds them here too)."""
    rows, flops = [], []
    for name, a in zip(names, _ops_args_raw(args), strict=True):
        row, decoded = _shape_of(name, a)
        rows.append(row)
        flops.append(_flops(a.flops) if decoded else None)
    n = len(names)
    cols: dict[str, Any] = (
        dict(zip(_SHAPE_COLUMNS, map(list, zip(*rows, strict=True)), strict=True)) if n else {}
    )
    cols |= {
        "kind": ["op"] * n,
        "name": names,
        "pid": pid,
        "tid": tid,
        "range_kind": ["gemm-op"] * n,
        "flops": flops,
    }
    return pl.DataFrame({k: pl.Series(cols.get(k, []), dtype=dtype) for k, dtype in OP_SCHEMA.items()})


# -- helpers ---------------------------------------------------------------------------------------------------
_DECIMAL = r'^\s*"?(-?)(\d+)(?:\.(\d*))?"?\s*$'
_PLAIN = r"^-?\d{1,16}(?:\.\d{0,3})?$"
"""A number as Kineto writes it (at most three decimals): exact as a decimal with three digits of scale."""


_NO_TEXT = pl.Series([], dtype=pl.String)
_MAX_US = (2**63 - 1) // 1000
"""The largest microsecond count whose ns fit an Int64 (a larger one is null, as on the decimal path)."""


def times_ns(raw: list[msgspec.Raw]) -> pl.Series:
    """Microsecond numbers as JSON text -> integer ns, exactly (no float on the way)."""
    # split in polars, not in Python: no str object per time (a JSON token never holds a raw newline)
    text = (
        pl.Series([b"\n".join(raw).decode()], dtype=pl.String).str.split("\n").explode() if raw else _NO_TEXT
    )
    ints = text.cast(pl.Int64, strict=False)  # null for anything but an integer's digits
    if ints.null_count() == 0 and ints.is_between(-_MAX_US, _MAX_US).all():
        return (ints * 1000).rename("ns")  # whole microseconds (older traces, HTA's): exact, 7x cheaper
    plain = text.str.contains(_PLAIN)
    fast = (text.cast(pl.Decimal(38, 3), strict=False) * 1000).cast(pl.Int64, strict=False)
    if plain.all():
        return fast.rename("ns")
    return pl.select(pl.when(plain).then(fast).otherwise(_times_ns_any(text)).alias("ns"))["ns"]


def _times_ns_any(text: pl.Series) -> pl.Series:
    """Any number's text -> ns: digits past the third decimal round half up; quoted numbers are read; anything
    else (exponent notation, NaN) goes through a float; null if that fails too."""
    df = pl.DataFrame({"t": text}).with_columns(m=pl.col("t").str.extract_groups(_DECIMAL))
    sign = pl.when(pl.col("m").struct.field("1") == "-").then(-1).otherwise(1)
    # a decimal, not an Int64: 17+ digits times 1000 wrapped around (99999999999999999 us read as 7.8e18 ns)
    whole = pl.col("m").struct.field("2").cast(pl.Decimal(38, 0), strict=False)
    frac = pl.col("m").struct.field("3").fill_null("")
    digits3 = (frac + "000").str.slice(0, 3).cast(pl.Int64, strict=False)
    round_up = (frac.str.slice(3, 1).fill_null("").replace("", "0").cast(pl.Int64, strict=False) >= 5).cast(
        pl.Int64
    )
    exact = (sign * (whole * 1000 + digits3 + round_up)).cast(pl.Int64, strict=False)  # null past an Int64
    approx = (pl.col("t").cast(pl.Float64, strict=False) * 1000).round(0)
    approx = pl.when(approx.is_finite()).then(approx).cast(pl.Int64, strict=False)
    return df.select(pl.when(whole.is_not_null()).then(exact).otherwise(approx).alias("ns"))["ns"]


def bulk_args(events: list[_Event], kind: type[Any] = _Args) -> list[Any]:
    """The ``args`` of ``events`` as ``kind`` structs (naming only the fields wanted), decoded in one call; an
    event without args, or whose args is not an object, gets an empty one."""
    if not events:
        return []
    many, one = _ARGS_DECODERS[kind]
    text = b"[" + b",".join([e.args or b"null" for e in events]) + b"]"
    try:
        decoded = many.decode(text)
    except msgspec.ValidationError:  # some event's args is not an object: decode one by one
        decoded = []
        for e in events:
            try:
                decoded.append(one.decode(e.args) if e.args else None)
            except msgspec.ValidationError:
                decoded.append(None)
    empty = kind()
    return [a if a is not None else empty for a in decoded]


def int_series(values: list[Any], dtype: pl.DataType | type[pl.DataType] = pl.Int64) -> pl.Series:
    """Integers as found; anything else (strings like "0x0", floats, out-of-range numbers) as null."""
    return pl.Series([v if type(v) is int else None for v in values], dtype=pl.Int64, strict=False).cast(
        dtype, strict=False
    )


def as_int(value: Any) -> int | None:
    """An id that may be written as a number or a numeric string ("25738"); None otherwise. ``isdecimal``, not
    ``isdigit``: "¹" is a digit that ``int`` refuses (it stopped a whole read)."""
    if type(value) is int:
        return value
    if isinstance(value, str) and value.isdecimal():
        return int(value)
    return None


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
