"""What a capture keeps when the profiled program crashes, hangs or dies of a CUDA fault: the evidence for one
failure record of kind ``crashed`` / ``timeout`` that names the GEMM call in flight.

Pieces, all standard library and tracekit's own (captures run on GPU machines without polars):

* **Breadcrumbs** (:func:`read_breadcrumbs`): ``tracekit capture`` points ``TRACEKIT_BREADCRUMB_DIR`` at a folder
  of the run; the instrument wrapper writes ``breadcrumb.<pid>.bin`` there before and after each wrapped GEMM
  call: a memory-mapped file of one slot per thread (a packed record: state ``C`` call in flight, ``D``
  returned, ``R`` raised; seq; time; site id) and a table of sites (the range's fields and the caller, JSON,
  written once per range and call site). Its layout, v2 (and the older v1 of 512-byte JSON slots, still read),
  is collectors/breadcrumb.py's, which is also its one reader: this module wraps the dicts it returns (keys
  ``v``, ``pid``, ``tid``, ``seq``, ``t``, ``backend``, ``op``, ``m``, ``n``, ``k``, ``dtype_a``, ``dtype_b``,
  ``dtype_out``, ``scale``, ``range``, ``caller``). A slot is written in place, so the file survives SIGSEGV /
  SIGKILL; a slot torn by the crash is skipped, never fatal.
* **Program output apart from the profiler's** (:class:`OutputSplitter`): ncu's ``==PROF==`` / ``==ERROR==`` lines,
  nsys's banner and progress lines and the PyTorch-profiler driver's own lines are told from the program's, so
  the program's stdout / stderr are kept whole in ``raw/program*.stdout`` / ``.stderr``.
* **Text a failure may quote** (:func:`collapse_cr`, :func:`python_stack`, :func:`last_exception`): progress
  bars collapse to their last state; the fault handler's ``Fatal Python error`` block and a Python traceback are
  parsed out of the program's stderr.
* :func:`crash_record`: all of it as one ``failures.jsonl`` record.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.collectors import breadcrumb as _breadcrumb

ENV_BREADCRUMB_DIR = _breadcrumb.ENV_DIR
WRAPPER_FAILURES_GLOB = "failures.*.jsonl"
IN_FLIGHT, RETURNED, RAISED = "C", "D", "R"
STDERR_TAIL_LINES = 50

FATAL_SIGNALS = (
    signal.SIGSEGV,
    signal.SIGABRT,
    signal.SIGBUS,
    signal.SIGFPE,
    signal.SIGILL,
    signal.SIGKILL,
    signal.SIGTERM,
)
"""Signals a crashed program dies of (and an exit status 128+N from a shell or launcher is read as)."""

_FAULT_NAMES = {
    "Segmentation fault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating-point exception": "SIGFPE",
    "Floating point exception": "SIGFPE",
    "Illegal instruction": "SIGILL",
    "Terminated": "SIGTERM",
}
"""Python's fault handler names the signal in its header line ``Fatal Python error: Segmentation fault``."""


# --- breadcrumbs ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Breadcrumb:
    """One slot of a breadcrumb file: a wrapped GEMM call and how far it got."""

    state: str
    fields: dict[str, Any]
    file: str

    @property
    def order(self) -> tuple[float, int]:
        """Newest last: by time, then by the process's own sequence number."""
        t, seq = self.fields.get("t"), self.fields.get("seq")
        return (
            float(t) if isinstance(t, int | float) else 0.0,
            int(seq) if isinstance(seq, int) else -1,
        )

    def get(self, key: str) -> Any:
        return self.fields.get(key)


_STATE_LETTERS = {"call": IN_FLIGHT, "done": RETURNED, "raised": RAISED}


def read_breadcrumbs(folder: Path) -> list[Breadcrumb]:
    """Every readable slot of every process's breadcrumb file in ``folder``, oldest first
    (:func:`tracekit.collectors.breadcrumb.read_breadcrumbs` reads them; ``file`` here is the file's name)."""
    crumbs = []
    for row in _breadcrumb.read_breadcrumbs(folder):
        state = _STATE_LETTERS.get(row.pop("state", None))
        path = Path(str(row.pop("file", "")))
        if state is not None:
            crumbs.append(Breadcrumb(state, row, path.name))
    return sorted(crumbs, key=lambda c: c.order)


