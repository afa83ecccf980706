"""The typed analysis of a run: built once, rendered by every view (docs/ANALYSIS.md).

``model`` holds the Structs (:class:`Analysis`, :class:`Case` and their parts: the case builders in
analyzers/gemm fill these parts, the rules read them), ``build`` assembles the Analysis of a run
(:func:`analyze_run`, :func:`analyze_frames`; :func:`case_list` is the one place cases are built and explained,
:func:`case_of` makes an explained GEMM's one :class:`Case`), ``headline`` its
summary (largest losses in the calls' time, what is unknown and how to learn it), ``frame`` the cases as a polars
DataFrame, ``stored`` the Analysis kept with the run and in the per-user cache (:func:`load_analysis`: what every
view calls). Every public name is importable from here; only the model is imported with the package (msgspec, no
polars), the builders on first use, so decoding an Analysis is cheap.
"""

from __future__ import annotations

from typing import Any

from .model import (
    ANALYSIS_SCHEMA_VERSION,
    Analysis,
    AuxKernel,
    Case,
    CasePlace,
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
    "CasePlace",
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
    "case_list",
    "case_of",
    "device_info",
    "device_notes",
    "load_analysis",
    "order_cases",
    "store_analysis",
]


_LAZY = {
    "analyze_frames": "build",
    "analyze_run": "build",
    "case_list": "build",
    "device_notes": "build",
    "order_cases": "build",
    "load_analysis": "stored",
    "store_analysis": "stored",
    "case_of": "build",
    "device_info": "build",
}


def __getattr__(name: str) -> Any:
    """The builders (polars, the explainer), imported on first use."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
