"""What tracekit's instrument wrappers know of each GEMM entry point: one declarative table (:data:`GEMM_TARGETS`)
of torch, FlashInfer, sgl-kernel and quantize functions saying which arguments give the GEMM's operands, M, N, K
(a named operand layout), dtypes, output dtype, scale layout and implementation, and one function,
:func:`describe`, that reads an entry and a call into the range name. collectors/instrument.py wraps them (and the
grouped / MoE rows of collectors/moe_ranges.py, :data:`~tracekit.collectors.moe_ranges.MOE_TARGETS`: the same
:class:`Target` rows with a ``Grouped`` entry, read with this module's helpers); this module only describes.

A table entry that names an argument the call lacks is a :class:`MissingArgument` (one line: the entry point,
the argument, its position); an entry that cannot be read (an unknown layout, a backend template naming an
implementation argument the entry lacks) is a ValueError when the table is built."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tracekit.collectors import ranges
from tracekit.naming import canonical_dtype

if TYPE_CHECKING:  # moe_ranges builds its rows with this module: a runtime import would be a cycle
    from tracekit.collectors.moe_ranges import Grouped

# --- helpers (collectors/moe_ranges.py reads its calls with them too) ---------------------------------------

_DT: dict[Any, str] = {}


def dtype_name(dtype: Any) -> str:
    """Canonical short name of a torch dtype, cached per dtype object."""
    name = _DT.get(dtype)
    if name is None:
        name = canonical_dtype(dtype)
        _DT[dtype] = name
    return name


def numel(shape: Sequence[int]) -> int:
    """The product of a shape's dimensions."""
    n = 1
    for d in shape:
        n *= int(d)
    return n


def shape_of(t: Any) -> tuple[int, ...]:
    """A tensor's shape as ints (AttributeError for what is not a tensor)."""
    return tuple(int(d) for d in t.shape)


