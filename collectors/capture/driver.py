""":func:`capture` as its phases: check the options, plan the passes, record the settings in a new run,
run the passes, finish (mark the run complete or incomplete)."""

from __future__ import annotations

import contextlib
import signal
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tracekit.collectors.env import FingerprintWorker, unanswered
from tracekit.errors import IncompleteError, SchemaError, StorageError
from tracekit.run import STATUS_CAPTURING, STATUS_COMPLETE, STATUS_INCOMPLETE, Run

from .. import tools
from .common import (
    BREADCRUMB_DIR,
    CaptureEvent,
    CaptureInterrupted,
    PassResult,
    _default_output,
    _label,
    _reserve_run_dir,
    interrupt_reason,
    is_python_command,
    signals_as_interrupts,
)
from .passes import _one_pass
from .plan import _check_instrument, _check_options, _Options, _Plan, _plan
from .settings import CaptureSettings


def _settings(opts: _Options, plan: _Plan, python_cmd: bool) -> dict[str, Any]:
    """Phase 3, record: the capture settings run.json keeps (tools, their versions and options)."""
    s = opts.settings
    ncu, nsys = s.ncu, s.nsys
    settings: dict[str, Any] = {
        "tools": plan.passes,
        "instrument": s.instrument,
        "python_faulthandler": python_cmd and not opts.env.get("PYTHONFAULTHANDLER"),
        "breadcrumbs": f"raw/{BREADCRUMB_DIR}/<pass>",
        "timeout_s": s.timeout,
        "cwd": str(opts.cwd or Path.cwd()),
    }
    if plan.ncu:
        settings["ncu"] = {
            **plan.ncu.as_dict(),
            "clock_control": ncu.clock_control,
            "sections": list(ncu.sections),
            "metrics": list(ncu.metrics),
            "nvtx_include": ncu.nvtx_include,
            "ranges": s.ranges,
            "max_per_range": ncu.max_per_range,
            "per_launch_config": ncu.per_config,
            "bound_mode": ncu.mode,
            "kernels": ncu.kernels,
            "launch_count": ncu.launch_count,
            "budget_s": ncu.budget_s,
            "extra": list(ncu.extra),
            "plan_pass": ncu.plan_pass,
        }
    if plan.nsys:
        settings["nsys"] = {
            **plan.nsys.as_dict(),
            "trace": tools.NSYS_TRACE,
            "cuda_graph_trace": tools.nsys_graph_trace(list(nsys.extra)),
            "libs": opts.env.get(tools.ENV_NSYS_LIBS),
            "extra": list(nsys.extra),
            "crash_flush": nsys.crash_flush if python_cmd else "none",
            **({"role": "plan"} if plan.planning else {}),
        }
    if "torch" in plan.passes and plan.python:
        settings["torch_profiler"] = {
            "python": plan.python[0][0],
            "activities": ["cpu", "cuda"],
            "cpu_events": s.torch.ops,
            "trace_repeats": "all" if s.torch.trace_repeats is None else s.torch.trace_repeats,
        }
    if s.ranks is not None:
        settings["ranks"] = s.ranks.as_dict()
    return settings


def _set_environment(run: Run, environment: dict[str, Any]) -> dict[str, Any]:
    """``environment`` into the manifest (not saved); an answer that does not fit run.json is replaced by what
    this process can read, with why, so a fingerprint never costs the capture. Returns what was recorded."""
    try:
        run.set_environment(environment)
    except SchemaError as exc:
        environment = unanswered(f"the fingerprint worker's answer was refused: {exc.message}")
        run.set_environment(environment)
    return environment


def _record_environment(run: Run, worker: FingerprintWorker, log: Callable[..., None]) -> None:
    """The fingerprint worker's answer into the manifest (waiting for it, within its time limit): a worker that
    failed or timed out leaves the fields only it could read None and says why in ``fingerprint_error``, and the
    capture goes on."""
    environment = _set_environment(run, worker.result())
    run.save()
    error = environment.get("fingerprint_error")
    if error:
        last = str(error).strip().splitlines()[-1]
        log("warning", "environment", f"environment fingerprint incomplete: {last}")
    else:
        log("done", "environment", "environment recorded")


