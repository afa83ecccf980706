"""The grid, not the per-SM occupancy limiter, bounds a kernel that launches fewer CTAs than the GPU holds at once;
and the remedy for too few CTAs fits what the case shows (already split-K; a GEMV-style kernel only for a tiny M
or N). Real files; the expected launch numbers are read from the report's own rows here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tracekit
from tracekit.analyzers.importer import combine, read_file

CUTLASS = "thirdparty/panjd123-cutlass"


def _analysis(path: Path) -> Any:
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return tracekit.load(path).analyze()


@pytest.mark.parametrize(
    "rel", [f"{CUTLASS}/384.ncu-rep", f"{CUTLASS}/report.ncu-rep", f"{CUTLASS}/report75.ncu-rep"]
)
def test_occupancy_is_not_blamed_where_the_grid_is_smaller_than_the_ctas_the_gpu_holds(
    shared_data: Path, rel: str
) -> None:
    """panjd123's CUTLASS int8 GEMMs (A100, 108 SMs) launch 96 CTAs: at most one CTA per SM ever runs, so the
    shared-memory (1 CTA/SM) and register (2 CTA/SM) limits never bind, and Nsight Compute says "Small Grid".
    They were "occupancy limited by shared memory ... fewer pipeline stages" and "... by registers ... cap them
    (__launch_bounds__)": the cause is too few CTAs, the remedy more CTAs."""
    path = shared_data / rel
    a = _analysis(path)
    rows = combine([read_file(path)])["ncu"].to_dicts()
    assert rows and all(r["grid_size"] == 96 and r["sm_count"] == 108 for r in rows)
    limits = {min(r["occupancy_limit_shared_mem"], r["occupancy_limit_registers"]) for r in rows}
    assert limits <= {1, 2}  # 108 or 216 CTA slots, more than the 96 CTAs either way
    assert len(a.cases) == 2
    for c in a.cases:
        inside = next(f for f in c.factors if f.name == "in-kernel")
        assert inside.cause == "too few CTAs to fill the GPU", (c.name, inside.cause)
        assert c.verdict.cause == "too few CTAs to fill the GPU"
        remedy = inside.remedy or ""
        assert "96 CTAs for" in remedy and "split-K" in remedy and "stream-K" in remedy
        assert "__launch_bounds__" not in remedy and "pipeline stages" not in remedy
        assert "the grid bounds it" in inside.sentence and "stages of a" not in inside.sentence
        waves = next(f for f in c.factors if f.name == "waves")
        assert waves.evidence["grid_size"] == 96 and waves.evidence["waves"] < 1


def test_a_capped_kernel_with_a_large_grid_keeps_its_occupancy_cause() -> None:
    """The control: the SIMT SGEMM capped at one CTA per SM by 200 KB of shared memory launches 16,384 CTAs, so the
    limiter binds and stays the cause."""
    a = _analysis(Path(__file__).resolve().parents[2] / "samples" / "h200-foreign-simt_smem")
    capped = next(c for c in a.cases if c.name == "sgemm_smem_capped")
    assert capped.verdict.cause == "occupancy limited by shared memory"


def _card(a: Any, m: int, n: int, k: int) -> Any:
    return next(c for c in a.cases if c.shape and (c.shape.m, c.shape.n, c.shape.k) == (m, n, k))


def test_a_split_k_gemm_is_not_told_to_use_split_k(shared_data: Path) -> None:
    """HTA's trace_diff: addmm 1024x96x512 launches a grid of [32,1,2] (64 CTAs, already split over K) and a
    splitKreduce_kernel after each launch; it was told "use more CTAs (split-K, smaller N tiles), or a GEMV-style
    kernel for tiny M". The remedy now says it already splits K (with the reduce's share) and offers a larger
    split or stream-K; M=1024 is not tiny, so no GEMV."""
    a = _analysis(shared_data / "thirdparty/hta/trace_diff__control__control.json.gz")
    for m, n, k in ((1024, 96, 512), (96, 512, 1024)):
        c = _card(a, m, n, k)
        assert c.verdict.cause == "memory bandwidth not saturated"
        share = 100 * c.timing.splitk_ns_total / c.timing.gemm_ns_total
        assert c.timing.splitk_ns_total > 0 and share > 30
        remedy = c.verdict.remedy or ""
        assert "already splits K" in remedy and f"{share:.0f}%" in remedy and "stream-K" in remedy
        assert "GEMV" not in remedy and "use more CTAs (split-K" not in remedy


def test_gemv_is_offered_only_for_a_tiny_m_or_n(shared_data: Path) -> None:
    """TraceLens's B200 trace: addmm with M=888 (N=128 and N=2880) fills 112 and 140 of 148 CTA slots; the
    "GEMV-style kernel for tiny M" of the remedy does not fit M=888."""
    a = _analysis(shared_data / "thirdparty/tracelens/b200__eager_trace.json.gz")
    for m, n, k in ((888, 128, 2880), (888, 2880, 512)):
        c = _card(a, m, n, k)
        remedy = c.verdict.remedy or ""
        assert "CTA slots" in remedy and "split-K" in remedy, remedy
        assert "GEMV" not in remedy
