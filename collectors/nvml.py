"""NVML sampling beside each timing: SM clock, board power, power limit, temperature and clock-event reasons.

The plateau explainer needs to know whether a GEMM ran at a capped clock (DEVICE.md: a sustained bf16 loop on
the H200 settles near 1470 MHz at 691 W of a 700 W cap, reason 0x4 = software power cap), so every measurement
carries what NVML saw while it ran. ``nvidia-ml-py`` (module ``pynvml``) is imported lazily; without it, or
without a driver, every value is None.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class NvmlSample:
    """What NVML reported over one timing window (means; reasons OR-ed). None where unknown."""

    sm_clock_hz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    throttle_reasons: int | None = None
    samples: int = 0

    def as_columns(self) -> dict[str, Any]:
        return {
            "sm_clock_hz": self.sm_clock_hz,
            "power_w": self.power_w,
            "power_limit_w": self.power_limit_w,
            "temperature_c": self.temperature_c,
            "throttle_reasons": self.throttle_reasons,
        }


class Nvml:
    """An NVML handle for one GPU, or an inert object when NVML is unavailable (``ok`` False, ``reason`` why)."""

    def __init__(self, *, index: int = 0, uuid: str | None = None, pci_bus_id: str | None = None) -> None:
        self.ok = False
        self.reason = ""
        self._nv: Any = None
        self._h: Any = None
        try:
            import pynvml as nv
        except Exception as exc:  # ImportError, or a broken install
            self.reason = f"nvidia-ml-py not importable ({exc}); pip install nvidia-ml-py"
            return
        try:
            nv.nvmlInit()
        except Exception as exc:
            self.reason = f"nvmlInit failed: {exc}"
            return
        self._nv = nv
        handle = None
        for how, arg in (("uuid", uuid), ("pci", pci_bus_id), ("index", index)):
            if arg is None:
                continue
            try:
                if how == "uuid":
                    handle = nv.nvmlDeviceGetHandleByUUID(
                        arg if str(arg).startswith("GPU-") else f"GPU-{arg}"
                    )
                elif how == "pci":
                    handle = nv.nvmlDeviceGetHandleByPciBusId(arg)
                else:
                    handle = nv.nvmlDeviceGetHandleByIndex(int(arg))
                break
            except Exception:
                continue
        if handle is None:
            self.reason = "no NVML device matches the CUDA device"
            return
        self._h = handle
        self.ok = True

    def _call(self, name: str, *args: Any) -> Any:
        fn = getattr(self._nv, name, None)
        if fn is None:
            return None
        try:
            return fn(self._h, *args)
        except Exception:
            return None

    def read(self) -> dict[str, Any]:
        """One instantaneous reading (MHz / mW / C / bitmask as NVML gives them, converted to Hz / W / C)."""
        if not self.ok:
            return {}
        nv = self._nv
        out: dict[str, Any] = {}
        clock = self._call("nvmlDeviceGetClockInfo", getattr(nv, "NVML_CLOCK_SM", 1))
        if clock is not None:
            out["sm_clock_hz"] = float(clock) * 1e6
        power = self._call("nvmlDeviceGetPowerUsage")
        if power is not None:
            out["power_w"] = float(power) / 1000.0
        limit = self._call("nvmlDeviceGetEnforcedPowerLimit")
        if limit is not None:
            out["power_limit_w"] = float(limit) / 1000.0
        temp = self._call("nvmlDeviceGetTemperature", getattr(nv, "NVML_TEMPERATURE_GPU", 0))
        if temp is not None:
            out["temperature_c"] = float(temp)
        reasons = self._call("nvmlDeviceGetCurrentClocksEventReasons")
        if reasons is None:
            reasons = self._call("nvmlDeviceGetCurrentClocksThrottleReasons")
        if reasons is not None:
            out["throttle_reasons"] = int(reasons)
        return out

    def static(self) -> dict[str, Any]:
        """Driver version, max SM clock and default power limit, for the run's environment."""
        if not self.ok:
            return {}
        nv = self._nv
        out: dict[str, Any] = {}
        try:
            drv = nv.nvmlSystemGetDriverVersion()
            out["driver"] = drv.decode() if isinstance(drv, bytes) else str(drv)
        except Exception:
            pass
        mx = self._call("nvmlDeviceGetMaxClockInfo", getattr(nv, "NVML_CLOCK_SM", 1))
        if mx is not None:
            out["max_sm_clock_hz"] = float(mx) * 1e6
        lim = self._call("nvmlDeviceGetPowerManagementDefaultLimit")
        if lim is not None:
            out["default_power_limit_w"] = float(lim) / 1000.0
        return out


@dataclass
class Sampler:
    """Samples NVML in a background thread between :meth:`start` and :meth:`stop` (at least twice)."""

    nvml: Nvml
    interval_s: float = 0.005
    _rows: list[dict[str, Any]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._rows = []
        if not self.nvml.ok:
            return
        self._stop.clear()
        self._rows.append(self.nvml.read())
        self._thread = threading.Thread(target=self._loop, name="tracekit-nvml", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._rows.append(self.nvml.read())

    def stop(self) -> NvmlSample:
        if not self.nvml.ok:
            return NvmlSample()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None
        self._rows.append(self.nvml.read())
        return summarize(self._rows)

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.result = self.stop()


def summarize(rows: list[dict[str, Any]]) -> NvmlSample:
    """Means of the numeric readings and the OR of every clock-event reasons bitmask."""

    def mean(key: str) -> float | None:
        vals = [r[key] for r in rows if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    reasons = [r["throttle_reasons"] for r in rows if r.get("throttle_reasons") is not None]
    acc = 0
    for r in reasons:
        acc |= int(r)
    return NvmlSample(
        sm_clock_hz=mean("sm_clock_hz"),
        power_w=mean("power_w"),
        power_limit_w=mean("power_limit_w"),
        temperature_c=mean("temperature_c"),
        throttle_reasons=acc if reasons else None,
        samples=len(rows),
    )


def now() -> float:
    return time.time()
