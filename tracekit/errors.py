"""One error family for tracekit, each with a documented exit code.

The CLI prints a `TracekitError` as one line (what is wrong, what to do) on stderr and exits with its
``exit_code``; anything else is a bug and exits 1 (``--debug`` shows the traceback).

Exit codes (also in ``tracekit --help`` and the README):

====  ==========================================================================
code  meaning
====  ==========================================================================
0     success
1     internal error (a bug in tracekit: please report it with ``--debug``)
2     bad input or usage: a file tracekit cannot read, a wrong option, a missing run
3     a required tool or package is missing (ncu, nsys, torch ...), or no GPU
4     the capture or benchmark finished incomplete: results were kept and marked
5     ``tracekit compare --gate`` found a regression beyond the threshold
129   stopped by SIGHUP (the terminal went away); as 130
130   interrupted (Ctrl-C); whatever was captured is kept, marked incomplete
143   stopped by SIGTERM (``timeout``, a batch scheduler's time limit, ``kill``); as 130
====  ==========================================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = 2
EXIT_MISSING_TOOL = 3
EXIT_INCOMPLETE = 4
EXIT_REGRESSION = 5
EXIT_HANGUP = 129
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_INTERNAL: "internal error (a bug: rerun with --debug and report it)",
    EXIT_BAD_INPUT: "bad input or usage (unreadable file, wrong option, missing run)",
    EXIT_MISSING_TOOL: "a required tool, package or GPU is missing",
    EXIT_INCOMPLETE: "capture or benchmark incomplete; partial results kept and marked",
    EXIT_REGRESSION: "compare --gate found a regression beyond the threshold",
    EXIT_HANGUP: "stopped by SIGHUP; as 130",
    EXIT_INTERRUPTED: "interrupted; what was captured is kept, marked incomplete",
    EXIT_TERMINATED: "stopped by SIGTERM; as 130",
}


class SignalInterrupt(KeyboardInterrupt):
    """SIGTERM or SIGHUP turned into what Ctrl-C raises, so every path that stops the profilers, keeps what was
    captured and marks the run for Ctrl-C does so for them too; ``signum`` says which signal, and the process
    exits ``128 + signum`` (143, 129) as a shell reports a process killed by it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def interrupt_exit_code(exc: BaseException) -> int:
    """The exit status for an interruption: ``128 + signum`` for a :class:`SignalInterrupt` (or an exception
    that carries ``signum``), 130 for Ctrl-C."""
    signum = getattr(exc, "signum", None)
    return 128 + signum if isinstance(signum, int) else EXIT_INTERRUPTED


class TracekitError(Exception):
    """Base of every error tracekit reports to a user.

    ``message`` says what is wrong, ``hint`` what to do about it; together they fit on one line.
    """

    exit_code: int = EXIT_BAD_INPUT
    title: str = "error"

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The single line the CLI prints: ``tracekit: <title>: <message> (<hint>)``."""
        text = f"{self.title}: {self.message}"
        if self.hint:
            text += f" — {self.hint}"
        return " ".join(text.split())


class BadInputError(TracekitError):
    """A file or argument tracekit cannot use (exit 2)."""

    title = "bad input"


class UnreadableFileError(BadInputError):
    """A profiler file that is corrupt, truncated, of an unknown kind or of a layout we cannot read."""

    title = "cannot read file"

    def __init__(self, path: object, message: str, hint: str | None = None) -> None:
        super().__init__(f"{path}: {message}", hint)
        self.path = path


class RunNotFoundError(BadInputError):
    """The path given as a run is not a tracekit run directory or bundle."""

    title = "no run"


class SchemaError(BadInputError):
    """A run whose manifest or frames do not match what this tracekit understands."""

    title = "run format"


class StorageError(TracekitError):
    """tracekit could not write a run's files: the disk is full, a file-size limit, no permission (exit 2)."""

    title = "cannot write"


class MissingToolError(TracekitError):
    """ncu, nsys, torch, a GPU or another prerequisite is not available (exit 3)."""

    exit_code = EXIT_MISSING_TOOL
    title = "missing tool"


class IncompleteError(TracekitError):
    """A capture or benchmark ended early; what was gathered is kept and marked (exit 4)."""

    exit_code = EXIT_INCOMPLETE
    title = "incomplete"


class RegressionError(TracekitError):
    """``compare --gate`` found a regression (exit 5)."""

    exit_code = EXIT_REGRESSION
    title = "regression"
