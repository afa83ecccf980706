"""``tracekit capture`` on CPU: exact tool command lines, tool discovery over a fake install tree (real shell
scripts), and real captures of real commands that succeed, crash, hang, get killed or interrupted."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from tracekit.analyzers.store import read_frame
from tracekit.collectors import tools
from tracekit.collectors.capture import (
    SITE_DIR,
    TORCHPROF_PY,
    CaptureInterrupted,
    capture,
    python_target,
)
from tracekit.collectors.torchprof import FAILURE_KEYS
from tracekit.errors import BadInputError, MissingToolError
from tracekit.frames import FAILURES
from tracekit.run import Run

PY = sys.executable


def _exe(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _fake_version(path: Path, version: str) -> Path:
    return _exe(
        path,
        f'if [ "$1" = "--version" ]; then echo "NVIDIA (R) Tool"; echo "Version {version} (build 1)"; exit 0; fi\nexit 0\n',
    )


def _no_tools_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env["PATH"] = f"{Path(PY).parent}:/usr/bin:/bin"
    return env


# --- command lines -------------------------------------------------------------------------------------------
def test_ncu_command_exact():
    assert tools.ncu_command("/x/ncu", "/r/raw/ncu", ["python", "b.py", "--n", "3"]) == [
        "/x/ncu",
        "--nvtx",
        "--nvtx-include",
        "regex:tracekit@.+/",
        "--section",
        "SpeedOfLight",
        "--section",
        "Occupancy",
        "--section",
        "LaunchStats",
        "--section",
        "ComputeWorkloadAnalysis",
        "--section",
        "MemoryWorkloadAnalysis",
        "--section",
        "WarpStateStats",
        "--metrics",
        "gpc__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum,"
        r"regex:^sm__ops_path_tensor_src_((fp|bf|tf|int)[0-9]+_?)+(dst_(fp|bf)[0-9]+)?\.sum$,"
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum,"
        "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
        "--clock-control",
        "none",
        "--target-processes",
        "all",
        "-o",
        "/r/raw/ncu",
        "--force-overwrite",
        "python",
        "b.py",
        "--n",
        "3",
    ]


def test_ncu_command_options():
    assert tools.ncu_command(
        "ncu",
        "o",
        ["./a"],
        sections=["SpeedOfLight"],
        metrics=(),
        nvtx_include=None,
        clock_control="base",
        launch_count=5,
        extra=["--cache-control", "all"],
    ) == [
        "ncu",
        "--section",
        "SpeedOfLight",
        "--clock-control",
        "base",
        "--target-processes",
        "all",
        "--launch-count",
        "5",
        "-o",
        "o",
        "--force-overwrite",
        "--cache-control",
        "all",
        "./a",
    ]
    with pytest.raises(BadInputError, match="clock control"):
        tools.ncu_command("ncu", "o", ["./a"], clock_control="boost")
    with pytest.raises(BadInputError):
        tools.ncu_command("ncu", "o", [])


def test_nsys_commands_exact():
    assert tools.nsys_command("/n/nsys", "/r/raw/nsys", ["python3", "bench.py"]) == [
        "/n/nsys",
        "profile",
        "-t",
        "cuda,nvtx",
        "-s",
        "none",
        "--cpuctxsw=none",
        "--cuda-graph-trace=node",
        "--export=sqlite",
        "-o",
        "/r/raw/nsys",
        "--force-overwrite",
        "true",
        "python3",
        "bench.py",
    ]
    # the user's own --cuda-graph-trace replaces tracekit's instead of following it
    own = tools.nsys_command("n", "o", ["./a"], extra=["--cuda-graph-trace=graph"])
    assert [a for a in own if a.startswith("--cuda-graph-trace")] == ["--cuda-graph-trace=graph"]
    assert own[-2:] == ["--cuda-graph-trace=graph", "./a"]
    assert tools.nsys_export_command("nsys", "/r/raw/nsys.nsys-rep") == [
        "nsys",
        "export",
        "--type",
        "sqlite",
        "--force-overwrite",
        "true",
        "-o",
        "/r/raw/nsys.sqlite",
        "/r/raw/nsys.nsys-rep",
    ]


def test_max_per_range_env():
    assert tools.max_per_range({}) == 2
    assert tools.max_per_range({"TRACEKIT_NCU_MAX_PER_RANGE": "5"}) == 5
    with pytest.raises(BadInputError):
        tools.max_per_range({"TRACEKIT_NCU_MAX_PER_RANGE": "many"})
    with pytest.raises(BadInputError):
        tools.max_per_range({"TRACEKIT_NCU_MAX_PER_RANGE": "0"})


def test_python_target():
    assert python_target(["python", "-u", "b.py", "-x"]) == (["python", "-u"], ["b.py", "-x"])
    assert python_target(["python3.12", "-X", "dev", "-m", "pkg.b", "1"]) == (
        ["python3.12", "-X", "dev"],
        ["-m", "pkg.b", "1"],
    )
    assert python_target(["bench.py", "1"]) == ([sys.executable], ["bench.py", "1"])
    assert python_target(["python", "-c", "pass"]) is None
    assert python_target(["./gemm", "1"]) is None


def test_failure_keys_match_frame():
    assert list(FAILURE_KEYS) == [c.name for c in FAILURES.columns if c.name != "failure_id"]


# --- discovery -------------------------------------------------------------------------------------------------
def test_find_ncu_newest_version_dir(tmp_path):
    _fake_version(tmp_path / "opt/nvidia/nsight-compute/2024.3.2/ncu", "2024.3.2.0")
    _fake_version(tmp_path / "opt/nvidia/nsight-compute/2025.10.1/ncu", "2025.10.1.0")
    _fake_version(tmp_path / "opt/nvidia/nsight-compute/2025.9.0/ncu", "2025.9.0.0")
    tool = tools.find_ncu(env={"PATH": ""}, root=tmp_path)
    assert tool.path == tmp_path / "opt/nvidia/nsight-compute/2025.10.1/ncu"
    assert tool.version == "2025.10.1.0"
    # /usr/local/cuda/bin comes before /opt; PATH before both; the env var before PATH; the option before all
    _fake_version(tmp_path / "usr/local/cuda/bin/ncu", "2025.3.1.0")
    assert tools.find_ncu(env={"PATH": ""}, root=tmp_path).version == "2025.3.1.0"
    _fake_version(tmp_path / "bin1/ncu", "2023.1.0.0")
    assert tools.find_ncu(env={"PATH": str(tmp_path / "bin1")}, root=tmp_path).found_via == "PATH"
    mine = _fake_version(tmp_path / "mine/ncu", "2022.4.0.0")
    env = {"PATH": str(tmp_path / "bin1"), "TRACEKIT_NCU": str(mine)}
    assert tools.find_ncu(env=env, root=tmp_path).version == "2022.4.0.0"
    other = _fake_version(tmp_path / "other/ncu", "2021.1.0.0")
    assert tools.find_ncu(other, env=env, root=tmp_path).version == "2021.1.0.0"


def test_find_tool_missing_says_how(tmp_path):
    with pytest.raises(MissingToolError) as info:
        tools.find_ncu(env={"PATH": ""}, root=tmp_path)
    assert info.value.exit_code == 3
    assert "/usr/local/cuda/bin" in info.value.message and "--ncu-path" in info.value.hint
    with pytest.raises(MissingToolError, match="not an executable"):
        tools.find_ncu(tmp_path / "nope", env={"PATH": ""}, root=tmp_path)
    # a wrong TRACEKIT_NSYS is an error, not a reason to look elsewhere
    _fake_version(tmp_path / "usr/local/cuda/bin/nsys", "2025.3.1.90")
    with pytest.raises(MissingToolError, match="TRACEKIT_NSYS"):
        tools.find_nsys(env={"PATH": "", "TRACEKIT_NSYS": str(tmp_path / "gone")}, root=tmp_path)


def test_find_nsys_inside_nsight_compute_and_libdw(tmp_path):
    host = tmp_path / "opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64"
    _fake_version(host / "nsys", "2025.3.1.90-253135822229v0")
    # a real loader failure, reproduced: the importer starts only if libdw.so.1 is on LD_LIBRARY_PATH
    _exe(
        host / "QdstrmImporter",
        'IFS=:\nfor d in $LD_LIBRARY_PATH; do [ -f "$d/libdw.so.1" ] && exit 0; done\n'
        'echo "QdstrmImporter: error while loading shared libraries: libdw.so.1: cannot open shared object '
        'file: No such file or directory" >&2\nexit 127\n',
    )
    tool = tools.find_nsys(env={"PATH": ""}, root=tmp_path)
    assert tool.path == host / "nsys" and tool.version == "2025.3.1.90"
    assert tool.found_via == "Nsight Compute's copy of nsys"
    with pytest.raises(MissingToolError) as info:
        tools.require_nsys_importer(tool, env={"PATH": ""})
    assert "libdw.so.1" in info.value.message and "TRACEKIT_NSYS_LIBS" in info.value.hint
    libs = tmp_path / "nsys-libs"
    libs.mkdir()
    (libs / "libdw.so.1").write_bytes(b"")
    tools.require_nsys_importer(tool, env={"PATH": "", "TRACEKIT_NSYS_LIBS": str(libs)})
    assert tools.nsys_env({"TRACEKIT_NSYS_LIBS": str(libs), "LD_LIBRARY_PATH": "/a"})["LD_LIBRARY_PATH"] == (
        f"{libs}:/a"
    )
    # a full Nsight Systems install is found too
    _fake_version(tmp_path / "opt/nvidia/nsight-systems/2025.5.1/bin/nsys", "2025.5.1.1")
    other = tmp_path / "empty"
    other.mkdir()
    _fake_version(other / "opt/nvidia/nsight-systems/2025.5.1/bin/nsys", "2025.5.1.1")
    assert tools.find_nsys(env={"PATH": ""}, root=other).version == "2025.5.1.1"


# --- real captures ---------------------------------------------------------------------------------------------
def _quiet(stream: str, data: bytes) -> None:
    pass


def _capture(tmp_path: Path, code: str, **kw) -> Run:
    kw.setdefault("env", _no_tools_env(tmp_path))
    kw.setdefault("on_output", _quiet)
    return capture([PY, "-c", code], runs_dir=tmp_path / "runs", **kw)


def _failures(run: Run) -> list[dict]:
    path = run.raw_dir / "failures.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_plain_capture(tmp_path):
    events = []
    run = _capture(
        tmp_path,
        # one write each, stdout flushed first: both streams go to one log, and unbuffered print() writes its
        # arguments separately, so stderr could land between 'out' and the path
        "import os, sys; sys.stdout.write('out ' + os.environ['TRACEKIT_RUN_DIR'] + '\\n'); sys.stdout.flush(); "
        "sys.stderr.write('err\\n')",
        on_event=events.append,
    )
    reopened = Run.open(run.path)
    assert reopened.status == "complete" and reopened.manifest["incomplete_reason"] is None
    assert reopened.manifest["command"][0] == PY
    assert reopened.manifest["capture"]["tools"] == ["plain"]
    log = (run.raw_dir / "plain.log").read_text()
    assert f"out {run.path.absolute()}" in log and "err" in log
    assert any("running the command plainly" in e.message for e in events if e.kind == "warning")
    phases = [(e["phase"], e["level"]) for e in reopened.manifest["events"]]
    assert ("plain", "start") in phases and ("plain", "done") in phases
    assert "python" in reopened.manifest["environment"]


def test_segfault_keeps_run_incomplete(tmp_path):
    run = _capture(tmp_path, "print('before', flush=True); import ctypes; ctypes.string_at(0)")
    run = Run.open(run.path)
    assert run.status == "incomplete"
    assert "killed by SIGSEGV" in run.manifest["incomplete_reason"]
    assert "before" in (run.raw_dir / "plain.log").read_text()
    (fail,) = _failures(run)
    assert fail["kind"] == "crashed" and fail["error_type"] == "SIGSEGV"
    assert set(fail) == set(FAILURE_KEYS)
    assert run.manifest["capture"]["passes"][0]["exit_code"] == -signal.SIGSEGV


def test_nonzero_exit_keeps_artifacts(tmp_path):
    code = (
        "import os, pathlib; d = pathlib.Path(os.environ['TRACEKIT_RUN_DIR']) / 'raw';"
        "(d / 'measurements.jsonl').write_text('{}\\n'); raise SystemExit(7)"
    )
    run = Run.open(_capture(tmp_path, code).path)
    assert run.status == "incomplete" and "exit status 7" in run.manifest["incomplete_reason"]
    assert (run.raw_dir / "measurements.jsonl").read_text() == "{}\n"
    assert "raw/measurements.jsonl" in run.manifest["capture"]["passes"][0]["files"]


def test_timeout_stops_a_hang(tmp_path):
    start = time.monotonic()
    run = _capture(
        tmp_path, "import time; print('waiting', flush=True); time.sleep(60)", timeout=1.0, grace_s=2.0
    )
    assert time.monotonic() - start < 8
    run = Run.open(run.path)
    assert run.status == "incomplete" and "timed out after 1 s" in run.manifest["incomplete_reason"]
    assert run.manifest["capture"]["passes"][0]["timed_out"] is True
    assert _failures(run)[0]["kind"] == "timeout"
    assert "waiting" in (run.raw_dir / "plain.log").read_text()


def test_timeout_escalates_past_ignored_sigint(tmp_path):
    code = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print('x', flush=True); time.sleep(60)"
    start = time.monotonic()
    run = _capture(tmp_path, code, timeout=0.5, grace_s=0.5)
    assert time.monotonic() - start < 8
    assert run.manifest["capture"]["passes"][0]["exit_code"] == -signal.SIGTERM


def test_sigkill(tmp_path):
    run = Run.open(_capture(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)").path)
    assert run.status == "incomplete" and "killed by SIGKILL" in run.manifest["incomplete_reason"]


def test_ctrl_c_on_the_cli(tmp_path):
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "tracekit",
            "capture",
            "--runs-dir",
            str(runs),
            "--no-import",
            "--json",
            "--",
            PY,
            "-c",
            "import time; print('ready', flush=True); time.sleep(60)",
        ],
        env=_no_tools_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 15
    log = None
    while time.monotonic() < deadline:
        logs = list(runs.glob("*/raw/plain.log"))
        if logs and "ready" in logs[0].read_text():
            log = logs[0]
            break
        time.sleep(0.05)
    assert log is not None, proc.stderr.read().decode() if proc.poll() is not None else "no run started"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err.decode()
    data = json.loads(out)
    assert data["interrupted"] is True and data["status"] == "incomplete"
    run = Run.open(log.parent.parent)
    assert run.status == "incomplete" and "interrupted (Ctrl-C)" in run.manifest["incomplete_reason"]
    assert run.manifest["capture"]["passes"][0]["interrupted"] is True


def test_ctrl_c_in_process_raises_with_run(tmp_path):
    """capture() called as a library: Ctrl-C while the program runs marks the run, then raises
    CaptureInterrupted. The SIGINT goes to a child process that calls capture(), once the profiled program says
    it is running: never to pytest itself, and never before capture() is under way."""
    marker = tmp_path / "running"
    program = f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(30)"
    driver = (
        "import json, sys\n"
        "from tracekit.collectors.capture import CaptureInterrupted, capture\n"
        "try:\n"
        f"    capture([sys.executable, '-c', {program!r}], runs_dir={str(tmp_path / 'runs')!r},\n"
        "            on_output=lambda *a: None, grace_s=2.0)\n"
        "except CaptureInterrupted as exc:\n"
        "    print(json.dumps({'run': str(exc.run.path)}))\n"
        "    sys.exit(0)\n"
        "sys.exit('capture returned without CaptureInterrupted')\n"
    )
    env = _no_tools_env(tmp_path)
    proc = subprocess.Popen(
        [PY, "-c", driver], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 20
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), proc.stderr.read() if proc.poll() is not None else "the program never started"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    run = Run.open(json.loads(out)["run"])
    assert run.status == "incomplete" and "interrupted" in run.manifest["incomplete_reason"]
    assert run.manifest["capture"]["passes"][0]["interrupted"] is True


def _interrupt_when(marker: Path, timeout: float = 120.0) -> threading.Thread:
    """SIGINT to this process (Ctrl-C) as soon as ``marker`` exists: the phase under test has started. The
    timeout is long because a loaded machine may take tens of seconds to reach that phase (each profiled
    workload starts an interpreter); it only bounds how long the watcher lives when the marker never comes."""
    # A shell starts a background job (`pytest ... &`) with SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: Ctrl-C would not reach the capture, as is right for a background job. These
    # tests are about what happens when it does reach it.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not marker.exists():
            time.sleep(0.02)
        if marker.exists():  # never a stray Ctrl-C into a later test
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def test_ctrl_c_during_the_ncu_pass_keeps_the_partial_report(tmp_path):
    marker = tmp_path / "ncu-started"
    ncu = _exe(
        tmp_path / "bin/ncu",
        'if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0"; exit 0; fi\n'
        'out=""; prev=""\nfor a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
        # the trap is set before the marker says "started": a loaded machine may not reach it within 0.1 s
        "trap 'echo ncu: interrupted; exit 130' INT\n"
        f'printf partial > "$out.ncu-rep"; touch {marker}\nsleep 30 & wait\n',
    )
    _interrupt_when(marker)
    with pytest.raises(CaptureInterrupted) as info:
        _capture(tmp_path, "pass", ncu=True, ncu_path=ncu, grace_s=5.0)
    run = Run.open(info.value.run.path)
    assert run.status == "incomplete"
    assert run.manifest["incomplete_reason"] == "interrupted (Ctrl-C) during the ncu pass"
    (p,) = run.manifest["capture"]["passes"]
    assert p["tool"] == "ncu" and p["interrupted"] is True
    assert (run.raw_dir / "ncu.ncu-rep").read_bytes() == b"partial"
    assert "ncu: interrupted" in (run.raw_dir / "ncu.log").read_text()


def test_ctrl_c_during_the_nsys_export_keeps_the_report(tmp_path):
    """nsys profiled (the .nsys-rep exists), its export is running when Ctrl-C comes: the run says so and how
    to finish by hand."""
    marker = tmp_path / "export-started"
    nsys = _exe(
        tmp_path / "bin/nsys",
        'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2025.3.1.90-1"; exit 0; fi\n'
        'out=""; prev=""\nfor a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
        f'if [ "$1" = "export" ]; then touch {marker}; exec sleep 30; fi\n'
        'printf rep > "$out.nsys-rep"\nexit 0\n',
    )
    _interrupt_when(marker)
    start = time.monotonic()
    with pytest.raises(CaptureInterrupted) as info:
        _capture(tmp_path, "pass", nsys=True, nsys_path=nsys)
    assert time.monotonic() - start < 20  # the export was stopped, not waited for
    run = Run.open(info.value.run.path)
    assert run.status == "incomplete"
    reason = run.manifest["incomplete_reason"]
    assert reason.startswith("interrupted (Ctrl-C) during the nsys export")
    assert "nsys export --type sqlite" in reason and "tracekit import --rebuild" in reason
    (p,) = run.manifest["capture"]["passes"]
    assert p["tool"] == "nsys" and p["interrupted"] is True
    assert (run.raw_dir / "nsys.nsys-rep").read_bytes() == b"rep"
    assert ("nsys-export", "error") in [(e["phase"], e["level"]) for e in run.manifest["events"]]


def test_nsys_extra_options_reach_the_command_line_and_the_manifest(tmp_path):
    """``nsys_extra`` goes after tracekit's own nsys options and before the profiled command (where nsys would
    read it as the program's), and run.json records it beside the trace setting."""
    argv_file = tmp_path / "argv"
    nsys = _exe(
        tmp_path / "bin/nsys",
        'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2025.3.1.90-1"; exit 0; fi\n'
        f'printf "%s\\n" "$@" > {argv_file}\nexit 0\n',
    )
    run = _capture(tmp_path, "pass", nsys=True, nsys_path=nsys, nsys_extra=["--resolve-symbols=false"])
    argv = argv_file.read_text().splitlines()
    raw = str(run.raw_dir.absolute() / "nsys")
    assert argv == [
        *tools.nsys_command("nsys", raw, [PY, "-c", "pass"])[1:-3],
        "--resolve-symbols=false",
        PY,
        "-c",
        "pass",
    ]
    assert run.manifest["capture"]["nsys"]["extra"] == ["--resolve-symbols=false"]
    assert run.manifest["capture"]["nsys"]["cuda_graph_trace"] == "node"
    # the CLI's repeatable --nsys-arg takes an option-looking value as is
    cli = _cli(
        [
            *["capture", "--nsys", "--nsys-path", str(nsys), "--nsys-arg", "--resolve-symbols=false"],
            *["--nsys-arg=--cuda-memory-usage=true", "--no-import", "--json", "--", PY, "-c", "pass"],
        ],
        tmp_path,
    )
    assert json.loads(cli.stdout)["run"], cli.stderr
    argv = argv_file.read_text().splitlines()
    assert argv[-5:] == ["--resolve-symbols=false", "--cuda-memory-usage=true", PY, "-c", "pass"]
    # a --cuda-graph-trace of the user's replaces tracekit's, and run.json says which one ran
    cli = _cli(
        [
            *["capture", "--nsys", "--nsys-path", str(nsys), "--nsys-arg=--cuda-graph-trace=graph"],
            *["--no-import", "--json", "--", PY, "-c", "pass"],
        ],
        tmp_path,
    )
    argv = argv_file.read_text().splitlines()
    assert [a for a in argv if a.startswith("--cuda-graph-trace")] == ["--cuda-graph-trace=graph"]
    ran = Run.open(tmp_path / json.loads(cli.stdout)["run"])  # relative to the CLI's cwd
    assert ran.manifest["capture"]["nsys"]["cuda_graph_trace"] == "graph"


