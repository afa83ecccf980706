"""The Triton BF16 GEMM the planted scripts control tile by tile: one CTA per BM x BN output tile, a plain
(non-persistent) grid, no masking (every shape used is a whole number of tiles). cuBLAS picks its own tiles and
persistent schedules, which can hide a planted cause (seen with the first wave-quantization plant on the H200)."""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl


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


def tiles(m: int, n: int, bm: int, bn: int) -> int:
    """CTAs of the grid: one per output tile."""
    assert m % bm == 0 and n % bn == 0, "the planted shapes are whole numbers of tiles"
    return (m // bm) * (n // bn)


def launcher(a: Any, b: Any, c: Any, *, bm: int, bn: int, bk: int, stages: int, warps: int) -> Any:
    """A function that launches ``c = a @ b`` with the given tile, pipeline depth and warps."""
    m, k = a.shape
    n = b.shape[1]
    grid = (tiles(m, n, bm, bn),)

    def launch() -> None:
        matmul_kernel[grid](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride(),
                            BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=stages)  # fmt: skip

    return launch
