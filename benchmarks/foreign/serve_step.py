"""A serving-like step, written the way inference engines (SGLang, vLLM) run a decoder, with no tracekit import.

A small decoder of GLM-5-like width (hidden 6144, 48 query heads and 4 KV heads of 128, SwiGLU MLP with
intermediate 2048), ``--layers`` layers (default 2). Each layer: RMSNorm, a fused QKV projection, rotary
embedding, grouped-query attention through ``scaled_dot_product_attention`` (KV heads repeated as HF
transformers' ``repeat_kv`` does), the output projection, RMSNorm, and the MLP: a fused gate_up projection,
SiLU(gate) * up, the down projection. Layers listed in ``--fp8-layers`` (default: the last one) run their MLP in
FP8: the weights are quantized once, the activations are quantized to e4m3 on every call (amax, scale, cast:
real quantize kernels) and the GEMMs are ``torch._scaled_mm`` with per-tensor scales. Everything else is bf16.

The program, as an engine runs it:
  1. warm-up outside any range (cuBLAS handles, autotuning, lazy module loads);
  2. decode: ``--decode-tokens`` sequences (default 16) of one new token each against a KV cache of
     ``--kv-len`` positions, captured once into a CUDA graph and replayed ``--decode-steps`` times (default 50),
     each replay inside the user's NVTX range and ``record_function`` named ``serve/decode``;
  3. prefill: ``--prefill-tokens`` tokens (default 4096) of one sequence, causal attention, run eagerly
     ``--prefill-steps`` times (default 30), each inside ``serve/prefill``.

Prints one line per phase: median ms per step (CUDA events) and the step's GEMM TFLOP/s counted over the whole
step. Needs torch and a CUDA GPU; the FP8 layers need FP8 tensor cores (SM 8.9+), else they run in bf16 and a line
says so. Capture it with, for example:

  tracekit capture --nsys --ncu --ranges serve -- python3 benchmarks/foreign/serve_step.py
  tracekit capture --torch-profiler -- python3 benchmarks/foreign/serve_step.py
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Iterator

import torch
import torch.nn.functional as F

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 6144, 48, 4, 128, 2048
E4M3_MAX = 448.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    p.add_argument(
        "--fp8-layers", default=None, help="comma-separated layer indices with an FP8 MLP (default: the last)"
    )
    p.add_argument("--decode-tokens", type=int, default=16, help="sequences in a decode step (default 16)")
    p.add_argument("--kv-len", type=int, default=1024, help="KV-cache positions per sequence (default 1024)")
    p.add_argument("--decode-steps", type=int, default=50, help="CUDA-graph replays of decode (default 50)")
    p.add_argument("--prefill-tokens", type=int, default=4096, help="tokens in a prefill step (default 4096)")
    p.add_argument("--prefill-steps", type=int, default=30, help="eager prefill steps (default 30)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps of each phase first (default 3)")
    args = p.parse_args(argv)
    if min(args.layers, args.decode_tokens, args.kv_len, args.prefill_tokens) < 1:
        p.error("--layers, --decode-tokens, --kv-len and --prefill-tokens must be at least 1")
    if min(args.decode_steps, args.prefill_steps, args.warmup) < 0:
        p.error("step counts must not be negative")
    fp8 = args.fp8_layers
    args.fp8 = {args.layers - 1} if fp8 is None else {int(i) for i in fp8.split(",") if i.strip()}
    return args


@contextlib.contextmanager
def user_range(name: str) -> Iterator[None]:
    """The user's own range, as engines mark a step: an NVTX push/pop (Nsight tools) and a record_function
    (the PyTorch profiler), both named ``name``."""
    torch.cuda.nvtx.range_push(name)
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        torch.cuda.nvtx.range_pop()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm as HF transformers' LlamaRMSNorm computes it (in float32, then back)."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (half rotation), as HF transformers' apply_rotary_pos_emb."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor e4m3 quantization: (x_fp8, scale) with x ~= x_fp8 * scale."""
    scale = (x.abs().max().float() / E4M3_MAX).clamp(min=1e-12)
    return (x / scale).to(torch.float8_e4m3fn), scale


