"""Shared fixtures: where the real profiling files live, the committed sample runs, and a pseudo-terminal to run
the UI in."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SAMPLES = ROOT / "samples"


TEST_COLUMNS = "100"
"""The terminal width every test draws at, whatever terminal (or none) runs pytest: Rich reads ``COLUMNS``, so
output does not change with the window that started the tests (a CI log has none, a laptop has its own)."""


@pytest.fixture(autouse=True)
def _fixed_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test at :data:`TEST_COLUMNS` columns, in-process and in the subprocesses it starts (they inherit the
    environment); a test about another width (or none: a pipe) sets or deletes ``COLUMNS`` itself."""
    monkeypatch.setenv("COLUMNS", TEST_COLUMNS)
    monkeypatch.delenv("LINES", raising=False)


@pytest.fixture(scope="session", autouse=True)
def _own_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One per-user cache for the test session (``TRACEKIT_CACHE_DIR``: stored Analyses, calibration, bundles),
    never the user's own ~/.cache: tests share what a read builds there, and leave nothing behind. A test about
    the cache sets its own."""
    old = os.environ.get("TRACEKIT_CACHE_DIR")
    os.environ["TRACEKIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("tracekit-cache"))
    yield
    if old is None:
        os.environ.pop("TRACEKIT_CACHE_DIR", None)
    else:
        os.environ["TRACEKIT_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only folder of real profiling files from other GPUs (../shared/data); skipped where absent."""
    if not SHARED.is_dir():
        pytest.skip(f"real-data folder {SHARED} is absent (it sits beside the checkout on project machines)")
    return SHARED


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    return SAMPLES


class Terminal:
    """A command on a pseudo-terminal of 100 x 30 (its stdin, stdout and stderr), as a user's terminal runs a UI.

    Started by subprocess in a session of its own, not by ``pty.fork`` (a fork of the multi-threaded test process
    is deprecated). ``drain`` reads what it painted; the :func:`terminal` fixture kills it and closes the
    terminal when the test ends."""

    def __init__(self, args: list[str], cwd: Path | None = None) -> None:
        import fcntl
        import struct
        import termios

        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
        self.proc = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, start_new_session=True
        )
        os.close(slave)

    def drain(self, seconds: float) -> bytes:
        """What the command paints in the next ``seconds`` (less once it has closed the terminal)."""
        out = b""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if ready:
                try:
                    out += os.read(self.master, 65536)
                except OSError:  # the terminal closed: the UI has exited
                    break
        return out

    def painted(self, done: Callable[[bytes], bool], seconds: float = 90.0) -> bytes:
        """All it paints until ``done`` holds of it and a second passes with nothing new (a screen is drawn and
        the UI has gone quiet), it exits, or ``seconds`` pass."""
        painted, deadline = b"", time.monotonic() + seconds
        while time.monotonic() < deadline and self.proc.poll() is None:
            chunk = self.drain(1.0)
            painted += chunk
            if done(painted) and not chunk:
                break
        return painted

    def quit(self, key: bytes = b"q", tries: int = 3, wait: float = 20.0) -> int | None:
        """Types ``key`` until the command exits (at most ``tries`` times, ``wait`` seconds each, reading what it
        paints meanwhile so it never blocks on a full terminal); its exit code, None while it still runs."""
        for _ in range(tries):
            os.write(self.master, key)
            deadline = time.monotonic() + wait
            while self.proc.poll() is None and time.monotonic() < deadline:
                self.drain(0.5)
            if self.proc.poll() is not None:
                break
        return self.proc.returncode

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        os.close(self.master)


@pytest.fixture
def terminal() -> Iterator[Callable[..., Terminal]]:
    """Starts commands on pseudo-terminals (:class:`Terminal`): ``terminal([argv], cwd=...)``; each is killed
    and closed when the test ends."""
    if not hasattr(os, "openpty"):
        pytest.skip("needs a pseudo-terminal")
    started: list[Terminal] = []

    def start(args: list[str], cwd: Path | None = None) -> Terminal:
        started.append(Terminal(args, cwd))
        return started[-1]

    yield start
    for t in started:
        t.close()