def test_ncu_arg_reaches_the_command_line_and_the_manifest(tmp_path):
    """``--ncu-arg`` (repeatable) goes after tracekit's ncu options, right before the profiled command."""
    argv_file = tmp_path / "argv"
    ncu = _exe(
        tmp_path / "bin/ncu",
        'if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0"; exit 0; fi\n'
        f'printf "%s\\n" "$@" > {argv_file}\nexit 0\n',
    )
    cli = _cli(
        [
            *["capture", "--ncu", "--ncu-path", str(ncu), "--ncu-arg=--cache-control=none"],
            *["--ncu-arg", "--replay-mode=application", "--no-import", "--json", "--", PY, "-c", "pass"],
        ],
        tmp_path,
    )
    argv = argv_file.read_text().splitlines()
    assert argv[-5:] == ["--cache-control=none", "--replay-mode=application", PY, "-c", "pass"]
    run = Run.open(tmp_path / json.loads(cli.stdout)["run"])
    assert run.manifest["capture"]["ncu"]["extra"] == ["--cache-control=none", "--replay-mode=application"]


def _bench_records(samples_dir: Path, n: int) -> str:
    lines = (samples_dir / "h200-bench-gemm/raw/measurements.jsonl").read_text().splitlines()
    return "\n".join(lines[:n]) + "\n"


