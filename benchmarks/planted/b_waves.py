"""Planted cause (b): wave quantization. On 132 SMs a 1024 x 2176 output in 128x128 tiles is 8 x 17 = 136 tiles:
one full wave and a 4-CTA tail, so the GPU runs two waves for 1.03 waves of work (about half the peak). The
control 1408 x 1536 is 11 x 12 = 132 tiles, exactly one wave. Expected verdict of the 2176 GEMM: waves. The
tile cuBLAS picks is read from the kernel name and grid, not assumed. GPU time ~1 s.
"""

from __future__ import annotations

from _common import event_times, gemm_range, torch_cuda

K = 4096
SHAPES = [(1024, 2176, K), (1408, 1536, K)]  # 136 tiles (tail), 132 tiles (whole wave)


def main() -> None:
    torch = torch_cuda()
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        rng = gemm_range("torch-bf16", "mm", m, n, k, "bf16", "bf16", "bf16")

        def launch(a=a, b=b, rng=rng) -> None:
            with rng:
                torch.mm(a, b)

        times = event_times(torch, launch, 200)
        print(f"M={m} N={n} K={k}: {2 * m * n * k / sorted(times)[100] / 1e12:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
