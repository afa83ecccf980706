"""Breadcrumbs (collectors/breadcrumb.py): after a process dies inside a wrapped GEMM call, its breadcrumb file
names that call; a wrapped call that raises is recorded as a failure, which the import reads.

The child processes use a stand-in ``torch`` (no torch import: fast) wrapped by the real ``instrument()``, make
calls on several threads, and then die inside a wrapped call by SIGKILL, SIGSEGV or ``os.abort()``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import polars as pl
import pytest

from tracekit.collectors import breadcrumb as B

CHILD = textwrap.dedent(
    """
    import os, signal, sys, threading, types

    class DT:
        def __init__(self, name):
            self.name = name
        def __str__(self):
            return "torch." + self.name

    BF16 = DT("bfloat16")

    class T:
        def __init__(self, *shape):
            self.shape, self.dtype, self.is_cuda = tuple(shape), BF16, True

    HOW = sys.argv[1]

    def mm(a, b):
        if a.shape[0] == 7:
            raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul")
        if a.shape[0] == 5:
            raise ValueError("operands of different layouts")
        if a.shape[0] == 99:
            if HOW == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif HOW == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif HOW == "abort":
                os.abort()
        return None

    torch = types.ModuleType("torch")
    torch.bfloat16, torch.mm = BF16, mm
    torch.compiler = types.SimpleNamespace(is_compiling=lambda: False)
    sys.modules["torch"] = torch

    from tracekit.collectors.instrument import instrument
    instrument(flashinfer=False, sgl=False)

    def worker(m):
        torch.mm(T(m, 64), T(64, 32))  # LINE_WORKER

    for m in (16, 32):
        t = threading.Thread(target=worker, args=(m,))
        t.start()
        t.join()

    def caught():
        try:
            torch.mm(T(7, 64), T(64, 32))
        except RuntimeError:
            pass

    t = threading.Thread(target=caught)
    t.start()
    t.join()
    try:
        torch.mm(T(5, 8), T(8, 8))
    except ValueError:
        pass
    print("ready", flush=True)
    torch.mm(T(99, 128), T(128, 256))  # LINE_CRASH
    print("survived", flush=True)
    """
)


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(CHILD.splitlines(), 1) if marker in text)


def _run_child(tmp_path: Path, how: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    crumbs = tmp_path / "run" / "raw" / "breadcrumbs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env[B.ENV_DIR] = str(crumbs)
    proc = subprocess.run(
        [sys.executable, str(script), how], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    return proc, crumbs, script


@pytest.mark.parametrize(
    ("how", "returncode"),
    [("kill", -signal.SIGKILL), ("segv", -signal.SIGSEGV), ("abort", -signal.SIGABRT)],
)
def test_the_call_in_flight_survives_the_crash(tmp_path: Path, how: str, returncode: int) -> None:
    proc, crumbs, script = _run_child(tmp_path, how)
    assert proc.returncode == returncode, proc.stderr
    assert "ready" in proc.stdout and "survived" not in proc.stdout
    (file,) = crumbs.glob("breadcrumb.*.bin")
    assert file.stat().st_size == B.FILE_BYTES
    crumbs_read = B.read_breadcrumbs(crumbs)
    in_flight = [c for c in crumbs_read if c["state"] == "call"]
    assert len(in_flight) == 1, crumbs_read
    (last,) = in_flight
    assert (last["m"], last["n"], last["k"]) == (99, 256, 128)
    assert (last["backend"], last["op"], last["dtype_a"], last["dtype_out"]) == (
        "torch-bf16",
        "mm",
        "bf16",
        "bf16",
    )
    assert last["caller"] == f"{script}:{_line('LINE_CRASH')}"
    assert last["range"].startswith("gemm backend=torch-bf16 op=mm M=99 N=256 K=128")
    assert isinstance(last["t"], float) and abs(last["t"] - time.time()) < 600
    assert last["v"] == 2 and last["pid"] == int(file.name.split(".")[1]) and last["file"] == str(file)
    # every earlier call was on a thread of its own (one slot each) and is marked returned or raised
    done = {c["m"]: c for c in crumbs_read if c["state"] == "done"}
    assert sorted(done) == [16, 32]
    assert done[16]["caller"] == f"{script}:{_line('LINE_WORKER')}"
    assert {c["m"] for c in crumbs_read if c["state"] == "raised"} == {7}  # m=5 shared the crashing slot
    assert last["seq"] == max(c["seq"] for c in crumbs_read)
    assert len({c["tid"] for c in crumbs_read}) == 4


def test_a_raising_call_is_a_failure_and_the_import_reads_it(tmp_path: Path) -> None:
    from tracekit.analyzers.importer import import_into, load_frames, open_run
    from tracekit.collectors.failures import FAILURE_KEYS
    from tracekit.run import Run

    proc, crumbs, _ = _run_child(tmp_path, "none")
    assert proc.returncode == 0 and "survived" in proc.stdout, proc.stderr
    (path,) = crumbs.glob("failures.*.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [tuple(r) for r in records] == [FAILURE_KEYS, FAILURE_KEYS]
    unsupported, error = records
    assert (unsupported["kind"], unsupported["m"], unsupported["n"], unsupported["k"]) == (
        "unsupported",
        7,
        32,
        64,
    )
    assert (
        unsupported["error_type"] == "RuntimeError"
        and "CUBLAS_STATUS_NOT_SUPPORTED" in unsupported["message"]
    )
    assert "in mm" in unsupported["traceback"] and "raise RuntimeError" in unsupported["traceback"]
    assert (error["kind"], error["backend"], error["m"]) == ("error", "torch-bf16", 5)

    # a run whose raw/ holds the breadcrumbs folder: its failure records become the run's failures
    run = Run.create(tmp_path / "imported")
    shutil.copytree(crumbs, run.raw_dir / "breadcrumbs")
    summary = import_into(run)
    assert summary["imported"] == 1 and not summary["failed"], summary
    failures = load_frames(open_run(run.path))["failures"]
    assert sorted(failures["kind"].to_list()) == ["error", "unsupported"]
    assert failures.filter(pl.col("kind") == "unsupported")["m"].to_list() == [7]


def test_read_breadcrumbs_skips_empty_and_garbled_slots(tmp_path: Path) -> None:
    good = {"v": 1, "pid": 1, "tid": 2, "seq": 3, "m": 4}
    slots = [
        b"D" + json.dumps(good).encode() + b"\0",
        b"C" + b'{"v": 1, "seq": 4, "m": ' + b"\0",  # cut short mid-object
        b"X" + json.dumps(good).encode() + b"\0",  # unknown state byte
        b"",  # never used
        b"C" + b"\xff\xfe" + b"\0",  # not UTF-8
        b"R" + json.dumps({**good, "seq": 9}).encode() + b"\0" + b'stale tail of a longer record"}',
    ]
    data = b"".join(s.ljust(B.V1_SLOT_BYTES, b"\0") for s in slots)
    (tmp_path / "breadcrumb.1.bin").write_bytes(data + b"C{")  # a torn last slot
    rows = B.read_breadcrumbs(tmp_path)
    assert [(r["state"], r["seq"]) for r in rows] == [("done", 3), ("raised", 9)]
    assert B.read_breadcrumbs(tmp_path / "absent") == []


def test_off_without_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(B.ENV_DIR, raising=False)
    B.reload()
    assert B.active is False
    monkeypatch.setenv(B.ENV_DIR, str(tmp_path / "c"))
    B.reload()
    try:
        assert B.active is True
    finally:
        monkeypatch.delenv(B.ENV_DIR)
        B.reload()
    assert B.active is False and not (tmp_path / "c").exists()  # nothing written before a wrapped call


def test_long_range_names_and_caller_paths_are_shortened_to_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot holds 512 bytes: the range name is cut, and the caller keeps its end (file name and line)."""
    from tracekit.collectors import ranges

    monkeypatch.setenv(B.ENV_DIR, str(tmp_path))
    B.reload()
    try:
        name = ranges.gemm_name("torch-bf16", "mm", 16, 32, 64, "bf16", "bf16", "bf16", tag="x" * 400)
        scope = ranges.RangeScope(name, True)
        where = "/" + "deep/" * 120 + "model.py"
        namespace: dict[str, object] = {"sys": sys}
        exec(compile("def here():\n    return sys._getframe()\n", where, "exec"), namespace)
        frame = namespace["here"]()  # type: ignore[operator]
        off = B.enter(scope, frame)
        assert off >= 0
        B.done(off)
    finally:
        monkeypatch.delenv(B.ENV_DIR)
        B.reload()
    (row,) = B.read_breadcrumbs(tmp_path)
    assert row["state"] == "done" and (row["m"], row["n"], row["k"]) == (16, 32, 64)
    assert row["caller"].startswith("...") and row["caller"].endswith("deep/model.py:2")
    assert name.startswith(row["range"]) and len(row["range"]) < len(name)
