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
is kept. Ctrl-C raises ``CaptureInterrupted`` (a KeyboardInterrupt carrying the run) after the run is marked.

Imports only the standard library and tracekit core: captures run on GPU machines without polars or rich.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from tracekit.errors import BadInputError, IncompleteError, MissingToolError, StorageError
from tracekit.naming import NCU_FILTER
from tracekit.run import STATUS_CAPTURING, STATUS_COMPLETE, STATUS_INCOMPLETE, Run, new_run_name

from . import tools
from .crash import (
    ENV_BREADCRUMB_DIR,
    OutputSplitter,
    crash_record,
    read_breadcrumbs,
    read_text,
)
from .ranks import RANK_TOKEN, RankLaunch, rank_files
from .torchprof import (
    DEFAULT_TRACE_REPEATS,
    ENV_TORCH_OPS,
    ENV_TRACE_REPEATS,
    OPS_CHOICES,
    append_jsonl,
)

ENV_RUN_DIR = "TRACEKIT_RUN_DIR"
ENV_CAPTURE_TOOL = "TRACEKIT_CAPTURE_TOOL"
TORCH_TRACE = "torch_trace.json.gz"
FAILURES_FILE = "failures.jsonl"
SITE_DIR = Path(__file__).resolve().parent / "site"
TORCHPROF_PY = Path(__file__).resolve().parent / "torchprof.py"

BREADCRUMB_DIR = "breadcrumbs"
"""Each pass's child gets ``TRACEKIT_BREADCRUMB_DIR=<run>/raw/breadcrumbs/<pass>`` (collectors/crash.py)."""
ENV_CRASH_FLUSH = "TRACEKIT_CRASH_FLUSH"
ENV_HANG_DUMP = "TRACEKIT_HANG_DUMP_S"
"""With ``--timeout S``, a Python program prints every thread's stack after a little under S (collectors/site)."""
CRASH_FLUSH_CHOICES = ("none", "profiler-stop")
CRASH_FLUSH_DEFAULT = "profiler-stop"
"""Under nsys, ``profiler-stop`` injects a fatal-signal handler into a Python program that calls
``cuProfilerStop`` (nsys flushes its CUDA buffers on it) before the process dies (collectors/site). Measured on
the H200 (benchmarks/foreign/crash_nsys_probe.py, 50 GEMMs then SIGSEGV or SIGABRT): the timeline kept 52 of 52
kernels with it; without it nsys wrote no kernel table at all. ``none`` turns it off."""

PASS_ORDER = ("nsys", "torch", "ncu", "plain")
"""Passes run in this order: the fast timeline first, ncu's slow replay last."""


@dataclass(frozen=True)
class CaptureEvent:
    """Something a capture reports while it runs: ``kind`` is ``start`` / ``done`` (a phase), ``warning``,
    ``error`` or ``info``; ``phase`` names the pass or step (``nsys``, ``ncu``, ``setup`` ...)."""

    kind: str
    phase: str
    message: str


class CaptureInterrupted(KeyboardInterrupt):
    """Ctrl-C during a capture, raised after the run was marked incomplete; ``run`` is the kept run."""

    def __init__(self, run: Run) -> None:
        super().__init__(f"capture interrupted; partial run kept at {run.path}")
        self.run = run


@dataclass
class PassResult:
    """How one tool pass ended."""

    tool: str
    argv: list[str]
    exit_code: int | None = None
    wall_s: float = 0.0
    timed_out: bool = False
    interrupted: bool = False
    files: list[str] = field(default_factory=list)
    reason: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "argv": self.argv,
            "exit_code": self.exit_code,
            "wall_s": round(self.wall_s, 3),
            "timed_out": self.timed_out,
            "interrupted": self.interrupted,
            "files": self.files,
            "status": "ok" if self.ok else "incomplete",
            "reason": self.reason,
        }


# --- helpers --------------------------------------------------------------------------------------------------
_PYTHON = re.compile(r"^python[0-9.]*(\.exe)?$")
_PY_OPTS_WITH_ARG = {"-X", "-W", "-Q"}


