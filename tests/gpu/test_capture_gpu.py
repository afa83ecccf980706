"""``tracekit capture`` on a real GPU: a tiny bf16 matmul script with tracekit ranges under ncu and under nsys."""

from __future__ import annotations

import importlib
import sqlite3
import sys
from pathlib import Path

import pytest

from tracekit.collectors import tools
from tracekit.collectors.capture import capture
from tracekit.errors import MissingToolError
from tracekit.naming import DOMAIN
from tracekit.run import Run

pytestmark = pytest.mark.gpu

SCRIPT = """
import torch
from tracekit.collectors.ranges import gemm_range

a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
b = torch.randn(512, 384, device="cuda", dtype=torch.bfloat16)
torch.mm(a, b)          # warm-up outside any range: ncu must not profile it
c = a.float() * 2.0     # elementwise kernels outside any range
for _ in range(3):      # three launches of one range; the per-range budget lets ncu take 2
    with gemm_range("torch-bf16", "mm", 256, 384, 512, "bf16", "bf16", "bf16"):
        torch.mm(a, b)
torch.cuda.synchronize()
print("done", flush=True)
"""


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "tiny_mm.py"
    path.write_text(SCRIPT)
    return path


def _ncu_report_module():
    from tracekit.analyzers.readers.ncu.report import reader_path

    extras = reader_path()  # the installed package, else an Nsight Compute install's extras/python
    if extras is not None and extras not in sys.path:
        sys.path.insert(0, extras)
    try:
        return importlib.import_module("ncu_report")
    except ImportError:
        pass
    pytest.skip("no ncu_report reader (PyPI ncu-report or Nsight Compute's extras/python)")


def test_capture_under_ncu_profiles_only_ranged_kernels(tmp_path):
    try:
        tools.find_ncu()
    except MissingToolError as exc:
        pytest.skip(exc.one_line())
    run = capture(
        [sys.executable, str(_script(tmp_path))], ncu=True, runs_dir=tmp_path / "runs", max_per_range=2
    )
    run = Run.open(run.path)
    assert run.status == "complete", run.manifest["incomplete_reason"]
    report = run.raw_dir / "ncu.ncu-rep"
    assert report.is_file() and report.stat().st_size > 0
    assert run.manifest["capture"]["ncu"]["clock_control"] == "none"
    # the fingerprint is taken by a worker process while the program runs (collectors/env.py): on a GPU host
    # it must still name the GPU, as the capturing process's own torch sees it
    env = run.record.environment
    assert env is not None and env.fingerprint_error is None, env
    import torch

    assert env.gpu_name == torch.cuda.get_device_name(0)
    assert env.compute_capability == "{}.{}".format(*torch.cuda.get_device_capability(0))
    assert env.sm_count == torch.cuda.get_device_properties(0).multi_processor_count
    ncu_report = _ncu_report_module()
    ctx = ncu_report.load_report(str(report))
    kernels = []
    for r in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(r)
        for i in range(rng.num_actions()):
            action = rng.action_by_idx(i)
            state = action.nvtx_state()
            names = []
            for dom_id in state.domains():
                dom = state.domain_by_id(dom_id)
                if dom.name() == DOMAIN:
                    names.extend(dom.push_pop_ranges())
            kernels.append((action.name(), names))
    assert kernels, "ncu profiled nothing"
    for name, ranges in kernels:
        assert ranges and all(
            r.startswith("gemm backend=torch-bf16 op=mm M=256 N=384 K=512") for r in ranges
        ), (
            name,
            ranges,
        )
        assert "elementwise" not in name
    # two launches of the range (the budget), each one or two kernels (GEMM, maybe a split-K reduce)
    assert 2 <= len(kernels) <= 4, kernels


def test_capture_under_nsys_writes_sqlite_with_ranges(tmp_path):
    try:
        nsys = tools.find_nsys()
        tools.require_nsys_importer(nsys)
    except MissingToolError as exc:
        pytest.skip(exc.one_line())
    run = capture([sys.executable, str(_script(tmp_path))], nsys=True, runs_dir=tmp_path / "runs")
    run = Run.open(run.path)
    assert run.status == "complete", run.manifest["incomplete_reason"]
    sqlite = run.raw_dir / "nsys.sqlite"
    assert (run.raw_dir / "nsys.nsys-rep").is_file() and sqlite.is_file()
    db = sqlite3.connect(sqlite)
    try:
        (kernels,) = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        ranges = [
            row[0]
            for row in db.execute(
                "SELECT coalesce(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id"
            )
            if row[0]
        ]
    finally:
        db.close()
    assert kernels >= 5
    assert sum(r.startswith("gemm backend=torch-bf16 op=mm M=256") for r in ranges) == 3
    assert "done" in (run.raw_dir / "nsys.log").read_text()


GRAPH_SCRIPT = """
import torch
from tracekit.collectors.ranges import gemm_range

a = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
b = torch.randn(512, 384, device="cuda", dtype=torch.bfloat16)
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    torch.mm(a, b)      # warm-up on the capture stream (cuBLAS workspace)
torch.cuda.current_stream().wait_stream(s)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    torch.mm(a, b)
    torch.mm(a, b)
for _ in range(3):      # each replay runs two GEMM kernels from the graph, inside one range
    with gemm_range("torch-bf16", "mm-graph", 256, 384, 512, "bf16", "bf16", "bf16"):
        graph.replay()
torch.cuda.synchronize()
print("done", flush=True)
"""


