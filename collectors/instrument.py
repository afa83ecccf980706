"""``tracekit.instrument()``: put a tracekit GEMM range around every GEMM entry point a program calls.

Wrapped, where their packages import (an entry point a package lacks is skipped):

========================  ==================================================================================
torch                     ``torch.matmul``, ``torch.mm``, ``torch.addmm``, ``torch.bmm``, ``Tensor.__matmul__``,
                          ``torch.nn.functional.linear`` (bf16 / fp16 CUDA operands only), ``torch._scaled_mm``
                          (fp8 tensorwise / rowwise / blockwise, nvfp4 1x16 e4m3, mxfp4 / mxfp8 1x32 e8m0)
flashinfer                ``mm_fp4``, ``bmm_fp8``, ``mm_fp8``, ``gemm_fp8_nt_groupwise`` (as ``flashinfer.X`` and
                          ``flashinfer.gemm.X``)
sgl_kernel                ``cutlass_scaled_fp4_mm``, ``fp8_scaled_mm``
quantize steps (aux)      ``flashinfer.fp4_quantize`` / ``nvfp4_quantize`` / ``mxfp4_quantize``,
                          ``sgl_kernel.scaled_fp4_quant`` / ``sgl_per_token_quant_fp8`` / ``sgl_per_tensor_quant_fp8``
                          / ``sgl_per_token_group_quant_fp8``: an ``aux role=quantize`` range named with the
                          backend family and the M, K of the activation, which the explainer counts as the
                          auxiliary kernels of the GEMM of that family, M and K
grouped / MoE             ``torch._grouped_mm``, ``torch._scaled_grouped_mm``, FlashInfer ``cutlass_fused_moe``,
                          ``trtllm_fp4_block_scale_moe``, sgl-kernel ``fp8_blockwise_scaled_grouped_mm``,
                          ``cutlass_fp4_group_mm``: ``moe`` ranges, per-expert counts in a sidecar
                          (tracekit.collectors.moe_ranges)
========================  ==================================================================================

M, N, K come from the operand shapes (FP4 operands are packed two to a byte: K is twice the stored columns),
dtypes and scale layout from the dtypes and scale shapes. Only the package namespaces are patched, never the
module that defines a function: FlashInfer's ``mm_fp4`` reads attributes off its own module-level name, which
must stay the original.

Cost: a torch wrapper keys its cached range on the operands' shapes, dtype and device, so after the first call
of a shape it adds about 0.6 µs on a desktop-class CPU and about 1 µs on a GPU server's host (the key's attribute
reads are half of it; ``benchmarks/bench_instrument.py --torch`` measures it, docs/BENCHMARKS.md has the table).
Inside an open tracekit GEMM range (``tracekit bench gemm``) and while torch.compile traces, wrappers call
straight through.

Under ``tracekit capture --torch-profiler`` the ranges also open ``record_function`` (collectors/ranges.py,
``TRACEKIT_RECORD_FUNCTION``), so they reach the Kineto trace. With ``TRACEKIT_BREADCRUMB_DIR`` set (capture sets
it) each call also leaves a breadcrumb, and a call that raises a failure record (collectors/breadcrumb.py).
``TRACEKIT_INSTRUMENT_CPU=1`` names bf16 / fp16 GEMMs on CPU tensors too (CPU-only checks).

``instrument(lazy=True)`` (what ``collectors/site/sitecustomize.py`` uses) wraps packages already imported and
arranges for the others to be wrapped right after their first import, so a process that never imports torch
never pays for it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.collectors import breadcrumb as _B
from tracekit.collectors import ranges
from tracekit.collectors.moe_ranges import moe_targets
from tracekit.naming import canonical_dtype

__all__ = ["TARGETS", "instrument", "instrumented", "site_dir", "uninstrument"]

_MARK = "__tracekit_wrapped__"

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


# --- wrapping ---------------------------------------------------------------------------------------------


def _is_compiling_fn(module: Any) -> Callable[[], bool]:
    compiler = getattr(module, "compiler", None)
    fn = getattr(compiler, "is_compiling", None)
    return fn if callable(fn) else (lambda: False)


_MISS = object()
_DYNAMO = "torch._dynamo"
_modules = sys.modules


def _same_kind(a: Any, b: Any) -> bool:
    """Both operands share dtype and device, so a cache key holding only ``a``'s stands for the pair."""
    try:
        return bool(a.dtype == b.dtype and a.is_cuda == b.is_cuda)
    except Exception:
        return False