def arg(
    args: tuple[Any, ...], kwargs: dict[str, Any], index: int | None, name: str, default: Any = None
) -> Any:
    """A call's argument by position (``index``, None for keyword-only) or by ``name``, else ``default``."""
    if index is not None and len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def scale_layout(
    a_dtype: str,
    a_shape: Sequence[int],
    sa_dtype: str | None,
    sa_shape: Sequence[int] | None,
    sb_shape: Sequence[int] | None,
    m: int,
    n: int,
    k: int,
) -> str:
    """Name the scaling of a scaled GEMM from its operand dtype and scale shapes (``torch._scaled_mm`` rules).

    ``tensorwise`` (one scale each), ``rowwise`` (A: M x 1, B: 1 x N), ``nvfp4-1x16`` (fp4 with e4m3 block
    scales), ``mxfp4-1x32`` / ``mxfp8-1x32`` (e8m0 block scales), ``blockwise-<A>.<B>`` for 1x128 / 128x128
    blocks (``blockwise-1x128.128x128`` is DeepSeek's recipe), ``other`` when nothing fits.
    """
    if sa_shape is None or sb_shape is None:
        return "none"
    na, nb = numel(sa_shape), numel(sb_shape)
    if na == 1 and nb == 1:
        return "tensorwise"
    if a_dtype == "e2m1":
        return "mxfp4-1x32" if sa_dtype == "ue8m0" else "nvfp4-1x16"
    if sa_dtype == "ue8m0":
        return "mxfp8-1x32"
    if na == m and nb == n:
        return "rowwise"
    kb = max(k // 128, 1)
    la = "1x128" if na == m * kb else ("128x128" if na == max(m // 128, 1) * kb else None)
    lb = "1x128" if nb == n * kb else ("128x128" if nb == max(n // 128, 1) * kb else None)
    if la and lb:
        return f"blockwise-{la}" if la == lb else f"blockwise-{la}.{lb}"
    return "other"


# --- the table's vocabulary -------------------------------------------------------------------------------------


class MissingArgument(ValueError):
    """A call lacks an argument its table entry reads (the wrapper then calls straight through, unnamed)."""


@dataclass(frozen=True)
class Arg:
    """One argument of an entry point: its position (None: keyword-only), its name, its default when absent."""

    index: int | None
    name: str
    default: Any = None

    def get(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return arg(args, kwargs, self.index, self.name, self.default)

    def need(self, args: tuple[Any, ...], kwargs: dict[str, Any], label: str) -> Any:
        """The argument, or :class:`MissingArgument` saying which entry point lacks which argument."""
        if self.index is not None and len(args) > self.index:
            return args[self.index]
        if self.name in kwargs:
            return kwargs[self.name]
        raise MissingArgument(self.missing(label))

    def missing(self, label: str) -> str:
        """The one line that says entry point ``label`` was called without this argument."""
        where = f"position {self.index} or keyword" if self.index is not None else "keyword"
        return f"{label}: the call has no argument {self.name!r} ({where}), which its table entry reads"


Dims = tuple[int, int, int, dict[str, Any]]
"""(M, N, K, extra name fields such as batch) of one call."""
_NONE: dict[str, Any] = {}


def _matmul(sa: Sequence[int], sb: Sequence[int]) -> Dims:
    k = int(sa[-1])
    if len(sb) == 1:  # matrix @ vector
        return numel(sa[:-1]), 1, k, _NONE
    if len(sb) == 2:  # batch dims of A fold into M: one GEMM
        return numel(sa[:-1]), int(sb[-1]), k, _NONE
    return int(sa[-2]), int(sb[-1]), k, {"batch": max(numel(sa[:-2]), numel(sb[:-2]))}  # per-batch GEMMs


@dataclass(frozen=True)
class Layout:
    """Which operand ranks a layout takes (checked on every call) and how M, N, K come from the shapes (read
    once per range name)."""

    takes: Callable[[int, int], bool]
    dims: Callable[[Sequence[int], Sequence[int]], Dims]


LAYOUTS: dict[str, Layout] = {
    "mk,kn": Layout(
        lambda ra, rb: ra == 2 and rb == 2, lambda sa, sb: (int(sa[0]), int(sb[1]), int(sa[1]), _NONE)
    ),
    "mk,nk": Layout(
        lambda ra, rb: ra == 2 and rb == 2, lambda sa, sb: (int(sa[0]), int(sb[0]), int(sa[1]), _NONE)
    ),
    "mk,kn|prepared": Layout(
        lambda ra, rb: ra == 2 and rb in (2, 3), lambda sa, sb: (int(sa[0]), int(sb[1]), int(sa[1]), _NONE)
    ),
    "bmk,bkn": Layout(
        lambda ra, rb: ra == 3 and rb == 3,
        lambda sa, sb: (int(sa[1]), int(sb[2]), int(sa[2]), {"batch": int(sa[0])}),
    ),
    "...k,nk": Layout(
        lambda ra, rb: ra >= 1 and rb == 2, lambda sa, sb: (numel(sa[:-1]), int(sb[0]), int(sb[1]), _NONE)
    ),
    "matmul": Layout(lambda ra, rb: ra >= 2 and rb >= 1, _matmul),
}
"""How M, N, K come from the two operand shapes: ``mk,kn`` A [M, K] and B [K, N]; ``mk,nk`` B [N, K];
``mk,kn|prepared`` B [K, N] or FlashInfer's prepared [K/128, N, 128]; ``bmk,bkn`` batched (batch=); ``...k,nk``
A's leading dimensions fold into M (``linear``); ``matmul`` torch.matmul's broadcasting rules. FP4 operands are
packed two to a byte: K is twice A's stored columns wherever A is named ``e2m1``."""


@dataclass(frozen=True)
class ScaleShapes:
    """The scale layout from the two scale tensors: ``torch._scaled_mm``'s rules (:func:`scale_layout`), or with
    ``rowwise_only`` sgl-kernel's: one scale each is ``tensorwise``, anything else ``rowwise``."""

    a: Arg
    b: Arg
    rowwise_only: bool = False

    def key(self, args: tuple[Any, ...], kwargs: dict[str, Any], label: str) -> Any:
        sa, sb = self.a.need(args, kwargs, label), self.b.need(args, kwargs, label)
        if self.rowwise_only:
            return numel(sa.shape), numel(sb.shape)
        return dtype_name(sa.dtype), tuple(sa.shape), tuple(sb.shape)

    def name(self, key: Any, da: str, m: int, n: int, k: int) -> str:
        if self.rowwise_only:
            return "tensorwise" if key == (1, 1) else "rowwise"
        sa_dtype, sa_shape, sb_shape = key
        return scale_layout(da, (), sa_dtype, sa_shape, sb_shape, m, n, k)  # A's shape is not read


@dataclass(frozen=True)
class ScaleFlag:
    """The scale layout chosen by a boolean argument (FlashInfer ``mm_fp4``'s ``use_nvfp4``)."""

    flag: Arg
    on: str
    off: str

    def key(self, args: tuple[Any, ...], kwargs: dict[str, Any], label: str) -> Any:
        return bool(self.flag.get(args, kwargs))

    def name(self, key: Any, da: str, m: int, n: int, k: int) -> str:
        return self.on if key else self.off


@dataclass(frozen=True)
class ScaleBlocks:
    """Block scales whose (M, N, K) granularity is an argument: ``blockwise-<gm>x<gk>.<gn>x<gk>``."""

    granularity: Arg

    def key(self, args: tuple[Any, ...], kwargs: dict[str, Any], label: str) -> Any:
        return tuple(int(x) for x in self.granularity.get(args, kwargs))

    def name(self, key: Any, da: str, m: int, n: int, k: int) -> str:
        gm, gn, gk = key
        return f"blockwise-{gm}x{gk}.{gn}x{gk}"


_HALF = ("bf16", "fp16")
FAMILY = {"e2m1": "fp4", "e4m3": "fp8", "e5m2": "fp8"}
"""A dtype's family in backend names (``{family}`` in a backend template): fp4, fp8, else the dtype itself."""


@dataclass(frozen=True)
class Gemm:
    """How one GEMM entry point's arguments name its range: ``gemm backend=.. op=.. M N K a b out scale``.

    ``backend`` is a template: ``{a}`` A's dtype, ``{family}`` fp4 / fp8 / A's dtype, ``{impl}`` the ``impl``
    argument (which ``impl_field`` also writes into the name as ``impl=``). ``dtypes`` fixes (A, B) where the
    tensors are packed bytes; else they are read from the operands, and with ``half`` only bf16 / fp16 CUDA
    operands are named (torch's own GEMMs). The output dtype is ``out_tensor``'s, else ``out``'s, else
    ``out_default`` (``a``: A's dtype)."""

    backend: str
    op: str
    a: Arg
    b: Arg
    layout: str
    dtypes: tuple[str, str] | None = None
    half: bool = False
    out: Arg | None = None
    out_tensor: Arg | None = None
    out_default: str = "bf16"
    scale: str | ScaleShapes | ScaleFlag | ScaleBlocks | None = None
    impl: Arg | None = None
    impl_field: bool = False

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(
                f"instrument target op {self.op!r}: unknown layout {self.layout!r} ({', '.join(LAYOUTS)})"
            )
        if ("{impl}" in self.backend or self.impl_field) and self.impl is None:
            raise ValueError(
                f"instrument target op {self.op!r}: names its implementation but has no impl argument"
            )


@dataclass(frozen=True)
class Quantize:
    """An activation quantize ``f(x [..., K], ...)``: an ``aux role=quantize`` range named with the backend family
    and the M, K of the GEMM it feeds (the explainer joins them on backend, M and K)."""

    backend: str
    op: str
    out: str
    x: Arg = field(default_factory=lambda: Arg(0, "input"))


ENV_CPU = "TRACEKIT_INSTRUMENT_CPU"
_NAME_CPU = os.environ.get(ENV_CPU, "").strip().lower() in ("1", "true", "yes", "on")
"""``TRACEKIT_INSTRUMENT_CPU=1``: name bf16 / fp16 GEMMs on CPU tensors too (tests and CPU-only checks of a
capture; read at import). Off by default: a CPU GEMM is not what tracekit explains."""


def _half_operands(a: Any, b: Any) -> tuple[str, str] | None:
    """(dtype_a, dtype_b) when both are bf16/fp16 CUDA tensors (or CPU ones with ``TRACEKIT_INSTRUMENT_CPU=1``),
    else None (not a tensor-core GEMM we name)."""
    if not (a.is_cuda and b.is_cuda) and not (_NAME_CPU and not a.is_cuda and not b.is_cuda):
        return None
    da, db = dtype_name(a.dtype), dtype_name(b.dtype)
    if da not in _HALF or db not in _HALF:
        return None
    return da, db


Described = tuple[Any, Callable[[], str]]
"""A call that names a range: (cache key, name builder)."""

Describe = Callable[[tuple[Any, ...], dict[str, Any]], "Described | None"]
"""Given a call's (args, kwargs): None to call straight through, or (cache key, name builder)."""


_ABSENT = object()


def describe(spec: Gemm | Quantize, label: str) -> Describe:
    """The reader of one table entry (entry point ``label``): given a call's (args, kwargs), None to call straight
    through (not a GEMM tracekit names: other dtypes, CPU operands, shapes its layout does not take, something not
    a tensor), else (cache key, name builder); :class:`MissingArgument` when the call lacks an argument the entry
    reads. The entry is read once, here, so that a call costs attribute reads, not table look-ups."""
    if isinstance(spec, Quantize):
        return _quantize_reader(spec, label)
    a_arg, b_arg = spec.a, spec.b
    takes, dims = LAYOUTS[spec.layout].takes, LAYOUTS[spec.layout].dims
    ia, na, ib, nb = a_arg.index, a_arg.name, b_arg.index, b_arg.name
    half, fixed, op, template = spec.half, spec.dtypes, spec.op, spec.backend
    out_arg, out_tensor, impl_arg = spec.out, spec.out_tensor, spec.impl
    out_default = None if spec.out_default == "a" else spec.out_default
    rule = spec.scale if not isinstance(spec.scale, str) else None
    fixed_scale = spec.scale if rule is None else None
    impl_field = spec.impl_field

    def read(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Described | None:
        n_args = len(args)
        a = args[ia] if ia is not None and n_args > ia else kwargs.get(na, _ABSENT)
        b = args[ib] if ib is not None and n_args > ib else kwargs.get(nb, _ABSENT)
        if a is _ABSENT or b is _ABSENT:
            raise MissingArgument(a_arg.missing(label) if a is _ABSENT else b_arg.missing(label))
        try:
            sa, sb = a.shape, b.shape
            if not takes(len(sa), len(sb)):
                return None
            if half:
                dts = _half_operands(a, b)
                if dts is None:
                    return None
                da, db = dts
            else:
                da, db = fixed or (dtype_name(a.dtype), dtype_name(b.dtype))
            out_t = out_tensor.get(args, kwargs) if out_tensor is not None else None
            if out_t is not None and hasattr(out_t, "dtype"):
                out_dtype = out_t.dtype
            else:
                out_dtype = out_arg.get(args, kwargs) if out_arg is not None else None
            scale_key = rule.key(args, kwargs, label) if rule is not None else fixed_scale
        except AttributeError:
            return None
        impl = impl_arg.get(args, kwargs) if impl_arg is not None else None

        def build() -> str:
            m, n, k, extra = dims(sa, sb)
            if da == "e2m1":  # FP4 is packed two to a byte
                k *= 2
            out = dtype_name(out_dtype) if out_dtype is not None else (out_default or da)
            backend = template.format(a=da, family=FAMILY.get(da, da), impl=impl)
            scale = rule.name(scale_key, da, m, n, k) if rule is not None else scale_key
            fields = {**extra, "impl": impl} if impl_field else extra
            return ranges.gemm_name(backend, op, m, n, k, da, db, out, scale, **fields)

        return (op, template, sa, sb, da, db, out_dtype, scale_key, impl), build

    return read


def _quantize_reader(spec: Quantize, label: str) -> Describe:
    backend, op, out, x_arg = spec.backend, spec.op, spec.out, spec.x

    def read(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Described | None:
        x = x_arg.need(args, kwargs, label)
        try:
            shape, dt = tuple(x.shape), dtype_name(x.dtype)
        except AttributeError:
            return None
        if len(shape) < 1:
            return None
        m, k = numel(shape[:-1]), int(shape[-1])
        return ("quantize", backend, op, shape, dt), lambda: ranges.aux_name(
            "quantize", backend=backend, op=op, M=m, K=k, a=dt, out=out
        )

    return read


# --- the table ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One entry point: ``package`` is imported, ``path`` (dotted, from the package) is wrapped."""

    package: str
    path: str
    describe: Describe
    torch_like: bool = False  # skip while torch.compile traces
    operands: tuple[int, int] | None = None
    """Positions of the two operands when the range depends on nothing else: the wrapper then caches the
    scope per (shapes, dtypes, devices) and skips ``describe`` after the first call of a shape."""
    gemm: bool = True
    """False for an auxiliary step (an activation quantize): its ``aux`` range neither counts against the ncu
    budget of GEMM ranges nor hides the GEMM range that follows."""
    record: Callable[[tuple[Any, ...], dict[str, Any], Any], None] | None = None
    """Called after each wrapped launch with (args, kwargs, scope): MoE targets record their per-expert token
    counts in the routing sidecar (tracekit.collectors.moe_ranges)."""
    spec: Gemm | Quantize | Grouped | None = None
    """The table entry ``describe`` reads (a ``Grouped`` entry for the MoE rows of collectors/moe_ranges.py)."""

    @property
    def label(self) -> str:
        return f"{self.package}.{self.path}"


def entry(package: str, path: str, spec: Gemm | Quantize, **options: Any) -> Target:
    """A :data:`GEMM_TARGETS` row: the entry point, its table entry, and :func:`describe` reading the two."""
    reader = describe(spec, f"{package}.{path}")
    return Target(package, path, reader, gemm=not isinstance(spec, Quantize), spec=spec, **options)


def _torch_half(op: str, layout: str, a: Arg, b: Arg) -> Gemm:
    return Gemm("torch-{a}", op, a, b, layout, half=True, out_default="a")


_IN, _MAT2 = Arg(0, "input"), Arg(1, "mat2")
_MATMUL = _torch_half("matmul", "matmul", _IN, Arg(1, "other"))
_TORCH = {"torch_like": True, "operands": (0, 1)}
# mm_fp4(a [M, K/2], b [K/2, N] column-major, a_descale, b_descale, alpha, out_dtype, out, block_size,
#        use_8x4_sf_layout, backend, use_nvfp4)
_FI_MM_FP4 = Gemm(
    "flashinfer-fp4-{impl}",
    "mm_fp4",
    Arg(0, "a"),
    Arg(1, "b"),
    "mk,kn",
    dtypes=("e2m1", "e2m1"),
    out=Arg(5, "out_dtype"),
    out_tensor=Arg(6, "out"),
    scale=ScaleFlag(Arg(10, "use_nvfp4", True), "nvfp4-1x16", "mxfp4-1x32"),
    impl=Arg(9, "backend", "auto"),
)
# bmm_fp8(A [b, M, K], B [b, K, N] column-major, A_scale, B_scale, dtype, out=None, backend="cublas")
_FI_BMM_FP8 = Gemm(
    "flashinfer-fp8",
    "bmm_fp8",
    Arg(0, "A"),
    Arg(1, "B"),
    "bmk,bkn",
    out=Arg(4, "dtype"),
    scale="tensorwise",
    impl=Arg(6, "backend", "cublas"),
    impl_field=True,
)
# mm_fp8(a [M, K], b [K/128, N, 128] (prepared) or [K, N], alpha, out_dtype, out, backend)
_FI_MM_FP8 = Gemm(
    "flashinfer-fp8",
    "mm_fp8",
    Arg(0, "a"),
    Arg(1, "b"),
    "mk,kn|prepared",
    out=Arg(3, "out_dtype"),
    scale="tensorwise",
)
# gemm_fp8_nt_groupwise(a [M, K], b [N, K], a_scale, b_scale, scale_major_mode, mma_sm,
#                       scale_granularity_mnk=(1, 128, 128), out, out_dtype, backend)
_FI_GROUPWISE = Gemm(
    "flashinfer-fp8",
    "gemm_fp8_nt_groupwise",
    Arg(0, "a"),
    Arg(1, "b"),
    "mk,nk",
    out=Arg(8, "out_dtype"),
    out_tensor=Arg(7, "out"),
    scale=ScaleBlocks(Arg(6, "scale_granularity_mnk", (1, 128, 128))),
)

GEMM_TARGETS: tuple[Target, ...] = (
    entry("torch", "matmul", _MATMUL, **_TORCH),
    entry("torch", "Tensor.__matmul__", _MATMUL, **_TORCH),
    entry("torch", "mm", _torch_half("mm", "mk,kn", _IN, _MAT2), **_TORCH),
    entry(
        "torch",
        "addmm",
        _torch_half("addmm", "mk,kn", Arg(1, "mat1"), Arg(2, "mat2")),
        torch_like=True,
        operands=(1, 2),
    ),
    entry("torch", "bmm", _torch_half("bmm", "bmk,bkn", _IN, _MAT2), **_TORCH),
    entry("torch", "nn.functional.linear", _torch_half("linear", "...k,nk", _IN, Arg(1, "weight")), **_TORCH),
    entry(
        "torch",
        "_scaled_mm",
        Gemm(
            "torch-{family}",
            "scaled_mm",
            Arg(0, "self"),
            _MAT2,
            "mk,kn",
            out=Arg(6, "out_dtype"),
            out_default="a",
            scale=ScaleShapes(Arg(2, "scale_a"), Arg(3, "scale_b")),
        ),
        torch_like=True,
    ),
    entry("flashinfer", "mm_fp4", _FI_MM_FP4),
    entry("flashinfer", "gemm.mm_fp4", _FI_MM_FP4),
    entry("flashinfer", "bmm_fp8", _FI_BMM_FP8),
    entry("flashinfer", "gemm.bmm_fp8", _FI_BMM_FP8),
    entry("flashinfer", "mm_fp8", _FI_MM_FP8),
    entry("flashinfer", "gemm.mm_fp8", _FI_MM_FP8),
    entry("flashinfer", "gemm_fp8_nt_groupwise", _FI_GROUPWISE),
    entry("flashinfer", "gemm.gemm_fp8_nt_groupwise", _FI_GROUPWISE),
    # cutlass_scaled_fp4_mm(a [M, K/2] uint8, b [N, K/2] uint8, block_scale_a, block_scale_b, alpha, out_dtype)
    entry(
        "sgl_kernel",
        "cutlass_scaled_fp4_mm",
        Gemm(
            "sgl-fp4",
            "cutlass_scaled_fp4_mm",
            Arg(0, "a"),
            Arg(1, "b"),
            "mk,nk",
            dtypes=("e2m1", "e2m1"),
            out=Arg(5, "out_dtype"),
            scale="nvfp4-1x16",
        ),
    ),
    # fp8_scaled_mm(mat_a [M, K], mat_b [K, N] column-major, scales_a [M] / [M,1], scales_b [N], out_dtype, bias)
    entry(
        "sgl_kernel",
        "fp8_scaled_mm",
        Gemm(
            "sgl-fp8",
            "fp8_scaled_mm",
            Arg(0, "mat_a"),
            Arg(1, "mat_b"),
            "mk,kn",
            out=Arg(4, "out_dtype"),
            scale=ScaleShapes(Arg(2, "scales_a"), Arg(3, "scales_b"), rowwise_only=True),
        ),
    ),
    # activation quantize steps: auxiliary kernels of the GEMM that follows
    entry("flashinfer", "fp4_quantize", Quantize("flashinfer-fp4", "fp4_quantize", "e2m1")),
    entry("flashinfer", "nvfp4_quantize", Quantize("flashinfer-fp4", "nvfp4_quantize", "e2m1", Arg(0, "a"))),
    entry("flashinfer", "mxfp4_quantize", Quantize("flashinfer-fp4", "mxfp4_quantize", "e2m1", Arg(0, "a"))),
    entry("sgl_kernel", "scaled_fp4_quant", Quantize("sgl-fp4", "scaled_fp4_quant", "e2m1")),
    entry("sgl_kernel", "sgl_per_token_quant_fp8", Quantize("sgl-fp8", "per_token_quant_fp8", "e4m3")),
    entry("sgl_kernel", "sgl_per_tensor_quant_fp8", Quantize("sgl-fp8", "per_tensor_quant_fp8", "e4m3")),
    entry(
        "sgl_kernel",
        "sgl_per_token_group_quant_fp8",
        Quantize("sgl-fp8", "per_token_group_quant_fp8", "e4m3"),
    ),
)
"""The dense GEMM and quantize entry points ``instrument()`` knows, in the order it wraps them (the grouped / MoE
ones follow: tracekit.collectors.instrument.TARGETS)."""
