"""Which launches the ncu pass profiles, chosen from what the nsys pass already recorded (its SQLite export).

Nsight Compute replays every kernel it profiles 20-30 times, and most kernels of a real step are elementwise and
norm kernels no GEMM verdict reads: over a 16-layer decoder step the pass took 101 s for 117 kernels, mostly those.
With a timeline at hand (the ``--nsys`` pass's, or without it the planning pass's: nsys run first for this, as
collectors/capture/plan.py ``_plan_pass`` decides), the pass profiles GEMMs only (``--ncu-kernels gemm``, the
default):

- the GEMM kernels are the timeline's launches that the kernel table (tracekit/kernel_names.py) classes ``gemm``,
  with the split-K reduce and quantize kernels that run in the same ranges (a GEMM call's aux verdicts read
  them); Nsight Compute is given their function names (``--kernel-name-base function --kernel-name
  regex:^(?:...)$``);
- each distinct GEMM (kernel, launch configuration and place in the range instance) once: the count per launch
  configuration (``--filter-mode per-launch-config --launch-count N``) is the most launches one instance of a
  selected range makes of one configuration, so the first instance's launches are all profiled, a persistent
  kernel's places included (analyzers/gemm/timeline.py ``positions`` maps the j-th profiled launch to its place);
- what is left out (the other kernels, by name and launches) is said before the pass and recorded in run.json.

Only the standard library: the collectors run in bare GPU environments.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.kernel_names import classify_name

KERNEL_CHOICES = ("gemm", "all")
"""``--ncu-kernels``: GEMMs (and their split-K reduce and quantize kernels) only, or every kernel."""

WITH_GEMMS = ("splitk-reduce", "quantize")
"""Classes profiled with the GEMMs: a GEMM call's split-K reduce and its activation quantize (the aux verdicts)."""

_NVTX_RANGE_EVENTS = (59, 60)
"""NVTX_EVENTS.eventType of push/pop and start/end ranges."""


@dataclass(frozen=True)
class Launch:
    """One kernel launch of the nsys timeline: its function name (``shortName``), demangled name, launch
    configuration, and the selected range instance it ran in (None: in none)."""

    function: str
    name: str
    config: tuple[int, int, int]
    """(grid CTAs, block threads, shared memory bytes): Nsight Compute's launch configuration less the name."""
    instance: tuple[str, int, int] | None
    """(range text, its start, its thread) of the innermost selected range open at the launch."""


@dataclass
class NcuSelection:
    """The kernels the ncu pass profiles and how many launches of each configuration, chosen from a timeline."""

    source: str
    gemm_kernels: list[str] = field(default_factory=list)
    """Function names of the GEMM kernels (the kernel table's ``gemm``)."""
    aux_kernels: list[str] = field(default_factory=list)
    """Function names of the split-K reduce and quantize kernels profiled with them."""
    per_config: int = 1
    """Launches of each launch configuration profiled (the most one range instance makes of one)."""
    gemm_places: int = 0
    """Distinct GEMMs: (kernel, launch configuration, place in the instance), what the count covers."""
    left_out: dict[str, int] = field(default_factory=dict)
    """The other kernels of the selected ranges: function name -> launches, not profiled."""

    @property
    def empty(self) -> bool:
        return not self.gemm_kernels

    def regex(self) -> str:
        """The ``--kernel-name`` value: every chosen function name, anchored."""
        names = sorted({*self.gemm_kernels, *self.aux_kernels})
        return "regex:^(?:" + "|".join(re.escape(n) for n in names) + ")$"

    def args(self) -> list[str]:
        """The ncu options that pick the chosen kernels (the launch count goes with ``--filter-mode``)."""
        return ["--kernel-name-base", "function", "--kernel-name", self.regex()]

    def describe(self) -> str:
        """One line said before the pass: what is profiled, how many launches, what is left out."""
        out = sum(self.left_out.values())
        left = (
            f"; left out: {len(self.left_out)} other kernel(s), {out} launch(es) in the ranges "
            f"(--ncu-kernels all profiles them)"
            if self.left_out
            else ""
        )
        aux = f" and {len(self.aux_kernels)} split-K reduce / quantize kernel(s)" if self.aux_kernels else ""
        return (
            f"from the {self.source}: {len(self.gemm_kernels)} GEMM kernel(s){aux} by name, {self.gemm_places} "
            f"distinct GEMM(s) (kernel, launch configuration and place), {self.per_config} launch(es) of each "
            f"configuration{left}"
        )

    def record(self) -> dict[str, Any]:
        """What run.json keeps (``capture.passes[].ncu.selection``)."""
        top = dict(sorted(self.left_out.items(), key=lambda kv: (-kv[1], kv[0]))[:50])
        return {
            "source": self.source,
            "gemm_kernels": self.gemm_kernels,
            "aux_kernels": self.aux_kernels,
            "per_config": self.per_config,
            "gemm_places": self.gemm_places,
            "left_out_kernels": len(self.left_out),
            "left_out_launches": sum(self.left_out.values()),
            "left_out": top,
        }


