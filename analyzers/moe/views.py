"""Plain data for the views (the TUI and the report draw it): an expert histogram per launch, the launch to
focus on, the note on per-expert times."""

from __future__ import annotations

import math
import statistics
from typing import Any

import polars as pl


# --- views' helpers (plain data; the TUI and the report draw it) --------------------------------------------------
def _bin_label(m: float) -> tuple[int, str]:
    lo = 1 << max(math.floor(math.log2(max(m, 1.0))), 0)
    return lo, (f"{lo}" if lo == 1 else f"{lo}-{2 * lo - 1}")


def expert_histogram(experts: pl.DataFrame, launch_id: int) -> list[dict[str, Any]]:
    """Active experts of one launch binned by rows (1, 2-3, 4-7, ...): per bin the experts, their share of rows and
    of time, their median % of peak and how many are memory-bound. Bins in ascending rows."""
    rows = experts.filter(pl.col("launch_id") == launch_id).to_dicts()
    if not rows:
        return []
    total_m = sum(r["m"] for r in rows) or 1.0
    total_t = sum(r["time_ns"] or 0.0 for r in rows) or 0.0
    bins: dict[int, dict[str, Any]] = {}
    for r in rows:
        lo, label = _bin_label(r["m"])
        b = bins.setdefault(
            lo, {"rows": label, "experts": 0, "m": 0.0, "t": 0.0, "pct": [], "memory": 0, "hot": False}
        )
        b["experts"] += 1
        b["m"] += r["m"]
        b["t"] += r["time_ns"] or 0.0
        if r.get("pct_of_peak") is not None:
            b["pct"].append(r["pct_of_peak"])
        b["memory"] += r.get("roofline_bound") == "memory"
        b["hot"] = b["hot"] or bool(r.get("hot"))
    out = []
    for lo in sorted(bins):
        b = bins[lo]
        out.append(
            {
                "rows": b["rows"],
                "experts": b["experts"],
                "rows_share_pct": 100.0 * b["m"] / total_m,
                "time_share_pct": 100.0 * b["t"] / total_t if total_t else None,
                "median_pct_of_peak": statistics.median(b["pct"]) if b["pct"] else None,
                "memory_bound": b["memory"],
                "hot": b["hot"],
            }
        )
    return out


def focus_launch(launches: pl.DataFrame) -> int | None:
    """The launch a summary shows first: the skewed launch with the most time, else the one with the most time."""
    if launches.height == 0:
        return None
    ordered = launches.sort(
        [pl.col("skewed").fill_null(False), pl.col("time_ns").fill_null(0.0)], descending=[True, True]
    )
    return int(ordered["launch_id"][0])


PER_EXPERT_NOTE = (
    "Per-expert time: a grouped launch is one kernel, so its time is split over the experts in proportion to "
    "their CTA tiles (ceil(rows / tile M) x ceil(N / tile N)); the loop backends time each expert's GEMM on its "
    "own (measured). Roofline per expert: its weights are read once however few rows it gets."
)
