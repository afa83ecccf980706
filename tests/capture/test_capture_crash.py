"""A program that crashes, dies of a CUDA fault or hangs under ``tracekit capture``: real child processes that
die by SIGSEGV / SIGABRT / a raised CUDA error / a timeout, after writing breadcrumbs in the instrument wrapper's
format (collectors/crash.py), under no profiler or fake nsys / ncu tools (real shell scripts that run the program);
also how the program's output is kept apart from the profiler's, and ``--ranges``."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.analyzers.importer import import_into
from tracekit.analyzers.store import read_frame
from tracekit.collectors import crash, tools
from tracekit.collectors.breadcrumb import V1_SLOT_BYTES
from tracekit.collectors.capture import SITE_DIR, capture, is_python_command, ranges_filter
from tracekit.errors import BadInputError
from tracekit.run import Run

PY = sys.executable

# What a test program runs first: a breadcrumb writer in the wrapper's first file format (v1: 64 slots x 512 bytes,
# state byte then JSON then NUL padding; still read), written by the program itself since the wrapper is not part
# of this test (tests/capture/test_breadcrumb.py covers the wrapper's v2 files).
CRUMBS = r"""
import json, os, time, threading
_dir = os.environ["TRACEKIT_BREADCRUMB_DIR"]
_path = os.path.join(_dir, f"breadcrumb.{os.getpid()}.bin")
_fd = os.open(_path, os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(_fd, 64 * 512)
_seq = [0]
def crumb(state, slot, backend, m, n, k, a, b, out, caller):
    _seq[0] += 1
    obj = {"v": 1, "pid": os.getpid(), "tid": threading.get_ident(), "seq": _seq[0], "t": time.time(),
           "backend": backend, "op": "mm", "m": m, "n": n, "k": k, "dtype_a": a, "dtype_b": b,
           "dtype_out": out, "scale": None, "range": f"gemm {backend} M={m}", "caller": caller}
    body = state.encode() + json.dumps(obj).encode()
    os.pwrite(_fd, body + b"\0" * (512 - len(body)), slot * 512)
"""

GOOD_THEN_SEGFAULT = (
    CRUMBS
    + r"""
import sys, ctypes
crumb("D", 0, "torch-bf16", 16, 2048, 6144, "bf16", "bf16", "bf16", "bench.py:40")
print("torch-bf16 16x2048x6144 30.1 us", flush=True)
crumb("D", 1, "torch-fp8", 4096, 2048, 6144, "e4m3", "e4m3", "bf16", "bench.py:41")
print("torch-fp8 4096x2048x6144 69.4 us", flush=True)
crumb("C", 2, "sgl-kernel-fp4", 128, 2048, 6144, "e2m1", "e2m1", "bf16", "bench.py:57")
sys.stderr.write("calling into a native library that faults\n")
sys.stderr.flush()
ctypes.string_at(0)
"""
)


def _exe(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_") and k != "PYTHONFAULTHANDLER"}
    env["PATH"] = f"{Path(PY).parent}:/usr/bin:/bin"
    return env


def _quiet(stream: str, data: bytes) -> None:
    pass


def _capture(tmp_path: Path, code: str, **kw) -> Run:
    kw.setdefault("env", _env())
    kw.setdefault("on_output", _quiet)
    run = capture([PY, "-c", code], runs_dir=tmp_path / "runs", **kw)
    return Run.open(run.path)


def _records(run: Run) -> list[dict]:
    path = run.raw_dir / "failures.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# A fake nsys / ncu: real shell scripts that print the tool's own lines around the program they run (the last
# two arguments: python -c CODE), with progress bars overwritten by carriage returns, and exit as nsys does with
# the shell's status (128+N for a signal).
NSYS = (
    'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2025.3.1.90-1"; exit 0; fi\n'
    'out=""; prev=""\nfor a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
    'if [ "$1" = "export" ]; then exit 1; fi\n'
    "eval py=\\${$(($#-2))}; eval code=\\${$#}\n"
    'echo "Collecting data..."\n'
    '"$py" -c "$code"; status=$?\n'
    "echo \"Generating '/tmp/nsys-report-1a2b.qdstrm'\"\n"
    "printf '[1/2] [0%%      ] nsys.nsys-rep\\r[1/2] [===100%%] nsys.nsys-rep\\n'\n"
    "printf '[2/2] [==73%%   ] nsys.sqlite\\r[2/2] [===100%%] nsys.sqlite\\n' >&2\n"
    'printf rep > "$out.nsys-rep"\n'
    '$SQLITE_MAKER "$out.sqlite"\n'
    'echo "Generated:"; printf "\\t%s\\n" "$out.nsys-rep"\n'
    "exit $status\n"
)
NCU = (
    'if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0"; exit 0; fi\n'
    'out=""; prev=""\nfor a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
    "eval py=\\${$(($#-2))}; eval code=\\${$#}\n"
    'echo "==PROF== Connected to process 4242 ($py)"\n'
    '"$py" -c "$code"; status=$?\n'
    'echo "==ERROR== The application returned an error code ($status)." >&2\n'
    'printf rep > "$out.ncu-rep"\n'
    "exit $status\n"
)


def _tools(tmp_path: Path, sqlite_tables: str = "StringIds") -> tuple[Path, Path, dict[str, str]]:
    """Fake nsys and ncu, and an environment whose SQLITE_MAKER writes a real SQLite export holding one row in
    each of ``sqlite_tables`` (no CUPTI kernel table unless named)."""
    maker = _exe(
        tmp_path / "bin/make-sqlite",
        f'exec {PY} -c "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); '
        f"[c.execute(f'CREATE TABLE {{t}} (x)') and c.execute(f'INSERT INTO {{t}} VALUES (1)') "
        f'for t in sys.argv[2:]]; c.commit()" "$1" {sqlite_tables}\n',
    )
    env = {**_env(), "SQLITE_MAKER": str(maker)}
    return _exe(tmp_path / "bin/nsys", NSYS), _exe(tmp_path / "bin/ncu", NCU), env


# --- the crash, named -----------------------------------------------------------------------------------------
def test_segfault_names_the_gemm_in_flight_with_stack_and_last_words(tmp_path, samples_dir):
    """Two GEMMs return, the third is in flight when the program dies by SIGSEGV in native code: the run's one
    failure names the third (backend, M, N, K, dtypes, caller), the signal, the fault handler's Python stack and
    the program's last stderr line; the good results are kept; ``show --json`` carries all of it."""
    bench = (samples_dir / "h200-bench-gemm/raw/measurements.jsonl").read_text().splitlines()[:2]
    code = (
        "import os, pathlib\n"
        f"(pathlib.Path(os.environ['TRACEKIT_RUN_DIR']) / 'raw/measurements.jsonl').write_text({chr(10).join(bench) + chr(10)!r})\n"
        + GOOD_THEN_SEGFAULT
    )
    run = _capture(tmp_path, code)
    assert run.status == "incomplete" and "SIGSEGV" in run.manifest["incomplete_reason"]
    (rec,) = _records(run)
    assert rec["kind"] == "crashed" and rec["error_type"] == "SIGSEGV" and rec["signal"] == "SIGSEGV"
    assert (rec["backend"], rec["m"], rec["n"], rec["k"]) == ("sgl-kernel-fp4", 128, 2048, 6144)
    assert (rec["dtype_a"], rec["dtype_b"], rec["dtype_out"], rec["caller"]) == (
        "e2m1",
        "e2m1",
        "bf16",
        "bench.py:57",
    )
    assert "sgl-kernel-fp4 mm M=128 N=2048 K=6144" in rec["message"]
    assert rec["message"].endswith("its last words on stderr: calling into a native library that faults")
    assert rec["python_stack"].startswith("Fatal Python error: Segmentation fault")
    assert 'File "<string>", line ' in rec["python_stack"] and "string_at" in rec["python_stack"]
    assert rec["traceback"] == rec["python_stack"]
    assert rec["stderr_tail"].startswith("calling into a native library that faults")
    # the program's output, whole and apart
    out = (run.raw_dir / "program.stdout").read_text()
    assert out == "torch-bf16 16x2048x6144 30.1 us\ntorch-fp8 4096x2048x6144 69.4 us\n"
    assert "Fatal Python error" in (run.raw_dir / "program.stderr").read_text()
    assert run.manifest["capture"]["python_faulthandler"] is True
    import_into(run)
    shown = subprocess.run(
        [PY, "-m", "tracekit", "show", str(run.path), "--json"], capture_output=True, text=True, check=True
    )
    (fail,) = json.loads(shown.stdout)["failures"]
    assert fail["signal"] == "SIGSEGV" and fail["m"] == 128 and fail["caller"] == "bench.py:57"
    assert "Fatal Python error" in fail["python_stack"] and fail["stderr_tail"]
    assert read_frame(Run.open(run.path), "measurements").height == 2  # the good GEMMs keep their numbers


def test_abort_takes_the_newest_call_in_flight_of_several_processes(tmp_path):
    """os.abort() (SIGABRT); a stale in-flight slot of an older process and a torn slot are in the folder too:
    the newest in-flight call is named and the torn slot is skipped."""
    code = (
        "import os, json, time\n"
        "d = os.environ['TRACEKIT_BREADCRUMB_DIR']\n"
        "old = b'C' + json.dumps({'v': 1, 'pid': 1, 'seq': 9, 't': time.time() - 60, 'backend': 'stale', "
        "'m': 1, 'n': 1, 'k': 1}).encode()\n"
        'torn = b\'C{"v": 1, "backend": "tor\' + bytes([0xff, 0xfe])\n'
        "open(os.path.join(d, 'breadcrumb.1.bin'), 'wb').write(old.ljust(512, b'\\0') + torn.ljust(512, b'\\0') "
        "+ bytes(62 * 512))\n"
        + CRUMBS
        + "crumb('C', 0, 'flashinfer-fp4', 256, 7168, 2048, 'e2m1', 'e2m1', 'bf16', 'serve.py:12')\n"
        "import sys; sys.stderr.write('about to abort\\n'); os.abort()\n"
    )
    run = _capture(tmp_path, code)
    (rec,) = _records(run)
    assert rec["signal"] == "SIGABRT" and rec["backend"] == "flashinfer-fp4" and rec["k"] == 2048
    assert rec["python_stack"].startswith("Fatal Python error: Aborted")
    assert "about to abort" in rec["message"]


def test_cuda_fault_raised_as_an_exception(tmp_path):
    """An illegal-address fault kills the CUDA context: the program exits 1 after a Python exception. The
    failure takes the exception's type and full message and the call that raised (state R), since the
    exception's traceback passes through that call's line."""
    code = (
        CRUMBS + "crumb('D', 0, 'torch-bf16', 16, 16, 16, 'bf16', 'bf16', 'bf16', 'b.py:1')\n"
        "class AcceleratorError(RuntimeError):\n    pass\n"
        "def gemm():\n"
        "    raise AcceleratorError('CUDA error: an illegal memory access was encountered\\n"
        "CUDA kernel errors might be asynchronously reported at some other API call')\n"
        "import sys\n"
        "crumb('R', 1, 'deepgemm-fp8', 64, 4096, 7168, 'e4m3', 'e4m3', 'bf16', "
        "f'{sys._getframe().f_code.co_filename}:{sys._getframe().f_lineno + 1}')\n"
        "gemm()\n"
    )
    run = _capture(tmp_path, code)
    (rec,) = _records(run)
    assert rec["kind"] == "crashed" and rec["signal"] is None
    assert rec["error_type"] == "AcceleratorError" and rec["backend"] == "deepgemm-fp8" and rec["m"] == 64
    assert "an illegal memory access was encountered\nCUDA kernel errors might" in rec["message"]
    assert rec["python_stack"].startswith("Traceback (most recent call last):")
    assert "asynchronously reported" in rec["stderr_tail"]


def test_hang_past_timeout_is_recorded_with_the_call_in_flight(tmp_path):
    code = (
        CRUMBS + "crumb('C', 0, 'torch-nvfp4', 32, 2048, 6144, 'e2m1', 'e2m1', 'bf16', 'hang.py:3')\n"
        "import sys, time; sys.stderr.write('waiting on the GPU\\n'); sys.stderr.flush(); time.sleep(60)\n"
    )
    # 5 s, not less: the watchdog fires a little under --timeout, and a loaded machine can take a second or two to
    # start the interpreter and reach the hang (at 1.5 s it once dumped the stack before line 16 was reached)
    run = _capture(tmp_path, code, timeout=5.0, grace_s=3.0)
    (rec,) = _records(run)
    assert rec["kind"] == "timeout" and rec["error_type"] == "timeout" and rec["backend"] == "torch-nvfp4"
    assert "--timeout 5 s" in rec["message"] and "waiting on the GPU" in rec["message"]
    stack = rec["python_stack"]
    assert stack.startswith("Timeout (") and 'File "<string>", line 16 in <module>' in stack  # the watchdog
    assert stack.index("Traceback") > stack.index("Timeout (") and stack.endswith("KeyboardInterrupt")


def test_hang_where_ctrl_c_cannot_reach_python_still_says_where(tmp_path):
    """A hang that never returns to Python's signal handling (here: SIGINT ignored, as in a native wait) ends
    by SIGTERM: the fault handler's watchdog, armed a little under --timeout, printed every thread's stack."""
    code = (
        CRUMBS + "crumb('C', 0, 'torch-fp8', 8, 8, 8, 'e4m3', 'e4m3', 'bf16', 'hang.py:9')\n"
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "def wait_for_gpu():\n    time.sleep(60)\nwait_for_gpu()\n"
    )
    run = _capture(tmp_path, code, timeout=5.0, grace_s=0.5)  # room to reach the hang on a loaded machine
    (rec,) = _records(run)
    assert rec["kind"] == "timeout" and rec["backend"] == "torch-fp8"
    assert rec["python_stack"].startswith("Timeout (") and "in wait_for_gpu" in rec["python_stack"]
    assert run.manifest["capture"]["passes"][0]["exit_code"] == -signal.SIGTERM


# --- under the profilers ----------------------------------------------------------------------------------------
def test_under_nsys_and_ncu_one_failure_program_output_apart_and_no_kernels_said(tmp_path):
    """nsys and ncu passes (fake tools that run the program and exit 128+11 like a shell): one crashed failure
    after import; each pass keeps the program's output apart from the tool's lines; the failure text is never the
    progress bar; the nsys export without a kernel table is named in the run's reason."""
    nsys, ncu, env = _tools(tmp_path)
    run = _capture(tmp_path, GOOD_THEN_SEGFAULT, nsys=True, ncu=True, nsys_path=nsys, ncu_path=ncu, env=env)
    for tool in ("nsys", "ncu"):
        err = (run.raw_dir / f"program.{tool}.stderr").read_text()
        out = (run.raw_dir / f"program.{tool}.stdout").read_text()
        assert "calling into a native library that faults" in err and "Fatal Python error" in err
        assert "torch-fp8 4096x2048x6144 69.4 us" in out
        for tool_line in ("[2/2]", "[1/2]", "Collecting data", "Generated:", "==PROF==", "==ERROR=="):
            assert tool_line not in out + err
    log = (run.raw_dir / "nsys.log").read_text()
    assert "[2/2]" in log and "calling into a native library" in log  # the tool's log stays whole
    recs = _records(run)
    assert len(recs) == 2 and {r["signal"] for r in recs} == {"SIGSEGV"}
    assert all("[2/2]" not in (r["stderr_tail"] + r["traceback"] + r["message"]) for r in recs)
    reason = run.manifest["incomplete_reason"]
    # the crash flush is on by default, so the reason names the loss without suggesting it
    assert "nsys kept no kernels of the program that died" in reason and "--crash-flush" not in reason
    assert run.manifest["capture"]["nsys"]["crash_flush"] == "profiler-stop"
    summary = import_into(run)  # the fake tools' reports fail to read; the failures still import
    assert not any("program." in f["path"] for f in summary["failed"])
    fails = read_frame(Run.open(run.path), "failures")
    assert fails.height == 1 and fails["backend"].to_list() == ["sgl-kernel-fp4"]


def test_exit_status_128_plus_n_without_a_fault_handler_block():
    assert crash.signal_from(139, None) == "SIGSEGV"
    assert crash.signal_from(134, None) == "SIGABRT"
    assert crash.signal_from(-9, None) == "SIGKILL"
    assert (
        crash.signal_from(1, None, "The target application terminated with signal 11 (SIGSEGV)") == "SIGSEGV"
    )
    assert crash.signal_from(3, None) is None and crash.signal_from(200, None) is None


def test_a_python_exception_outranks_the_profilers_words_but_not_a_sure_signal():
    tb = 'Traceback (most recent call last):\n  File "b.py", line 3, in <module>\nRuntimeError: CUDA error: boom\n'
    says = "The target application terminated with signal 11 (SIGSEGV)"
    rec = crash.crash_record(kind="crashed", returncode=1, program_stderr=tb, tool_text=says)
    assert rec["error_type"] == "RuntimeError" and rec["signal"] is None
    rec = crash.crash_record(kind="crashed", returncode=1, program_stderr="last words\n", tool_text=says)
    assert rec["signal"] == "SIGSEGV" and rec["message"].endswith("its last words on stderr: last words")
    # a caught NVFP4 error printed with its traceback, then SIGKILL: that traceback is not the stack of the crash
    rec = crash.crash_record(kind="crashed", returncode=-9, program_stderr=tb + "next shape\n")
    assert rec["signal"] == "SIGKILL" and rec["python_stack"] is None
    assert rec["message"].endswith("its last words on stderr: next shape")
    assert rec["traceback"].endswith("next shape")  # the stderr tail, where there is no stack


def test_crash_flush_handler_stops_then_dies_of_the_same_signal(tmp_path):
    """--crash-flush profiler-stop injects the fatal-signal handler into the nsys pass only: the program still dies
    of SIGSEGV (os.kill), its stack is printed, and the handler's own line stays out of the program's stderr."""
    nsys, _, env = _tools(tmp_path, "CUPTI_ACTIVITY_KIND_KERNEL")
    code = "import os, signal, sys; print(os.environ.get('TRACEKIT_CRASH_FLUSH')); sys.stdout.flush(); " + (
        "os.kill(os.getpid(), signal.SIGSEGV)"
    )
    run = _capture(tmp_path, code, nsys=True, nsys_path=nsys, env=env, crash_flush="profiler-stop")
    assert (run.raw_dir / "program.stdout").read_text() == "profiler-stop\n"
    assert "tracekit crash-flush: SIGSEGV: no CUDA driver loaded" in (run.raw_dir / "nsys.log").read_text()
    assert "tracekit crash-flush" not in (run.raw_dir / "program.stderr").read_text()
    (rec,) = _records(run)
    assert rec["signal"] == "SIGSEGV" and rec["python_stack"].startswith(
        "Fatal Python error: Segmentation fault"
    )
    assert run.manifest["capture"]["nsys"]["crash_flush"] == "profiler-stop"
    assert "nsys kept no kernels" not in run.manifest["incomplete_reason"]  # this export has a kernel table
    # the plain pass gets neither the handler nor the site folder (no --instrument)
    code = f"import os; print(os.environ.get('TRACEKIT_CRASH_FLUSH'), {str(SITE_DIR)!r} in os.environ.get('PYTHONPATH', ''))"
    plain = _capture(tmp_path, code, crash_flush="profiler-stop")
    assert (plain.raw_dir / "program.stdout").read_text() == "None False\n"


def test_user_faulthandler_setting_is_kept_and_python_commands_are_found(tmp_path):
    run = _capture(
        tmp_path,
        "import os; print(os.environ['PYTHONFAULTHANDLER'])",
        env={**_env(), "PYTHONFAULTHANDLER": "x"},
    )
    assert (run.raw_dir / "program.stdout").read_text() == "x\n"
    assert run.manifest["capture"]["python_faulthandler"] is False
    script = tmp_path / "bench"
    script.write_text("#!/usr/bin/env python3\nprint('hi')\n")
    assert is_python_command([str(script)]) and is_python_command(["python3", "-m", "x"])
    assert is_python_command(["b.py"]) and not is_python_command(["/bin/sh", "-c", "true"])


# --- output apart, on real tool logs ----------------------------------------------------------------------------
@pytest.mark.parametrize("tool", ["nsys", "ncu"])
def test_splitter_on_real_logs_keeps_only_the_programs_lines(samples_dir, tool):
    """The real H200 logs (program table + tool lines in one file): the program's share keeps its table and
    none of the tool's banner, progress or ==PROF== lines."""
    data = (samples_dir / f"h200-capture-gemm/raw/{tool}.log").read_bytes()
    splitter = crash.OutputSplitter(tool)
    mine = b"".join(splitter.feed("stdout", data[i : i + 777]) for i in range(0, len(data), 777))
    mine += splitter.flush("stdout")
    text = mine.decode()
    assert "GEMMs" in text and "4096" in text
    for tool_line in ("==PROF==", "==WARNING==", "[1/2]", "[2/2]", "Generated:", "Collecting data"):
        assert tool_line not in text
    dropped = [line for line in data.decode().splitlines() if line not in text.splitlines()]
    assert dropped and all(crash.is_tool_line(tool, line.encode()) for line in dropped)


def test_in_flight_is_never_a_raise_that_was_caught_earlier(tmp_path):
    def slot(state: str, seq: int, backend: str) -> bytes:
        fields = {"v": 1, "seq": seq, "t": 100.0 + seq, "backend": backend, "caller": f"/w/b.py:{seq}"}
        return (state.encode() + json.dumps(fields).encode()).ljust(V1_SLOT_BYTES, b"\0")

    path = tmp_path / "breadcrumb.5.bin"
    path.write_bytes(slot("R", 1, "torch-nvfp4") + slot("D", 2, "torch-bf16") + bytes(62 * V1_SLOT_BYTES))
    assert crash.in_flight(crash.read_breadcrumbs(tmp_path)) is None  # died outside any wrapped call
    # the newest call raised: it is what the program died of only when the fatal traceback passed through it
    path.write_bytes(slot("D", 1, "torch-bf16") + slot("R", 2, "torch-nvfp4") + bytes(62 * V1_SLOT_BYTES))
    crumbs = crash.read_breadcrumbs(tmp_path)
    assert crash.in_flight(crumbs) is None  # a signal after a caught NVFP4 error (seen on the H200)
    assert crash.in_flight(crumbs, 'File "/w/main.py", line 40, in <module>') is None
    assert crash.in_flight(crumbs, 'File "/w/b.py", line 2, in main').get("backend") == "torch-nvfp4"
    path.write_bytes(slot("C", 1, "sgl-fp4") + slot("R", 2, "torch-nvfp4") + bytes(62 * V1_SLOT_BYTES))
    assert crash.in_flight(crash.read_breadcrumbs(tmp_path)).get("backend") == "sgl-fp4"


def test_in_flight_needs_a_line_number_in_the_caller():
    """A caller whose line is "²" (a Unicode digit, no number ``int`` reads) names no frame a traceback can hold
    (``File "path", line N``): the raised call is not taken as what the program died of."""
    crumb = crash.Breadcrumb(
        crash.RAISED, {"seq": 1, "backend": "torch-nvfp4", "caller": "/w/b.py:\u00b2"}, "f"
    )
    assert crash.in_flight([crumb], 'File "/w/b.py", line \u00b2, in main') is None


def test_collapse_cr_keeps_the_last_state():
    assert crash.collapse_cr("a\r[==50%]\r[==100%] done\nb\r\nc") == "[==100%] done\nb\nc"


def test_read_text_keeps_the_end_of_a_long_output(tmp_path):
    path = tmp_path / "program.stderr"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(1000)) + b"[1/2] [=50%]\r[1/2] [=100%]\n")
    text = crash.read_text(path, limit=100)
    assert text.endswith("line 999\n[1/2] [=100%]\n") and "line 980" not in text
    assert text.split("\n")[0].startswith("line 9")  # whole lines only
    assert crash.tail(text, 2) == "line 999\n[1/2] [=100%]"


