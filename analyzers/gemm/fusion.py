"""Fusion candidates: kernels of the operators around a GEMM operator that work on its data (an activation, a
bias add or a gating multiply reading its output; a quantize writing its input), which launch order once charged
to the GEMM's call (:mod:`.roles`). The profiler recorded another operator launching them, so they are not the
GEMM's time (:func:`.calls.user_calls` keeps each operator's kernels with it, as TraceLens does) and they are
reported beside the GEMM instead: each with its time and the fusion that would remove it. The largest one can be
the case's verdict when it costs more than any factor of the GEMM's own calls (:func:`fusion_verdict`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import polars as pl

from tracekit.numbers import duration

from ..analysis.model import FusionCandidate

if TYPE_CHECKING:
    from ..analysis.model import Case
    from .case import CaseEvidence

_GATE_MUL = re.compile(r"MulFunctor|mul_kernel|(?<![a-z])mul(?![a-z])", re.IGNORECASE)
_ADD = re.compile(r"AddFunctor|add_kernel|CUDAFunctor_add|(?<![a-z])add(?![a-z])", re.IGNORECASE)

LABEL = {
    "silu": "SiLU",
    "gelu": "GELU",
    "relu": "ReLU",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
    "mul": "multiply",
    "add": "add",
    "add_": "add",
    "mul_": "multiply",
    "silu_": "SiLU",
    "gelu_": "GELU",
}
"""Words for the operators a sentence names (``aten::silu`` -> SiLU); others go by their own name."""

REMEDY = {
    "activation": "Fuse the activation into the GEMM's epilogue (cuBLASLt / CUTLASS apply GELU, SiLU and bias "
    "there), or run a SwiGLU / GeGLU as one fused kernel (silu_and_mul of vLLM, FlashInfer or sgl-kernel, or "
    "torch.compile).",
    "gating multiply": "Fuse the multiply with the activation it gates or completes (SwiGLU's silu(gate) * up: "
    "silu_and_mul of vLLM, FlashInfer or sgl-kernel; quick_gelu's x * sigmoid(1.702 x): torch.compile), or into "
    "the GEMM's epilogue.",
    "bias": "Fuse the bias or residual add into the GEMM's epilogue (addmm, cuBLASLt's bias epilogue, or "
    "torch.compile).",
    "quantize": "Fuse the activation quantize (amax, scale, cast) into the producer kernel (the previous op, or "
    "the GEMM prologue), or keep activations in FP8 between layers.",
    "elementwise": "Fuse the elementwise step into the GEMM's epilogue or its neighbour (torch.compile fuses "
    "chains of pointwise ops).",
}
"""What to do about a candidate, by its class."""


def word(candidate: FusionCandidate) -> str:
    """The candidate's operator in a sentence (``SiLU``, ``multiply``)."""
    base = (candidate.op or candidate.kernel_class).split("::")[-1]
    return LABEL.get(base, base)


def _kind(classes: list[str | None], names: list[str], activation_near: bool) -> str:
    """A candidate's class from its kernels' classes and names (a multiply beside an activation is the gate's)."""
    if "activation" in classes:
        return "activation"
    if "quantize" in classes:
        return "quantize"
    if any(_GATE_MUL.search(n or "") for n in names):
        return "gating multiply" if activation_near else "elementwise"
    if any(_ADD.search(n or "") for n in names):
        return "bias"
    return "elementwise"


def fusion_uses(rows: pl.DataFrame) -> dict[int, list[FusionCandidate]]:
    """Per case, its candidates from ``rows`` (case, name, cls, duration_ns, ``_op`` the launching operator's
    name, ``_after``), one per operator and side, largest time first."""
    if rows.height == 0:
        return {}
    if "_op" not in rows.columns:
        rows = rows.with_columns(pl.lit(None, pl.String).alias("_op"))
    grouped = (
        rows.group_by("case", "_op", "_after")
        .agg(
            pl.col("name").unique(maintain_order=True),
            pl.col("cls"),
            pl.col("duration_ns").sum().cast(pl.Float64).alias("ns"),
            pl.len().alias("count"),
        )
        .sort("case", "ns", "_op", descending=[False, True, False], nulls_last=True)
    )
    with_act = set(
        rows.filter((pl.col("cls") == "activation").fill_null(False))
        .select("case", "_after")
        .unique()
        .iter_rows()
    )
    out: dict[int, list[FusionCandidate]] = {}
    for case, op, after, names, classes, ns, count in grouped.iter_rows():
        names = [n or "(unnamed kernel)" for n in names]
        kind = _kind(classes, names, (case, after) in with_act)
        out.setdefault(case, []).append(
            FusionCandidate(
                op=op,
                kernels=names,
                kernel_class=kind,
                side="after" if after else "before",
                time_ns_total=ns or 0.0,
                count=int(count),
                remedy=REMEDY.get(kind, REMEDY["elementwise"]),
            )
        )
    return out


