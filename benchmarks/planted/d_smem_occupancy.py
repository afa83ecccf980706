"""Planted cause (d): shared memory limits occupancy. A Triton BF16 GEMM with 128x128x128 tiles, 3 pipeline
stages and 4 warps needs (128 + 128) x 128 x 2 B x 3 = 192 KiB of shared memory per CTA: one CTA of 4 warps per
SM (6% theoretical occupancy), too few warps to hide latency. Expected verdict: in-kernel, cause "occupancy
limited by shared memory" (the ncu pass shows the shared-memory limiter; the timeline alone shows the shared
memory per CTA). GPU time ~1 s.
"""

from __future__ import annotations

from _common import event_times, gemm_range, torch_cuda
from _triton_gemm import launcher

M = N = K = 4096
BM, BN, BK, STAGES, WARPS = 128, 128, 128, 3, 4


def main() -> None:
    torch = torch_cuda()
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    rng = gemm_range("triton-bf16", "matmul", M, N, K, "bf16", "bf16", "bf16")
    run = launcher(a, b, c, bm=BM, bn=BN, bk=BK, stages=STAGES, warps=WARPS)

    def launch() -> None:
        with rng:
            run()

    launch()  # compile outside the timing
    times = event_times(torch, launch, 100)
    torch.testing.assert_close(c, a @ b, rtol=2e-2, atol=2e-1)
    print(f"triton {BM}x{BN}x{BK} s{STAGES} w{WARPS}: {2 * M * N * K / sorted(times)[50] / 1e12:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
