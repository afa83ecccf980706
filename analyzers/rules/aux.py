"""Auxiliary kernels: the kernels a GEMM's calls own besides the GEMM kernel (:mod:`tracekit.analyzers.gemm.roles`),
timed apart from it, each by its class in the kernel table (analyzers/taxonomy) with the remedy that fits it: an activation (SiLU, GELU, the SwiGLU multiply)
goes into the GEMM's epilogue or a fused gated-activation kernel; a quantize (a real cast to a float8 / FP4 type,
its amax and scale) into the producer; a split-K reduce away with another split; a layout copy into the GEMM's
operand layout. Kernels that are their own operation (attention, a norm, rotary) are said to be in the range, not
blamed on the GEMM as something to fuse into it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tracekit.numbers import duration

from ..taxonomy import classify_name, split_name
from . import Factor, Rule, factor

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import CaseEvidence

AUX_CLASSES = (
    "quantize",
    "activation",
    "splitk-reduce",
    "layout",
    "elementwise",
    "memory",
    "normalization",
    "softmax",
    "attention",
    "convolution",
    "reduction",
    "rng",
    "communication",
    "gemm",
    "other",
)
"""The classes an auxiliary kernel may have, in the order the factor's text names them."""
_LABEL = {
    "quantize": "quantize",
    "activation": "activation",
    "splitk-reduce": "split-K reduce",
    "layout": "layout",
    "elementwise": "elementwise",
    "memory": "fill / memset",
    "normalization": "normalization",
    "softmax": "softmax",
    "attention": "attention",
    "convolution": "convolution",
    "reduction": "reduction",
    "rng": "random-number",
    "communication": "communication",
    "gemm": "other GEMM",
    "other": "unclassified",
}
_REMEDY = {
    "quantize": "Fuse the activation quantize (amax, scale, cast) into the producer kernel (the previous op, or "
    "the GEMM prologue), or keep activations in FP8 between layers: quantize once and reuse across the GEMMs "
    "sharing the activation; delayed scaling drops the amax pass.",
    "activation": "Fuse the activation into the GEMM's epilogue (cuBLASLt / CUTLASS apply GELU, SiLU and bias "
    "there), or run a SwiGLU / GeGLU as one fused kernel (silu_and_mul of vLLM, FlashInfer or sgl-kernel, or "
    "torch.compile).",
    "splitk-reduce": "Split-K adds a reduce pass: a larger M, stream-K, or a kernel without split-K removes it.",
    "layout": "The operand is copied into another layout before the GEMM: pass the transpose to the GEMM (a "
    "TN/NT kernel) instead of materialising it, or store the weight in the layout the GEMM wants.",
    "elementwise": "Fuse the elementwise step into the GEMM's epilogue (bias, scale, residual add) or into its "
    "neighbour (torch.compile fuses chains of pointwise ops).",
    "memory": "A memset or fill on every call: where the GEMM library issues it (cuBLAS zeroes a workspace for its "
    "split-K / segment-K kernels), a kernel without split-K avoids it; where the program does, reuse the output "
    "buffer or let the GEMM overwrite it (beta = 0) instead of zeroing it first.",
    "normalization": "A normalization in the range: fuse it with its neighbours (a fused residual-add + RMSNorm, "
    "or RMSNorm + quantize kernel) rather than into the GEMM.",
}
REMEDY_SHARE = 0.1
"""An auxiliary class gets its remedy when its kernels hold at least this share of the calls' auxiliary time."""
_SEPARATE = (
    "These kernels are their own operations, not parts of the GEMM: put the GEMM in a range of its own to rate it "
    "alone, and look at them in the step breakdown."
)
_GATE_MUL = re.compile(r"MulFunctor|mul_kernel|(?<![a-z])mul(?![a-z])", re.IGNORECASE)
"""The multiply of a gated activation (SwiGLU: silu(gate) * up), beside an activation kernel."""
_QUANT_STEP = re.compile(
    r"AbsFunctor|abs_kernel|MaxOps|MaxNanFunctor|amax|absmax|DivFunctor|div_true|MulFunctor|reciprocal|clamp|"
    r"direct_copy|copy_kernel",
    re.IGNORECASE,
)
"""Steps of an FP8 / FP4 activation quantize (abs, amax, reciprocal, scale, clamp, a copy), beside a real cast."""
_GENERIC_FUNCTIONS = re.compile(
    r"^(?:vectorized_|unrolled_)?elementwise_kernel$|^index_elementwise_kernel$|^reduce_kernel$|^Kernel2?$|"
    r"^device_kernel$|^multi_tensor_apply_kernel$"
)
_TELLING = re.compile(
    r"\b(\w+_kernel_cuda|\w+_kernel_impl|\w+KernelImpl|\w+_kernel|\w+Functor\w*|\w+Ops|cutlass_\w+)\b"
)
_NOT_TELLING = frozenset(
    {
        "gpu_kernel_impl",
        "gpu_kernel_impl_nocast",
        "elementwise_kernel",
        "vectorized_elementwise_kernel",
        "unrolled_elementwise_kernel",
        "BinaryFunctor",
        "AUnaryFunctor",
        "BUnaryFunctor",
        "UnaryFunctor",
    }
)


