"""The bounds of an ncu pass: what it profiles (said before it starts), the kernels it profiled (counted from
ncu's own ``==PROF== Profiling "name"`` lines as they stream), and ``--ncu-budget`` (a time limit after which
Nsight Compute stops profiling and the program runs on).

Nsight Compute has no time limit of its own. Inside a Python program tracekit's site folder (collectors/site)
calls ``cuProfilerStop`` on the program's CUDA contexts when the budget runs out: Nsight Compute honours
cu(da)ProfilerStart/Stop unless ``--disable-profiler-start-stop`` is given, so it profiles no further launch,
the program finishes at its own pace, and ncu writes its report as usual, holding what it profiled by then.
A program the site folder cannot reach (not Python, or started with ``-S`` / ``-I``), or one where profiling
goes on regardless, is stopped like a timeout (SIGINT first: ncu writes the report) once profiling is seen to
go on ``settle`` seconds after the budget ran out (or after the stop took), and the run says so.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .select import NcuSelection
    from .settings import NcuSettings

ENV_STOP_AT = "TRACEKIT_NCU_STOP_AT"
"""Unix time at which the site folder's thread stops Nsight Compute's profiling in the program."""
ENV_BUDGET_LOG = "TRACEKIT_NCU_BUDGET_LOG"
"""Where that thread notes each context it stopped (one JSON line each)."""
BUDGET_LOG = "ncu_budget.jsonl"

_PROFILING = re.compile(rb'==PROF== Profiling "([^"]*)"')


class ProfiledKernels:
    """Counts the kernels ncu starts profiling, from its output as it streams (``==PROF== Profiling "name" -
    N: 0%....50%....100% - 27 passes``, printed as profiling progresses), with the time each started. Fed from
    the pass's output threads, so it locks."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.partial: dict[str, bytes] = {}
        self.counted: dict[str, bool] = {}
        self.starts: list[float] = []
        self.names: dict[str, int] = {}

    def feed(self, stream: str, data: bytes) -> None:
        with self.lock:
            now = self.clock()
            text = self.partial.get(stream, b"") + data
            *lines, rest = text.split(b"\n")
            for line in lines:
                if not self.counted.get(stream):
                    self._see(line, now)
                self.counted[stream] = False
            self.partial[stream] = rest[-4096:]
            if not self.counted.get(stream) and self._see(rest, now):
                self.counted[stream] = True  # the line's start was seen; its end must not count it again

    def _see(self, line: bytes, now: float) -> bool:
        match = _PROFILING.search(line)
        if match is None:
            return False
        self.starts.append(now)
        name = match.group(1).decode(errors="replace")
        self.names[name] = self.names.get(name, 0) + 1
        return True

    @property
    def count(self) -> int:
        with self.lock:
            return len(self.starts)

    def since(self, t: float) -> int:
        """Kernels whose profiling started after ``t`` (the clock's time)."""
        with self.lock:
            return sum(1 for s in self.starts if s > t)

    def tap(self, output: Callable[[str, bytes], None]) -> Callable[[str, bytes], None]:
        """``output`` with this counter fed first."""

        def both(stream: str, data: bytes) -> None:
            self.feed(stream, data)
            output(stream, data)

        return both


