"""A persistent kernel's GEMMs told apart in a run with an Nsight Compute report and no timeline
(analyzers/gemm/ncu_evidence.py ``_counted_places``), on the H100 serving sample's report alone: cuBLAS runs the
prefill's bf16 GEMMs on one ``nvjet_sm90_tst_256x128_*`` kernel with grid 132 and Nsight Compute profiled two of
its launches, which counted 360.8 and 309.2 GFLOP. Each is a case with its own count, not one case of "several
GEMMs" with none; launches that counted the same math stay one case."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.analyzers.gemm import build_cases
from tracekit.analyzers.store import load_frames, open_run

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "h100-serve-nsys-ncu"
TST = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"
QQTST = "nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_coopA_algo2_TNT"
DECODE = "nvjet_sm90_tst_64x16_64x16_4x1_v_bz_TNT"
# benchmarks/foreign/serve_step.py: hidden 6144, 48 query + 2 x 4 KV heads of 128, intermediate 2048, 4096 tokens
TOKENS, HIDDEN, QKV, INTER = 4096, 6144, (48 + 2 * 4) * 128, 2048


@pytest.fixture(scope="module")
def report_only() -> dict[str, pl.DataFrame]:
    """The sample's frames less its nsys timeline: what an ncu-only capture of the same step holds."""
    frames = load_frames(open_run(SAMPLE))
    return {k: v.head(0) if k in ("kernels", "ranges", "memops") else v for k, v in frames.items()}


def _gflop(cases: list, kernel: str, rng: str, grid: int) -> list[float | None]:
    mine = [c for c in cases if c.range == rng and c.kernel.name == kernel and c.kernel.grid == grid]
    return [round(c.counted.flops / 1e9, 1) if c.counted and c.counted.flops else None for c in mine]


def test_each_counted_launch_of_a_persistent_kernel_is_a_case(report_only: dict[str, pl.DataFrame]) -> None:
    cases = build_cases(report_only)
    assert all(c.origin == "ncu" for c in cases)
    # the counters are exact: the qkv and o projections (bf16), the FP8 layer's gate_up and down
    qkv, o = 2 * TOKENS * QKV * HIDDEN, 2 * TOKENS * HIDDEN * HIDDEN
    gate_up, down = 2 * TOKENS * 2 * INTER * HIDDEN, 2 * TOKENS * HIDDEN * INTER
    assert (
        _gflop(cases, TST, "serve/prefill", 132) == [round(qkv / 1e9, 1), round(o / 1e9, 1)] == [360.8, 309.2]
    )
    assert _gflop(cases, QQTST, "serve/prefill", 132) == [round(gate_up / 1e9, 1), round(down / 1e9, 1)]
    # no case says FLOPs unknown for several GEMMs: each has its launch's count and a rate
    prefill = [c for c in cases if c.range == "serve/prefill"]
    assert all(c.flops_note is None and c.counted.spread is None for c in prefill)
    assert all(c.timing.calls == 1 for c in prefill)
    # distinct keys (the place ends the key), distinct names, in profiling order
    assert len({c.key for c in cases}) == len(cases) and len({c.name for c in cases}) == len(cases)
    tst = [c for c in prefill if c.kernel.name == TST]
    assert [c.key[-1] for c in tst] == [1, 2] and tst[0].ncu.row["ncu_id"] < tst[1].ncu.row["ncu_id"]


def test_launches_that_counted_the_same_math_stay_one_case(report_only: dict[str, pl.DataFrame]) -> None:
    """The decode range's grid-112 kernel (the qkv projection of both layers: 1.41 GFLOP twice) is one case of
    two calls, keyed as before; its grid-96 configuration counted 1.21 and 0.40 GFLOP: two cases."""
    cases = build_cases(report_only)
    (qkv,) = [
        c for c in cases if c.range == "serve/decode" and c.kernel.name == DECODE and c.kernel.grid == 112
    ]
    assert qkv.timing.calls == 2 and round(qkv.counted.flops / 1e9, 2) == 1.41
    assert qkv.key == ("ncu", "serve/decode", DECODE, 112, 384)
    assert _gflop(cases, DECODE, "serve/decode", 96) == [1.2, 0.4]


def test_with_the_timeline_the_places_come_from_it_as_before() -> None:
    """With the sample's nsys timeline, the ncu cases join the timeline's cases (timeline.positions places them):
    no ncu case stands alone, and the prefill kernel keeps its three cases by place."""
    cases = build_cases(load_frames(open_run(SAMPLE)))
    assert not [c for c in cases if c.origin == "ncu"]
    tst = [c for c in cases if c.range == "serve/prefill" and c.kernel.name == TST]
    assert len(tst) == 3 and sum(c.timing.calls for c in tst) == 180
