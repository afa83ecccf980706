"""Naming the straggler: the rank the others wait for, and why (its kernels outside collectives, GEMMs among
them, or its GPU sitting idle), in words for the report."""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.numbers import millis as _ms

from .kernels import _mean_skew

STRAGGLER_MIN_PCT = 1.0
"""A rank is named the straggler only when what sets it apart is at least this share (%) of the ranks' time: the
extra time the others wait in collectives, as a share of the span; without collectives, the extra kernel time."""


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
