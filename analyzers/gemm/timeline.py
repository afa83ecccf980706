"""GEMM cases from a timeline: tracekit's and the user's ranges joined to their kernels, auxiliary kernels
and launch gaps timed apart, median instance per case; GEMM kernels in no case explained by kernel name."""

from __future__ import annotations

import statistics
from typing import Any

import polars as pl

from tracekit.devices import DeviceSpec

from .case import LAUNCH_GAP_MAX_NS, GemmCase, _gemm_key, context_key
from .names import _serves, aux_key, classify_kernel, is_gemm_kernel, parse_gemm_name
from .user_ranges import _gemm_like, _user_gemm_ranges, range_key


# --- timeline ------------------------------------------------------------------------------------------------------
def _gemm_ancestor(ranges: pl.DataFrame) -> dict[int, tuple[int, bool]]:
    """range_id -> (gemm range it belongs to, whether it is an aux range) for gemm ranges and descendants."""
    out: dict[int, tuple[int, bool]] = {}
    if not (ranges["range_kind"] == "gemm").any():  # a foreign trace: no range to walk up to
        return out
    ids = ranges["range_id"].to_list()
    kind = dict(zip(ids, ranges["range_kind"].to_list(), strict=True))
    parent = dict(zip(ids, ranges["parent_id"].to_list(), strict=True))
    for rid in kind:
        cur, aux, depth = rid, False, 0
        while cur is not None and depth < 64:
            if kind.get(cur) == "gemm":
                out[rid] = (cur, aux)
                break
            if kind.get(cur) == "aux":
                aux = True
            cur, depth = parent.get(cur), depth + 1
    return out


def _free_aux(ranges: pl.DataFrame, owner: dict[int, tuple[int, bool]]) -> dict[int, int]:
    """range_id -> the outermost ``aux`` range enclosing it, for ranges under no GEMM range."""
    out: dict[int, int] = {}
    if not (ranges["range_kind"] == "aux").any():
        return out
    ids = ranges["range_id"].to_list()
    kind = dict(zip(ids, ranges["range_kind"].to_list(), strict=True))
    parent = dict(zip(ids, ranges["parent_id"].to_list(), strict=True))
    for rid in kind:
        if rid in owner:
            continue
        cur, top, depth = rid, None, 0
        while cur is not None and depth < 64:
            if kind.get(cur) == "aux":
                top = cur
            cur, depth = parent.get(cur), depth + 1
        if top is not None:
            out[rid] = top
    return out


def _free_aux_time(
    ranges: pl.DataFrame, kernels: pl.DataFrame, owner: dict[int, tuple[int, bool]]
) -> dict[tuple[str, int, int], tuple[float, dict[str, int]]]:
    """Per (backend, M, K): the auxiliary kernel time one GEMM launch carries from ``aux`` ranges outside GEMM
    ranges (per aux range name, the median kernel time of its instances that launched kernels, summed over names:
    a quantize and a swizzle step both count), and the aux kernels' names with their launch counts."""
    free = _free_aux(ranges, owner)
    if not free:
        return {}
    names = dict(zip(ranges["range_id"].to_list(), ranges["name"].to_list(), strict=True))
    ks = kernels.select("range_id", "name", "duration_ns").filter(pl.col("range_id").is_in(list(free)))
    per_instance: dict[int, float] = {}
    kernel_names: dict[str, dict[str, int]] = {}
    for r in ks.iter_rows(named=True):
        top = free[r["range_id"]]
        per_instance[top] = per_instance.get(top, 0.0) + (r["duration_ns"] or 0)
        counts = kernel_names.setdefault(names[top], {})
        counts[r["name"]] = counts.get(r["name"], 0) + 1
    by_name: dict[str, list[float]] = {}
    for top, ns in per_instance.items():
        by_name.setdefault(names[top], []).append(ns)
    out: dict[tuple[str, int, int], tuple[float, dict[str, int]]] = {}
    for name, times in by_name.items():
        key = aux_key(name)
        if key is None:
            continue
        total, counts = out.get(key, (0.0, {}))
        for kname, c in kernel_names.get(name, {}).items():
            counts[kname] = counts.get(kname, 0) + c
        out[key] = (total + statistics.median(times), counts)
    return out


