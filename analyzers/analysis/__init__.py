"""The typed analysis of a run: built once, rendered by every view (docs/ANALYSIS.md).

``model`` holds the Structs (:class:`Analysis`, :class:`Case` and their parts), ``convert`` turns today's
GemmCase + Waterfall into a :class:`Case`, ``frame`` the cases as a polars DataFrame. Every public name is
importable from here.
"""

from __future__ import annotations

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
    "case_from_gemm",
    "device_info",
]
