"""What a name says: tracekit's GEMM range names (:func:`parse_gemm_name`), dtype classes, the minimum
bytes a shape moves, and whether a kernel's name is a GEMM, an auxiliary kernel or neither (the kernel table of
analyzers/taxonomy decides the last two)."""

from __future__ import annotations

import math
from typing import Any

from tracekit import naming

from ..analysis.model import Shape
from ..taxonomy import classify_name, signature_rate_class


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
        return int(v) if v is not None and v.isdecimal() else None

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


def name_shape(parsed: dict[str, Any] | None) -> Shape | None:
    """The shape a GEMM range name gives (:func:`parse_gemm_name`'s fields; ``source`` "range name"), None when
    the name is not a GEMM range or lacks one of M, N and K."""
    if not parsed or not (parsed.get("m") and parsed.get("n") and parsed.get("k")):
        return None
    return Shape(
        m=parsed["m"],
        n=parsed["n"],
        k=parsed["k"],
        dtype_a=parsed.get("dtype_a"),
        dtype_b=parsed.get("dtype_b"),
        dtype_out=parsed.get("dtype_out"),
        scale=parsed.get("scale"),
        source="range name",
    )


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


def dtype_class(
    dtype_a: str | None, dtype_b: str | None = None, kernel_name: str | None = None
) -> str | None:
    """The tensor-core rate class of a GEMM: the wider of its two inputs' classes (a weight-only FP4 GEMM with
    BF16 activations runs at the BF16 rate), else what the kernel's name says (the kernel table,
    analyzers/taxonomy); None when unknown. FP32 inputs run by a kernel whose name says TF32 (cuBLAS / CUTLASS
    ``s1688gemm``, ``f32f32_tf32f32``: PyTorch's ``allow_tf32``) are TF32."""
    classes = [naming.DTYPE_CLASS.get(d) for d in (dtype_a, dtype_b) if d]
    classes = [c for c in classes if c]
    named = name_rate_class(kernel_name)
    if classes:
        cls = max(classes, key=lambda c: naming.DTYPE_BITS.get(_CLASS_DTYPE.get(c, c), 0))
        return "tf32" if cls == "fp32" and named == "tf32" else cls
    return named


def name_rate_class(kernel_name: str | None) -> str | None:
    """The rate class a GEMM kernel's name says (None for names of other known kernels, or that say no type)."""
    if not kernel_name:
        return None
    info = classify_name(kernel_name)
    if info.kernel_class == "gemm":
        return info.dtype_class
    # a kernel the table does not know, made a case by its range or counters: the types its signature names
    return None if info.known else signature_rate_class(kernel_name)


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


def is_gemm_kernel(name: str | None) -> bool:
    """A GEMM kernel by its name alone: the kernel table (analyzers/taxonomy, tracekit/data/kernel_classes.json)
    classes it ``gemm``. Cached per name there: a timeline of a million launches holds a few hundred names."""
    return bool(name) and classify_name(name).kernel_class == "gemm"


def classify_kernel(name: str | None, in_aux_range: bool = False) -> str:
    """``main`` for a kernel that may be a range's GEMM (the table classes it ``gemm``, or does not know it),
    ``aux`` for one the table knows to be something else (split-K reduce, quantize, activation, layout, ...) or
    one in an ``aux`` range."""
    if in_aux_range:
        return "aux"
    info = classify_name(name)
    return "main" if info.kernel_class == "gemm" or not info.known else "aux"


# --- what a kernel's arguments allow ------------------------------------------------------------------------------
_SCALAR_WORDS = frozenset(
    [
        "int",
        "unsigned",
        "signed",
        "long",
        "short",
        "char",
        "float",
        "double",
        "bool",
        "size_t",
        "ptrdiff_t",
        "half",
        "__half",
        "__nv_bfloat16",
        "int8_t",
        "int16_t",
        "int32_t",
        "int64_t",
        "uint8_t",
        "uint16_t",
        "uint32_t",
        "uint64_t",
    ]
)
_QUALIFIERS = frozenset(["const", "volatile", "__restrict__", "__restrict", "restrict"])


def _parameters(name: str) -> list[str] | None:
    """The parameter types of a demangled kernel name's last top-level ``(...)``; None where it has none."""
    name = name.strip()
    if not name.endswith(")"):
        return None
    depth, start = 0, None
    for i in range(len(name) - 1, -1, -1):
        ch = name[i]
        if ch in ")>":
            depth += 1
        elif ch in "(<":
            depth -= 1
            if depth == 0:
                start = i
                break
    if start is None or name[start] != "(":
        return None
    params, depth, cur = [], 0, ""
    for ch in name[start + 1 : -1]:
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        if ch == "," and depth == 0:
            params.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        params.append(cur.strip())
    return params


def pointer_arguments(name: str | None) -> int | None:
    """How many pointer arguments a kernel's demangled signature takes, where every argument is a pointer or a
    plain scalar (``kernel_A(double *, int, int)``: 1); None where the name has no argument list or an argument
    is something else (a ``Params`` struct, a reference, a template type), which may carry any number of
    pointers."""
    params = _parameters(name or "")
    if params is None:
        return None
    pointers = 0
    for p in params:
        words = [w for w in p.replace("*", " * ").split() if w not in _QUALIFIERS]
        if words and words[-1] == "*":
            pointers += 1
            continue
        if not words or not all(w in _SCALAR_WORDS for w in words):
            return None
    return pointers


def cannot_be_gemm(name: str | None) -> bool:
    """A kernel whose arguments are all pointers and scalars, fewer than three of them pointers: a GEMM reads A
    and B and writes C, so it takes at least three (``kernel_C(double *, const double *, int)`` cannot be one)."""
    n = pointer_arguments(name)
    return n is not None and n < 3
