"""Kernels of a ranked run by role (GEMM, communication, other), per rank and step, and the collectives
matched across ranks with who arrived last."""

from __future__ import annotations

import re

import polars as pl

from ..gemm import is_gemm_kernel

COMM_PATTERN = re.compile(
    r"(?:^|[^a-z])nccl|cross_device_reduce|custom_?all_?reduce|all_?reduce_kernel|multimem_all_?reduce",
    re.IGNORECASE,
)
"""Communication kernels: NCCL / RCCL (``ncclDevKernel_*``, ``ncclKernel_*``) and the custom all-reduce kernels
of vLLM / SGLang / TensorRT-LLM."""
_STEP_NAME = re.compile(r"^ProfilerStep#\d+$")
WHOLE_CAPTURE = "(whole capture)"


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


def _mean_skew(c: pl.DataFrame) -> float | None:
    if c.height == 0 or c["skew_ns"].null_count() == c.height:
        return None
    return float(c.select("name", "index", "skew_ns").unique()["skew_ns"].mean())  # type: ignore[arg-type]
