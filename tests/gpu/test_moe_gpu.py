"""`tracekit bench moe` on a real GPU (the H200 of DEVICE.md): torch's bf16 and fp8 grouped GEMMs and the bf16
per-expert loop on GLM-5's experts, uniform and skewed routing. Run: `python -m pytest -m gpu tests/gpu/test_moe_gpu.py`."""

from __future__ import annotations

import pytest

from tracekit.analyzers.moe import analyze_moe
from tracekit.analyzers.store import load_frames
from tracekit.collectors.bench import run_sweep
from tracekit.collectors.moe import GLM5, MoeSettings

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    settings = MoeSettings(
        backends=["torch-bf16-grouped", "torch-fp8-grouped", "torch-bf16-loop"],
        config=GLM5,
        tokens=[16, 4096],
        routing=["uniform", "zipf:1.2"],
        warmup=3,
        repeats=5,
        timeout=120,
    )
    result = run_sweep(tmp_path_factory.mktemp("moe") / "run", settings)
    return result


def test_all_cases_measured_and_correct(sweep):
    rows = {(r["backend"], r["route"], r["tokens"]): r for r in sweep.measurements}
    assert len(rows) == 12, sweep.failures
    for key, r in rows.items():
        assert r["status"] == "ok" and r["rel_error"] < 0.1, (key, r["rel_error"])
        assert r["timing"] in ("cuda-graph", "events") and r["time_us"] > 0
        assert 0.1 < r["tflops"] < 2500, (key, r["tflops"])


def test_small_m_is_memory_bound_and_skew_is_flagged(sweep):
    frames = load_frames(sweep.run)
    a = analyze_moe(frames, environment=sweep.run.manifest["environment"])
    launches = {(r["backend"], r["route"], r["tokens"]): r for r in a.launches.to_dicts()}
    decode = launches[("torch-bf16-grouped", "uniform", 16)]
    assert decode["memory_bound_experts"] == decode["active"] and decode["pct_of_peak"] < 5
    skewed = launches[("torch-bf16-loop", "zipf1.2", 4096)]
    assert skewed["skewed"] and skewed["hot_expert"] == 0 and skewed["hot_dominates"]
    assert frames["moe_curve"].height > 10  # the loop timed each distinct per-expert row count
