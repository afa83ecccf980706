"""Calls, the unit every timeline case is aggregated from: one row per call of a GEMM (:func:`tracekit_calls` for
tracekit's ``gemm`` ranges, :func:`user_calls` for everything else), and :func:`aggregate`, which turns the calls
of each case into its :class:`~tracekit.analyzers.analysis.model.Timing`.

A call is

- an instance of a tracekit ``gemm`` range: every kernel in it is the call's (the GEMM kernel, kernels in its
  ``aux`` sub-ranges and the rest as auxiliary), and the kernels of the tracekit ``aux`` range right before it
  that feeds it (same backend or its family, same M and K: a quantize step) are its auxiliary kernels;
- an instance of a shaped range (a profiler's operator with its recorded shape, or a user range carrying one),
  or of a profiler operator range holding exactly one GEMM kernel: every kernel under it is the call's;
- else one GEMM kernel launch.

Memsets and memcpys are rows like kernels (class ``memory``, :func:`~.timeline.timeline_cases`): one under a call's
operator is the call's (cuBLAS zeroing a split-K workspace), its time aux time, not idle time. Calls of the last
two kinds own the free kernels of their range instance by role (:mod:`.roles`), but never a kernel that another
profiler operator launched (:func:`_by_operator`: the correlation id links each kernel to its launching
operator): those are fusion candidates (:mod:`.fusion`), reported beside the call, not in it. Per call:
**GEMM time** (its GEMM kernels and split-K reduce kernels), **aux time** (its other kernels), the **gap** (idle
GPU time between its first and last kernel in stretches under the launch-gap limit; longer stretches are pauses,
counted apart) and, added by :func:`aggregate`, the idle time since the previous call of the same case when
nothing else ran in between (a host that does not launch fast enough).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from ..analysis.model import AuxKernel, Dist, FusionCandidate, Timing
from ..taxonomy import classify_name
from .case import LAUNCH_GAP_MAX_NS
from .fusion import fusion_uses
from .names import aux_key, classify_kernel
from .parts import call, timing
from .roles import assign

_NO_DEVICE = -(2**31)
"""Stands in for a kernel's missing device or stream when rows are grouped or matched by them."""

ROLE = {
    "quantize": "quantize",
    "splitk-reduce": "splitk-reduce",
    "activation": "activation",
    "layout": "layout",
}


