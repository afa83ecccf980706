"""The GEMM sweep behind ``tracekit bench gemm``: backends x shapes, each backend in its own worker process.

:func:`run_sweep` creates a run directory (status ``capturing``), fingerprints the environment in a worker
(unless given the fingerprint ``tracekit bench`` took for its GPU check),
then runs one worker per backend (``python -m tracekit.collectors.worker``) and appends what it reports to
``raw/measurements.jsonl`` and ``raw/failures.jsonl`` as it arrives. A worker that dies by a signal is recorded
``crashed`` with the signal name for the shape it was on; one silent for more than ``timeout`` seconds on a
shape is killed and recorded ``timeout``; either way a fresh worker takes the remaining shapes. The run is
marked ``complete`` at the end, or ``incomplete`` with the reason on Ctrl-C or an error; what was measured stays.

Collectors never draw: progress goes to the ``on_event`` callback as :class:`SweepEvent` objects.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tracekit.collectors import failures as F
from tracekit.collectors.failures import FAILURE_KEYS
from tracekit.collectors.torchprof import (
    DEFAULT_TRACE_REPEATS,
    ENV_TORCH_PROFILER,
    ENV_TRACE_REPEATS,
    ENV_TRACE_SEGMENTS,
    parse_trace_repeats,
)
from tracekit.collectors.worker import EXIT_POISONED, MEASUREMENT_KEYS
from tracekit.errors import BadInputError
from tracekit.records import Failure, jsonl_line, record_for
from tracekit.run import STATUS_CAPTURING, STATUS_COMPLETE, STATUS_INCOMPLETE, Run

__all__ = [
    "FAILURE_KEYS",
    "GLM5_SHAPES",
    "MEASUREMENT_KEYS",
    "SHAPE_SETS",
    "SweepEvent",
    "SweepResult",
    "SweepSettings",
    "parse_shapes",
    "run_sweep",
]

GLM5_SHAPES: tuple[tuple[int, int, int], ...] = tuple(
    (m, n, k) for m in (16, 64, 256, 512, 1024, 4096) for (n, k) in ((768, 6144), (2048, 6144))
)
"""GLM-5's dense projections: M (tokens) in 16..4096 against (N, K) = (768, 6144) and (2048, 6144)."""

SHAPE_SETS: dict[str, tuple[tuple[int, int, int], ...]] = {"glm5": GLM5_SHAPES}

MEASUREMENTS_FILE = "measurements.jsonl"
FAILURES_FILE = "failures.jsonl"
LOG_DIR = "logs"


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``glm5`` or ``MxNxK,MxNxK,...`` into (M, N, K) tuples; BadInputError says what is wrong."""
    text = (text or "").strip()
    if text.lower() in SHAPE_SETS:
        return list(SHAPE_SETS[text.lower()])
    shapes = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        if item.lower() in SHAPE_SETS:
            shapes.extend(SHAPE_SETS[item.lower()])
            continue
        parts = item.lower().split("x")
        try:
            m, n, k = (int(p) for p in parts)
        except ValueError:
            raise BadInputError(
                f"shape {item!r} is not MxNxK",
                f"write shapes like 1024x2048x6144, or one of {', '.join(SHAPE_SETS)}",
            ) from None
        if min(m, n, k) <= 0:
            raise BadInputError(f"shape {item!r} has a non-positive dimension", "M, N and K must be >= 1")
        shapes.append((m, n, k))
    if not shapes:
        raise BadInputError("no shapes given", f"use --shapes {' | '.join(SHAPE_SETS)} or MxNxK,...")
    return shapes


@dataclass
class SweepSettings:
    """What to run and how; saved as the run manifest's ``capture``."""

    backends: list[str]
    shapes: list[tuple[int, int, int]]
    warmup: int = 10
    repeats: int = 25
    timeout: float = 300.0
    timing: str = "auto"
    device: int = 0
    seed: int = 0
    python: str = field(default_factory=lambda: sys.executable)

    tool: str = field(default="tracekit bench gemm", init=False, repr=False)
    measurements_file: str = field(default="measurements.jsonl", init=False, repr=False)
    measurement_keys: tuple[str, ...] = field(default=MEASUREMENT_KEYS, init=False, repr=False)
    side_files: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict, init=False, repr=False)
    """Worker events other than ``measurement`` / ``failure`` and where their rows go (event -> (file, keys))."""

    def manifest(self) -> dict[str, Any]:
        d = asdict(self)
        for internal in ("measurements_file", "measurement_keys", "side_files"):
            d.pop(internal, None)
        d["shapes"] = [f"{m}x{n}x{k}" for m, n, k in self.shapes]
        return d

    # The sweep driver speaks of cases: tuples whose first three items are (M, N, K), the rest is the worker's.
    @property
    def cases(self) -> list[tuple[int, ...]]:
        return list(self.shapes)

    def case_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        """The case a measurement row belongs to."""
        return (row.get("m"), row.get("n"), row.get("k"))

    def worker_cmd(self, backend: str, cases: Iterable[tuple[int, ...]], out: Path) -> list[str]:
        return _worker_cmd(self, backend, cases, out)  # type: ignore[arg-type]


