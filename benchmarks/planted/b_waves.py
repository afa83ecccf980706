"""Planted cause (b): wave quantization. A Triton BF16 GEMM with 128x256x64 tiles, 4 stages and 8 warps needs
(128 + 256) x 64 x 2 B x 4 = 192 KiB of shared memory per CTA: one CTA per SM, 132 CTA slots on the H200. The
1024 x 4352 output is 8 x 17 = 136 tiles: one full wave and a 4-CTA tail, so the GPU runs two waves for 1.03
waves of work (about half the peak). The control 1536 x 2816 is 12 x 11 = 132 tiles, exactly one wave.
Expected verdict of the 4352 GEMM: waves.

Why not cuBLAS: the first version of this plant used torch.mm at 1024 x 2176; cuBLAS chose a 192x96 tile and a
persistent 132-CTA schedule that absorbed the tail (the committed capture samples/h200-planted-b-waves shows it),
and its 26 us kernels left the eager loop launch-bound. Here the tile is fixed and K = 16384 makes each launch
~0.3 ms, far longer than the host's launch cost under a profiler. GPU time ~2 s.
"""

from __future__ import annotations

from _common import event_times, gemm_range, torch_cuda
from _triton_gemm import launcher, tiles

K = 16384
BM, BN, BK, STAGES, WARPS = 128, 256, 64, 4, 8
SHAPES = [(1024, 4352, K), (1536, 2816, K)]  # 136 tiles (a 4-CTA tail), 132 tiles (one whole wave)


def main() -> None:
    torch = torch_cuda()
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        rng = gemm_range("triton-bf16", "matmul", m, n, k, "bf16", "bf16", "bf16")
        run = launcher(a, b, c, bm=BM, bn=BN, bk=BK, stages=STAGES, warps=WARPS)

        def launch(rng=rng, run=run) -> None:
            with rng:
                run()

        launch()  # compile outside the timing
        times = event_times(torch, launch, 50)
        torch.testing.assert_close(c, (a.float() @ b.float()).to(torch.bfloat16), rtol=2e-2, atol=5e-1)
        tflops = 2 * m * n * k / sorted(times)[25] / 1e12
        print(f"M={m} N={n} K={k}: {tiles(m, n, BM, BN)} tiles, {tflops:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
