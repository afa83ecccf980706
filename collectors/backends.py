"""GEMM backends for ``tracekit bench gemm``: one object per library x precision x scaling.

Each backend says whether it can run here (:meth:`Backend.available`), prepares random inputs the way its library
expects (:meth:`Backend.prepare`: FP8 / FP4 operands and block scales made by the library's own quantize
function and scale layout, inside an ``aux_range(role="quantize")``), runs one GEMM inside its ``gemm_range``
(:meth:`Backend.run`) and computes an fp32 reference from the dequantized operands (:meth:`Backend.reference`).
torch and the GEMM libraries are imported only inside these methods, in the worker process.

Conventions: A is M x K (row-major), the weight W is N x K (row-major, as in ``nn.Linear``), the output is
M x N = A @ W^T in bf16. Inputs are ``randn`` (never zeros), seeded per buffer. The torch quantize / dequantize
helpers the backends share are in collectors/torch_quant.py.

Extra backends (tests, plugins) register through :func:`register`, through modules or ``.py`` files named in
``TRACEKIT_BACKEND_PLUGINS`` (comma-separated; each is imported and may call ``register``), or through the
``tracekit.gemm_backends`` entry-point group (each entry point is a Backend or a zero-argument factory).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
from typing import Any, ClassVar

from tracekit.collectors.ranges import aux_range, gemm_name, gemm_range

from .torch_quant import (
    E2M1_MAX,
    E4M3_MAX,
    _ceil_div,
    _fp8_block,
    _fp8_rowwise,
    _fp8_tensorwise,
    _quantize_mxfp4_torch,
    _randn,
    _torch,
    dequant_nvfp4,
    quantize_nvfp4_torch,
    to_blocked,
    unpack_e2m1,
)
from .torch_quant import E2M1_VALUES as E2M1_VALUES
from .torch_quant import from_blocked as from_blocked
from .torch_quant import rel_error as rel_error

__all__ = ["BACKENDS", "Backend", "BackendUnavailable", "all_backends", "get_backend", "register"]

ENV_PLUGINS = "TRACEKIT_BACKEND_PLUGINS"
ENTRY_POINT_GROUP = "tracekit.gemm_backends"


class BackendUnavailable(Exception):
    """Raised by a backend whose package is not installed here (recorded as ``unavailable``)."""


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class Backend:
    """A GEMM implementation the benchmark can time. Subclasses fill in the class attributes and methods."""

    name: ClassVar[str] = ""
    dtype: ClassVar[str] = "bf16"
    """Canonical input dtype (tracekit.naming)."""
    dtype_b: ClassVar[str | None] = None
    out: ClassVar[str] = "bf16"
    op: ClassVar[str] = ""
    scale: ClassVar[str | None] = None
    requires: ClassVar[tuple[str, ...]] = ("torch",)
    """Importable modules the backend needs; a missing one makes it ``unavailable``."""
    packages: ClassVar[tuple[str, ...]] = ("torch",)
    """Distribution names whose versions are recorded with each result."""
    tolerance: ClassVar[float] = 0.02
    """Largest accepted ||out - ref|| / ||ref||."""
    timer: ClassVar[str] = "cuda"
    """``cuda``: timed with CUDA graphs / events by the worker; ``wall``: a CPU-only backend (tests)."""
    description: ClassVar[str] = ""

    def available(self) -> tuple[bool, str]:
        """(ok, reason): reason names what to install when not ok."""
        missing = [m for m in self.requires if not _has(m)]
        if missing:
            return False, f"{', '.join(missing)} not installed (pip install {' '.join(self.install_hint())})"
        return True, ""

    def install_hint(self) -> tuple[str, ...]:
        return self.packages

    def range_name(self, m: int, n: int, k: int) -> str:
        return gemm_name(
            self.name, self.op, m, n, k, self.dtype, self.dtype_b or self.dtype, self.out, self.scale
        )

    def gemm_scope(self, m: int, n: int, k: int) -> Any:
        return gemm_range(
            self.name, self.op, m, n, k, self.dtype, self.dtype_b or self.dtype, self.out, self.scale
        )

    def inputs(self, m: int, n: int, k: int, device: Any, seed: int) -> tuple[Any, Any]:
        """The case's bf16 ``randn`` operands A (M x K) and W (N x K), seeded per buffer."""
        return _randn((m, k), device, seed, 1), _randn((n, k), device, seed, 2)

    def state(self, m: int, n: int, k: int, **tensors: Any) -> dict[str, Any]:
        """A prepared case: its shape, its tensors and the range its launch opens."""
        return {"m": m, "n": n, "k": k, **tensors, "range": self.gemm_scope(m, n, k)}

    def prepare(self, m: int, n: int, k: int, device: Any, seed: int) -> Any:
        raise NotImplementedError

    def run(self, state: Any) -> Any:
        raise NotImplementedError

    def reference(self, state: Any) -> Any:
        raise NotImplementedError

    def aux(self, state: Any) -> Any:
        """The per-call auxiliary step a real layer pays (activation quantize), or None if there is none."""
        return None

    has_aux: ClassVar[bool] = False


