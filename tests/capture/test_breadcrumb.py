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
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pytest

from tracekit.collectors import breadcrumb as B
from tracekit.collectors import crash, ranges

KEYS = {
    "v",
    "pid",
    "tid",
    "seq",
    "t",
    "backend",
    "op",
    "m",
    "n",
    "k",
    "dtype_a",
    "dtype_b",
    "dtype_out",
    "scale",
}
KEYS |= {"range", "caller", "state", "file"}

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
    assert all(set(c) == KEYS for c in crumbs_read)
    # the capture side reads the file through the same reader and names the same call
    crumb = crash.in_flight(crash.read_breadcrumbs(crumbs))
    assert crumb is not None and (crumb.state, crumb.file) == ("C", file.name)
    assert crumb.fields == {k: v for k, v in last.items() if k not in ("state", "file")}


def test_a_raising_call_is_a_failure_and_the_import_reads_it(tmp_path: Path) -> None:
    from tracekit.analyzers.importer import import_into
    from tracekit.analyzers.store import load_frames, open_run
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
    """A site entry holds 512 bytes: the range name is cut, and the caller keeps its end (file name and
    line)."""
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


@pytest.fixture
def crumbs_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Breadcrumbs on in this process, written to ``tmp_path/crumbs``."""
    monkeypatch.setenv(B.ENV_DIR, str(tmp_path / "crumbs"))
    B.reload()
    yield tmp_path / "crumbs"
    monkeypatch.delenv(B.ENV_DIR)
    B.reload()


def _caller_in(path: str) -> Callable[[ranges.RangeScope], int]:
    """A function compiled as if from file ``path`` that writes a breadcrumb for its own frame (line 2)."""
    namespace: dict[str, object] = {"sys": sys, "B": B}
    exec(compile("def call(scope):\n    return B.enter(scope, sys._getframe())\n", path, "exec"), namespace)
    return namespace["call"]  # type: ignore[return-value]


def _scope(m: int) -> ranges.RangeScope:
    return ranges.RangeScope(ranges.gemm_name("torch-bf16", "mm", m, 32, 64, "bf16", "bf16", "bf16"), True)


def test_two_callers_at_the_same_offset_each_name_their_own_file(crumbs_on: Path) -> None:
    """The site cache is keyed on the caller's bytecode offset: a second code object calling the same range
    from the same offset (same bytecode, another file) must not take the first one's site."""
    scope = _scope(16)
    first, second = _caller_in("/models/attention.py"), _caller_in("/models/mlp.py")
    assert first.__code__.co_code == second.__code__.co_code and first.__code__ is not second.__code__
    callers = []
    for call in (first, second, first, second, second, first):
        B.done(call(scope))
        (row,) = B.read_breadcrumbs(crumbs_on)
        callers.append(row["caller"])
        assert (row["state"], row["m"]) == ("done", 16)
    assert callers == [
        f"/models/{name}.py:2" for name in ("attention", "mlp", "attention", "mlp", "mlp", "attention")
    ]
    assert B._next_site == 3  # two sites, each written once: later calls found them in the cache


def test_a_full_site_table_is_reused_and_never_names_another_call(
    crumbs_on: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past SITES distinct sites the table starts again from its first entry: a slot whose entry now holds
    another site reads with the site's keys None (the call is kept, not named wrongly), and a range whose cached
    site went with the lap gets a new entry."""
    monkeypatch.setattr(B, "SITES", 4)
    scopes = [_scope(m) for m in range(1, 7)]
    call = _caller_in("/models/layer.py")
    worker = threading.Thread(target=call, args=(scopes[0],))  # site 1, never marked returned: in flight
    worker.start()
    worker.join()
    for scope in scopes[1:]:  # sites 2..6: 5 and 6 take the entries of 1 and 2
        B.done(call(scope))
    rows = B.read_breadcrumbs(crumbs_on)
    (flight,) = [r for r in rows if r["state"] == "call"]
    assert set(flight) == KEYS and flight["seq"] == 1
    assert (flight["m"], flight["range"], flight["caller"], flight["backend"]) == (None, None, None, None)
    (main,) = [r for r in rows if r["state"] == "done"]
    assert (main["m"], main["caller"]) == (6, "/models/layer.py:2")
    B.done(call(scopes[0]))
    (main,) = [r for r in B.read_breadcrumbs(crumbs_on) if r["state"] == "done"]
    assert (main["m"], main["caller"], main["seq"]) == (1, "/models/layer.py:2", 7)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_writes_its_own_file_and_sites(crumbs_on: Path) -> None:
    """The child's file has its own site table: a range the parent had cached is written again there."""
    scope, call = _scope(16), _caller_in("/app/serve.py")
    B.done(call(scope))
    pid = os.fork()
    if pid == 0:  # the child: one call in flight, then gone
        try:
            call(scope)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    by_pid = {r["pid"]: r for r in B.read_breadcrumbs(crumbs_on)}
    assert set(by_pid) == {os.getpid(), pid}
    child, parent = by_pid[pid], by_pid[os.getpid()]
    assert (child["state"], child["m"], child["caller"], child["seq"]) == ("call", 16, "/app/serve.py:2", 1)
    assert (parent["state"], parent["m"], parent["file"]) == (
        "done",
        16,
        str(crumbs_on / f"breadcrumb.{os.getpid()}.bin"),
    )


def test_a_v2_file_torn_or_garbled_keeps_what_it_can(crumbs_on: Path, tmp_path: Path) -> None:
    """A site entry garbled by the crash leaves its call in flight without names; a cut file or an unknown
    state byte gives no row and no error."""
    call = _caller_in("/app/serve.py")
    call(_scope(16))  # in flight
    (path,) = crumbs_on.glob("breadcrumb.*.bin")
    data = bytearray(path.read_bytes())
    out = tmp_path / "copy"
    out.mkdir()
    copy = out / path.name

    def read(content: bytes) -> list[dict[str, object]]:
        copy.write_bytes(content)
        return B.read_breadcrumbs(out)

    (row,) = read(bytes(data))
    assert (row["state"], row["m"], row["caller"]) == ("call", 16, "/app/serve.py:2")
    garbled = bytearray(data)
    garbled[B.SITES_AT + 4 : B.SITES_AT + 12] = b"\xff" * 8
    (row,) = read(bytes(garbled))
    assert (row["state"], row["seq"], row["m"], row["caller"]) == ("call", 1, None, None)
    assert read(bytes(data[: B.SLOTS_AT + 10])) == []  # cut inside the first slot
    assert read(bytes(data[:20])) == []  # cut inside the header
    unknown = bytearray(data)
    unknown[B.SLOTS_AT] = ord("X")
    assert read(bytes(unknown)) == []
