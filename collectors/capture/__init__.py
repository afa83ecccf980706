"""``capture``: run a benchmark once per chosen tool (ncu, nsys, the PyTorch profiler) into a new run folder.

Each tool gets its own pass (ncu replays kernels and nsys traces a timeline; they cannot nest). Every pass runs
the command in its own process group with ``TRACEKIT_RUN_DIR`` exported (a tracekit benchmark inside writes its
measurements.jsonl / failures.jsonl into the run's raw/) and ``TRACEKIT_CAPTURE_TOOL`` naming the tool; its
output streams through and is teed into ``raw/<tool>.log``, and the program's own share of it (the profiler's
lines taken out, collectors/crash.py) into ``raw/program.stdout`` / ``raw/program.stderr`` (``program.<tool>.*``
when several passes run); the tool's own files land in raw/.

A program that dies (a signal, a CUDA fault, a hang past the timeout) leaves one ``crashed`` / ``timeout`` record
in failures.jsonl with its evidence: a Python command runs with ``PYTHONFAULTHANDLER=1`` (unless set), so a native
crash prints its Python stack; ``TRACEKIT_BREADCRUMB_DIR`` (``raw/breadcrumbs/<tool>``) is where the instrument
wrapper notes each GEMM call, so the record names the call in flight (collectors/crash.py).

Whatever happens (the benchmark crashes or exits non-zero, a timeout, a tool error, Ctrl-C) the run folder stays
valid: it is marked ``incomplete`` with the reason, every phase is in the manifest's events, and what was captured
is kept. Ctrl-C raises ``CaptureInterrupted`` (a KeyboardInterrupt carrying the run) after the run is marked;
SIGTERM and SIGHUP take the same path (``signals_as_interrupts``: the pass's process group is stopped, never
orphaned) and the run's reason names the signal (``terminated by SIGTERM during the ncu pass``).

Imports only the standard library and tracekit core: captures run on GPU machines without polars or rich.

The package by concern: ``settings`` (what the capture was asked to do, typed and frozen), ``common`` (names,
events, results, helpers), ``plan`` (settings checked, passes planned), ``child`` (one process, its output and
timeout), ``passes`` (one tool pass and what finishes it), ``driver`` (:func:`capture` as its phases). Every public name is importable from here.
"""

from __future__ import annotations

from .common import (
    BREADCRUMB_DIR,
    CRASH_FLUSH_CHOICES,
    CRASH_FLUSH_DEFAULT,
    ENV_CAPTURE_TOOL,
    ENV_CRASH_FLUSH,
    ENV_HANG_DUMP,
    ENV_RUN_DIR,
    FAILURES_FILE,
    PASS_ORDER,
    SITE_DIR,
    STOP_SIGNALS,
    TORCH_TRACE,
    TORCHPROF_PY,
    CaptureEvent,
    CaptureInterrupted,
    PassResult,
    interrupt_reason,
    is_python_command,
    python_target,
    ranges_filter,
    signals_as_interrupts,
)
from .driver import capture
from .passes import nsys_kernel_count
from .settings import CaptureSettings, NcuSettings, NsysSettings, TorchSettings

__all__ = [
    "BREADCRUMB_DIR",
    "CRASH_FLUSH_CHOICES",
    "CRASH_FLUSH_DEFAULT",
    "ENV_CAPTURE_TOOL",
    "ENV_CRASH_FLUSH",
    "ENV_HANG_DUMP",
    "ENV_RUN_DIR",
    "FAILURES_FILE",
    "PASS_ORDER",
    "SITE_DIR",
    "STOP_SIGNALS",
    "TORCHPROF_PY",
    "TORCH_TRACE",
    "CaptureEvent",
    "CaptureInterrupted",
    "CaptureSettings",
    "NcuSettings",
    "NsysSettings",
    "PassResult",
    "TorchSettings",
    "capture",
    "interrupt_reason",
    "is_python_command",
    "nsys_kernel_count",
    "python_target",
    "ranges_filter",
    "signals_as_interrupts",
]
