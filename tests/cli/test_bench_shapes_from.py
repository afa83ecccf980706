"""``tracekit bench gemm --shapes-from RUN``: the plan comes from the source run's Analysis (the committed serving
sample's prefill and decode shapes), the dry run imports no torch, and a real sweep with CPU test backends (real
worker processes, a real failure) gives the recommendation table that `report` renders from the bench run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.analyzers.recommend import PER_CALL, recommendation_of

ROOT = Path(__file__).resolve().parents[2]
SERVE = ROOT / "samples" / "h100-serve-torchprof"
NSYS = ROOT / "samples" / "h100-serve-nsys-ncu"
PLUGINS = ROOT / "tests" / "support" / "bench_plugins.py"


def _tracekit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )


def _shaped_cases() -> dict[tuple[int, int, int, str], tuple[int, float]]:
    """(M, N, K, dtype) -> (calls, GEMM ns) summed over the sample's cases, straight from its Analysis."""
    out: dict[tuple[int, int, int, str], tuple[int, float]] = {}
    for c in tracekit.load(SERVE).analyze().cases:
        if c.shape is None or not c.shape.dtype_a:
            continue
        key = (c.shape.m, c.shape.n, c.shape.k, c.shape.dtype_a)
        calls, ns = out.get(key, (0, 0.0))
        out[key] = (calls + c.timing.calls, ns + c.timing.gemm_ns_total)
    return out


def test_dry_run_plan_rows_are_the_serving_samples_cases_without_torch() -> None:
    code = (
        "import sys, runpy; sys.argv = ['tracekit', 'bench', 'gemm', '--shapes-from', sys.argv[1], "
        "'--dry-run', '--what-if', 'fp8,fp4', '--json']\n"
        "from tracekit.cli import main\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "assert 'torch' not in sys.modules, 'the dry run imported torch'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(SERVE)], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = json.loads(proc.stdout)["plan"]
    want = _shaped_cases()
    got = {(r["m"], r["n"], r["k"], r["dtype"]): (r["calls"], r["gemm_ns_total"]) for r in plan["rows"]}
    assert got.keys() == want.keys()
    for key, (calls, ns) in want.items():
        assert got[key][0] == calls and got[key][1] == pytest.approx(ns)
    # most GEMM time first; the prefill projections lead, and the decode ones are there
    totals = [r["gemm_ns_total"] for r in plan["rows"]]
    assert totals == sorted(totals, reverse=True)
    assert (plan["rows"][0]["m"], plan["rows"][0]["dtype"]) == (4096, "bf16")
    assert "serve/prefill" in plan["rows"][0]["ranges"]
    assert any(r["m"] == 16 and "serve/decode" in r["ranges"] for r in plan["rows"])
    for r in plan["rows"]:
        assert r["per_call_ns"] == pytest.approx(r["gemm_ns_total"] / r["calls"])
        if r["dtype"] == "bf16":  # own dtype only; fp8 only as a what-if, fp4 not on an H100 (sm 9.0)
            assert r["backends"] == ["torch-bf16"]
            assert "torch-fp8-rowwise" in r["what_if"]["fp8"] and r["what_if"]["fp4"] == []
            assert "torch-nvfp4" in r["skipped"]
        else:
            assert r["dtype"] == "e4m3" and "torch-bf16" not in r["backends"]
            assert {"torch-fp8-tensorwise", "torch-fp8-rowwise"} <= set(r["backends"])
    assert plan["per_call"] == PER_CALL
    assert plan["source"]["path"] == str(SERVE.resolve())
    assert len(plan["source"]["manifest_sha256"]) == 64


