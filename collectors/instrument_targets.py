"""What tracekit's instrument wrappers know of each GEMM entry point: the table of targets (torch, FlashInfer,
sgl-kernel and quantize functions) and, for each, how its arguments name the GEMM (backend, op, M, N, K,
dtypes, scale layout) for the range name. collectors/instrument.py wraps them; this module only describes."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tracekit.collectors import ranges
from tracekit.collectors.moe_ranges import moe_targets
from tracekit.naming import canonical_dtype

# --- dtype helpers -----------------------------------------------------------------------------------------

_DT: dict[Any, str] = {}


def _dt(dtype: Any) -> str:
    """Canonical short name of a torch dtype, cached per dtype object."""
    name = _DT.get(dtype)
    if name is None:
        name = canonical_dtype(dtype)
        _DT[dtype] = name
    return name


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str, default: Any = None) -> Any:
    if len(args) > index:
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
    na, nb = _numel(sa_shape), _numel(sb_shape)
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


# --- targets -------------------------------------------------------------------------------------------------

Describe = Callable[[tuple[Any, ...], dict[str, Any]], "tuple[Any, Callable[[], str]] | None"]
"""Given a call's (args, kwargs): None to call straight through, or (cache key, name builder)."""


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

    @property
    def label(self) -> str:
        return f"{self.package}.{self.path}"


def _gemm_name(
    backend: str, op: str, m: int, n: int, k: int, a: str, b: str, out: str, scale: Any = None, **extra: Any
) -> Callable[[], str]:
    return lambda: ranges.gemm_name(backend, op, m, n, k, a, b, out, scale, **extra)


_HALF = ("bf16", "fp16")


ENV_CPU = "TRACEKIT_INSTRUMENT_CPU"
_NAME_CPU = os.environ.get(ENV_CPU, "").strip().lower() in ("1", "true", "yes", "on")
"""``TRACEKIT_INSTRUMENT_CPU=1``: name bf16 / fp16 GEMMs on CPU tensors too (tests and CPU-only checks of a
capture; read at import). Off by default: a CPU GEMM is not what tracekit explains."""


def _half_operands(a: Any, b: Any) -> tuple[str, str] | None:
    """(dtype_a, dtype_b) when both are bf16/fp16 CUDA tensors (or CPU ones with ``TRACEKIT_INSTRUMENT_CPU=1``),
    else None (not a tensor-core GEMM we name)."""
    try:
        if not (a.is_cuda and b.is_cuda) and not (_NAME_CPU and not a.is_cuda and not b.is_cuda):
            return None
        da, db = _dt(a.dtype), _dt(b.dtype)
    except AttributeError:
        return None
    if da not in _HALF or db not in _HALF:
        return None
    return da, db


def _describe_mm(op: str, ia: int = 0, ib: int = 1, na: str = "input", nb: str = "mat2") -> Describe:
    def describe(args: tuple[Any, ...], kwargs: dict[str, Any]):
        a, b = _arg(args, kwargs, ia, na), _arg(args, kwargs, ib, nb)
        dts = _half_operands(a, b)
        if dts is None:
            return None
        sa, sb = a.shape, b.shape
        if len(sa) != 2 or len(sb) != 2:
            return None
        key = (op, sa, sb, dts)
        m, k, n = int(sa[0]), int(sa[1]), int(sb[1])
        return key, _gemm_name(f"torch-{dts[0]}", op, m, n, k, dts[0], dts[1], dts[0])

    return describe


def _describe_bmm(args: tuple[Any, ...], kwargs: dict[str, Any]):
    a, b = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "mat2")
    dts = _half_operands(a, b)
    if dts is None:
        return None
    sa, sb = a.shape, b.shape
    if len(sa) != 3 or len(sb) != 3:
        return None
    key = ("bmm", sa, sb, dts)
    return key, _gemm_name(
        f"torch-{dts[0]}", "bmm", int(sa[1]), int(sb[2]), int(sa[2]), dts[0], dts[1], dts[0], batch=int(sa[0])
    )


