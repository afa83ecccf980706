"""A run as Chrome trace-event JSON (``tracekit export RUN -o trace.json``), which ui.perfetto.dev and
chrome://tracing open: tracekit's verdicts on a timeline.

What it holds (docs/REPORTS.md, "Timeline export"):

- one process per GPU (``pid`` = the device, ``rank x 100 + device`` in a multi-rank run) and one thread per
  stream, named by ``M`` metadata events; each kernel of the ``kernels`` frame a complete event (``ph: X``) with
  ``ts`` / ``dur`` in µs as floats that keep the nanoseconds, relative to ``otherData.base_ns`` (the first
  event's start, floored to the millisecond), its class as ``cat`` (``--cat kernel`` writes Kineto's own
  category instead, which Kineto readers, tracekit's included, read back as kernels) and ``args``: device,
  stream, correlation, grid, block, class;
- each GEMM call's kernel carries its case's ``case_id``, ``case``, ``verdict``, ``cost_ms`` (the verdict's lost
  time over all calls), ``achieved_tflops``, ``kernel_tflops``, ``pct_of_peak`` and ``factors``, all from the
  Analysis; the run's largest losses (``summary.top_losses``) are marked with an instant event (``ph: i``) at
  their case's first call (one per case, naming its factors) and a ``top_loss`` rank in each call's args;
- the ranges (``ranges`` frame): the user's on their process and thread (category ``user_annotation``), the
  profiler's operators (``cpu_op``), GPU-side ranges on their stream's track (``gpu_user_annotation``): Kineto's
  own categories, so a Kineto reader reads them back as ranges;
- ``SM clock (MHz)`` counter events (``ph: C``) where a case's clock was measured, at each of its calls.

It is written as it is made: the frames are read through a lazy scan filtered by ``--ranges`` and the time
window, and encoded in batches of :data:`BATCH` rows by polars, so the JSON is never held whole in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import polars as pl

__all__ = ["BATCH", "ExportOptions", "ExportResult", "export_trace"]

BATCH = 100_000
"""Rows encoded at a time."""


@dataclass(frozen=True)
class ExportOptions:
    """``ranges``: a regex; only ranges whose name matches it (and the ranges inside them) and the kernels they
    launched are written. ``from_ms`` / ``to_ms``: a window in ms after the run's first kernel; events that
    overlap it are written. ``cat``: ``class`` (the kernel's class) or ``kernel`` (Kineto's)."""

    ranges: str | None = None
    from_ms: float | None = None
    to_ms: float | None = None
    cat: str = "class"


@dataclass
class ExportResult:
    """What was written: event counts by kind and the base time (ns) the ``ts`` values count from."""

    kernels: int = 0
    ranges: int = 0
    gemm_calls: int = 0
    marks: int = 0
    counters: int = 0
    base_ns: int = 0


CALL_ARGS = (
    "case_id",
    "case",
    "verdict",
    "cost_ms",
    "achieved_tflops",
    "kernel_tflops",
    "pct_of_peak",
    "factors",
    "top_loss",
)
"""The args a GEMM call's kernel carries besides the kernel's own (from its case in the Analysis)."""


def _pid(device: pl.Expr, rank: pl.Expr) -> pl.Expr:
    return (rank.fill_null(0).cast(pl.Int64) * 100 + device.fill_null(0).cast(pl.Int64)).alias("pid")


def _us(col: str, base: int) -> pl.Expr:
    """ns -> µs floats relative to ``base`` (float64 keeps the ns below 2^53 ns of relative time)."""
    return ((pl.col(col) - base).cast(pl.Float64) / 1000.0).round(3).alias(col)


def _range_ids(ranges: pl.LazyFrame, pattern: str) -> pl.DataFrame:
    """The ids of the ranges whose name matches ``pattern`` and of every range nested in them."""
    table = ranges.select("range_id", "parent_id", "name").collect()
    keep = table.filter(pl.col("name").str.contains(pattern)).select("range_id")
    frontier = keep
    for _ in range(64):  # nesting depth; a cycle in a damaged file cannot loop forever
        children = table.join(frontier, left_on="parent_id", right_on="range_id", how="semi").select(
            "range_id"
        )
        children = children.join(keep, on="range_id", how="anti")
        if children.height == 0:
            break
        keep = pl.concat([keep, children])
        frontier = children
    return keep


def _case_table(analysis: Any) -> tuple[pl.DataFrame, dict[str, int], list[tuple[str, str]]]:
    """One row per case with the args a GEMM call carries, keyed for the join on the kernel's name (and its
    range's M, N, K where the case has a shape); the top-loss rank per case id; marks' (case id, label)."""
    top = {}
    for i, loss in enumerate(analysis.summary.top_losses, 1):
        top.setdefault(loss.case_id, i)
    rows = []
    for c in analysis.cases:
        if not c.kernel.name:
            continue
        t, v = c.timing, c.verdict
        factors = ", ".join(f"{f.name} x{f.value:.3f}" for f in c.factors)
        rows.append(
            {
                "kname": c.kernel.name,
                "grid": c.kernel.grid,
                "m": c.shape.m if c.shape else None,
                "n": c.shape.n if c.shape else None,
                "k": c.shape.k if c.shape else None,
                "crange": c.range,
                "nth": c.place.nth if c.place else None,
                "case_id": c.id,
                "case": c.label,
                "verdict": f"{v.factor}: {v.cause}" if v.factor and v.cause else (v.factor or v.kind),
                "cost_ms": None if v.lost_ns_total is None else v.lost_ns_total / 1e6,
                "achieved_tflops": t.achieved_tflops,
                "kernel_tflops": t.kernel_tflops,
                "pct_of_peak": c.pct_of_peak,
                "factors": factors or None,
                "top_loss": top.get(c.id),
                "sm_clock_mhz": c.sm_clock_hz / 1e6 if c.sm_clock_hz else None,
            }
        )
    schema = {
        "kname": pl.String,
        "grid": pl.Int64,
        "m": pl.Int64,
        "n": pl.Int64,
        "k": pl.Int64,
        "crange": pl.String,
        "nth": pl.List(pl.Int64),
        "case_id": pl.String,
        "case": pl.String,
        "verdict": pl.String,
        "cost_ms": pl.Float64,
        "achieved_tflops": pl.Float64,
        "kernel_tflops": pl.Float64,
        "pct_of_peak": pl.Float64,
        "factors": pl.String,
        "top_loss": pl.Int64,
        "sm_clock_mhz": pl.Float64,
    }
    # one mark per case: a case can hold several of the largest losses (launch gaps and memory), named together
    factors: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    for loss in analysis.summary.top_losses:
        factors.setdefault(loss.case_id, []).append(loss.factor)
        names.setdefault(loss.case_id, loss.case_name)
    marks = [(cid, f"top loss #{top[cid]}: {names[cid]} — {', '.join(dict.fromkeys(fs))}")
             for cid, fs in factors.items()]  # fmt: skip
    return pl.DataFrame(rows, schema=schema), top, marks


def _chains(kernels: pl.DataFrame, ranges: pl.LazyFrame) -> dict[int, tuple[int | None, str, Any]]:
    """range id -> (parent id, name, (M, N, K) or None) for the ranges that hold ``kernels`` and every range
    around them: only those are read, so a run with a million ranges and few GEMMs stays small."""
    table = ranges.select("range_id", "parent_id", "name", "m", "n", "k")
    found: dict[int, tuple[int | None, str, Any]] = {}
    want = kernels["range_id"].drop_nulls().unique()
    for _ in range(64):
        if want.len() == 0:
            break
        got = table.filter(pl.col("range_id").is_in(want.implode())).collect()
        for rid, parent, name, m, n, k in got.iter_rows():
            found[rid] = (parent, name or "", (m, n, k) if m is not None else None)
        parents = got["parent_id"].drop_nulls().unique()
        want = parents.filter(~parents.is_in(list(found)))
    return found


def _around(gemm: pl.DataFrame, ranges: pl.LazyFrame) -> dict[int, list[str]]:
    """kernel id -> names of the annotation ranges (not operators) around it in time: those open on the thread
    that launched it, and the GPU-side range (Kineto's ``gpu_user_annotation``) its run falls in. A kernel
    replayed from a CUDA graph is linked to the operators recorded at capture, not to the range replaying it.

    Ranges of one thread nest, so an as-of join finds the last range opened before the launch and its parents
    give the rest (a join on the thread alone would pair every range of a thread with every launch)."""
    ann = (
        ranges.filter(pl.col("kind") != "op")
        .select(
            "range_id",
            "parent_id",
            "name",
            "kind",
            "pid",
            "tid",
            pl.col("start_ns").alias("r0"),
            pl.col("end_ns").alias("r1"),
        )
        .filter(pl.col("r0").is_not_null() & pl.col("r1").is_not_null())
        .collect()
    )
    if ann.height == 0 or gemm.height == 0:
        return {}
    info = {
        rid: (parent, name, r1)
        for rid, parent, name, r1 in ann.select("range_id", "parent_id", "name", "r1").iter_rows()
    }
    on_gpu = pl.col("kind") == "gpu_annotation"
    cpu_ranges = ann.filter(~on_gpu & pl.col("pid").is_not_null() & pl.col("tid").is_not_null()).sort("r0")
    gpu_ranges = ann.filter(on_gpu).sort("r0")
    out: dict[int, list[str]] = {}

    def walk(kid: int, rid: int | None, t0: int, t1: int) -> None:
        for _ in range(64):
            if rid is None or rid not in info:
                return
            parent, name, r1 = info[rid]
            if r1 >= t1:
                out.setdefault(kid, []).append(name)
            rid = parent

    ks = gemm.select(
        "kernel_id", pl.col("pid").alias("kpid"), "launch_tid", "launch_start_ns", "start_ns", "end_ns"
    )
    launched = ks.filter(pl.col("launch_start_ns").is_not_null() & pl.col("launch_tid").is_not_null())
    if cpu_ranges.height and launched.height:
        hit = launched.sort("launch_start_ns").join_asof(
            cpu_ranges.select("range_id", "pid", "tid", "r0"),
            left_on="launch_start_ns",
            right_on="r0",
            by_left=["kpid", "launch_tid"],
            by_right=["pid", "tid"],
            strategy="backward",
            check_sortedness=False,  # sorted by time above; within each thread too
        )
        for kid, rid, t in hit.select("kernel_id", "range_id", "launch_start_ns").iter_rows():
            walk(kid, rid, t, t)
    if gpu_ranges.height:
        hit = ks.sort("start_ns").join_asof(
            gpu_ranges.select("range_id", "r0"), left_on="start_ns", right_on="r0", strategy="backward"
        )
        for kid, rid, t0, t1 in hit.select("kernel_id", "range_id", "start_ns", "end_ns").iter_rows():
            walk(kid, rid, t0, t1)
    return out


def _owners(
    kernels: pl.DataFrame,
    ranges: pl.LazyFrame,
    cases: list[dict[str, Any]],
    replayed: dict[int, tuple[str, tuple[Any, ...]] | None],
    numbers: dict[int, int] | None = None,
) -> pl.DataFrame:
    """(kernel_id, case) for the GEMM kernels of ``kernels``: the case with the kernel's name whose shape is the
    M, N, K of a range around the kernel (where the case has one) and whose range is one of the kernel's ranges
    (folded as cases fold them); a case without a range takes the kernels no ranged case takes. ``replayed``: the
    shapes of GEMM kernels replayed from CUDA graphs (graph_replay.py), which no operator range holds.

    Where several such cases share the kernel (GEMMs of one kernel and grid told apart by their place in their
    range's instances: the case's ``place``), the kernel's number among its instance's GEMM launches
    (``numbers``, :func:`_launch_numbers`) picks the case whose place holds it; a kernel no place holds goes to a
    case without a place, else to none."""
    from .gemm.timeline import fold_range

    gemm = kernels.filter(pl.col("kernel_class") == "gemm").select(
        "kernel_id",
        "name",
        "range_id",
        (pl.col("grid_x").cast(pl.Int64) * pl.col("grid_y") * pl.col("grid_z")).alias("ctas"),
    )
    by_name: dict[str, list[int]] = {}
    for i, c in enumerate(cases):
        by_name.setdefault(c["kname"], []).append(i)
    chains = _chains(gemm, ranges)
    around = _around(kernels.filter(pl.col("kernel_class") == "gemm"), ranges)
    ids, owner = [], []
    for kid, name, rid, ctas in gemm.iter_rows():
        candidates = [
            i for i in by_name.get(name, ()) if cases[i]["grid"] is None or cases[i]["grid"] == ctas
        ]
        if not candidates:
            continue
        names, shapes = {fold_range(n) for n in around.get(kid, ())}, set()
        if replayed.get(kid):
            shapes.add(tuple(replayed[kid][1][:3]))  # type: ignore[index]
        while rid is not None and rid in chains and len(names) < 64:
            parent, rname, shape = chains[rid]
            names.add(fold_range(rname))
            if shape is not None:
                shapes.add(shape)
            rid = parent
        # a kernel replayed from a CUDA graph has no shaped operator around it: its range and grid tell
        fits = [
            i
            for i in candidates
            if cases[i]["m"] is None or not shapes or (cases[i]["m"], cases[i]["n"], cases[i]["k"]) in shapes
        ]
        ranged = [i for i in fits if cases[i]["crange"] is not None and cases[i]["crange"] in names]
        bare = [i for i in fits if cases[i]["crange"] is None]
        pick = ranged or bare
        if len(pick) > 1 and any(cases[i]["nth"] for i in pick):
            nth = (numbers or {}).get(kid)
            placed = [i for i in pick if cases[i]["nth"] and nth in cases[i]["nth"]]
            pick = placed or [i for i in pick if not cases[i]["nth"]]
        if pick:
            ids.append(kid)
            owner.append(pick[0])
    return pl.DataFrame(
        {"kernel_id": ids, "case_idx": owner}, schema={"kernel_id": pl.Int64, "case_idx": pl.Int64}
    )


def _launch_numbers(kernels: pl.DataFrame, ranges: pl.DataFrame) -> dict[int, int]:
    """kernel id -> its 1-based number among the GEMM launches of its user range instance, numbered as the
    timeline's cases number a case's place (:func:`~.gemm.timeline.launch_numbers`): the GEMM kernels in the
    user's ranges outside tracekit's own and outside a shaped operator (those are told apart by their shape), by
    start. Read from the whole run, so an export cut by ``--ranges`` or a time window numbers as the cases do."""
    from .gemm.ranges import resolve_ranges
    from .gemm.timeline import launch_numbers

    res = resolve_ranges(
        ranges.with_columns(pl.col("range_id").cast(pl.Int64), pl.col("parent_id").cast(pl.Int64))
    ).select("range_id", "holder", "call", "tk_gemm", "blocked")
    gemm = (
        kernels.filter((pl.col("kernel_class") == "gemm") & pl.col("start_ns").is_not_null())
        .select(pl.col("kernel_id").cast(pl.Int64), pl.col("range_id").cast(pl.Int64), "start_ns")
        .join(res, on="range_id", how="left")
        .filter(pl.col("call").is_null() & pl.col("tk_gemm").is_null() & ~pl.col("blocked").fill_null(False))
        .select(
            "kernel_id",
            "holder",
            pl.col("start_ns").alias("first"),
            (-(pl.col("kernel_id") + 1)).alias("owner"),
        )
    )
    numbered = launch_numbers(gemm)
    return dict(numbered.select("kernel_id", pl.col("_nth") + 1).iter_rows())


def _meta(pid: int, tid: int | None, what: str, name: str) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "M", "name": what, "pid": pid, "args": {"name": name}}
    if tid is not None:
        event["tid"] = tid
    return event


def _lines(frame: pl.DataFrame, struct_cols: list[str | pl.Expr]) -> Iterator[str]:
    if frame.height:
        yield from frame.select(pl.struct(*struct_cols).struct.json_encode().alias("j"))["j"]


def export_trace(run: Any, analysis: Any, out: IO[str], options: ExportOptions | None = None) -> ExportResult:
    """Write ``run`` (a ``tracekit.load`` Run) with its Analysis as a Chrome trace to ``out``; see the module
    docstring for what it holds."""
    import msgspec

    opts = options or ExportOptions()
    result = ExportResult()
    kernels = run.scan("kernels")
    ranges = run.scan("ranges")
    first = kernels.select(pl.col("start_ns").min()).collect().item()
    first_range = ranges.select(pl.col("start_ns").min()).collect().item()
    starts = [x for x in (first, first_range) if x is not None]
    base = (min(starts) // 1_000_000) * 1_000_000 if starts else 0
    origin = first if first is not None else base
    result.base_ns = int(base)

    if opts.ranges:
        keep = _range_ids(ranges, opts.ranges)
        kernels = kernels.join(keep.lazy(), on="range_id", how="semi")
        ranges = ranges.join(keep.lazy(), on="range_id", how="semi")
    if opts.from_ms is not None:
        lo = int(origin + opts.from_ms * 1e6)
        kernels = kernels.filter(pl.col("end_ns") >= lo)
        ranges = ranges.filter(pl.col("end_ns") >= lo)
    if opts.to_ms is not None:
        hi = int(origin + opts.to_ms * 1e6)
        kernels = kernels.filter(pl.col("start_ns") <= hi)
        ranges = ranges.filter(pl.col("start_ns") <= hi)

    cases, _top, marks = _case_table(analysis)
    devices = {d.name for d in analysis.devices if d.name}
    gpu_name = next(iter(devices)) if len(devices) == 1 else None

    enc = msgspec.json.Encoder()
    head = {
        "displayTimeUnit": "ns",
        "otherData": {
            "tool": "tracekit export",
            "run": analysis.run.name or str(analysis.run.path),
            "base_ns": int(base),
            "ranges": opts.ranges,
            "from_ms": opts.from_ms,
            "to_ms": opts.to_ms,
        },
    }
    out.write(enc.encode(head).decode()[:-1] + ',"traceEvents":[\n')
    sep = [""]

    def write(line: str) -> None:
        out.write(sep[0] + line)
        sep[0] = ",\n"

    k_cols = [
        "kernel_id",
        "name",
        "rank",
        "device",
        "stream",
        "correlation_id",
        "start_ns",
        "end_ns",
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "range_id",
        "kernel_class",
        "pid",
        "launch_tid",
        "launch_start_ns",
    ]
    tracks: set[tuple[int, int]] = set()
    first: dict[str, tuple[float, int, int]] = {}  # a top-loss case's first call: (ts, pid, tid)
    frame = kernels.select(k_cols).collect()  # no sort: a copy of a million rows; viewers order events by ts
    from .gemm.graph_replay import replay_kernel_shapes

    replayed = replay_kernel_shapes({"kernels": run.frames["kernels"], "ranges": run.frames["ranges"]})
    numbers = (
        _launch_numbers(run.frames["kernels"], run.frames["ranges"])
        if any(c.place for c in analysis.cases)
        else {}
    )
    owners = _owners(frame, run.scan("ranges"), cases.to_dicts(), replayed, numbers)
    call_args = cases.with_row_index("case_idx").with_columns(pl.col("case_idx").cast(pl.Int64))
    call_args = call_args.drop("kname", "grid", "m", "n", "k", "crange", "nth")
    cat = pl.lit("kernel") if opts.cat == "kernel" else pl.col("kernel_class").fill_null("other")
    for batch in frame.iter_slices(BATCH):
        b = batch.join(owners, on="kernel_id", how="left").join(call_args, on="case_idx", how="left")
        b = b.sort("start_ns", "kernel_id")
        b = b.with_columns(
            _pid(pl.col("device"), pl.col("rank")),
            pl.col("stream").fill_null(0).alias("tid"),
            _us("start_ns", base).alias("ts"),
            ((pl.col("end_ns") - pl.col("start_ns")).cast(pl.Float64) / 1000.0).round(3).alias("dur"),
        )
        for pid, tid in b.select("pid", "tid").unique(maintain_order=True).iter_rows():
            if (pid, tid) not in tracks:
                if not any(p == pid for p, _ in tracks):
                    label = f"GPU {pid % 100}" + (f" rank {pid // 100}" if pid >= 100 else "")
                    write(
                        enc.encode(
                            _meta(pid, None, "process_name", label + (f" ({gpu_name})" if gpu_name else ""))
                        ).decode()
                    )
                    write(
                        enc.encode(
                            {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}}
                        ).decode()
                    )
                tracks.add((pid, tid))
                write(enc.encode(_meta(pid, tid, "thread_name", f"stream {tid}")).decode())
        base_args = [
            pl.col("device"),
            pl.col("stream"),
            pl.col("correlation_id").alias("correlation"),
            pl.concat_list("grid_x", "grid_y", "grid_z").alias("grid"),
            pl.concat_list("block_x", "block_y", "block_z").alias("block"),
            pl.col("kernel_class").alias("class"),
        ]
        case_args = [pl.col(c) for c in CALL_ARGS]
        b = b.with_columns(cat.alias("cat"), pl.lit("X").alias("ph"))
        head_cols: list[str | pl.Expr] = ["name", "ph", "cat", "pid", "tid", "ts", "dur"]
        is_call = pl.col("case_id").is_not_null()
        for line in _lines(b.filter(~is_call), [*head_cols, pl.struct(*base_args).alias("args")]):
            write(line)
        for line in _lines(b.filter(is_call), [*head_cols, pl.struct(*base_args, *case_args).alias("args")]):
            write(line)
        result.kernels += b.height
        calls = b.filter(pl.col("case_id").is_not_null())
        result.gemm_calls += calls.height
        top_calls = calls.filter(pl.col("case_id").is_in([c for c, _ in marks]))
        for case_id, ts, pid, tid in (
            top_calls.sort("ts")
            .group_by("case_id", maintain_order=True)
            .first()
            .select("case_id", "ts", "pid", "tid")
            .iter_rows()
        ):
            if case_id not in first or ts < first[case_id][0]:
                first[case_id] = (ts, pid, tid)
        clocked = calls.filter(pl.col("sm_clock_mhz").is_not_null())
        for line in _lines(
            clocked.with_columns(pl.lit("C").alias("ph"), pl.lit("SM clock (MHz)").alias("name")),
            ["name", "ph", "pid", "ts", pl.struct(pl.col("sm_clock_mhz").alias("MHz")).alias("args")],
        ):
            write(line)
        result.counters += clocked.height

    for case_id, label in marks:
        if case_id in first:
            ts, pid, tid = first[case_id]
            mark = {"ph": "i", "s": "t", "name": label, "cat": "tracekit", "pid": pid, "tid": tid, "ts": ts}
            write(enc.encode({**mark, "args": {"case_id": case_id}}).decode())
            result.marks += 1

    r_cols = ["range_id", "name", "kind", "domain", "rank", "device", "pid", "tid", "start_ns", "end_ns"]
    rframe = ranges.select(r_cols).filter(pl.col("end_ns").is_not_null()).collect()
    threads: set[tuple[int, int]] = set()
    on_gpu = pl.col("kind") == "gpu_annotation"
    for batch in rframe.iter_slices(BATCH):
        b = batch.with_columns(
            # a GPU range (Kineto's gpu_user_annotation) on its device's stream track, as Kineto places it
            pl.when(on_gpu)
            .then(_pid(pl.col("device"), pl.col("rank")))
            .otherwise(pl.col("pid"))
            .alias("pid"),
            pl.col("tid").fill_null(0),
            _us("start_ns", base).alias("ts"),
            ((pl.col("end_ns") - pl.col("start_ns")).cast(pl.Float64) / 1000.0).round(3).alias("dur"),
            pl.lit("X").alias("ph"),
            pl.when(on_gpu)
            .then(pl.lit("gpu_user_annotation"))
            .when(pl.col("kind") == "op")
            .then(pl.lit("cpu_op"))
            .otherwise(pl.lit("user_annotation"))
            .alias("cat"),
        ).filter(pl.col("pid").is_not_null())
        for pid, tid, gpu in (
            b.select("pid", "tid", on_gpu.alias("g")).unique(maintain_order=True).iter_rows()
        ):
            if gpu:
                if (pid, tid) not in tracks:
                    tracks.add((pid, tid))
                    write(enc.encode(_meta(pid, tid, "thread_name", f"stream {tid}")).decode())
            elif (pid, tid) not in threads:
                threads.add((pid, tid))
                write(enc.encode(_meta(pid, tid, "thread_name", f"thread {tid}")).decode())
        args = pl.struct(pl.col("domain"), pl.col("kind"), pl.col("range_id"))
        for line in _lines(b, ["name", "ph", "cat", "pid", "tid", "ts", "dur", args.alias("args")]):
            write(line)
        result.ranges += b.height
    for pid in sorted({p for p, _ in threads}):
        write(enc.encode(_meta(pid, None, "process_name", f"host process {pid}")).decode())
    out.write("\n]}\n")
    return result


def export_path(run: Any, analysis: Any, path: Path, options: ExportOptions | None = None) -> ExportResult:
    """:func:`export_trace` into ``path`` (written beside it first, then moved: a failed export leaves none)."""
    tmp = path.with_name(path.name + ".part")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            result = export_trace(run, analysis, f, options)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return result
