"""``tracekit capture --torch-profiler --instrument`` on a real GPU: a script that never imports tracekit gets its
torch GEMMs found (the instrument wrappers' ranges reach the Kineto trace as record_function ranges, and the
kernels launched inside them join to them), and a killed process leaves the breadcrumbs of its CUDA GEMM calls."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.collectors import breadcrumb
from tracekit.collectors.capture import capture
from tracekit.collectors.instrument import site_dir
from tracekit.run import Run

pytestmark = pytest.mark.gpu

SCRIPT = """
import torch

a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
b = torch.randn(512, 384, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    torch.mm(a, b)
torch.cuda.synchronize()
print("done", flush=True)
"""


def test_instrumented_gemms_are_found_under_the_torch_profiler(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    from tracekit.analyzers.store import load_frames

    script = tmp_path / "plain_mm.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    run = capture(
        [sys.executable, str(script)], torch_profiler=True, instrument=True, out=tmp_path / "run", env=env
    )
    run = Run.open(run.path)
    assert run.status == "complete", run.manifest["incomplete_reason"]
    frames = load_frames(run)
    gemm = frames["ranges"].filter(pl.col("range_kind") == "gemm")
    assert set(gemm.select("backend", "op", "m", "n", "k").unique().rows()) == {
        ("torch-bf16", "mm", 256, 384, 512)
    }
    # each kernel joins to the innermost range: the aten::mm op (range_kind gemm-op) inside the wrapper's range
    ops = frames["ranges"].filter(pl.col("parent_id").is_in(gemm["range_id"].implode()))
    held = pl.concat([gemm["range_id"], ops["range_id"]]).implode()
    in_gemm = frames["kernels"].filter(pl.col("range_id").is_in(held))
    assert in_gemm.height >= 3, frames["kernels"].select("name", "range_id")
    # and the analysis counts three calls, none "sampled out" (Kineto's GPU twins of the ranges are not calls)
    (case,) = tracekit.load(run.path).analyze().cases
    assert (case.timing.calls, case.timing.calls_without_kernel) == (3, 0)


def test_a_killed_process_leaves_the_breadcrumbs_of_its_cuda_gemms(tmp_path: Path) -> None:
    """The real instrument wrapper on CUDA tensors, installed by sitecustomize as under capture: after a SIGKILL the
    breadcrumb file holds the process's last GEMM call with its shape, state and caller line (the CPU tests kill a
    process inside a call: tests/capture/test_breadcrumb.py)."""
    script = tmp_path / "dies.py"
    script.write_text(
        "import os, signal, torch\n"
        "a = torch.randn(64, 128, device='cuda', dtype=torch.bfloat16)\n"
        "b = torch.randn(128, 32, device='cuda', dtype=torch.bfloat16)\n"
        "torch.mm(a, b)\n"
        "torch.cuda.synchronize()\n"
        "torch.mm(a, b); os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    crumbs = tmp_path / "crumbs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site_dir()), env.get("PYTHONPATH")) if p)
    env[breadcrumb.ENV_DIR] = str(crumbs)
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    rows = breadcrumb.read_breadcrumbs(crumbs)
    assert [(r["m"], r["n"], r["k"], r["backend"]) for r in rows] == [(64, 32, 128, "torch-bf16")], rows
    # the kill came after the call returned: it is marked done, and names its line
    assert rows[0]["state"] == "done" and rows[0]["caller"] == f"{script}:6"
    assert rows[0]["seq"] == 2