def python_target(cmd: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """Split ``python [options] script.py args`` / ``python -m mod args`` / ``script.py args`` into
    (interpreter with its options, target for torchprof); ``None`` if CMD is not a Python script or module."""
    if not cmd:
        return None
    first = cmd[0]
    if first.endswith(".py"):
        return [sys.executable], list(cmd)
    if not _PYTHON.match(Path(first).name):
        return None
    interp = [first]
    i = 1
    while i < len(cmd):
        arg = cmd[i]
        if arg == "-m":
            return (interp, list(cmd[i:])) if i + 1 < len(cmd) else None
        if arg == "-c" or arg == "-":
            return None
        if arg.startswith("-"):
            interp.append(arg)
            if arg in _PY_OPTS_WITH_ARG and i + 1 < len(cmd):
                interp.append(cmd[i + 1])
                i += 1
            i += 1
            continue
        return interp, list(cmd[i:])
    return None


def is_python_command(cmd: Sequence[str], cwd: Path | None = None) -> bool:
    """True for ``python ...`` / ``python -m ...`` / ``script.py`` and for a script whose ``#!`` line names
    python: the commands whose crashes the fault handler can name."""
    if not cmd:
        return False
    if _PYTHON.match(Path(cmd[0]).name) or cmd[0].endswith(".py"):
        return True
    path = Path(cmd[0])
    if not path.is_absolute() and os.sep not in cmd[0]:
        found = shutil.which(cmd[0])
        path = Path(found) if found else path
    elif cwd is not None and not path.is_absolute():
        path = cwd / path
    try:
        with path.open("rb") as f:
            first = f.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


_NCU_NVTX_SYNTAX = re.compile(r"(?<!\\)[/,@]")


def ranges_filter(regex: str) -> str:
    """The ``--nvtx-include`` value that profiles the kernels inside the user's own NVTX ranges (default domain,
    push/pop) whose names match ``regex`` anywhere (a search, like Python's ``re.search``). ncu reads ``/``
    (nesting), ``,`` (a list) and ``@`` (domain) as syntax even after ``regex:`` (DEVICE.md), so each of them in
    ``regex`` becomes ``.`` (any character: it still matches itself). Raises BadInputError for a regex that does
    not compile, or an empty one."""
    if not regex.strip():
        raise BadInputError("--ranges needs a regular expression", "e.g. --ranges 'attn|mlp'")
    try:
        re.compile(regex)
    except re.error as exc:
        raise BadInputError(
            f"--ranges {regex!r} is not a regular expression ({exc})",
            "check the quoting, e.g. --ranges 'gemm.*'",
        ) from None
    safe = _NCU_NVTX_SYNTAX.sub(".", regex)
    return f"regex:.*(?:{safe}).*/"


def _label(cmd: Sequence[str]) -> str:
    target = python_target(cmd)
    word = (target[1][1] if target[1][0] == "-m" else target[1][0]) if target else cmd[0]
    return Path(word).stem.rsplit(".", 1)[-1] or "run"


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"killed by {_signal_name(-code)}"
    return f"exit status {code}"


def _fingerprint() -> dict[str, Any]:
    """The environment fingerprint (``tracekit.collectors.env.fingerprint``), or a minimal one if that module is
    missing or fails: a capture must not die for want of a GPU name."""
    fallback: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    try:
        from tracekit.collectors.env import fingerprint
    except ImportError as exc:
        fallback["fingerprint_error"] = f"tracekit.collectors.env unavailable: {exc}"
        return fallback
    try:
        result = fingerprint()
    except Exception as exc:  # a fingerprint is evidence, not a prerequisite
        fallback["fingerprint_error"] = f"{type(exc).__name__}: {exc}"
        return fallback
    return dict(result) if isinstance(result, dict) else {**fallback, "fingerprint": result}


def _reserve_run_dir(out: Path | str | None, runs_dir: Path | str, label: str) -> Path:
    """A fresh, empty run folder. With ``out`` it must be new or empty; otherwise a unique name under
    ``runs_dir``, claimed with an exclusive mkdir so two captures at once never share one."""
    if out is not None:
        path = Path(out)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise BadInputError(
                f"{path} already exists and is not empty", "choose another -o path or remove it"
            )
        path.mkdir(parents=True, exist_ok=True)
        return path
    base = Path(runs_dir)
    base.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        path = base / new_run_name(label)
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise BadInputError(f"could not find a free run name under {base}", "clean up the runs folder")


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return 0


def _default_output(stream: str, data: bytes) -> None:
    target: BinaryIO = sys.stdout.buffer if stream == "stdout" else sys.stderr.buffer
    try:
        target.write(data)
        target.flush()
    except (OSError, ValueError):
        pass


# --- running one pass -------------------------------------------------------------------------------------------
class _Child:
    """A command in its own process group, its two output streams pumped to the log and to ``on_output``."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        on_output: Callable[[str, bytes], None],
        cwd: Path | None,
        program: dict[str, Path] | None = None,
        tool: str = "plain",
    ) -> None:
        self.log = log_path.open("ab")
        self.log_error: OSError | None = None
        self.lock = threading.Lock()
        self.on_output = on_output
        # the program's own output, whole, apart from the profiler's lines (raw/program*.stdout / .stderr)
        self.splitter = OutputSplitter(tool)
        self.program = {stream: path.open("ab") for stream, path in (program or {}).items()}
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        except BaseException:  # the command could not start: leave no open files behind
            for f in (self.log, *self.program.values()):
                f.close()
            raise
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.threads = [
            threading.Thread(target=self._pump, args=("stdout", self.proc.stdout), daemon=True),
            threading.Thread(target=self._pump, args=("stderr", self.proc.stderr), daemon=True),
        ]
        for t in self.threads:
            t.start()

    def _pump(self, stream: str, pipe: BinaryIO) -> None:
        fd = pipe.fileno()
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:
                break
            if not data:
                break
            with self.lock:
                if self.log_error is None:
                    try:
                        self.log.write(data)
                        self.log.flush()
                    except OSError as exc:  # disk full: keep draining the pipe, or the child blocks on it
                        self.log_error = exc
                self._program(stream, self.splitter.feed(stream, data))
            with contextlib.suppress(Exception):  # a broken terminal must not stop the capture
                self.on_output(stream, data)

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def wait(self, timeout: float | None) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float) -> int:
        """SIGINT to the group (tools finish their reports), then SIGTERM, then SIGKILL."""
        for sig, wait_s in (
            (signal.SIGINT, grace_s),
            (signal.SIGTERM, min(grace_s, 5.0)),
            (signal.SIGKILL, 10.0),
        ):
            if self.proc.poll() is not None:
                break
            self.signal_group(sig)
            try:
                self.wait(wait_s)
            except KeyboardInterrupt:  # a second Ctrl-C: stop waiting politely
                self.signal_group(signal.SIGKILL)
                self.wait(10.0)
        # stray members of the group (a tool's helper) must not outlive the pass
        self.signal_group(signal.SIGKILL)
        return self.proc.wait()

    def close(self) -> None:
        for t in self.threads:
            t.join(timeout=5.0)
        # a pipe still held open by a stray grandchild stays open (closing it under a reading thread is unsafe)
        for t, pipe in zip(self.threads, (self.proc.stdout, self.proc.stderr), strict=True):
            if not t.is_alive() and pipe is not None:
                pipe.close()
        with self.lock:
            try:
                self.log.close()
            except OSError as exc:  # the buffered tail could not be written (disk full)
                self.log_error = self.log_error or exc
            for stream, f in self.program.items():
                self._program(stream, self.splitter.flush(stream))
                try:
                    f.close()
                except OSError as exc:
                    self.log_error = self.log_error or exc

    def _program(self, stream: str, data: bytes) -> None:
        """Append the program's own bytes to its output file (called with the lock held)."""
        f = self.program.get(stream)
        if f is None or not data or self.log_error is not None:
            return
        try:
            f.write(data)
            f.flush()
        except OSError as exc:
            self.log_error = exc


def _run_pass(
    result: PassResult,
    env: dict[str, str],
    log_path: Path,
    *,
    timeout: float | None,
    grace_s: float,
    on_output: Callable[[str, bytes], None],
    cwd: Path | None,
    program: dict[str, Path] | None = None,
) -> None:
    start = time.monotonic()
    try:
        child = _Child(result.argv, env, log_path, on_output, cwd, program, result.tool)
    except OSError as exc:
        result.reason = f"{result.tool} pass could not start {result.argv[0]}: {exc}"
        result.error = str(exc)
        return
    try:
        deadline = None if timeout is None else start + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            code = child.wait(0.25 if remaining is None else min(0.25, remaining))
            if code is not None:
                result.exit_code = code
                break
            if deadline is not None and time.monotonic() >= deadline:
                result.timed_out = True
                result.exit_code = child.stop(grace_s)
                break
    except KeyboardInterrupt:
        result.interrupted = True
        result.exit_code = child.stop(grace_s)
    finally:
        child.close()
        result.wall_s = time.monotonic() - start
        if child.log_error is not None and result.reason is None:
            result.reason = (
                f"{result.tool} pass: could not write raw/{log_path.name} "
                f"({child.log_error.strerror or child.log_error}; is the disk full?); the log is cut short"
            )
            result.error = str(child.log_error)


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


def _ncu_problem(log_path: Path) -> str | None:
    """A one-line reason from ncu's own messages in its log, with a fix where one is known."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    if "ERR_NVGPUCTRPERM" in text:
        return (
            "ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM): run as root or load the driver "
            "with NVreg_RestrictProfilingToAdminUsers=0"
        )
    errors = [line.strip() for line in text.splitlines() if line.startswith("==ERROR==")]
    return errors[0] if errors else None


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
    """sections, metrics, nvtx_include, clock_control, launch_count, per_range, extra: the ncu pass's options."""

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
            "use ranges (record_function ranges only) or all (every ATen operator too)",
        )
    if trace_repeats is not None and trace_repeats < 1:
        raise BadInputError(f"--trace-repeats {trace_repeats} must be at least 1", "give 1 or more, or all")
    per_range = max_per_range if max_per_range is not None else tools.max_per_range(base_env)
    if per_range < 1:
        raise BadInputError(f"--max-per-range {per_range} must be at least 1", "give 1 or more")
    ncu_opts = {
        "sections": list(sections),
        "metrics": list(metrics),
        "nvtx_include": nvtx_include,
        "clock_control": clock_control,
        "launch_count": launch_count,
        "per_range": per_range,
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


def _settings(opts: _Options, plan: _Plan, python_cmd: bool) -> dict[str, Any]:
    """Phase 3, record: the capture settings run.json keeps (tools, their versions and options)."""
    ncu_opts = opts.ncu_opts
    settings: dict[str, Any] = {
        "tools": plan.passes,
        "instrument": opts.instrument,
        "python_faulthandler": python_cmd and not opts.env.get("PYTHONFAULTHANDLER"),
        "breadcrumbs": f"raw/{BREADCRUMB_DIR}/<pass>",
        "timeout_s": opts.timeout,
        "cwd": str(opts.cwd or Path.cwd()),
    }
    if plan.ncu:
        settings["ncu"] = {
            **plan.ncu.as_dict(),
            "clock_control": ncu_opts["clock_control"],
            "sections": ncu_opts["sections"],
            "metrics": ncu_opts["metrics"],
            "nvtx_include": ncu_opts["nvtx_include"],
            "ranges": opts.ranges,
            "max_per_range": ncu_opts["per_range"],
            "launch_count": ncu_opts["launch_count"],
            "extra": list(ncu_opts["extra"]),
        }
    if plan.nsys:
        settings["nsys"] = {
            **plan.nsys.as_dict(),
            "trace": tools.NSYS_TRACE,
            "cuda_graph_trace": tools.nsys_graph_trace(opts.nsys_extra),
            "libs": opts.env.get(tools.ENV_NSYS_LIBS),
            "extra": list(opts.nsys_extra),
            "crash_flush": opts.crash_flush if python_cmd else "none",
        }
    if "torch" in plan.passes and plan.python:
        settings["torch_profiler"] = {
            "python": plan.python[0][0],
            "activities": ["cpu", "cuda"],
            "cpu_events": opts.torch_ops,
            "trace_repeats": "all" if opts.trace_repeats is None else opts.trace_repeats,
        }
    if opts.ranks is not None:
        settings["ranks"] = opts.ranks.as_dict()
    return settings


def _run_passes(
    run: Run,
    opts: _Options,
    plan: _Plan,
    python_cmd: bool,
    output: Callable[[str, bytes], None],
    log: Callable[..., None],
) -> list[PassResult]:
    """Phase 4, run the passes: the environment recorded, then one pass per tool, each saved in the manifest as
    it ends. Ctrl-C or a failure marks the run incomplete (what was captured is kept) and raises
    CaptureInterrupted / IncompleteError / the failure itself."""
    run_dir = run.path.absolute()
    raw = run_dir / "raw"
    results: list[PassResult] = []
    try:
        log("start", "setup", f"run folder {run.path}")
        for warning in plan.warnings:
            log("warning", "setup", warning)
        run.manifest["environment"] = _fingerprint()
        run.save()
        log("done", "setup", "environment recorded")
        for tool in plan.passes:
            result = _one_pass(
                tool,
                opts.cmd,
                plan,
                raw,
                run_dir,
                opts.env,
                instrument=opts.instrument,
                timeout=opts.timeout,
                grace_s=opts.grace_s,
                output=output,
                log=log,
                cwd=opts.cwd,
                ranks=opts.ranks,
                torch_ops=opts.torch_ops,
                trace_repeats=opts.trace_repeats,
                nsys_extra=list(opts.nsys_extra),
                python_cmd=python_cmd,
                crash_flush=opts.crash_flush,
                program_stem="program" if len(plan.passes) == 1 else f"program.{tool}",
                ncu_opts=dict(opts.ncu_opts),
            )
            results.append(result)
            run.manifest["capture"]["passes"] = [r.as_dict() for r in results]
            run.save()
            if result.interrupted:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        run.manifest["capture"]["passes"] = [r.as_dict() for r in results]
        where = results[-1].tool if results else "setup"
        said = results[-1].reason if results and results[-1].interrupted else None
        reason = said if said and "interrupted" in said else f"interrupted (Ctrl-C) during the {where} pass"
        log("error", where, reason)
        run.mark(STATUS_INCOMPLETE, reason)
        raise CaptureInterrupted(run) from None
    except BaseException as exc:
        run.manifest["capture"]["passes"] = [r.as_dict() for r in results]
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
    *,
    ncu: bool = False,
    nsys: bool = False,
    torch_profiler: bool = False,
    torch_ops: str = "ranges",
    trace_repeats: int | None = DEFAULT_TRACE_REPEATS,
    instrument: bool = False,
    out: Path | str | None = None,
    runs_dir: Path | str = "runs",
    timeout: float | None = None,
    on_event: Callable[[CaptureEvent], None] | None = None,
    on_output: Callable[[str, bytes], None] | None = None,
    ncu_path: str | os.PathLike[str] | None = None,
    nsys_path: str | os.PathLike[str] | None = None,
    clock_control: str = "none",
    sections: Iterable[str] = tools.DEFAULT_SECTIONS,
    metrics: Iterable[str] = tools.DEFAULT_METRICS,
    nvtx_include: str | None = NCU_FILTER,
    max_per_range: int | None = None,
    launch_count: int | None = None,
    ncu_extra: Sequence[str] = (),
    nsys_extra: Sequence[str] = (),
    grace_s: float = 20.0,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    ranks: RankLaunch | None = None,
    ranges: str | None = None,
    crash_flush: str = CRASH_FLUSH_DEFAULT,
) -> Run:
    """Run ``cmd`` under each chosen tool into a new run folder and return it, ``complete`` or ``incomplete``.

    With ``ranks`` (:func:`tracekit.collectors.ranks.plan_ranks` of ``cmd``), every pass runs the launcher once
    and one profiler per rank inside it, each writing files named with its rank (collectors/ranks.py).

    With no tool chosen: nsys if it is usable here, else the PyTorch profiler for a Python command, else a plain
    run (with a warning). ``torch_ops`` is what the PyTorch profiler records on the CPU side: ``ranges``
    (``record_function`` ranges, enough for the analysis) or ``all`` (every ATen operator too, a larger and slower
    trace). ``trace_repeats`` bounds what the PyTorch profiler records of each measurement of a tracekit
    benchmark inside: a traced pass of that many repeats after its warm-up, a segment file each
    (``tracekit.collectors.worker.TraceWindow``); None records every launch of every worker, and the profiler's
    cost then grows with the benchmark's repeats. ``ncu_extra`` / ``nsys_extra`` go on that tool's command line
    after tracekit's own options (and into run.json). ``timeout`` applies to each pass; ``grace_s`` is how long
    a stopped pass may take to finish writing its report. ``on_output(stream, bytes)`` receives the child's
    output (default: our own stdout/stderr). Raises MissingToolError / BadInputError before creating anything,
    and CaptureInterrupted on Ctrl-C after marking the run."""
    opts = _check_options(
        cmd,
        env=env,
        cwd=cwd,
        ranks=ranks,
        ranges=ranges,
        nvtx_include=nvtx_include,
        crash_flush=crash_flush,
        clock_control=clock_control,
        torch_ops=torch_ops,
        trace_repeats=trace_repeats,
        max_per_range=max_per_range,
        sections=sections,
        metrics=metrics,
        launch_count=launch_count,
        ncu_extra=ncu_extra,
        nsys_extra=nsys_extra,
        instrument=instrument,
        timeout=timeout,
        grace_s=grace_s,
    )
    # phase 2, plan: which passes, with the tools found (raises MissingToolError before anything is created)
    plan = _plan(
        opts.program,
        ncu=ncu,
        nsys=nsys,
        torch_profiler=torch_profiler,
        ncu_path=ncu_path,
        nsys_path=nsys_path,
        env=opts.env,
    )
    _check_instrument(instrument)
    # phase 3, record: the run folder with its settings
    path = _reserve_run_dir(out, runs_dir, _label(opts.program))
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

    # phase 4, run the passes; phase 5, finish
    results = _run_passes(run, opts, plan, python_cmd, on_output or _default_output, log)
    _finish(run, results, log)
    return run


