"""Planted cause (c): memory bound. M = 16 rows against an 8192 x 8192 BF16 weight: 2.1 GFLOP over 134 MB is
16 FLOP/B, far below the H200's ridge (989 TF / 4.8 TB/s = 206 FLOP/B), so bandwidth caps it near 77 TFLOP/s.
Expected verdict: memory. GPU time ~1 s.
"""

from __future__ import annotations

from _common import event_times, gemm_range, torch_cuda

M, N, K = 16, 8192, 8192


def main() -> None:
    torch = torch_cuda()
    # Rotate weights past the 60 MB L2 so each launch really reads its weight from HBM.
    weights = [torch.randn(K, N, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    rng = gemm_range("torch-bf16", "mm", M, N, K, "bf16", "bf16", "bf16")
    i = 0

    def launch() -> None:
        nonlocal i
        with rng:
            torch.mm(x, weights[i % len(weights)])
        i += 1

    times = event_times(torch, launch, 400)
    print(f"M={M}: {2 * M * N * K / sorted(times)[200] / 1e12:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
