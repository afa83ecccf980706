"""Occupancy: CTAs per SM and what limits them (registers, shared memory, warps, blocks)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import CaseEvidence

LIMITS = ("registers", "shared_mem", "warps", "blocks")
_REG_ALLOC_UNIT = 256  # registers are allocated per warp in units of 256
_SMEM_RESERVED = 1024  # the driver reserves 1 KiB of shared memory per CTA (sm_80 and later)


def limits_from_ncu(case: CaseEvidence) -> dict[str, int]:
    row = case.ncu.row if case.ncu else {}
    out = {}
    for name in LIMITS:
        value = row.get(f"occupancy_limit_{name}")
        if value is None:
            value = case.metric(f"launch__occupancy_limit_{name}")
        if value is not None:
            out[name] = int(value)
    return out


def limits_computed(case: CaseEvidence) -> dict[str, int]:
    """CTAs per SM each resource allows, from the launch configuration and the architecture's limits."""
    arch = case.device.arch if case.device else None
    block, regs, smem = case.kernel.block, case.kernel.registers, case.kernel.smem_bytes
    if arch is None or not block:
        return {}
    warps = math.ceil(block / 32)
    out: dict[str, int] = {}
    if arch.max_warps_per_sm:
        out["warps"] = arch.max_warps_per_sm // warps
    if arch.max_blocks_per_sm:
        out["blocks"] = arch.max_blocks_per_sm
    if regs and arch.regs_per_sm:
        per_warp = math.ceil(regs * 32 / _REG_ALLOC_UNIT) * _REG_ALLOC_UNIT
        out["registers"] = arch.regs_per_sm // (per_warp * warps)
    if smem and arch.smem_per_sm_bytes:
        out["shared_mem"] = arch.smem_per_sm_bytes // (smem + _SMEM_RESERVED)
    return out


def ctas_per_sm(case: CaseEvidence) -> tuple[int | None, str | None]:
    """Resident CTAs per SM and the resource(s) that set it (``registers and shared_mem``); (None, None) if
    nothing is known."""
    lim = limits_from_ncu(case) or limits_computed(case)
    if not lim:
        return (1, None) if case.kernel.grid else (None, None)
    low = min(lim.values())
    names = [k for k in LIMITS if lim.get(k) == low]
    return max(low, 0), " and ".join(names)


def theoretical_occupancy_pct(case: CaseEvidence) -> float | None:
    row = case.ncu.row if case.ncu else {}
    if row.get("theoretical_occupancy_pct") is not None:
        return float(row["theoretical_occupancy_pct"])
    arch = case.device.arch if case.device else None
    per_sm, _ = ctas_per_sm(case)
    if arch is None or not arch.max_warps_per_sm or not case.kernel.block or per_sm is None:
        return None
    return 100.0 * per_sm * math.ceil(case.kernel.block / 32) / arch.max_warps_per_sm
