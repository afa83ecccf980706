"""A user's FP8 linear layer with eager per-call activation quantization, written the way it usually is:

    amax = x.abs().max(); scale = amax.float() / 448; x_fp8 = (x / scale).to(torch.float8_e4m3fn)
    y = torch._scaled_mm(x_fp8, w_fp8.t(), scale_a=scale, scale_b=w_scale, out_dtype=torch.bfloat16)

The weight is quantized once, up front. Each call's quantization launches several small elementwise and
reduction kernels beside the GEMM inside the same range, and at M=256 they cost a large share of the range's
time. Ranges (the user's own NVTX names, default domain):

  fp8_linear           quantize x + _scaled_mm, M=256 N=2048 K=6144, e4m3 tensorwise (auxiliary kernels)
  fp8_linear_prequant  the same _scaled_mm on activations quantized beforehand (control: no auxiliary kernels)

--reps calls per range after --warmup calls outside ranges, queued behind a ~5 ms GPU spin (torch.cuda._sleep)
so the kernels run back to back: what remains of the range is kernel time, GEMM and quantization. Prints one
line per range: median ms of the whole range (CUDA events), TFLOP/s of the GEMM counted over the range. Does
not import tracekit; needs torch and a CUDA GPU with FP8 (SM 8.9+)."""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

M, N, K = 256, 2048, 6144
E4M3_MAX = 448.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3, help="calls per range (default 3)")
    p.add_argument("--warmup", type=int, default=3, help="calls per range before, outside ranges (default 3)")
    args = p.parse_args(argv)
    if args.reps < 1 or args.warmup < 1:
        p.error("--reps and --warmup must be at least 1")
    return args


def queue_ahead(ms: float = 5.0) -> None:
    """Hold the GPU busy for about ``ms`` so the launches that follow queue up and run back to back: the
    timed kernels are then measured as the GPU runs them, not as fast as a host slowed by a profiler issues
    them."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(ms * 1e-3 * 1.98e9))  # GPU clock cycles at the H200's boost clock


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor e4m3 quantization of ``x``: (x_fp8, scale) with x ~= x_fp8 * scale."""
    amax = x.abs().max()
    scale = amax.float() / E4M3_MAX
    return (x / scale).to(torch.float8_e4m3fn), scale


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    w_fp8, w_scale = quantize(w)  # once, like a loaded checkpoint

    def fp8_linear(x: torch.Tensor) -> torch.Tensor:
        x_fp8, x_scale = quantize(x)
        return torch._scaled_mm(x_fp8, w_fp8.t(), scale_a=x_scale, scale_b=w_scale, out_dtype=torch.bfloat16)

    x_fp8, x_scale = quantize(x)

    def fp8_linear_prequant(_x: torch.Tensor) -> torch.Tensor:
        return torch._scaled_mm(x_fp8, w_fp8.t(), scale_a=x_scale, scale_b=w_scale, out_dtype=torch.bfloat16)

    ref = (x.float() @ w.float().t()).to(torch.bfloat16)
    for name, fn in (("fp8_linear", fp8_linear), ("fp8_linear_prequant", fp8_linear_prequant)):
        for _ in range(args.warmup):
            fn(x)
        torch.cuda.synchronize()
        queue_ahead()
        events = []
        for _ in range(args.reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.nvtx.range_push(name)
            start.record()
            y = fn(x)
            end.record()
            torch.cuda.nvtx.range_pop()
            events.append((start, end))
        torch.cuda.synchronize()
        ms = statistics.median(s.elapsed_time(e) for s, e in events)
        err = ((y.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        print(
            f"{name}: M={M} N={N} K={K} fp8 e4m3 tensorwise: median {ms:.4f} ms per range, "
            f"{2 * M * N * K / (ms / 1e3) / 1e12:.0f} TFLOP/s, max rel err {err:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
