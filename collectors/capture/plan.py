"""Before anything runs: capture()'s options checked (:class:`_Options`), and the plan of passes with the
tools found; both raise BadInputError / MissingToolError before a run folder exists."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.errors import BadInputError, MissingToolError
from tracekit.naming import NCU_FILTER

from .. import tools
from ..ranks import RankLaunch
from ..torchprof import (
    OPS_CHOICES,
)
from .common import CRASH_FLUSH_CHOICES, PASS_ORDER, SITE_DIR, python_target, ranges_filter


# --- the capture ------------------------------------------------------------------------------------------------
@dataclass
class _Plan:
    passes: list[str]
    ncu: tools.Tool | None = None
    nsys: tools.Tool | None = None
    python: tuple[list[str], list[str]] | None = None
    warnings: list[str] = field(default_factory=list)


def _plan(
    cmd: Sequence[str],
    *,
    ncu: bool,
    nsys: bool,
    torch_profiler: bool,
    ncu_path: str | os.PathLike[str] | None,
    nsys_path: str | os.PathLike[str] | None,
    env: dict[str, str],
) -> _Plan:
    """Which passes to run, with the tools found; raises MissingToolError / BadInputError before anything runs."""
    target = python_target(cmd)
    plan = _Plan([], python=target)
    if not (ncu or nsys or torch_profiler):
        try:
            found = tools.find_nsys(nsys_path, env=env)
            tools.require_nsys_importer(found, env=env)
        except MissingToolError as exc:
            if target is not None:
                plan.passes = ["torch"]
                plan.warnings.append(f"no profiler chosen and {exc.message}; using the PyTorch profiler")
            else:
                plan.passes = ["plain"]
                plan.warnings.append(
                    f"no profiler chosen and {exc.message}; running the command plainly (no kernels will be "
                    "recorded, only what a tracekit benchmark writes itself): pass --ncu / --nsys / --torch-profiler"
                )
        else:
            plan.nsys = found
            plan.passes = ["nsys"]
        return plan
    if nsys:
        plan.nsys = tools.find_nsys(nsys_path, env=env)
        tools.require_nsys_importer(plan.nsys, env=env)
        plan.passes.append("nsys")
    if torch_profiler:
        if target is None:
            raise BadInputError(
                f"--torch-profiler needs a Python command (python script.py ..., python -m module ...), got {cmd[0]!r}",
                "use --nsys or --ncu for other programs",
            )
        plan.passes.append("torch")
    if ncu:
        plan.ncu = tools.find_ncu(ncu_path, env=env)
        plan.passes.append("ncu")
    plan.passes.sort(key=PASS_ORDER.index)
    return plan


def _check_command(cmd: Sequence[str], env: dict[str, str], cwd: Path | None) -> None:
    if not cmd:
        raise BadInputError(
            "no command to capture", "give it after --, e.g. tracekit capture --nsys -- python bench.py"
        )
    first = cmd[0]
    if os.sep in first:
        path = Path(first) if Path(first).is_absolute() or cwd is None else cwd / first
        if not path.exists():
            raise BadInputError(f"{first} does not exist", "check the command after --")
        return
    if shutil.which(first, path=env.get("PATH", "")) is None:
        raise BadInputError(f"{first}: command not found on PATH", "check the command after --")


@dataclass
class _Options:
    """capture()'s options once checked, as the phases after the check read them."""

    cmd: list[str]
    env: dict[str, str]
    cwd: Path | None
    instrument: bool
    timeout: float | None
    grace_s: float
    torch_ops: str
    trace_repeats: int | None
    nsys_extra: list[str]
    crash_flush: str
    ranks: RankLaunch | None
    ranges: str | None
    ncu_opts: dict[str, Any]
    """sections, metrics, nvtx_include, clock_control, launch_count, per_range, per_config (ncu's per-launch-config
    count, or None), mode (tracekit-ranges / ranges / all-kernels), budget_s, extra: the ncu pass's options."""

    @property
    def program(self) -> list[str]:
        """The program itself: the command, or with ranks each rank's command inside the launcher."""
        return list(self.ranks.command) if self.ranks is not None else self.cmd