def _run_passes(
    run: Run,
    opts: _Options,
    plan: _Plan,
    python_cmd: bool,
    output: Callable[[str, bytes], None],
    log: Callable[..., None],
    fingerprint: FingerprintWorker,
) -> list[PassResult]:
    """Phase 4, run the passes: one pass per tool, each saved in the manifest as it ends, and the environment
    fingerprint (its worker started with the capture) recorded once the worker has answered, at the latest after
    the last pass, so the program never waits for ``import torch``. Ctrl-C or a failure marks the run incomplete
    (what was captured is kept, with the fingerprint if the worker had answered; a worker still running is
    stopped) and raises CaptureInterrupted / IncompleteError / the failure itself."""
    run_dir = run.path.absolute()
    raw = run_dir / "raw"
    results: list[PassResult] = []
    recorded = False
    try:
        log("start", "setup", f"run folder {run.path}")
        for warning in plan.warnings:
            log("warning", "setup", warning)
        for tool in plan.passes:
            result = _one_pass(
                tool,
                opts,
                plan,
                raw,
                run_dir,
                output=output,
                log=log,
                python_cmd=python_cmd,
                program_stem="program" if len(plan.passes) == 1 else f"program.{tool}",
                previous=results,
            )
            results.append(result)
            run.set_passes([r.as_record() for r in results])
            run.save()
            if result.interrupted:
                raise KeyboardInterrupt
            if not recorded and fingerprint.answered():
                _record_environment(run, fingerprint, log)
                recorded = True
        if not recorded:
            _record_environment(run, fingerprint, log)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP (signals_as_interrupts)
        run.set_passes([r.as_record() for r in results])
        if not recorded:
            _set_environment(
                run, fingerprint.stop("the capture was interrupted before the fingerprint answered")
            )
        where = results[-1].tool if results else "setup"
        last = results[-1] if results and results[-1].interrupted else None
        signum = last.signum if last is not None and last.signum else getattr(exc, "signum", signal.SIGINT)
        said = last.reason if last is not None else None
        # every pass done and none interrupted: Ctrl-C came in the wait for the fingerprint
        waiting = last is None and len(results) == len(plan.passes)
        where = "environment" if waiting else where
        during = "while waiting for the environment fingerprint" if waiting else f"during the {where} pass"
        reason = said or interrupt_reason(signum, during)
        log("error", where, reason)
        run.mark(STATUS_INCOMPLETE, reason)
        raise CaptureInterrupted(run, signum) from None
    except BaseException as exc:
        run.set_passes([r.as_record() for r in results])
        if not recorded:
            _set_environment(run, fingerprint.stop("the capture failed before the fingerprint answered"))
        reason = f"capture failed: {type(exc).__name__}: {exc}"
        # a full disk may refuse these writes too; the last manifest saved stays valid (saves are atomic)
        with contextlib.suppress(OSError, StorageError):
            log("error", "capture", reason)
        with contextlib.suppress(OSError, StorageError):
            run.mark(STATUS_INCOMPLETE, reason)
        if isinstance(exc, OSError | StorageError):
            detail = exc.message if isinstance(exc, StorageError) else f"{exc.strerror or exc}"
            raise IncompleteError(
                f"capture into {run.path} stopped, a write failed ({detail}); what was captured is kept",
                f"free disk space, then `tracekit import --rebuild {run.path}`",
            ) from exc
        raise
    return results


def _finish(run: Run, results: list[PassResult], log: Callable[..., None]) -> None:
    """Phase 5, finish: the run marked complete, or incomplete with every pass's reason."""
    reasons = [r.reason for r in results if r.reason]
    if reasons:
        run.mark(STATUS_INCOMPLETE, "; ".join(reasons))
    else:
        run.mark(STATUS_COMPLETE)
    # an incomplete capture is not a success: the terminal shows it as a warning, not with a tick
    log(
        "done" if run.status == STATUS_COMPLETE else "warning",
        "capture",
        f"capture {run.status}: {len(results)} pass(es)",
    )


