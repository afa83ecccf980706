"""What a capture was asked to do, typed: :class:`CaptureSettings` with one part per tool (:class:`NcuSettings`,
:class:`NsysSettings`, :class:`TorchSettings`), built once (by ``tracekit capture`` from its options, or by a
caller) and carried unchanged through the check, the plan and every pass.

Frozen, so that no phase can change what a later one reads; sequences are kept as tuples. The check
(plan.py ``_check_options``) returns a resolved copy: the ncu filter of ``ranges`` and the per-range count from
``$TRACEKIT_NCU_MAX_PER_RANGE`` filled in."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.naming import NCU_FILTER

from .. import tools
from ..ranks import RankLaunch
from ..torchprof import DEFAULT_TRACE_REPEATS
from .common import CRASH_FLUSH_DEFAULT


def _tuples(obj: object, *names: str) -> None:
    """Keep the sequence fields ``names`` of a frozen dataclass as tuples (a list given stays the caller's)."""
    for name in names:
        object.__setattr__(obj, name, tuple(str(v) for v in getattr(obj, name)))


@dataclass(frozen=True)
class NcuSettings:
    """The Nsight Compute pass: which ncu, what it collects, which kernels and how many launches of each."""

    path: str | os.PathLike[str] | None = None
    """The ncu to run (default: $TRACEKIT_NCU, ncu on PATH, /opt/nvidia ...)."""
    sections: tuple[str, ...] = tools.DEFAULT_SECTIONS
    metrics: tuple[str, ...] = tools.DEFAULT_METRICS
    nvtx_include: str | None = NCU_FILTER
    """ncu's --nvtx-include filter: tracekit's ranges by default, None for every kernel (--all-kernels)."""
    clock_control: str = "none"
    max_per_range: int | None = None
    """At most this many launches of each launch configuration inside the selected ranges (None:
    $TRACEKIT_NCU_MAX_PER_RANGE or 2, filled in by the check)."""
    launch_count: int | None = None
    """ncu's --launch-count: kernels profiled in all (replaces the per-configuration count outside tracekit's
    ranges)."""
    budget_s: float | None = None
    """--ncu-budget: seconds of profiling, after which the program runs on unprofiled (collectors/capture/budget.py)."""
    extra: tuple[str, ...] = ()
    """Options for ncu's command line, after tracekit's own."""
    kernels: str = "gemm"
    """--ncu-kernels: ``gemm`` profiles, in your ranges or everywhere, only the GEMM kernels (with their split-K
    reduce and quantize kernels) the timeline of the nsys pass, or of the planning pass (:attr:`plan_pass`), shows,
    each place once (collectors/capture/select.py);
    ``all`` every kernel, as bounded by the per-configuration count."""
    plan_pass: bool = True
    """Without an nsys pass, where the GEMMs are chosen from a timeline (:meth:`selects_gemms`): run a planning
    pass first (nsys, CUDA + NVTX only) whose timeline chooses them and is kept in the run; False
    (``--no-plan-pass``) profiles as bounded by the per-configuration count, every kernel."""

    def __post_init__(self) -> None:
        _tuples(self, "sections", "metrics", "extra")

    def selects_gemms(self, ranked: bool) -> bool:
        """Whether the pass profiles the GEMMs a timeline shows (collectors/capture/select.py): ``--ncu-kernels
        gemm`` inside your ranges or everywhere, with no count in all (``--launch-count``), no kernel filter of
        one's own among the ncu options and no ranks (``ranked``). Inside tracekit's own ranges the range code
        bounds the pass instead (one GEMM call per range)."""
        if (
            self.kernels != "gemm"
            or self.mode == "tracekit-ranges"
            or self.launch_count is not None
            or ranked
        ):
            return False
        # the user's own kernel filter wins (ncu takes one)
        return not any(str(a).startswith(("--kernel-name", "--kernel-id", "-k")) for a in self.extra)

    @property
    def mode(self) -> str:
        """Where the count applies: ``tracekit-ranges``, ``ranges`` (the user's NVTX ranges) or ``all-kernels``."""
        if self.nvtx_include == NCU_FILTER:
            return "tracekit-ranges"
        return "all-kernels" if self.nvtx_include is None else "ranges"

    @property
    def per_config(self) -> int | None:
        """Nsight Compute's per-launch-config count (outside tracekit's ranges, unless --launch-count replaces
        it); None where the range code or --launch-count bounds the pass."""
        if self.mode == "tracekit-ranges" or self.launch_count is not None:
            return None
        return self.max_per_range


@dataclass(frozen=True)
class NsysSettings:
    """The Nsight Systems pass: which nsys, options for its command line, and the crash flush of a Python program."""

    path: str | os.PathLike[str] | None = None
    extra: tuple[str, ...] = ()
    crash_flush: str = CRASH_FLUSH_DEFAULT
    """profiler-stop: a fatal-signal handler stops the profiler so the timeline so far is kept; or none."""

    def __post_init__(self) -> None:
        _tuples(self, "extra")


@dataclass(frozen=True)
class TorchSettings:
    """The PyTorch-profiler pass: what it records on the CPU side and how much of a tracekit benchmark."""

    ops: str = "shapes"
    """shapes (ranges and every ATen operator with its input shapes), ranges, or all (no shapes)."""
    trace_repeats: int | None = DEFAULT_TRACE_REPEATS
    """Repeats traced per measurement of a tracekit benchmark inside; None records every launch."""


@dataclass(frozen=True)
class CaptureSettings:
    """Everything a capture was asked to do, apart from the command and where its events go."""

    tools: tuple[str, ...] = ()
    """The passes asked for (``ncu``, ``nsys``, ``torch``); none: nsys if usable here, else the PyTorch profiler
    for a Python command, else a plain run."""
    ncu: NcuSettings = field(default_factory=NcuSettings)
    nsys: NsysSettings = field(default_factory=NsysSettings)
    torch: TorchSettings = field(default_factory=TorchSettings)
    instrument: bool = False
    timeout: float | None = None
    """Wall time of each pass, seconds (None: no limit)."""
    grace_s: float = 20.0
    """How long a stopped pass may take to finish writing its report."""
    ranks: RankLaunch | None = None
    ranges: str | None = None
    """--ranges: a regex of the user's NVTX ranges whose kernels ncu profiles (sets ``ncu.nvtx_include``)."""
    out: Path | str | None = None
    runs_dir: Path | str = "runs"
    env: Mapping[str, str] | None = None
    """The command's environment (default: this process's)."""
    cwd: Path | str | None = None

    def __post_init__(self) -> None:
        _tuples(self, "tools")
        unknown = set(self.tools) - {"ncu", "nsys", "torch"}
        if unknown:
            raise ValueError(f"unknown capture tool(s) {sorted(unknown)}: give ncu, nsys or torch")

    @classmethod
    def from_keywords(cls, **kw: Any) -> CaptureSettings:
        """The settings of :func:`capture`'s flat keywords (``ncu=True, ncu_path=..., max_per_range=3,
        nsys_extra=[...], torch_ops="ranges", timeout=60`` ...), for callers that name a few options; an unknown
        keyword raises TypeError."""
        asked = tuple(
            t
            for t, key in (("nsys", "nsys"), ("torch", "torch_profiler"), ("ncu", "ncu"))
            if kw.pop(key, False)
        )
        parts: dict[str, dict[str, Any]] = {"ncu": {}, "nsys": {}, "torch": {}}
        for key in [k for k in kw if k in _KEYWORDS]:
            part, name = _KEYWORDS[key]
            parts[part][name] = kw.pop(key)
        return cls(
            tools=asked,
            ncu=NcuSettings(**parts["ncu"]),
            nsys=NsysSettings(**parts["nsys"]),
            torch=TorchSettings(**parts["torch"]),
            **kw,
        )


_KEYWORDS: dict[str, tuple[str, str]] = {
    "ncu_path": ("ncu", "path"),
    "sections": ("ncu", "sections"),
    "metrics": ("ncu", "metrics"),
    "nvtx_include": ("ncu", "nvtx_include"),
    "clock_control": ("ncu", "clock_control"),
    "max_per_range": ("ncu", "max_per_range"),
    "launch_count": ("ncu", "launch_count"),
    "ncu_budget": ("ncu", "budget_s"),
    "ncu_extra": ("ncu", "extra"),
    "ncu_kernels": ("ncu", "kernels"),
    "plan_pass": ("ncu", "plan_pass"),
    "nsys_path": ("nsys", "path"),
    "nsys_extra": ("nsys", "extra"),
    "crash_flush": ("nsys", "crash_flush"),
    "torch_ops": ("torch", "ops"),
    "trace_repeats": ("torch", "trace_repeats"),
}
"""capture()'s flat keyword -> (part, field) of :class:`CaptureSettings`."""
