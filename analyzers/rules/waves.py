"""Wave quantization / tail: work units (CTAs, or output tiles for persistent kernels) over the SMs.

Two models of how a CTA's speed depends on what else its SM holds bound the factor (docs/CASES.md, "The waves
factor"):

- the **slot model** (pessimistic): each CTA runs at 1/k of an SM whatever else is resident (k = CTAs per SM the
  occupancy limiter allows), so the GPU is ``slots = SMs x k`` equal lanes and the useful fraction is
  ``units / (ceil(units / slots) x slots)``;
- the **SM model** (optimistic): an SM's throughput does not depend on how many CTAs it holds, so the kernel lasts
  as long as its busiest SM: ``CTAs / (SMs x ceil(CTAs / SMs))`` (for a persistent grid, x its tiles per CTA).

They agree where one CTA fits per SM (most Hopper GEMMs). Where they differ the trace cannot tell which holds, so
the factor takes the SM model's value (the loss that holds either way), and its sentence and evidence say both and
how to learn which (Nsight Compute's achieved occupancy and SM issue activity). A persistent grid smaller than the
SM count leaves SMs idle for the whole kernel: both models count it, as they count SMs that Nsight Compute's
active clusters leave without a whole cluster (the denominators are all the GPU's SMs, the peak's).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from . import Factor, Rule, factor
from .occupancy import ctas_per_sm
from .tiles import parse_tile, tile_count

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import CaseEvidence

MODELS_AGREE = 0.005
"""The two models' values closer than this are one number (no range in the sentence)."""
WAVES_HOW = (
    "Nsight Compute's achieved occupancy and SM issue activity (`tracekit capture --ncu`) show whether an SM with "
    "fewer CTAs than it can hold still runs near its peak"
)
"""How to learn which model holds (the card's sentence)."""
HOW_TO_LEARN = f"the trace cannot tell which: {WAVES_HOW}"


def slots(case: CaseEvidence) -> tuple[int | None, dict[str, Any]]:
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


def usable_sms(total: int, sms: int | None, per_sm: int | None) -> int:
    """SMs that can hold a CTA: all of them, or fewer where Nsight Compute's active clusters leave some without
    a whole cluster (``total`` CTA slots of ``per_sm`` each)."""
    if not sms:
        return total
    return max(1, min(sms, total // per_sm if per_sm else total))


def fill(
    grid: int, units: int, total: int, sms: int | None, per_sm: int | None, persistent: bool
) -> tuple[float, float, int | None]:
    """(SM model, slot model, CTAs on the busiest SM (None without an SM count)): the useful fraction of the GPU's time for ``units`` of work on ``grid`` CTAs with
    ``total`` CTA slots at once, on ``sms`` SMs of ``per_sm`` CTAs each (see the module docstring). A persistent
    grid runs ``ceil(units / grid)`` rounds of tiles; otherwise each CTA is one unit. SMs no CTA can use (too few
    for a whole cluster) count as idle in both. Without an SM count the slot model stands for both."""
    rounds = math.ceil(units / grid) if persistent else 1
    ctas = grid if persistent else units
    n_waves = 1 if persistent else math.ceil(ctas / total)
    capacity = max(total, sms * per_sm) if sms and per_sm else total  # the whole GPU's CTA slots
    slot = units / (rounds * n_waves * capacity)
    if not sms:
        return slot, slot, None
    busiest = math.ceil(ctas / usable_sms(total, sms, per_sm))  # CTAs on the busiest SM
    sm = units / (rounds * sms * busiest)
    return max(sm, slot), slot, busiest


def waves(case: CaseEvidence) -> Factor | None:
    """Useful fraction of the GPU's time left by the last wave, idle SMs and padded tiles (module docstring)."""
    if not case.kernel.grid:
        return None
    total, ev = slots(case)
    if not total:
        return None
    grid = int(case.kernel.grid)
    sms = int(ev["sm_count"]) if ev.get("sm_count") else None
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
    per_sm = ev.get("ctas_per_sm")
    sm_fill, slot_fill, busiest = fill(grid, units, total, sms, per_sm, persistent)
    usable = usable_sms(total, sms, per_sm)
    idle = sms - min(grid, usable) if persistent and sms and min(grid, usable) < sms else 0
    agree = sm_fill - slot_fill < MODELS_AGREE
    value = sm_fill * useful
    ev.update(grid_size=grid, slots=total, work_units=units, waves=round(n_waves, 3), persistent=persistent)
    ev.update(sm_model=round(sm_fill, 4), slot_model=round(slot_fill, 4))
    if idle:
        ev["idle_sms"] = idle
    if persistent:
        what = f"{units} tiles of {tile.tm}x{tile.tn} over {grid} persistent CTAs"  # type: ignore[union-attr]
        if idle:
            what += f" on {sms} SMs"
    else:
        what = f"{grid} CTAs over {total} CTA slots ({ev['sm_count']} SMs)"
    last = n_waves - math.floor(n_waves) if n_waves % 1 else 1.0
    if agree:
        sentence = f"{what}: {n_waves:.2f} waves, so the last wave runs {100 * last:.0f}% full"
    else:  # the last wave's fill is the slot model's loss: not a fact here (the models differ: SMs are known)
        assert busiest is not None
        sentence = (
            f"{what}: {n_waves:.2f} {'waves' if persistent else 'waves of CTA slots'}, {busiest} "
            f"CTA{'s' if busiest > 1 else ''} on the busiest SM "
            f"({per_sm} fit at once); the SMs hold work {100 * sm_fill:.0f}% of the time if an SM runs as fast with "
            f"fewer CTAs than it can hold (the factor), {100 * slot_fill:.0f}% if each CTA runs at 1/{per_sm} of an SM "
            f"whatever else is resident; {HOW_TO_LEARN}"
        )
    if idle:
        sentence += f"; {idle} SMs get no CTA and sit idle for the whole kernel"
    if useful < 0.995:
        sentence += (
            f"{';' if idle or not agree else ','} and {100 * (1 - useful):.1f}% of the tile area is padding"
        )
    sentence += "."
    target = full * per_wave
    if idle:
        remedy = (
            f"A persistent grid on every SM ({sms} CTAs, not {grid}; a smaller cluster where clusters leave SMs "
            f"out) uses the idle SMs; then make the tile count a whole number of waves "
            f"({math.ceil(units / sms) * sms} tiles for {math.ceil(units / sms)}): another kernel or algorithm "  # type: ignore[operator]
            "(cuBLAS picks the grid), another tile shape, or stream-K"
        )
    elif n_waves > 1:
        remedy = (
            f"Make the tile count a whole number of waves ({target} work units for {full} waves, or "
            f"{math.floor(n_waves) * per_wave} for {math.floor(n_waves)}): adjust M/N, pick another tile shape, "
            "or use split-K / stream-K so the last wave is full"
        )
    else:
        remedy = (
            f"Fewer work units ({units}) than CTA slots ({per_wave}): split-K or a smaller tile fills the GPU"
        )
    return factor("waves", min(1.0, value), sentence, ev, remedy + ".")


RULE = Rule(
    name="waves",
    factor="waves",
    reads=("kernel", "shape", "ncu", "device"),
    acts_on="kernel",
    needs_rate=False,
    run=lambda case, _: waves(case),
    cause="wave quantization: tiles (or CTAs) do not fill a whole number of waves, or leave SMs idle",
)
