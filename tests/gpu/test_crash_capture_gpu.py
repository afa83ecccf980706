"""``tracekit capture`` of programs that die on a real GPU, and ``--ranges`` against the real ncu: the crash record
names the GEMM in flight (breadcrumbs the script writes in the wrapper's format), carries the Python stack and the
program's last words; a CUDA fault that kills the context is a ``crashed`` failure with the CUDA error; ncu's
NVTX filter built from ``--ranges`` profiles exactly the user's matching ranges.
Run: ``python -m pytest -m gpu tests/gpu/test_crash_capture_gpu.py -x``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tracekit.analyzers.importer import import_into
from tracekit.analyzers.store import read_frame
from tracekit.collectors import tools
from tracekit.collectors.capture import capture
from tracekit.errors import MissingToolError
from tracekit.run import Run

pytestmark = pytest.mark.gpu

CRUMB = """
import json, os, threading, time
_fd = os.open(os.path.join(os.environ["TRACEKIT_BREADCRUMB_DIR"], f"breadcrumb.{os.getpid()}.bin"),
              os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(_fd, 64 * 512)
def crumb(state, slot, backend, m, n, k):
    obj = {"v": 1, "pid": os.getpid(), "tid": threading.get_ident(), "seq": slot, "t": time.time(),
           "backend": backend, "op": "mm", "m": m, "n": n, "k": k, "dtype_a": "bf16", "dtype_b": "bf16",
           "dtype_out": "bf16", "scale": None, "range": None, "caller": "crash.py:%d" % slot}
    body = state.encode() + json.dumps(obj).encode()
    os.pwrite(_fd, body.ljust(512, b"\\0"), slot * 512)
"""

SEGV = (
    CRUMB
    + """
import ctypes, sys, torch
a = torch.randn(1024, 6144, device="cuda", dtype=torch.bfloat16)
b = torch.randn(2048, 6144, device="cuda", dtype=torch.bfloat16)
for i in range(20):
    torch.cuda.nvtx.range_push(f"good_gemm_{i}")
    torch.mm(a, b.t())
    torch.cuda.nvtx.range_pop()
crumb("D", 0, "torch-bf16", 1024, 2048, 6144)
torch.cuda.synchronize()
crumb("C", 1, "native-fp4", 128, 2048, 6144)
sys.stderr.write("calling into a native library that faults\\n"); sys.stderr.flush()
ctypes.string_at(0)
"""
)

DEVICE_ASSERT = (
    CRUMB
    + """
import torch
x = torch.zeros(16, device="cuda")
crumb("C", 0, "gather", 16, 1, 1)
idx = torch.tensor([1 << 30], device="cuda")
y = x[idx]
torch.cuda.synchronize()
"""
)

RANGES = """
import torch
a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
for name in ("layer0/attn_proj", "layer0/mlp_up", "attn,out"):
    torch.cuda.nvtx.range_push(name)
    torch.mm(a, a)
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
"""


def _script(tmp_path: Path, name: str, text: str) -> list[str]:
    path = tmp_path / name
    path.write_text(text)
    return [sys.executable, str(path)]


def _quiet(stream: str, data: bytes) -> None:
    pass


def _failures(run: Run) -> list[dict]:
    import_into(run)
    return read_frame(Run.open(run.path), "failures").to_dicts()


def test_segfault_under_nsys_and_ncu_names_the_call(tmp_path):
    try:
        tools.find_ncu()
        tools.require_nsys_importer(tools.find_nsys())
    except MissingToolError as exc:
        pytest.skip(exc.message)
    run = capture(
        _script(tmp_path, "crash.py", SEGV),
        nsys=True,
        ncu=True,
        nvtx_include=None,
        launch_count=3,
        crash_flush="profiler-stop",
        out=tmp_path / "run",
        on_output=_quiet,
    )
    (fail,) = _failures(run)
    assert fail["kind"] == "crashed" and fail["signal"] == "SIGSEGV"
    assert (fail["backend"], fail["m"], fail["caller"]) == ("native-fp4", 128, "crash.py:1")
    assert fail["python_stack"].startswith("Fatal Python error: Segmentation fault")
    assert "calling into a native library that faults" in fail["message"]
    for tool in ("nsys", "ncu"):
        err = (run.raw_dir / f"program.{tool}.stderr").read_text()
        assert "==PROF==" not in err and "[2/2]" not in err
    kernels = read_frame(Run.open(run.path), "kernels").height
    print(f"timeline kernels kept with --crash-flush profiler-stop: {kernels}")


def test_cuda_fault_is_a_crash_with_the_cuda_error(tmp_path):
    run = capture(_script(tmp_path, "fault.py", DEVICE_ASSERT), out=tmp_path / "run", on_output=_quiet)
    (fail,) = _failures(run)
    assert fail["kind"] == "crashed" and fail["backend"] == "gather"
    assert "device-side assert" in (fail["message"] + (fail["stderr_tail"] or ""))


def test_ranges_profile_only_the_matching_user_ranges(tmp_path):
    try:
        tools.find_ncu()
    except MissingToolError as exc:
        pytest.skip(exc.message)
    run = capture(
        _script(tmp_path, "ranges.py", RANGES),
        ncu=True,
        ranges="attn",
        out=tmp_path / "run",
        on_output=_quiet,
    )
    import_into(run)
    ncu = read_frame(Run.open(run.path), "ncu")
    ranges = set(ncu["nvtx_range"].drop_nulls().to_list())
    assert ncu.height >= 2, run.manifest.get("incomplete_reason")
    assert all("attn" in r for r in ranges) and not any("mlp" in r for r in ranges)