_getframe = sys._getframe


def _traced(
    fn: Callable[..., Any], scope: Any, args: tuple[Any, ...], kwargs: dict[str, Any], state: Any
) -> Any:
    """A wrapped call with breadcrumbs on: the slot is written before the call and marked after it; a call that
    raises is recorded as a failure and its exception re-raised unchanged (collectors/breadcrumb.py). ``state``
    is the calling thread's ``ranges.LOCAL.state``, which the wrapper has already read."""
    off = _B.enter(scope, _getframe(2))  # 2: the wrapper's caller
    try:
        if scope.is_gemm and ranges._plain and not state.suppressed:  # the lean path: one push, one pop
            push, arg, pop = scope.main
            state.depth += 1
            push(arg)
            try:
                result = fn(*args, **kwargs)
            finally:
                state.depth -= 1
                pop()
        else:
            with scope:
                result = fn(*args, **kwargs)
    except BaseException as exc:
        _B.raised(off, scope, exc)
        raise
    _B.done(off)
    return result


def make_wrapper(fn: Callable[..., Any], target: Target, package: Any) -> Callable[..., Any]:
    """Wrap one callable: the range opens around the call when ``target.describe`` names the GEMM."""
    describe = target.describe
    range_for = ranges.range_for
    R = ranges
    local = ranges.LOCAL  # local.state: this thread's open GEMM ranges and suppression
    B = _B
    compiling = _is_compiling_fn(package) if target.torch_like else (lambda: False)

    def scope_for(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            described = describe(args, kwargs)
            return None if described is None else range_for(described[0], described[1], is_gemm=target.gemm)
        except Exception:  # naming must never break the user's call
            return None

    if target.operands is not None:
        ia, ib = target.operands
        cache = R.local_cache()  # emptied by ranges.set_sink

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # The hot path of every instrumented torch GEMM: keep it to attribute reads, one dict lookup and
            # one NVTX push/pop (benchmarks/bench_instrument.py). The key holds one operand's dtype and device:
            # torch refuses operands that differ in either, and such a pair is never cached (below).
            state = local.state
            if state.depth:  # a GEMM range is open on this thread: the launch is already named
                return fn(*args, **kwargs)
            try:
                a, b = args[ia], args[ib]
                key = (a.shape, b.shape, a.dtype, a.is_cuda)
            except (IndexError, AttributeError, TypeError):
                key = None
            if key is None:
                scope = scope_for(args, kwargs)
            else:
                scope = cache.get(key, _MISS)
                if scope is _MISS:
                    scope = scope_for(args, kwargs)
                    if _same_kind(a, b):
                        cache[key] = scope
            # torch.compile folds is_compiling() to True while it traces; until torch._dynamo is imported
            # nothing can be tracing, and the check's ~70 ns are skipped.
            if scope is None or (_DYNAMO in _modules and compiling()):
                return fn(*args, **kwargs)
            if B.active:
                return _traced(fn, scope, args, kwargs, state)
            if R._plain and not state.suppressed:  # no ncu budget, no record_function: one push, one pop
                push, arg, pop = scope.main
                state.depth += 1
                push(arg)
                try:
                    return fn(*args, **kwargs)
                finally:
                    state.depth -= 1
                    pop()
            with scope:
                return fn(*args, **kwargs)

    else:
        record = target.record

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if local.state.depth or compiling():
                return fn(*args, **kwargs)
            scope = scope_for(args, kwargs)
            if scope is None:
                return fn(*args, **kwargs)
            if B.active:
                result = _traced(fn, scope, args, kwargs, local.state)
            else:
                with scope:
                    result = fn(*args, **kwargs)
            if record is not None:
                with contextlib.suppress(Exception):  # recording must never break the user's call
                    record(args, kwargs, scope)
            return result

    with contextlib.suppress(AttributeError, TypeError):  # builtins lacking some attributes
        functools.update_wrapper(wrapper, fn, updated=())
    setattr(wrapper, _MARK, fn)
    return wrapper


_LOCK = threading.RLock()
_WRAPPED: dict[str, tuple[Any, str, Any]] = {}
"""label -> (owner object, attribute, original) for everything wrapped now."""
_PENDING: set[str] = set()


def _resolve(package: Any, path: str) -> tuple[Any, str] | None:
    owner = package
    parts = path.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    if not hasattr(owner, parts[-1]):
        return None
    return owner, parts[-1]


def _wrap_package(name: str) -> list[str]:
    """Wrap every target of the already-imported package ``name``; returns labels wrapped now."""
    package = sys.modules.get(name)
    if package is None:
        return []
    done = []
    with _LOCK:
        for target in TARGETS:
            if target.package != name or target.label in _WRAPPED:
                continue
            found = _resolve(package, target.path)
            if found is None:
                continue
            owner, attr = found
            original = getattr(owner, attr)
            if getattr(original, _MARK, None) is not None:  # wrapped by another copy of us
                continue
            try:
                setattr(owner, attr, make_wrapper(original, target, package))
            except (AttributeError, TypeError):
                continue
            _WRAPPED[target.label] = (owner, attr, original)
            done.append(target.label)
    return done


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Wraps a target package right after its first import finishes (``instrument(lazy=True)``)."""

    def __init__(self) -> None:
        self._busy: set[str] = set()

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _PENDING or fullname in self._busy:
            return None
        self._busy.add(fullname)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.discard(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _WrappingLoader(spec.loader, fullname)
        return spec


class _WrappingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        with _LOCK:
            _PENDING.discard(self._name)
        _wrap_package(self._name)

    def __getattr__(self, item: str) -> Any:
        return getattr(self._loader, item)


_FINDER: _PostImportFinder | None = None


def instrument(
    *, torch: bool = True, flashinfer: bool = True, sgl: bool = True, lazy: bool = False
) -> list[str]:
    """Wrap the GEMM entry points of the chosen packages; returns the labels wrapped (e.g. ``torch.mm``).

    Idempotent: a second call wraps nothing twice. A package that is not installed is skipped silently. With
    ``lazy=True`` a package not yet imported is not imported now: it is wrapped just after the program first
    imports it (its labels then appear in :func:`instrumented`).
    """
    global _FINDER
    chosen = [name for name, on in (("torch", torch), ("flashinfer", flashinfer), ("sgl_kernel", sgl)) if on]
    for name in chosen:
        if name in sys.modules:
            _wrap_package(name)
            continue
        try:
            installed = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            installed = False
        if not installed:
            continue
        if lazy:
            with _LOCK:
                _PENDING.add(name)
                if _FINDER is None:
                    _FINDER = _PostImportFinder()
                    sys.meta_path.insert(0, _FINDER)
            continue
        try:
            importlib.import_module(name)
        except Exception:  # a broken optional package must not stop the user's program
            continue
        _wrap_package(name)
    return instrumented()


def instrumented() -> list[str]:
    """Labels of the entry points wrapped right now, in ``TARGETS`` order."""
    with _LOCK:
        return [t.label for t in TARGETS if t.label in _WRAPPED]


def uninstrument() -> list[str]:
    """Restore every wrapped entry point and cancel pending lazy wrapping; returns the labels restored."""
    global _FINDER
    with _LOCK:
        restored = []
        for label, (owner, attr, original) in list(_WRAPPED.items()):
            try:
                setattr(owner, attr, original)
            except (AttributeError, TypeError):
                continue
            restored.append(label)
            del _WRAPPED[label]
        _PENDING.clear()
        if _FINDER is not None:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(_FINDER)
            _FINDER = None
    return restored


def site_dir() -> Path:
    """Folder holding tracekit's ``sitecustomize.py``: put it first on PYTHONPATH to instrument a program."""
    return Path(__file__).resolve().parent / "site"
