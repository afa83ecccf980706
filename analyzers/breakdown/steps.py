"""The breakdown's headline over the user's steps: what a run spent its time on while the program did its work,
not over the whole process (start-up, imports and warm-up included, which put a capture's first line at
``idle 99.5%``).

The windows, first found wins: the profiler's steps (``ProfilerStep#N`` of ``torch.profiler.schedule``, or
tracekit ``step`` ranges); else the outermost ranges of the program (depth 0: the user's NVTX / record_function
ranges, or in a tracekit benchmark its GEMM ranges), leaving out operator ranges (ATen ops, ``emit_nvtx``'s
``aten::mm, seq = ...``); else none, and the headline is the whole run's, said so.
"""

from __future__ import annotations

import polars as pl

from .model import Breakdown, Slice
from .table import device_label, headline

__all__ = ["OUTERMOST", "STEPS", "WHOLE", "step_headline", "step_windows"]

STEPS = "steps"
OUTERMOST = "outermost ranges"
WHOLE = "whole run (no steps or outermost ranges to narrow it to)"

_PROFILER_STEP = r"^ProfilerStep(#\d+)?$"
_OPERATOR = r"^(aten|c10d|nccl|cuda|cudnn|cublas)[:_]|, seq = |, op_id = "


def step_windows(ranges: pl.DataFrame | None) -> tuple[str, pl.DataFrame] | None:
    """(what, ranges renamed to that one name) for the user's step windows, None where there are none: the
    renamed ranges go to :func:`~tracekit.analyzers.breakdown.breakdown_and` beside the run's own, which breaks
    both down from one set of interval covers per device."""
    if ranges is None or ranges.height == 0:
        return None
    name, kind = pl.col("name").fill_null(""), pl.col("range_kind").fill_null("")
    # every range stays (a kernel's range is its innermost one: the way up to a step goes through the others);
    # only the chosen ones keep a name, all one name, so the breakdown takes them as one range name
    for what, chosen in (
        (STEPS, name.str.contains(_PROFILER_STEP) | (kind == "step")),
        (
            OUTERMOST,
            (pl.col("depth") == 0)
            & ~pl.col("kind").fill_null("").is_in(["op", "gpu_annotation"])
            & ~name.str.contains(_OPERATOR)
            & (kind != "gemm-op"),
        ),
    ):
        if ranges.select(chosen.any()).item():
            return what, ranges.with_columns(pl.when(chosen).then(pl.lit(what)).otherwise(None).alias("name"))
    return None


def step_headline(whole: Breakdown, steps: tuple[str, list[Slice]] | None) -> str:
    """One line per GPU over the user's steps (see the module), each saying which windows it covers, or the whole
    run's line (``whole``: the run's breakdown per device) labelled :data:`WHOLE`. ``steps``: what the windows
    are (:func:`step_windows`) and the range slices of the renamed ranges (``breakdown_and``'s second value)."""
    if steps is not None:
        what, found = steps
        slices = [s for s in found if s.range == what]
        if slices:
            return "; ".join(
                f"{what}{f' (×{s.instances:,})' if s.instances else ''}: "
                + headline(s).replace(f"{what} on GPU {device_label(s)}", f"GPU {device_label(s)}", 1)
                for s in slices
            )
    return "; ".join(f"{WHOLE}: {headline(s)}" for s in whole.devices)