def _describe_matmul(op: str) -> Describe:
    def describe(args: tuple[Any, ...], kwargs: dict[str, Any]):
        a, b = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "other")
        dts = _half_operands(a, b)
        if dts is None:
            return None
        sa, sb = a.shape, b.shape
        if len(sa) < 2 or len(sb) < 1:
            return None
        key = (op, sa, sb, dts)
        k = int(sa[-1])
        if len(sb) == 1:  # matrix @ vector
            n, extra = 1, {}
            m = _numel(sa[:-1])
        elif len(sb) == 2:  # batch dims of A fold into M: one GEMM
            n, extra = int(sb[-1]), {}
            m = _numel(sa[:-1])
        else:  # batched: per-batch GEMMs
            n = int(sb[-1])
            m = int(sa[-2])
            batch = max(_numel(sa[:-2]), _numel(sb[:-2]))
            extra = {"batch": batch}
        return key, _gemm_name(f"torch-{dts[0]}", op, m, n, k, dts[0], dts[1], dts[0], **extra)

    return describe


def _describe_addmm(args: tuple[Any, ...], kwargs: dict[str, Any]):
    a, b = _arg(args, kwargs, 1, "mat1"), _arg(args, kwargs, 2, "mat2")
    dts = _half_operands(a, b)
    if dts is None:
        return None
    sa, sb = a.shape, b.shape
    if len(sa) != 2 or len(sb) != 2:
        return None
    key = ("addmm", sa, sb, dts)
    return key, _gemm_name(
        f"torch-{dts[0]}", "addmm", int(sa[0]), int(sb[1]), int(sa[1]), dts[0], dts[1], dts[0]
    )


def _describe_linear(args: tuple[Any, ...], kwargs: dict[str, Any]):
    x, w = _arg(args, kwargs, 0, "input"), _arg(args, kwargs, 1, "weight")
    dts = _half_operands(x, w)
    if dts is None:
        return None
    sx, sw = x.shape, w.shape
    if len(sx) < 1 or len(sw) != 2:
        return None
    key = ("linear", sx, sw, dts)
    m = _numel(sx[:-1])
    return key, _gemm_name(f"torch-{dts[0]}", "linear", m, int(sw[0]), int(sw[1]), dts[0], dts[1], dts[0])


def _describe_scaled_mm(args: tuple[Any, ...], kwargs: dict[str, Any]):
    a, b = _arg(args, kwargs, 0, "self"), _arg(args, kwargs, 1, "mat2")
    sa, sb = _arg(args, kwargs, 2, "scale_a"), _arg(args, kwargs, 3, "scale_b")
    out_dtype = _arg(args, kwargs, 6, "out_dtype")
    try:
        shape_a, shape_b = a.shape, b.shape
        da, db = _dt(a.dtype), _dt(b.dtype)
        sa_shape, sb_shape = tuple(sa.shape), tuple(sb.shape)
        sa_dtype = _dt(sa.dtype)
    except AttributeError:
        return None
    if len(shape_a) != 2 or len(shape_b) != 2:
        return None
    key = ("scaled_mm", shape_a, shape_b, da, db, sa_shape, sb_shape, sa_dtype, out_dtype)

    def build() -> str:
        packed = 2 if da == "e2m1" else 1
        m, k, n = int(shape_a[0]), int(shape_a[1]) * packed, int(shape_b[1])
        out = _dt(out_dtype) if out_dtype is not None else da
        scale = scale_layout(da, shape_a, sa_dtype, sa_shape, sb_shape, m, n, k)
        family = "fp4" if da == "e2m1" else ("fp8" if da in ("e4m3", "e5m2") else da)
        return ranges.gemm_name(f"torch-{family}", "scaled_mm", m, n, k, da, db, out, scale)

    return key, build


