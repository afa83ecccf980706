"""SIGTERM and SIGHUP during ``tracekit capture`` take Ctrl-C's path: real signals sent to a real ``tracekit
capture`` process whose stand-in ncu would outlive it; the profiler is stopped (no orphan), its report kept, the
run marked incomplete with the signal's name, and the command exits 128 + the signal's number."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tracekit.collectors.capture import interrupt_reason, signals_as_interrupts
from tracekit.errors import SignalInterrupt, interrupt_exit_code
from tracekit.run import Run

PY = sys.executable

# Starts the command after it with SIGHUP and SIGTERM at their default action: a test run under nohup (or from a
# job that ignores them) would otherwise hand the ignored signals on, and tracekit rightly leaves an ignored
# signal ignored.
DEFAULT_SIGNALS = (
    "import os, signal, sys\n"
    "for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):\n"
    "    signal.signal(s, signal.SIG_DFL)\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


def _exe(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env["PATH"] = f"{Path(PY).parent}:/usr/bin:/bin"
    return env


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its parent counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _stand_in_ncu(tmp_path: Path) -> tuple[Path, Path]:
    """An ncu that runs until stopped: it notes its own pid and its helper's (a ``sleep`` in the background, as a
    profiler's helper process), writes a partial report when interrupted, and would otherwise outlive a tracekit
    killed by a signal (the pass runs in a session of its own)."""
    pids = tmp_path / "ncu.pids"
    ncu = _exe(
        tmp_path / "bin/ncu",
        'if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0"; exit 0; fi\n'
        'out=""; prev=""\nfor a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
        'trap \'echo "==PROF== Disconnected"; printf partial > "$out.ncu-rep"; exit 130\' INT TERM\n'
        "sleep 120 &\n"
        f'echo "$$ $!" > {pids}.tmp; mv {pids}.tmp {pids}\n'
        "wait\n",
    )
    return ncu, pids


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_signal_stops_the_profiler_keeps_the_report_and_marks_the_run(tmp_path, sig, code):
    ncu, pids = _stand_in_ncu(tmp_path)
    out = tmp_path / "run"
    argv = [
        PY, "-c", DEFAULT_SIGNALS, PY, "-m", "tracekit", "capture", "--ncu", "--ncu-path", str(ncu),
        "--no-import", "--json", "-o", str(out), "--", PY, "-c", "pass",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120  # a loaded machine may take long to start the interpreter
        while not pids.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pids.exists(), proc.stderr.read().decode() if proc.poll() is not None else "ncu never started"
        ncu_pid, helper_pid = (int(p) for p in pids.read_text().split())
        assert _alive(ncu_pid) and _alive(helper_pid)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, stderr.decode()
    data = json.loads(stdout)
    assert data["interrupted"] is True and data["signal"] == sig.name and data["status"] == "incomplete"
    run = Run.open(out)
    assert run.status == "incomplete"
    assert run.manifest["incomplete_reason"] == f"terminated by {sig.name} during the ncu pass"
    (p,) = run.manifest["capture"]["passes"]
    assert p["interrupted"] is True and p["signal"] == sig.name
    # every artifact kept: the report the profiler wrote on its way out, and its log
    assert (out / "raw/ncu.ncu-rep").read_bytes() == b"partial"
    assert "==PROF== Disconnected" in (out / "raw/ncu.log").read_text()
    # no orphan: the profiler and its helper are gone once tracekit has exited
    deadline = time.monotonic() + 10
    while (_alive(ncu_pid) or _alive(helper_pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(ncu_pid) and not _alive(helper_pid)
    assert any(e["level"] == "error" and sig.name in e["message"] for e in run.manifest["events"])


def test_signals_become_interrupts_only_inside_and_ignored_ones_stay_ignored():
    before_term = signal.getsignal(signal.SIGTERM)
    before_hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with pytest.raises(SignalInterrupt) as info, signals_as_interrupts():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises in this thread long before
        assert info.value.signum == signal.SIGTERM and interrupt_exit_code(info.value) == 143
        assert isinstance(info.value, KeyboardInterrupt)  # every Ctrl-C path handles it
        assert signal.getsignal(signal.SIGTERM) == before_term
    finally:
        signal.signal(signal.SIGHUP, before_hup)
    assert interrupt_exit_code(KeyboardInterrupt()) == 130
    assert (
        interrupt_reason(signal.SIGINT, "during the nsys pass") == "interrupted (Ctrl-C) during the nsys pass"
    )
    assert (
        interrupt_reason(signal.SIGHUP, "while building frames")
        == "terminated by SIGHUP while building frames"
    )


def test_help_and_readme_document_the_exit_codes():
    proc = subprocess.run(
        [PY, "-m", "tracekit", "capture", "--help"], env=_env(), capture_output=True, text=True, check=False
    )
    text = " ".join(proc.stdout.split())
    assert "143 SIGTERM" in text and "129 SIGHUP" in text
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "| 143 |" in readme and "| 129 |" in readme


def test_a_signal_while_the_output_pumps_start_still_stops_the_command(tmp_path, monkeypatch):
    """On a loaded machine a signal can land while the pass's output threads start, before the pass is waited
    on: the command must still be stopped and the pass marked interrupted, never left running unowned."""
    import threading

    from tracekit.collectors.capture.child import _run_pass
    from tracekit.collectors.capture.common import PassResult

    pid_file = tmp_path / "pid"
    argv = ["/bin/sh", "-c", f"echo $$ > {pid_file}; exec sleep 60"]
    real_start = threading.Thread.start
    calls = {"n": 0}

    def start_then_signal(self: threading.Thread) -> None:
        real_start(self)
        calls["n"] += 1
        if calls["n"] == 1:  # the signal arrives while the first pump is starting
            raise SignalInterrupt(signal.SIGTERM)

    monkeypatch.setattr(threading.Thread, "start", start_then_signal)
    result = PassResult("plain", argv)
    t0 = time.monotonic()
    _run_pass(result, dict(os.environ), tmp_path / "plain.log", timeout=None, grace_s=2.0, on_output=lambda s, d: None, cwd=None)  # fmt: skip
    assert result.interrupted and result.signum == signal.SIGTERM
    assert time.monotonic() - t0 < 30  # stopped, not waited out
    assert result.exit_code is not None
    deadline = time.monotonic() + 10
    while pid_file.exists() and _alive(int(pid_file.read_text() or 0)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_file.exists() or not _alive(int(pid_file.read_text()))


@pytest.mark.parametrize("stopped", [True, False])
def test_an_ncu_pass_stopped_before_any_range_is_not_blamed_on_the_ranges(tmp_path, stopped):
    """Measured on an H100: SIGTERM 8 s into the ncu pass, before the program entered its ranges, gave ncu's 'No
    kernels were profiled' and the run said 'none ran inside NVTX ranges matching ...; wrap the GEMMs', advice for
    a filter that matches nothing. Stopped, the run says the pass ended first; run to its end, the advice stays."""
    from tracekit.collectors.capture.common import PassResult
    from tracekit.collectors.capture.passes import _finish_ncu

    log = tmp_path / "ncu.log"
    log.write_text("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n")
    result = PassResult("ncu", ["ncu"])
    result.interrupted = stopped
    if stopped:
        result.reason = "terminated by SIGTERM during the ncu pass"
    _finish_ncu(result, tmp_path, log, "regex:.*(?:serve).*/")
    assert result.reason is not None
    if stopped:
        assert "before it was stopped" in result.reason and "wrap the GEMMs" not in result.reason
    else:
        assert "none ran inside NVTX ranges matching regex:.*(?:serve).*/" in result.reason
        assert "wrap the GEMMs" in result.reason
