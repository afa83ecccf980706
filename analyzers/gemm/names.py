"""What a name says: tracekit's GEMM range names (:func:`parse_gemm_name`), dtype classes, the minimum
bytes a shape moves, and whether a kernel's name is a GEMM, an auxiliary kernel or neither."""

from __future__ import annotations

import functools
import math
import re
from typing import Any

from tracekit import naming

_AUX_PATTERN = re.compile(
    r"splitkreduce|splitk_reduce|reduce_kernel|quantiz|_quant|cvt_|convert|swizzle|scale_|_scale|amax|"
    r"elementwise|fill_|copy|transpose|cast",
    re.IGNORECASE,
)
_GEMM_PATTERN = re.compile(
    r"gemm|nvjet|cutlass|xmma|wgmma|hmma|imma|matmul|_mm_|mm_kernel|sgemm|tensorop|gemv|bmm", re.IGNORECASE
)


# --- names, dtypes and bytes --------------------------------------------------------------------------------------
def parse_gemm_name(name: str | None) -> dict[str, Any] | None:
    """GEMM fields of a range name (tracekit's codec, or the legacy probe form); None for other names."""
    if not name:
        return None
    decoded = naming.decode(name) or naming.decode_legacy(name)
    if decoded is None or decoded.kind != "gemm":
        return None
    f = decoded.fields

    def as_int(key: str) -> int | None:
        v = f.get(key)
        return int(v) if v is not None and v.isdigit() else None

    return {
        "backend": f.get("backend"),
        "op": f.get("op"),
        "m": as_int("M"),
        "n": as_int("N"),
        "k": as_int("K"),
        "dtype_a": f.get("a"),
        "dtype_b": f.get("b"),
        "dtype_out": f.get("out"),
        "scale": f.get("scale"),
    }


def aux_key(name: str | None) -> tuple[str, int, int] | None:
    """(backend, M, K) of a tracekit ``aux`` range name: the GEMM it serves has the same three; None otherwise."""
    decoded = naming.decode(name) if name else None
    if decoded is None or decoded.kind != "aux":
        return None
    backend, m, k = decoded.fields.get("backend"), decoded.get_int("M"), decoded.get_int("K")
    return (backend, m, k) if backend and m is not None and k is not None else None


def _serves(aux: tuple[str, int, int], gemm: tuple[str, int, int]) -> bool:
    """Whether an aux range's (backend, M, K) feeds a GEMM's: same M and K, and the same backend or its family
    (an instrumented ``flashinfer.fp4_quantize`` names ``flashinfer-fp4``; the GEMM after it,
    ``flashinfer-fp4-cutlass``)."""
    return aux[1:] == gemm[1:] and (gemm[0] == aux[0] or gemm[0].startswith(aux[0] + "-"))


_NAME_CLASS = (
    (re.compile(r"e2m1|fp4|nvf4|mxf4", re.I), "fp4"),
    (re.compile(r"e4m3|e5m2|fp8|qgmma|_qq|f8f6f4|float_e4m3", re.I), "fp8"),
    (re.compile(r"bf16|bfloat16", re.I), "bf16"),
    (re.compile(r"f16|fp16|h16|hgemm|s16816|s1688|s161616|half_t|__half", re.I), "fp16"),
    (re.compile(r"tf32|s1684|tfloat32", re.I), "tf32"),
    (re.compile(r"imma|igemm|i8i8|s8s8|int8_t|_i8_|_s8_|signed char", re.I), "int8"),
    (re.compile(r"sgemm|f32f32|float", re.I), "fp32"),
)


def dtype_class(
    dtype_a: str | None, dtype_b: str | None = None, kernel_name: str | None = None
) -> str | None:
    """The tensor-core rate class of a GEMM: the wider of its two inputs' classes (a weight-only FP4 GEMM with
    BF16 activations runs at the BF16 rate), else guessed from the kernel name; None when unknown."""
    classes = [naming.DTYPE_CLASS.get(d) for d in (dtype_a, dtype_b) if d]
    classes = [c for c in classes if c]
    if classes:
        return max(classes, key=lambda c: naming.DTYPE_BITS.get(_CLASS_DTYPE.get(c, c), 0))
    if kernel_name and (_GEMM_PATTERN.search(kernel_name) or "float" in kernel_name):
        # The element type named first wins (CUTLASS names list A's type before the accumulator's).
        hits = [(m.start(), cls) for pattern, cls in _NAME_CLASS if (m := pattern.search(kernel_name))]
        if hits:
            return min(hits)[1]
    return None


