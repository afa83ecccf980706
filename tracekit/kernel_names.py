"""A kernel's class, family and GEMM rate class from its name alone (:func:`classify_name`), and the class of the
CPU op that launched it (:func:`classify_op`).

A demangled name is split into the kernel's own function name (namespaces kept; return type, template arguments
and parameters removed) and its template arguments (:func:`split_name`): a family matches on either or both, so
``cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>`` is attention by its arguments although its function is
CUTLASS's, and ``fbgemm_gpu::_offsets_range_cuda_kernel`` is no GEMM although the library's name holds "gemm".

The rate class of a GEMM comes from the family's decoders (the code tables are in the JSON):

- ``nvjet``: cuBLAS's letter code, ``nvjet_sm90_tst_...`` (bf16), ``qqtst`` (fp8), ``ootst`` (fp4);
- ``xmma``: ``sm90_xmma_gemm_f32f32_tf32f32_...``: the MMA input type after the I/O types (tf32);
- ``mnemonic``: CUTLASS 2 / cuBLAS instance names, ``s1688gemm`` (TF32 on sm80+), ``bf16_s16816gemm`` (bf16);
- ``trtllm``: trtllm-gen ``bmm_<C>_<A><B>_<acc>``;
- ``tensile``: ROCm ``Cijk_..._<types>``;
- ``cublas``: cuBLAS GEMV / dot kernels' operand type, ``cublasGemvTensorStridedBatched<__nv_bfloat16 const>``;
- ``types``: element type names in the function name and template arguments (``cutlass::float_e4m3_t``,
  ``__nv_bfloat16``, ``float``).

Where A and B differ the wider type sets the rate (a weight-only FP4 GEMM with BF16 activations runs at the BF16
rate; a mixed FP4 x FP8 MMA at the FP8 rate). Everything is cached per distinct name: a timeline of a million
launches holds a few hundred names.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from tracekit import naming
from tracekit.kernel_table import DECODERS, Family, OpRule, load_table

__all__ = [
    "KernelInfo",
    "classify_name",
    "classify_op",
    "op_key",
    "op_rule",
    "signature_rate_class",
    "split_name",
]


@dataclass(frozen=True)
class KernelInfo:
    """What a kernel's name says about it.

    ``kernel_class`` one of the thirteen classes; ``family`` the table entry that matched (None: no entry did,
    the class is ``other`` and evidence may still make it a GEMM); ``dtype`` the canonical element type the GEMM
    is rated by (``e4m3``, ``bf16`` ...) and ``dtype_class`` its rate class (``fp8``, ``bf16`` ...), for GEMM
    families only; ``source`` ``name`` or ``template`` (what the entry matched on); ``reason`` one line for
    evidence."""

    kernel_class: str
    family: str | None
    dtype_class: str | None
    reason: str
    source: str | None = None
    dtype: str | None = None

    @property
    def known(self) -> bool:
        """Whether the table knows the kernel (a family matched)."""
        return self.family is not None


# --- the name split ------------------------------------------------------------------------------------------
_RANGE_PREFIX = re.compile(r"^[^<(\s/]+/(?=\S)")
"""An NVTX range that Nsight Compute's CSV export writes before the kernel name (``probe_bf16_M16/nvjet_...``)."""
_ANON = re.compile(r"\(anonymous namespace\)|<unnamed>")