def _union_busy(intervals: list[tuple[int, int]]) -> int:
    busy, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s >= end:
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
    return busy


_SHAPE_COLUMNS = ("m", "n", "k", "dtype_a", "dtype_b", "dtype_out", "batch", "flops")
"""A GEMM range's shape as a profiler recorded it (its own row), and the FLOPs it counted."""


class _Memo:
    """A function of a name, computed once per distinct name."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.seen: dict[Any, Any] = {}

    def __call__(self, name: Any) -> Any:
        if name in self.seen:
            return self.seen[name]
        out = self.seen[name] = self.fn(name)
        return out


def _instance_kernels(
    kernels: pl.DataFrame,
    owner: dict[int, tuple[int, bool]],
    user_cases: set[int],
    gemm_names: set[str],
) -> pl.DataFrame:
    """The kernels of GEMM ranges in time order (``_row``), each with the GEMM range instance it belongs to
    (``gid``) and whether it is one of that GEMM's own kernels (``main``): in the user's case ranges a GEMM-like
    kernel outside a sub-range, in tracekit's ranges a kernel :func:`classify_kernel` calls ``main`` outside an
    ``aux`` range. Names are classified once per distinct name."""
    id_type = kernels.schema["range_id"]
    own = pl.DataFrame(
        {
            "range_id": list(owner),
            "gid": [g for g, _ in owner.values()],
            "_aux": [a for _, a in owner.values()],
        },
        schema={"range_id": id_type, "gid": id_type, "_aux": pl.Boolean},
    )
    ks = (
        kernels.filter(pl.col("range_id").is_in(own["range_id"].implode()))
        .sort("start_ns")
        .with_row_index("_row")
        .join(own, on="range_id", how="left")
        .sort("_row")
    )
    distinct = [n for n in ks["name"].unique().to_list() if n is not None]
    user_main = [n for n in distinct if _gemm_like(n, gemm_names)]
    own_main = [n for n in distinct if classify_kernel(n) == "main"]
    in_user = pl.col("gid").is_in(list(user_cases))
    return ks.with_columns(
        (
            ~pl.col("_aux")
            & pl.when(in_user)
            .then(pl.col("name").is_in(user_main).fill_null(False))
            .otherwise(pl.col("name").is_null() | pl.col("name").is_in(own_main))
        ).alias("main")
    ).drop("_aux")


def _per_instance(
    ks: pl.DataFrame,
    groups: dict[tuple[str, str | None, tuple], list[int]],
    kernel_starts: pl.DataFrame | None = None,
) -> tuple[dict[int, tuple], dict[int, list[str]], list[dict]]:
    """What the cases need from their kernels, in polars: per GEMM range instance (first start, last end, busy
    time, own and auxiliary kernel time, the device of its first kernel, the most launches of one own kernel
    name); per case
    (index into ``groups``) its auxiliary kernel names and its longest own kernel (the first of equals, in
    instance then time order). A case whose kernels all look auxiliary takes the longest one's name as its GEMM."""
    place = [(rid, ci, pos) for ci, rids in enumerate(groups.values()) for pos, rid in enumerate(rids)]
    id_type = ks.schema["gid"]
    where = pl.DataFrame(
        {"gid": [p[0] for p in place], "_case": [p[1] for p in place], "_pos": [p[2] for p in place]},
        schema={"gid": id_type, "_case": pl.Int64, "_pos": pl.Int64},
    )
    ks = ks.join(where, on="gid", how="inner").sort("_case", "_pos", "_row")
    # only aux-looking kernels: the longest is the GEMM (every kernel of the case with its name)
    no_main = ks.group_by("_case").agg(pl.col("main").any().alias("_any")).filter(~pl.col("_any"))["_case"]
    if no_main.len():
        longest = (
            ks.filter(pl.col("_case").is_in(no_main.implode()))
            .group_by("_case", maintain_order=True)
            .agg(
                pl.col("name")
                .filter(pl.col("duration_ns") == pl.col("duration_ns").max())
                .first()
                .alias("_n")
            )
        )
        ks = (
            ks.join(longest, on="_case", how="left")
            .with_columns((pl.col("main") | (pl.col("name") == pl.col("_n")).fill_null(False)).alias("main"))
            .drop("_n")
            .sort("_case", "_pos", "_row")
        )
    dur = pl.col("duration_ns")
    start, end, prev = pl.col("start_ns"), pl.col("end_ns"), pl.col("_prev")
    # the time some kernel of an instance ran (the union of its intervals, as _union_busy sums it): sorted by
    # start then end, each kernel adds what it runs past the latest end before it. The same sum also where a
    # damaged kernel ends before it starts: every later kernel starts after both the running end and the latest.
    busy = (
        ks.select("gid", "start_ns", "end_ns")
        .sort("gid", "start_ns", "end_ns")
        .with_columns(end.cum_max().shift(1).over("gid").alias("_prev"))
        .group_by("gid")
        .agg(
            pl.when(prev.is_null() | (start >= prev))
            .then(end - start)
            .when(end > prev)
            .then(end - prev)
            .otherwise(0)
            .sum()
            .alias("_busy")
        )
    )
    per = ks.group_by("gid", maintain_order=True).agg(
        start.min().alias("_first"),
        end.max().alias("_last"),
        dur.filter(pl.col("main")).sum().alias("_main"),
        dur.filter(~pl.col("main")).sum().alias("_aux"),
        pl.col("device").first().alias("_dev"),
    )
    most = (
        ks.filter(pl.col("main"))
        .group_by("gid", "name")
        .len()
        .group_by("gid")
        .agg(pl.col("len").max().alias("_most"))
    )
    per = per.join(most, on="gid", how="left").join(busy.select("gid", "_busy"), on="gid", how="left")
    per = per.join(where, on="gid").sort("_case", "_pos")
    per = per.join(_idle_before(per, kernel_starts), on="gid", how="left")
    instances = {
        row[0]: row[1:]
        for row in per.select(
            "gid",
            "_first",
            "_last",
            "_busy",
            "_main",
            "_aux",
            "_dev",
            "_most",
            pl.col("_before").fill_null(0),
        ).iter_rows()
    }
    aux_names = (
        ks.filter(~pl.col("main")).group_by("_case").agg(pl.col("name").unique().sort().alias("_names"))
    )
    aux_kernels = {ci: [n for n in names if n is not None] for ci, names in aux_names.iter_rows()}
    tops_frame = (
        ks.filter(pl.col("main"))
        .group_by("_case", maintain_order=True)
        .agg(pl.all().filter(dur == dur.max()).first())
        .sort("_case")
    )
    tops = [{} for _ in groups]
    for row in tops_frame.iter_rows(named=True):
        tops[row["_case"]] = row
    return instances, aux_kernels, tops


