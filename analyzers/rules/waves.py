"""Wave quantization / tail: work units (CTAs, or output tiles for persistent kernels) over the SMs' CTA slots."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from . import Factor
from .occupancy import ctas_per_sm
from .tiles import parse_tile, tile_count

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import GemmCase


def slots(case: GemmCase) -> tuple[int | None, dict[str, Any]]:
    """CTAs the whole GPU runs at once: SMs x CTAs per SM (or active clusters x cluster size, from ncu)."""
    dev = case.device
    sm = (case.ncu.row.get("sm_count") if case.ncu else None) or (dev.sm_count if dev else None)
    per_sm, limiter = ctas_per_sm(case)
    ev: dict[str, Any] = {"sm_count": sm, "ctas_per_sm": per_sm, "ctas_per_sm_limiter": limiter}
    cluster_active = case.metric("launch__cluster_max_active")
    cluster_size = case.metric("launch__cluster_size")
    if cluster_active and cluster_size and cluster_size > 1:
        ev["launch__cluster_max_active"] = cluster_active
        ev["launch__cluster_size"] = cluster_size
        return int(cluster_active * cluster_size), ev
    if sm is None or per_sm is None:
        return None, ev
    return int(sm * per_sm), ev


def waves(case: GemmCase) -> Factor | None:
    """Useful fraction of the last wave (and of padded tiles): ``units / (ceil(units / slots) * slots)``."""
    if not case.kernel.grid:
        return None
    total, ev = slots(case)
    if not total:
        return None
    grid = int(case.kernel.grid)
    tile = parse_tile(case.kernel.name)
    units, useful, persistent = grid, 1.0, False
    if tile and case.m and case.n:
        tiles, useful = tile_count(tile, case.m, case.n, grid)
        ev.update(tile=f"{tile.tm}x{tile.tn}", tiles=tiles, tile_useful_fraction=round(useful, 4))
        if grid <= total and tiles > grid:
            units, persistent = tiles, True  # a persistent kernel: grid = resident CTAs, looping over tiles
    per_wave = grid if persistent else total
    n_waves = units / per_wave
    full = math.ceil(n_waves)
    wave_eff = units / (full * per_wave)
    value = wave_eff * useful
    ev.update(grid_size=grid, slots=total, work_units=units, waves=round(n_waves, 3), persistent=persistent)
    if persistent:
        what = f"{units} tiles of {tile.tm}x{tile.tn} over {grid} persistent CTAs"  # type: ignore[union-attr]
    else:
        what = f"{grid} CTAs over {total} CTA slots ({ev['sm_count']} SMs)"
    last = n_waves - math.floor(n_waves) if n_waves % 1 else 1.0
    sentence = f"{what}: {n_waves:.2f} waves, so the last wave runs {100 * last:.0f}% full"
    if useful < 0.995:
        sentence += f", and {100 * (1 - useful):.1f}% of the tile area is padding"
    sentence += "."
    target = full * per_wave
    remedy = (
        f"Make the tile count a whole number of waves ({target} work units for {full} waves, or "
        f"{math.floor(n_waves) * per_wave} for {math.floor(n_waves)}): adjust M/N, pick another tile shape, "
        "or use split-K / stream-K so the last wave is full"
        if n_waves > 1
        else f"Fewer work units ({units}) than CTA slots ({per_wave}): split-K or a smaller tile fills the GPU"
    )
    return Factor("waves", min(1.0, value), sentence, ev, remedy + ".")