def capture(
    cmd: Sequence[str],
    settings: CaptureSettings | None = None,
    *,
    on_event: Callable[[CaptureEvent], None] | None = None,
    on_output: Callable[[str, bytes], None] | None = None,
    **keywords: Any,
) -> Run:
    """Run ``cmd`` under each chosen tool into a new run folder and return it, ``complete`` or ``incomplete``.

    ``settings`` (:class:`CaptureSettings`, with :class:`NcuSettings`, :class:`NsysSettings` and
    :class:`TorchSettings`) say what to do and are carried unchanged to every pass; instead of them, a caller may
    give the flat keywords of :meth:`CaptureSettings.from_keywords` (``ncu=True, timeout=60, max_per_range=3``).

    With ``ranks`` (:func:`tracekit.collectors.ranks.plan_ranks` of ``cmd``), every pass runs the launcher once
    and one profiler per rank inside it, each writing files named with its rank (collectors/ranks.py).

    With no tool chosen: nsys if it is usable here, else the PyTorch profiler for a Python command, else a plain
    run (with a warning). ``torch.ops`` is what the PyTorch profiler records on the CPU side: ``shapes``
    (``record_function`` ranges and every ATen operator with its input shapes, so GEMM operators get M, N, K and
    FLOPs; the cost is in docs/NOTES.md), ``ranges`` (``record_function`` ranges only: enough for tracekit's own
    ranges, which name their shapes) or ``all`` (every operator, no shapes). ``torch.trace_repeats`` bounds what
    the PyTorch profiler records of each measurement of a tracekit benchmark inside: a traced pass of that many
    repeats after its warm-up, a segment file each (``tracekit.collectors.worker.TraceWindow``); None records
    every launch of every worker, and the profiler's cost then grows with the benchmark's repeats. The ncu pass
    profiles at most ``ncu.max_per_range`` (default $TRACEKIT_NCU_MAX_PER_RANGE or 2) launches of each launch
    configuration inside the selected ranges: per range name inside tracekit's ranges, per grid / block / shared
    memory (Nsight Compute's per-launch-config filter) inside ``ranges`` or everywhere
    (``ncu.nvtx_include=None``); ``ncu.launch_count`` caps the kernels in all instead. ``ncu.budget_s`` (seconds)
    ends its profiling when spent and lets the program run on (collectors/capture/budget.py). ``ncu.extra`` /
    ``nsys.extra`` go on that tool's command line after tracekit's own options (and into run.json). ``timeout``
    applies to each pass; ``grace_s`` is how long a stopped pass may take to finish writing its report.
    ``on_output(stream, bytes)`` receives the child's output (default: our own stdout/stderr). Raises
    MissingToolError / BadInputError before creating anything, and CaptureInterrupted on Ctrl-C after marking the
    run."""
    if settings is not None and keywords:
        raise TypeError(f"capture() takes settings or keywords, not both (got {', '.join(sorted(keywords))})")
    if settings is None:
        settings = CaptureSettings.from_keywords(**keywords)
    opts = _check_options(cmd, settings)
    # phase 2, plan: which passes, with the tools found (raises MissingToolError before anything is created)
    plan = _plan(opts.program, opts.settings, opts.env)
    _check_instrument(opts.settings.instrument)
    # phase 3, record: the run folder with its settings
    path = _reserve_run_dir(settings.out, settings.runs_dir, _label(opts.program))
    python_cmd = is_python_command(opts.program, opts.cwd)
    run = Run.create(
        path,
        command=opts.cmd,
        capture=_settings(opts, plan, python_cmd),
        status=STATUS_CAPTURING,
        exist_ok=True,
    )
    emit = on_event or (lambda ev: None)

    def log(kind: str, phase: str, message: str, **extra: Any) -> None:
        run.log(phase, message, level=kind, **extra)
        emit(CaptureEvent(kind, phase, message))

    # phase 4, run the passes; phase 5, finish. SIGTERM and SIGHUP take Ctrl-C's path from here on: the
    # profilers are stopped, not orphaned, and the run says which signal ended it. The fingerprint worker
    # (tracekit's own python, GPU 0) runs beside the passes in a folder of its own; leaving the block stops it
    with (
        signals_as_interrupts(),
        tempfile.TemporaryDirectory(prefix="tracekit-fingerprint-") as tmp,
        FingerprintWorker(sys.executable, 0, Path(tmp) / "fingerprint.jsonl") as fingerprint,
    ):
        results = _run_passes(run, opts, plan, python_cmd, on_output or _default_output, log, fingerprint)
        _finish(run, results, log)
    return run
