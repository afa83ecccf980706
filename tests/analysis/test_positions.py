"""GEMMs sharing one kernel and launch configuration told apart by their place in the range's instances
(analyzers/gemm/timeline.py ``positions``), on the H100 serving sample: cuBLAS runs the prefill's bf16 GEMMs on
one persistent ``nvjet_sm90_tst_256x128_*`` kernel with a grid of 132 CTAs (six launches per instance: qkv and o
of two layers, gate_up and down), and Nsight Compute profiled two launches of that configuration."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.analyzers.gemm import build_cases
from tracekit.analyzers.gemm.timeline import Place, timeline_cases
from tracekit.analyzers.store import load_frames, open_run

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "h100-serve-nsys-ncu"
TST = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"


@pytest.fixture(scope="module")
def frames() -> dict[str, pl.DataFrame]:
    return load_frames(open_run(SAMPLE))


def _prefill_tst_ns(frames: dict[str, pl.DataFrame]) -> tuple[int, int]:
    """(launches, total ns) of the persistent kernel inside serve/prefill, summed from the kernels frame."""
    r = frames["ranges"].filter(pl.col("name") == "serve/prefill")["range_id"]
    k = frames["kernels"].filter((pl.col("name") == TST) & pl.col("range_id").is_in(r.implode()))
    return k.height, int(k["duration_ns"].sum())


def test_each_profiled_place_is_a_case_with_its_own_count(frames: dict[str, pl.DataFrame]) -> None:
    cases = [c for c in build_cases(frames) if c.range == "serve/prefill" and c.kernel.name == TST]
    places = [c.key[-1] for c in cases]
    assert all(isinstance(p, Place) for p in places)
    by_slots = {p.slots: c for p, c in zip(places, cases, strict=True)}
    assert set(by_slots) == {(0,), (1,), (2, 3, 4, 5)}
    # the first two launches of every instance: the ones Nsight Compute profiled, each with its own count
    first, second, rest = by_slots[(0,)], by_slots[(1,)], by_slots[(2, 3, 4, 5)]
    assert round(first.counted.flops / 1e9, 1) == 360.8
    assert round(second.counted.flops / 1e9, 1) == 309.2
    assert (first.timing.calls, second.timing.calls, rest.timing.calls) == (30, 30, 120)
    # the places never profiled keep no count: another place's is not theirs
    assert rest.counted is None or rest.counted.flops is None
    # nothing lost or counted twice: the three cases hold every launch of the kernel in the range
    launches, ns = _prefill_tst_ns(frames)
    assert sum(c.timing.calls for c in cases) == launches == 180
    assert round(sum(c.timing.gemm_ns_total for c in cases)) == ns
    # named by their place: the n-th GEMM launch of the instance, of its eight
    assert first.name.endswith("GEMM launch 1 of 8)") and rest.name.endswith("GEMM launches 3, 4, 5, 6 of 8)")


def test_places_that_counted_the_same_math_stay_one_case(frames: dict[str, pl.DataFrame]) -> None:
    """The decode step's grid-112 kernel runs the qkv projection of both layers: two places per instance, both
    profiled, both 1.41 GFLOP: nothing says they are different GEMMs, so one case of 100 calls, keyed as before;
    the grid-96 kernel's three places counted 1.21 and 0.40 GFLOP and one was not profiled: three cases."""
    cases = [c for c in build_cases(frames) if c.range == "serve/decode"]
    (qkv,) = [c for c in cases if c.kernel.grid == 112]
    assert not isinstance(qkv.key[-1], Place) and qkv.timing.calls == 100
    assert round(qkv.counted.flops / 1e9, 2) == 1.41
    placed = [c for c in cases if c.kernel.grid == 96 and isinstance(c.key[-1], Place)]
    grid96 = sorted(placed, key=lambda c: c.key[-1].slots)
    assert [c.key[-1].slots for c in grid96] == [(0,), (1,), (2,)]
    assert [c.timing.calls for c in grid96] == [50, 50, 50]
    assert [round(c.counted.flops / 1e9, 2) if c.counted.flops else None for c in grid96] == [1.21, 0.4, None]


def test_without_counts_or_with_differing_instances_the_kernel_stays_one_case(
    frames: dict[str, pl.DataFrame],
) -> None:
    counts = {("serve/prefill", TST, 132, 384): [3.6e11, 3.1e11]}

    def prefill(fr: dict[str, pl.DataFrame], launch_counts: dict) -> list:
        got = timeline_cases(fr, None, launch_counts=launch_counts).cases
        return [c for c in got if c.range == "serve/prefill" and c.kernel.name == TST]

    # no count for any place: nothing tells the places apart
    (one,) = prefill(frames, {})
    assert one.timing.calls == 180 and not isinstance(one.key[-1], Place)
    assert len(prefill(frames, counts)) == 3
    # one instance launching a different sequence (a launch dropped): places mean nothing there
    r = frames["ranges"].filter(pl.col("name") == "serve/prefill")["range_id"]
    k = frames["kernels"]
    drop = k.filter((pl.col("name") == TST) & pl.col("range_id").is_in(r.implode()))["kernel_id"][0]
    (kept,) = prefill({**frames, "kernels": k.filter(pl.col("kernel_id") != drop)}, counts)
    assert kept.timing.calls == 179 and not isinstance(kept.key[-1], Place)
