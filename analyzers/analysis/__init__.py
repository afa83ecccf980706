"""The typed analysis of a run: built once, rendered by every view (docs/ANALYSIS.md).

``model`` holds the Structs (:class:`Analysis`, :class:`Case` and their parts), ``convert`` turns today's
GemmCase + Waterfall into a :class:`Case`, ``build`` assembles the Analysis of a run (:func:`analyze_run`,
:func:`analyze_frames`; :func:`case_list` is the one place cases are built and explained), ``headline`` its
summary (largest losses in GPU time, what is unknown and how to learn it), ``frame`` the cases as a polars
DataFrame. Every public name is importable from here.
"""

from __future__ import annotations

from .build import analyze_frames, analyze_run, case_list, device_notes, order_cases
from .convert import case_from_gemm, device_info
from .model import (
    ANALYSIS_SCHEMA_VERSION,
    Analysis,
    AuxKernel,
    Case,
    DeviceInfo,
    Dist,
    Factor,
    Failure,
    FlopsInfo,
    KernelRef,
    Loss,
    MoeSummary,
    NcuEvidence,
    NcuRule,
    PeakInfo,
    RankRow,
    RankSummary,
    RateClass,
    RunInfo,
    Shape,
    SourceInfo,
    Summary,
    Timing,
    Unknown,
    Verdict,
)

__all__ = [
    "ANALYSIS_SCHEMA_VERSION",
    "Analysis",
    "AuxKernel",
    "Case",
    "DeviceInfo",
    "Dist",
    "Factor",
    "Failure",
    "FlopsInfo",
    "KernelRef",
    "Loss",
    "MoeSummary",
    "NcuEvidence",
    "NcuRule",
    "PeakInfo",
    "RankRow",
    "RankSummary",
    "RateClass",
    "RunInfo",
    "Shape",
    "SourceInfo",
    "Summary",
    "Timing",
    "Unknown",
    "Verdict",
    "analyze_frames",
    "analyze_run",
    "case_from_gemm",
    "case_list",
    "device_info",
    "device_notes",
    "order_cases",
]
