"""``tracekit capture --ranks`` on a real GPU: two torchrun ranks sharing one GPU (gloo all-reduce), samples/scripts/
tp_gemm_gloo.py with rank 1 planted as the straggler (extra GEMMs outside any range).

Under nsys: one report per rank, checked with SQL (no polars needed), then merged by the importer where polars is
installed. Under ncu: one report per rank (checked for size; reading them needs the ncu_report module, which the
GPU machine's carried wheels leave out, so the import happens on a CPU machine).

Run on the GPU machine (samples/scripts/gpu_phases.sh setup ranks), or: python -m pytest -m gpu tests/gpu/test_ranks_gpu.py
"""

from __future__ import annotations

import socket
import sqlite3
import sys
from pathlib import Path

import pytest

from tracekit.collectors import tools
from tracekit.collectors.capture import capture
from tracekit.collectors.ranks import plan_ranks
from tracekit.errors import MissingToolError

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "samples/scripts/tp_gemm_gloo.py"
STEPS, WARMUP, EXTRA = 6, 2, 4


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cmd(*extra: str) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_port()),
        str(SCRIPT), "--steps", str(STEPS), "--warmup", str(WARMUP), "--slow-rank", "1", "--extra-gemms", str(EXTRA),
        *extra,
    ]  # fmt: skip


def _sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def test_two_ranks_on_one_gpu_under_nsys(tmp_path: Path) -> None:
    try:
        nsys = tools.find_nsys()
        tools.require_nsys_importer(nsys)
    except MissingToolError as exc:
        pytest.skip(exc.one_line())
    cmd = _cmd()
    run = capture(cmd, nsys=True, ranks=plan_ranks(cmd), out=tmp_path / "run", timeout=300)
    assert run.status == "complete", run.manifest["incomplete_reason"]
    log = (run.raw_dir / "nsys.log").read_text(errors="replace")
    assert "rank 0/2" in log and "rank 1/2" in log
    gemm_kernels = {}
    for rank in (0, 1):
        db = run.raw_dir / f"nsys.rank{rank}.sqlite"
        assert db.is_file() and (run.raw_dir / f"nsys.rank{rank}.nsys-rep").is_file()
        # one process per report, all on the one GPU
        assert _sql(
            db,
            "SELECT count(DISTINCT globalPid), min(deviceId), max(deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL",
        ) == [(1, 0, 0)]
        ((gemms,),) = _sql(
            db,
            "SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59 "
            "AND coalesce(e.text, s.value) LIKE 'gemm %' AND e.domainId != 0",
        )
        assert gemms == 2 * (
            STEPS + WARMUP
        )  # two GEMM ranges a step, in tracekit's domain (not the default one)
        ((steps,),) = _sql(
            db,
            "SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
            "WHERE e.eventType = 59 AND coalesce(e.text, s.value) LIKE 'step i=%'",
        )
        assert steps == STEPS
        ((n,),) = _sql(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
        gemm_kernels[rank] = n
    assert gemm_kernels[1] > gemm_kernels[0]  # rank 1's planted extra GEMMs

    pytest.importorskip("polars", reason="the merge needs polars (carried in .whl by gpu_phases.sh setup)")
    from tracekit.analyzers.importer import import_into
    from tracekit.analyzers.ranks import analyze_ranks
    from tracekit.analyzers.store import load_frames

    summary = import_into(run)
    assert summary["ranks"] == [0, 1] and not summary["failed"]
    assert run.frame_layout("kernels") == "partitioned"
    frames = load_frames(run)
    k = frames["kernels"]
    assert k["rank"].null_count() == 0 and set(k["device"].unique().to_list()) == {0}
    ra = analyze_ranks(frames)
    assert ra is not None
    # the two GEMMs of a step, once each (not once per step: the context drops the step counter), on both ranks;
    # the warm-up steps' launches, outside any step range, are cases of their own
    in_steps = ra.gemm_spread.filter(ra.gemm_spread["gemm"].str.ends_with(" [step]"))
    assert in_steps.height == 2 and set(in_steps["ranks"].to_list()) == {2}, ra.gemm_spread
    assert ra.gemm_spread.height <= 4, ra.gemm_spread
    assert ra.steps.group_by("rank").len().sort("rank")["len"].to_list() == [STEPS, STEPS]
    assert ra.straggler == 1, ra.reasons
    print("\n".join(ra.reasons))
    print(ra.ranks)
    print(ra.gemm_spread)


def test_two_ranks_on_one_gpu_under_ncu(tmp_path: Path) -> None:
    try:
        tools.find_ncu()
    except MissingToolError as exc:
        pytest.skip(exc.one_line())
    cmd = _cmd("--m", "512")
    run = capture(cmd, ncu=True, ranks=plan_ranks(cmd), out=tmp_path / "run", timeout=300, max_per_range=1)
    assert run.status == "complete", run.manifest["incomplete_reason"]
    for rank in (0, 1):
        rep = run.raw_dir / f"ncu.rank{rank}.ncu-rep"
        assert rep.is_file() and rep.stat().st_size > 10_000
    log = (run.raw_dir / "ncu.log").read_text(errors="replace")
    assert log.count("==PROF== Disconnected") >= 2 or log.count("==PROF== Report:") >= 2, log[-2000:]
