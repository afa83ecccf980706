"""GEMM operators rated both ways: tracekit's kernel rate and TraceLens's definition, from the same calls
(AMD-AGI/TraceLens rates each PyTorch GEMM op from its ``Input Dims``; docs/CASES.md compares the two on the
shared traces, tests/analysis/test_tracelens.py against TraceLens's own numbers in shared/data/peers).

The two differ by definition only:

- **time**: tracekit's GEMM time is the GEMM kernel and its split-K reduce; TraceLens's is the busy time of
  every GPU event under the operator, which adds cuBLAS's workspace memset, a bias copy, a fill of the output;
- **FLOPs**: tracekit counts 2*M*N*K; TraceLens adds M*N for the bias of ``addmm``;
- **aggregation**: tracekit's kernel rate is sum of FLOPs / sum of GEMM time over the calls (each call weighs by
  its time); TraceLens takes the median of the per-call rates.

:func:`op_rates` gives, per operator and shape: the case's kernel rate, the rate of its median call (FLOPs over
the median per-call GEMM time: the kernel rate aggregated as TraceLens aggregates) and TraceLens's definition
computed from the case's own calls (the kernels and memsets the readers put under each call's operator range).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import polars as pl

from .case import CaseEvidence
from .names import dtype_class
from .ranges import resolve_ranges


@dataclass(frozen=True)
class OpRate:
    """One operator and shape (``dtype_class`` its operands' class: fp32 also where a TF32 kernel ran it): its
    calls, FLOPs per call, tracekit's kernel rate (sum of FLOPs / sum of GEMM
    time), the median call's (FLOPs / median per-call GEMM time; None where several cases share the operator and
    shape), TraceLens's rate from the same calls (median over calls of ``(2MNK [+ MN for addmm]) / time of every
    kernel and memset under the operator``), and the time TraceLens's definition adds (ns over all calls)."""

    op: str
    m: int
    n: int
    k: int
    batch: int
    dtype_class: str | None
    calls: int
    flops_per_call: float
    kernel_tflops: float
    median_call_tflops: float | None
    tracelens_tflops: float | None
    added_ns_total: float
    achieved_tflops: float | None = None
    """The case's achieved rate: sum of FLOPs / sum of call spans (the kernels the operator launched, the gaps
    between them and the launch gap before a back-to-back call)."""
    owned_tflops: float | None = None
    """TraceLens's definition from the kernels each call owns (GEMM + auxiliary time, no gap; M*N more for an
    addmm; median over calls): where ownership by operator is right, TraceLens's number."""
    gap_ns_total: float = 0.0
    """The calls' idle time that achieved counts and TraceLens does not."""
    fusion_ns_total: float = 0.0
    """The fusion candidates' time: kernels of the following (or preceding) operators, in neither rate."""


def _under_call(frame: pl.DataFrame | None, resolved: pl.DataFrame) -> pl.DataFrame:
    """Rows of ``frame`` (kernels or memops) with the call range they sit under (``call``), their duration."""
    if frame is None or frame.height == 0 or "range_id" not in frame.columns:
        return pl.DataFrame(schema={"call": pl.Int64, "duration_ns": pl.Int64})
    rows = frame.select(pl.col("range_id").cast(pl.Int64), "duration_ns").filter(
        pl.col("range_id").is_not_null()
    )
    return rows.join(resolved.select("range_id", "call"), on="range_id").select("call", "duration_ns")


def op_rates(frames: dict[str, pl.DataFrame], cases: list[CaseEvidence]) -> list[OpRate]:
    """Per PyTorch GEMM operator and shape of ``cases`` (those whose calls are the profiler's operator ranges),
    tracekit's kernel rate and TraceLens's definition of the rate from the same calls."""
    ranges = frames.get("ranges")
    if ranges is None or ranges.height == 0:
        return []
    resolved = resolve_ranges(ranges)
    busy = pl.concat(
        [_under_call(frames.get("kernels"), resolved), _under_call(frames.get("memops"), resolved)]
    )
    per_call = dict(busy.group_by("call").agg(pl.col("duration_ns").sum()).iter_rows())
    groups: dict[tuple, list[CaseEvidence]] = {}
    for c in cases:
        if c.shape is None or not c.op or not c.timing.calls:
            continue
        inputs = (
            dtype_class(c.shape.dtype_a, c.shape.dtype_b) or c.dtype_class
        )  # the operands', as TraceLens names them
        key = (c.op, c.shape.m, c.shape.n, c.shape.k, c.shape.batch or 1, inputs)
        groups.setdefault(key, []).append(c)
    out = []
    for (op, m, n, k, batch, cls), members in groups.items():
        calls = sum(c.timing.calls for c in members)
        flops = members[0].flops or 0.0
        gemm_ns = sum(c.timing.gemm_ns_total for c in members)
        flops_tl = flops + (m * n if op == "addmm" else 0)
        times = [per_call[r] for c in members for r in c.range_ids if per_call.get(r)]
        out.append(
            OpRate(
                op=op,
                m=m,
                n=n,
                k=k,
                batch=batch,
                dtype_class=cls,
                calls=calls,
                flops_per_call=flops,
                kernel_tflops=flops * calls / gemm_ns / 1e3,
                median_call_tflops=(
                    flops / mid / 1e3
                    if len(members) == 1 and (mid := members[0].timing.gemm_ns.median)
                    else None
                ),
                tracelens_tflops=statistics.median(flops_tl / t / 1e3 for t in times) if times else None,
                added_ns_total=max(sum(times) - gemm_ns, 0.0) if times else 0.0,
                achieved_tflops=(
                    flops * calls / span / 1e3
                    if (
                        span := sum(
                            c.timing.gemm_ns_total + c.timing.aux_ns_total + c.timing.gap_ns_total
                            for c in members
                        )
                    )
                    else None
                ),
                owned_tflops=(
                    flops_tl / busy / 1e3
                    if len(members) == 1 and (busy := members[0].timing.busy_ns.median)
                    else None
                ),
                gap_ns_total=sum(c.timing.gap_ns_total for c in members),
                fusion_ns_total=sum(u.time_ns_total for c in members for u in c.fusion),
            )
        )
    return out
