"""The worker loop every benchmark family runs in its worker process (:func:`run_worker`), the :class:`Family`
protocol it drives and the events file it writes (:class:`Emitter`); the event protocol is in the package's
docstring. The family's worker module (``python -m tracekit.collectors.worker`` for ``bench gemm``,
``python -m tracekit.collectors.moe`` for ``bench moe``) parses its command line and calls :func:`run_worker`."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from tracekit.collectors import failures as F

from . import timing
from .settings import EXIT_POISONED


@runtime_checkable
class BenchBackend(Protocol):
    """What the worker loop reads of a backend; the family does the rest (prepare, run, reference)."""

    name: str
    op: str
    packages: tuple[str, ...]
    timer: str
    """``cuda``: timed with CUDA graphs / events; ``wall``: a CPU-only backend (tests, plugins)."""

    def available(self) -> tuple[bool, str]: ...


@dataclass
class CaseContext:
    """What a family's :meth:`Family.measure` gets besides the backend and the case."""

    timer: Any
    """The worker's ``timing.CudaTimer``, or None for a ``wall`` backend."""
    state: Any
    """What :meth:`Family.setup` returned (MoE: every expert's weights)."""
    emit: Callable[..., None]
    warmup: int
    repeats: int
    seed: int


@runtime_checkable
class Family(Protocol):
    """A benchmark family: what a case is, how a backend is found and set up, how a case is measured into one
    measurement row (its one row-building function) and the text of why it is wrong."""

    def cases(self, args: argparse.Namespace) -> Sequence[Any]:
        """The cases this worker runs, from its command line."""
        ...

    def key(self, case: Any) -> list[int]:
        """The case's ``shape`` in events: (M, N, K) first, as :data:`Case`."""
        ...

    def backend(self, name: str) -> BenchBackend:
        """The backend called ``name``; KeyError with a message listing the known names."""
        ...

    def setup(self, backend: Any, timer: Any, seed: int) -> Any:
        """Once per worker before the cases; what it raises fails every case."""
        ...

    def measure(self, backend: Any, case: Any, ctx: CaseContext) -> tuple[dict[str, Any], str]:
        """(measurement row, why it is wrong or '') for one case."""
        ...


class Emitter:
    """Appends JSON lines to the events file, flushed one by one."""

    def __init__(self, path: str) -> None:
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the worker

    def __call__(self, event: str, **fields: Any) -> None:
        line = {"event": event, **fields, "time_unix": round(time.time(), 4)}
        self._f.write(json.dumps(line, default=str, allow_nan=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def _error(exc: Exception) -> tuple[str, str, str, str]:
    """(kind, type, message, traceback) of an exception raised by a backend."""
    msg, etype = F.full_message(exc), F.type_name(exc)
    kind = F.UNAVAILABLE if isinstance(exc, ImportError) else F.classify(etype, msg)
    return kind, etype, msg, traceback.format_exc()


def run_worker(family: Family, args: argparse.Namespace) -> int:
    """One backend (``args.backend``) of ``family`` over its cases, as events in ``args.out``; the exit status."""
    from tracekit.collectors.env import versions_json

    emit = Emitter(args.out)
    emit("hello", backend=args.backend, pid=os.getpid(), python=sys.version.split()[0])
    cases = family.cases(args)
    backend: BenchBackend | None = None
    versions = device_name = cc = None
    timer = None
    setup_error: tuple[str, str, str, str] | None = None  # kind, type, message, traceback
    try:
        backend = family.backend(args.backend)
    except KeyError as exc:
        setup_error = (F.UNAVAILABLE, "KeyError", str(exc.args[0]), "")
    if backend is not None:
        versions = versions_json((*backend.packages, "triton"))
        ok, reason = backend.available()
        if not ok:
            setup_error = (F.UNAVAILABLE, "tracekit.collectors.backends.BackendUnavailable", reason, "")
        elif backend.timer == "cuda":
            try:
                timer = timing.CudaTimer(args.device, args.timing)
                device_name, cc = timer.info.get("gpu_name"), timer.info.get("compute_capability")
            except timing.NoCudaError as exc:
                setup_error = (F.UNAVAILABLE, F.type_name(exc), str(exc), "")
            except Exception as exc:
                msg = F.full_message(exc)
                setup_error = (
                    F.classify(F.type_name(exc), msg),
                    F.type_name(exc),
                    msg,
                    traceback.format_exc(),
                )
        if timer is None and "torch" in sys.modules:
            with contextlib.suppress(Exception):
                from tracekit.collectors.env import device_info

                info = device_info(args.device)
                device_name, cc = info.get("gpu_name"), info.get("compute_capability")
    state = None
    if setup_error is None:
        try:
            state = family.setup(backend, timer, args.seed)
        except Exception as exc:
            setup_error = _error(exc)

    def fail(case: Any, kind: str, etype: str, msg: str, tb: str, poisoned: bool = False) -> None:
        m, n, k = family.key(case)[:3]
        row = F.failure_record(
            backend=args.backend,
            op=backend.op if backend is not None else None,
            m=m,
            n=n,
            k=k,
            kind=kind,
            error_type=etype,
            message=msg,
            traceback=tb,
            device_name=device_name,
            compute_capability=cc,
            versions=versions,
        )
        emit("failure", shape=family.key(case), row=row, poisoned=poisoned)

    ctx = CaseContext(timer, state, emit, args.warmup, args.repeats, args.seed)
    for case in cases:
        key = family.key(case)
        emit("start", shape=key)
        if setup_error is not None:
            fail(case, *setup_error)
            emit("done", shape=key)
            continue
        try:
            row, why = family.measure(backend, case, ctx)
        except Exception as exc:
            kind, etype, msg, tb = _error(exc)
            poisoned = F.poisons_context(msg)
            fail(case, kind, etype, msg, tb, poisoned)
            if poisoned:
                emit("poisoned", shape=key)
                emit.close()
                return EXIT_POISONED
            timing.free(timer)
            emit("done", shape=key)
            continue
        emit("measurement", shape=key, row=row)
        if row["status"] != "ok":
            fail(case, F.WRONG, "tracekit.WrongResult", why, "")
        timing.free(timer)
        emit("done", shape=key)
    emit("finished")
    emit.close()
    timing.report_trace_window()
    return 0
