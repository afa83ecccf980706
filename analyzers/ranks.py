"""Distributed ranks: which rank each row of a run belongs to, and the cross-rank analysis.

Labelling (at import, :func:`label_extract`)
    A file's frames get their ``rank`` from, in order: the file itself (Kineto's ``distributedInfo.rank``); the
    file's name (``nsys.rank3.sqlite``, ``ncu.rank3.ncu-rep``, ``trace_rank-3.json.gz``: what
    ``tracekit capture --ranks`` writes, one file per rank); or, for an Nsight Systems export of a whole process
    tree (``nsys profile torchrun ...``: every rank a process of one file), the processes that launched kernels
    when they ran on different devices or at the same time (sequential worker processes are not ranks),
    ordered by the lowest device each used, then pid. The last is an inference (torchrun's convention: local rank
    = device), recorded as such in the run's ``sources`` with the process and device behind each rank. A file
    with one process keeps a null rank (a single-process run).

The analysis (:func:`analyze_ranks`, for runs with two or more ranks)
    ``ranks``
        one row per rank: its process and device, kernel time split into GEMM, communication (NCCL) and other
        kernels, and the evidence that names the straggler.
    ``gemms`` / ``gemm_spread``
        the same GEMM on every rank, side by side: from tracekit GEMM ranges or Nsight Compute rows (each rank's
        own :func:`tracekit.analyzers.gemm.build_cases`, explained by :func:`tracekit.analyzers.explain.explain_case`),
        else GEMM kernels by name. Where the slowest rank's waterfall loses more in one factor than the fastest
        rank's (clock, waves, in-kernel efficiency with its occupancy evidence ...), that factor is the reason.
    ``steps``
        per rank and step (tracekit ``step`` ranges or PyTorch's ``ProfilerStep#N``; without any, the whole
        capture is one step): GEMM, communication and other kernel time.
    ``straggler``
        ranks wait for the slowest inside their collectives, so step times come out nearly equal; the rank the
        others wait for is the one with the *least* communication kernel time. The extra wait of the others is
        split into what the straggler's kernels outside collectives took longer (GEMMs among them) and how much
        longer its GPU sat idle (a host-side delay). Without collectives, the rank with the most kernel time.
    ``collectives``
        the i-th communication kernel of each name on every rank is the same collective (collectives are issued
        in the same order everywhere). The rank whose kernel is shortest arrived last (the others spun waiting
        for it); where all ranks share one clock (one file), the arrival skew is measured directly.

Kernel times are sums of durations (kernels on overlapping streams count twice); times are nanoseconds. Nothing
here needs the ranks' clocks to agree except the arrival skew, computed only within one file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tracekit.frames import SPECS

from .base import Extract
from .gemm import is_gemm_kernel

__all__ = [
    "COMM_PATTERN",
    "RANKED_FRAMES",
    "RankAnalysis",
    "analyze_ranks",
    "label_extract",
    "rank_frames",
    "rank_from_name",
    "run_ranks",
]

RANKED_FRAMES = ("kernels", "ranges", "ncu", "devices")
"""Frames with a ``rank`` column (tracekit/frames.py); a multi-rank run writes them partitioned by rank."""

_RANK_IN_NAME = re.compile(r"(?:^|[._-])rank[-_=]?(\d{1,6})(?=[._-]|$)", re.IGNORECASE)
COMM_PATTERN = re.compile(
    r"(?:^|[^a-z])nccl|cross_device_reduce|custom_?all_?reduce|all_?reduce_kernel|multimem_all_?reduce",
    re.IGNORECASE,
)
"""Communication kernels: NCCL / RCCL (``ncclDevKernel_*``, ``ncclKernel_*``) and the custom all-reduce kernels
of vLLM / SGLang / TensorRT-LLM."""
_STEP_NAME = re.compile(r"^ProfilerStep#\d+$")
WHOLE_CAPTURE = "(whole capture)"


# --- labelling ------------------------------------------------------------------------------------------------------
def rank_from_name(name: str) -> int | None:
    """The rank a file's name carries (``nsys.rank3.sqlite``, ``x_rank-3.pt.trace.json.gz``), else None."""
    matches = _RANK_IN_NAME.findall(name)
    return int(matches[-1]) if matches else None


def _set_rank(df: pl.DataFrame, value: pl.Expr) -> pl.DataFrame:
    return df.with_columns(pl.coalesce(pl.col("rank"), value.cast(pl.Int32)).alias("rank"))