def kernel_label(name: str | None) -> str:
    """A short, never empty label of a kernel for a sentence: its own function name without namespaces
    (``splitKreduce_kernel``), and for PyTorch's generic launchers the functor or lambda that names the work
    (``elementwise_kernel<silu_kernel>``)."""
    if not name:
        return "(unnamed kernel)"
    fn, args = split_name(name)
    last = fn.rsplit("::", 1)[-1].strip() or fn.strip()
    if _GENERIC_FUNCTIONS.match(last) and args:
        words = [w for w in _TELLING.findall(args) if w not in _NOT_TELLING]
        if words:
            last = f"{last}<{words[0]}>"
    return (last or name.strip())[:80] or "(unnamed kernel)"


def aux_class(name: str | None) -> str:
    """The class of an auxiliary kernel (the kernel table's; ``other`` for names it does not know)."""
    return classify_name(name).kernel_class


def _classes(names: list[str]) -> dict[str, str]:
    """Each auxiliary kernel's class, with the steps that belong to a neighbour: a multiply beside an activation
    is the gated (SwiGLU) multiply; abs, amax, divide, scale and copy steps beside a real low-precision cast are
    the quantizer's. Without such a neighbour they keep their own class: a bf16 model gets no quantize advice."""
    classes = {n: aux_class(n) for n in names}
    has = set(classes.values())
    for n, c in classes.items():
        if c not in ("elementwise", "reduction", "layout", "other"):
            continue
        if "quantize" in has and _QUANT_STEP.search(n):
            classes[n] = "quantize"
        elif "activation" in has and c == "elementwise" and _GATE_MUL.search(n):
            classes[n] = "activation"
    return classes


def _names(names: list[str], classes: dict[str, str], most: int = 4) -> str:
    """The kernels' labels for the sentence: one of each class first (in the order classes are named), then
    the rest, at most ``most`` and a count of the others; never empty."""
    order = {c: i for i, c in enumerate(AUX_CLASSES)}
    ranked = sorted(names, key=lambda n: (order.get(classes.get(n, "other"), len(order)), kernel_label(n)))
    firsts = {classes.get(n): n for n in reversed(ranked)}
    picked = sorted(firsts.values(), key=ranked.index) + [n for n in ranked if n not in firsts.values()]
    labels = list(dict.fromkeys(kernel_label(n) for n in picked)) or ["(auxiliary step)"]
    return ", ".join(labels[:most]) + (f" and {len(labels) - most} more" if len(labels) > most else "")


def _join(words: list[str]) -> str:
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else words[0]


def aux(case: CaseEvidence) -> Factor | None:
    """``GEMM time / (GEMM time + aux time)`` over the case's calls; None when the calls own no auxiliary kernel
    outside their GEMM time (split-K reduces are GEMM time: :func:`splitk`)."""
    t = case.timing
    gemm, aux_total = t.gemm_ns_total, t.aux_ns_total
    if not gemm or not aux_total:
        return None
    value = gemm / (gemm + aux_total)
    uses = [u for u in case.aux if u.role != "splitk-reduce"]
    names = [u.name for u in uses]
    share = 100.0 * (1.0 - value)
    classes = _classes(names)
    found = [c for c in AUX_CLASSES if c in classes.values()]
    short = _names(names, classes)
    per_call = aux_total / t.calls if t.calls else aux_total
    ev = {
        "gemm_time_ns_total": gemm,
        "aux_time_ns_total": aux_total,
        "aux_time_ns_per_call": per_call,
        "calls": t.calls,
        "aux_kernels": names or ["(auxiliary step)"],
        "aux_classes": classes,
        "aux_kernel_time_ns": {u.name: u.time_ns_total for u in uses},
    }
    fusable = [_LABEL[c] for c in found if c in _REMEDY]
    own = [_LABEL[c] for c in found if c not in _REMEDY]
    parts = [_join(fusable) + " kernels"] if fusable else []
    if own:
        parts.append(f"other operations in the range ({_join(own)})")
    what = " and ".join(parts) or "Auxiliary steps"
    sentence = (
        f"{what[0].upper() + what[1:]} take {duration(per_call)} mean per call ({duration(aux_total)} over "
        f"{t.calls} call{'s' if t.calls != 1 else ''}), {share:.0f}% of the GEMM + aux time: {short}."
    )
    # advice for the classes that hold the time: a 0.7 µs memset beside 21 µs of quantize gets no paragraph
    class_ns: dict[str, float] = {}
    for u in uses:
        class_ns[classes[u.name]] = class_ns.get(classes[u.name], 0.0) + u.time_ns_total
    spent = sum(class_ns.values())
    material = [c for c in found if not spent or class_ns.get(c, 0.0) >= REMEDY_SHARE * spent]
    if not material and found:
        material = [max(found, key=lambda c: class_ns.get(c, 0.0))]
    fitting = [_REMEDY[c] for c in material if c in _REMEDY][:2]
    if any(c not in _REMEDY for c in found):
        fitting.append(_SEPARATE)
    remedy = " ".join(fitting) or "Fuse the auxiliary step into the GEMM's prologue or epilogue."
    ev["aux_class"] = found[0] if found else "other"
    return factor("aux kernels", value, sentence, ev, remedy)


RULE = Rule(
    name="aux",
    factor="aux kernels",
    reads=("timing",),
    acts_on="call",
    needs_rate=False,
    run=lambda case, _: aux(case),
    cause="auxiliary kernels a call owns (quantize before it, activation after it, layout copies)",
)