def in_flight(crumbs: Iterable[Breadcrumb], ended_by: str | None = None) -> Breadcrumb | None:
    """The call the program died in: the newest slot still in state ``C``; else the newest call of all when it
    raised and the exception that ended the program (``ended_by``: its traceback) passed through that call's line
    (a CUDA fault surfaces as an exception, which the wrapper marks ``R``); else None. A call that raised and was
    caught is not what the program died of, even when it was the last wrapped call before a crash elsewhere (a
    segfault in a native call after a caught NVFP4 error, measured on the H200)."""
    crumbs = list(crumbs)
    calls = [c for c in crumbs if c.state == IN_FLIGHT]
    if calls:
        return max(calls, key=lambda c: c.order)
    newest = max(crumbs, key=lambda c: c.order, default=None)
    if newest is None or newest.state != RAISED or not ended_by:
        return None
    return newest if _passed_through(newest, ended_by) else None


def _passed_through(crumb: Breadcrumb, traceback_text: str) -> bool:
    """Whether a traceback holds the frame of the crumb's caller (``File "path", line N``)."""
    path, _, line = str(crumb.get("caller") or "").rpartition(":")
    return bool(path) and line.isdecimal() and f'File "{path}", line {line}' in traceback_text


def describe_call(crumb: Breadcrumb) -> str:
    """``sgl-kernel cutlass_scaled_fp4_mm M=16 N=2048 K=6144 e2m1 (bench.py:57)``."""
    parts = [str(crumb.get(k)) for k in ("backend", "op") if crumb.get(k)]
    parts += [f"{d}={crumb.get(d.lower())}" for d in ("M", "N", "K") if crumb.get(d.lower()) is not None]
    dtypes = [str(crumb.get(k)) for k in ("dtype_a", "dtype_b") if crumb.get(k)]
    if dtypes:
        parts.append(" x ".join(dtypes) + (f" -> {crumb.get('dtype_out')}" if crumb.get("dtype_out") else ""))
    text = " ".join(parts) or "an instrumented GEMM call"
    return f"{text} ({crumb.get('caller')})" if crumb.get("caller") else text


# --- output ---------------------------------------------------------------------------------------------------
_NCU_TOOL = re.compile(rb"^==(PROF|ERROR|WARNING|INFO|DEBUG)==")
_NSYS_TOOL = re.compile(
    rb"^(Collecting data\.\.\.|Generating '.*'|Generated:|\t/.*|\[\d+/\d+\] \[|Processing events\.\.\.|"
    rb"Saving temporary |Creating final output files|Capture range (started|ended)|WARNING: |Warning: |"
    rb"The target application |Process \d+ (was )?terminated|Importer error|FATAL ERROR|nsys:|"
    rb"Failed to create |Exporting |Report file |Use the --force-overwrite)"
)
_TORCH_TOOL = re.compile(rb"^tracekit torchprof: ")
_TOOL_LINES = {"ncu": _NCU_TOOL, "nsys": _NSYS_TOOL, "torch": _TORCH_TOOL}
_TRACEKIT_NOTE = re.compile(rb"^tracekit crash-flush: ")
"""What tracekit's own code injected into the program (collectors/site) prints, in any pass."""


def is_tool_line(tool: str, line: bytes) -> bool:
    """True for a line the profiler of pass ``tool`` printed itself (ncu ``==PROF==`` ..., nsys progress ...)
    or tracekit's injected crash handler printed."""
    line = line.lstrip(b"\r")
    pattern = _TOOL_LINES.get(tool)
    return bool(pattern and pattern.match(line)) or bool(_TRACEKIT_NOTE.match(line))


class OutputSplitter:
    """Splits a pass's output, line by line, into the program's and the profiler's. ``feed`` returns the bytes
    that are the program's (whole lines only; the rest waits for its newline or :meth:`flush`)."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.pending: dict[str, bytes] = {}

    def feed(self, stream: str, data: bytes) -> bytes:
        text = self.pending.get(stream, b"") + data
        head, sep, rest = text.rpartition(b"\n")
        self.pending[stream] = rest
        if not sep:
            return b""
        lines = (head + sep).splitlines(keepends=True)
        return b"".join(line for line in lines if not is_tool_line(self.tool, line))

    def flush(self, stream: str) -> bytes:
        rest = self.pending.pop(stream, b"")
        return b"" if not rest or is_tool_line(self.tool, rest) else rest


def collapse_cr(text: str) -> str:
    """Each line as a terminal leaves it: carriage-return-overwritten text (progress bars) keeps its last state."""
    out = []
    for line in text.split("\n"):
        if "\r" in line:
            parts = [p for p in line.split("\r") if p]
            line = parts[-1] if parts else ""
        out.append(line)
    return "\n".join(out)


READ_LIMIT = 4 << 20
"""Only the last 4 MiB of a program's output are read for a failure: its end is what names the crash."""


