"""Running one pass's process: its own process group, output streamed through and teed into the pass's log
and the program's own files, a timeout with a grace period for the tool to write its report, Ctrl-C handed on."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ..crash import (
    OutputSplitter,
)
from .common import PassResult


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
        # A signal while the pumps start (slow on a loaded machine) is kept and raised once the pass is waited on,
        # where it stops the process group: raised from here, it would leave the command running unowned.
        self.interrupt: KeyboardInterrupt | None = None
        for t in self.threads:
            try:
                t.start()
            except KeyboardInterrupt as exc:
                self.interrupt = exc
                if t.ident is None:  # interrupted before the thread was started
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
    must_stop: Callable[[], bool] | None = None,
) -> None:
    """Run ``result.argv`` to its end, or until the timeout, Ctrl-C (or a signal taking its path), or
    ``must_stop`` (asked every 0.25 s; an ncu budget) answering true; the last two stop its process group."""
    start = time.monotonic()
    try:
        child = _Child(result.argv, env, log_path, on_output, cwd, program, result.tool)
    except OSError as exc:
        result.reason = f"{result.tool} pass could not start {result.argv[0]}: {exc}"
        result.error = str(exc)
        return
    try:
        if child.interrupt is not None:
            raise child.interrupt
        deadline = None if timeout is None else start + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            code = child.wait(0.25 if remaining is None else min(0.25, remaining))
            if code is not None:
                result.exit_code = code
                break
            if must_stop is not None and must_stop():
                result.exit_code = child.stop(grace_s)
                break
            if deadline is not None and time.monotonic() >= deadline:
                result.timed_out = True
                result.exit_code = child.stop(grace_s)
                break
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM / SIGHUP under signals_as_interrupts
        result.interrupted = True
        result.signum = int(getattr(exc, "signum", signal.SIGINT))
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
