"""The one sweep harness behind ``tracekit bench gemm`` and ``tracekit bench moe``: settings, the worker process,
failure records and logs, shared by every benchmark family.

Two sides, two small protocols:

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
  the remaining cases. Timing is tracekit.collectors.timing's.

Collectors never draw: progress goes to the ``on_event`` callback as :class:`SweepEvent` objects.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tracekit.collectors import failures as F
from tracekit.collectors.failures import FAILURE_KEYS
from tracekit.collectors.torchprof import (
    DEFAULT_TRACE_REPEATS,
    ENV_TORCH_PROFILER,
    ENV_TRACE_REPEATS,
    ENV_TRACE_SEGMENTS,
    parse_trace_repeats,
)
from tracekit.run import STATUS_CAPTURING, STATUS_COMPLETE, STATUS_INCOMPLETE, Run

FAILURES_FILE = "failures.jsonl"
LOG_DIR = "logs"
EXIT_POISONED = 3
"""A worker's exit status after a fault that poisons the CUDA context (the fault is already recorded)."""

Case = tuple[int, ...]
"""A case as the sweep sees it: (M, N, K) first (named in failure rows and messages), then the family's own."""


# --- settings --------------------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class Options:
    """How every family runs its cases: warm-up and timed repeats, the per-case timeout of a worker, the timing
    mode (tracekit.collectors.timing), the CUDA device, the seed of the inputs and the worker's interpreter."""

    warmup: int = 10
    repeats: int = 25
    timeout: float = 300.0
    timing: str = "auto"
    device: int = 0
    seed: int = 0
    python: str = field(default_factory=lambda: sys.executable)

    def worker_cmd_for(self, module: str, backend: str, case_args: list[str], out: Path) -> list[str]:
        """``python -X faulthandler -m MODULE --backend B <case_args> --out OUT <the options>``."""
        head = [self.python, "-X", "faulthandler", "-m", module, "--backend", backend]
        return [*head, *case_args, *self.worker_args(out)]

    def worker_args(self, out: Path) -> list[str]:
        """The options every worker takes (:func:`add_worker_options` reads them)."""
        return [
            "--out",
            str(out),
            "--warmup",
            str(self.warmup),
            "--repeats",
            str(self.repeats),
            "--timing",
            self.timing,
            "--device",
            str(self.device),
            "--seed",
            str(self.seed),
        ]


def add_worker_options(parser: argparse.ArgumentParser) -> None:
    """The worker side of :meth:`Options.worker_args`."""
    parser.add_argument("--out", required=True)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--timing", choices=("auto", "graph", "events"), default="auto")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)


class SweepPlan(Protocol):
    """What :func:`run_sweep` reads of a family's settings (``bench.SweepSettings``, ``moe.MoeSettings``)."""

    backends: list[str]
    timeout: float
    device: int
    python: str
    tool: str
    measurements_file: str
    """The raw file of the family's measurement rows (``measurements.jsonl``, ``moe.jsonl``)."""
    measurement_keys: tuple[str, ...]
    side_files: dict[str, tuple[str, tuple[str, ...]]]
    """Worker events other than ``measurement`` / ``failure`` and where their rows go (event -> (file, keys))."""

    @property
    def cases(self) -> list[Case]: ...

    def manifest(self) -> dict[str, Any]:
        """The run manifest's ``capture``."""
        ...

    def case_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        """The case a measurement row belongs to."""
        ...

    def worker_cmd(self, backend: str, cases: Iterable[Case], out: Path) -> list[str]:
        """The command of a worker running ``backend`` over ``cases``, writing events to ``out``."""
        ...

    def prepare_run(self, run: Run) -> None:
        """Anything the workers read from the new run before they start (the MoE cases file)."""
        ...


# --- the worker's side -----------------------------------------------------------------------------------------
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
    from tracekit.collectors import timing
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


# --- the sweep's side ------------------------------------------------------------------------------------------
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
    f.write(json.dumps(row, allow_nan=False, default=str) + "\n")
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
    (``tracekit.collectors.timing.TraceWindow``) into ``trace``'s stem + ``.NNN.json.gz``; with ``all`` it runs
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
    runner = ["-m", "tracekit.collectors.torchprof", "--out", str(trace), "--failures", str(failures), "--"]
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


def take_fingerprint(python: str, device: int, out: Path, timeout: float = 120.0) -> dict[str, Any]:
    """The environment fingerprint (``tracekit.collectors.env.fingerprint``), taken in a worker so this process
    never imports torch or initialises CUDA; the worker's event line is left in ``out``. Never raises: what went
    wrong is the ``fingerprint_error`` field."""
    from tracekit.collectors.env import _host, library_versions

    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        python,
        "-m",
        "tracekit.collectors.worker",
        "--fingerprint",
        "--out",
        str(out),
        "--device",
        str(device),
    ]
    err = out.with_suffix(".stderr.txt")
    try:
        with err.open("wb") as ferr:
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=ferr, timeout=timeout, check=False)
    except (subprocess.TimeoutExpired, OSError) as exc:
        return {
            **_host(),
            "versions": library_versions(),
            "fingerprint_error": f"{type(exc).__name__}: {exc}",
        }
    for event in _LineReader(out).read():
        if event.get("event") == "fingerprint":
            return event.get("environment") or {}
    return {**_host(), "versions": library_versions(), "fingerprint_error": _tail(err, 4000) or "no output"}


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
        self.remaining: list[Case] = list(plan.cases)
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
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.backend)
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
        run.manifest["environment"] = environment
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
