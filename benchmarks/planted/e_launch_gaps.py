"""Planted cause (e): launch gaps. 400 eager BF16 GEMMs of 1024 x 2048 x 2048 (~13 us of kernel each on an
H200), each followed by ~40 us of Python bookkeeping, as in an eager model loop: the GPU idles between launches.
Expected verdict: launch gaps. GPU time < 1 s.
"""

from __future__ import annotations

import time

from _common import gemm_range, step_range, torch_cuda

M, N, K = 1024, 2048, 2048
CALLS, HOST_US = 400, 40


def main() -> None:
    torch = torch_cuda()
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    rng = gemm_range("torch-bf16", "mm", M, N, K, "bf16", "bf16", "bf16")
    torch.mm(a, b)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with step_range("eager-loop"):
        for _ in range(CALLS):
            with rng:
                torch.mm(a, b)
            end = time.perf_counter() + HOST_US * 1e-6  # the framework's per-call host work
            while time.perf_counter() < end:
                pass
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    print(f"{CALLS} eager GEMMs: {2 * M * N * K * CALLS / wall / 1e12:.0f} TFLOP/s over the loop", flush=True)


if __name__ == "__main__":
    main()