class Fp8Linear:
    """A linear layer with FP8 weights (quantized once) and FP8 activations (quantized every call)."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.w_fp8, self.w_scale = quantize(weight)  # weight is (out, in): _scaled_mm takes its transpose

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x_fp8, x_scale = quantize(x)
        return torch._scaled_mm(
            x_fp8, self.w_fp8.t(), scale_a=x_scale, scale_b=self.w_scale, out_dtype=torch.bfloat16
        )


class Layer:
    """One decoder layer's weights and its forward pass."""

    def __init__(self, fp8: bool, gen: torch.Generator) -> None:
        def w(out: int, inp: int) -> torch.Tensor:
            t = torch.randn(out, inp, device="cuda", dtype=torch.bfloat16, generator=gen)
            return t / inp**0.5

        self.norm1 = torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16)
        self.norm2 = torch.ones(HIDDEN, device="cuda", dtype=torch.bfloat16)
        self.qkv = torch.nn.Linear(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM, bias=False).cuda().bfloat16()
        self.o = torch.nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False).cuda().bfloat16()
        gate_up, down = w(2 * INTERMEDIATE, HIDDEN), w(HIDDEN, INTERMEDIATE)
        self.fp8 = fp8
        if fp8:
            self.gate_up, self.down = Fp8Linear(gate_up), Fp8Linear(down)
        else:
            self.gate_up = torch.nn.Linear(HIDDEN, 2 * INTERMEDIATE, bias=False).cuda().bfloat16()
            self.down = torch.nn.Linear(INTERMEDIATE, HIDDEN, bias=False).cuda().bfloat16()
            with torch.no_grad():
                self.gate_up.weight.copy_(gate_up)
                self.down.weight.copy_(down)

    def attention(
        self, x: torch.Tensor, batch: int, seq: int, cos: torch.Tensor, sin: torch.Tensor, kv: tuple | None
    ) -> torch.Tensor:
        qkv = self.qkv(x).view(batch, seq, HEADS + 2 * KV_HEADS, HEAD_DIM).transpose(1, 2)
        q, k, v = qkv.split([HEADS, KV_HEADS, KV_HEADS], dim=1)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if (
            kv is not None
        ):  # decode: the new token's K/V go into the last cache slot, attention reads the cache
            k_cache, v_cache = kv
            k_cache[:, :, -1:].copy_(k)
            v_cache[:, :, -1:].copy_(v)
            k, v = k_cache, v_cache
        k, v = repeat_kv(k), repeat_kv(v)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=kv is None)
        return self.o(out.transpose(1, 2).reshape(batch * seq, HEADS * HEAD_DIM))

    def forward(
        self, x: torch.Tensor, batch: int, seq: int, cos: torch.Tensor, sin: torch.Tensor, kv: tuple | None
    ) -> torch.Tensor:
        x = x + self.attention(rms_norm(x, self.norm1), batch, seq, cos, sin, kv)
        gate, up = self.gate_up(rms_norm(x, self.norm2)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


def repeat_kv(x: torch.Tensor) -> torch.Tensor:
    """Each KV head repeated for its query heads, as HF transformers' ``repeat_kv`` does (a layout copy)."""
    b, kv, s, d = x.shape
    groups = HEADS // KV_HEADS
    return x[:, :, None].expand(b, kv, groups, s, d).reshape(b, kv * groups, s, d)


def rope(seq: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2, device="cuda", dtype=torch.float32) / HEAD_DIM))
    pos = torch.arange(offset, offset + seq, device="cuda", dtype=torch.float32)
    freqs = torch.outer(pos, inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().bfloat16(), emb.sin().bfloat16()


def step_flops(layers: list[Layer], tokens: int) -> float:
    """GEMM FLOPs of one step over ``tokens`` rows (projections only, attention's own matmuls left out)."""
    per_token = HIDDEN * (HEADS + 2 * KV_HEADS) * HEAD_DIM + HEADS * HEAD_DIM * HIDDEN
    per_token += HIDDEN * 2 * INTERMEDIATE + INTERMEDIATE * HIDDEN
    return 2.0 * per_token * tokens * len(layers)


def timed(steps: int, name: str, body) -> list[float]:
    """Run ``body`` ``steps`` times, each inside the user's range ``name``; ms per step (CUDA events)."""
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with user_range(name):
            start.record()
            body()
            end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def report(name: str, times: list[float], flops: float) -> None:
    if not times:
        print(f"{name}: no steps")
        return
    ms = statistics.median(times)
    print(
        f"{name}: {len(times)} steps, median {ms:.3f} ms, GEMMs {flops / ms / 1e9:.1f} TFLOP/s over the step"
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("serve_step.py needs a CUDA GPU")
    fp8_ok = torch.cuda.get_device_capability() >= (8, 9) and hasattr(torch, "float8_e4m3fn")
    if args.fp8 and not fp8_ok:
        print("FP8 tensor cores not available: every MLP runs in bf16")
    gen = torch.Generator(device="cuda").manual_seed(0)
    layers = [Layer(fp8_ok and i in args.fp8, gen) for i in range(args.layers)]
    torch.backends.cuda.matmul.allow_tf32 = False

    # decode: static buffers, one CUDA graph, replayed
    b = args.decode_tokens
    d_x = torch.randn(b, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=gen)
    d_cos, d_sin = rope(1, args.kv_len - 1)
    caches = [
        tuple(
            torch.randn(
                b, KV_HEADS, args.kv_len, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=gen
            )
            for _ in range(2)
        )
        for _ in layers
    ]

    def decode() -> torch.Tensor:
        x = d_x
        for layer, kv in zip(layers, caches, strict=True):
            x = layer.forward(x, b, 1, d_cos, d_sin, kv)
        return x

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(max(args.warmup, 1)):
            decode()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        decode()
    for _ in range(args.warmup):
        graph.replay()
    torch.cuda.synchronize()
    report(
        "serve/decode (CUDA graph)",
        timed(args.decode_steps, "serve/decode", graph.replay),
        step_flops(layers, b),
    )

    # prefill: eager
    t = args.prefill_tokens
    p_x = torch.randn(t, HIDDEN, device="cuda", dtype=torch.bfloat16, generator=gen)
    p_cos, p_sin = rope(t, 0)

    def prefill() -> torch.Tensor:
        x = p_x
        for layer in layers:
            x = layer.forward(x, 1, t, p_cos, p_sin, None)
        return x

    with torch.no_grad():
        for _ in range(args.warmup):
            prefill()
        torch.cuda.synchronize()
        report(
            "serve/prefill (eager)",
            timed(args.prefill_steps, "serve/prefill", prefill),
            step_flops(layers, t),
        )


if __name__ == "__main__":
    main()
