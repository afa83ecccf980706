"""``tracekit capture --ncu --ranges`` without ``--nsys`` on a real GPU: the planning pass (nsys, CUDA + NVTX) runs
first, its timeline chooses the ncu pass's launches (the GEMMs of the ranges, each place once, no elementwise
kernel), and the timeline is imported with the run."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tracekit.collectors import tools
from tracekit.collectors.capture import capture
from tracekit.errors import MissingToolError
from tracekit.run import Run

pytestmark = pytest.mark.gpu

SCRIPT = """
import torch

a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
b = torch.randn(512, 384, device="cuda", dtype=torch.bfloat16)
c = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
torch.mm(a, b)                      # warm-up outside the range: not chosen
for _ in range(3):                  # three instances of one user range, two GEMM shapes and elementwise work each
    torch.cuda.nvtx.range_push("block")
    x = torch.mm(a, b)
    y = torch.relu(x) + 1.0
    z = torch.mm(c, c)
    w = z * 2.0
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print("done", flush=True)
"""


def _ncu_report_module():
    from tracekit.analyzers.readers.ncu.report import reader_path

    extras = reader_path()
    if extras is not None and extras not in sys.path:
        sys.path.insert(0, extras)
    try:
        return importlib.import_module("ncu_report")
    except ImportError:
        pass
    pytest.skip("no ncu_report reader (PyPI ncu-report or Nsight Compute's extras/python)")


def test_ncu_alone_plans_its_gemms_with_an_nsys_pass(tmp_path: Path) -> None:
    try:
        tools.find_ncu()
        nsys = tools.find_nsys()
        tools.require_nsys_importer(nsys)
    except MissingToolError as exc:
        pytest.skip(exc.one_line())
    script = tmp_path / "block.py"
    script.write_text(SCRIPT)
    run = capture([sys.executable, str(script)], ncu=True, ranges="block", runs_dir=tmp_path / "runs")
    run = Run.open(run.path)
    assert run.status == "complete", run.manifest.get("incomplete_reason")
    planning, ncu_pass = run.manifest["capture"]["passes"]
    assert planning["tool"] == "nsys" and planning["role"] == "plan"
    assert "raw/nsys.sqlite" in planning["files"]
    plan, selection = ncu_pass["ncu"]["plan"], ncu_pass["ncu"]["selection"]
    assert plan["ran"] and plan["chose_launches"] and plan["status"] == "ok", plan
    assert selection["source"] == "planning pass's timeline"
    assert selection["gemm_kernels"] and selection["left_out_launches"] >= 6, selection
    print(
        f"planning pass {planning['wall_s']:.1f} s, ncu pass {ncu_pass['wall_s']:.1f} s; selection {selection}"
    )
    # ncu profiled only the chosen kernels: every GEMM place once, nothing elementwise
    chosen = {*selection["gemm_kernels"], *selection["aux_kernels"]}
    ncu_report = _ncu_report_module()
    ctx = ncu_report.load_report(str(run.raw_dir / "ncu.ncu-rep"))
    names = [ctx.range_by_idx(r).action_by_idx(i).name() for r in range(ctx.num_ranges())
             for i in range(ctx.range_by_idx(r).num_actions())]  # fmt: skip
    gemms = [n for n in names if any(c in n for c in selection["gemm_kernels"])]
    assert len(gemms) >= 2, names
    assert all(any(c in n for c in chosen) for n in names), (names, chosen)
    assert not any("elementwise" in n for n in names), names
    # the planning pass's timeline is the run's timeline: its elementwise kernels are there
    from tracekit.analyzers.importer import import_into
    from tracekit.analyzers.store import load_frames

    import_into(run)
    kernels = load_frames(Run.open(run.path))["kernels"]
    assert kernels.filter(kernels["name"].str.contains("elementwise")).height >= 6
