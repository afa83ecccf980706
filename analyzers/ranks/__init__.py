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
        own cases, :func:`tracekit.analyzers.analysis.case_list`),
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

The package by concern: ``labels`` (labelling at import), ``kernels`` (roles, steps, collectives), ``gemms``
(the same GEMM per rank), ``straggler`` (naming it and why), ``analysis`` (all together). Every public name is
importable from here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .labels import RANKED_FRAMES, label_extract, rank_frames, rank_from_name, run_ranks

if TYPE_CHECKING:
    from .analysis import RankAnalysis, analyze_ranks
    from .kernels import COMM_PATTERN, WHOLE_CAPTURE
    from .straggler import STRAGGLER_MIN_PCT

_LATER = {
    "RankAnalysis": "analysis",
    "analyze_ranks": "analysis",
    "COMM_PATTERN": "kernels",
    "WHOLE_CAPTURE": "kernels",
    "STRAGGLER_MIN_PCT": "straggler",
}
"""The analysis' names, imported on first use (PEP 562): the import needs only the labelling, and the analysis
pulls in the GEMM cases (0.13 s of every ``tracekit import``)."""


def __getattr__(name: str) -> Any:
    if name in _LATER:
        return getattr(importlib.import_module(f".{_LATER[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "COMM_PATTERN",
    "RANKED_FRAMES",
    "STRAGGLER_MIN_PCT",
    "WHOLE_CAPTURE",
    "RankAnalysis",
    "analyze_ranks",
    "label_extract",
    "rank_frames",
    "rank_from_name",
    "run_ranks",
]
