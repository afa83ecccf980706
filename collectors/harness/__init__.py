"""The one sweep harness behind ``tracekit bench gemm`` and ``tracekit bench moe``: settings, the worker process,
failure records and logs, shared by every benchmark family.

The package by concern: ``settings`` (:class:`Options`, the :class:`SweepPlan` protocol, the files and exit
status both sides share), ``worker`` (the worker loop and the :class:`Family` protocol), ``timing`` (CUDA graphs /
events, the wall clock, NVML, the PyTorch profiler's traced pass), ``sweep`` (the driver). Two sides, two small
protocols:

- the **sweep** (this process): :func:`run_sweep` takes a :class:`SweepPlan` (a family's settings:
  :class:`Options` plus what its cases are, which files its rows go to and how to start its worker), creates a
  run directory (status ``capturing``), fingerprints the environment in a worker (unless given the fingerprint
  ``tracekit bench`` took for its GPU check), then starts one worker process per backend and appends what it
  reports to the run's raw JSONL files as it arrives. A worker that dies by a signal is recorded ``crashed`` with
  the signal name for the case it was on; one silent for more than ``timeout`` seconds on a case is killed and
  recorded ``timeout``; either way a fresh worker takes the remaining cases. Each worker's events and stderr stay
  in ``raw/logs/<backend>.<attempt>.*``. The run is marked ``complete`` at the end, or ``incomplete`` with the
  reason on Ctrl-C or an error; what was measured stays.
- the **worker** (``python -m <family's worker module>``): :func:`run_worker` runs one backend of a
  :class:`Family` over its cases and appends one JSON object per line to ``--out`` (flushed per line, so
  whatever was written survives a crash)::

      {"event": "hello", "backend": ..., "pid": ...}
      {"event": "start", "shape": [m, n, k, ...]}
      {"event": "measurement", "shape": [...], "row": {<the family's measurement keys>}}
      {"event": "<side event>", "shape": [...], "row": {...}}        e.g. the MoE curve points
      {"event": "failure", "shape": [...], "row": {<raw/failures.jsonl keys>}, "poisoned": false}
      {"event": "done", "shape": [...]}
      {"event": "finished"}

  Every line also carries ``time_unix``. After a fault that poisons the CUDA context (illegal address /
  instruction) the worker records it and exits with :data:`EXIT_POISONED`; the sweep starts a fresh worker for
  the remaining cases.

Collectors never draw: progress goes to the ``on_event`` callback as :class:`SweepEvent` objects.
"""

from __future__ import annotations

from tracekit.collectors.env import take_fingerprint

from .settings import EXIT_POISONED, FAILURES_FILE, LOG_DIR, Case, Options, SweepPlan, add_worker_options
from .sweep import SweepEvent, SweepResult, profiled_worker, run_sweep
from .worker import BenchBackend, CaseContext, Emitter, Family, run_worker

__all__ = [
    "EXIT_POISONED",
    "FAILURES_FILE",
    "LOG_DIR",
    "BenchBackend",
    "Case",
    "CaseContext",
    "Emitter",
    "Family",
    "Options",
    "SweepEvent",
    "SweepPlan",
    "SweepResult",
    "add_worker_options",
    "profiled_worker",
    "run_sweep",
    "run_worker",
    "take_fingerprint",
]
