"""What every part of a capture shares: the environment variables and file names, the events a capture
reports, :class:`PassResult`, :class:`CaptureInterrupted`, and small helpers (is this a Python command, the
ncu NVTX filter for ``--ranges``, the run folder's name)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from tracekit.errors import BadInputError, SignalInterrupt
from tracekit.records import CapturePass
from tracekit.run import Run, new_run_name

ENV_RUN_DIR = "TRACEKIT_RUN_DIR"
ENV_CAPTURE_TOOL = "TRACEKIT_CAPTURE_TOOL"
TORCH_TRACE = "torch_trace.json.gz"
FAILURES_FILE = "failures.jsonl"
SITE_DIR = Path(__file__).resolve().parent.parent / "site"
TORCHPROF_PY = Path(__file__).resolve().parent.parent / "torchprof.py"

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
    """Ctrl-C, SIGTERM or SIGHUP during a capture, raised after the run was marked incomplete; ``run`` is the kept
    run, ``signum`` the signal (SIGINT for Ctrl-C): a command exits ``128 + signum``."""

    def __init__(self, run: Run, signum: int = signal.SIGINT) -> None:
        super().__init__(f"capture interrupted; partial run kept at {run.path}")
        self.run = run
        self.signum = int(signum)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
"""Signals a capture handles as it handles Ctrl-C: ``timeout``, a batch scheduler's time limit and ``kill`` send
SIGTERM, a closed terminal SIGHUP. Their default action would end tracekit at once and leave the profiler (in a
process group of its own) running as an orphan, the run marked ``capturing``."""


@contextlib.contextmanager
def signals_as_interrupts(signals: Sequence[int] = STOP_SIGNALS) -> Iterator[None]:
    """While inside, each of ``signals`` raises :class:`tracekit.errors.SignalInterrupt` (a KeyboardInterrupt
    carrying the signal) in the main thread, so it takes Ctrl-C's path: the pass's process group is stopped
    (SIGINT, then SIGTERM, then SIGKILL), every file is kept, and the run is marked incomplete with the signal's
    name. A signal the process ignores (``nohup`` ignores SIGHUP) stays ignored; outside the main thread (where
    Python cannot set handlers) nothing changes. The previous handlers come back on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupt(signum: int, frame: object) -> None:
        raise SignalInterrupt(signum)

    previous: dict[int, object] = {}
    for sig in signals:
        old = signal.getsignal(sig)
        if old == signal.SIG_IGN:
            continue
        previous[sig] = old
        signal.signal(sig, raise_interrupt)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)  # type: ignore[arg-type]


def interrupt_reason(signum: int | None, where: str) -> str:
    """The run's reason for an interruption ``where`` (``during the ncu pass``): ``interrupted (Ctrl-C) ...`` or
    ``terminated by SIGTERM ...``."""
    if signum is None or signum == signal.SIGINT:
        return f"interrupted (Ctrl-C) {where}"
    return f"terminated by {_signal_name(signum)} {where}"


@dataclass
class PassResult:
    """How one tool pass ended."""

    tool: str
    argv: list[str]
    exit_code: int | None = None
    wall_s: float = 0.0
    timed_out: bool = False
    interrupted: bool = False
    signum: int | None = None
    """The signal that interrupted the pass (SIGINT for Ctrl-C), when ``interrupted``."""
    files: list[str] = field(default_factory=list)
    reason: str | None = None
    error: str | None = None
    ncu: dict[str, Any] | None = None
    """An ncu pass: the bound it ran under (``bound``), the kernels it profiled (``profiled``, from ncu's own
    lines) and, with ``--ncu-budget``, the budget's record (``budget``: spent, when, what was not profiled)."""
    role: str | None = None
    """``plan``: a planning pass, run so that its timeline chooses the ncu pass's launches (``--ncu`` without
    ``--nsys``); None for a pass that was asked for."""

    @property
    def ok(self) -> bool:
        return self.reason is None

    def as_record(self) -> CapturePass:
        """The pass as run.json records it (``capture.passes[]``)."""
        return CapturePass(
            tool=self.tool,
            argv=self.argv,
            exit_code=self.exit_code,
            wall_s=round(self.wall_s, 3),
            timed_out=self.timed_out,
            interrupted=self.interrupted,
            signal=_signal_name(self.signum) if self.interrupted and self.signum else None,
            files=self.files,
            status="ok" if self.ok else "incomplete",
            reason=self.reason,
            **({"ncu": self.ncu} if self.ncu is not None else {}),
            **({"role": self.role} if self.role is not None else {}),
        )


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