def _fp4_out(out_dtype: Any, out: Any) -> str:
    if out is not None and hasattr(out, "dtype"):
        return _dt(out.dtype)
    return _dt(out_dtype) if out_dtype is not None else "bf16"


def _describe_fi_mm_fp4(args: tuple[Any, ...], kwargs: dict[str, Any]):
    # mm_fp4(a [M, K/2], b [K/2, N] column-major, a_descale, b_descale, alpha, out_dtype, out, block_size,
    #        use_8x4_sf_layout, backend, use_nvfp4)
    a, b = _arg(args, kwargs, 0, "a"), _arg(args, kwargs, 1, "b")
    out_dtype, out = _arg(args, kwargs, 5, "out_dtype"), _arg(args, kwargs, 6, "out")
    backend = _arg(args, kwargs, 9, "backend", "auto")
    use_nvfp4 = _arg(args, kwargs, 10, "use_nvfp4", True)
    try:
        shape_a, shape_b = a.shape, b.shape
    except AttributeError:
        return None
    key = ("fi_mm_fp4", shape_a, shape_b, str(out_dtype), backend, bool(use_nvfp4), out is None)

    def build() -> str:
        m, k, n = int(shape_a[0]), int(shape_a[1]) * 2, int(shape_b[1])
        scale = "nvfp4-1x16" if use_nvfp4 else "mxfp4-1x32"
        return ranges.gemm_name(
            f"flashinfer-fp4-{backend}", "mm_fp4", m, n, k, "e2m1", "e2m1", _fp4_out(out_dtype, out), scale
        )

    return key, build


def _describe_fi_bmm_fp8(args: tuple[Any, ...], kwargs: dict[str, Any]):
    # bmm_fp8(A [b, M, K], B [b, K, N] column-major, A_scale, B_scale, dtype, out=None, backend="cublas")
    a, b = _arg(args, kwargs, 0, "A"), _arg(args, kwargs, 1, "B")
    dtype, backend = _arg(args, kwargs, 4, "dtype"), _arg(args, kwargs, 6, "backend", "cublas")
    try:
        shape_a, shape_b, da, db = a.shape, b.shape, _dt(a.dtype), _dt(b.dtype)
    except AttributeError:
        return None
    if len(shape_a) != 3 or len(shape_b) != 3:
        return None
    key = ("fi_bmm_fp8", shape_a, shape_b, da, db, str(dtype), backend)
    out = _dt(dtype) if dtype is not None else "bf16"
    return key, _gemm_name(
        "flashinfer-fp8",
        "bmm_fp8",
        int(shape_a[1]),
        int(shape_b[2]),
        int(shape_a[2]),
        da,
        db,
        out,
        "tensorwise",
        batch=int(shape_a[0]),
        impl=backend,
    )


def _describe_fi_mm_fp8(args: tuple[Any, ...], kwargs: dict[str, Any]):
    # mm_fp8(a [M, K], b [K/128, N, 128] (prepared) or [K, N], alpha, out_dtype, out, backend)
    a, b = _arg(args, kwargs, 0, "a"), _arg(args, kwargs, 1, "b")
    out_dtype = _arg(args, kwargs, 3, "out_dtype")
    try:
        shape_a, shape_b, da, db = a.shape, b.shape, _dt(a.dtype), _dt(b.dtype)
    except AttributeError:
        return None
    if len(shape_a) != 2 or len(shape_b) not in (2, 3):
        return None
    key = ("fi_mm_fp8", shape_a, shape_b, da, db, str(out_dtype))
    out = _dt(out_dtype) if out_dtype is not None else "bf16"
    return key, _gemm_name(
        "flashinfer-fp8",
        "mm_fp8",
        int(shape_a[0]),
        int(shape_b[1]),
        int(shape_a[1]),
        da,
        db,
        out,
        "tensorwise",
    )