# --- torch -------------------------------------------------------------------------------------------------


class TorchBf16(Backend):
    name = "torch-bf16"
    dtype = "bf16"
    op = "mm"
    tolerance = 0.01
    description = "torch.mm on bf16 (cuBLAS / cuBLASLt)"

    def prepare(self, m: int, n: int, k: int, device: Any, seed: int) -> dict[str, Any]:
        a, w = self.inputs(m, n, k, device, seed)
        return self.state(m, n, k, a=a, wt=w.t(), w=w)

    def run(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        with state["range"]:
            return torch.mm(state["a"], state["wt"])

    def reference(self, state: dict[str, Any]) -> Any:
        return state["a"].float() @ state["w"].float().t()


class TorchFp8Tensorwise(Backend):
    name = "torch-fp8-tensorwise"
    dtype = "e4m3"
    op = "scaled_mm"
    scale = "tensorwise"
    tolerance = 0.08
    has_aux = True
    fast_accum = True
    description = "torch._scaled_mm, e4m3 x e4m3, one fp32 scale per tensor"

    def quantize(self, x: Any) -> tuple[Any, Any]:
        return _fp8_tensorwise(x)

    def prepare(self, m: int, n: int, k: int, device: Any, seed: int) -> dict[str, Any]:
        a, w = self.inputs(m, n, k, device, seed)
        aux = aux_range("quantize", backend=self.name, op="fp8_quantize", M=m, K=k, a="bf16", out="e4m3")
        with aux:
            qa, sa = self.quantize(a)
        qw, sw = self.quantize_weight(w)
        return self.state(
            m,
            n,
            k,
            a_hp=a,
            qa=qa,
            sa=sa,
            qw=qw,
            sw=sw,
            aux_range=aux,
        )

    def quantize_weight(self, w: Any) -> tuple[Any, Any]:
        q, s = self.quantize(w)
        return q, s

    def scales(self, state: dict[str, Any]) -> tuple[Any, Any]:
        return state["sa"], state["sw"]

    def run(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        sa, sb = self.scales(state)
        with state["range"]:
            return torch._scaled_mm(
                state["qa"],
                state["qw"].t(),
                sa,
                sb,
                out_dtype=torch.bfloat16,
                use_fast_accum=self.fast_accum,
            )

    def dequant(self, state: dict[str, Any]) -> tuple[Any, Any]:
        return state["qa"].float() * state["sa"], state["qw"].float() * state["sw"]

    def reference(self, state: dict[str, Any]) -> Any:
        a, w = self.dequant(state)
        return a @ w.t()

    def aux(self, state: dict[str, Any]) -> Any:
        with state["aux_range"]:
            return self.quantize(state["a_hp"])


class TorchFp8Rowwise(TorchFp8Tensorwise):
    name = "torch-fp8-rowwise"
    scale = "rowwise"
    description = "torch._scaled_mm, e4m3, fp32 scale per row of A (M x 1) and per column of B (1 x N)"

    def quantize(self, x: Any) -> tuple[Any, Any]:
        return _fp8_rowwise(x)

    def scales(self, state: dict[str, Any]) -> tuple[Any, Any]:
        return state["sa"], state["sw"].t()  # (M, 1), (1, N)

    def dequant(self, state: dict[str, Any]) -> tuple[Any, Any]:
        return state["qa"].float() * state["sa"], state["qw"].float() * state["sw"]


class TorchFp8Blockwise(TorchFp8Tensorwise):
    name = "torch-fp8-blockwise"
    scale = "blockwise-1x128.128x128"
    fast_accum = False  # torch: "scaled_gemm doesn't support fast accum with 128x128 blockwise scaling"
    description = (
        "torch._scaled_mm, e4m3, A in 1x128 blocks, W in 128x128 blocks (DeepSeek recipe; cuBLAS >= 12.9)"
    )

    def quantize(self, x: Any) -> tuple[Any, Any]:
        q, s = _fp8_block(x, 1)  # s: (M, K/128)
        return q, s.t().contiguous().t()  # 1x128 scales must be outer-dim-major

    def quantize_weight(self, w: Any) -> tuple[Any, Any]:
        return _fp8_block(w, 128)  # (N/128, K/128)

    def scales(self, state: dict[str, Any]) -> tuple[Any, Any]:
        return state["sa"], state["sw"].t()  # (M, K/128) and (K/128, N/128)

    def dequant(self, state: dict[str, Any]) -> tuple[Any, Any]:
        m, n, k = state["m"], state["n"], state["k"]
        a = (state["qa"].float().reshape(m, k // 128, 128) * state["sa"].unsqueeze(-1)).reshape(m, k)
        sw = state["sw"].repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
        return a, state["qw"].float() * sw


class TorchNvfp4(Backend):
    name = "torch-nvfp4"
    dtype = "e2m1"
    op = "scaled_mm"
    scale = "nvfp4-1x16"
    tolerance = 0.25
    description = "torch._scaled_mm on float4_e2m1fn_x2 with swizzled e4m3 1x16 block scales (needs SM100+)"

    def available(self) -> tuple[bool, str]:
        ok, why = super().available()
        if not ok:
            return ok, why
        torch = _torch()
        if not hasattr(torch, "float4_e2m1fn_x2"):
            return False, f"torch {torch.__version__} has no float4_e2m1fn_x2 (needs torch >= 2.8)"
        return True, ""

    def prepare(self, m: int, n: int, k: int, device: Any, seed: int) -> dict[str, Any]:
        torch = _torch()
        a, w = self.inputs(m, n, k, device, seed)
        with aux_range("quantize", backend=self.name, op="nvfp4_quantize", M=m, K=k, a="bf16", out="e2m1"):
            qa, sa, ga = quantize_nvfp4_torch(a)
            qw, sw, gw = quantize_nvfp4_torch(w)
        with aux_range("swizzle", backend=self.name, op="to_blocked", M=m, K=k):
            sa_b, sw_b = to_blocked(sa), to_blocked(sw)
        return self.state(
            m,
            n,
            k,
            qa=qa.view(torch.float4_e2m1fn_x2),
            qw=qw.view(torch.float4_e2m1fn_x2),
            sa=sa,
            sw=sw,
            sa_b=sa_b,
            sw_b=sw_b,
            ga=ga,
            gw=gw,
        )

    def run(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        # The global decode scales are left out of the timed call (a real layer folds them into the epilogue
        # or the next op); the reference leaves them out too.
        with state["range"]:
            return torch._scaled_mm(
                state["qa"], state["qw"].t(), state["sa_b"], state["sw_b"], out_dtype=torch.bfloat16
            )

    def reference(self, state: dict[str, Any]) -> Any:
        m, n, k = state["m"], state["n"], state["k"]
        a = dequant_nvfp4(state["qa"], state["sa"], 1.0, m, k, swizzled=False)
        w = dequant_nvfp4(state["qw"], state["sw"], 1.0, n, k, swizzled=False)
        return a @ w.t()


class TorchMxfp4(TorchNvfp4):
    name = "torch-mxfp4"
    scale = "mxfp4-1x32"
    description = "torch._scaled_mm on float4_e2m1fn_x2 with e8m0 1x32 block scales (MX; needs SM100+)"

    def prepare(self, m: int, n: int, k: int, device: Any, seed: int) -> dict[str, Any]:
        torch = _torch()
        a, w = self.inputs(m, n, k, device, seed)
        with aux_range("quantize", backend=self.name, op="mxfp4_quantize", M=m, K=k, a="bf16", out="e2m1"):
            qa, sa = _quantize_mxfp4_torch(a)
            qw, sw = _quantize_mxfp4_torch(w)
        return self.state(
            m,
            n,
            k,
            qa=qa.view(torch.float4_e2m1fn_x2),
            qw=qw.view(torch.float4_e2m1fn_x2),
            sa=sa,
            sw=sw,
            sa_b=to_blocked(sa.view(torch.float8_e8m0fnu)),
            sw_b=to_blocked(sw.view(torch.float8_e8m0fnu)),
            ga=torch.ones((), device=device),
            gw=torch.ones((), device=device),
        )

    def reference(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        m, n, k = state["m"], state["n"], state["k"]

        def deq(q: Any, s: Any, rows: int) -> Any:
            vals = unpack_e2m1(q.view(torch.uint8).reshape(rows, k // 2)).reshape(rows, k // 32, 32)
            return (vals * torch.exp2(s.float() - 127).unsqueeze(-1)).reshape(rows, k)

        return deq(state["qa"], state["sa"], m) @ deq(state["qw"], state["sw"], n).t()


# --- FlashInfer ----------------------------------------------------------------------------------------------


class FlashinferFp4(Backend):
    """``flashinfer.mm_fp4(a, b.T, a_sf, b_sf.T, alpha, out_dtype, backend=...)`` on NVFP4 from ``nvfp4_quantize``."""

    dtype = "e2m1"
    op = "mm_fp4"
    scale = "nvfp4-1x16"
    requires = ("torch", "flashinfer")
    packages = ("torch", "flashinfer-python")
    tolerance = 0.25
    has_aux = True
    fi_backend: ClassVar[str] = "auto"

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"flashinfer.mm_fp4 backend={self.fi_backend!r} on NVFP4 (nvfp4_quantize, 128x4 scale layout)"

    quantizer: str = "flashinfer"

    def _quantize(self, x: Any, shuffle: bool) -> tuple[Any, Any, Any]:
        """(packed e2m1, 128x4-swizzled e4m3 scales, global encode scale) from FlashInfer's own quantizer.

        Where that kernel cannot run here (no build for this GPU, JIT toolchain missing) the same NVFP4 layout is
        made with torch ops so that ``mm_fp4`` is still called and reports its own support verdict;
        ``self.quantizer`` then reads ``torch-fallback: <why>``.
        """
        import flashinfer

        torch = _torch()
        global_sf = (E4M3_MAX * E2M1_MAX / x.float().abs().amax().clamp(min=1e-12)).float().reshape(1)
        try:
            if hasattr(flashinfer, "nvfp4_quantize") and hasattr(flashinfer, "SfLayout"):
                q, sf = flashinfer.nvfp4_quantize(
                    x, global_sf, sfLayout=flashinfer.SfLayout.layout_128x4, do_shuffle=shuffle
                )
            else:  # older FlashInfer: fp4_quantize, swizzled 128x4 by default
                q, sf = flashinfer.fp4_quantize(x, global_sf, 16, False, True)
            torch.cuda.synchronize()
        except Exception as exc:
            if "illegal" in str(exc).lower():
                raise
            self.quantizer = f"torch-fallback: {type(exc).__name__}: {str(exc)[:200]}"
            rows, cols = x.shape
            q, scales, decode = quantize_nvfp4_torch(x)
            sf = to_blocked(scales).reshape(_ceil_div(rows, 128) * 128, _ceil_div(cols // 16, 4) * 4)
            return q, sf, (1.0 / decode).reshape(1)
        return q, sf.view(torch.float8_e4m3fn) if sf.dtype == torch.uint8 else sf, global_sf

    def prepare(self, m: int, n: int, k: int, device: Any, seed: int) -> dict[str, Any]:
        torch = _torch()
        a, w = self.inputs(m, n, k, device, seed)
        shuffle_w = self.fi_backend == "trtllm"  # trtllm wants the weight shuffled (do_shuffle=True)
        aux = aux_range("quantize", backend=self.name, op="nvfp4_quantize", M=m, K=k, a="bf16", out="e2m1")
        with aux:
            qa, sfa, ga = self._quantize(a, False)
        qw, sfw, gw = self._quantize(w, shuffle_w)
        ref_w = (qw, sfw) if not shuffle_w else self._quantize(w, False)[:2]
        alpha = (1.0 / (ga * gw)).float().reshape(())
        return self.state(
            m,
            n,
            k,
            a_hp=a,
            qa=qa,
            sfa=sfa,
            qw=qw,
            sfw=sfw,
            ga=ga,
            gw=gw,
            alpha=alpha.to(device=device, dtype=torch.float32),
            ref_w=ref_w,
            aux_range=aux,
        )

    def run(self, state: dict[str, Any]) -> Any:
        import flashinfer

        torch = _torch()
        with state["range"]:
            return flashinfer.mm_fp4(
                state["qa"],
                state["qw"].T,
                state["sfa"],
                state["sfw"].T,
                state["alpha"],
                torch.bfloat16,
                None,
                backend=self.fi_backend,
            )

    def reference(self, state: dict[str, Any]) -> Any:
        return _nvfp4_reference(state, *state["ref_w"])  # the weight as quantized unshuffled

    def aux(self, state: dict[str, Any]) -> Any:
        with state["aux_range"]:
            return self._quantize(state["a_hp"], False)


def _nvfp4_reference(state: dict[str, Any], qw: Any, sfw: Any) -> Any:
    """fp32 A @ W^T from NVFP4 operands with 128x4-swizzled block scales and their global encode scales (the
    FlashInfer and sgl-kernel quantizers' layout)."""
    m, n, k = state["m"], state["n"], state["k"]
    a = dequant_nvfp4(state["qa"], state["sfa"], 1.0 / state["ga"], m, k, swizzled=True)
    w = dequant_nvfp4(qw, sfw, 1.0 / state["gw"], n, k, swizzled=True)
    return a @ w.t()


def _fi_fp4(backend: str) -> type[FlashinferFp4]:
    return type(
        f"FlashinferFp4_{backend.replace('-', '_')}",
        (FlashinferFp4,),
        {"name": f"flashinfer-fp4-{backend}", "fi_backend": backend},
    )


class FlashinferFp8(Backend):
    name = "flashinfer-fp8"
    dtype = "e4m3"
    op = "bmm_fp8"
    scale = "tensorwise"
    requires = ("torch", "flashinfer")
    packages = ("torch", "flashinfer-python")
    tolerance = 0.08
    has_aux = True
    description = "flashinfer.bmm_fp8 (batch 1, cuBLASLt), e4m3 with per-tensor scales"

    def gemm_scope(self, m: int, n: int, k: int) -> Any:
        return gemm_range(self.name, self.op, m, n, k, "e4m3", "e4m3", self.out, self.scale, batch=1)

    def range_name(self, m: int, n: int, k: int) -> str:
        return gemm_name(self.name, self.op, m, n, k, "e4m3", "e4m3", self.out, self.scale, batch=1)

    def prepare(self, m: int, n: int, k: int, device: Any, seed: int) -> dict[str, Any]:
        a, w = self.inputs(m, n, k, device, seed)
        aux = aux_range("quantize", backend=self.name, op="fp8_quantize", M=m, K=k, a="bf16", out="e4m3")
        with aux:
            qa, sa = _fp8_tensorwise(a)
        qw, sw = _fp8_tensorwise(w)
        return self.state(
            m,
            n,
            k,
            a_hp=a,
            qa=qa.unsqueeze(0),  # (1, M, K)
            qwt=qw.unsqueeze(0).transpose(-2, -1),  # (1, K, N) column-major
            qw=qw,
            sa=sa.reshape(1),
            sw=sw.reshape(1),
            aux_range=aux,
        )

    def run(self, state: dict[str, Any]) -> Any:
        import flashinfer

        torch = _torch()
        with state["range"]:
            out = flashinfer.bmm_fp8(state["qa"], state["qwt"], state["sa"], state["sw"], torch.bfloat16)
        return out[0]

    def reference(self, state: dict[str, Any]) -> Any:
        return (state["qa"][0].float() * state["sa"]) @ (state["qw"].float() * state["sw"]).t()

    def aux(self, state: dict[str, Any]) -> Any:
        with state["aux_range"]:
            return _fp8_tensorwise(state["a_hp"])


# --- sgl-kernel ---------------------------------------------------------------------------------------------


class SglFp4(Backend):
    name = "sgl-fp4"
    dtype = "e2m1"
    op = "cutlass_scaled_fp4_mm"
    scale = "nvfp4-1x16"
    requires = ("torch", "sgl_kernel")
    packages = ("torch", "sgl-kernel")
    tolerance = 0.25
    has_aux = True
    description = "sgl_kernel.cutlass_scaled_fp4_mm on NVFP4 from sgl_kernel.scaled_fp4_quant"

    def _quantize(self, x: Any) -> tuple[Any, Any, Any]:
        import sgl_kernel

        global_sf = (E4M3_MAX * E2M1_MAX / x.float().abs().amax().clamp(min=1e-12)).float().reshape(1)
        q, sf = sgl_kernel.scaled_fp4_quant(x, global_sf)
        return q, sf, global_sf

    def prepare(self, m: int, n: int, k: int, device: Any, seed: int) -> dict[str, Any]:
        a, w = self.inputs(m, n, k, device, seed)
        aux = aux_range("quantize", backend=self.name, op="scaled_fp4_quant", M=m, K=k, a="bf16", out="e2m1")
        with aux:
            qa, sfa, ga = self._quantize(a)
        qw, sfw, gw = self._quantize(w)
        return self.state(
            m,
            n,
            k,
            a_hp=a,
            qa=qa,
            sfa=sfa,
            qw=qw,
            sfw=sfw,
            ga=ga,
            gw=gw,
            alpha=(1.0 / (ga * gw)).float().reshape(1),
            aux_range=aux,
        )

    def run(self, state: dict[str, Any]) -> Any:
        import sgl_kernel

        torch = _torch()
        with state["range"]:
            return sgl_kernel.cutlass_scaled_fp4_mm(
                state["qa"], state["qw"], state["sfa"], state["sfw"], state["alpha"], torch.bfloat16
            )

    def reference(self, state: dict[str, Any]) -> Any:
        return _nvfp4_reference(state, state["qw"], state["sfw"])

    def aux(self, state: dict[str, Any]) -> Any:
        with state["aux_range"]:
            return self._quantize(state["a_hp"])


class SglFp8(Backend):
    name = "sgl-fp8"
    dtype = "e4m3"
    op = "fp8_scaled_mm"
    scale = "rowwise"
    requires = ("torch", "sgl_kernel")
    packages = ("torch", "sgl-kernel")
    tolerance = 0.08
    has_aux = True
    description = "sgl_kernel.fp8_scaled_mm, e4m3 with per-token (A) and per-channel (W) fp32 scales"

    def prepare(self, m: int, n: int, k: int, device: Any, seed: int) -> dict[str, Any]:
        a, w = self.inputs(m, n, k, device, seed)
        aux = aux_range("quantize", backend=self.name, op="fp8_quantize", M=m, K=k, a="bf16", out="e4m3")
        with aux:
            qa, sa = _fp8_rowwise(a)
        qw, sw = _fp8_rowwise(w)
        return self.state(
            m,
            n,
            k,
            a_hp=a,
            qa=qa,
            sa=sa,
            qw=qw,
            sw=sw,
            aux_range=aux,
        )

    def run(self, state: dict[str, Any]) -> Any:
        import sgl_kernel

        torch = _torch()
        with state["range"]:
            return sgl_kernel.fp8_scaled_mm(
                state["qa"],
                state["qw"].t(),
                state["sa"].reshape(-1).contiguous(),
                state["sw"].reshape(-1).contiguous(),
                torch.bfloat16,
            )

    def reference(self, state: dict[str, Any]) -> Any:
        return (state["qa"].float() * state["sa"]) @ (state["qw"].float() * state["sw"]).t()

    def aux(self, state: dict[str, Any]) -> Any:
        with state["aux_range"]:
            return _fp8_rowwise(state["a_hp"])


# --- registry --------------------------------------------------------------------------------------------------

BACKENDS: dict[str, Backend] = {}
"""Every known backend by name, in registration order (built-ins first)."""


def register(backend: Backend) -> Backend:
    """Add (or replace) a backend in the registry; returns it."""
    if not backend.name:
        raise ValueError("a backend needs a name")
    BACKENDS[backend.name] = backend
    return backend


for _cls in (
    TorchBf16,
    TorchFp8Tensorwise,
    TorchFp8Rowwise,
    TorchFp8Blockwise,
    TorchNvfp4,
    TorchMxfp4,
    *(_fi_fp4(b) for b in ("auto", "cudnn", "cutlass", "trtllm", "cute-dsl")),
    FlashinferFp8,
    SglFp4,
    SglFp8,
):
    register(_cls())

BUILTIN = tuple(BACKENDS)
"""Names of the built-in backends."""

_loaded_plugins: set[str] = set()
_entry_points_loaded = False


def load_plugins() -> None:
    """Import backends named in ``TRACEKIT_BACKEND_PLUGINS`` and the ``tracekit.gemm_backends`` entry points. Each
    plugin is imported once; one named in the variable after an earlier call (a test, a long-lived process) is
    still loaded."""
    global _entry_points_loaded
    for item in filter(None, (s.strip() for s in os.environ.get(ENV_PLUGINS, "").split(","))):
        if item in _loaded_plugins:
            continue
        _loaded_plugins.add(item)
        if item.endswith(".py"):
            spec = importlib.util.spec_from_file_location(f"tracekit_backend_plugin_{abs(hash(item))}", item)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load backend plugin {item}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            importlib.import_module(item)
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    try:
        eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception:
        eps = ()
    for ep in eps:
        obj = ep.load()
        backend = obj() if callable(obj) and not isinstance(obj, Backend) else obj
        if isinstance(backend, Backend):
            register(backend)


def all_backends() -> dict[str, Backend]:
    load_plugins()
    return BACKENDS


def get_backend(name: str) -> Backend:
    """The backend called ``name``; KeyError lists the known names."""
    backends = all_backends()
    if name not in backends:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(backends)}")
    return backends[name]
