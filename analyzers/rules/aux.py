"""Auxiliary kernels: quantize, split-K reduce, scale swizzle in the GEMM's range, timed apart from the GEMM."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import Factor

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import GemmCase


def aux(case: GemmCase) -> Factor | None:
    """``main / (main + aux)``; None when the range held no auxiliary kernel."""
    if not case.main_ns or not case.aux_ns:
        return None
    value = case.main_ns / (case.main_ns + case.aux_ns)
    names = case.aux_kernels or ["(auxiliary step)"]
    short = ", ".join(n.split("(")[0].split("<")[0].removeprefix("void ")[:60] for n in names[:3])
    share = 100.0 * (1.0 - value)
    ev = {"main_time_ns": case.main_ns, "aux_time_ns": case.aux_ns, "aux_kernels": names}
    sentence = (
        f"Auxiliary kernels ({short}) take {case.aux_ns / 1e3:.1f} us per launch, {share:.0f}% of the GEMM's "
        "GPU time."
    )
    lowered = " ".join(names).lower()
    if "splitk" in lowered or "reduce" in lowered:
        remedy = "Split-K adds a reduce pass: a larger M, stream-K, or a kernel without split-K removes it."
    elif "quant" in lowered or "cvt" in lowered or "convert" in lowered or "scale" in lowered:
        remedy = (
            "Fuse the activation quantize into the producer kernel (or the GEMM prologue), or quantize once "
            "and reuse across GEMMs sharing the activation."
        )
    else:
        remedy = "Fuse the auxiliary step into the GEMM's prologue or epilogue."
    return Factor("aux kernels", value, sentence, ev, remedy + f" (+{(1 / value - 1) * 100:.0f}%)")
