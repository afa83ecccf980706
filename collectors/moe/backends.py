"""Grouped-GEMM backends for ``tracekit bench moe`` (torch grouped bf16 / fp8, per-expert loops, FlashInfer's
fused MoE) and their registry, which plugins extend through :func:`register_moe`. torch is imported only
inside the backends."""

from __future__ import annotations

from typing import Any, ClassVar

from tracekit.collectors import ranges

from .cases import MoeCase, MoeConfig, tile_rule


# --- backends -----------------------------------------------------------------------------------------------------
def _has(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class MoeBackend:
    """A grouped-GEMM implementation. ``prepare_weights`` runs once per worker (all experts' weights), ``prepare``
    once per case (activations, offsets), ``run`` is what is timed, ``reference`` an fp32 result from the same
    (dequantized) operands. ``expert_fns`` (loop backends) returns callables that each run one expert's GEMM of
    ``m`` rows on a different expert, for the per-expert curve."""

    name: ClassVar[str] = ""
    op: ClassVar[str] = ""
    dtype: ClassVar[str] = "bf16"
    dtype_out: ClassVar[str] = "bf16"
    scale: ClassVar[str | None] = None
    requires: ClassVar[tuple[str, ...]] = ("torch",)
    packages: ClassVar[tuple[str, ...]] = ("torch",)
    tolerance: ClassVar[float] = 0.02
    timer: ClassVar[str] = "cuda"
    per_expert: ClassVar[bool] = False
    """True when each expert's GEMM is timed on its own (the loop backends)."""
    fused: ClassVar[bool] = False
    """True when the launch runs both expert GEMMs (fc1 and fc2): FLOPs count both."""
    description: ClassVar[str] = ""

    def available(self) -> tuple[bool, str]:
        missing = [m for m in self.requires if not _has(m)]
        if missing:
            return False, f"{', '.join(missing)} not installed (pip install {' '.join(self.packages)})"
        return True, ""

    def name_fields(self, config: MoeConfig, case: MoeCase) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments of this case's ``moe`` range name (ranges.moe_name / moe_range)."""
        args = (self.name, self.op, config.experts, case.rows, config.n, config.k)
        args += (self.dtype, self.dtype, self.dtype_out, self.scale)
        return args, {"T": case.tokens, "topk": config.topk, "route": case.route}

    def range_name(self, config: MoeConfig, case: MoeCase) -> str:
        args, extra = self.name_fields(config, case)
        return ranges.moe_name(*args, **extra)

    def scope(self, config: MoeConfig, case: MoeCase) -> Any:
        args, extra = self.name_fields(config, case)
        return ranges.moe_range(*args, **extra)

    def _expert_args(self, config: MoeConfig, m: int) -> tuple[Any, ...]:
        return (
            self.name,
            "expert",
            m,
            config.n,
            config.k,
            self.dtype,
            self.dtype,
            self.dtype_out,
            self.scale,
        )

    def curve_name(self, config: MoeConfig, m: int) -> str:
        """The ``gemm`` range name of one expert's GEMM of ``m`` rows (the loop backends' curve points)."""
        return ranges.gemm_name(*self._expert_args(config, m), of="moe")

    def expert_scope(self, config: MoeConfig, m: int) -> Any:
        """The range :meth:`curve_name` names, to open around each per-expert launch."""
        return ranges.gemm_range(*self._expert_args(config, m), of="moe")

    def tile(self, config: MoeConfig, case: MoeCase) -> tuple[int | None, int | None, str | None]:
        t = tile_rule(self.op, case.rows, config.experts, config.n, config.k)
        if t is None:
            return None, None, None
        return (
            t[0],
            t[1],
            "dispatch rule of torch's SM90 grouped kernels (aten GroupMM.cu / ScaledGroupMM.cu)",
        )

    def flops(self, config: MoeConfig, case: MoeCase) -> float:
        per_row = config.n * config.k + (config.k * config.inter if self.fused else 0)
        return 2.0 * case.rows * per_row

    def prepare_weights(self, config: MoeConfig, device: Any, seed: int) -> Any:
        raise NotImplementedError

    def prepare(self, config: MoeConfig, case: MoeCase, weights: Any, device: Any, seed: int) -> Any:
        raise NotImplementedError

    def run(self, state: Any) -> Any:
        raise NotImplementedError

    def reference(self, state: Any) -> Any:
        raise NotImplementedError

    def expert_fns(
        self, config: MoeConfig, weights: Any, m: int, count: int, device: Any, seed: int
    ) -> list[Any]:
        raise NotImplementedError


def _torch() -> Any:
    import torch

    return torch


def _randn(shape: tuple[int, ...], device: Any, seed: int, salt: int, scale: float = 1.0) -> Any:
    torch = _torch()
    g = torch.Generator(device=device)
    g.manual_seed(seed * 1000003 + salt)
    x = torch.randn(shape, device=device, dtype=torch.bfloat16, generator=g)
    return x.mul_(scale) if scale != 1.0 else x


def _offsets(counts: tuple[int, ...], device: Any) -> Any:
    torch = _torch()
    ends, total = [], 0
    for c in counts:
        total += c
        ends.append(total)
    return torch.tensor(ends, dtype=torch.int32, device=device)


def _rowwise_fp8(x: Any) -> tuple[Any, Any]:
    from tracekit.collectors.torch_quant import _fp8_rowwise

    return _fp8_rowwise(x)


class TorchBf16Grouped(MoeBackend):
    name = "torch-bf16-grouped"
    op = "grouped_mm"
    tolerance = 0.01
    description = "torch._grouped_mm, bf16: all experts in one CUTLASS grouped launch"

    def prepare_weights(self, config: MoeConfig, device: Any, seed: int) -> dict[str, Any]:
        # (E, N, K) row-major, as nn.Linear stores them; K^-1/2 keeps outputs O(1)
        w = _randn((config.experts, config.n, config.k), device, seed, 2, config.k**-0.5)
        return {"w": w}

    def prepare(
        self, config: MoeConfig, case: MoeCase, weights: Any, device: Any, seed: int
    ) -> dict[str, Any]:
        x = _randn((case.rows, config.k), device, seed, 1000 + case.case_id)
        return {
            "x": x,
            "w": weights["w"],
            "offs": _offsets(case.counts, device),
            "counts": case.counts,
            "range": self.scope(config, case),
        }

    def run(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        with state["range"]:
            return torch._grouped_mm(state["x"], state["w"].transpose(-2, -1), offs=state["offs"])

    def _operands(self, state: dict[str, Any], e: int) -> tuple[Any, Any]:
        return state["x"], state["w"][e]

    def reference(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        x, counts = state["x"], state["counts"]
        out = torch.empty((x.shape[0], state["w"].shape[1]), device=x.device, dtype=torch.float32)
        start = 0
        for e, c in enumerate(counts):
            if c:
                a, w = self._ref_operands(state, e, start, start + c)
                out[start : start + c] = a @ w.t()
            start += c
        return out

    def _ref_operands(self, state: dict[str, Any], e: int, lo: int, hi: int) -> tuple[Any, Any]:
        return state["x"][lo:hi].float(), state["w"][e].float()

    def expert_fns(
        self, config: MoeConfig, weights: Any, m: int, count: int, device: Any, seed: int
    ) -> list[Any]:
        raise NotImplementedError


class TorchFp8Grouped(TorchBf16Grouped):
    name = "torch-fp8-grouped"
    op = "scaled_grouped_mm"
    dtype = "e4m3"
    scale = "rowwise"
    tolerance = 0.08
    description = "torch._scaled_grouped_mm, e4m3 with rowwise fp32 scales (tokens x 1, experts x N)"

    def prepare_weights(self, config: MoeConfig, device: Any, seed: int) -> dict[str, Any]:
        torch = _torch()
        qw = torch.empty((config.experts, config.n, config.k), device=device, dtype=torch.float8_e4m3fn)
        sw = torch.empty((config.experts, config.n), device=device, dtype=torch.float32)
        for e in range(config.experts):  # one expert at a time: the fp32 copy of all experts would not fit
            w = _randn((config.n, config.k), device, seed, 10_000 + e, config.k**-0.5)
            q, s = _rowwise_fp8(w)
            qw[e], sw[e] = q, s.reshape(-1)
        return {"qw": qw, "sw": sw}

    def prepare(
        self, config: MoeConfig, case: MoeCase, weights: Any, device: Any, seed: int
    ) -> dict[str, Any]:
        x = _randn((case.rows, config.k), device, seed, 1000 + case.case_id)
        qx, sx = _rowwise_fp8(x)
        return {
            "qx": qx,
            "sx": sx.reshape(-1).contiguous(),
            "qw": weights["qw"],
            "sw": weights["sw"],
            "w": weights["qw"],
            "offs": _offsets(case.counts, device),
            "counts": case.counts,
            "x": qx,
            "range": self.scope(config, case),
        }

    def run(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        with state["range"]:
            return torch._scaled_grouped_mm(
                state["qx"],
                state["qw"].transpose(-2, -1),
                state["sx"],
                state["sw"],
                offs=state["offs"],
                out_dtype=torch.bfloat16,
                use_fast_accum=True,
            )

    def _ref_operands(self, state: dict[str, Any], e: int, lo: int, hi: int) -> tuple[Any, Any]:
        a = state["qx"][lo:hi].float() * state["sx"][lo:hi].unsqueeze(1)
        return a, state["qw"][e].float() * state["sw"][e].unsqueeze(1)


class TorchBf16Loop(TorchBf16Grouped):
    name = "torch-bf16-loop"
    op = "loop_mm"
    per_expert = True
    description = "one torch.mm per active expert, bf16 (the reference path; each expert timed on its own)"

    def tile(self, config: MoeConfig, case: MoeCase) -> tuple[int | None, int | None, str | None]:
        return None, None, None  # one cuBLAS GEMM per expert: no shared tile

    def run(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        x, w = state["x"], state["w"]
        out = state.get("out")
        if out is None:
            out = state["out"] = torch.empty((x.shape[0], w.shape[1]), device=x.device, dtype=torch.bfloat16)
        with state["range"]:
            for e, lo, hi in state["spans"]:
                torch.mm(x[lo:hi], w[e].t(), out=out[lo:hi])
        return out

    def prepare(
        self, config: MoeConfig, case: MoeCase, weights: Any, device: Any, seed: int
    ) -> dict[str, Any]:
        state = super().prepare(config, case, weights, device, seed)
        state["spans"] = _spans(case.counts)
        return state

    def expert_fns(
        self, config: MoeConfig, weights: Any, m: int, count: int, device: Any, seed: int
    ) -> list[Any]:
        torch = _torch()
        w = weights["w"]
        x = _randn((m, config.k), device, seed, 7)
        scope = self.expert_scope(config, m)

        def one(e: int) -> Any:
            def fn() -> Any:
                with scope:
                    return torch.mm(x, w[e].t())

            return fn

        return [one(e % config.experts) for e in range(count)]


class TorchFp8Loop(TorchFp8Grouped):
    name = "torch-fp8-loop"
    op = "loop_scaled_mm"
    per_expert = True
    description = "one torch._scaled_mm per active expert, e4m3 rowwise (the fp8 reference path)"

    def tile(self, config: MoeConfig, case: MoeCase) -> tuple[int | None, int | None, str | None]:
        return None, None, None

    def prepare(
        self, config: MoeConfig, case: MoeCase, weights: Any, device: Any, seed: int
    ) -> dict[str, Any]:
        state = super().prepare(config, case, weights, device, seed)
        state["spans"] = _spans(case.counts)
        state["sx2"] = state["sx"].reshape(-1, 1)
        return state

    def run(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        qx, qw, sx, sw = state["qx"], state["qw"], state["sx2"], state["sw"]
        outs = []
        with state["range"]:
            for e, lo, hi in state["spans"]:
                outs.append(
                    torch._scaled_mm(
                        qx[lo:hi],
                        qw[e].t(),
                        sx[lo:hi],
                        sw[e].reshape(1, -1),
                        out_dtype=torch.bfloat16,
                        use_fast_accum=True,
                    )
                )
        return torch.cat(outs) if outs else qx.new_empty((0, qw.shape[1]), dtype=torch.bfloat16)

    def expert_fns(
        self, config: MoeConfig, weights: Any, m: int, count: int, device: Any, seed: int
    ) -> list[Any]:
        torch = _torch()
        qx, sx = _rowwise_fp8(_randn((m, config.k), device, seed, 7))
        scope = self.expert_scope(config, m)
        qw, sw = weights["qw"], weights["sw"]

        def one(e: int) -> Any:
            def fn() -> Any:
                with scope:
                    return torch._scaled_mm(
                        qx, qw[e].t(), sx, sw[e].reshape(1, -1), out_dtype=torch.bfloat16, use_fast_accum=True
                    )

            return fn

        return [one(e % config.experts) for e in range(count)]


class FlashinferCutlassMoe(MoeBackend):
    """``flashinfer.fused_moe.cutlass_fused_moe`` in bf16: fc1 (gate+up, SwiGLU) and fc2 (down) of every expert."""

    name = "flashinfer-cutlass-moe"
    op = "cutlass_fused_moe"
    requires = ("torch", "flashinfer")
    packages = ("torch", "flashinfer-python")
    tolerance = 0.03
    fused = True
    description = (
        "flashinfer cutlass_fused_moe, bf16: both expert GEMMs + SwiGLU in one call (FLOPs count both)"
    )

    def name_fields(self, config: MoeConfig, case: MoeCase) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args = (self.name, self.op, config.experts, case.rows, 2 * config.inter, config.hidden)
        args += ("bf16", "bf16", "bf16", None)
        return args, {"T": case.tokens, "topk": config.topk, "route": case.route, "I": config.inter}

    def flops(self, config: MoeConfig, case: MoeCase) -> float:
        return 2.0 * case.rows * (2 * config.inter * config.hidden + config.hidden * config.inter)

    def prepare_weights(self, config: MoeConfig, device: Any, seed: int) -> dict[str, Any]:
        w1 = _randn((config.experts, 2 * config.inter, config.hidden), device, seed, 2, config.hidden**-0.5)
        w2 = _randn((config.experts, config.hidden, config.inter), device, seed, 3, config.inter**-0.5)
        return {"w1": w1, "w2": w2}

    def prepare(
        self, config: MoeConfig, case: MoeCase, weights: Any, device: Any, seed: int
    ) -> dict[str, Any]:
        torch = _torch()
        ids = []
        for e, c in enumerate(case.counts):  # token t's experts: spread the counts over tokens round-robin
            ids.extend([e] * c)
        t = case.tokens
        table = [[] for _ in range(t)]  # type: list[list[int]]
        for i, e in enumerate(sorted(ids, key=lambda e: -case.counts[e])):
            table[i % t].append(e)
        ids_t = torch.tensor(table, dtype=torch.int32, device=device)
        x = _randn((t, config.hidden), device, seed, 1000 + case.case_id)
        scales = torch.full((t, config.topk), 1.0 / config.topk, device=device, dtype=torch.float32)
        return {"x": x, "ids": ids_t, "scales": scales, **weights, "range": self.scope(config, case)}

    def run(self, state: dict[str, Any]) -> Any:
        from flashinfer.fused_moe import cutlass_fused_moe

        torch = _torch()
        with state["range"]:
            out = cutlass_fused_moe(
                state["x"], state["ids"], state["scales"], state["w1"], state["w2"], torch.bfloat16, []
            )
        return out[0] if isinstance(out, list | tuple) else out

    def reference(self, state: dict[str, Any]) -> Any:
        torch = _torch()
        x, ids, scales = state["x"].float(), state["ids"], state["scales"]
        out = torch.zeros_like(x)
        for slot in range(ids.shape[1]):
            for e in ids[:, slot].unique().tolist():
                rows = (ids[:, slot] == e).nonzero().flatten()
                h = x[rows] @ state["w1"][e].float().t()
                gate, up = h.chunk(2, dim=-1)
                act = torch.nn.functional.silu(gate) * up  # TRT-LLM's Swiglu: silu(first half) * second half
                out[rows] += scales[rows, slot : slot + 1] * (act @ state["w2"][e].float().t())
        return out


def _spans(counts: tuple[int, ...]) -> list[tuple[int, int, int]]:
    spans, lo = [], 0
    for e, c in enumerate(counts):
        if c:
            spans.append((e, lo, lo + c))
        lo += c
    return spans


MOE_BACKENDS: dict[str, MoeBackend] = {}


def register_moe(backend: MoeBackend) -> MoeBackend:
    """Add (or replace) a MoE backend; plugins named in TRACEKIT_BACKEND_PLUGINS may call this."""
    if not backend.name:
        raise ValueError("a backend needs a name")
    MOE_BACKENDS[backend.name] = backend
    return backend


for _cls in (TorchBf16Grouped, TorchFp8Grouped, TorchBf16Loop, TorchFp8Loop, FlashinferCutlassMoe):
    register_moe(_cls())
BUILTIN_MOE = tuple(MOE_BACKENDS)
DEFAULT_BACKENDS = ("torch-bf16-grouped", "torch-fp8-grouped", "torch-bf16-loop")


def all_moe_backends() -> dict[str, MoeBackend]:
    from tracekit.collectors.backends import load_plugins

    load_plugins()
    return MOE_BACKENDS