def _describe_fi_groupwise(args: tuple[Any, ...], kwargs: dict[str, Any]):
    # gemm_fp8_nt_groupwise(a [M, K], b [N, K], a_scale, b_scale, scale_major_mode, mma_sm,
    #                       scale_granularity_mnk=(1, 128, 128), out, out_dtype, backend)
    a, b = _arg(args, kwargs, 0, "a"), _arg(args, kwargs, 1, "b")
    gran = _arg(args, kwargs, 6, "scale_granularity_mnk", (1, 128, 128))
    out, out_dtype = _arg(args, kwargs, 7, "out"), _arg(args, kwargs, 8, "out_dtype")
    try:
        shape_a, shape_b, da, db = a.shape, b.shape, _dt(a.dtype), _dt(b.dtype)
    except AttributeError:
        return None
    if len(shape_a) != 2 or len(shape_b) != 2:
        return None
    key = ("fi_groupwise", shape_a, shape_b, da, db, tuple(gran), str(out_dtype), out is None)
    gm, gn, gk = (int(x) for x in gran)
    scale = f"blockwise-{gm}x{gk}.{gn}x{gk}"
    return key, _gemm_name(
        "flashinfer-fp8",
        "gemm_fp8_nt_groupwise",
        int(shape_a[0]),
        int(shape_b[0]),
        int(shape_a[1]),
        da,
        db,
        _fp4_out(out_dtype, out),
        scale,
    )


def _describe_sgl_fp4(args: tuple[Any, ...], kwargs: dict[str, Any]):
    # cutlass_scaled_fp4_mm(a [M, K/2] uint8, b [N, K/2] uint8, block_scale_a, block_scale_b, alpha, out_dtype)
    a, b = _arg(args, kwargs, 0, "a"), _arg(args, kwargs, 1, "b")
    out_dtype = _arg(args, kwargs, 5, "out_dtype")
    try:
        shape_a, shape_b = a.shape, b.shape
    except AttributeError:
        return None
    key = ("sgl_fp4", shape_a, shape_b, str(out_dtype))
    out = _dt(out_dtype) if out_dtype is not None else "bf16"
    return key, _gemm_name(
        "sgl-fp4",
        "cutlass_scaled_fp4_mm",
        int(shape_a[0]),
        int(shape_b[0]),
        int(shape_a[1]) * 2,
        "e2m1",
        "e2m1",
        out,
        "nvfp4-1x16",
    )


def _describe_sgl_fp8(args: tuple[Any, ...], kwargs: dict[str, Any]):
    # fp8_scaled_mm(mat_a [M, K], mat_b [K, N] column-major, scales_a [M] / [M,1], scales_b [N], out_dtype, bias)
    a, b = _arg(args, kwargs, 0, "mat_a"), _arg(args, kwargs, 1, "mat_b")
    sa, sb = _arg(args, kwargs, 2, "scales_a"), _arg(args, kwargs, 3, "scales_b")
    out_dtype = _arg(args, kwargs, 4, "out_dtype")
    try:
        shape_a, shape_b, da, db = a.shape, b.shape, _dt(a.dtype), _dt(b.dtype)
        na, nb = _numel(sa.shape), _numel(sb.shape)
    except AttributeError:
        return None
    key = ("sgl_fp8", shape_a, shape_b, da, db, na, nb, str(out_dtype))
    scale = "tensorwise" if na == 1 and nb == 1 else "rowwise"
    out = _dt(out_dtype) if out_dtype is not None else "bf16"
    return key, _gemm_name(
        "sgl-fp8", "fp8_scaled_mm", int(shape_a[0]), int(shape_b[1]), int(shape_a[1]), da, db, out, scale
    )