def _concurrent(procs: pl.DataFrame) -> bool:
    """Whether processes look like ranks of one job: they used different devices, or their kernels ran at the
    same time. Processes that ran one after another on one device are a single job's workers (``tracekit bench
    gemm`` runs each backend in a process of its own), not ranks."""
    if procs["device"].n_unique() > 1:
        return True
    spans = procs.select("first", "last").drop_nulls().sort("first")
    reach = None
    for first, last in spans.iter_rows():
        if reach is not None and first < reach:
            return True
        reach = last if reach is None else max(reach, last)
    return False


def label_extract(ex: Extract, file_name: str) -> dict[str, Any]:
    """Fill the ``rank`` column of one file's frames (see the module docstring); returns what to record about it
    in the run's ``sources``: ``rank_source`` (``file`` | ``file name`` | ``processes``) and ``ranks`` (each rank
    with the pid and device behind it), or an empty dict when the file holds no rank."""
    present = [n for n in RANKED_FRAMES if n in ex.frames and ex.frames[n].height]
    found: set[int] = set()
    for n in present:
        found |= set(ex.frames[n]["rank"].drop_nulls().unique().to_list())
    if found:
        return {"rank_source": "file", "ranks": [{"rank": r} for r in sorted(found)]}
    named = rank_from_name(file_name)
    if named is not None:
        for n in present:
            ex.frames[n] = _set_rank(ex.frames[n], pl.lit(named))
        return {"rank_source": "file name", "ranks": [{"rank": named}]}
    kernels = ex.frames.get("kernels")
    if ex.kind != "nsys" or kernels is None or kernels.height == 0:
        return {}
    procs = (
        kernels.filter(pl.col("pid").is_not_null())
        .group_by("pid")
        .agg(
            pl.col("device").min().alias("device"),
            pl.col("device").n_unique().alias("devices"),
            pl.col("start_ns").min().alias("first"),
            pl.col("end_ns").max().alias("last"),
        )
        .sort("device", "pid", nulls_last=True)
    )
    if procs.height < 2 or not _concurrent(procs):
        return {}
    mapping = procs.with_columns(pl.int_range(pl.len(), dtype=pl.Int32).alias("_rank"))
    by_pid = mapping.select("pid", "_rank")
    for n in ("kernels", "ranges"):
        df = ex.frames.get(n)
        if df is not None and df.height:
            joined = df.select("pid").join(by_pid, on="pid", how="left", maintain_order="left")["_rank"]
            ex.frames[n] = _set_rank(df, pl.lit(joined))
    devices = ex.frames.get("devices")
    shared = mapping.group_by("device").len().filter(pl.col("len") > 1)["device"].to_list()
    if devices is not None and devices.height:
        one = mapping.filter(~pl.col("device").is_in(shared)).select("device", "_rank")
        joined = devices.select("device").join(one, on="device", how="left", maintain_order="left")["_rank"]
        ex.frames["devices"] = _set_rank(devices, pl.lit(joined))
    ranks = [
        {"rank": r["_rank"], "pid": r["pid"], "device": r["device"]}
        | ({"devices": r["devices"]} if r["devices"] > 1 else {})
        for r in mapping.iter_rows(named=True)
    ]
    note = "processes that launched kernels, ordered by the lowest device each used, then pid"
    if shared:
        note += f" (devices {sorted(shared)} are shared by several processes: ranks there follow pid order)"
    return {"rank_source": "processes", "rank_note": note, "ranks": ranks}


def run_ranks(frames: dict[str, pl.DataFrame]) -> list[int]:
    """The distinct ranks in a run's frames (empty for a single-process run)."""
    found: set[int] = set()
    for n in RANKED_FRAMES:
        df = frames.get(n)
        if df is not None and df.height and "rank" in df.columns:
            found |= set(df["rank"].drop_nulls().unique().to_list())
    return sorted(found)


def rank_frames(frames: dict[str, pl.DataFrame], rank: int) -> dict[str, pl.DataFrame]:
    """The frames of one rank: its kernels, ranges, ncu rows (with their metrics and rules) and devices. Tracekit's
    own measurements and failures carry no rank and are left out."""
    out = dict(frames)
    for n in RANKED_FRAMES:
        if n in frames:
            out[n] = frames[n].filter(pl.col("rank") == rank)
    if "ncu" in out:
        ids = out["ncu"]["ncu_id"].implode()
        for n in ("ncu_metrics", "ncu_rules"):
            if n in frames:
                out[n] = frames[n].filter(pl.col("ncu_id").is_in(ids))
    for n in ("measurements", "failures", "gemms"):
        if n in out:
            out[n] = SPECS[n].empty()
    return out