def test_dry_run_table_names_the_figure_and_the_shapes() -> None:
    proc = _tracekit("bench", "gemm", "--shapes-from", str(SERVE), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert (
        "mean per call" in proc.stdout and "4096x7168x6144" in proc.stdout and "16x6144x2048" in proc.stdout
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--shapes-from", str(NSYS), "--dry-run"], "has a shape and dtype"),
        (["--shapes-from", str(SERVE), "--shapes", "16x16x16", "--dry-run"], "exclude each other"),
        (["--shapes-from", str(SERVE), "--what-if", "fp2", "--dry-run"], "unknown --what-if"),
        (["--dry-run"], "go with --shapes-from"),
        (["--shapes-from", "no/such/run", "--dry-run"], "no/such/run"),
    ],
)
def test_bad_input_is_one_line_exit_2(args: list[str], says: str) -> None:
    proc = _tracekit("bench", "gemm", *args)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A real sweep at the serving sample's shapes with CPU test backends: test-ok (bf16, wall-clock timed) and
    test-unsupported (e2m1, fails with cuBLAS's NVFP4 error) as the fp4 what-if."""
    out = tmp_path_factory.mktemp("bench") / "bench"
    env = {"TRACEKIT_BACKEND_PLUGINS": str(PLUGINS)}
    args = ["--backends", "test-ok,test-unsupported", "--what-if", "fp4", "--repeats", "3", "--warmup", "1"]
    proc = _tracekit("bench", "gemm", "--shapes-from", str(SERVE), *args, "-o", str(out), "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads(proc.stdout)


@pytest.mark.slow
def test_sweep_records_the_link_and_recommends(bench: tuple[Path, dict]) -> None:
    out, data = bench
    rec = data["recommendation"]
    want = _shaped_cases()
    bf16 = [r for r in rec["rows"] if r["row"]["dtype"] == "bf16"]
    assert len(bf16) == sum(1 for k in want if k[3] == "bf16")
    measured = {
        (g["m"], g["n"], g["k"]): g["time_us"] * 1e3 for g in data["gemms"] if g["backend"] == "test-ok"
    }
    for r in bf16:
        row = r["row"]
        assert r["best"]["backend"] == "test-ok"
        assert r["best"]["time_ns"] == pytest.approx(measured[(row["m"], row["n"], row["k"])])
        assert r["delta_ns"] == pytest.approx(row["per_call_ns"] - r["best"]["time_ns"])
        assert r["saving_ns"] == pytest.approx(max(r["delta_ns"], 0) * row["calls"])
        assert r["saving_pct"] == pytest.approx(r["saving_ns"] / rec["plan"]["gpu_ns_total"] * 100)
        # the what-if is apart: the fp4 backend failed, in full, and is not the recommendation
        assert r["what_if"]["fp4"]["best"] is None
        assert r["what_if"]["fp4"]["results"][0]["status"] == "unsupported"
    for r in rec["rows"]:
        if r["row"]["dtype"] == "e4m3":  # no e4m3 backend was chosen: nothing measured, nothing claimed
            assert r["best"] is None and r["saving_ns"] is None
    assert rec["saving_ns_total"] == pytest.approx(sum(r["saving_ns"] or 0 for r in rec["rows"]))
    fails = [f for f in data["failures"] if f["backend"] == "test-unsupported"]
    assert fails and all("CUBLAS_STATUS_NOT_SUPPORTED" in f["message"] for f in fails)
    # each backend ran at the shapes of its dtype only (the bf16 ones), not every shape of the plan
    assert {(g["m"], g["n"], g["k"]) for g in data["gemms"]} == {k[:3] for k in want if k[3] == "bf16"}
    # the bench run keeps the link, and the recommendation read back from it is the one printed
    run = tracekit.load(out)
    source = run.record.capture.shapes_from["source"]
    assert source["path"] == str(SERVE.resolve()) and source["name"] == "h100-serve-torchprof"
    again = recommendation_of(run.record, run.frames)
    assert again is not None
    assert again.saving_ns_total == pytest.approx(rec["saving_ns_total"])
    # the Analysis holds it (the report and the TUI's backends screen render that one): the same table
    assert run.analyze().recommendation == again
    assert tracekit.load(SERVE).analyze().recommendation is None


@pytest.mark.slow
def test_report_shows_the_recommendation(bench: tuple[Path, dict]) -> None:
    out, data = bench
    report = _tracekit("report", str(out))
    assert report.returncode == 0, report.stderr[-2000:]
    text = report.stdout
    assert "### Backends at the shapes of h100-serve-torchprof" in text and "mean per call" in text
    first = data["recommendation"]["rows"][0]
    row = next(line for line in text.splitlines() if line.startswith(f"| 1 | {first['row']['m']}x"))
    assert "test-ok" in row and f"{first['saving_ns'] / 1e6:,.3f}" in row
    as_json = json.loads(_tracekit("report", str(out), "--format", "json").stdout)
    assert as_json["report"]["recommendation"]["saving_ns_total"] == pytest.approx(
        data["recommendation"]["saving_ns_total"]
    )
    plain = _tracekit("report", str(SERVE))  # any other run: no such section
    assert "Backends at the shapes" not in plain.stdout


@pytest.mark.slow
def test_view_shows_the_recommendation(bench: tuple[Path, dict]) -> None:
    import asyncio

    from tracekit.tui.app import make_app
    from tracekit.tui.screens.overview import OverviewScreen
    from tracekit.tui.screens.recommend import RecommendScreen

    out, data = bench

    async def drive() -> None:
        app = make_app(out)
        async with app.run_test(size=(160, 40)) as pilot:
            for _ in range(200):
                await pilot.pause(0.05)
                if isinstance(app.screen, OverviewScreen) and app.screen.analysis is not None:
                    break
            await pilot.press("a")
            for _ in range(100):
                await pilot.pause(0.05)
                if isinstance(app.screen, RecommendScreen) and app.screen.table.row_count:
                    break
            screen = app.screen
            assert isinstance(screen, RecommendScreen)
            rows = data["recommendation"]["rows"]
            assert screen.table.row_count == len(rows)
            cells = screen.table.get_row_at(0)
            assert cells[1] == f"{rows[0]['row']['m']}x{rows[0]['row']['n']}x{rows[0]['row']['k']}"
            assert cells[5] == "test-ok"
            assert "mean per call" in str(screen.notes.render())

    asyncio.run(drive())


def test_explain_points_to_it_where_the_kernel_is_the_largest_loss() -> None:
    proc = _tracekit("explain", str(SERVE), "--all", env={"COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    hint = "other backends at this shape: tracekit bench gemm --shapes-from RUN"
    cases = tracekit.load(SERVE).analyze().cases
    want = [c for c in cases if c.verdict.factor == "in-kernel" and c.shape and c.shape.dtype_a]
    assert want and len(want) < len(cases)  # memory-bound decode and aux-bound FP8 cases get no hint
    assert proc.stdout.count(hint) == len(want)


def test_without_polars_the_stored_analysis_gives_the_same_plan(tmp_path: Path) -> None:
    """A bare GPU environment (no polars, as the capture path allows) plans from the Analysis stored with the run,
    says so on stderr, and a run folder without one is one line, exit 2."""
    code = (
        "import sys; sys.modules['polars'] = None\n"
        "sys.argv = ['tracekit', 'bench', 'gemm', '--shapes-from', sys.argv[1], '--dry-run', '--json']\n"
        "from tracekit.cli import main\n"
        "main()\n"
    )

    def dry(source: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code, str(source)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    proc = dry(SERVE)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "polars is not installed" in proc.stderr and "read as stored" in proc.stderr
    bare = json.loads(proc.stdout)["plan"]
    full = json.loads(_tracekit("bench", "gemm", "--shapes-from", str(SERVE), "--dry-run", "--json").stdout)
    assert bare["rows"] == full["plan"]["rows"] and bare["rows"]
    empty = tmp_path / "run"
    empty.mkdir()
    (empty / "run.json").write_text((SERVE / "run.json").read_text())
    proc = dry(empty)
    assert proc.returncode == 2, proc.stderr
    assert "needs polars" in proc.stderr and "Traceback" not in proc.stderr


FIX_BENCH = ROOT / "samples" / "h100-serve-fix-bench"


def test_the_h100_sweep_recommends_from_its_own_measurements(tmp_path: Path) -> None:
    """The committed H100 sweep at the serving sample's shapes: its recommendation's rows are the source's plan
    rows, each row's best is the fastest backend that worked, the saving is max(Δ, 0) x calls, the FP8 what-if of
    every bf16 row is measured apart and left out of the total, and the report renders the table."""
    if not FIX_BENCH.is_dir():
        pytest.skip("samples/h100-serve-fix-bench is not in this checkout")
    rec = tracekit.load(FIX_BENCH).analyze().recommendation
    assert rec is not None
    want = _shaped_cases()
    got = {(r.row.m, r.row.n, r.row.k, r.row.dtype): r for r in rec.rows}
    assert set(got) == set(want)
    total = 0.0
    for key, r in got.items():
        assert r.row.calls == want[key][0]
        ok = [b for b in r.results if b.status == "ok" and b.time_ns]
        assert ok and r.best is not None
        assert r.best.time_ns == min(b.time_ns for b in ok)
        assert r.delta_ns == pytest.approx(r.row.per_call_ns - r.best.time_ns)
        assert r.saving_ns == pytest.approx(max(r.delta_ns, 0.0) * r.row.calls)
        total += r.saving_ns
        if key[3] == "bf16":
            fp8 = r.what_if["fp8"]
            assert fp8.best is not None and fp8.best.backend.startswith("torch-fp8")
            assert fp8.best.time_ns < r.best.time_ns  # FP8 is faster at every bf16 shape on the H100
        else:
            assert {b.backend: b.status for b in r.results}["sgl-fp8"] == "unavailable"
    assert rec.saving_ns_total == pytest.approx(total)
    out = tmp_path / "ticket.md"
    report = _tracekit("report", str(FIX_BENCH), "-o", str(out))
    assert report.returncode == 0, report.stderr
    text = out.read_text()
    assert "Backends at the shapes of h100-serve-torchprof" in text
    assert "torch-fp8-rowwise 241.4 µs" in text  # row 1's what-if, as docs/GEMM_OPS.md shows it