@dataclass
class SweepEvent:
    """Something the sweep did, for a progress display.

    ``kind``: ``sweep_started`` (data: backends, shapes), ``backend_started``, ``shape_done`` (data: status = ok,
    wrong or a failure kind; tflops when measured), ``failure`` (data: the failure row), ``backend_done``,
    ``sweep_done`` (data: status).
    """

    kind: str
    backend: str | None = None
    shape: tuple[int, int, int] | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class SweepResult:
    run: Run
    measurements: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    status: str
    reason: str | None = None


class _Sink:
    """Appends rows to the run's raw JSONL files and keeps them for the result."""

    def __init__(
        self,
        run: Run,
        measurements_file: str = MEASUREMENTS_FILE,
        measurement_keys: tuple[str, ...] = MEASUREMENT_KEYS,
        side_files: dict[str, tuple[str, tuple[str, ...]]] | None = None,
    ) -> None:
        self.run = run
        self.keys = measurement_keys
        self.measurements: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self.side: dict[str, list[dict[str, Any]]] = {}
        self._m = open(run.raw_dir / measurements_file, "a", encoding="utf-8")  # noqa: SIM115
        self._f = open(run.raw_dir / FAILURES_FILE, "a", encoding="utf-8")  # noqa: SIM115
        self._side = {
            event: (open(run.raw_dir / name, "a", encoding="utf-8"), keys)  # noqa: SIM115
            for event, (name, keys) in (side_files or {}).items()
        }

    def measurement(self, row: dict[str, Any]) -> None:
        row = {k: row.get(k) for k in self.keys}
        self.measurements.append(row)
        self._m.write(jsonl_line(record_for(self.keys), row))
        self._m.flush()

    def handles(self, event: str | None) -> bool:
        return event in self._side

    def side_row(self, event: str, row: dict[str, Any]) -> None:
        f, keys = self._side[event]
        row = {k: row.get(k) for k in keys}
        self.side.setdefault(event, []).append(row)
        f.write(jsonl_line(record_for(keys), row))
        f.flush()

    def failure(self, row: dict[str, Any]) -> None:
        row = {k: row.get(k) for k in FAILURE_KEYS}
        self.failures.append(row)
        self._f.write(jsonl_line(Failure, row))
        self._f.flush()

    def close(self) -> None:
        self._m.close()
        self._f.close()
        for f, _keys in self._side.values():
            f.close()


def _worker_cmd(
    settings: SweepSettings, backend: str, shapes: Iterable[tuple[int, int, int]], out: Path
) -> list[str]:
    return [
        settings.python,
        "-X",
        "faulthandler",
        "-m",
        "tracekit.collectors.worker",
        "--backend",
        backend,
        "--shapes",
        ",".join(f"{m}x{n}x{k}" for m, n, k in shapes),
        "--out",
        str(out),
        "--warmup",
        str(settings.warmup),
        "--repeats",
        str(settings.repeats),
        "--timing",
        settings.timing,
        "--device",
        str(settings.device),
        "--seed",
        str(settings.seed),
    ]


