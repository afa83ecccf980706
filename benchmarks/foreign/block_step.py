"""A transformer block as a user writes it, run three ways, with no tracekit import.

A Llama-like block (hidden 2048, 16 heads of 128, SwiGLU MLP with intermediate 5632) over ``--tokens`` tokens
(default 2048) of one sequence: RMSNorm, a fused QKV projection, causal attention through
``scaled_dot_product_attention`` (SDPA), the output projection, RMSNorm, the gate and up projections (two GEMMs of
one shape), SiLU(gate) * up and the down projection. Each way runs in its own NVTX range (default domain) and
``record_function`` of the same name, ``--iters`` times after ``--warmup`` untimed runs outside any range:

  block/eager     bf16 eager PyTorch: five cuBLAS GEMMs a block (on Hopper several share one persistent
                  ``nvjet`` kernel and a grid of one CTA per SM)
  block/compiled  the same module under ``torch.compile(mode="max-autotune-no-cudagraphs")``: Inductor's
                  Triton GEMM templates (``triton_tem_fused_..._mm_...``), with ``--gemm-backends`` (default
                  TRITON) as ``max_autotune_gemm_backends``
  block/fp8       the MLP in FP8: weights quantized once, activations quantized to e4m3 on every call (amax,
                  scale, cast), the GEMMs ``torch._scaled_mm`` with per-tensor scales (SM 8.9+; else skipped
                  with a line saying so)

Prints one line per way: median ms per block (CUDA events) and the GEMM TFLOP/s over the block. Needs torch and
a CUDA GPU. Inductor's cache (``TORCHINDUCTOR_CACHE_DIR``) makes a second run skip the autotuning. Capture it
with, for example:

  tracekit capture --nsys --ncu --ranges block -- python3 benchmarks/foreign/block_step.py
  tracekit capture --torch-profiler -- python3 benchmarks/foreign/block_step.py
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from collections.abc import Iterator

import torch
import torch.nn.functional as F

HIDDEN, HEADS, HEAD_DIM, INTERMEDIATE = 2048, 16, 128, 5632
E4M3_MAX = 448.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=2048, help="tokens of the sequence (default 2048)")
    p.add_argument("--iters", type=int, default=3, help="blocks inside each way's range (default 3)")
    p.add_argument("--warmup", type=int, default=3, help="untimed blocks of each way first (default 3)")
    p.add_argument("--ways", default="eager,compiled,fp8", help="comma-separated ways (default all three)")
    p.add_argument(
        "--gemm-backends", default="TRITON", help="Inductor's max_autotune_gemm_backends (default TRITON)"
    )
    args = p.parse_args(argv)
    if min(args.tokens, args.iters, args.warmup) < 1:
        p.error("--tokens, --iters and --warmup must be at least 1")
    return args


class Block(torch.nn.Module):
    """One pre-norm decoder block: attention and a SwiGLU MLP, bf16 weights."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1 = torch.nn.RMSNorm(HIDDEN)
        self.qkv = torch.nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.o = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.norm2 = torch.nn.RMSNorm(HIDDEN)
        self.gate = torch.nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.up = torch.nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.down = torch.nn.Linear(INTERMEDIATE, HIDDEN, bias=False)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = self.qkv(self.norm1(x)).view(t, 3, HEADS, HEAD_DIM).unbind(1)
        q, k, v = (y.transpose(0, 1).unsqueeze(0) for y in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.o(a.squeeze(0).transpose(0, 1).reshape(t, HIDDEN))

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attention(x))


def _quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e4m3 with a per-tensor scale: amax, scale, cast (the quantize kernels of an eager FP8 layer)."""
    scale = (x.abs().amax().float() / E4M3_MAX).clamp(min=1e-12)
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale


class Fp8Block(torch.nn.Module):
    """The block with its MLP's three GEMMs in FP8 through ``torch._scaled_mm`` (attention stays bf16)."""

    def __init__(self, block: Block) -> None:
        super().__init__()
        self.block = block
        self.w = {n: _quantize(getattr(block, n).weight.detach()) for n in ("gate", "up", "down")}

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        xq, xs = _quantize(x)
        wq, ws = self.w[name]
        return torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.block.attention(x)
        h = self.block.norm2(x)
        return x + self._linear(F.silu(self._linear(h, "gate")) * self._linear(h, "up"), "down")


@contextlib.contextmanager
def user_range(name: str) -> Iterator[None]:
    """The user's own range: NVTX (default domain) for Nsight tools, record_function for the PyTorch profiler."""
    torch.cuda.nvtx.range_push(name)
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        torch.cuda.nvtx.range_pop()


def gemm_flops(tokens: int) -> float:
    """FLOPs of one block's five GEMMs (qkv, o, gate, up, down)."""
    per_token = HIDDEN * 3 * HIDDEN + HIDDEN * HIDDEN + 3 * HIDDEN * INTERMEDIATE
    return 2.0 * tokens * per_token


def run_way(name: str, fn, x: torch.Tensor, args: argparse.Namespace) -> None:
    with torch.no_grad():
        for _ in range(args.warmup):
            fn(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with user_range(f"block/{name}"):
                start.record()
                fn(x)
                end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    ms = statistics.median(times)
    print(
        f"block/{name}: {ms:.3f} ms median of {len(times)}, {gemm_flops(x.shape[0]) / ms / 1e9:.1f} GEMM TFLOP/s"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("block_step: no CUDA GPU", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    block = Block().cuda().to(torch.bfloat16).eval()
    x = torch.randn(args.tokens, HIDDEN, device="cuda", dtype=torch.bfloat16)
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    for way in ways:
        if way == "eager":
            run_way(way, block, x, args)
        elif way == "compiled":
            import torch._inductor.config as inductor_config

            inductor_config.max_autotune_gemm_backends = args.gemm_backends
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/tk-inductor-cache")
            run_way(way, torch.compile(block, mode="max-autotune-no-cudagraphs"), x, args)
        elif way == "fp8":
            if torch.cuda.get_device_capability() < (8, 9):
                print("block/fp8: skipped: FP8 tensor cores need SM 8.9 or newer")
                continue
            run_way(way, Fp8Block(block), x, args)
        else:
            print(f"block_step: unknown way {way!r} (eager, compiled, fp8)", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
