"""Clock: the SM clock a GEMM ran at against the clock its datasheet peak is quoted at."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import NO_LOSS, Factor, Rule, factor

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import CaseEvidence

# NVML clocks-event (throttle) reasons, nvmlClocksEventReason* in nvml.h.
THROTTLE_REASONS: dict[int, str] = {
    0x1: "GPU idle",
    0x2: "applications clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}
POWER_NEAR_LIMIT = 0.97
"""Board power at or above this fraction of the enforced limit counts as running at the power cap."""


def throttle_names(mask: int | None) -> list[str]:
    """The NVML throttle reasons set in ``mask`` (idle excluded: it is not a cause under load)."""
    if not mask:
        return []
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit and bit != 0x1]


def clock_cap(case: CaseEvidence) -> str | None:
    """What held the clock down, when NVML or the power reading says so."""
    c = case.clock
    names = throttle_names(c.throttle_reasons)
    caps = [n for n in names if "power" in n or "thermal" in n or "slowdown" in n]
    if caps:
        return " and ".join(caps)
    if c.power_w and c.power_limit_w and c.power_w >= POWER_NEAR_LIMIT * c.power_limit_w:
        return "power cap"
    return None


LOCKED = "clocks locked (Nsight Compute's default --clock-control base, or an application clock)"
"""What a report's fixed clock well below boost is called: not a power or thermal limit."""
LOCKED_REMEDY = (
    "Capture with `--clock-control none` (`tracekit capture --ncu --clock-control none`, or ncu's own flag) to "
    "see the clocks the application sees; the numbers of this report are at the locked clock."
)


def locked(case: CaseEvidence) -> str | None:
    """Why the case's clock counts as locked (its report ran every kernel at one fixed clock well below boost,
    or says ``--clock-control base``), else None; never for a report taken with ``--clock-control none``."""
    if (
        case.ncu is not None
        and case.ncu.clock_locked
        and case.clock.source
        and case.clock.source.startswith("ncu")
    ):
        return case.ncu.clock_locked
    dev = case.device
    src = case.clock.source or ""
    if "clock control base" in src:
        return "the report was taken with --clock-control base"
    if (
        src.startswith("ncu")
        and "clock control none" not in src
        and dev is not None
        and dev.base_clock_hz
        and case.clock.sm_clock_hz
        and abs(case.clock.sm_clock_hz / dev.base_clock_hz - 1) < 0.05
    ):
        return f"{case.clock.sm_clock_hz / 1e6:.0f} MHz is the GPU's base clock"
    return None


def clock(case: CaseEvidence) -> Factor | None:
    """``achieved clock / peak clock`` (at most 1); None when the clock was not measured."""
    dev = case.device
    c = case.clock
    if dev is None or not dev.peak_clock_hz or not c.sm_clock_hz:
        return None
    ratio = c.sm_clock_hz / dev.peak_clock_hz
    value = min(1.0, ratio)
    mhz, peak_mhz = c.sm_clock_hz / 1e6, dev.peak_clock_hz / 1e6
    evidence: dict[str, object] = {
        "sm_clock_hz": c.sm_clock_hz,
        "clock_source": c.source,
        "peak_clock_hz": dev.peak_clock_hz,
        "boost_clock_hz": dev.boost_clock_hz,
    }
    if c.power_w is not None:
        evidence["power_w"] = c.power_w
        evidence["power_limit_w"] = c.power_limit_w
    if c.throttle_reasons is not None:
        evidence["throttle_reasons"] = hex(c.throttle_reasons)
        evidence["throttle_reason_names"] = throttle_names(c.throttle_reasons)
    peak_note = ""
    if dev.boost_clock_hz and abs(dev.boost_clock_hz - dev.peak_clock_hz) > 1e6:
        peak_note = f" (the GPU's maximum is {dev.boost_clock_hz / 1e6:.0f} MHz)"
    cap = clock_cap(case)
    why_locked = locked(case) if value < 1.0 else None
    sentence = (
        f"The SM clock averaged {mhz:.0f} MHz, {100 * ratio:.0f}% of the {peak_mhz:.0f} MHz the datasheet peak "
        f"is quoted at{peak_note}"
    )
    remedy: str | None
    cause = None
    if cap:
        power = ""
        if c.power_w and c.power_limit_w:
            power = f" at {c.power_w:.0f} W of a {c.power_limit_w:.0f} W limit"
        sentence += f"; NVML names the {cap}{power}."
        remedy = (
            "The clock is power/thermal-capped under sustained load: compare against the calibrated sustained "
            "peak (tracekit calibrate), raise the power limit or improve cooling if allowed, or cut energy per "
            "FLOP (FP8 instead of BF16, fewer bytes moved)."
        )
    elif why_locked:
        sentence += f"; {LOCKED}: {why_locked}."
        evidence["clocks_locked"] = why_locked
        cause = "clocks locked"
        remedy = LOCKED_REMEDY
    else:
        sentence += "."
        remedy = "Check power draw and throttle reasons (nvidia-smi -q -d PERFORMANCE) during the run."
    return factor("clock", value, sentence, evidence, remedy if value < NO_LOSS else None, cause)


RULE = Rule(
    name="clock",
    factor="clock",
    reads=("clock", "device", "ncu"),
    acts_on="kernel",
    needs_rate=False,
    run=lambda case, _: clock(case),
    cause="SM clock below the clock the datasheet peak is quoted at (power / thermal cap, ncu lock)",
)