def read_text(path: Path, limit: int = READ_LIMIT) -> str:
    """The end (``limit`` bytes) of a program output file as text, CR-overwritten lines collapsed; '' if it
    cannot be read."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    if size > limit:
        data = data.split(b"\n", 1)[-1]  # drop the partial first line
    return collapse_cr(data.decode("utf-8", errors="replace"))


def tail(text: str, lines: int = STDERR_TAIL_LINES) -> str | None:
    """The last ``lines`` non-empty-ended lines of ``text``, in full; None if there are none."""
    kept = text.rstrip("\n").split("\n")[-lines:]
    joined = "\n".join(kept).strip("\n")
    return joined or None


_STACK_LINE = re.compile(
    r"^(\s|$|Thread 0x|Current thread 0x|Stack \(most recent call first\)|Extension modules:|"
    r"Python runtime state:|Fatal Python error:|<Cannot show all threads|Current thread's C stack)"
)


_BLOCK_START = re.compile(r"^(Fatal Python error:|Timeout \(\d+:\d\d:\d\d(?:\.\d+)?\)!$)", re.MULTILINE)


def python_stack(stderr: str) -> tuple[str | None, str | None]:
    """The fault handler's last block (``Fatal Python error: ...``, or ``Timeout (0:00:09)!`` from the hang
    watchdog, through the thread stacks) from the program's stderr, and the signal it names (``SIGSEGV``);
    (None, None) if the program printed none."""
    starts = [m.start() for m in _BLOCK_START.finditer(stderr)]
    if not starts:
        return None, None
    lines = stderr[starts[-1] :].split("\n")
    block = [lines[0]]
    for line in lines[1:]:
        if not _STACK_LINE.match(line):
            break
        block.append(line)
    header = lines[0].removeprefix("Fatal Python error:").strip()
    sig = next((name for text, name in _FAULT_NAMES.items() if header.startswith(text)), None)
    return "\n".join(block).strip("\n"), sig


_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning|Fault)?): ?(.*)$")


def last_exception(stderr: str) -> tuple[str | None, str | None, str | None]:
    """The last Python traceback in ``stderr``: (traceback text, exception type, full message); Nones if none."""
    start = stderr.rfind("Traceback (most recent call last):")
    if start < 0:
        return None, None, None
    lines = stderr[start:].rstrip("\n").split("\n")
    i = 1
    while i < len(lines) and (lines[i].startswith(" ") or not lines[i]):
        i += 1
    if i >= len(lines):
        return "\n".join(lines), None, None
    match = _EXC_LINE.match(lines[i])
    if match is None:
        return "\n".join(lines[: i + 1]), None, lines[i]
    # the message runs on until a line that starts the next chunk of unrelated output (blank line ends it)
    message = [match.group(2)]
    for line in lines[i + 1 :]:
        if not line.strip():
            break
        message.append(line)
    return "\n".join(lines[: i + 1 + len(message) - 1]), match.group(1), "\n".join(message).strip()


def last_words(stderr: str) -> str | None:
    """The program's last stderr line of its own: not part of a fault handler's block (crash, hang watchdog)
    nor of a Python traceback."""
    lines = stderr.split("\n")
    skip: set[int] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        if _BLOCK_START.match(line):
            skip.add(i)
            i += 1
            while i < len(lines) and _STACK_LINE.match(lines[i]):
                skip.add(i)
                i += 1
        elif line.startswith("Traceback (most recent call last):"):
            skip.add(i)
            i += 1
            while i < len(lines) and (lines[i].startswith(" ") or not lines[i].strip()):
                skip.add(i)
                i += 1
            if i < len(lines):  # the exception line (what follows may be the program's again: kept)
                skip.add(i)
                i += 1
        else:
            i += 1
    own = [line for n, line in enumerate(lines) if n not in skip and line.strip()]
    return own[-1].strip() if own else None


def signal_from(returncode: int | None, stack_signal: str | None, tool_text: str = "") -> str | None:
    """The signal the program died of: a negative return code; the fault handler's header; the profiler's own
    words (``terminated with signal 11`` / ``(SIGSEGV)``); or an exit status 128+N from a shell or launcher."""
    if returncode is not None and returncode < 0:
        return _name(-returncode)
    if stack_signal:
        return stack_signal
    match = re.search(r"\b(?:signal|signum)[ :=]*(\d+)\b", tool_text, re.IGNORECASE) or re.search(
        r"\((SIG[A-Z]+)\)", tool_text
    )
    if match:
        word = match.group(1)
        return word if word.startswith("SIG") else _name(int(word))
    if returncode is not None and returncode > 128 and returncode - 128 in [int(s) for s in FATAL_SIGNALS]:
        return _name(returncode - 128)
    return None


def _name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def crash_record(
    *,
    kind: str,
    returncode: int | None,
    program_stderr: str,
    tool_text: str = "",
    crumbs: Iterable[Breadcrumb] = (),
    timeout_s: float | None = None,
    versions: dict[str, Any] | None = None,
    time_unix: float | None = None,
) -> dict[str, Any]:
    """One ``failures.jsonl`` record for a program that died (``crashed``) or was stopped (``timeout``): the GEMM
    call in flight from the breadcrumbs, the signal, the Python stack and the last lines of the program's own
    stderr. The message names no pass, so the same crash seen under nsys and ncu is one failure after import."""
    import time

    stack, stack_signal = python_stack(program_stderr)
    tb, exc_type, exc_message = last_exception(program_stderr)
    sig = None
    if kind != "timeout":
        # a Python exception that ended the program outranks a profiler's words, but not a signal for sure
        sure = signal_from(returncode, stack_signal)
        exited = exc_type is not None and returncode is not None and 0 < returncode < 128
        sig = sure if sure or exited else signal_from(returncode, None, tool_text)
    if (
        kind == "timeout"
        and stack
        and tb
        and stderr_pos(program_stderr, tb) > stderr_pos(program_stderr, stack)
    ):
        stack = f"{stack}\n\n{tb}"  # the watchdog's stacks, then where Ctrl-C found it
    crumb = in_flight(crumbs, tb if kind != "timeout" and sig is None else None)
    where = f" during {describe_call(crumb)}" if crumb is not None else ""
    if kind == "timeout":
        error_type = "timeout"
        limit = f" {timeout_s:g} s" if timeout_s is not None else ""
        message = f"the program was still running after --timeout{limit} and was stopped{where}"
    elif sig is not None:
        error_type = sig
        message = f"the program was killed by {sig}{where}"
    elif exc_type is not None:
        error_type = exc_type
        message = f"the program exited after {exc_type}{where}: {exc_message}"
    else:
        error_type = "exit status"
        status = f" {returncode}" if returncode is not None else ""
        message = f"the program ended with exit status{status}{where}"
    from_exception = kind != "timeout" and sig is None and exc_type is not None
    last = last_words(program_stderr)
    if last and not from_exception:
        message += f"; its last words on stderr: {last}"
    # the stack of what ended it: the fault handler's for a signal (a traceback printed earlier is another story)
    if kind == "timeout":
        py_stack = stack or tb
    elif sig is not None:
        py_stack = stack
    else:
        py_stack = tb if from_exception else stack
    from tracekit.collectors.failures import failure_record

    got = crumb or {}
    return failure_record(
        backend=got.get("backend"),
        op=got.get("op"),
        m=_int(got.get("m")),
        n=_int(got.get("n")),
        k=_int(got.get("k")),
        kind=kind,
        error_type=error_type,
        message=message,
        traceback=py_stack or tail(program_stderr),
        versions=versions or {},
        time_unix=time.time() if time_unix is None else time_unix,
        dtype_a=got.get("dtype_a"),
        dtype_b=got.get("dtype_b"),
        dtype_out=got.get("dtype_out"),
        range=got.get("range"),
        caller=got.get("caller"),
        signal=sig,
        python_stack=py_stack,
        stderr_tail=tail(program_stderr),
    )


def stderr_pos(text: str, block: str) -> int:
    """Where ``block`` last starts in ``text`` (-1 if absent)."""
    return text.rfind(block.split("\n", 1)[0])


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