_NO_DEVICE = -(2**31)
"""Stands in for a kernel's missing device when instances and kernel starts are matched by device."""


def _idle_before(per: pl.DataFrame, kernel_starts: pl.DataFrame | None) -> pl.DataFrame:
    """Per GEMM range instance (``per``: gid, _case, _pos, _first, _last, _dev in case then instance order), the
    idle time since the previous instance of its case that counts as a launch gap (``_before``): on the same device,
    shorter than LAUNCH_GAP_MAX_NS, and no kernel (of ``kernel_starts``: device, start_ns) started in between.
    Only instances with such a gap get a row."""
    schema = {"gid": per.schema["gid"], "_before": pl.Int64}
    if kernel_starts is None:
        return pl.DataFrame(schema=schema)
    dev = pl.col("_dev").fill_null(_NO_DEVICE)
    candidates = (
        per.with_columns(
            pl.col("_last").shift(1).over("_case").alias("_prev_end"),
            dev.shift(1).over("_case").alias("_prev_dev"),
            dev.alias("_devkey"),
        )
        .filter(
            pl.col("_prev_end").is_not_null()
            & (pl.col("_devkey") == pl.col("_prev_dev"))
            & (pl.col("_first") - pl.col("_prev_end") > 0)
            & (pl.col("_first") - pl.col("_prev_end") < LAUNCH_GAP_MAX_NS)
        )
        .select("gid", "_first", "_prev_end", "_devkey", (pl.col("_prev_end") + 1).alias("_after"))
        .sort("_after")
    )
    if candidates.height == 0:
        return pl.DataFrame(schema=schema)
    starts = kernel_starts.select(
        pl.col("device").fill_null(_NO_DEVICE).cast(pl.Int64).alias("_devkey"), "start_ns"
    ).sort("start_ns")
    # the first kernel start on the device after the previous instance ended (bisect_right of its end)
    nearest = candidates.with_columns(pl.col("_devkey").cast(pl.Int64)).join_asof(
        starts,
        left_on="_after",
        right_on="start_ns",
        by="_devkey",
        strategy="forward",
        check_sortedness=False,  # both sorted by their key above
    )
    quiet = pl.col("start_ns").is_null() | (pl.col("start_ns") >= pl.col("_first"))
    return nearest.filter(quiet).select(
        "gid", (pl.col("_first") - pl.col("_prev_end")).cast(pl.Int64).alias("_before")
    )