_CLASS_DTYPE = {"fp8": "e4m3", "fp4": "e2m1", "fp16": "fp16", "bf16": "bf16", "tf32": "tf32", "int8": "int8"}


def _scale_bytes(
    m: int, n: int, k: int, dtype_a: str | None, dtype_b: str | None, scale: str | None
) -> float:
    """Bytes of block / row / tensor scales for both operands (fp32 scales unless the layout says otherwise)."""
    s = (scale or "").lower()
    fp4 = "e2m1" in (dtype_a, dtype_b)
    if "mx" in s or "e8m0" in s or "1x32" in s:
        return (m * k + k * n) / 32  # one e8m0 byte per 32 elements
    if "nvfp4" in s or "1x16" in s or (fp4 and not s):
        return (m * k + k * n) / 16 + 8  # one e4m3 byte per 16 elements, plus two fp32 global scales
    if s == "tensorwise":
        return 8.0
    if s == "rowwise":
        return 4.0 * (m + n)
    if s.startswith("blockwise") or "128" in s:
        kb = math.ceil(k / 128)
        if "1x128" in s and s.count("1x128") >= 2:  # 1x128 for both operands
            return 4.0 * (m * kb + n * kb)
        return 4.0 * (m * kb + kb * math.ceil(n / 128))  # A 1x128, B 128x128 (DeepSeek-style)
    return 0.0


def min_bytes(
    m: int,
    n: int,
    k: int,
    dtype_a: str | None,
    dtype_b: str | None = None,
    dtype_out: str | None = None,
    scale: str | None = None,
) -> float:
    """The fewest bytes a GEMM must move: A and B read once, C written once, at their real widths (FP4 is 4
    bits), plus their scales. Unknown dtypes count as 16-bit."""
    bits_a = naming.DTYPE_BITS.get(dtype_a or "", 16)
    bits_b = naming.DTYPE_BITS.get(dtype_b or dtype_a or "", bits_a)
    low = dtype_a in ("e4m3", "e5m2", "e2m1", "int8")
    bits_c = naming.DTYPE_BITS.get(dtype_out or "", 16 if low else bits_a)
    return (m * k * bits_a + k * n * bits_b + m * n * bits_c) / 8 + _scale_bytes(
        m, n, k, dtype_a, dtype_b, scale
    )


_NOT_GEMM_FUNCTION = re.compile(
    r"flash|attn|attention|softmax|finaliz|norm|topk|permut|gather|scatter|rotary|rope|embedding|sort|histogram",
    re.IGNORECASE,
)
"""Words in a kernel's own function name (before its template arguments) that say it is not a GEMM, although its
template arguments name CUTLASS types (``pytorch_flash::flash_fwd_kernel<... cutlass::bfloat16_t ...>``,
``moe::dev::finalize::finalizeKernelVecLoad<... cutlass::bfloat16_t ...>``)."""


def _function_part(name: str) -> str:
    """A demangled kernel name without its return type, template arguments and parameters."""
    text = name.removeprefix("void ").strip()
    cut = min((i for i in (text.find("<"), text.find("(")) if i >= 0), default=len(text))
    return text[:cut]


@functools.lru_cache(maxsize=1 << 16)
def is_gemm_kernel(name: str | None) -> bool:
    """A GEMM kernel by its name alone: named like a GEMM, not an attention / normalisation / routing kernel by
    its own function name, and classified ``main`` (not an auxiliary kernel). Cached per name: a timeline of a
    million launches holds a few hundred distinct names, and the patterns cost tens of µs on a long CUTLASS
    name."""
    if not name or not _GEMM_PATTERN.search(name) or classify_kernel(name) != "main":
        return False
    return not _NOT_GEMM_FUNCTION.search(_function_part(name))


@functools.lru_cache(maxsize=1 << 16)
def classify_kernel(name: str | None, in_aux_range: bool = False) -> str:
    """``main`` for a GEMM kernel, ``aux`` for quantize / split-K reduce / scale swizzle / copies (cached per
    name, as :func:`is_gemm_kernel`)."""
    if in_aux_range:
        return "aux"
    text = name or ""
    if _AUX_PATTERN.search(text) and not re.match(r"^(nvjet|sm\d+_xmma|cutlass)", text):
        return "aux"
    return "main"