class NcuBudget:
    """``--ncu-budget``: when the pass has run ``budget_s``, Nsight Compute should profile nothing more.

    :meth:`check` is called by the pass's wait loop and answers whether the program must be stopped: at once for
    a program the site folder does not run in (``in_program`` false), else when a kernel's profiling starts more
    than ``settle_s`` after the budget ran out, or after the in-program stop took, whichever is later."""

    def __init__(
        self,
        budget_s: float,
        profiled: ProfiledKernels,
        log_path: Path,
        *,
        in_program: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget_s = budget_s
        self.profiled = profiled
        self.log_path = log_path
        self.in_program = in_program
        self.clock = clock
        self.settle_s = max(2.0, min(10.0, budget_s / 4))
        self.start = clock()
        self.stop_at_unix = time.time() + budget_s
        self.spent_at: float | None = None
        self.profiled_by_then = 0
        self.confirmed_at: float | None = None
        self.stopped_program = False

    def env(self) -> dict[str, str]:
        """What the program's environment gets: when to stop, and where to say it did."""
        return {ENV_STOP_AT: f"{self.stop_at_unix:.3f}", ENV_BUDGET_LOG: str(self.log_path)}

    def check(self) -> bool:
        now = self.clock()
        if self.spent_at is None:
            if now - self.start < self.budget_s:
                return False
            self.spent_at = now
            self.profiled_by_then = self.profiled.count
            if not self.in_program:
                self.stopped_program = True
                return True
        if self.confirmed_at is None and self.log_path.exists():
            self.confirmed_at = now
        assert self.spent_at is not None
        after = max(self.spent_at, self.confirmed_at or self.spent_at) + self.settle_s
        if self.profiled.since(after):
            self.stopped_program = True
            return True
        return False

    def stops(self) -> list[dict[str, Any]]:
        """The contexts the program's site thread stopped (raw/ncu_budget.jsonl), in order."""
        out = []
        try:
            lines = self.log_path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return out
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def record(self, wall_s: float) -> dict[str, Any]:
        """What run.json keeps about the budget, with ``not_profiled``: what the report lacks because of it."""
        spent = self.spent_at is not None
        rec: dict[str, Any] = {
            "budget_s": self.budget_s,
            "spent": spent,
            "settle_s": self.settle_s,
        }
        if not spent:
            return rec
        assert self.spent_at is not None
        at = self.spent_at - self.start
        stops = self.stops()
        how = "stopping the program" if self.stopped_program else ("profiler-stop" if stops else None)
        ran_on = max(wall_s - at, 0.0)
        rec.update(
            spent_at_s=round(at, 3),
            profiled_before=self.profiled_by_then,
            profiled_after=max(self.profiled.count - self.profiled_by_then, 0),
            stopped_by=how,
            contexts_stopped=len(stops),
            ran_on_s=round(ran_on, 3),
        )
        if self.stopped_program:
            rec["not_profiled"] = (
                f"launches after {at:.1f} s: the program was stopped there, so the rest of it did not run"
            )
        else:
            rec["not_profiled"] = (
                f"launches after {at:.1f} s of the ncu pass: the program ran on {ran_on:.1f} s unprofiled"
            )
        return rec

    def reason(self) -> str | None:
        """The pass's incomplete reason when the program had to be stopped (None when it ran on)."""
        if not self.stopped_program or self.spent_at is None:
            return None
        why = (
            "tracekit stops Nsight Compute's profiling from inside Python programs only"
            if not self.in_program
            else "Nsight Compute went on profiling after cuProfilerStop"
            if self.log_path.exists()
            else "the program never stopped Nsight Compute's profiling (no CUDA context seen by tracekit's site folder)"
        )
        return (
            f"ncu budget of {self.budget_s:g} s spent: tracekit stopped the program ({why}); the report holds "
            f"the {self.profiled.count} kernel(s) profiled by then"
        )


def describe_bound(
    ncu: NcuSettings,
    ranges: str | None,
    selection: NcuSelection | None = None,
    every_kernel: str | None = None,
) -> str:
    """One line, printed before the ncu pass: which kernels it profiles, at most how many launches of each,
    and the time budget (``ncu`` as the check resolved it; ``selection``: the GEMMs chosen from the nsys or
    planning pass's timeline, collectors/capture/select.py; ``every_kernel``: why there is none, where
    ``--ncu-kernels gemm`` asked for one)."""
    nvtx, per_range = ncu.nvtx_include, ncu.max_per_range
    per_config, count = ncu.per_config, ncu.launch_count
    if ncu.mode == "tracekit-ranges":
        where = "inside tracekit's GEMM ranges"
        how = (
            f"the first {per_range} launch(es) of each range name (one GEMM call and its helper kernels each)"
        )
        if count is not None:
            how += f", {count} kernel(s) in all at most"
    else:
        where = (
            f"inside your NVTX ranges matching {ranges!r} (--nvtx-include {nvtx})"
            if ranges
            else f"inside NVTX ranges matching {nvtx}"
            if nvtx
            else "anywhere in the program (--all-kernels)"
        )
        how = (
            f"the first {count} kernel(s) in all (--launch-count)"
            if per_config is None
            else f"at most {per_config} launch(es) of each kernel's launch configuration (grid, block, shared memory: "
            "Nsight Compute's --filter-mode per-launch-config)"
        )
    if selection is not None:
        how = f"the GEMMs only, {selection.describe()}"
    elif ncu.mode != "tracekit-ranges" and ncu.kernels == "gemm" and count is None:
        why = every_kernel or (
            "no nsys timeline to choose them from (capture with --nsys --ncu to profile each GEMM once and "
            "nothing else)"
        )
        how += f"; every kernel, not only GEMMs: {why}"
    budget = ncu.budget_s
    tail = (
        f"; after {budget:g} s (--ncu-budget) it profiles nothing more and the program runs on"
        if budget
        else "; no time limit (--ncu-budget SECONDS sets one)"
    )
    return f"ncu profiles the kernels {where}: {how}, each replayed about 20-30 times{tail}"
