"""Before anything runs: capture()'s options checked (:class:`_Options`), and the plan of passes with the
tools found; both raise BadInputError / MissingToolError before a run folder exists."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tracekit.errors import BadInputError, MissingToolError

from .. import tools
from ..torchprof import (
    OPS_CHOICES,
)
from .common import CRASH_FLUSH_CHOICES, PASS_ORDER, SITE_DIR, python_target, ranges_filter
from .select import KERNEL_CHOICES
from .settings import CaptureSettings


# --- the capture ------------------------------------------------------------------------------------------------
@dataclass
class _Plan:
    passes: list[str]
    ncu: tools.Tool | None = None
    nsys: tools.Tool | None = None
    python: tuple[list[str], list[str]] | None = None
    warnings: list[str] = field(default_factory=list)
    planning: bool = False
    """The nsys pass is a planning pass: ``--ncu`` without ``--nsys``, run so that its timeline chooses the ncu
    pass's GEMM launches (collectors/capture/select.py); its timeline is kept and imported like any other."""
    no_planning: str | None = None
    """Why an ncu pass that would choose its GEMMs from a timeline has none to choose from (no usable nsys here,
    or ``--no-plan-pass``): it profiles every kernel as bounded, and says so."""


def _plan(cmd: Sequence[str], settings: CaptureSettings, env: dict[str, str]) -> _Plan:
    """Which passes to run, with the tools found; raises MissingToolError / BadInputError before anything runs."""
    ncu, nsys, torch_profiler = ("ncu" in settings.tools, "nsys" in settings.tools, "torch" in settings.tools)
    ncu_path, nsys_path = settings.ncu.path, settings.nsys.path
    target = python_target(cmd)
    plan = _Plan([], python=target)
    if not (ncu or nsys or torch_profiler):
        try:
            found = tools.find_nsys(nsys_path, env=env)
            tools.require_nsys_importer(found, env=env)
        except MissingToolError as exc:
            if target is not None:
                _require_torch(target[0], env, f"no profiler chosen and {exc.message}; the PyTorch profiler ")
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
        _require_torch(target[0], env, "--torch-profiler ")
        plan.passes.append("torch")
    if ncu:
        plan.ncu = tools.find_ncu(ncu_path, env=env)
        plan.passes.append("ncu")
        if not nsys and settings.ncu.selects_gemms(settings.ranks is not None):
            _plan_pass(plan, settings, env)
    plan.passes.sort(key=PASS_ORDER.index)
    return plan


def _plan_pass(plan: _Plan, settings: CaptureSettings, env: dict[str, str]) -> None:
    """The planning pass of an ncu pass that chooses its GEMMs from a timeline but has no ``--nsys`` pass: nsys
    found as the nsys pass finds it (``--nsys-path``, $TRACEKIT_NSYS, PATH, Nsight Compute's own copy ...) and
    able to build its report here; else ``plan.no_planning`` says why there is none (the ncu pass then runs as
    before, bounded per launch configuration, every kernel)."""
    if not settings.ncu.plan_pass:
        plan.no_planning = "--no-plan-pass"
        return
    try:
        found = tools.find_nsys(settings.nsys.path, env=env)
        tools.require_nsys_importer(found, env=env)
    except MissingToolError as exc:
        plan.no_planning = f"no nsys for a planning pass: {exc.message}"
        return
    plan.nsys, plan.planning = found, True
    plan.passes.append("nsys")


_HAS_TORCH = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 3)"
"""Whether an interpreter can import torch, asked without importing it (a probe of well under a second)."""


def _require_torch(interpreter: list[str], env: dict[str, str], what: str) -> None:
    """MissingToolError (exit 3, the documented code for a missing package) before a run folder exists when the
    program's Python cannot import torch: the PyTorch-profiler pass would fail inside the child and leave an empty
    run marked incomplete (exit 4) behind. ``what`` starts the message (which pass needs torch)."""
    import subprocess

    try:
        probe = subprocess.run(
            [*interpreter, "-c", _HAS_TORCH], env=env, capture_output=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return  # the program's own start will say what is wrong with its interpreter
    if probe.returncode == 3:
        raise MissingToolError(
            f"{what}needs torch, which {' '.join(interpreter)} cannot import",
            "install torch in that environment, or capture with --nsys / --ncu (Nsight tools need no torch)",
        )


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


@dataclass(frozen=True)
class _Options:
    """capture()'s command and settings once checked, as the phases after the check read them: the environment
    and working folder resolved, ``settings.ncu`` with its filter and per-range count filled in."""

    cmd: list[str]
    env: dict[str, str]
    cwd: Path | None
    settings: CaptureSettings

    @property
    def program(self) -> list[str]:
        """The program itself: the command, or with ranks each rank's command inside the launcher."""
        ranks = self.settings.ranks
        return list(ranks.command) if ranks is not None else self.cmd


def _check_options(cmd: Sequence[str], settings: CaptureSettings) -> _Options:
    """Phase 1, check: the command and every setting, raising BadInputError before anything is created."""
    cmd = [str(c) for c in cmd]
    base_env = dict(os.environ if settings.env is None else settings.env)
    work = Path(settings.cwd).absolute() if settings.cwd is not None else None
    _check_command(cmd, base_env, work)
    ncu, ranks, ranges = settings.ncu, settings.ranks, settings.ranges
    crash_flush, clock_control = settings.nsys.crash_flush, ncu.clock_control
    torch_ops, trace_repeats = settings.torch.ops, settings.torch.trace_repeats
    max_per_range, ncu_budget = ncu.max_per_range, ncu.budget_s
    if ranges is not None:
        ncu = replace(ncu, nvtx_include=ranges_filter(ranges))
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
    if ncu.kernels not in KERNEL_CHOICES:
        raise BadInputError(
            f"--ncu-kernels {ncu.kernels!r} is not one of {', '.join(KERNEL_CHOICES)}",
            "use gemm (the GEMM kernels of the nsys timeline, each place once) or all (every kernel)",
        )
    if ncu_budget is not None and not ncu_budget > 0:
        raise BadInputError(
            f"--ncu-budget {ncu_budget:g} must be more than 0 seconds", "e.g. --ncu-budget 60"
        )
    # One N, one meaning: at most N launches of each launch configuration inside the selected ranges. Inside
    # tracekit's ranges the range code lets ncu see the first N launches of each range name (one GEMM call each:
    # the same kernel in two shapes is profiled in both); elsewhere Nsight Compute counts them per grid, block and
    # shared memory (--filter-mode per-launch-config), where --launch-count (kernels in all) replaces it: ncu
    # applies one count (tracekit ranges inside the program still let it see N launches of each range name).
    # NcuSettings.mode and .per_config say which.
    ncu = replace(ncu, max_per_range=per_range)
    return _Options(cmd=cmd, env=base_env, cwd=work, settings=replace(settings, ncu=ncu))


def _check_instrument(instrument: bool) -> None:
    if instrument and not (SITE_DIR / "sitecustomize.py").is_file():
        raise MissingToolError(
            f"--instrument needs {SITE_DIR / 'sitecustomize.py'}, which this tracekit lacks",
            "reinstall tracekit, or wrap your GEMMs in tracekit ranges yourself",
        )
