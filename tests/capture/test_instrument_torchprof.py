"""``tracekit capture --torch-profiler --instrument`` with the real (CPU) torch: the instrument wrappers' ranges
reach the Kineto trace as ``record_function`` ranges (NVTX does not), so the imported run has GEMM ranges with
M, N, K for a script that never imports tracekit."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

SCRIPT = """\
import torch

a = torch.randn(32, 64, dtype=torch.bfloat16)
b = torch.randn(64, 16, dtype=torch.bfloat16)
for _ in range(3):
    torch.mm(a, b)
print("mm done", flush=True)
"""


def test_instrumented_gemms_are_ranges_under_the_torch_profiler(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pl = pytest.importorskip("polars")
    from tracekit.analyzers.store import load_frames
    from tracekit.collectors.capture import capture
    from tracekit.run import Run

    script = tmp_path / "bench.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env["TRACEKIT_INSTRUMENT_CPU"] = "1"  # name bf16 GEMMs on CPU tensors: this machine has no GPU
    run = capture(
        [sys.executable, str(script)],
        torch_profiler=True,
        instrument=True,
        out=tmp_path / "run",
        env=env,
        on_output=lambda *a: None,
    )
    run = Run.open(run.path)
    assert run.status == "complete", run.manifest.get("incomplete_reason")
    ranges = load_frames(run)["ranges"]
    gemm = ranges.filter(pl.col("range_kind") == "gemm")
    assert gemm.height == 3, ranges.select("name", "range_kind")
    assert set(gemm.select("backend", "op", "m", "n", "k").rows()) == {("torch-bf16", "mm", 32, 16, 64)}
