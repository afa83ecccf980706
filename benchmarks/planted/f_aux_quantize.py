"""Planted cause (f): an auxiliary kernel. An FP8 GEMM (M=8192, N=1024, K=8192, tensorwise scales) whose BF16
activation is quantized per call by separate kernels (amax, scale, cast) inside an ``aux`` range nested in the
GEMM's range: the quantize reads 128 MB and writes 64 MB per call against ~0.12 ms of FP8 GEMM. Expected
verdict: aux kernels. GPU time ~1 s.
"""

from __future__ import annotations

from _common import event_times, gemm_range, torch_cuda

from tracekit.collectors.ranges import aux_range

M, N, K = 8192, 1024, 8192
FP8_MAX = 448.0


def main() -> None:
    torch = torch_cuda()
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    w_scale = w.abs().amax().float() / FP8_MAX
    w8 = (w / w_scale).to(torch.float8_e4m3fn).t()  # column-major K x N, as _scaled_mm wants
    gemm = gemm_range("torch-fp8", "scaled_mm", M, N, K, "e4m3", "e4m3", "bf16", scale="tensorwise")
    quant = aux_range("quantize", backend="torch-fp8", op="quantize", M=M, K=K, a="bf16", out="e4m3")

    def launch() -> None:
        with gemm:
            with quant:
                x_scale = x.abs().amax().float() / FP8_MAX
                x8 = (x / x_scale).to(torch.float8_e4m3fn)
            torch._scaled_mm(x8, w8, scale_a=x_scale, scale_b=w_scale, out_dtype=torch.bfloat16)

    launch()
    times = event_times(torch, launch, 100)
    print(f"fp8 with per-call quantize: {2 * M * N * K / sorted(times)[50] / 1e12:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