# --- the wrapper's failure files -------------------------------------------------------------------------------
def test_import_reads_wrapper_failures_and_ignores_program_output(tmp_path):
    run = _capture(tmp_path, "print('ok')")
    folder = run.raw_dir / "breadcrumbs/plain"
    record = {
        "backend": "torch-nvfp4", "op": "mm", "m": 16, "n": 2048, "k": 6144, "kind": "unsupported",
        "error_type": "RuntimeError", "message": "NVFP4 needs compute capability 10.0", "traceback": "Traceback ...",
    }  # fmt: skip
    (folder / "failures.77.jsonl").write_text(
        json.dumps(record) + "\n" + '{"backend": "torn', encoding="utf-8"
    )
    summary = import_into(run)
    assert not summary["failed"] and summary["partial"]  # the torn last line is counted, not fatal
    fails = read_frame(Run.open(run.path), "failures")
    assert fails["message"].to_list() == ["NVFP4 needs compute capability 10.0"]
    paths = [s["path"] for s in Run.open(run.path).manifest["sources"]]
    assert "raw/breadcrumbs/plain/failures.77.jsonl" in paths and not any("program." in p for p in paths)


# --- --ranges ---------------------------------------------------------------------------------------------------
def test_ranges_filter_escapes_ncu_syntax_and_searches():
    assert ranges_filter("attn|mlp") == "regex:.*(?:attn|mlp).*/"
    assert ranges_filter("layer[0-9]+/q,k@v") == "regex:.*(?:layer[0-9]+.q.k.v).*/"
    built = re.compile(ranges_filter("layer[0-9]+/attn").removeprefix("regex:").removesuffix("/"))
    assert built.fullmatch("model.layer12/attn.fwd") and not built.fullmatch("layer/attn")
    with pytest.raises(BadInputError, match="not a regular expression"):
        ranges_filter("gemm(")
    with pytest.raises(BadInputError):
        ranges_filter(" ")