def split_name(name: str) -> tuple[str, str]:
    """``(function, template arguments)`` of a kernel name: ``void at::native::vectorized_elementwise_kernel<4,
    at::native::GeluCUDAKernelImpl(...)...>(int, ...)`` -> (``at::native::vectorized_elementwise_kernel``,
    ``4, at::native::GeluCUDAKernelImpl(...)...``). Anonymous namespaces read ``anon``; a plain name (``nvjet_...``,
    a mangled ``_ZN...``) is all function. Template arguments of every level of the function's own name are
    joined by ``", "``; the return type (``std::enable_if<...>::type``) and parameters are dropped."""
    text = _RANGE_PREFIX.sub("", name.strip(), count=1)
    text = _ANON.sub("anon", text)
    # split the top level (outside <>, (), []) into space-separated tokens; the function is the token holding
    # the first top-level "(" (its parameters), else the last token
    stack: list[str] = []
    token_start = 0
    func_start, func_end = 0, len(text)
    found = False
    for i, ch in enumerate(text):
        if ch in "<([":
            if ch == "(" and not stack:
                func_start, func_end, found = token_start, i, True
                break
            stack.append(ch)
        elif ch == ">":
            if stack and stack[-1] == "<":
                stack.pop()
        elif ch in ")]":
            want = "(" if ch == ")" else "["
            while stack and stack.pop() != want:
                pass
        elif ch == " " and not stack:
            token_start = i + 1
    if not found:
        func_start = token_start
    token = text[func_start:func_end]
    if not token.strip():  # "Memcpy HtoD (Pageable -> Device)": a label, not a C++ signature
        token = text[:func_end]
    fn: list[str] = []
    args: list[str] = []
    depth = 0
    arg_start = 0
    paren = 0
    for i, ch in enumerate(token):
        if ch == "(":
            paren += 1
        elif ch == ")":
            paren = max(paren - 1, 0)
        if paren and depth:
            continue
        if ch == "<":
            depth += 1
            if depth == 1:
                arg_start = i + 1
        elif ch == ">" and depth:
            depth -= 1
            if depth == 0:
                args.append(token[arg_start:i])
        elif depth == 0:
            fn.append(ch)
    return "".join(fn).strip(), ", ".join(args)


# --- dtype decoders ------------------------------------------------------------------------------------------
def _wider(a: str | None, b: str | None) -> str | None:
    """The wider of two canonical dtypes (A's on a tie): the rate class a GEMM with these inputs runs at."""
    if a is None or b is None:
        return a or b
    return b if naming.DTYPE_BITS.get(b, 0) > naming.DTYPE_BITS.get(a, 0) else a


_NVJET = re.compile(r"nvjet_(?:sm\d+[a-z]?_)?([a-z]{3,5})_")


def _nvjet(fn: str, text: str) -> tuple[str, str] | None:
    m = _NVJET.match(fn)
    if not m:
        return None
    code = m.group(1)
    letters = load_table().nvjet_letters
    ab = code[:2] if len(code) == 5 else code[:1]
    types = [letters.get(c) for c in ab]
    if None in types:
        return None
    dtype = _wider(types[0], types[-1])
    if dtype == "fp32" and "_tf32" in fn:
        dtype = "tf32"
    return dtype, f"nvjet code {code}"  # type: ignore[return-value]


_XMMA = re.compile(
    r"xmma_[a-z_]*?(?:gemm|fprop|dgrad|wgrad)(?:_implicit_gemm)?(?:_indexed)?_"
    r"((?:bf16|f16|tf32|f32|e4m3|e5m2|i8|s8|f64){2})_(bf16|f16|tf32|f32|e4m3|e5m2|i8|s8|f64)"
)


def _xmma(fn: str, text: str) -> tuple[str, str] | None:
    m = _XMMA.search(fn)
    if not m:
        return None
    dtype = load_table().xmma_types.get(m.group(2))
    return (dtype, f"xmma {m.group(1)}_{m.group(2)}: {m.group(2)} MMA") if dtype else None


_ARCH = re.compile(
    r"cutlass_(\d{2,3})_|(?<![a-z])(maxwell|pascal|volta|turing|ampere|ada|hopper)_|(?<![a-z0-9])sm_?(\d{2,3})_",
    re.IGNORECASE,
)
_ARCH_CC = {"maxwell": 50, "pascal": 60, "volta": 70, "turing": 75, "ampere": 80, "ada": 89, "hopper": 90}
_SHAPE = re.compile(r"(?<![a-z0-9])([shdicz])(\d{3,6})(?:gemm|fprop|dgrad|wgrad)", re.IGNORECASE)
_ELEMENT = re.compile(r"(?<![a-z0-9])(bf16|fp16|f16|tf32|e4m3|e5m2)(?=_)", re.IGNORECASE)
_SIMT = re.compile(r"(?<![a-z0-9])(gcgemm|sgemm|hgemm|dgemm|igemm|cgemm|zgemm|scudnn|hcudnn)", re.IGNORECASE)


