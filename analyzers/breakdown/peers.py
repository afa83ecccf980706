"""The selection HolisticTraceAnalysis makes before its breakdowns, to compare like with like
(benchmarks/hta_compare.py, tests/analysis/test_breakdown_hta.py).

HTA (``hta/common/trace.py``, ``_filter_irrelevant_gpu_kernels``) keeps, in a trace whose symbol table holds two
or more ``ProfilerStep`` names, only the GPU events whose correlation id belongs to a CPU event that started
before the last ``ProfilerStep`` began: the last step (often cut short by the profiler) and what follows it are
dropped, and so are GPU events with no CPU launch record. Everything before the first step stays. tracekit's own
breakdown keeps every kernel; :func:`hta_window` applies HTA's rule to tracekit's frames.
"""

from __future__ import annotations

import polars as pl

__all__ = ["hta_window"]


def hta_window(frames: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """``frames`` with ``kernels`` and ``memops`` cut to what HolisticTraceAnalysis analyses (see the module
    docstring), per source file; a file with fewer than two ``ProfilerStep`` names keeps every row, as in HTA."""
    ranges = frames.get("ranges")
    if ranges is None or ranges.height == 0:
        return frames
    steps = ranges.filter(
        (pl.col("kind") == "annotation") & pl.col("name").str.contains("ProfilerStep", literal=True)
    )
    last = (
        steps.group_by("source")
        .agg(pl.col("name").n_unique().alias("_names"), pl.col("start_ns").max().alias("_last"))
        .filter(pl.col("_names") >= 2)
        .select("source", "_last")
    )
    if last.height == 0:
        return frames
    out = dict(frames)
    for name in ("kernels", "memops"):
        df = frames.get(name)
        if df is None or df.height == 0:
            continue
        cut = df.join(last, on="source", how="left", maintain_order="left")
        keep = pl.col("_last").is_null() | (pl.col("launch_start_ns") < pl.col("_last")).fill_null(False)
        out[name] = cut.filter(keep).drop("_last")
    return out