def test_capture_under_nsys_records_kernels_of_cuda_graph_replays(tmp_path):
    """nsys's default graph trace keeps one row per replay and no kernels; tracekit asks for every node, so the
    kernels a replay runs are rows that fall inside the replay's range."""
    try:
        nsys = tools.find_nsys()
        tools.require_nsys_importer(nsys)
    except MissingToolError as exc:
        pytest.skip(exc.one_line())
    script = tmp_path / "graph_mm.py"
    script.write_text(GRAPH_SCRIPT)
    run = capture([sys.executable, str(script)], nsys=True, runs_dir=tmp_path / "runs")
    run = Run.open(run.path)
    assert run.status == "complete", run.manifest["incomplete_reason"]
    assert run.manifest["capture"]["nsys"]["cuda_graph_trace"] == "node"
    db = sqlite3.connect(run.raw_dir / "nsys.sqlite")
    try:
        ranges = db.execute(
            "SELECT e.start, e.end FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id "
            "WHERE coalesce(e.text, s.value) LIKE 'gemm backend=torch-bf16 op=mm-graph %'"
        ).fetchall()
        # nsys 2025.3 exports graphNodeId only; later versions add graphId
        cols = {row[1] for row in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        node = "graphId" if "graphId" in cols else "graphNodeId"
        graph_kernels = db.execute(
            "SELECT k.start, k.end, r.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
            f"WHERE k.{node} IS NOT NULL AND k.{node} != 0"
        ).fetchall()
    finally:
        db.close()
    assert len(ranges) == 3
    assert len(graph_kernels) >= 6, graph_kernels  # 3 replays x 2 GEMMs (each maybe with a split-K reduce)
    # every replayed kernel was launched (its runtime call) inside one of the ranges
    for _start, _end, launched in graph_kernels:
        assert any(lo <= launched <= hi for lo, hi in ranges), (launched, ranges)


def test_capture_bench_under_torch_profiler_traces_its_workers(tmp_path):
    """The benchmark runs each backend in a worker process; the PyTorch profiler of the parent sees none of their
    kernels, so each worker records its own: one traced pass per measurement (--trace-repeats rotations over the
    input sets, every kernel in its range), a segment file each in the run's raw/; no warm-up launches, no timed
    graph replays."""
    pl = pytest.importorskip("polars")
    from tracekit.analyzers.store import load_frames

    cmd = [sys.executable, "-m", "tracekit", "bench", "gemm", "--backends", "torch-bf16"]
    cmd += ["--shapes", "256x2048x6144", "--repeats", "10", "--warmup", "3"]
    run = capture(cmd, torch_profiler=True, trace_repeats=2, runs_dir=tmp_path / "runs")
    run = Run.open(run.path)
    assert run.status == "complete", run.manifest["incomplete_reason"]
    assert run.manifest["capture"]["torch_profiler"]["trace_repeats"] == 2
    traces = sorted(p.name for p in run.raw_dir.glob("torch_trace*.json.gz"))
    assert any(name.startswith("torch_trace.torch-bf16.") for name in traces), traces
    frames = load_frames(run)
    gemm_ranges = frames["ranges"].filter(
        pl.col("name").str.starts_with("gemm backend=torch-bf16 op=mm M=256 N=2048 K=6144")
        & (pl.col("kind") == "annotation")  # the CPU-side record_function ranges (each has a GPU-side twin)
    )
    # 2 repeats x the rotated input sets (at least 2)
    assert gemm_ranges.height >= 4 and gemm_ranges.height % 2 == 0, gemm_ranges
    in_gemm = frames["kernels"].filter(pl.col("range_id").is_in(gemm_ranges["range_id"].implode()))
    assert in_gemm.height >= gemm_ranges.height and in_gemm["duration_ns"].min() > 0, in_gemm
    # recording everything would add 3 warm-up and 10 replayed rotations: 6x the traced pass's kernels
    assert frames["kernels"].height <= 2 * gemm_ranges.height, frames["kernels"].height
    measured = frames["measurements"].filter(pl.col("backend") == "torch-bf16")
    # the timed pass runs unprofiled, as in a plain sweep: all 10 repeats, replayed from a CUDA graph
    assert measured["repeats"].to_list() == [10] and measured["timing"].to_list() == ["cuda-graph"]


def test_torchprof_starts_no_cuda_context_in_a_process_that_never_uses_the_gpu(tmp_path):
    """A benchmark's parent process imports torch but leaves the GPU to its workers: profiling it must not start a
    CUDA context there (memory on the GPU, and time), while a script that does use CUDA still gets its kernels."""
    import subprocess

    idle = tmp_path / "idle.py"
    idle.write_text("import torch\nprint('initialized', torch.cuda.is_initialized())\n")
    runner = [sys.executable, "-m", "tracekit.collectors.torchprof"]
    proc = subprocess.run(
        [*runner, "--out", str(tmp_path / "idle.json.gz"), "--", str(idle)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "initialized False" in proc.stdout, proc.stdout + proc.stderr
    assert (tmp_path / "idle.json.gz").is_file()