# --- kernels by role ------------------------------------------------------------------------------------------------
def _roles(frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Timeline kernels of ranked rows with a ``role``: ``comm`` (COMM_PATTERN), ``gemm`` (inside a tracekit GEMM
    range and not auxiliary, or named like a GEMM kernel) or ``other``."""
    k = frames["kernels"].filter(pl.col("rank").is_not_null())
    ranges = frames["ranges"]
    gemm_ids = ranges.filter(pl.col("range_kind") == "gemm")["range_id"].implode()
    aux_ids = ranges.filter(pl.col("range_kind") == "aux")["range_id"].implode()
    names = k.select("name").unique().drop_nulls()
    names = names.with_columns(
        pl.col("name")
        .map_elements(lambda s: bool(COMM_PATTERN.search(s)), return_dtype=pl.Boolean)
        .alias("_c"),
        pl.col("name").map_elements(is_gemm_kernel, return_dtype=pl.Boolean).alias("_g"),
    )
    k = k.join(names, on="name", how="left", maintain_order="left")
    in_gemm = pl.col("range_id").is_in(gemm_ids) & ~pl.col("range_id").is_in(aux_ids)
    return k.with_columns(
        pl.when(pl.col("_c").fill_null(False))
        .then(pl.lit("comm"))
        .when(pl.col("_g").fill_null(False) | in_gemm.fill_null(False))
        .then(pl.lit("gemm"))
        .otherwise(pl.lit("other"))
        .alias("role")
    ).drop("_c", "_g")


def _role_sums(k: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    dur = pl.col("duration_ns").fill_null(0)
    return k.group_by(keys, maintain_order=True).agg(
        pl.len().alias("kernels"),
        dur.sum().alias("busy_ns"),
        dur.filter(pl.col("role") == "gemm").sum().alias("gemm_ns"),
        dur.filter(pl.col("role") == "comm").sum().alias("comm_ns"),
        dur.filter(pl.col("role") == "other").sum().alias("other_ns"),
    )


# --- steps -------------------------------------------------------------------------------------------------------------
def _step_ranges(ranges: pl.DataFrame) -> pl.DataFrame:
    ranked = ranges.filter(pl.col("rank").is_not_null() & pl.col("end_ns").is_not_null())
    steps = ranked.filter(pl.col("range_kind") == "step")
    if steps.height == 0:
        steps = ranked.filter(pl.col("name").str.contains(_STEP_NAME.pattern))
    # nested step ranges (a step inside a step) would count kernels twice: keep the outermost
    if steps.height:
        steps = steps.filter(pl.col("depth").fill_null(0) == steps["depth"].fill_null(0).min())
    return steps.sort("rank", "start_ns").with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).over("rank").alias("step")
    )


def _steps(k: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """Kernel time per rank and step (columns in :class:`RankAnalysis`)."""
    steps = _step_ranges(ranges)
    t = pl.coalesce("launch_start_ns", "start_ns")
    if steps.height == 0:
        span = k.group_by("rank").agg(
            pl.col("start_ns").min().alias("start_ns"), pl.col("end_ns").max().alias("end_ns")
        )
        per = _role_sums(k.sort("rank"), ["rank"]).join(span, on="rank")
        per = per.with_columns(pl.lit(0, pl.Int64).alias("step"), pl.lit(WHOLE_CAPTURE).alias("name"))
    else:
        # a kernel belongs to the step open when it was launched (on the CPU), on the same rank and process
        s = steps.select(
            "rank", "pid", "step", "name", "start_ns", "end_ns", pl.col("start_ns").alias("_s")
        ).sort("_s")
        kk = k.with_columns(t.alias("_s")).filter(pl.col("_s").is_not_null()).sort("_s")
        # both sides are sorted by _s as a whole, hence within every (rank, pid) group: polars cannot check that
        # with `by` and would warn on every call
        joined = kk.join_asof(
            s.drop("start_ns", "end_ns", "name"), on="_s", by=["rank", "pid"], check_sortedness=False
        )
        joined = joined.join(s.select("rank", "step", "end_ns").rename({"end_ns": "_e"}), on=["rank", "step"])
        joined = joined.filter(pl.col("_s") <= pl.col("_e"))
        per = s.select("rank", "step", "name", "start_ns", "end_ns").join(
            _role_sums(joined, ["rank", "step"]), on=["rank", "step"], how="left"
        )
        per = per.with_columns(
            pl.col(c).fill_null(0) for c in ("kernels", "busy_ns", "gemm_ns", "comm_ns", "other_ns")
        )
    per = per.with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("duration_ns"),
        (pl.col("busy_ns") - pl.col("comm_ns")).alias("compute_ns"),
    )
    cols = ["rank", "step", "name", "start_ns", "end_ns", "duration_ns", "kernels", "gemm_ns", "comm_ns"]
    return per.select(*cols, "other_ns", "compute_ns").sort("rank", "step")


# --- collectives -------------------------------------------------------------------------------------------------------
def _collectives(k: pl.DataFrame, one_clock: bool) -> tuple[pl.DataFrame, list[str]]:
    """One row per (collective, rank): ``index`` (i-th kernel of that name on the rank), ``name``, ``rank``,
    ``start_ns``, ``duration_ns``, ``last_arrival`` (this rank's kernel was the shortest: the others waited for
    it) and, with one clock, ``skew_ns`` (latest start minus earliest) and ``late`` (this rank started last)."""
    notes: list[str] = []
    c = k.filter(pl.col("role") == "comm").sort("rank", "start_ns")
    empty = pl.DataFrame(
        schema={
            "index": pl.Int64,
            "name": pl.String,
            "rank": pl.Int32,
            "start_ns": pl.Int64,
            "duration_ns": pl.Int64,
            "last_arrival": pl.Boolean,
            "skew_ns": pl.Int64,
            "late": pl.Boolean,
        }
    )
    if c.height == 0:
        return empty, notes
    c = c.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over("rank", "name").alias("index"))
    nranks = c["rank"].n_unique()
    counts = c.group_by("name", "rank").len()
    uneven = counts.group_by("name").agg(pl.col("len").n_unique() > 1, pl.col("rank").n_unique() < nranks)
    odd = uneven.filter(pl.col("len") | pl.col("rank"))["name"].to_list()
    if odd:
        notes.append(
            f"{len(odd)} communication kernel name(s) occur a different number of times on different ranks "
            "(the capture windows differ?): collectives matched by order up to the shortest rank"
        )
    full = c.group_by("name", "index").agg(pl.len().alias("_n")).filter(pl.col("_n") == nranks)
    c = c.join(full.select("name", "index"), on=["name", "index"])
    if c.height == 0:
        return empty, notes
    grp = ["name", "index"]
    out = c.with_columns(
        (pl.col("duration_ns") == pl.col("duration_ns").min().over(grp)).alias("last_arrival"),
        (
            (pl.col("start_ns").max().over(grp) - pl.col("start_ns").min().over(grp))
            if one_clock
            else pl.lit(None, pl.Int64)
        ).alias("skew_ns"),
        (
            (pl.col("start_ns") == pl.col("start_ns").max().over(grp))
            if one_clock
            else pl.lit(None, pl.Boolean)
        ).alias("late"),
    )
    return out.select(empty.columns).sort("name", "index", "rank"), notes


# --- GEMMs per rank ------------------------------------------------------------------------------------------------------
def _case_rows(frames: dict[str, pl.DataFrame], ranks: list[int], environment: Any, calibration: Any):
    """Each rank's GEMM cases explained; ``(rows, waterfalls by (key, rank))``. Profiled kernels outside GEMM
    ranges count only when named like a GEMM; several cases of one label on a rank (the same kernel profiled in
    several launches) are one row, its time the launch-weighted mean and its waterfall the most-launched case's."""
    from .explain import explain_case
    from .gemm import build_cases

    rows: dict[tuple[str, int], dict[str, Any]] = {}
    wfs: dict[tuple[str, int], Any] = {}
    for r in ranks:
        for case in build_cases(rank_frames(frames, r), calibration=calibration, environment=environment):
            if case.origin == "ncu-kernel" and not is_gemm_kernel(case.main_kernel or case.name):
                continue
            key = (case.label, r)
            launches = max(case.launches, 1)
            row = rows.get(key)
            if row is not None:
                total = row["launches"] + launches
                for col, new in (("time_ns", case.total_ns), ("tflops", case.achieved_tflops)):
                    if row[col] is not None and new is not None:
                        row[col] = (row[col] * row["launches"] + new * launches) / total
                row["launches"] = total
                if launches <= row["_top"]:
                    continue
            wf = explain_case(case)
            v = wf.verdict
            wfs[key] = wf
            fresh = {
                "gemm": case.label,
                "origin": case.origin,
                "rank": r,
                "launches": launches,
                "main_kernel": case.main_kernel,
                "time_ns": case.total_ns,
                "tflops": case.achieved_tflops,
                "pct_of_peak": (
                    100.0 * case.achieved_tflops / case.peak_tflops
                    if case.achieved_tflops and case.peak_tflops
                    else None
                ),
                "sm_clock_hz": case.sm_clock_hz,
                "verdict": (v.name + (f": {v.cause}" if v.cause else "")) if v else None,
                "_top": launches,
            }
            if row is None:
                rows[key] = fresh
            else:  # the most-launched case speaks for the row; the mean time stays the mean
                keep = {c: row[c] for c in ("launches", "time_ns", "tflops")}
                row.update(fresh)
                row.update(keep)
    return [{k: v for k, v in row.items() if k != "_top"} for row in rows.values()], wfs


def _kernel_rows(k: pl.DataFrame) -> list[dict[str, Any]]:
    """GEMM kernels by name per rank, for runs without GEMM ranges or Nsight Compute rows."""
    g = (
        k.filter(pl.col("role") == "gemm")
        .group_by("name", "rank")
        .agg(pl.len().alias("launches"), pl.col("duration_ns").mean().alias("time_ns"))
    )
    return [
        {
            "gemm": r["name"],
            "origin": "kernel",
            "rank": r["rank"],
            "launches": r["launches"],
            "main_kernel": r["name"],
            "time_ns": r["time_ns"],
            "tflops": None,
            "pct_of_peak": None,
            "sm_clock_hz": None,
            "verdict": None,
        }
        for r in g.iter_rows(named=True)
    ]


_GEMM_SCHEMA = {
    "gemm": pl.String,
    "origin": pl.String,
    "rank": pl.Int32,
    "launches": pl.Int64,
    "main_kernel": pl.String,
    "time_ns": pl.Float64,
    "tflops": pl.Float64,
    "pct_of_peak": pl.Float64,
    "sm_clock_hz": pl.Float64,
    "verdict": pl.String,
}


def _why(key: str, slow: int, fast: int, wfs: dict[tuple[str, int], Any]) -> str | None:
    """Which waterfall factor the slowest rank loses more in than the fastest, in words."""
    a, b = wfs.get((key, slow)), wfs.get((key, fast))
    if a is None or b is None:
        return None
    fa = {f.name: f for f in a.factors}
    fb = {f.name: f for f in b.factors}
    worst = None
    for name in fa.keys() & fb.keys():
        ratio = fa[name].value / fb[name].value if fb[name].value > 0 else 1.0
        if worst is None or ratio < worst[1]:
            worst = (name, ratio)
    if worst is None or worst[1] > 0.995:
        return None
    name = worst[0]
    text = f"{name} factor {fa[name].value:.2f} on rank {slow} vs {fb[name].value:.2f} on rank {fast}"
    ea, eb = fa[name].evidence, fb[name].evidence
    details = []
    if ea.get("sm_clock_hz") and eb.get("sm_clock_hz"):
        details.append(f"SM clock {ea['sm_clock_hz'] / 1e6:.0f} vs {eb['sm_clock_hz'] / 1e6:.0f} MHz")
    if ea.get("power_w") and eb.get("power_w"):
        details.append(f"power {ea['power_w']:.0f} vs {eb['power_w']:.0f} W")
    for key_ in ("achieved_occupancy_pct", "tensor_pipe_pct", "waves"):
        if ea.get(key_) is not None and eb.get(key_) is not None and ea[key_] != eb[key_]:
            details.append(f"{key_.replace('_pct', ' %').replace('_', ' ')} {ea[key_]:.3g} vs {eb[key_]:.3g}")
    cause = fa[name].cause
    return text + (f" ({cause})" if cause else "") + (": " + ", ".join(details) if details else "")


def _spread(gemms: pl.DataFrame, wfs: dict[tuple[str, int], Any]) -> pl.DataFrame:
    """One row per GEMM seen on two or more ranks: ``ranks``, ``min_ns`` / ``median_ns`` / ``max_ns`` (time per
    launch), ``spread_pct`` (max / min - 1, %), ``fastest_rank``, ``slowest_rank``, ``why``."""
    schema = {
        "gemm": pl.String,
        "origin": pl.String,
        "ranks": pl.UInt32,
        "min_ns": pl.Float64,
        "median_ns": pl.Float64,
        "max_ns": pl.Float64,
        "spread_pct": pl.Float64,
        "fastest_rank": pl.Int32,
        "slowest_rank": pl.Int32,
        "why": pl.String,
    }
    g = gemms.filter(pl.col("time_ns").is_not_null())
    if g.height == 0:
        return pl.DataFrame(schema=schema)
    agg = (
        g.sort("rank")
        .group_by("gemm", "origin", maintain_order=True)
        .agg(
            pl.col("rank").n_unique().cast(pl.UInt32).alias("ranks"),
            pl.col("time_ns").min().alias("min_ns"),
            pl.col("time_ns").median().alias("median_ns"),
            pl.col("time_ns").max().alias("max_ns"),
            pl.col("rank").sort_by("time_ns").first().alias("fastest_rank"),
            pl.col("rank").sort_by("time_ns").last().alias("slowest_rank"),
        )
        .filter(pl.col("ranks") >= 2)
        .with_columns(((pl.col("max_ns") / pl.col("min_ns") - 1) * 100).alias("spread_pct"))
    )
    whys = [
        _why(r["gemm"], r["slowest_rank"], r["fastest_rank"], wfs) if r["spread_pct"] > 0 else None
        for r in agg.iter_rows(named=True)
    ]
    agg = agg.with_columns(pl.Series("why", whys, dtype=pl.String))
    return agg.select(list(schema)).sort("spread_pct", descending=True, nulls_last=True)


# --- all together ------------------------------------------------------------------------------------------------------
@dataclass
class RankAnalysis:
    """The cross-rank view of a run with two or more ranks (see the module docstring).

    ``ranks``: rank, pid, device, gpu, kernels, busy_ns, gemm_ns, comm_ns, other_ns, compute_ns (busy - comm),
    span_ns (first kernel start to last end), idle_ns (span - busy: the GPU waiting for the host), gemm_pct / comm_pct (of busy), steps, last_arrivals (collectives
    this rank arrived at last), straggler. ``gemms``: gemm (range label or kernel name), origin, rank, launches,
    main_kernel, time_ns (per launch), tflops, pct_of_peak, sm_clock_hz, verdict. ``gemm_spread``: see
    :func:`_spread`. ``steps``: rank, step, name, start_ns, end_ns, duration_ns, kernels, gemm_ns, comm_ns,
    other_ns, compute_ns. ``collectives``: see :func:`_collectives`."""

    ranks: pl.DataFrame
    gemms: pl.DataFrame
    gemm_spread: pl.DataFrame
    steps: pl.DataFrame
    collectives: pl.DataFrame
    straggler: int | None
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``tracekit report --format json``'s ``ranks``)."""

        def records(df: pl.DataFrame) -> list[dict[str, Any]]:
            return json.loads(df.write_json()) if df.height else []

        return {
            "ranks": records(self.ranks),
            "straggler": self.straggler,
            "reasons": self.reasons,
            "gemm_spread": records(self.gemm_spread),
            "gemms": records(self.gemms),
            "steps": records(self.steps),
            "collectives": {
                "count": int(self.collectives.select("name", "index").n_unique())
                if self.collectives.height
                else 0,
                "mean_skew_ns": _mean_skew(self.collectives),
            },
            "notes": self.notes,
        }


def _mean_skew(c: pl.DataFrame) -> float | None:
    if c.height == 0 or c["skew_ns"].null_count() == c.height:
        return None
    return float(c.select("name", "index", "skew_ns").unique()["skew_ns"].mean())  # type: ignore[arg-type]


def analyze_ranks(
    frames: dict[str, pl.DataFrame],
    *,
    environment: dict[str, Any] | None = None,
    calibration: dict[str, Any] | None = None,
) -> RankAnalysis | None:
    """The cross-rank analysis of a run; None when the run holds fewer than two ranks."""
    ranks = run_ranks(frames)
    if len(ranks) < 2:
        return None
    notes: list[str] = []
    k = _roles(frames)
    sources = k["source"].n_unique() if k.height else 0
    one_clock = sources == 1
    if not one_clock and k.height:
        notes.append(
            "ranks come from separate files: their clocks are not assumed to agree, so collective arrival skew "
            "is not measured (the shortest-wait signal is)"
        )
    steps = _steps(k, frames["ranges"]) if k.height else pl.DataFrame()
    coll, cnotes = _collectives(k, one_clock)
    notes += cnotes
    rows, wfs = _case_rows(frames, ranks, environment, calibration)
    if not rows:
        rows = _kernel_rows(k)
    if rows and all(r["origin"] == "kernel" for r in rows):  # by name: from here or from the explainer
        notes.append(
            "no tracekit GEMM ranges or Nsight Compute rows: GEMMs compared by kernel name, timeline only "
            "(capture with 'tracekit capture --ranks --nsys --ncu' for each rank's waterfall)"
        )
    gemms = (
        pl.DataFrame(rows, schema=_GEMM_SCHEMA).sort("gemm", "rank")
        if rows
        else pl.DataFrame(schema=_GEMM_SCHEMA)
    )
    spread = _spread(gemms, wfs)

    per = _role_sums(k.sort("rank"), ["rank"]) if k.height else pl.DataFrame(schema={"rank": pl.Int32})
    spans = k.group_by("rank").agg(
        (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("span_ns"),
        pl.col("pid").unique().sort().first().alias("pid"),
        pl.col("device").unique().sort().first().alias("device"),
        pl.col("device").n_unique().alias("_ndev"),
    )
    table = pl.DataFrame({"rank": pl.Series(ranks, dtype=pl.Int32)})
    table = table.join(spans, on="rank", how="left").join(per, on="rank", how="left")
    devices = frames["devices"].filter(pl.col("rank").is_not_null()).unique("rank", keep="first")
    table = table.join(devices.select("rank", pl.col("name").alias("gpu")), on="rank", how="left")
    ncu_counts = frames["ncu"].filter(pl.col("rank").is_not_null()).group_by("rank").len("ncu_kernels")
    table = table.join(ncu_counts, on="rank", how="left")
    if steps.height:
        table = table.join(steps.group_by("rank").len("steps"), on="rank", how="left")
    else:
        table = table.with_columns(pl.lit(None, pl.UInt32).alias("steps"))
    arrivals = (
        coll.filter(pl.col("last_arrival")).group_by("rank").len("last_arrivals")
        if coll.height
        else pl.DataFrame(schema={"rank": pl.Int32, "last_arrivals": pl.UInt32})
    )
    table = table.join(arrivals, on="rank", how="left")
    for c in ("kernels", "busy_ns", "gemm_ns", "comm_ns", "other_ns"):
        if c not in table.columns:
            table = table.with_columns(pl.lit(None, pl.Int64).alias(c))
    table = table.with_columns(
        pl.when(pl.col("_ndev") > 1).then(None).otherwise(pl.col("device")).alias("device"),
        (pl.col("busy_ns") - pl.col("comm_ns")).alias("compute_ns"),
        (pl.col("span_ns") - pl.col("busy_ns")).clip(lower_bound=0).alias("idle_ns"),
        (100.0 * pl.col("gemm_ns") / pl.col("busy_ns")).alias("gemm_pct"),
        (100.0 * pl.col("comm_ns") / pl.col("busy_ns")).alias("comm_pct"),
        pl.col("ncu_kernels").fill_null(0),
        pl.col("last_arrivals").fill_null(0),
    )
    straggler, reasons = _straggler(table, steps, spread, coll)
    is_slow = pl.col("rank") == straggler if straggler is not None else pl.lit(False)
    table = table.with_columns(is_slow.alias("straggler"))
    cols = [
        "rank", "pid", "device", "gpu", "kernels", "busy_ns", "gemm_ns", "comm_ns", "other_ns", "compute_ns",
        "span_ns", "idle_ns", "gemm_pct", "comm_pct", "steps", "last_arrivals", "ncu_kernels", "straggler",
    ]  # fmt: skip
    return RankAnalysis(
        ranks=table.select(cols).sort("rank"),
        gemms=gemms,
        gemm_spread=spread,
        steps=steps,
        collectives=coll,
        straggler=straggler,
        reasons=reasons,
        notes=notes,
    )


STRAGGLER_MIN_PCT = 1.0
"""A rank is named the straggler only when what sets it apart is at least this share (%) of the ranks' time: the
extra time the others wait in collectives, as a share of the span; without collectives, the extra kernel time."""


def _ms(ns: float | None) -> str:
    return "?" if ns is None else f"{ns / 1e6:.3f} ms"


def _short(name: str, limit: int = 90) -> str:
    """A kernel or range name cut for a sentence (template arguments make demangled names long)."""
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _more(ns: float, more: str = "more", less: str = "less") -> str:
    return f"{abs(ns) / 1e6:.3f} ms {more if ns >= 0 else less}"


def _straggler(
    table: pl.DataFrame, steps: pl.DataFrame, spread: pl.DataFrame, coll: pl.DataFrame
) -> tuple[int | None, list[str]]:
    """The rank the others wait for, and the evidence in sentences.

    With collectives: the rank whose communication kernels are shortest (the others spin inside theirs until it
    arrives), named when the extra wait is at least STRAGGLER_MIN_PCT of the span. The extra wait is split into
    what its kernels outside collectives took longer (GEMMs among them) and how much longer its GPU sat idle
    (host-side delay: launches, CPU work, data loading). Without collectives: the rank with the most kernel time
    outside collectives, when that exceeds the least by STRAGGLER_MIN_PCT."""
    t = table.filter(pl.col("busy_ns").fill_null(0) > 0)
    if t.height < 2:
        reasons = ["no timeline kernels on two ranks, so who waits for whom is unknown (capture with --nsys)"]
        if spread.height:
            top = spread.row(0, named=True)
            reasons.append(_gemm_gap(top, top["slowest_rank"]))
        return None, reasons
    comm = t.filter(pl.col("comm_ns") > 0)
    reasons: list[str] = []
    if comm.height == t.height:
        slow = comm.sort("comm_ns").row(0, named=True)
        waiter = comm.sort("comm_ns", descending=True).row(0, named=True)
        r, w = slow["rank"], waiter["rank"]
        extra = waiter["comm_ns"] - slow["comm_ns"]
        span = max(slow["span_ns"] or 0, waiter["span_ns"] or 0)
        share = 100.0 * extra / span if span else 0.0
        if share < STRAGGLER_MIN_PCT:
            return None, [
                f"no straggler: communication kernel time differs by {_ms(extra)} between ranks "
                f"({share:.2f}% of the {_ms(span)} span, under {STRAGGLER_MIN_PCT:g}%)"
            ]
        reasons.append(
            f"rank {r} is the one the others wait for: rank {w} spent {_ms(extra)} more inside communication "
            f"kernels ({_ms(waiter['comm_ns'])} vs {_ms(slow['comm_ns'])}; {share:.1f}% of the span)"
        )
        d_compute = (slow["compute_ns"] or 0) - (waiter["compute_ns"] or 0)
        d_gemm = (slow["gemm_ns"] or 0) - (waiter["gemm_ns"] or 0)
        d_idle = (slow["idle_ns"] or 0) - (waiter["idle_ns"] or 0)
        reasons.append(
            f"against rank {w}: its kernels outside collectives took {_more(d_compute)} (GEMMs {_more(d_gemm)}) "
            f"and its GPU sat idle {_more(d_idle, 'longer', 'shorter')}"
            + (
                ": the delay is mostly on the host (launches, CPU work, data loading), not in its kernels"
                if d_idle > max(d_compute, 0)
                else ": the delay is mostly in its kernels"
                if d_compute > 0
                else ""
            )
        )
        if coll.height:
            n = coll.select("name", "index").n_unique()
            mine = int(coll.filter(pl.col("last_arrival") & (pl.col("rank") == r)).height)
            reasons.append(
                f"its communication kernel was the shortest (it arrived last) at {mine} of {n} collectives"
            )
            if coll["skew_ns"].null_count() < coll.height:
                late = int(coll.filter(pl.col("late") & (pl.col("rank") == r)).height)
                reasons.append(
                    f"on the shared clock it started {late} of {n} collectives last; mean arrival skew "
                    f"{(_mean_skew(coll) or 0) / 1e3:.1f} µs"
                )
        if steps.height and steps["step"].n_unique() > 1:
            per_step = steps.group_by("step").agg(pl.col("rank").sort_by("comm_ns").first().alias("slow"))
            wins = int((per_step["slow"] == r).sum())
            reasons.append(f"it was waited for in {wins} of {per_step.height} steps")
    else:
        slow = t.sort("compute_ns", descending=True).row(0, named=True)
        fast = t.sort("compute_ns").row(0, named=True)
        r = slow["rank"]
        pct = 100.0 * (slow["compute_ns"] / fast["compute_ns"] - 1.0) if fast["compute_ns"] else 0.0
        if pct < STRAGGLER_MIN_PCT:
            return None, [
                f"no straggler: kernel time differs by {pct:.2f}% between ranks (under {STRAGGLER_MIN_PCT:g}%)"
                + ("; no communication kernels to show who waits" if comm.height == 0 else "")
            ]
        reasons.append(
            f"rank {r} spent the most kernel time: {_ms(slow['compute_ns'])}, {pct:.1f}% more than rank "
            f"{fast['rank']} ({_ms(fast['compute_ns'])}; GEMMs {_ms(slow['gemm_ns'])} vs {_ms(fast['gemm_ns'])})"
        )
    mine = spread.filter(pl.col("slowest_rank") == r)
    if mine.height:
        reasons.append("its largest GEMM gap: " + _gemm_gap(mine.row(0, named=True), r))
    return r, reasons


def _gemm_gap(top: dict[str, Any], r: int) -> str:
    line = f"{_short(top['gemm'])} is {top['spread_pct']:.1f}% slower on rank {r} than on rank {top['fastest_rank']}"
    return line + (f"; why: {top['why']}" if top["why"] else "")