def profiled_worker(
    cmd: list[str], trace: Path, failures: Path, env: dict[str, str] | os._Environ[str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """How to start a worker when this process runs under tracekit's PyTorch-profiler runner (``tracekit capture
    --torch-profiler``): the parent's profiler records only its own process, so the workers' GEMM kernels must be
    recorded in the workers. Returns the command and the environment variables to add.

    By default (``TRACEKIT_TRACE_REPEATS`` a number) the worker records one traced pass per measurement itself
    (``tracekit.collectors.worker.TraceWindow``) into ``trace``'s stem + ``.NNN.json.gz``; with ``all`` it runs
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
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
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


def _run_backend(
    settings: SweepSettings,
    run: Run,
    sink: _Sink,
    backend: str,
    emit: Callable[[SweepEvent], None],
    environment: dict[str, Any],
) -> None:
    """All shapes of one backend, restarting the worker after a crash, a poisoned context or a timeout."""
    remaining = list(settings.cases)
    attempt = 0
    logs = run.raw_dir / LOG_DIR
    logs.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in backend)
    while remaining:
        attempt += 1
        events_path = logs / f"{safe}.{attempt}.jsonl"
        stderr_path = logs / f"{safe}.{attempt}.stderr.txt"
        reader = _LineReader(events_path)
        current: tuple[int, int, int] | None = None
        had_result: dict[tuple[int, int, int], str] = {}
        with stderr_path.open("wb") as ferr:
            cmd, extra_env = profiled_worker(
                settings.worker_cmd(backend, remaining, events_path),
                run.raw_dir / f"torch_trace.{safe}.{attempt}.json.gz",
                logs / f"{safe}.{attempt}.torchprof-failures.jsonl",
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

            def handle(event: dict[str, Any], had_result: dict[Any, str] = had_result) -> None:
                nonlocal current
                kind = event.get("event")
                shape = tuple(event["shape"]) if event.get("shape") else None
                if kind == "start":
                    current = shape  # type: ignore[assignment]
                elif kind == "measurement":
                    sink.measurement(event["row"])
                    if shape is not None:
                        had_result[shape] = event["row"].get("status") or "ok"  # type: ignore[index]
                elif sink.handles(kind):
                    sink.side_row(kind, event["row"])  # type: ignore[arg-type]
                elif kind == "failure":
                    sink.failure(event["row"])
                    emit(SweepEvent("failure", backend, shape, dict(event["row"])))  # type: ignore[arg-type]
                    if shape is not None and shape not in had_result:
                        had_result[shape] = event["row"].get("kind")  # type: ignore[index]
                elif kind in ("done", "poisoned") and shape is not None:
                    _finish_shape(remaining, shape, had_result, emit, backend, sink, settings)  # type: ignore[arg-type]
                    current = None

            try:
                while True:
                    rc = proc.poll()
                    events = reader.read()
                    if events:
                        last = time.monotonic()
                    for event in events:
                        handle(event)
                    if rc is not None:
                        break
                    if time.monotonic() - last > settings.timeout:
                        _kill(proc)
                        for event in reader.read():  # anything written just before the kill
                            handle(event)
                        victim = current
                        if victim is None and remaining:
                            victim = remaining[0]
                        if victim is not None:
                            row = F.failure_record(
                                backend=backend,
                                op=None,
                                m=victim[0],
                                n=victim[1],
                                k=victim[2],
                                kind=F.TIMEOUT,
                                error_type="tracekit.Timeout",
                                message=f"worker gave no sign of progress for {settings.timeout:g} s on "
                                f"{victim[0]}x{victim[1]}x{victim[2]}; killed",
                                traceback=_tail(stderr_path),
                                device_name=environment.get("gpu_name"),
                                compute_capability=environment.get("compute_capability"),
                            )
                            sink.failure(row)
                            emit(SweepEvent("failure", backend, victim, row))
                            _finish_shape(
                                remaining, victim, {victim: F.TIMEOUT}, emit, backend, sink, settings
                            )
                        rc = None
                        break
                    time.sleep(0.05)
            except BaseException:
                _kill(proc)
                raise
        if rc is None:  # killed for a timeout; go on with what is left
            continue
        if not remaining:
            break
        if rc == EXIT_POISONED and current is None:
            continue  # the worker recorded the fault itself; a fresh one takes the rest
        ferr_tail = _tail(stderr_path)
        victim = current if current is not None else remaining[0]
        sig = F.signal_name(rc)
        if sig is not None:
            message = f"worker died by {sig} on {victim[0]}x{victim[1]}x{victim[2]}"
            etype = sig
        else:
            message = f"worker exited with code {rc} on {victim[0]}x{victim[1]}x{victim[2]} without a result"
            etype = f"exit {rc}"
        row = F.failure_record(
            backend=backend,
            op=None,
            m=victim[0],
            n=victim[1],
            k=victim[2],
            kind=F.CRASHED,
            error_type=etype,
            message=message + (f"\n{ferr_tail.strip()}" if ferr_tail.strip() else ""),
            traceback=ferr_tail,
            device_name=environment.get("gpu_name"),
            compute_capability=environment.get("compute_capability"),
        )
        sink.failure(row)
        emit(SweepEvent("failure", backend, victim, row))
        _finish_shape(remaining, victim, {victim: F.CRASHED}, emit, backend, sink, settings)


def _finish_shape(
    remaining: list[tuple[int, ...]],
    shape: tuple[int, ...],
    results: dict[tuple[int, ...], str],
    emit: Callable[[SweepEvent], None],
    backend: str,
    sink: _Sink,
    settings: Any = None,
) -> None:
    if shape not in remaining:
        return
    remaining.remove(shape)
    status = results.get(shape) or F.CRASHED
    data: dict[str, Any] = {"status": status}
    for row in reversed(sink.measurements):
        case = settings.case_of(row) if settings is not None else (row.get("m"), row.get("n"), row.get("k"))
        if row.get("backend") == backend and tuple(case) == tuple(shape):
            data["tflops"] = row.get("tflops")
            data["time_us"] = row.get("time_us")
            break
    emit(SweepEvent("shape_done", backend, shape, data))


def run_sweep(
    path: Path | str,
    settings: SweepSettings,
    *,
    on_event: Callable[[SweepEvent], None] | None = None,
    command: list[str] | None = None,
    exist_ok: bool = False,
    environment: dict[str, Any] | None = None,
) -> SweepResult:
    """Run every backend over every shape into a new run at ``path``; failures are data, not exceptions.

    ``environment`` is a fingerprint already taken (:func:`take_fingerprint`, as ``tracekit bench`` does for its
    GPU check); without it the sweep takes one first.

    Returns the run with its rows. On KeyboardInterrupt or an unexpected error the run is marked incomplete
    (what was measured stays in raw/) and the exception propagates.
    """
    emit = on_event or (lambda _e: None)
    run = Run.create(
        path,
        command=command or [sys.executable, "-m", "tracekit", *settings.tool.split()[1:]],
        capture=settings.manifest(),
        status=STATUS_CAPTURING,
        exist_ok=exist_ok,
    )
    prepare = getattr(settings, "prepare_run", None)
    if prepare is not None:  # e.g. the MoE sweep writes its routing cases into raw/ for the workers
        prepare(run)
    sink = _Sink(run, settings.measurements_file, settings.measurement_keys, settings.side_files)
    try:
        fingerprint = run.raw_dir / LOG_DIR / "fingerprint.jsonl"
        if environment is None:
            run.log("fingerprint", "reading the environment in a worker")
            started = time.monotonic()
            environment = take_fingerprint(settings.python, settings.device, fingerprint)
            run.log("fingerprint", f"environment read in {time.monotonic() - started:.1f} s")
        else:  # read before the run existed (the GPU check); keep the worker's line with the run's logs
            run.log("fingerprint", "environment read by the GPU check before the run")
            fingerprint.parent.mkdir(parents=True, exist_ok=True)
            fingerprint.write_text(json.dumps({"event": "fingerprint", "environment": environment}) + "\n")
        run.manifest["environment"] = environment
        run.save()
        emit(
            SweepEvent(
                "sweep_started", data={"backends": list(settings.backends), "shapes": list(settings.cases)}
            )
        )
        for backend in settings.backends:
            run.log("backend", f"running {backend}", backend=backend)
            emit(SweepEvent("backend_started", backend, data={"shapes": len(settings.cases)}))
            started = time.monotonic()
            _run_backend(settings, run, sink, backend, emit, environment)
            took = time.monotonic() - started
            run.log("backend", f"{backend} done in {took:.1f} s", backend=backend, wall_s=round(took, 3))
            emit(SweepEvent("backend_done", backend))
    except KeyboardInterrupt:
        sink.close()
        run.mark(STATUS_INCOMPLETE, "interrupted (Ctrl-C)")
        emit(SweepEvent("sweep_done", data={"status": STATUS_INCOMPLETE}))
        raise
    except BaseException as exc:
        sink.close()
        run.mark(STATUS_INCOMPLETE, f"{type(exc).__name__}: {exc}")
        emit(SweepEvent("sweep_done", data={"status": STATUS_INCOMPLETE}))
        raise
    sink.close()
    _add_sources(run, settings)
    run.mark(STATUS_COMPLETE)
    emit(SweepEvent("sweep_done", data={"status": STATUS_COMPLETE}))
    return SweepResult(run, sink.measurements, sink.failures, STATUS_COMPLETE)


def _add_sources(run: Run, settings: Any = None) -> None:
    tool = getattr(settings, "tool", "tracekit bench gemm")
    files = [(getattr(settings, "measurements_file", MEASUREMENTS_FILE), None), (FAILURES_FILE, "failures")]
    files += [(name, None) for name, _keys in (getattr(settings, "side_files", None) or {}).values()]
    for name, kind in files:
        p = run.raw_dir / name
        if p.exists():
            run.add_source({"path": run.relative(p), "kind": kind or name.split(".")[0], "tool": tool})


def read_rows(run: Run) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The measurement and failure rows of a bench run (for ``--json`` and tests)."""

    def load(name: str) -> list[dict[str, Any]]:
        p = run.raw_dir / name
        if not p.exists():
            return []
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]

    return load(MEASUREMENTS_FILE), load(FAILURES_FILE)