def _describe_quantize(backend: str, op: str, out: str, arg: str = "input") -> Describe:
    """An activation quantize ``f(x [..., K], ...)``: an ``aux role=quantize`` range named with the backend
    family and the M, K of the GEMM it feeds (the explainer joins them on backend, M and K)."""

    def describe(args: tuple[Any, ...], kwargs: dict[str, Any]):
        x = _arg(args, kwargs, 0, arg)
        try:
            shape, dt = tuple(x.shape), _dt(x.dtype)
        except AttributeError:
            return None
        if len(shape) < 1:
            return None
        m, k = _numel(shape[:-1]), int(shape[-1])
        key = ("quantize", backend, op, shape, dt)
        return key, lambda: ranges.aux_name("quantize", backend=backend, op=op, M=m, K=k, a=dt, out=out)

    return describe


TARGETS: tuple[Target, ...] = (
    Target("torch", "matmul", _describe_matmul("matmul"), torch_like=True, operands=(0, 1)),
    Target("torch", "Tensor.__matmul__", _describe_matmul("matmul"), torch_like=True, operands=(0, 1)),
    Target("torch", "mm", _describe_mm("mm"), torch_like=True, operands=(0, 1)),
    Target("torch", "addmm", _describe_addmm, torch_like=True, operands=(1, 2)),
    Target("torch", "bmm", _describe_bmm, torch_like=True, operands=(0, 1)),
    Target("torch", "nn.functional.linear", _describe_linear, torch_like=True, operands=(0, 1)),
    Target("torch", "_scaled_mm", _describe_scaled_mm, torch_like=True),
    Target("flashinfer", "mm_fp4", _describe_fi_mm_fp4),
    Target("flashinfer", "gemm.mm_fp4", _describe_fi_mm_fp4),
    Target("flashinfer", "bmm_fp8", _describe_fi_bmm_fp8),
    Target("flashinfer", "gemm.bmm_fp8", _describe_fi_bmm_fp8),
    Target("flashinfer", "mm_fp8", _describe_fi_mm_fp8),
    Target("flashinfer", "gemm.mm_fp8", _describe_fi_mm_fp8),
    Target("flashinfer", "gemm_fp8_nt_groupwise", _describe_fi_groupwise),
    Target("flashinfer", "gemm.gemm_fp8_nt_groupwise", _describe_fi_groupwise),
    Target("sgl_kernel", "cutlass_scaled_fp4_mm", _describe_sgl_fp4),
    Target("sgl_kernel", "fp8_scaled_mm", _describe_sgl_fp8),
    # activation quantize steps: auxiliary kernels of the GEMM that follows
    Target(
        "flashinfer", "fp4_quantize", _describe_quantize("flashinfer-fp4", "fp4_quantize", "e2m1"), gemm=False
    ),
    Target(
        "flashinfer",
        "nvfp4_quantize",
        _describe_quantize("flashinfer-fp4", "nvfp4_quantize", "e2m1", "a"),
        gemm=False,
    ),
    Target(
        "flashinfer",
        "mxfp4_quantize",
        _describe_quantize("flashinfer-fp4", "mxfp4_quantize", "e2m1", "a"),
        gemm=False,
    ),
    Target(
        "sgl_kernel",
        "scaled_fp4_quant",
        _describe_quantize("sgl-fp4", "scaled_fp4_quant", "e2m1"),
        gemm=False,
    ),
    Target(
        "sgl_kernel",
        "sgl_per_token_quant_fp8",
        _describe_quantize("sgl-fp8", "per_token_quant_fp8", "e4m3"),
        gemm=False,
    ),
    Target(
        "sgl_kernel",
        "sgl_per_tensor_quant_fp8",
        _describe_quantize("sgl-fp8", "per_tensor_quant_fp8", "e4m3"),
        gemm=False,
    ),
    Target(
        "sgl_kernel",
        "sgl_per_token_group_quant_fp8",
        _describe_quantize("sgl-fp8", "per_token_group_quant_fp8", "e4m3"),
        gemm=False,
    ),
)
TARGETS += moe_targets(Target)  # grouped / MoE entry points: tracekit.collectors.moe_ranges
"""Every entry point ``instrument()`` knows, in the order it wraps them."""
