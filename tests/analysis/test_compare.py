"""``tracekit compare`` on runs built from real H200 measurements: self-compare passes the gate, a 20% slowdown
beyond the repeats' spread fails it, a 1% slowdown inside the spread is noise, and failures / factors are diffed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.report_data import FAILURE_TEXTS, bench_rows, bench_run, failure, measurement, probe_run
from tracekit.analyzers.compare import compare_runs
from tracekit.analyzers.store import load_frames
from tracekit.bundle import write_bundle
from tracekit.cli import main


def _pick(rows: list[dict[str, str]]) -> tuple[int, int]:
    """Indices of the real measurement with the narrowest and the widest p10-p90 spread."""
    spreads = [float(r["spread10_90"]) for r in rows]
    return spreads.index(min(spreads)), spreads.index(max(spreads))


def _run(tmp: Path, name: str, rows, changes: dict[int, dict] | None = None, fails=None):
    meas = []
    for i, r in enumerate(rows):
        meas.append(measurement(r, **(changes or {}).get(i, {})))
    return bench_run(tmp / name, meas, fails)


@pytest.fixture(scope="module")
def rows(shared_data: Path) -> list[dict[str, str]]:
    return bench_rows(shared_data)


@pytest.fixture(scope="module")
def base(rows, tmp_path_factory: pytest.TempPathFactory):
    return _run(tmp_path_factory.mktemp("cmp"), "base", rows)


def _cmp(a, b, **kw):
    """compare_runs as the CLI calls it: the environment gives the device (and so the peak) to bench runs."""
    env = {"base_environment": a.manifest["environment"], "new_environment": b.manifest["environment"]}
    return compare_runs(load_frames(a), load_frames(b), **env, **kw)


def _gate(a: Path, b: Path, *extra: str) -> int:
    try:
        main(["compare", str(a), str(b), "--gate", "--json", *extra])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_self_compare_passes(base, capsys: pytest.CaptureFixture[str]) -> None:
    assert _gate(base.path, base.path) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] and out["counts"]["unchanged"] == len(out["gemms"]) == 38


def test_twenty_percent_slower_fails_gate(base, rows, tmp_path: Path, capsys) -> None:
    narrow, _ = _pick(rows)
    new = _run(tmp_path, "slow", rows, {narrow: {"scale_time": 1.20}})
    result = _cmp(base, new)
    bad = [g for g in result["gemms"] if g["status"] != "unchanged"]
    assert len(bad) == 1 and bad[0]["status"] == "regression"
    assert bad[0]["time_change_pct"] == pytest.approx(20.0)
    assert bad[0]["tflops_change_pct"] == pytest.approx(100 / 1.2 - 100)
    r = rows[narrow]
    assert (bad[0]["m"], bad[0]["n"], bad[0]["k"]) == (int(r["M"]), int(r["N"]), int(r["K"]))
    assert bad[0]["noise_pct"] < 2.0  # the real spread of that GEMM is well under 20%
    capsys.readouterr()
    assert _gate(base.path, new.path) == 5
    captured = capsys.readouterr()
    assert "regression" in captured.err and captured.err.count("\n") == 1


def test_one_percent_slower_inside_spread_is_noise(base, rows, tmp_path: Path, capsys) -> None:
    _, wide = _pick(rows)
    assert float(rows[wide]["spread10_90"]) > 0.08  # measured: some small GEMMs spread 8-10% on the H200
    new = _run(tmp_path, "noisy", rows, {wide: {"scale_time": 1.01}})
    result = _cmp(base, new, threshold_pct=0.5)
    moved = [g for g in result["gemms"] if g["status"] != "unchanged"]
    assert [g["status"] for g in moved] == ["noise"] and result["passed"]
    assert _gate(base.path, new.path, "--threshold", "0.5") == 0
    capsys.readouterr()


def test_failures_and_moved_factors(base, rows, tmp_path: Path) -> None:
    narrow, _ = _pick(rows)
    r = rows[narrow]
    # the GEMM now fails (real cuBLAS error text), another shape fails that never ran; and the clock drops
    broke = failure(0, f"torch-{r['kind']}", "mm", "crashed", *FAILURE_TEXTS[0][3:])
    broke.update(m=int(r["M"]), n=int(r["N"]), k=int(r["K"]))
    other = failure(3, *FAILURE_TEXTS[1])
    meas = [measurement(x) for x in rows]
    for m in meas:
        m["sm_clock_hz"] = 1.755e9  # both near the 1830 MHz the peak is quoted at ...
    base2 = bench_run(tmp_path / "b2", [dict(m) for m in meas])
    slow_clock = [dict(m) for m in meas]
    slow_clock[-1]["sm_clock_hz"] = (
        1.47e9  # ... then one at the 1470 MHz the H200 settles at under its power cap
    )
    new = bench_run(tmp_path / "n2", slow_clock, [broke, other])
    result = _cmp(base2, new)
    assert {f["backend"] for f in result["new_failures"]} == {broke["backend"], other["backend"]}
    broken = [g for g in result["gemms"] if g["status"] == "broken"]
    assert len(broken) == 1 and "CUBLAS_STATUS_NOT_SUPPORTED" in broken[0]["error"] and not result["passed"]
    last = next(
        g
        for g in result["gemms"]
        if g["m"] == slow_clock[-1]["m"]
        and g["n"] == slow_clock[-1]["n"]
        and g["k"] == slow_clock[-1]["k"]
        and g["dtype"] == slow_clock[-1]["dtype"]
        and "base_time_us" in g
    )
    clock = [f for f in last["factors_moved"] if f["factor"] == "clock"]
    assert clock and clock[0]["new"] < clock[0]["base"] - 0.15
    fixed = _cmp(new, base2)
    assert len(fixed["fixed_failures"]) == 2


def test_compare_bundles(shared_data: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    run = probe_run(shared_data, tmp_path / "probe")
    write_bundle(run, tmp_path / "p.zip")
    assert _gate(run.path, tmp_path / "p.zip") == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["gemms"]) == 5 and out["counts"]["unchanged"] == 5


def test_wrong_result_is_broken(base, rows, tmp_path: Path) -> None:
    meas = [measurement(r) for r in rows]
    meas[0].update(status="wrong", rel_error=0.5)
    result = _cmp(base, bench_run(tmp_path / "wrong", meas))
    broken = [g for g in result["gemms"] if g["status"] == "broken"]
    assert len(broken) == 1 and "wrong result" in broken[0]["error"] and not result["passed"]


def test_compare_reads_the_analyses_not_the_frames(base, rows, tmp_path: Path) -> None:
    """Given both runs' Analyses (what the CLI and the TUI pass), compare reads no frame: its wrong results and
    failures are the Analysis' (``wrong_results``, ``failures``), and the result is the frames' result."""
    from tracekit.analyzers.analysis import analyze_run

    meas = [measurement(r) for r in rows]
    meas[0].update(status="wrong", rel_error=0.5)
    fails = [failure(i, *text) for i, text in enumerate(FAILURE_TEXTS)]
    new = bench_run(tmp_path / "wrong", meas, fails)
    from_frames = _cmp(base, new)
    a, b = analyze_run(base), analyze_run(new)
    assert [(w.backend, w.m, w.rel_error) for w in b.wrong_results] == [
        (meas[0]["backend"], meas[0]["m"], 0.5)
    ]
    from_analyses = compare_runs(None, None, base_analysis=a, new_analysis=b)
    assert from_analyses == from_frames
    assert from_analyses["new_failures"] and any(g["status"] == "broken" for g in from_analyses["gemms"])


# --- the committed samples (no ../shared needed) ----------------------------------------------------------------------
def test_capture_sample_compared_with_itself_passes(samples_dir: Path, capsys) -> None:
    run = samples_dir / "h200-capture-gemm"
    assert _gate(run, run) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] and out["gemms"]
    assert {g["status"] for g in out["gemms"]} == {"unchanged"}
    assert not out["only_in_base"] and not out["new_failures"]


def test_bench_sample_against_its_bundle_and_a_slower_copy(
    samples_dir: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """The glm5 sweep against its own bundle passes; a copy whose bf16 4096x2048x6144 median is 20% slower (the
    real record, time scaled, re-imported) fails the gate on that GEMM alone; its 120 failures match up."""
    import shutil

    from tracekit.analyzers.importer import import_into
    from tracekit.analyzers.store import open_run

    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    src = samples_dir / "h200-bench-gemm"
    write_bundle(open_run(src), tmp_path / "bench.zip")
    assert _gate(src, tmp_path / "bench.zip") == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["gemms"]) == 48 and out["counts"]["unchanged"] == 48
    slow = tmp_path / "slow"
    shutil.copytree(src, slow)
    shutil.rmtree(slow / "frames")
    lines = (slow / "raw/measurements.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    target = next(r for r in recs if (r["backend"], r["m"], r["n"]) == ("torch-bf16", 4096, 2048))
    for key in ("time_us", "time_us_p10", "time_us_p90"):
        target[key] *= 1.2
    target["tflops"] /= 1.2
    (slow / "raw/measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    import_into(open_run(slow))
    assert _gate(src, slow) == 5
    out = json.loads(capsys.readouterr().out)
    bad = [g for g in out["gemms"] if g["status"] != "unchanged"]
    assert [(g["backend"], g["m"], g["n"], g["status"]) for g in bad] == [
        ("torch-bf16", 4096, 2048, "regression")
    ]
    assert bad[0]["time_change_pct"] == pytest.approx(20.0)
    assert bad[0]["noise_pct"] < 5  # the real p10-p90 spread of that GEMM
    assert not out["new_failures"] and not out["fixed_failures"]