def _gaps(rows: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """Per row (sorted by ``group`` then start): the idle time since every earlier row of its group ended
    (``_idle``: 0 when it starts while another runs), split into a gap (``_gap``, under the launch-gap limit)
    and a pause (``_pause``)."""
    end_before = pl.col("end_ns").cum_max().shift(1).over(group)
    idle = (
        pl.when(end_before.is_null()).then(0).otherwise((pl.col("start_ns") - end_before).clip(lower_bound=0))
    )
    return rows.with_columns(idle.alias("_idle")).with_columns(
        pl.when(pl.col("_idle") < LAUNCH_GAP_MAX_NS).then(pl.col("_idle")).otherwise(0).alias("_gap"),
        pl.when(pl.col("_idle") >= LAUNCH_GAP_MAX_NS).then(pl.col("_idle")).otherwise(0).alias("_pause"),
    )


def _call_rows(owned: pl.DataFrame, main: pl.Expr, splitk: pl.Expr) -> pl.DataFrame:
    """Per call (``owner``): first start, last end, device, GEMM / split-K / aux time, GEMM launches and its
    longest GEMM kernel's row (``_top``: the case's signature), from the rows it owns (``main`` marks the GEMM
    kernels, ``splitk`` the reduce kernels)."""
    dur = pl.col("duration_ns").cast(pl.Float64)
    gemm = main | splitk
    return owned.group_by("owner").agg(
        pl.col("start_ns").min().alias("first"),
        pl.col("end_ns").max().alias("last"),
        pl.col("device").first().alias("device"),
        dur.filter(gemm).sum().alias("gemm"),
        dur.filter(splitk).sum().alias("splitk"),
        dur.filter(~gemm).sum().alias("aux"),
        main.sum().alias("launches"),
        pl.col("kernel_id")
        .filter(main)
        .sort_by(
            [pl.col("duration_ns").filter(main), pl.col("kernel_id").filter(main)], descending=[True, False]
        )
        .first()
        .alias("_top"),
    )


def _longest_as_main(rows: pl.DataFrame, key: str, eligible: pl.Expr) -> tuple[pl.DataFrame, pl.Series]:
    """``rows`` with ``_main`` also set on the longest ``eligible`` kernel (of equals, the lowest kernel id) of each
    call (``key``) that has no GEMM kernel (``_main``), and those calls' keys: both kinds of call take their GEMM
    kernel by this one rule."""
    none = (
        rows.filter(pl.col(key).is_not_null())
        .group_by(key)
        .agg(pl.col("_main").any().alias("_any"))
        .filter(~pl.col("_any"))[key]
    )
    if not none.len():
        return rows, none
    longest = (
        rows.filter(pl.col(key).is_in(none.implode()) & eligible)
        .group_by(key)
        .agg(
            pl.col("kernel_id")
            .sort_by(["duration_ns", "kernel_id"], descending=[True, False])
            .first()
            .alias("_l")
        )
    )
    rows = (
        rows.join(longest, on=key, how="left")
        .with_columns(
            (pl.col("_main") | (pl.col("kernel_id") == pl.col("_l")).fill_null(False)).alias("_main")
        )
        .drop("_l")
    )
    return rows, none


def _with_gaps(calls: pl.DataFrame, rows: pl.DataFrame, group: list[str]) -> pl.DataFrame:
    """``calls`` with the gap and pauses inside each: the idle stretches of its sequence (``rows`` of every
    kernel of the range instances, in ``group`` order) after its first row up to its last one."""
    seq = _gaps(rows.sort([*group, "start_ns", "kernel_id"]), group).with_columns(
        pl.col("_gap").cum_sum().over(group).alias("_cg"),
        pl.col("_pause").cum_sum().over(group).alias("_cp"),
        (pl.col("_pause") > 0).cast(pl.Int64).cum_sum().over(group).alias("_cn"),
    )
    ends = (
        seq.filter(pl.col("owner").is_not_null())
        .group_by("owner")
        .agg(
            (pl.col("_cg").max() - pl.col("_cg").min()).alias("gap"),
            (pl.col("_cp").max() - pl.col("_cp").min()).alias("paused"),
            (pl.col("_cn").max() - pl.col("_cn").min()).alias("pauses"),
        )
    )
    return calls.join(ends, on="owner", how="left").with_columns(
        pl.col("gap").fill_null(0).cast(pl.Float64),
        pl.col("paused").fill_null(0).cast(pl.Float64),
        pl.col("pauses").fill_null(0).cast(pl.Int64),
    )


# --- tracekit's ranges ----------------------------------------------------------------------------------------------
def tracekit_calls(ks: pl.DataFrame, ranges: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Calls of tracekit ``gemm`` ranges: (calls, the auxiliary rows they own). ``ks`` are the timed kernels
    with their range resolution (:mod:`.ranges`); a call's ``owner`` is its GEMM range's id. GEMM kernels are the
    ones the kernel table calls a GEMM or does not know, outside ``aux`` sub-ranges; a call with none takes its
    longest kernel as its GEMM. The kernels of free ``aux`` ranges join the call they feed."""
    inside = ks.filter(pl.col("tk_gemm").is_not_null())
    names = inside["name"].drop_nulls().unique().to_list()
    main_names = [n for n in names if classify_kernel(n) == "main"]
    rows = inside.with_columns(
        pl.col("tk_gemm").alias("owner"),
        (~pl.col("aux_in_gemm") & (pl.col("name").is_null() | pl.col("name").is_in(main_names))).alias(
            "_main"
        ),
    )
    rows, _ = _longest_as_main(rows, "owner", pl.lit(True))
    splitk = ~pl.col("_main") & ~pl.col("aux_in_gemm") & (pl.col("cls") == "splitk-reduce").fill_null(False)
    rows = rows.with_columns(splitk.alias("_splitk"))
    calls = _call_rows(rows, pl.col("_main"), pl.col("_splitk"))
    calls = _with_gaps(calls, rows, ["owner"])
    aux_rows = rows.filter(~pl.col("_main")).select("owner", "name", "cls", "duration_ns", "_splitk")
    calls, free_rows = _free_aux(ks, ranges, calls)
    return calls, pl.concat([aux_rows, free_rows], how="vertical_relaxed")


def _free_aux(
    ks: pl.DataFrame, ranges: pl.DataFrame, calls: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Kernels of tracekit ``aux`` ranges outside any GEMM range, joined to the calls of the GEMM they feed
    (:func:`~.names.aux_key`: same M and K, the backend or its family): with one instance per call, each to the
    first call after it on its device; otherwise the step ran apart from the calls and is none's: the calls
    record how many instances there were (``_apart``) and their median time (``_apart_ns``)."""
    empty = pl.DataFrame(
        schema={
            "owner": pl.Int64,
            "name": pl.String,
            "cls": pl.String,
            "duration_ns": pl.Int64,
            "_splitk": pl.Boolean,
        }
    )
    free = ks.filter(pl.col("free_aux").is_not_null())
    if free.height == 0 or calls.height == 0:
        return calls, empty
    names = dict(zip(ranges["range_id"].to_list(), ranges["name"].to_list(), strict=True))
    inst = free.group_by("free_aux").agg(
        pl.col("end_ns").max().alias("_end"),
        pl.col("device").first().fill_null(_NO_DEVICE).cast(pl.Int64).alias("_dev"),
        pl.col("duration_ns").sum().cast(pl.Float64).alias("_ns"),
    )
    fed = ranges.filter(pl.col("range_id").is_in(calls["owner"].implode())).select(
        pl.col("range_id").alias("owner"), "backend", "m", "k"
    )
    targets = calls.join(fed, on="owner").select(
        "owner",
        "backend",
        "m",
        "k",
        "first",
        pl.col("device").fill_null(_NO_DEVICE).cast(pl.Int64).alias("_dev"),
    )
    pairs, apart = [], []
    for key in {aux_key(names.get(a)) for a in inst["free_aux"].to_list()} - {None}:
        backend, m, k = key  # type: ignore[misc]
        ids = [a for a in inst["free_aux"].to_list() if aux_key(names.get(a)) == key]
        serve = targets.filter(
            (pl.col("m") == m)
            & (pl.col("k") == k)
            & ((pl.col("backend") == backend) | pl.col("backend").str.starts_with(backend + "-"))
        ).sort("first")
        if serve.height == 0:
            continue
        mine = inst.filter(pl.col("free_aux").is_in(ids)).sort("_end")
        if mine.height == serve.height:  # one step per call: each feeds the call after it
            pairs.append(
                mine.join_asof(
                    serve,
                    left_on="_end",
                    right_on="first",
                    by="_dev",
                    strategy="forward",
                    check_sortedness=False,
                ).select("free_aux", "owner", "_ns")
            )
            continue
        # the step ran apart from the calls (tracekit's benchmark quantizes each input buffer once and times the
        # per-call quantize in a loop of its own): no call ran it, so none is charged; each call records how many
        # runs there were and their median, for the card. Joining each run to the call after it charged 3 setup
        # quantizes of 389 us to 40 calls (29.3 us "per call", h200-capture-gemm) and the 18 timed ones to none
        ranked = mine.sort("_ns", "free_aux")
        mid = ranked.row((ranked.height - 1) // 2, named=True)
        apart.append(
            serve.select(
                "owner",
                pl.lit(ranked.height, pl.Int64).alias("_apart"),
                pl.lit(mid["_ns"]).cast(pl.Float64).alias("_apart_ns"),
            )
        )
    if apart:
        calls = calls.join(pl.concat(apart).group_by("owner").max(), on="owner", how="left")
    if not pairs:
        return calls, empty
    joined = pl.concat(pairs).filter(pl.col("owner").is_not_null())
    add = joined.group_by("owner").agg(pl.col("_ns").sum().alias("_free"))
    calls = (
        calls.join(add, on="owner", how="left")
        .with_columns((pl.col("aux") + pl.col("_free").fill_null(0.0)).alias("aux"))
        .drop("_free")
    )
    rows = free.join(joined.select("free_aux", "owner"), on="free_aux").select(
        "owner", "name", "cls", "duration_ns", pl.lit(False).alias("_splitk")
    )
    return calls, rows


# --- everything else ------------------------------------------------------------------------------------------------
def user_calls(ks: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Calls outside tracekit's ranges: (calls, the auxiliary rows they own). ``ks``: the timed kernels outside
    tracekit's ranges with their resolution and ``_gemm`` (the row is a GEMM kernel: by class, Nsight Compute's
    counters, or a range named like a GEMM). A call's ``owner`` is the shaped range's id, the
    operator range's id, or ``-(kernel_id + 1)`` for a lone GEMM kernel; ``holder`` its user range instance."""
    gemm = pl.col("_gemm")
    # a profiler operator range holding exactly one GEMM kernel is that GEMM's call (its memset, bias copy ...)
    one = (
        ks.filter(gemm & pl.col("call").is_null() & pl.col("opr").is_not_null())
        .group_by("opr")
        .len()
        .filter(pl.col("len") == 1)["opr"]
    )
    unit = (
        pl.when(pl.col("call").is_not_null())
        .then(pl.col("call"))
        .when(pl.col("opr").is_in(one.implode()))
        .then(pl.col("opr"))
        .when(gemm)
        .then(-(pl.col("kernel_id") + 1))
    )
    rows = ks.with_columns(unit.alias("call_of"))
    # a call must hold a GEMM kernel, else its longest kernel the table does not know; else it has no GEMM kernel
    known = {n: classify_name(n).known for n in rows["name"].drop_nulls().unique().to_list()}
    unknown = [n for n, k in known.items() if not k]
    rows = rows.with_columns(gemm.alias("_main"))
    rows, no_main = _longest_as_main(rows, "call_of", pl.col("name").is_in(unknown))
    if no_main.len():
        # kernels of a call with no GEMM kernel (sampled out) are free again; the call is counted apart
        lost = (
            rows.filter(pl.col("call_of").is_not_null())
            .group_by("call_of")
            .agg(pl.col("_main").any().alias("_ok"))
        )
        dead = lost.filter(~pl.col("_ok"))["call_of"]
        rows = rows.with_columns(
            pl.when(pl.col("call_of").is_in(dead.implode()))
            .then(None)
            .otherwise(pl.col("call_of"))
            .alias("call_of")
        )
    # sequences: one per user range instance, device and stream; without a user range, a call is its own
    held = pl.col("holder").is_not_null()
    rows = rows.with_columns(
        pl.col("holder").alias("_g1"),
        pl.when(held).then(None).otherwise(pl.col("call_of")).alias("_g2"),
        pl.col("device").fill_null(_NO_DEVICE).alias("_g3"),
        pl.when(held).then(pl.col("stream")).otherwise(None).fill_null(_NO_DEVICE).alias("_g4"),
    ).filter(held | pl.col("call_of").is_not_null())
    group = ["_g1", "_g2", "_g3", "_g4"]
    rows = assign(rows, group, ["start_ns", "kernel_id"])
    rows, fusion_rows = _by_operator(rows)
    owned = rows.filter(pl.col("owner").is_not_null())
    main = pl.col("_main") & (pl.col("owner") == pl.col("call_of")).fill_null(False)
    splitk = ~main & (pl.col("cls") == "splitk-reduce").fill_null(False)
    owned = owned.with_columns(main.alias("_main"), splitk.alias("_splitk"))
    calls = _call_rows(owned, pl.col("_main"), pl.col("_splitk"))
    holders = owned.filter(pl.col("_main")).group_by("owner").agg(pl.col("holder").first())
    calls = calls.join(holders, on="owner", how="left")
    calls = _with_gaps(calls, rows, group)
    aux_rows = owned.filter(~pl.col("_main")).select(
        "owner",
        "name",
        "cls",
        "duration_ns",
        "_splitk",
        # owned by launch order alone: no operator record says who launched it
        (pl.col("call_of").is_null() & pl.col("launch_op").is_null()).alias("_by_order"),
    )
    return calls, pl.concat([aux_rows, fusion_rows], how="diagonal_relaxed")


def _by_operator(rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """An operator's call owns only the kernels that operator launched. ``rows`` (after :func:`~.roles.assign`)
    with the ``owner`` taken away from every kernel that launch order gave to a call but that another profiler
    operator launched (its ``launch_op``, the operator on the launching thread that the correlation id links it
    to, is not the one of the call's GEMM kernel, or it is another instance of it: ``opr``), and those kernels
    apart as fusion candidates: (rows, candidates with owner, name, cls, duration_ns, ``_fusion``, ``_op`` the
    operator that launched it, ``_after`` whether it ran after the call's GEMM kernel). A kernel with no operator
    record (nsys without emit_nvtx, a graph replay, a user's NVTX range alone) stays with the call launch order
    gave it: nothing better says whose it is."""
    if "launch_op" not in rows.columns:
        rows = rows.with_columns(pl.lit(None, pl.String).alias("launch_op"))
    gemm = rows.filter(pl.col("_main") & (pl.col("owner") == pl.col("call_of")).fill_null(False))
    own = gemm.group_by("owner").agg(
        pl.col("opr").first().alias("_own_opr"),
        pl.col("launch_op").first().alias("_own_op"),
        pl.col("start_ns").min().alias("_own_start"),
    )
    rows = rows.join(own, on="owner", how="left")
    other_op = (pl.col("launch_op") != pl.col("_own_op")).fill_null(True)
    other_instance = (pl.col("opr") != pl.col("_own_opr")).fill_null(False)
    foreign = (
        pl.col("call_of").is_null()
        & pl.col("owner").is_not_null()
        & pl.col("launch_op").is_not_null()
        & (other_op | other_instance)
    )
    rows = rows.with_columns(foreign.alias("_foreign"))
    candidates = rows.filter(pl.col("_foreign")).select(
        "owner",
        "name",
        "cls",
        "duration_ns",
        pl.lit(False).alias("_splitk"),
        pl.lit(False).alias("_by_order"),
        pl.lit(True).alias("_fusion"),
        pl.col("launch_op").alias("_op"),
        (pl.col("start_ns") >= pl.col("_own_start")).fill_null(True).alias("_after"),
    )
    rows = rows.with_columns(
        pl.when(pl.col("_foreign")).then(None).otherwise(pl.col("owner")).alias("owner")
    ).drop("_own_opr", "_own_op", "_own_start", "_foreign")
    return rows, candidates


# --- the cases' timings ---------------------------------------------------------------------------------------------
def _idle_before(calls: pl.DataFrame, kernel_starts: pl.DataFrame | None) -> pl.DataFrame:
    """Per call (``calls``: owner, case, first, last, device), the idle time since the previous call of its case
    that counts as a launch gap (``_before``): same device, shorter than the launch-gap limit, and no kernel (of
    ``kernel_starts``: device, start_ns) started in between. Only calls with such a gap get a row."""
    schema = {"owner": pl.Int64, "_before": pl.Float64}
    if kernel_starts is None or calls.height == 0:
        return pl.DataFrame(schema=schema)
    dev = pl.col("device").fill_null(_NO_DEVICE).cast(pl.Int64)
    candidates = (
        calls.sort("case", "first")
        .with_columns(
            pl.col("last").shift(1).over("case").alias("_prev_end"),
            dev.shift(1).over("case").alias("_prev_dev"),
            dev.alias("_devkey"),
        )
        .filter(
            pl.col("_prev_end").is_not_null()
            & (pl.col("_devkey") == pl.col("_prev_dev"))
            & (pl.col("first") - pl.col("_prev_end") > 0)
            & (pl.col("first") - pl.col("_prev_end") < LAUNCH_GAP_MAX_NS)
        )
        .select("owner", "first", "_prev_end", "_devkey", (pl.col("_prev_end") + 1).alias("_after"))
        .sort("_after")
    )
    if candidates.height == 0:
        return pl.DataFrame(schema=schema)
    starts = kernel_starts.select(
        pl.col("device").fill_null(_NO_DEVICE).cast(pl.Int64).alias("_devkey"), "start_ns"
    ).sort("start_ns")
    # the first kernel start on the device after the previous call ended (bisect_right of its end)
    nearest = candidates.join_asof(
        starts,
        left_on="_after",
        right_on="start_ns",
        by="_devkey",
        strategy="forward",
        check_sortedness=False,
    )
    quiet = pl.col("start_ns").is_null() | (pl.col("start_ns") >= pl.col("first"))
    return nearest.filter(quiet).select(
        "owner", (pl.col("first") - pl.col("_prev_end")).cast(pl.Float64).alias("_before")
    )


def aggregate(
    calls: pl.DataFrame, aux_rows: pl.DataFrame, kernel_starts: pl.DataFrame | None, **shared: Any
) -> dict[int, tuple[Timing, list[AuxKernel], list[FusionCandidate]]]:
    """Each case's :class:`Timing` from its calls (``calls``: owner, case, first, last, device, gemm, splitk,
    aux, gap, paused, pauses, launches), with the auxiliary kernels they own and their fusion candidates, from
    the auxiliary rows (owner, name, cls, duration_ns, _splitk); ``shared`` sets the fields every case shares
    (source, source_detail)."""
    if calls.height == 0:
        return {}
    for col in ("_apart", "_apart_ns"):
        if col not in calls.columns:
            calls = calls.with_columns(pl.lit(None, pl.Float64).alias(col))
    before = _idle_before(calls, kernel_starts)
    calls = calls.join(before, on="owner", how="left").with_columns(
        (pl.col("gap") + pl.col("_before").fill_null(0.0)).alias("gap")
    )
    span = pl.col("gemm") + pl.col("aux") + pl.col("gap")
    calls = calls.with_columns(span.alias("span"), (pl.col("gemm") + pl.col("aux")).alias("busy"))
    mid = (pl.len() - 1) // 2

    def spread(col: str) -> list[pl.Expr]:
        c = pl.col(col)
        return [
            c.median().alias(f"{col}_med"),
            c.quantile(0.1, "linear").alias(f"{col}_p10"),
            c.quantile(0.9, "linear").alias(f"{col}_p90"),
            c.sort_by(["span", "first", "owner"]).get(mid).alias(f"{col}_mid"),
        ]

    agg = calls.group_by("case").agg(
        pl.len().alias("calls"),
        pl.col("launches").sum(),
        *[pl.col(c).sum().alias(f"{c}_total") for c in ("gemm", "splitk", "aux", "gap", "paused")],
        pl.col("pauses").sum(),
        pl.col("gap").max().alias("gap_max"),
        pl.col("_apart").max().alias("apart"),
        pl.col("_apart_ns").max().alias("apart_ns"),
        *[e for c in ("gemm", "aux", "gap", "span", "splitk", "busy") for e in spread(c)],
    )
    owners = calls.select("owner", "case")
    for col, default in (("_fusion", False), ("_by_order", False)):
        if col not in aux_rows.columns:
            aux_rows = aux_rows.with_columns(pl.lit(default).alias(col))
    aux_rows = aux_rows.with_columns(pl.col("_fusion", "_by_order").fill_null(False))
    candidates = fusion_uses(aux_rows.filter(pl.col("_fusion")).join(owners, on="owner"))
    by_order = dict(
        aux_rows.filter(pl.col("_by_order"))
        .join(owners, on="owner")
        .group_by("case")
        .agg(pl.col("duration_ns").sum().cast(pl.Float64))
        .iter_rows()
    )
    aux_rows = aux_rows.filter(~pl.col("_fusion"))
    aux = (
        aux_rows.join(owners, on="owner")
        .group_by("case", "name")
        .agg(
            pl.col("cls").first(),
            pl.col("duration_ns").sum().cast(pl.Float64).alias("ns"),
            pl.len().alias("count"),
        )
        .sort("case", "ns", "name", descending=[False, True, False])
    )
    uses: dict[int, list[AuxKernel]] = {}
    for case, name, cls, ns, count in aux.iter_rows():
        uses.setdefault(case, []).append(
            AuxKernel(
                name=name or "(unnamed kernel)",
                kernel_class=cls,
                role=ROLE.get(cls or "", "other"),
                time_ns_total=ns or 0.0,
                count=count,
            )
        )
    out: dict[int, tuple[Timing, list[AuxKernel], list[FusionCandidate]]] = {}
    for r in agg.iter_rows(named=True):
        n = r["calls"]

        def sp(col: str, r: dict[str, Any] = r, n: int = n) -> Dist:
            return Dist(
                median=r[f"{col}_med"],
                p10=r[f"{col}_p10"] if n > 1 else None,
                p90=r[f"{col}_p90"] if n > 1 else None,
            )

        out[r["case"]] = (
            timing(
                calls=n,
                launches=int(r["launches"] or 0),
                gemm_ns_total=r["gemm_total"] or 0.0,
                splitk_ns_total=r["splitk_total"] or 0.0,
                aux_ns_total=r["aux_total"] or 0.0,
                gap_ns_total=r["gap_total"] or 0.0,
                gemm_ns=sp("gemm"),
                aux_ns=sp("aux"),
                gap_ns=sp("gap"),
                span_ns=sp("span"),
                busy_ns=sp("busy"),
                median_call=call(r["gemm_mid"], r["aux_mid"], r["gap_mid"]),
                pauses=int(r["pauses"] or 0),
                paused_ns_total=r["paused_total"] or 0.0,
                gap_max_ns=r["gap_max"],
                aux_by_order_ns_total=by_order.get(r["case"]) or 0.0,
                aux_apart_runs=int(r["apart"] or 0),
                aux_apart_ns=r["apart_ns"],
                **shared,
            ),
            uses.get(r["case"], []),
            candidates.get(r["case"], []),
        )
    return out