def test_ctrl_c_mid_benchmark_then_import_completes_it(tmp_path, samples_dir):
    """The benchmark wrote 5 real records, then Ctrl-C: the run is incomplete, holds them, and a later
    `tracekit import --rebuild` builds frames with those 5 measurements."""
    from tracekit.cli import main

    records = tmp_path / "records.jsonl"
    records.write_text(_bench_records(samples_dir, 5))
    marker = tmp_path / "wrote"
    code = (
        "import os, pathlib, shutil, time\n"
        f"shutil.copy({str(records)!r}, pathlib.Path(os.environ['TRACEKIT_RUN_DIR']) / 'raw/measurements.jsonl')\n"
        f"pathlib.Path({str(marker)!r}).touch()\n"
        "time.sleep(30)\n"
    )
    _interrupt_when(marker)
    with pytest.raises(CaptureInterrupted) as info:
        _capture(tmp_path, code, grace_s=2.0)
    run = Run.open(info.value.run.path)
    assert run.status == "incomplete" and "interrupted" in run.manifest["incomplete_reason"]
    assert len((run.raw_dir / "measurements.jsonl").read_text().splitlines()) == 5
    assert not run.frames_current()
    main(["import", "--rebuild", str(run.path)])  # returns (exit 0)
    run = Run.open(run.path)
    assert run.frames_current() and read_frame(run, "measurements").height == 5