def _range_cases(
    frames: dict[str, pl.DataFrame], device: DeviceSpec | None, gemm_names: set[str] | None = None
) -> list[GemmCase]:
    """Timeline cases: tracekit ``gemm`` ranges and the user's own GEMM ranges (:func:`_user_gemm_ranges`).
    ``gemm_names`` are kernel names Nsight Compute counted tensor math for."""
    ranges = frames.get("ranges")
    kernels = frames.get("kernels")
    if ranges is None or kernels is None or ranges.height == 0 or kernels.height == 0:
        return []
    gemm_names = gemm_names or set()
    # a profiler's per-operator GEMM range (Kineto cpu_op, emit_nvtx: range_kind gemm-op) is the user's side of
    # the run, not tracekit's: a case when it carries a shape or FLOP count, else transparent to the range around it
    ranges = ranges.with_columns(
        pl.when(pl.col("range_kind") == "gemm-op")
        .then(None)
        .otherwise(pl.col("range_kind"))
        .alias("range_kind")
    )
    owner = _gemm_ancestor(ranges)
    user = _user_gemm_ranges(ranges, kernels, owner, gemm_names)
    user_cases = {rid for rid, (gid, _) in user.items() if gid == rid}
    owner.update(user)
    gemm_ranges = ranges.filter((pl.col("range_kind") == "gemm") | pl.col("range_id").is_in(list(user_cases)))
    if gemm_ranges.height == 0:
        return []
    shape_cols = [
        c for c in ("m", "n", "k", "dtype_a", "dtype_b", "dtype_out", "batch", "flops") if c in ranges.columns
    ]
    kcols = [
        "kernel_id", "device", "name", "start_ns", "end_ns", "duration_ns", "range_id", "grid_x", "grid_y",
        "grid_z", "block_x", "block_y", "block_z", "registers_per_thread", "static_smem_bytes",
        "dynamic_smem_bytes", "smem_bytes", "blocks_per_sm", "est_occupancy_pct",
    ]  # fmt: skip
    timed = pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null()  # a damaged row may lack them
    ks = _instance_kernels(kernels.select(kcols).filter(timed), owner, user_cases, gemm_names)
    has_kernels = set(ks["gid"].unique().to_list())
    # every kernel start per device, to tell a launch gap from time spent in other kernels
    kernel_starts = kernels.select("device", "start_ns", "end_ns").filter(timed).select("device", "start_ns")

    # instances of one range name under one context (and, for the user's ranges, one recorded shape) are one
    # case; names are turned into keys once per distinct name
    ordered = (
        gemm_ranges.filter(pl.col("range_id").is_in(list(has_kernels)))
        .sort("start_ns")
        .with_row_index("_order")
        .join(
            ranges.select(pl.col("range_id").alias("parent_id"), pl.col("name").alias("_parent_name")),
            on="parent_id",
            how="left",
        )
        .sort("_order")
    )
    extra: dict[int, tuple] = {}  # range_id -> its values of _SHAPE_COLUMNS
    ctx_of = _Memo(context_key)
    key_of = _Memo(range_key)
    own_name = _Memo(lambda n: parse_gemm_name(n) is not None)
    groups: dict[tuple[str, str | None, tuple], list[int]] = {}
    shape_exprs = [pl.col(c) if c in shape_cols else pl.lit(None).alias(c) for c in _SHAPE_COLUMNS]
    for rid, name, has_parent, parent_name, *values in ordered.select(
        "range_id", "name", pl.col("parent_id").is_not_null(), "_parent_name", *shape_exprs
    ).iter_rows():
        extra[rid] = tuple(values)
        ctx = ctx_of(parent_name) if has_parent else None
        shape: tuple = ()
        if rid in user_cases:  # a shape the profiler recorded (Kineto Input Dims) splits the case
            shape = extra[rid][:7]
            name = key_of(name)
            ctx = key_of(ctx) if ctx else ctx
        elif not own_name(name):  # a gemm range another reader marked: per-call counters dropped
            name = key_of(name)
        groups.setdefault((name, ctx, shape), []).append(rid)

    instances, aux_kernels, tops = _per_instance(ks, groups, kernel_starts)
    cases: list[GemmCase] = []
    for ci, ((name, ctx, shape), rids) in enumerate(groups.items()):
        is_user = rids[0] in user_cases
        if is_user:
            m, n, k, da, db, do, batch = shape or (None,) * 7
            parsed = {"m": m, "n": n, "k": k, "dtype_a": da, "dtype_b": db, "dtype_out": do, "batch": batch}
            label = f"{name} M={m} N={n} K={k}" if m and n and k else name
            if label != name and batch and batch > 1:
                label = f"{label} batch={batch}"
            case = GemmCase(origin="range", name=label, context=ctx, **parsed)
            case.user_range = True
            case.range_name = name
            pf = [f for rid in rids if (f := extra[rid][7])]
            if pf:
                case.profiler_flops = statistics.median(pf)
        else:
            parsed = parse_gemm_name(name)
            if parsed is None:  # a gemm range whose name tracekit did not write: the shape its row carries
                e = dict(zip(_SHAPE_COLUMNS, extra[rids[0]], strict=True))
                parsed = {c: e[c] for c in ("m", "n", "k", "dtype_a", "dtype_b") if e[c] is not None}
            case = GemmCase(origin="range", name=name, context=ctx, **parsed)
            pf = [f for rid in rids if (f := extra[rid][7])]
            if pf:
                case.profiler_flops = statistics.median(pf)
        case.device = device
        case.range_ids = rids
        # Per instance: own kernel time, auxiliary kernel time, idle time (inside the range, and since the
        # previous instance when nothing else ran in between). The median instance is reported: one cold
        # first launch (module load, a lazily created handle) must not set the typical launch's numbers.
        mains: list[float] = []
        auxs: list[float] = []
        gaps: list[float] = []
        n_launches = 0
        for rid in rids:
            first, last, busy, main_i, aux_i, _, most, before = instances[rid]
            gap = max(last - first - busy, 0) + before  # idle inside, and since the previous instance
            # a user range may hold a loop of GEMM launches: its times are per launch of the main kernel
            n_i = 1
            if is_user:
                n_i = most or 1
                n_launches += n_i
            mains.append(main_i / n_i)
            auxs.append(aux_i / n_i)
            gaps.append(gap / n_i)
        case.launches = n_launches if is_user else len(rids)
        case.main_ns = statistics.median(mains)
        case.aux_ns = statistics.median(auxs)
        case.gap_ns = statistics.median(gaps)
        case.aux_kernels = aux_kernels.get(ci, [])
        top = tops[ci]
        case.main_kernel = top["name"]
        grid = [top.get(c) for c in ("grid_x", "grid_y", "grid_z")]
        block = [top.get(c) for c in ("block_x", "block_y", "block_z")]
        if all(g is not None for g in grid):
            case.grid_size = int(grid[0] * grid[1] * grid[2])
        if all(b is not None for b in block):
            case.block_size = int(block[0] * block[1] * block[2])
        case.registers_per_thread = top.get("registers_per_thread")
        case.smem_per_block_bytes = smem_per_block(top)
        case.blocks_per_sm, case.est_occupancy_pct = top.get("blocks_per_sm"), top.get("est_occupancy_pct")
        case.time_source = "timeline: kernel durations and idle time inside the GEMM's ranges"
        cases.append(case)
    free_aux = _free_aux_time(ranges, kernels, owner)
    for case in cases:
        key = _gemm_key(case)
        for akey, (ns, counts) in free_aux.items() if key is not None else ():
            if _serves(akey, key):
                case.aux_ns += ns
                case.aux_kernels = sorted(set(case.aux_kernels) | set(counts))
    return cases


