"""Tile sizes, pipeline stages and clusters parsed from GEMM kernel names (cuBLAS nvjet / xmma, CUTLASS)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["Tile", "parse_tile", "tile_count"]


@dataclass(frozen=True)
class Tile:
    """A CTA tile ``tm x tn`` with K step ``tk`` and ``stages`` shared-memory pipeline stages (None if unknown).

    ``mma_ctas`` is 2 for a Blackwell 2-CTA MMA (``_2cta`` in nvjet names): two CTAs of the cluster's first
    dimension, each owning a ``tm x tn`` output tile, issue one MMA whose shared B tile is split between them, so
    each CTA's shared memory holds its A tile and half the B tile per stage.
    """

    tm: int
    tn: int
    tk: int | None = None
    stages: int | None = None
    cluster: tuple[int, int] | None = None
    mma_ctas: int = 1

    def stage_bytes(self, bytes_a: float, bytes_b: float | None = None) -> float | None:
        """Shared memory one pipeline stage takes in one CTA: an A tile and a B tile (its share of it, for a 2-CTA
        MMA) of K depth ``tk``."""
        if self.tk is None:
            return None
        b = bytes_b if bytes_b is not None else bytes_a
        return self.tk * (self.tm * bytes_a + self.tn / self.mma_ctas * b)


_NVJET = re.compile(r"nvjet_(?:sm\d+_)?[a-z]+_(\d+)x(\d+)_(\d+)x(\d+)_(\d+)x(\d+)(_2cta)?")
_CUTLASS2 = re.compile(r"_(\d+)x(\d+)_(\d+)x(\d+)_(?:tn|nt|nn|tt)(?:\b|_)", re.I)
_XMMA = re.compile(r"tilesize(\d+)x(\d+)x(\d+)")
_STAGE = re.compile(r"stages?(\d+)|_stage(\d+)")
_CUTE = re.compile(r"cute::C<(\d+)>\s*,\s*cute::C<(\d+)>\s*,\s*cute::C<(\d+)>")
_GEMMSHAPE = re.compile(r"GemmShape<\(int\)(\d+), \(int\)(\d+), \(int\)(\d+)>")
_SGEMM = re.compile(r"(?:sgemm|gemm)_(\d+)x(\d+)_(?:nn|nt|tn|tt)", re.I)


def parse_tile(kernel_name: str | None) -> Tile | None:
    """The tile of a GEMM kernel from its name; None when the name carries none.

    ``nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT`` -> 128x128, K 64, 6 stages, cluster 2x1;
    ``nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT`` -> 64x64 per CTA, K 64, 16 stages, a 2-CTA MMA;
    ``cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn`` -> 256x128, K 32, 3 stages;
    ``sm90_xmma_gemm_..._tilesize128x128x64_...`` -> 128x128, K 64.
    """
    if not kernel_name:
        return None
    if m := _NVJET.search(kernel_name):
        a, b, k, s, cx, cy = (int(x) for x in m.groups()[:6])
        return Tile(a, b, k, s, (cx, cy), 2 if m.group(7) else 1)
    if m := _XMMA.search(kernel_name):
        a, b, k = (int(x) for x in m.groups())
        st = _STAGE.search(kernel_name)
        stages = int(next(g for g in st.groups() if g)) if st else None
        return Tile(a, b, k, stages)
    if m := _CUTLASS2.search(kernel_name):
        a, b, k, s = (int(x) for x in m.groups())
        return Tile(a, b, k, s)
    if m := _GEMMSHAPE.search(kernel_name):
        a, b, k = (int(x) for x in m.groups())
        return Tile(a, b, k)
    if m := _CUTE.search(kernel_name):
        a, b, k = (int(x) for x in m.groups())
        return Tile(a, b, k)
    if m := _SGEMM.search(kernel_name):
        return Tile(int(m.group(1)), int(m.group(2)))
    return None


def tile_count(tile: Tile, m: int, n: int, grid_size: int | None = None) -> tuple[int, float]:
    """Output tiles of an ``m x n`` GEMM and the useful fraction of their area (1 - padding).

    The tile's first dimension may run along N (cuBLAS called from row-major PyTorch computes C^T): the
    orientation whose tile count equals the grid (or divides it, for split-K) wins, else the one with fewer tiles.
    """
    options = []
    for a, b in ((tile.tm, tile.tn), (tile.tn, tile.tm)):
        count = math.ceil(m / a) * math.ceil(n / b)
        useful = (m * n) / (count * a * b)
        options.append((count, useful))
    if grid_size:
        for count, useful in options:
            if count == grid_size or (grid_size > count and grid_size % count == 0):
                return count, useful
    return min(options, key=lambda o: (o[0], -o[1]))