def _check_options(
    cmd: Sequence[str],
    *,
    env: dict[str, str] | None,
    cwd: Path | str | None,
    ranks: RankLaunch | None,
    ranges: str | None,
    nvtx_include: str | None,
    crash_flush: str,
    clock_control: str,
    torch_ops: str,
    trace_repeats: int | None,
    max_per_range: int | None,
    sections: Iterable[str],
    metrics: Iterable[str],
    launch_count: int | None,
    ncu_extra: Sequence[str],
    nsys_extra: Sequence[str],
    instrument: bool,
    timeout: float | None,
    grace_s: float,
    ncu_budget: float | None = None,
) -> _Options:
    """Phase 1, check: the command and every option, raising BadInputError before anything is created."""
    cmd = [str(c) for c in cmd]
    base_env = dict(os.environ if env is None else env)
    work = Path(cwd).absolute() if cwd is not None else None
    _check_command(cmd, base_env, work)
    if ranges is not None:
        nvtx_include = ranges_filter(ranges)
    if crash_flush not in CRASH_FLUSH_CHOICES:
        raise BadInputError(
            f"crash flush {crash_flush!r} is not one of {', '.join(CRASH_FLUSH_CHOICES)}",
            "use profiler-stop (stop the profiler from a fatal-signal handler) or none",
        )
    if ranks is not None and ranks.kind == "launcher":
        _check_command(list(ranks.launcher), base_env, work)
    if clock_control not in tools.CLOCK_CONTROLS:
        raise BadInputError(
            f"clock control {clock_control!r} is not one of {', '.join(tools.CLOCK_CONTROLS)}",
            "use none (your run's clocks) or base (ncu's locked base clock)",
        )
    if torch_ops not in OPS_CHOICES:
        raise BadInputError(
            f"PyTorch-profiler ops {torch_ops!r} is not one of {', '.join(OPS_CHOICES)}",
            "use shapes (ranges and every ATen operator with its input shapes), ranges (record_function ranges "
            "only) or all (every ATen operator, no shapes)",
        )
    if trace_repeats is not None and trace_repeats < 1:
        raise BadInputError(f"--trace-repeats {trace_repeats} must be at least 1", "give 1 or more, or all")
    per_range = max_per_range if max_per_range is not None else tools.max_per_range(base_env)
    if per_range < 1:
        raise BadInputError(f"--max-per-range {per_range} must be at least 1", "give 1 or more")
    if ncu_budget is not None and not ncu_budget > 0:
        raise BadInputError(
            f"--ncu-budget {ncu_budget:g} must be more than 0 seconds", "e.g. --ncu-budget 60"
        )
    # One N, one meaning: at most N launches of each launch configuration inside the selected ranges. Inside
    # tracekit's ranges the range code lets ncu see the first N launches of each range name (one GEMM call each:
    # the same kernel in two shapes is profiled in both); elsewhere Nsight Compute counts them per grid, block and
    # shared memory (--filter-mode per-launch-config), where --launch-count (kernels in all) replaces it: ncu
    # applies one count (tracekit ranges inside the program still let it see N launches of each range name).
    if nvtx_include == NCU_FILTER:
        mode = "tracekit-ranges"
    else:
        mode = "all-kernels" if nvtx_include is None else "ranges"
    per_config = per_range if mode != "tracekit-ranges" and launch_count is None else None
    ncu_opts = {
        "sections": list(sections),
        "metrics": list(metrics),
        "nvtx_include": nvtx_include,
        "clock_control": clock_control,
        "launch_count": launch_count,
        "per_range": per_range,
        "per_config": per_config,
        "mode": mode,
        "budget_s": ncu_budget,
        "extra": list(ncu_extra),
    }
    return _Options(
        cmd=cmd,
        env=base_env,
        cwd=work,
        instrument=instrument,
        timeout=timeout,
        grace_s=grace_s,
        torch_ops=torch_ops,
        trace_repeats=trace_repeats,
        nsys_extra=list(nsys_extra),
        crash_flush=crash_flush,
        ranks=ranks,
        ranges=ranges,
        ncu_opts=ncu_opts,
    )


def _check_instrument(instrument: bool) -> None:
    if instrument and not (SITE_DIR / "sitecustomize.py").is_file():
        raise MissingToolError(
            f"--instrument needs {SITE_DIR / 'sitecustomize.py'}, which this tracekit lacks",
            "reinstall tracekit, or wrap your GEMMs in tracekit ranges yourself",
        )