def test_cli_ranges_builds_the_ncu_command_line_and_records_it(tmp_path):
    argv_file = tmp_path / "argv"
    ncu = _exe(
        tmp_path / "bin/ncu",
        'if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0"; exit 0; fi\n'
        f'printf "%s\\n" "$@" > {argv_file}\nexit 0\n',
    )

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PY, "-m", "tracekit", "capture", "--ncu", "--ncu-path", str(ncu), *args],
            env=_env(), capture_output=True, text=True, check=False, cwd=tmp_path,
        )  # fmt: skip

    done = cli("--ranges", "attn/q,k", "--no-import", "--json", "--", PY, "-c", "pass")
    argv = argv_file.read_text().splitlines()
    assert argv[:3] == ["--nvtx", "--nvtx-include", "regex:.*(?:attn.q.k).*/"]
    assert argv.count("--nvtx-include") == 1
    run = Run.open(tmp_path / json.loads(done.stdout)["run"])
    exact = tools.ncu_command(
        ncu,
        run.raw_dir.absolute() / "ncu",
        [PY, "-c", "pass"],
        nvtx_include="regex:.*(?:attn.q.k).*/",
        per_config=2,  # at most 2 launches of each launch configuration inside the user's ranges
    )
    assert argv == exact[1:]
    assert run.manifest["capture"]["ncu"]["ranges"] == "attn/q,k"
    assert run.manifest["capture"]["ncu"]["nvtx_include"] == "regex:.*(?:attn.q.k).*/"
    bad = cli("--ranges", "gemm(", "--", PY, "-c", "pass")
    assert bad.returncode == 2 and "not a regular expression" in bad.stderr and "Traceback" not in bad.stderr
    both = cli("--ranges", "x", "--all-kernels", "--", PY, "-c", "pass")
    assert both.returncode == 2 and "contradict" in both.stderr