def _arch(text: str) -> int | None:
    m = _ARCH.search(text)
    if not m:
        return None
    if m.group(1) or m.group(3):
        return int(m.group(1) or m.group(3))
    return _ARCH_CC[m.group(2).lower()]


def _mnemonic(fn: str, text: str) -> tuple[str, str] | None:
    t = load_table()
    shape = _SHAPE.search(text)
    element = _ELEMENT.search(text[: shape.end() + 40] if shape else text)
    if element and (shape or _SIMT.search(text)):
        dtype = t.mnemonic_elements.get(element.group(1).lower())
        if dtype:
            return dtype, f"element {element.group(1)} in the instance name"
    if shape:
        key = (shape.group(1) + shape.group(2)).lower()
        rule = t.mnemonic_shapes.get(key)
        if isinstance(rule, dict):
            arch = _arch(text)
            fits = [int(k) for k in rule if arch is None or int(k) <= arch]
            rule = rule[str(max(fits))] if fits else None
        if rule:
            return rule, f"MMA mnemonic {key}"
    simt = _SIMT.search(text)
    if simt:
        dtype = t.mnemonic_simt.get(simt.group(1).lower())
        if dtype:
            return dtype, f"{simt.group(1)} in the name"
    return None


_TRT_TYPE = r"(?:Mx)?(?:E\dm\d|Bfloat16|Fp16|Fp32|Int8)"
_TRTLLM = re.compile(rf"[BbGg](?:mm|emm)_({_TRT_TYPE})_((?:{_TRT_TYPE})+)_(?:Fp32|Fp16)_")


def _trtllm(fn: str, text: str) -> tuple[str, str] | None:
    m = _TRTLLM.match(fn)
    if not m:
        return None
    types = load_table().trtllm_types
    ab = [types.get(tok) for tok in re.findall(_TRT_TYPE, m.group(2))]
    ab = [x for x in ab if x]
    if not ab:
        return None
    return _wider(ab[0], ab[-1]), f"trtllm-gen A/B {m.group(2)}"  # type: ignore[return-value]


_TENSILE = re.compile(r"Cijk_A[a-z]+_B[a-z]+_([A-Z])")


def _tensile(fn: str, text: str) -> tuple[str, str] | None:
    m = _TENSILE.match(fn)
    dtype = load_table().tensile_types.get(m.group(1)) if m else None
    return (dtype, f"Tensile type {m.group(1)}") if dtype and m else None


_CUBLAS_OPERAND = re.compile(r"cublasGemvTensorStridedBatched<\s*(?:const\s+)?([\w:]+)")


def _cublas(fn: str, text: str) -> tuple[str, str] | None:
    """cuBLAS GEMV / dot / small-N kernels name their operand's type in ``cublasGemvTensorStridedBatched<T>``
    (``dot_kernel<float, 128, 0, cublasDotParams<cublasGemvTensorStridedBatched<__nv_bfloat16 const>...>>``:
    float is the accumulator, bf16 the data)."""
    m = _CUBLAS_OPERAND.search(text)
    got = _types("", m.group(1)) if m else None
    return (got[0], f"cuBLAS operand type {m.group(1)}") if got and m else None


@functools.cache
def _type_words() -> tuple[re.Pattern[str], tuple[str, ...]]:
    words = load_table().type_words
    pattern = "|".join(f"({p})" for p, _ in words)
    return re.compile(pattern, re.IGNORECASE), tuple(d for _, d in words)


def _types(fn: str, text: str) -> tuple[str, str] | None:
    pattern, dtypes = _type_words()
    found: list[tuple[str, str]] = []
    for m in pattern.finditer(text):
        group = next(i for i, g in enumerate(m.groups()) if g is not None)
        found.append((dtypes[group], m.group(0)))
        if len(found) == 2:
            break
    if not found:
        return None
    a, b = found[0], found[-1]
    dtype = _wider(a[0], b[0])
    said = a[1] if a[1] == b[1] or len(found) == 1 else f"{a[1]} x {b[1]}"
    return dtype, f"element types {said}"  # type: ignore[return-value]