def _one_pass(
    tool: str,
    cmd: list[str],
    plan: _Plan,
    raw: Path,
    run_dir: Path,
    base_env: dict[str, str],
    *,
    instrument: bool,
    timeout: float | None,
    grace_s: float,
    output: Callable[[str, bytes], None],
    log: Callable[..., None],
    cwd: Path | None,
    ncu_opts: dict[str, Any],
    torch_ops: str = "ranges",
    trace_repeats: int | None = DEFAULT_TRACE_REPEATS,
    nsys_extra: Sequence[str] = (),
    ranks: RankLaunch | None = None,
    python_cmd: bool = False,
    crash_flush: str = CRASH_FLUSH_DEFAULT,
    program_stem: str = "program",
) -> PassResult:
    env = dict(base_env)
    # with ranks, each tool wraps one rank's command and names its files raw/<tool>.rank<R>.* (rankwrap.py)
    inner = list(ranks.command) if ranks is not None else cmd
    tag = f".rank{RANK_TOKEN}" if ranks is not None else ""
    env[ENV_RUN_DIR] = str(run_dir)
    env[ENV_CAPTURE_TOOL] = tool
    # the per-range budget belongs to the ncu pass only: elsewhere it would hide launches from the timeline
    env.pop(tools.ENV_MAX_PER_RANGE, None)
    env["PYTHONUNBUFFERED"] = "1"
    crumbs_dir = raw / BREADCRUMB_DIR / tool
    crumbs_dir.mkdir(parents=True, exist_ok=True)
    env[ENV_BREADCRUMB_DIR] = str(crumbs_dir)
    if python_cmd and not env.get("PYTHONFAULTHANDLER"):
        env["PYTHONFAULTHANDLER"] = "1"  # a native crash prints the Python stack
    flush = tool == "nsys" and python_cmd and crash_flush != "none"
    env.pop(ENV_CRASH_FLUSH, None)
    env.pop(ENV_HANG_DUMP, None)
    if flush:
        env[ENV_CRASH_FLUSH] = crash_flush
    hang_dump = python_cmd and timeout is not None and timeout > 1.0
    if hang_dump:
        assert timeout is not None
        env[ENV_HANG_DUMP] = f"{timeout - min(2.0, timeout * 0.1):.3f}"
    if instrument or flush or hang_dump:
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(SITE_DIR) + (os.pathsep + old if old else "")
        if not instrument:
            env["TRACEKIT_INSTRUMENT"] = "0"  # the site folder is there for the crash / hang handlers only
    if tool == "ncu":
        assert plan.ncu is not None
        env[tools.ENV_MAX_PER_RANGE] = str(ncu_opts["per_range"])
        argv = tools.ncu_command(
            plan.ncu.path,
            raw / f"ncu{tag}",
            inner,
            sections=ncu_opts["sections"],
            metrics=ncu_opts["metrics"],
            nvtx_include=ncu_opts["nvtx_include"],
            clock_control=ncu_opts["clock_control"],
            launch_count=ncu_opts["launch_count"],
            extra=ncu_opts["extra"],
        )
    elif tool == "nsys":
        assert plan.nsys is not None
        env = tools.nsys_env(env)
        argv = tools.nsys_command(plan.nsys.path, raw / f"nsys{tag}", inner, extra=nsys_extra)
    elif tool == "torch":
        assert plan.python is not None
        interp, target = plan.python
        env[ENV_TORCH_OPS] = torch_ops  # a tracekit benchmark's profiled workers record what the parent does
        env[ENV_TRACE_REPEATS] = "all" if trace_repeats is None else str(trace_repeats)
        argv = [
            *interp,
            str(TORCHPROF_PY),
            "--ops",
            torch_ops,
            "--out",
            str(raw / TORCH_TRACE.replace(".json.gz", f"{tag}.json.gz")),
            "--failures",
            str(raw / FAILURES_FILE),
            "--",
            *target,
        ]
    else:
        argv = list(cmd)
    if ranks is not None and tool != "plain":
        argv = ranks.wrap(argv)
    result = PassResult(tool, argv)
    log_path = raw / f"{tool}.log"
    program = {"stdout": raw / f"{program_stem}.stdout", "stderr": raw / f"{program_stem}.stderr"}
    failures_before = _count_lines(raw / FAILURES_FILE)
    before = {p.name for p in raw.iterdir()}
    log("start", tool, f"{tool} pass: {' '.join(argv)}", log=f"raw/{log_path.name}")
    _run_pass(
        result, env, log_path, timeout=timeout, grace_s=grace_s, on_output=output, cwd=cwd, program=program
    )

    code = result.exit_code
    if result.reason is None:
        if result.interrupted:
            result.reason = f"interrupted (Ctrl-C) during the {tool} pass"
        elif result.timed_out:
            result.reason = f"{tool} pass timed out after {timeout:g} s and was stopped"
        elif code not in (0, None):
            result.reason = f"{tool} pass: the command ended with {_describe_exit(code)}"
            if tool == "ncu":
                problem = _ncu_problem(log_path)
                if problem:
                    result.reason += f" ({problem})"
    if ranks is not None:
        _finish_ranks(result, tool, ranks, plan, raw, log_path, log, grace_s, ncu_opts["nvtx_include"])
    elif tool == "nsys":
        try:
            _finish_nsys(result, plan.nsys if not result.interrupted else None, raw, log_path, log, grace_s)
        except KeyboardInterrupt:  # Ctrl-C while `nsys export` ran (subprocess.run has killed it)
            result.interrupted = True
            rep = "raw/nsys.nsys-rep"
            result.reason = (
                f"interrupted (Ctrl-C) during the nsys export; {rep} is kept: "
                f"`nsys export --type sqlite -o {run_dir / 'raw/nsys.sqlite'} {run_dir / rep}`, then "
                f"`tracekit import --rebuild {run_dir}`"
            )
            log("error", "nsys-export", result.reason)
        if (result.timed_out or code not in (0, None)) and nsys_kernel_count(raw / "nsys.sqlite") == 0:
            extra = (
                "nsys kept no kernels of the program that died (its CUDA buffers went with it); GEMM times "
                "come from ncu's kernel durations where an ncu pass profiled them"
                + ("" if crash_flush != "none" or not python_cmd else "; try --crash-flush profiler-stop")
            )
            result.reason = f"{result.reason}; {extra}" if result.reason else extra
    elif tool == "ncu":
        _finish_ncu(result, raw, log_path, ncu_opts["nvtx_include"])
    elif tool == "torch" and not (raw / TORCH_TRACE).is_file() and result.reason is None:
        result.reason = f"the PyTorch profiler wrote no {TORCH_TRACE} (see raw/{log_path.name})"
    # a crash that left no crash record of its own gets one, naming the GEMM in flight, so the failures frame
    # says why; the program's own output (never the profiler's progress lines) is its evidence
    if (result.timed_out or (code not in (0, None) and not result.interrupted)) and not _own_crash_record(
        raw / FAILURES_FILE, failures_before
    ):
        tool_text = _tool_text(log_path, program["stdout"], program["stderr"])
        append_jsonl(
            raw / FAILURES_FILE,
            crash_record(
                kind="timeout" if result.timed_out else "crashed",
                returncode=code,
                program_stderr=read_text(program["stderr"]),
                tool_text=tool_text if tool != "plain" else "",
                crumbs=read_breadcrumbs(crumbs_dir),
                timeout_s=timeout,
                versions={"python": platform.python_version()},
            ),
        )
    result.files = sorted(
        f"raw/{p.name}"
        for p in raw.iterdir()
        if p.is_file() and (p.name not in before or p.name == FAILURES_FILE)
    )
    if result.reason:
        log("error", tool, result.reason, exit_code=code, wall_s=round(result.wall_s, 3))
    else:
        log("done", tool, f"{tool} pass done in {result.wall_s:.1f} s", exit_code=code, files=result.files)
    return result