def test_site_folder_exists():
    assert (SITE_DIR / "sitecustomize.py").is_file() and signal.SIGSEGV


def test_timeline_without_kernels_falls_back_to_ncu_durations(samples_dir):
    """What a crashed nsys pass leaves (NVTX ranges, no kernel table) beside an ncu report: the GEMMs are timed
    by ncu's kernel durations, as the run's reason says."""
    from tracekit.analyzers.gemm import build_cases
    from tracekit.analyzers.store import load_frames, open_run
    from tracekit.frames import SPECS

    frames = load_frames(open_run(samples_dir / "h200-capture-gemm"))
    kept = ("ncu", "ncu_metrics", "ncu_rules", "devices", "ranges")
    crashed = {name: df if name in kept else SPECS[name].empty() for name, df in frames.items()}
    assert crashed["ranges"].height and not crashed["kernels"].height
    cases = build_cases(crashed)
    assert len(cases) == 4 and {c.origin for c in cases} == {"ncu"}
    for c in cases:  # timed by Nsight Compute's replay of the GEMM kernel, not left at zero
        assert c.timing.source == "ncu-replay" and c.timing.calls >= 1 and c.timing.gemm_ns_total > 0, c.name
        assert c.timing.gemm_ns_total >= c.ncu.row["duration_ns"], c.name  # type: ignore[union-attr]