_DECODE = {
    "nvjet": _nvjet,
    "xmma": _xmma,
    "mnemonic": _mnemonic,
    "trtllm": _trtllm,
    "tensile": _tensile,
    "cublas": _cublas,
    "types": _types,
}
assert set(_DECODE) == set(DECODERS)


def _decode(family: Family, fn: str, args: str, whole: str = "") -> tuple[str | None, str | None]:
    """(canonical dtype, how it was read) of a family's kernel name; (None, None) when the name does not say."""
    if not family.dtype:
        return None, None
    if family.dtype[0] not in _DECODE:
        return family.dtype[0], f"fixed {family.dtype[0]}"
    text = f"{fn}<{args}>" if args else fn
    for decoder in family.dtype:
        got = _DECODE[decoder](fn, text)
        if got is not None:
            return got
    if (
        "types" in family.dtype and whole
    ):  # element types only in the parameters: ReferenceGemm(..., signed char*)
        got = _types(fn, whole)
        if got is not None:
            return got
    return None, None


# --- classification ------------------------------------------------------------------------------------------
def _matches(family: Family, fn: str, args: str) -> bool:
    if family.name is not None and not family.name.search(fn):
        return False
    if family.args is not None and not family.args.search(args):
        return False
    if family.not_name is not None and family.not_name.search(fn):
        return False
    return not (family.not_args is not None and family.not_args.search(args))


_UNKNOWN = KernelInfo("other", None, None, "no entry of the kernel table matches the name")


@functools.lru_cache(maxsize=1 << 16)
def classify_name(name: str | None) -> KernelInfo:
    """The class, family and rate class a kernel's name says (the table's first matching family), cached per
    name. A name no family matches is ``other`` with ``family`` None: unknown, where evidence (tensor counters,
    tensor-pipe activity) may still make it a GEMM."""
    if not name:
        return _UNKNOWN
    fn, args = split_name(name)
    for family in load_table().families:
        if not _matches(family, fn, args):
            continue
        dtype, how = (
            _decode(family, fn, args, name)
            if family.kernel_class in ("gemm", "splitk-reduce")
            else (None, None)
        )
        cls = naming.DTYPE_CLASS.get(dtype or "")
        source = "template" if family.args is not None else "name"
        reason = f"{family.library}: {family.family}" + (f" ({how}: {cls})" if cls else "")
        return KernelInfo(family.kernel_class, family.family, cls, reason, source, dtype)
    return _UNKNOWN


@functools.lru_cache(maxsize=1 << 12)
def signature_rate_class(name: str | None) -> str | None:
    """The rate class the element types anywhere in a kernel's name suggest (template arguments and parameters:
    ``warptiling<128, 128>(int, int, int, float*, float*, float*)`` -> fp32), for kernels the table does not know
    but evidence shows to be GEMMs (a SIMT SGEMM of one's own); None when no type is named."""
    if not name:
        return None
    got = _types("", name)
    return naming.DTYPE_CLASS.get(got[0]) if got else None


_OP_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids)\s*=.*$")


def op_key(name: str | None) -> str | None:
    """An op name without the per-call counters emit_nvtx adds (``aten::silu, seq = 3`` -> ``aten::silu``)."""
    if not name:
        return None
    key = _OP_SUFFIX.sub("", name).strip()
    return key or None


@functools.lru_cache(maxsize=1 << 12)
def op_rule(name: str | None) -> OpRule | None:
    """The op table's rule for the launching CPU op ``name`` (its first matching entry); None for ops the table
    does not list."""
    key = op_key(name)
    if key is None:
        return None
    for rule in load_table().ops:
        if rule.op.search(key):
            return rule
    return None


def classify_op(name: str | None) -> str | None:
    """The class the launching CPU op gives a kernel (``aten::silu`` -> activation, ``nccl:all_reduce`` ->
    communication, ``aten::cudnn_convolution`` -> other); None for ops the table does not list (GEMM ops among
    them: a bias copy launched inside ``aten::addmm`` is not a GEMM)."""
    rule = op_rule(name)
    return rule.kernel_class if rule is not None else None