def smem_per_block(kernel: dict[str, Any]) -> int | None:
    """Shared memory per block of a kernels-frame row: its ``smem_bytes`` (all a Kineto trace gives: CUPTI's
    static + dynamic sum), else static + dynamic; None when the file does not say (or says none)."""
    total = kernel.get("smem_bytes")
    if total is None:
        total = (kernel.get("static_smem_bytes") or 0) + (kernel.get("dynamic_smem_bytes") or 0)
    return total or None


_LOOSE_COLUMNS = [
    "name", "start_ns", "end_ns", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
    "registers_per_thread", "static_smem_bytes", "dynamic_smem_bytes", "smem_bytes", "blocks_per_sm",
    "est_occupancy_pct",
]  # fmt: skip
"""The kernels' columns a case named by its kernel reads: its time and its first launch's configuration."""


def _loose_timeline_cases(
    frames: dict[str, pl.DataFrame], device: DeviceSpec | None, owned: set[int] | None = None
) -> list[GemmCase]:
    """A timeline with no GEMM range at all (someone else's capture, no NVTX, or only a profiler's per-op ranges
    without shapes): each GEMM kernel name is a case, named by kernel, its time the mean over its launches. No
    launch gap: with no range there is nothing to attribute idle time to."""
    kernels = frames.get("kernels")
    if kernels is None or kernels.height == 0:
        return []
    ranges = frames.get("ranges")
    if owned and ranges is not None and ranges.height:
        parent = dict(zip(ranges["range_id"].to_list(), ranges["parent_id"].to_list(), strict=True))
        inside: set[int] = set()
        for rid in parent:  # every range at or under a case's range
            cur, depth = rid, 0
            while cur is not None and depth < 64:
                if cur in owned:
                    inside.add(rid)
                    break
                cur, depth = parent.get(cur), depth + 1
        kernels = kernels.filter(pl.col("range_id").is_null() | ~pl.col("range_id").is_in(list(inside)))
    out: list[GemmCase] = []
    # per GEMM kernel name (the name test runs once per distinct name), in order of first launch: launches, the
    # mean time of the launches with both ends, and the first launch (its launch configuration is shown)
    gemm_names = [n for n in kernels["name"].unique().to_list() if is_gemm_kernel(n)]
    ordered = (
        kernels.select(_LOOSE_COLUMNS)
        .filter(pl.col("name").is_in(gemm_names))
        .sort("start_ns", maintain_order=True)
    )
    groups = (
        ordered.with_row_index("_row")
        .group_by("name", maintain_order=True)
        .agg(
            pl.len().alias("launches"),
            pl.col("_row").first().alias("first"),
            (pl.col("end_ns") - pl.col("start_ns")).mean().alias("mean_ns"),
        )
    )
    for name, launches, first, mean_ns in groups.iter_rows():
        case = GemmCase(origin="kernel", name=name)
        case.device = device
        case.main_kernel = name
        case.launches = launches
        case.main_ns = mean_ns  # None for a damaged file's kernel with no time
        top = ordered.row(first, named=True)
        grid = [top.get(c) for c in ("grid_x", "grid_y", "grid_z")]
        if all(g is not None for g in grid):
            case.grid_size = int(grid[0] * grid[1] * grid[2])
        block = [top.get(c) for c in ("block_x", "block_y", "block_z")]
        if all(b is not None for b in block):
            case.block_size = int(block[0] * block[1] * block[2])
        case.registers_per_thread = top.get("registers_per_thread")
        case.smem_per_block_bytes = smem_per_block(top)
        case.blocks_per_sm, case.est_occupancy_pct = top.get("blocks_per_sm"), top.get("est_occupancy_pct")
        case.time_source = "timeline: kernel durations (the kernel is in no range)"
        out.append(case)
    return out
