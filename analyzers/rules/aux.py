"""Auxiliary kernels: the other kernels in the GEMM's range (activation quantize / scale / amax, split-K reduce,
layout copy / transpose, other), timed apart from the GEMM; each class gets the remedy that fits it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from . import Factor

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import GemmCase

AUX_CLASSES = ("quantize", "split-K reduce", "layout", "other")
_SPLITK = re.compile(r"splitk|split_k|splitKreduce|reduce_split|streamk_reduce|fixup", re.IGNORECASE)
_QUANT = re.compile(
    r"quantiz|_quant|quant_|cvt_|float8|fp8|e4m3|e5m2|e2m1|fp4|nvfp4|mxfp|amax|absmax|MaxNanFunctor|MaxOps|"
    r"abs_kernel|AbsFunctor|DivFunctor|div_true|reciprocal|clamp|scale|cast",
    re.IGNORECASE,
)
_ELEMENTWISE = re.compile(
    r"elementwise|MulFunctor|direct_copy|_copy_kernel|fill|reduce_kernel", re.IGNORECASE
)
_LAYOUT = re.compile(r"transpose|permute|contiguous|copy|swizzle|layout|reorder", re.IGNORECASE)
_REMEDY = {
    "quantize": "Fuse the activation quantize (amax, scale, cast) into the producer kernel (the previous op, or "
    "the GEMM prologue), or keep activations in FP8 between layers: quantize once and reuse across the GEMMs "
    "sharing the activation; delayed scaling drops the amax pass.",
    "split-K reduce": "Split-K adds a reduce pass: a larger M, stream-K, or a kernel without split-K removes it.",
    "layout": "The operand is copied into another layout before the GEMM: pass the transpose to the GEMM (a "
    "TN/NT kernel) instead of materialising it, or store the weight in the layout the GEMM wants.",
    "other": "Fuse the auxiliary step into the GEMM's prologue or epilogue.",
}


def aux_class(name: str | None) -> str:
    """The class of an auxiliary kernel by its name: quantize (amax, scale, cast to a low-precision type),
    split-K reduce, layout (copy / transpose), other. Quantize is tested first: a copy into float8 is a cast."""
    text = name or ""
    if _SPLITK.search(text):
        return "split-K reduce"
    if _QUANT.search(text):
        return "quantize"
    if _LAYOUT.search(text):
        return "layout"
    return "other"


def aux(case: GemmCase) -> Factor | None:
    """``main / (main + aux)``; None when the range held no auxiliary kernel."""
    if not case.main_ns or not case.aux_ns:
        return None
    value = case.main_ns / (case.main_ns + case.aux_ns)
    names = case.aux_kernels or ["(auxiliary step)"]
    short = ", ".join(n.split("(")[0].split("<")[0].removeprefix("void ")[:60] for n in names[:3])
    share = 100.0 * (1.0 - value)
    classes = {n: aux_class(n) for n in names}
    if "quantize" in classes.values():
        # beside an amax / cast, the range's plain elementwise steps (multiply by the scale, a copy to float)
        # are the quantizer's too
        classes = {
            n: "quantize" if c in ("other", "layout") and _ELEMENTWISE.search(n) else c
            for n, c in classes.items()
        }
    found = [c for c in AUX_CLASSES if c in classes.values()]
    ev = {
        "main_time_ns": case.main_ns,
        "aux_time_ns": case.aux_ns,
        "aux_kernels": names,
        "aux_classes": classes,
    }
    what = " and ".join(found[:2]) if found and found != ["other"] else "auxiliary"
    sentence = (
        f"{what[0].upper() + what[1:]} kernels ({short}) take {case.aux_ns / 1e3:.1f} us per launch, {share:.0f}% "
        "of the GEMM's GPU time."
    )
    remedy = " ".join(_REMEDY[c] for c in found[:2]) if found else _REMEDY["other"]
    ev["aux_class"] = found[0] if found else "other"
    return Factor("aux kernels", value, sentence, ev, remedy + f" (+{(1 / value - 1) * 100:.0f}%)")
