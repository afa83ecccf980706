"""Split-K reduce: the reduce kernels a GEMM's calls run after a kernel that splits K, timed as GEMM time (the
kernel rate includes them), against the GEMM kernel's own time."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.numbers import duration

from . import Factor, Rule, factor
from .aux import _REMEDY, _names

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import CaseEvidence


def splitk(case: CaseEvidence) -> Factor | None:
    """``GEMM kernel time / (GEMM kernel + split-K reduce time)``: the part of the GEMM time its split-K reduce
    kernels take (they are GEMM time: the kernel rate includes them). None without a reduce."""
    t = case.timing
    reduce_ns = t.splitk_ns_total
    if not reduce_ns or not t.gemm_ns_total:
        return None
    kernel_ns = t.gemm_ns_total - reduce_ns
    value = kernel_ns / t.gemm_ns_total
    names = [u.name for u in case.aux if u.role == "splitk-reduce"] or ["(split-K reduce)"]
    ev = {
        "gemm_kernel_ns_total": kernel_ns,
        "splitk_reduce_ns_total": reduce_ns,
        "calls": t.calls,
        "aux_kernels": names,
        "aux_class": "splitk-reduce",
    }
    sentence = (
        f"The split-K reduce ({_names(names, {n: 'splitk-reduce' for n in names}, 2)}) takes "
        f"{duration(reduce_ns / max(t.calls, 1))} mean per call, {100 * (1 - value):.0f}% of the GEMM time."
    )
    return factor("split-K reduce", value, sentence, ev, _REMEDY["splitk-reduce"])


RULE = Rule(
    name="splitk",
    factor="split-K reduce",
    reads=("timing",),
    acts_on="call",
    needs_rate=False,
    run=lambda case, _: splitk(case),
    cause="the split-K reduce kernels a call adds to its GEMM time",
)