def test_ctrl_c_while_building_frames(tmp_path, samples_dir, monkeypatch, capsys):
    """Ctrl-C after the capture, while the importer writes frames (here: after the first frame file): exit 130,
    the run and its raw files kept, no frames recorded as current; `import --rebuild` builds them."""
    from tracekit.cli import main

    records = tmp_path / "records.jsonl"
    records.write_text(_bench_records(samples_dir, 5))
    code = (
        "import os, pathlib, shutil\n"
        f"shutil.copy({str(records)!r}, pathlib.Path(os.environ['TRACEKIT_RUN_DIR']) / 'raw/measurements.jsonl')\n"
    )
    from tracekit.analyzers import store

    real = store.write_frame
    written: list[str] = []

    def write_then_ctrl_c(run, name, df, **kw):  # a Ctrl-C that lands between two frame files
        real(run, name, df, **kw)
        written.append(name)
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "write_frame", write_then_ctrl_c)
    for k in [k for k in os.environ if k.startswith("TRACEKIT_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("PATH", f"{Path(PY).parent}:/usr/bin:/bin")
    with pytest.raises(SystemExit) as exc:
        main(["capture", "--runs-dir", str(tmp_path / "runs"), "--json", "--", PY, "-c", code])
    # frames are written a few at a time: those under way when the Ctrl-C lands finish, no other starts
    assert exc.value.code == 130 and 1 <= len(written) <= store.WRITE_THREADS
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["interrupted"] is True and "import --rebuild" in data["import_problem"]
    assert "Traceback" not in out.err
    run = Run.open(Path(data["run"]))
    assert run.status == "complete" and not run.frames_current()
    assert any(e["phase"] == "import" and e["level"] == "error" for e in run.manifest["events"])
    monkeypatch.setattr(store, "write_frame", real)
    main(["import", "--rebuild", str(run.path)])  # returns (exit 0)
    run = Run.open(run.path)
    assert run.frames_current() and read_frame(run, "measurements").height == 5


def test_two_captures_at_once(tmp_path):
    runs = tmp_path / "runs"
    cmd = [PY, "-m", "tracekit", "capture", "--runs-dir", str(runs), "--no-import", "--json", "--"]
    procs = [
        subprocess.Popen(
            [*cmd, PY, "-c", f"import time; time.sleep(0.3); print('job{i}')"],
            env=_no_tools_env(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        for i in range(2)
    ]
    results = [json.loads(p.communicate(timeout=30)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    paths = {r["run"] for r in results}
    assert len(paths) == 2 and len(list(runs.iterdir())) == 2
    for i, r in enumerate(results):
        assert f"job{i}" in (Path(r["run"]) / "raw/plain.log").read_text()


def test_fake_ncu_tool_error(tmp_path):
    ncu = _exe(
        tmp_path / "bin/ncu",
        'if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0"; exit 0; fi\n'
        'out=""; prev=""\nfor a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
        'echo "max=$TRACEKIT_NCU_MAX_PER_RANGE tool=$TRACEKIT_CAPTURE_TOOL"\n'
        'printf partial > "$out.ncu-rep"\n'
        'echo "==ERROR== Failed to profile \\"nvjet\\" in process 42" >&2\nexit 1\n',
    )
    run = _capture(tmp_path, "print('never run by the fake')", ncu=True, ncu_path=ncu, max_per_range=3)
    run = Run.open(run.path)
    assert run.status == "incomplete"
    reason = run.manifest["incomplete_reason"]
    assert "exit status 1" in reason and "Failed to profile" in reason
    assert (run.raw_dir / "ncu.ncu-rep").read_bytes() == b"partial"
    log = (run.raw_dir / "ncu.log").read_text()
    assert "max=3 tool=ncu" in log
    settings = run.manifest["capture"]["ncu"]
    assert settings["version"] == "2025.3.1.0" and settings["clock_control"] == "none"
    assert settings["nvtx_include"] == "regex:tracekit@.+/" and settings["max_per_range"] == 3
    (p,) = run.manifest["capture"]["passes"]
    assert p["argv"] == tools.ncu_command(
        ncu, run.raw_dir.absolute() / "ncu", [PY, "-c", "print('never run by the fake')"]
    )


def test_ncu_profiled_nothing(tmp_path):
    ncu = _exe(
        tmp_path / "bin/ncu",
        'if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0"; exit 0; fi\n'
        'echo "==WARNING== No kernels were profiled."\nexit 0\n',
    )
    run = _capture(tmp_path, "pass", ncu=True, ncu_path=ncu)
    assert run.status == "incomplete" and "ncu profiled no kernels" in run.manifest["incomplete_reason"]


def test_fake_nsys_export_and_qdstrm(tmp_path):
    # profile leaves only a .nsys-rep; capture runs `nsys export` to make the .sqlite
    nsys = _exe(
        tmp_path / "bin/nsys",
        'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2025.3.1.90-1"; exit 0; fi\n'
        'out=""; prev=""\nfor a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
        'if [ "$1" = "export" ]; then printf sqlite > "$out"; exit 0; fi\n'
        'if [ -n "$QDSTRM_ONLY" ]; then printf q > "$out.qdstrm"; exit 0; fi\n'
        'printf rep > "$out.nsys-rep"\nexit 0\n',
    )
    env = _no_tools_env(tmp_path)
    run = _capture(tmp_path, "pass", nsys=True, nsys_path=nsys, env=env)
    assert run.status == "complete", run.manifest["incomplete_reason"]
    assert (run.raw_dir / "nsys.sqlite").read_bytes() == b"sqlite"
    assert any(e["phase"] == "nsys-export" for e in run.manifest["events"])
    run = _capture(tmp_path, "pass", nsys=True, nsys_path=nsys, env={**env, "QDSTRM_ONLY": "1"})
    assert run.status == "incomplete"
    assert (
        ".qdstrm" in run.manifest["incomplete_reason"]
        and "TRACEKIT_NSYS_LIBS" in run.manifest["incomplete_reason"]
    )


def test_bad_input_creates_nothing(tmp_path):
    env = _no_tools_env(tmp_path)
    with pytest.raises(BadInputError, match="not found"):
        capture(["no-such-command-xyz"], runs_dir=tmp_path / "runs", env=env)
    with pytest.raises(MissingToolError):
        capture([PY, "-c", "pass"], ncu=True, runs_dir=tmp_path / "runs", env=env)
    with pytest.raises(BadInputError, match="Python command"):
        capture(["/bin/true"], torch_profiler=True, runs_dir=tmp_path / "runs", env=env)
    assert not (tmp_path / "runs").exists()


@pytest.mark.skipif(not (SITE_DIR / "sitecustomize.py").is_file(), reason="collectors/site not written yet")
def test_instrument_puts_site_first(tmp_path):
    run = _capture(tmp_path, "import os; print('PP=' + os.environ['PYTHONPATH'])", instrument=True)
    assert f"PP={SITE_DIR}" in (run.raw_dir / "plain.log").read_text()


# --- the PyTorch-profiler driver ------------------------------------------------------------------------------
FAKE_TORCH = {
    "torch/__init__.py": ("__version__ = '0.0+fake'\nfrom . import autograd, cuda, version\n"),
    "torch/version.py": "cuda = None\n",
    "torch/cuda.py": "def is_available():\n    return False\n",
    "torch/autograd/__init__.py": "from . import profiler\n",
    "torch/autograd/profiler.py": (
        "import json, os\n"
        "class profile:\n"
        "    def __init__(self, use_cpu=True, use_device=None, use_kineto=False, record_shapes=False):\n"
        "        assert use_cpu and use_kineto and use_device is None  # no CUDA in this fake\n"
        "    def __enter__(self):\n        return self\n"
        "    def __exit__(self, *a):\n        return False\n"
        "    def export_chrome_trace(self, path):\n"
        "        with open(path, 'w') as f:\n"
        "            json.dump({'traceEvents': [{'name': 'fake', 'ph': 'X', 'ts': 1, 'dur': 2,\n"
        "                       'args': {'rf': os.environ.get('TRACEKIT_RECORD_FUNCTION')}}]}, f)\n"
    ),
}


def _fake_torch(tmp_path: Path) -> Path:
    root = tmp_path / "faketorch"
    for rel, text in FAKE_TORCH.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_torch_profiler_pass_exports_even_when_script_raises(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text(
        "import sys\nimport torch\nsys.stdout.write(f'argv {sys.argv[1:]}\\n')  # one write: the log interleaves streams\n"
        "raise ValueError('shape 1x2 unsupported')\n"
    )
    env = {**_no_tools_env(tmp_path), "PYTHONPATH": str(_fake_torch(tmp_path))}
    run = capture(
        [PY, str(script), "--m", "16"],
        torch_profiler=True,
        runs_dir=tmp_path / "runs",
        env=env,
        on_output=_quiet,
    )
    run = Run.open(run.path)
    assert run.status == "incomplete" and "exit status 1" in run.manifest["incomplete_reason"]
    with gzip.open(run.raw_dir / "torch_trace.json.gz", "rt") as f:
        trace = json.load(f)
    assert trace["traceEvents"][0]["args"]["rf"] == "1"
    (fail,) = _failures(run)  # the driver's own record; capture adds none on top
    assert fail["error_type"] == "ValueError" and fail["message"] == "shape 1x2 unsupported"
    assert fail["kind"] == "crashed" and "raise ValueError" in fail["traceback"]
    log = (run.raw_dir / "torch.log").read_text()
    assert "argv ['--m', '16']" in log
    # the exact pass: the runner by path, operators with their shapes by default, recorded in the run's settings
    (torch_pass,) = run.manifest["capture"]["passes"]
    assert torch_pass["argv"] == [
        PY,
        str(TORCHPROF_PY),
        "--ops",
        "shapes",
        "--out",
        str((run.raw_dir / "torch_trace.json.gz").absolute()),
        "--failures",
        str((run.raw_dir / "failures.jsonl").absolute()),
        "--",
        str(script),
        "--m",
        "16",
    ]
    assert run.manifest["capture"]["torch_profiler"]["cpu_events"] == "shapes"
    # this fake torch records no shapes: the runner's summary says it recorded every operator
    assert "tracekit torchprof (all): profiler start" in log
    # ranges only: this fake torch has no scoped profiler API, the runner says so and records every operator
    run = capture(
        [PY, str(script)], torch_profiler=True, torch_ops="ranges", runs_dir=tmp_path / "runs", env=env,
        on_output=_quiet,
    )  # fmt: skip
    log = (run.raw_dir / "torch.log").read_text()
    assert run.manifest["capture"]["passes"][0]["argv"][2:4] == ["--ops", "ranges"]
    assert "cannot limit the recorded scopes" in log and "recording every operator" in log


def _torchprof(out: Path | str, target: list[str], **kw) -> subprocess.CompletedProcess[str]:
    """The PyTorch-profiler runner, as a capture starts it, on ``target`` (a script and its arguments)."""
    cmd = [PY, "-m", "tracekit.collectors.torchprof", "--out", str(out), "--", *target]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)


def test_torchprof_starts_at_the_programs_import_of_torch(tmp_path):
    """The profiler starts when the program's ``import torch`` completes: the runner itself imports nothing of
    torch, a program that never imports it leaves an empty trace that says why, and one that does gets torch with
    its usual loader and spec (only that one import was watched)."""
    env = {**_no_tools_env(tmp_path), "PYTHONPATH": str(_fake_torch(tmp_path))}
    idle = tmp_path / "idle.py"
    idle.write_text("import sys\nprint('torch loaded:', 'torch' in sys.modules)\n")
    proc = _torchprof(tmp_path / "idle.json.gz", [str(idle)], env=env)
    assert proc.returncode == 0, proc.stderr
    assert "torch loaded: False" in proc.stdout
    assert "the program never imported torch" in proc.stderr
    with gzip.open(tmp_path / "idle.json.gz", "rt") as f:
        trace = json.load(f)
    assert trace["traceEvents"] == [] and "never imported torch" in trace["tracekit_note"]

    user = tmp_path / "user.py"
    user.write_text(
        "import importlib.util, sys\n"
        "assert importlib.util.find_spec('torch')\n"  # a probe, as availability checks do: no import yet
        "import torch.autograd\n"  # a submodule first: torch itself is what starts the profiler
        "print('loader', type(torch.__loader__).__name__, torch.__spec__.name)\n"
        "print('watching', any(type(f).__name__ == '_StartOnImport' for f in sys.meta_path))\n"
    )
    proc = _torchprof(tmp_path / "user.json", [str(user)], env=env)
    assert proc.returncode == 0, proc.stderr
    assert "loader SourceFileLoader torch" in proc.stdout and "watching False" in proc.stdout
    assert json.loads((tmp_path / "user.json").read_text())["traceEvents"][0]["name"] == "fake"
    assert re.search(r"profiler start [0-9.]+ s, program [0-9.]+ s", proc.stderr), proc.stderr


def test_torchprof_without_torch(tmp_path):
    env = _no_tools_env(tmp_path)
    env.pop("PYTHONPATH", None)
    probe = subprocess.run([PY, "-c", "import torch"], env=env, capture_output=True, check=False)
    if probe.returncode == 0:
        pytest.skip("torch is installed here")
    script = tmp_path / "s.py"
    script.write_text("print('hi')\n")
    proc = _torchprof(tmp_path / "t.json.gz", [str(script)], env=env)
    assert proc.returncode == 3 and "torch cannot be imported" in proc.stderr


@pytest.mark.parametrize("ops", ["ranges", "shapes", "all"])
def test_torchprof_with_cpu_torch_writes_ranges_and_says_where_its_time_goes(tmp_path, ops):
    """The real runner and the real PyTorch profiler (a CPU build is enough): the trace holds the tracekit range of
    every launch, and stderr breaks the profiler's own time down (start, program, stop, export). By default the
    runner's CPU side records ranges only, no ATen operator events; ``--ops all`` (here through the environment)
    keeps them; ``--ops shapes`` (capture's default) keeps them with their input shapes, read as GEMM op ranges."""
    pytest.importorskip("torch")
    from tracekit.analyzers.importer import read_file

    script = tmp_path / "s.py"
    script.write_text(
        "import torch\n"
        "from tracekit.collectors.ranges import gemm_range\n"
        "a = torch.randn(32, 48)\n"
        "b = torch.randn(48, 16)\n"
        "for _ in range(5):\n"
        "    with gemm_range('torch-fp32', 'mm', 32, 16, 48, 'fp32', 'fp32', 'fp32'):\n"
        "        torch.mm(a, b)\n"
    )
    out = tmp_path / "t.json"
    env = {**os.environ, "TRACEKIT_TORCH_OPS": ops}
    proc = _torchprof(out, [str(script)], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert re.search(
        rf"torchprof \({ops}\): profiler start [0-9.]+ s, program [0-9.]+ s, stop [0-9.]+ s, export [0-9.]+ s",
        proc.stderr,
    ), proc.stderr
    ex = read_file(out)
    names = ex.frames["ranges"]["name"].to_list()
    assert sum(n.startswith("gemm backend=torch-fp32 op=mm M=32 N=16 K=48") for n in names) == 5, names
    events = json.loads(out.read_text())["traceEvents"]
    mm_ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("name") == "aten::mm"]
    assert len(mm_ops) == (0 if ops == "ranges" else 5), len(mm_ops)
    assert all(("Input Dims" in e["args"]) == (ops == "shapes") for e in mm_ops)
    shaped = ex.frames["ranges"].filter(pl.col("range_kind") == "gemm-op").drop_nulls("m")
    assert shaped.select("m", "n", "k").rows() == ([(32, 16, 48)] * 5 if ops == "shapes" else [])


def test_torchprof_rejects_an_unknown_ops_setting(tmp_path):
    env = {**os.environ, "TRACEKIT_TORCH_OPS": "some"}
    proc = _torchprof(tmp_path / "t.json", ["x.py"], env=env)
    assert (
        proc.returncode == 2 and "TRACEKIT_TORCH_OPS='some' is not one of: ranges, shapes, all" in proc.stderr
    )


# --- the CLI --------------------------------------------------------------------------------------------------
def _cli(args: list[str], tmp_path: Path, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "tracekit", *args],
        env=_no_tools_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        **kw,
    )


def test_cli_help_and_exit_codes(tmp_path):
    help_text = _cli(["capture", "--help"], tmp_path).stdout
    for needle in ("Examples:", "--ncu", "TRACEKIT_NSYS_LIBS", "ERR_NVGPUCTRPERM", "130"):
        assert needle in help_text
    missing = _cli(["capture", "--ncu", "--", PY, "-c", "pass"], tmp_path)
    assert missing.returncode == 3 and "ncu not found" in missing.stderr
    failing = _cli(
        ["capture", "--no-import", "--json", "--", PY, "-c", "print('hi'); raise SystemExit(2)"], tmp_path
    )
    assert failing.returncode == 4
    data = json.loads(failing.stdout)  # stdout holds the JSON only: the child's 'hi' went to stderr
    assert data["status"] == "incomplete" and "exit status 2" in data["incomplete_reason"]
    assert "hi" in failing.stderr


def test_capture_path_imports_without_polars_rich_textual():
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('polars', 'rich', 'textual'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import tracekit.collectors.capture, tracekit.collectors.tools, tracekit.collectors.torchprof\n"
        "print('ok')\n"
    )
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


@pytest.mark.parametrize(
    ("given", "env_value", "recorded"),
    [(["--trace-repeats", "5"], "5", 5), (["--trace-repeats", "all"], "all", "all"), ([], "3", 3)],
)
def test_cli_trace_repeats_reaches_the_profiled_program(tmp_path, given, env_value, recorded):
    """--trace-repeats is handed to the PyTorch-profiler pass (where a tracekit benchmark's workers read it) and
    recorded in run.json; 3 by default."""
    script = tmp_path / "show.py"
    script.write_text("import os\nimport torch\nprint('repeats=' + os.environ['TRACEKIT_TRACE_REPEATS'])\n")
    env = {**_no_tools_env(tmp_path), "PYTHONPATH": str(_fake_torch(tmp_path))}
    argv = [
        "capture",
        "--torch-profiler",
        *given,
        "--no-import",
        "-o",
        str(tmp_path / "run"),
        "--",
        PY,
        str(script),
    ]
    proc = subprocess.run(
        [PY, "-m", "tracekit", *argv], env=env, capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"repeats={env_value}" in (tmp_path / "run" / "raw" / "torch.log").read_text()
    assert Run.open(tmp_path / "run").manifest["capture"]["torch_profiler"]["trace_repeats"] == recorded


def test_cli_trace_repeats_rejects_bad_values(tmp_path):
    for bad in ("0", "three"):
        proc = _cli(["capture", "--torch-profiler", "--trace-repeats", bad, "--", PY, "bench.py"], tmp_path)
        assert proc.returncode == 2 and "--trace-repeats" in proc.stderr and "Traceback" not in proc.stderr
        assert not (tmp_path / "runs").exists()
