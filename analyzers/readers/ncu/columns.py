"""Nsight Compute metrics -> the named columns of the ``ncu`` frame, shared by the .ncu-rep and CSV readers.

Metric names differ between GPU architectures and ncu versions, so every column has an ordered list of candidate
metrics and takes the first one present. Values are brought to the frame's units (ns, Hz, bytes, bytes/s) from
whatever unit ncu gives: a .ncu-rep stores base units (``ns``, ``hz``, ``byte``), older ncu versions wrote
``nsecond`` / ``cycle/nsecond``, and CSV exports scale them for display (``us``, ``Ghz``, ``Kbyte``, ``Tbyte/s``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

Metric = tuple[object, str]
"""A metric's value (float, int, str or None) and its unit as ncu wrote it."""

# --- units -------------------------------------------------------------------------------------------------

_SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME_NS = {
    "ns": 1.0,
    "nsecond": 1.0,
    "us": 1e3,
    "usecond": 1e3,
    "ms": 1e6,
    "msecond": 1e6,
    "s": 1e9,
    "second": 1e9,
}
_PREFIXABLE = ("byte", "hz", "sector", "inst", "cycle", "request", "warp", "thread", "block")
_UNIT_PART = re.compile(r"^([KMGTP]?)([A-Za-z]+)$")


def _prefix(text: str) -> tuple[float, str]:
    """Split an SI prefix off a unit part: ``Kbyte`` -> (1e3, ``byte``); anything else -> (1, text)."""
    m = _UNIT_PART.match(text)
    if m is not None:
        prefix, base = m.groups()
        if base.lower() == "hz":
            return _SI[prefix], "hz"
        if prefix and base in _PREFIXABLE:
            return _SI[prefix], base
    return 1.0, text


def to_base(value: float, unit: str) -> tuple[float, str]:
    """Convert ``value`` in ``unit`` to the base unit a .ncu-rep uses (``ns``, ``hz``, ``byte``, ``byte/s``, ...).

    ncu's display scaling puts one SI prefix on some part of the unit and means "times that factor" wherever it
    stands (``214.244 Kbyte/block`` is 214244 byte/block, ``8.19 %/Kbyte`` is 8190 %/byte); a time in the
    denominator is a real rate (``1.41 cycle/nsecond`` is 1.41 GHz). Unknown units pass through unchanged.
    """
    unit = (unit or "").strip()
    if not unit or unit == "%":
        return value, unit
    if unit in _TIME_NS:
        return value * _TIME_NS[unit], "ns"
    num, slash, den = unit.partition("/")
    factor, num = _prefix(num)
    if not slash:
        return value * factor, num
    if den in _TIME_NS:
        per_second = factor * 1e9 / _TIME_NS[den]
        if num == "cycle":
            return value * per_second, "hz"
        return value * per_second, f"{num}/s"
    dfactor, den = _prefix(den)
    return value * factor * dfactor, f"{num}/{den}"


# --- column candidates ---------------------------------------------------------------------------------------

TENSOR_PIPE_CANDIDATES: tuple[str, ...] = (
    # All tensor instruction types (HMMA, HGMMA, QGMMA, IMMA, ...): on Ampere an int8 GEMM shows 0% in the
    # hmma metric and 21% here, so the aggregate comes first.
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_imma_cycles_active.avg.pct_of_peak_sustained_active",
    # Older sections and some sets only have the elapsed-cycles variants (lower: idle SMs count).
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_type_hmma_hgmma_qgmma_imma_igmma_bmma_bgmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
)
"""Candidates for ``tensor_pipe_pct``, best first. ``sm__inst_executed_pipe_tensor*`` are left out on purpose:
they count instruction issue, not pipe-busy cycles (5.6% where the pipe is 90% busy on a Hopper GEMM)."""