def _own_crash_record(path: Path, skip: int) -> bool:
    """True if the program itself recorded a crash or timeout in failures.jsonl during this pass (a tracekit
    benchmark does, for its workers); its other failures (unsupported, wrong ...) do not count."""
    try:
        lines = [line for line in path.read_bytes().splitlines() if line.strip()][skip:]
    except OSError:
        return False
    for line in lines:
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            if isinstance(obj, dict) and obj.get("kind") in ("crashed", "timeout"):
                return True
    return False


def _tool_text(log_path: Path, *program_files: Path) -> str:
    """The profiler's own lines of a pass: its log less what the program printed."""
    mine = set()
    for path in program_files:
        mine.update(line for line in read_text(path).split("\n") if line.strip())
    return "\n".join(line for line in read_text(log_path).split("\n") if line not in mine)


def nsys_kernel_count(sqlite: Path) -> int | None:
    """Kernels in an nsys SQLite export (0 when it has no CUPTI kernel table: the program died before nsys
    flushed them); None when there is no readable export to tell."""
    import sqlite3

    if not sqlite.is_file():
        return None
    try:
        con = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            return 0
        return int(con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0])
    except sqlite3.Error:
        return None
    finally:
        con.close()


def _finish_nsys(
    result: PassResult,
    nsys: tools.Tool | None,
    raw: Path,
    log_path: Path,
    log: Callable[..., None],
    grace_s: float,
    stem: str = "nsys",
) -> None:
    """Make sure an .sqlite exists: export it from the .nsys-rep when the profile's own export did not finish;
    explain a lone .qdstrm (the importer could not run)."""
    rep, sqlite = raw / f"{stem}.nsys-rep", raw / f"{stem}.sqlite"
    if sqlite.is_file() and sqlite.stat().st_size > 0:
        return
    if rep.is_file() and nsys is not None:
        log("start", "nsys-export", f"no {sqlite.name} yet; exporting it from {rep.name}")
        argv = tools.nsys_export_command(nsys.path, rep)
        try:
            with log_path.open("ab") as f:
                proc = subprocess.Popen(
                    argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=tools.nsys_env()
                )
                try:
                    code = proc.wait(timeout=max(600.0, grace_s))
                except BaseException:  # timeout or Ctrl-C: stop the export and reap it before going on
                    proc.kill()
                    proc.wait()
                    raise
            ok = code == 0 and sqlite.is_file()
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok = False
            log("error", "nsys-export", f"nsys export failed: {exc}")
        if ok:
            log("done", "nsys-export", f"exported {sqlite.name}")
            return
        extra = f"nsys export of {rep.name} failed (see raw/{log_path.name}); run `{' '.join(argv)}` later"
    elif list(raw.glob("*.qdstrm")):
        extra = (
            f"nsys wrote only a .qdstrm: its QdstrmImporter could not build the report (libdw.so.1 missing?) — "
            f"{tools.LIBDW_FIX}"
        )
    else:
        extra = f"nsys wrote no report (see raw/{log_path.name})"
    result.reason = f"{result.reason}; {extra}" if result.reason else extra


