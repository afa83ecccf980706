"""``tracekit view`` and the terminal: without one it exits 2 at once with one line; a folder holding no run gets
explain's error; idle in a real pseudo-terminal it uses almost no CPU (it used to spin a core with stdin at end of
file: Textual's input thread read the empty stdin in a loop)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.errors import RunNotFoundError
from tracekit.tui.runs import first_target

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "h200-gemm-probe"


def _tracekit(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "tracekit", *args], capture_output=True, text=True, check=False, timeout=120, **kw
    )


def test_view_without_a_terminal_exits_2_with_one_line():
    for stdin in (
        subprocess.DEVNULL,
        None,
    ):  # stdin at end of file; stdin inherited (stdout a pipe either way)
        proc = _tracekit("view", str(SAMPLE), stdin=stdin)
        assert proc.returncode == 2, proc.stderr
        assert proc.stdout == ""  # no escape codes painted into the pipe
        (line,) = proc.stderr.strip().splitlines()
        assert "needs a terminal" in line and "show, explain and report" in line


def test_view_of_a_folder_without_runs_says_what_explain_says(tmp_path):
    empty = tmp_path / "nothing-here"
    (empty / "sub").mkdir(parents=True)
    view, explain = _tracekit("view", str(empty)), _tracekit("explain", str(empty))
    assert view.returncode == explain.returncode == 2
    assert view.stderr.strip() == explain.stderr.strip() and len(view.stderr.strip().splitlines()) == 1
    with pytest.raises(RunNotFoundError):
        first_target(empty)


def test_a_folder_of_runs_and_no_argument_open_the_picker(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "probe").symlink_to(SAMPLE)
    assert first_target(runs) == ("picker", [runs])
    assert first_target(SAMPLE) == ("run", SAMPLE)
    monkeypatch.chdir(tmp_path)
    kind, dirs = first_target(None)  # ./runs holds a run: the picker over it and the samples
    assert kind == "picker" and Path("runs") in dirs


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its threads so far (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to read a process's CPU time")
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="samples/h200-gemm-probe is not in this checkout")
def test_view_idle_in_a_pseudo_terminal_uses_almost_no_cpu(terminal):
    ui = terminal([PY, "-m", "tracekit", "view", str(SAMPLE)])
    # wait until the overview has painted and gone quiet (its data is read by a worker after the first paint)
    painted = ui.painted(lambda out: b"h200" in out.lower())
    assert b"h200" in painted.lower(), painted[-2000:]
    before = _cpu_seconds(ui.proc.pid)
    ui.drain(5.0)
    used = _cpu_seconds(ui.proc.pid) - before
    assert used < 0.5, f"view used {used:.2f} s of CPU in 5 s idle"
    assert ui.quit(tries=1, wait=10) == 0
