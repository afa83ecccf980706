"""Planted cause (d): shared memory limits occupancy. A Triton BF16 GEMM with 128x128x128 tiles, 3 pipeline
stages and 4 warps needs (128 + 128) x 128 x 2 B x 3 = 192 KiB of shared memory per CTA: one CTA of 4 warps per
SM (6% theoretical occupancy), too few warps to hide latency. Expected verdict: in-kernel, cause "occupancy
limited by shared memory" (the ncu pass shows the shared-memory limiter; the timeline alone shows the shared
memory per CTA). GPU time ~1 s.
"""

from __future__ import annotations

import triton
import triton.language as tl
from _common import event_times, gemm_range, torch_cuda

M = N = K = 4096
BM, BN, BK, STAGES, WARPS = 128, 128, 128, 3, 4


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):  # fmt: skip
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BN)
    pm, pn = pid // grid_n, pid % grid_n
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        acc += tl.dot(tl.load(a), tl.load(b))
        a += BK * sak
        b += BK * sbk
    c = c_ptr + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c, acc.to(tl.bfloat16))


def main() -> None:
    torch = torch_cuda()
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    rng = gemm_range("triton-bf16", "matmul", M, N, K, "bf16", "bf16", "bf16")

    def launch() -> None:
        with rng:
            matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                                BM=BM, BN=BN, BK=BK, num_warps=WARPS, num_stages=STAGES)  # fmt: skip

    launch()  # compile outside the timing
    times = event_times(torch, launch, 100)
    torch.testing.assert_close(c, a @ b, rtol=2e-2, atol=2e-1)
    print(f"triton {BM}x{BN}x{BK} s{STAGES} w{WARPS}: {2 * M * N * K / sorted(times)[50] / 1e12:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
