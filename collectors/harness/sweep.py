"""The sweep driver (:func:`run_sweep`): one worker process per backend of a :class:`~.settings.SweepPlan`, rows
appended to the run's raw files as they arrive, a crash or a silent worker recorded and the rest of the cases
given to a fresh worker, logs in ``raw/logs/``, the environment fingerprint taken in a worker
(collectors/env.py ``take_fingerprint``); plus the PyTorch-profiler wrapping of a worker's command."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.collectors import failures as F
from tracekit.collectors.env import take_fingerprint
from tracekit.collectors.failures import FAILURE_KEYS
from tracekit.collectors.torchprof import (
    DEFAULT_TRACE_REPEATS,
    ENV_TORCH_OPS,
    ENV_TORCH_PROFILER,
    ENV_TRACE_REPEATS,
    ENV_TRACE_SEGMENTS,
    parse_trace_repeats,
    worker_ops,
)
from tracekit.records import jsonl_line, record_for
from tracekit.run import STATUS_CAPTURING, STATUS_COMPLETE, STATUS_INCOMPLETE, Run
from tracekit.slug import slug

from .settings import EXIT_POISONED, FAILURES_FILE, LOG_DIR, Case, SweepPlan


@dataclass
class SweepEvent:
    """Something the sweep did, for a progress display.

    ``kind``: ``sweep_started`` (data: backends, shapes), ``backend_started``, ``shape_done`` (data: status = ok,
    wrong or a failure kind; tflops when measured), ``failure`` (data: the failure row), ``backend_done``,
    ``sweep_done`` (data: status).
    """

    kind: str
    backend: str | None = None
    shape: tuple[int, ...] | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class SweepResult:
    run: Run
    measurements: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    status: str
    reason: str | None = None


def _append(f: Any, row: dict[str, Any], keys: tuple[str, ...], into: list[dict[str, Any]]) -> None:
    row = {k: row.get(k) for k in keys}
    into.append(row)
    f.write(jsonl_line(record_for(keys), row))  # typed where tracekit/records.py declares the row kind
    f.flush()


class _Sink:
    """Appends rows to the run's raw JSONL files (keys in the order the plan gives) and keeps them for the
    result."""

    def __init__(self, run: Run, plan: SweepPlan) -> None:
        self.keys = plan.measurement_keys
        self.measurements: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self.side: dict[str, list[dict[str, Any]]] = {}
        self._m = open(run.raw_dir / plan.measurements_file, "a", encoding="utf-8")  # noqa: SIM115
        self._f = open(run.raw_dir / FAILURES_FILE, "a", encoding="utf-8")  # noqa: SIM115
        self._side = {
            event: (open(run.raw_dir / name, "a", encoding="utf-8"), keys)  # noqa: SIM115
            for event, (name, keys) in plan.side_files.items()
        }

    def measurement(self, row: dict[str, Any]) -> None:
        _append(self._m, row, self.keys, self.measurements)

    def handles(self, event: str | None) -> bool:
        return event in self._side

    def side_row(self, event: str, row: dict[str, Any]) -> None:
        f, keys = self._side[event]
        _append(f, row, keys, self.side.setdefault(event, []))

    def failure(self, row: dict[str, Any]) -> None:
        _append(self._f, row, FAILURE_KEYS, self.failures)

    def close(self) -> None:
        self._m.close()
        self._f.close()
        for f, _keys in self._side.values():
            f.close()


def profiled_worker(
    cmd: list[str], trace: Path, failures: Path, env: dict[str, str] | os._Environ[str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """How to start a worker when this process runs under tracekit's PyTorch-profiler runner (``tracekit capture
    --torch-profiler``): the parent's profiler records only its own process, so the workers' GEMM kernels must be
    recorded in the workers. Returns the command and the environment variables to add.

    By default (``TRACEKIT_TRACE_REPEATS`` a number) the worker records one traced pass per measurement itself
    (``tracekit.collectors.harness.timing.TraceWindow``) into ``trace``'s stem + ``.NNN.json.gz``; with ``all`` it runs
    inside the runner (``python [options] -m tracekit.collectors.torchprof ... -- -m module args``), which
    records everything it does into ``trace`` and writes its own crash lines to ``failures`` (a log file: the
    sweep already records a worker that dies). Unchanged when no profiler runs."""
    env = os.environ if env is None else env
    if not env.get(ENV_TORCH_PROFILER) or "-m" not in cmd:
        return cmd, {}
    try:
        repeats = parse_trace_repeats(env.get(ENV_TRACE_REPEATS))
    except ValueError:
        repeats = DEFAULT_TRACE_REPEATS  # the worker says so in its log
    if repeats is not None:
        return cmd, {ENV_TRACE_SEGMENTS: str(trace).removesuffix(".json.gz")}
    i = cmd.index("-m")
    ops = worker_ops(
        env.get(ENV_TORCH_OPS) or "ranges"
    )  # its GEMMs are in tracekit ranges that name the shape
    runner = ["-m", "tracekit.collectors.torchprof", "--out", str(trace), "--failures", str(failures)]
    runner += ["--ops", ops, "--"]
    return [*cmd[:i], *runner, *cmd[i:]], {}


class _LineReader:
    """Reads complete JSON lines appended to a file by another process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pos = 0
        self._buf = ""

    def read(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("r", encoding="utf-8") as f:
                f.seek(self._pos)
                chunk = f.read()
                self._pos = f.tell()
        except FileNotFoundError:
            return []
        self._buf += chunk
        *lines, self._buf = self._buf.split("\n")
        out = []
        for line in lines:
            if line.strip():
                with contextlib.suppress(json.JSONDecodeError):
                    out.append(json.loads(line))
        return out


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        with contextlib.suppress(OSError):
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _tail(path: Path, limit: int = 20000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode("utf-8", errors="replace")


class _BackendRun:
    """All cases of one backend, restarting the worker after a crash, a poisoned context or a timeout."""

    def __init__(
        self,
        plan: SweepPlan,
        run: Run,
        sink: _Sink,
        backend: str,
        emit: Callable[[SweepEvent], None],
        environment: dict[str, Any],
    ) -> None:
        self.plan, self.run, self.sink, self.backend, self.emit = plan, run, sink, backend, emit
        self.environment = environment
        # a plan may measure each backend at its own cases (``bench gemm --shapes-from``: a backend runs the
        # shapes of its dtype only)
        cases_for = getattr(plan, "cases_for", None)
        self.remaining: list[Case] = list(cases_for(backend) if cases_for else plan.cases)
        self.current: Case | None = None
        self.results: dict[Case, str] = {}

    def failure(self, case: Case, kind: str, error_type: str, message: str, tb: str) -> None:
        """Record a failure the worker could not (it was killed or died) and close its case."""
        row = F.failure_record(
            backend=self.backend,
            op=None,
            m=case[0],
            n=case[1],
            k=case[2],
            kind=kind,
            error_type=error_type,
            message=message,
            traceback=tb,
            device_name=self.environment.get("gpu_name"),
            compute_capability=self.environment.get("compute_capability"),
        )
        self.sink.failure(row)
        self.emit(SweepEvent("failure", self.backend, case, row))
        self.results[case] = kind
        self.finish(case)

    def finish(self, case: Case) -> None:
        if case not in self.remaining:
            return
        self.remaining.remove(case)
        data: dict[str, Any] = {"status": self.results.get(case) or F.CRASHED}
        for row in reversed(self.sink.measurements):
            if row.get("backend") == self.backend and tuple(self.plan.case_of(row)) == tuple(case):
                data["tflops"] = row.get("tflops")
                data["time_us"] = row.get("time_us")
                break
        self.emit(SweepEvent("shape_done", self.backend, case, data))

    def handle(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        case = tuple(event["shape"]) if event.get("shape") else None
        if kind == "start":
            self.current = case
        elif kind == "measurement":
            self.sink.measurement(event["row"])
            if case is not None:
                self.results[case] = event["row"].get("status") or "ok"
        elif self.sink.handles(kind):
            self.sink.side_row(kind, event["row"])  # type: ignore[arg-type]
        elif kind == "failure":
            self.sink.failure(event["row"])
            self.emit(SweepEvent("failure", self.backend, case, dict(event["row"])))
            if case is not None and case not in self.results:
                self.results[case] = event["row"].get("kind")
        elif kind in ("done", "poisoned") and case is not None:
            self.finish(case)
            self.current = None

    def attempt(self, n: int) -> None:
        """One worker over the remaining cases; records how it ended when it did not finish them."""
        logs = self.run.raw_dir / LOG_DIR
        logs.mkdir(parents=True, exist_ok=True)
        safe = slug(self.backend, lower=False, empty="backend")
        events_path, stderr_path = logs / f"{safe}.{n}.jsonl", logs / f"{safe}.{n}.stderr.txt"
        reader = _LineReader(events_path)
        self.current, self.results = None, {}
        timeout = self.plan.timeout
        with stderr_path.open("wb") as ferr:
            cmd, extra_env = profiled_worker(
                self.plan.worker_cmd(self.backend, self.remaining, events_path),
                self.run.raw_dir / f"torch_trace.{safe}.{n}.json.gz",
                logs / f"{safe}.{n}.torchprof-failures.jsonl",
            )
            proc = subprocess.Popen(
                cmd,
                env={**os.environ, **extra_env} if extra_env else None,
                stdout=subprocess.DEVNULL,
                stderr=ferr,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            last = time.monotonic()
            try:
                while True:
                    rc = proc.poll()
                    events = reader.read()
                    if events:
                        last = time.monotonic()
                    for event in events:
                        self.handle(event)
                    if rc is not None:
                        break
                    if time.monotonic() - last > timeout:
                        _kill(proc)
                        for event in reader.read():  # anything written just before the kill
                            self.handle(event)
                        victim = (
                            self.current if self.current is not None else next(iter(self.remaining), None)
                        )
                        if victim is not None:
                            m, nn, k = victim[:3]
                            message = (
                                f"worker gave no sign of progress for {timeout:g} s on {m}x{nn}x{k}; killed"
                            )
                            self.failure(victim, F.TIMEOUT, "tracekit.Timeout", message, _tail(stderr_path))
                        return
                    time.sleep(0.05)
            except BaseException:
                _kill(proc)
                raise
        if not self.remaining or (rc == EXIT_POISONED and self.current is None):
            return  # done, or the worker recorded the fault itself: a fresh one takes the rest
        tail = _tail(stderr_path)
        victim = self.current if self.current is not None else self.remaining[0]
        where = "x".join(str(d) for d in victim[:3])
        sig = F.signal_name(rc)
        if sig is not None:
            message, etype = f"worker died by {sig} on {where}", sig
        else:
            message, etype = f"worker exited with code {rc} on {where} without a result", f"exit {rc}"
        self.failure(victim, F.CRASHED, etype, message + (f"\n{tail.strip()}" if tail.strip() else ""), tail)

    def all(self) -> None:
        n = 0
        while self.remaining:
            n += 1
            self.attempt(n)


def run_sweep(
    path: Path | str,
    plan: SweepPlan,
    *,
    on_event: Callable[[SweepEvent], None] | None = None,
    command: list[str] | None = None,
    exist_ok: bool = False,
    environment: dict[str, Any] | None = None,
) -> SweepResult:
    """Run every backend over every case of ``plan`` into a new run at ``path``; failures are data, not
    exceptions.

    ``environment`` is a fingerprint already taken (:func:`take_fingerprint`, as ``tracekit bench`` does for its
    GPU check); without it the sweep takes one first.

    Returns the run with its rows. On KeyboardInterrupt or an unexpected error the run is marked incomplete
    (what was measured stays in raw/) and the exception propagates.
    """
    emit = on_event or (lambda _e: None)
    run = Run.create(
        path,
        command=command or [sys.executable, "-m", "tracekit", *plan.tool.split()[1:]],
        capture=plan.manifest(),
        status=STATUS_CAPTURING,
        exist_ok=exist_ok,
    )
    plan.prepare_run(run)
    sink = _Sink(run, plan)
    try:
        fingerprint = run.raw_dir / LOG_DIR / "fingerprint.jsonl"
        if environment is None:
            run.log("fingerprint", "reading the environment in a worker")
            started = time.monotonic()
            environment = take_fingerprint(plan.python, plan.device, fingerprint)
            run.log("fingerprint", f"environment read in {time.monotonic() - started:.1f} s")
        else:  # read before the run existed (the GPU check); keep the worker's line with the run's logs
            run.log("fingerprint", "environment read by the GPU check before the run")
            fingerprint.parent.mkdir(parents=True, exist_ok=True)
            fingerprint.write_text(json.dumps({"event": "fingerprint", "environment": environment}) + "\n")
        run.set_environment(environment)
        run.save()
        emit(SweepEvent("sweep_started", data={"backends": list(plan.backends), "shapes": list(plan.cases)}))
        for backend in plan.backends:
            run.log("backend", f"running {backend}", backend=backend)
            emit(SweepEvent("backend_started", backend, data={"shapes": len(plan.cases)}))
            started = time.monotonic()
            _BackendRun(plan, run, sink, backend, emit, environment).all()
            took = time.monotonic() - started
            run.log("backend", f"{backend} done in {took:.1f} s", backend=backend, wall_s=round(took, 3))
            emit(SweepEvent("backend_done", backend))
    except BaseException as exc:
        sink.close()
        why = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
        run.mark(STATUS_INCOMPLETE, why)
        emit(SweepEvent("sweep_done", data={"status": STATUS_INCOMPLETE}))
        raise
    sink.close()
    files = [(plan.measurements_file, None), (FAILURES_FILE, "failures")]
    files += [(name, None) for name, _keys in plan.side_files.values()]
    for name, kind in files:
        p = run.raw_dir / name
        if p.exists():
            run.add_source({"path": run.relative(p), "kind": kind or name.split(".")[0], "tool": plan.tool})
    run.mark(STATUS_COMPLETE)
    emit(SweepEvent("sweep_done", data={"status": STATUS_COMPLETE}))
    return SweepResult(run, sink.measurements, sink.failures, STATUS_COMPLETE)