def _finish_ncu(result: PassResult, raw: Path, log_path: Path, nvtx_include: str | None) -> None:
    if (raw / "ncu.ncu-rep").is_file():
        return
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        text = ""
    if "No kernels were profiled" in text:
        where = f"inside NVTX ranges matching {nvtx_include}" if nvtx_include else "at all"
        extra = (
            f"ncu profiled no kernels: none ran {where}; wrap the GEMMs in tracekit ranges "
            "(tracekit.collectors.ranges), use --instrument, or --all-kernels"
        )
    else:
        problem = _ncu_problem(log_path)
        extra = f"ncu wrote no report ({problem or f'see raw/{log_path.name}'})"
    if result.reason and extra.removeprefix("ncu wrote no report (").rstrip(")") in result.reason:
        extra = "ncu wrote no report"
    result.reason = f"{result.reason}; {extra}" if result.reason else extra


_RANK_OUTPUTS = {
    "nsys": ("nsys", ".nsys-rep"),
    "ncu": ("ncu", ".ncu-rep"),
    "torch": ("torch_trace", ".json.gz"),
}


def _finish_ranks(
    result: PassResult,
    tool: str,
    ranks: RankLaunch,
    plan: _Plan,
    raw: Path,
    log_path: Path,
    log: Callable[..., None],
    grace_s: float,
    nvtx_include: str | None,
) -> None:
    """After a pass with one profiler per rank: every rank's report there (nsys ones exported to SQLite), and the
    ranks the launcher should have started all accounted for; what is missing becomes the pass's reason."""
    if tool not in _RANK_OUTPUTS:
        return
    stem, suffix = _RANK_OUTPUTS[tool]
    found = rank_files(raw, stem, suffix)
    if tool == "nsys":
        for rank in found:
            sub = PassResult(tool, result.argv)
            nsys = plan.nsys if not result.interrupted else None
            _finish_nsys(sub, nsys, raw, log_path, log, grace_s, stem=f"{stem}.rank{rank}")
            if sub.reason:
                result.reason = f"{result.reason}; rank {rank}: {sub.reason}" if result.reason else sub.reason
    if not found:
        extra = f"no rank wrote a {stem}.rank<R>{suffix} (see raw/{log_path.name})"
        if tool == "ncu":
            probe = PassResult(tool, result.argv)
            _finish_ncu(probe, raw, log_path, nvtx_include)
            extra = probe.reason or extra
        result.reason = f"{result.reason}; {extra}" if result.reason else extra
        return
    if ranks.world_size is not None:
        missing = sorted(set(range(ranks.world_size)) - set(found))
        if missing and len(found) < ranks.world_size:
            extra = (
                f"{tool}: {len(found)} of {ranks.world_size} ranks wrote a report (missing ranks "
                f"{', '.join(map(str, missing[:16]))}; see raw/{log_path.name})"
            )
            result.reason = f"{result.reason}; {extra}" if result.reason else extra