def read_launches(sqlite: Path, ranges: str | None) -> list[Launch]:
    """The kernel launches of an nsys SQLite export in start order, each with the innermost NVTX range open on its
    launching thread whose text matches ``ranges`` (a regular expression searched in the text; None: no
    ranges). Raises sqlite3.Error / OSError for a file that is no readable export."""
    con = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            return []
        runtime = "CUPTI_ACTIVITY_KIND_RUNTIME" in tables
        rows = con.execute(
            "SELECT s.value, d.value, k.gridX * k.gridY * k.gridZ, k.blockX * k.blockY * k.blockZ, "
            "k.staticSharedMemory + k.dynamicSharedMemory, "
            + ("r.start, r.globalTid " if runtime else "NULL, NULL ")
            + "FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.shortName JOIN StringIds d ON d.id = k.demangledName "
            + (
                "LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
                "AND (r.globalTid >> 24) = (k.globalPid >> 24) "
                if runtime
                else ""
            )
            + "ORDER BY k.start"
        ).fetchall()
        spans: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
        if ranges is not None and "NVTX_EVENTS" in tables:
            pattern = re.compile(ranges)
            for start, end, text, tid in con.execute(
                "SELECT n.start, n.end, COALESCE(n.text, s.value), n.globalTid FROM NVTX_EVENTS n "
                "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType IN (?, ?) AND n.end IS NOT NULL",
                _NVTX_RANGE_EVENTS,
            ):
                if text and pattern.search(text):
                    spans[tid].append((start, end, text))
    finally:
        con.close()
    out = []
    for function, name, grid, block, smem, at, tid in rows:
        inside = [s for s in spans.get(tid, ()) if at is not None and s[0] <= at <= s[1]]
        innermost = max(inside, key=lambda s: s[0]) if inside else None
        instance = (innermost[2], innermost[0], tid) if innermost else None
        out.append(Launch(function, name, (int(grid or 0), int(block or 0), int(smem or 0)), instance))
    return out


def choose(launches: list[Launch], *, in_ranges: bool, per_range: int, source: str) -> NcuSelection:
    """The selection from ``launches`` (:func:`read_launches`): with ``in_ranges``, only launches in a selected
    range count, and the count per configuration is the most launches of one configuration in one range
    instance (each GEMM place profiled once); without ranges (``--all-kernels``) it is ``per_range``."""
    pool = [x for x in launches if x.instance is not None] if in_ranges else launches
    cls = {n: classify_name(n).kernel_class for n in {x.name for x in pool}}
    gemm = [x for x in pool if cls[x.name] == "gemm"]
    aux = [x for x in pool if cls[x.name] in WITH_GEMMS]
    sel = NcuSelection(source)
    sel.gemm_kernels = sorted({x.function for x in gemm})
    # an aux kernel is chosen by its function name, so only where no other kernel shares it: PyTorch's float8
    # cast is a vectorized_elementwise_kernel like every fill and add, and naming it would profile them all
    others = {x.function for x in pool if cls[x.name] not in ("gemm", *WITH_GEMMS)}
    sel.aux_kernels = sorted({x.function for x in aux} - set(sel.gemm_kernels) - others)
    chosen = {*sel.gemm_kernels, *sel.aux_kernels}
    sel.left_out = dict(Counter(x.function for x in pool if x.function not in chosen))
    if in_ranges:
        per_instance: Counter[tuple] = Counter((x.instance, x.function, x.config) for x in gemm)
        most: dict[tuple, int] = {}
        for (_instance, function, config), n in per_instance.items():
            most[(function, config)] = max(most.get((function, config), 0), n)
        sel.per_config = max(most.values(), default=1)
        sel.gemm_places = sum(most.values())
    else:
        sel.per_config = per_range
        sel.gemm_places = len({(x.function, x.config) for x in gemm})
    return sel


def from_nsys(
    sqlite: Path, ranges: str | None, *, in_ranges: bool, per_range: int, source: str = "nsys pass's timeline"
) -> NcuSelection | None:
    """The selection from an nsys pass's export (None where it cannot be read or holds no kernel); ``source``
    names it (the ``--nsys`` pass's timeline, or the planning pass's)."""
    try:
        launches = read_launches(sqlite, ranges if in_ranges else None)
    except (sqlite3.Error, OSError):
        return None
    if not launches:
        return None
    return choose(launches, in_ranges=in_ranges, per_range=per_range, source=source)