def _join(words: list[str]) -> str:
    words = list(dict.fromkeys(words))
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else words[0]


def fusion_sentence(case: CaseEvidence) -> tuple[str, str, float] | None:
    """The case's fusion candidates in one sentence with their remedy and time over all calls (``the SiLU and
    multiply after this GEMM take 1.59 ms: fuse them``); the side with the most time is named. None without
    candidates."""
    uses = case.fusion
    if not uses:
        return None
    after = [u for u in uses if u.side == "after"]
    before = [u for u in uses if u.side != "after"]
    side = after if sum(u.time_ns_total for u in after) >= sum(u.time_ns_total for u in before) else before
    total = sum(u.time_ns_total for u in side)
    calls = max(case.timing.calls, 1)
    where = "after" if side is after else "before"
    words = _join([word(u) for u in side])
    sentence = (
        f"the {words} {where} this GEMM take{'' if len(side) > 1 else 's'} {duration(total)} "
        f"({duration(total / calls)} mean per call), "
        f"launched by {'their own operators' if len(side) > 1 else 'its own operator'}: fuse "
        f"{'them' if len(side) > 1 else 'it'}"
    )
    kinds = {u.kernel_class for u in side}
    if "activation" in kinds:  # its multiply (SwiGLU's gate, quick_gelu's x * sigmoid) fuses with it
        kinds.discard("gating multiply")
    remedy = " ".join(dict.fromkeys(REMEDY.get(k, REMEDY["elementwise"]) for k in sorted(kinds)))
    return sentence, remedy, total


def fusion_verdict(case: CaseEvidence, lost_ns: float) -> tuple[str, str, float] | None:
    """The fusion candidates as the case's verdict, where their time exceeds ``lost_ns`` (what the largest
    factor of the GEMM's own calls costs): (sentence, remedy, time over all calls); else None."""
    found = fusion_sentence(case)
    if found is None or found[2] <= lost_ns:
        return None
    return found


ORDER_NOTE = (
    "auxiliary kernels attributed by launch order: no operator record says which operator launched them (record "
    "the PyTorch profiler's operators, or nsys with emit_nvtx, to attribute them by operator)"
)
"""The card's note where a case's calls own kernels by launch order alone (:attr:`Timing.aux_by_order_ns_total`)."""


def beside_lines(case: Case, most: int = 3) -> list[str]:
    """The lines every view writes under a case's verdict: the calls' auxiliary kernels by name and class, and
    the fusion candidates (the operators around the GEMM, with their class and time), at most ``most`` of each."""
    from ..rules.aux import kernel_label

    out = []
    calls = max(case.timing.calls or 0, 1)
    aux = sorted(case.aux, key=lambda a: -(a.time_ns_total or 0.0))
    if aux:
        named = [
            f"{kernel_label(a.name)} ({a.kernel_class or 'unclassified'}, "
            f"{duration((a.time_ns_total or 0.0) / calls)})"
            for a in aux[:most]
        ]
        more = f" and {len(aux) - most} more" if len(aux) > most else ""
        out.append("aux kernels, mean per call: " + "; ".join(named) + more)
    for f in case.fusion[:most]:
        kernels = ", ".join(dict.fromkeys(kernel_label(k) for k in f.kernels[:2]))
        out.append(
            f"fusion candidate: {f.op or 'an operator'} {f.side} the GEMM ({f.kernel_class}: "
            f"{kernels}), {duration(f.per_call_ns or 0.0)} mean per call, {duration(f.time_ns_total)} in all"
        )
    if len(case.fusion) > most:
        out.append(f"fusion candidates: {len(case.fusion) - most} more (explain --json)")
    return out


def apart_note(case: CaseEvidence) -> str:
    """The card's note where an auxiliary step feeding the case ran apart from its calls
    (:attr:`Timing.aux_apart_runs`)."""
    t = case.timing
    return (
        f"its auxiliary step (a tracekit aux range) ran {t.aux_apart_runs} times apart from the {t.calls} calls, "
        f"not once before each, so it is not in their time; its median run takes {duration(t.aux_apart_ns or 0)}, "
        "what a layer that runs it on every call pays on top (tracekit's benchmark quantizes each input once and "
        "times the quantize in a loop of its own: its measurement's aux time)"
    )