_SIMPLE: dict[str, tuple[str, ...]] = {
    "sm_count": ("launch__sm_count", "device__attribute_multiprocessor_count"),
    "grid_x": ("launch__grid_dim_x",),
    "grid_y": ("launch__grid_dim_y",),
    "grid_z": ("launch__grid_dim_z",),
    "grid_size": ("launch__grid_size",),
    "block_x": ("launch__block_dim_x",),
    "block_y": ("launch__block_dim_y",),
    "block_z": ("launch__block_dim_z",),
    "block_size": ("launch__block_size",),
    "registers_per_thread": ("launch__registers_per_thread",),
    "static_smem_bytes": ("launch__shared_mem_per_block_static",),
    "dynamic_smem_bytes": ("launch__shared_mem_per_block_dynamic",),
    "smem_config_bytes": ("launch__shared_mem_config_size",),
    "smem_per_block_limit_bytes": ("device__attribute_max_shared_memory_per_block_optin",),
    "smem_per_sm_bytes": ("device__attribute_max_shared_memory_per_multiprocessor",),
    "theoretical_occupancy_pct": ("sm__maximum_warps_per_active_cycle_pct",),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "occupancy_limit_registers": ("launch__occupancy_limit_registers",),
    "occupancy_limit_shared_mem": ("launch__occupancy_limit_shared_mem",),
    "occupancy_limit_warps": ("launch__occupancy_limit_warps",),
    "occupancy_limit_blocks": ("launch__occupancy_limit_blocks",),
    "waves_per_sm": ("launch__waves_per_multiprocessor",),
    "duration_ns": ("gpu__time_duration.sum",),
    "sm_clock_hz": (
        "gpc__cycles_elapsed.avg.per_second",
        "sm__cycles_elapsed.avg.per_second",
        "smsp__cycles_elapsed.avg.per_second",
    ),
    "dram_clock_hz": ("dram__cycles_elapsed.avg.per_second",),
    "compute_throughput_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    "memory_throughput_pct": ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
    "dram_throughput_pct": (
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    "dram_bytes_per_s": ("dram__bytes.sum.per_second",),
    "l2_hit_rate_pct": ("lts__t_sector_hit_rate.pct",),
    "issue_active_pct": (
        "sm__issue_active.avg.pct_of_peak_sustained_active",
        "sm__inst_issued.avg.pct_of_peak_sustained_active",
        "smsp__issue_active.avg.pct_of_peak_sustained_active",
        "sm__issue_active.avg.pct_of_peak_sustained_elapsed",
        "sm__inst_issued.avg.pct_of_peak_sustained_elapsed",
    ),
}
"""Frame column -> candidate metrics, first present wins."""

_KHZ_ATTRIBUTES = ("device__attribute_clock_rate", "device__attribute_max_gpu_frequency_khz")
"""CUDA reports these device attributes in kHz (1980000 on an H200) with no unit in the report."""

DEVICE_KEYS = ("device", "device_name", "compute_capability")


def number(metric: Metric | None) -> float | None:
    """A metric as a float in base units; None when absent, not a number, or NaN."""
    if metric is None:
        return None
    value, unit = metric
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    if math.isnan(v):
        return None
    return to_base(v, unit)[0]


def first(metrics: Mapping[str, Metric], names: tuple[str, ...]) -> tuple[float | None, str | None]:
    """The first candidate present with a numeric value, and its name."""
    for name in names:
        v = number(metrics.get(name))
        if v is not None:
            return v, name
    return None, None


def text(metrics: Mapping[str, Metric], name: str) -> str | None:
    metric = metrics.get(name)
    if metric is None or metric[0] is None:
        return None
    value = metric[0]
    return value if isinstance(value, str) else str(value)


def _integral(v: float | None) -> int | None:
    if v is None or math.isinf(v):
        return None
    return round(v)


_INT_COLUMNS = {
    "sm_count",
    "grid_x",
    "grid_y",
    "grid_z",
    "grid_size",
    "block_x",
    "block_y",
    "block_z",
    "block_size",
    "registers_per_thread",
    "static_smem_bytes",
    "dynamic_smem_bytes",
    "smem_config_bytes",
    "smem_per_block_limit_bytes",
    "smem_per_sm_bytes",
    "occupancy_limit_registers",
    "occupancy_limit_shared_mem",
    "occupancy_limit_warps",
    "occupancy_limit_blocks",
}


def compute_capability(metrics: Mapping[str, Metric]) -> str | None:
    major = number(metrics.get("device__attribute_compute_capability_major"))
    minor = number(metrics.get("device__attribute_compute_capability_minor"))
    if major is None or minor is None:
        return None
    return f"{int(major)}.{int(minor)}"


def boost_clock_hz(metrics: Mapping[str, Metric]) -> float | None:
    for name in _KHZ_ATTRIBUTES:
        metric = metrics.get(name)
        v = number(metric)
        if v is not None and metric is not None:
            # No unit: CUDA's kHz. A unit (a CSV export may scale it) was already applied by number().
            return v * 1e3 if not metric[1] else v
    return None


def ncu_columns(metrics: Mapping[str, Metric]) -> dict[str, object]:
    """The named ``ncu`` columns that come from metrics (not ids, names or NVTX)."""
    row: dict[str, object] = {}
    for column, names in _SIMPLE.items():
        v, _ = first(metrics, names)
        row[column] = _integral(v) if column in _INT_COLUMNS else v
    row["device_name"] = text(metrics, "device__attribute_display_name")
    row["compute_capability"] = compute_capability(metrics)
    row["boost_clock_hz"] = boost_clock_hz(metrics)
    row["dram_bytes"] = dram_bytes(metrics)
    if row["dram_bytes_per_s"] is None:
        rd = number(metrics.get("dram__bytes_read.sum.per_second"))
        wr = number(metrics.get("dram__bytes_write.sum.per_second"))
        row["dram_bytes_per_s"] = rd + wr if rd is not None and wr is not None else None
    pct, name = first(metrics, TENSOR_PIPE_CANDIDATES)
    row["tensor_pipe_pct"] = pct
    row["tensor_pipe_metric"] = name
    return row


def dram_bytes(metrics: Mapping[str, Metric]) -> float | None:
    """``dram__bytes.sum``, else read + write. Reports with only the rate (``.per_second``) give None."""
    total = number(metrics.get("dram__bytes.sum"))
    if total is not None:
        return total
    rd = number(metrics.get("dram__bytes_read.sum"))
    wr = number(metrics.get("dram__bytes_write.sum"))
    if rd is not None and wr is not None:
        return rd + wr
    return None


def device_row(metrics: Mapping[str, Metric], ordinal: int | None) -> dict[str, object]:
    """One ``devices`` row (without source/rank) from a kernel's device attributes."""
    return {
        "device": ordinal,
        "name": text(metrics, "device__attribute_display_name"),
        "compute_capability": compute_capability(metrics),
        "sm_count": _integral(number(metrics.get("device__attribute_multiprocessor_count"))),
        "memory_bytes": _integral(number(metrics.get("device__attribute_total_memory"))),
        "smem_per_block_optin_bytes": _integral(
            number(metrics.get("device__attribute_max_shared_memory_per_block_optin"))
        ),
        "smem_per_sm_bytes": _integral(
            number(metrics.get("device__attribute_max_shared_memory_per_multiprocessor"))
        ),
        "regs_per_sm": _integral(number(metrics.get("device__attribute_max_registers_per_multiprocessor"))),
        "boost_clock_hz": boost_clock_hz(metrics),
    }


def device_ordinal(metrics: Mapping[str, Metric]) -> int | None:
    for name in ("launch__device_id", "device__attribute_device_index"):
        v = number(metrics.get(name))
        if v is not None:
            return int(v)
    return None


# --- NVTX ---------------------------------------------------------------------------------------------------

DEFAULT_DOMAIN_NAMES = ("<default domain>", "")
"""How ncu names NVTX's default domain; tracekit writes it as null (as in the ``ranges`` frame)."""


def nvtx_columns(stack: list[tuple[str | None, str]], preferred_domain: str) -> dict[str, Any]:
    """``nvtx_stack`` (a list of {domain, name}, outermost first) and ``nvtx_range`` (innermost in ``preferred_domain``, else in the
    default domain, else in any domain) from a list of (domain, range name) pairs."""
    if not stack:
        return {"nvtx_stack": None, "nvtx_range": None}
    innermost: str | None = None
    for wanted in (preferred_domain, None):
        names = [name for domain, name in stack if domain == wanted]
        if names:
            innermost = names[-1]
            break
    if innermost is None:
        innermost = stack[-1][1]
    return {
        "nvtx_stack": [{"domain": d, "name": n} for d, n in stack],
        "nvtx_range": innermost,
    }


def function_name(demangled: str) -> str:
    """A function name from a demangled signature, as ncu's function name base gives it:
    ``void cutlass::Kernel<...>(Params)`` -> ``Kernel``."""
    s = demangled.strip()
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i]
                break
    out = []
    depth = 0
    for ch in s:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip()
    s = s.rsplit(" ", 1)[-1]
    s = s.rsplit("::", 1)[-1]
    return s or demangled
