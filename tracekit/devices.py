"""The device catalog: what each GPU can do on paper, with a source for every number.

``tracekit/data/devices.json`` holds, per GPU, the SM count, clocks, memory bandwidth, L2, the dense tensor peaks
per input class (fp4, fp8, bf16/fp16, tf32, int8; fp32 is the CUDA-core rate) and, per architecture, the per-SM
limits (shared memory per SM and per block, registers, warps, blocks) and notes. A user file (``TRACEKIT_DEVICES``
or ``~/.config/tracekit/devices.json``, same layout) overrides or extends it, field by field.

Why ``peak_clock_hz`` is separate from ``boost_clock_hz``: NVIDIA quotes Hopper's tensor peaks at 1830 MHz (SXM)
although the part boosts to 1980 MHz, so the clock factor of the waterfall must compare against the clock the
peak was computed at, not the highest clock the GPU reports.

An unknown GPU still gets a spec when its compute capability is known: per-SM limits from its architecture and,
where its SM count and a clock are known, peaks derived from SM count x clock x the architecture's per-SM rate
(``provenance == "derived"``); otherwise its peaks are unknown and analyses carry on without them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import BadInputError
from tracekit.records import gpu_of

if TYPE_CHECKING:
    from tracekit.run import Run

__all__ = [
    "ArchSpec",
    "DeviceSpec",
    "arch_for",
    "candidates_line",
    "catalog",
    "devices_for_capability",
    "find_calibration",
    "load_catalog",
    "lookup_device",
    "match_device",
    "normalize_name",
]

USER_FILE_ENV = "TRACEKIT_DEVICES"
USER_FILE = Path("~/.config/tracekit/devices.json")


@dataclass(frozen=True)
class ArchSpec:
    """Per-SM facts of one architecture (``sm_90`` ...)."""

    key: str
    name: str
    compute_capability: str
    flops_per_clock_per_sm: dict[str, float]
    smem_per_sm_bytes: int | None
    smem_per_block_optin_bytes: int | None
    regs_per_sm: int | None
    max_warps_per_sm: int | None
    max_blocks_per_sm: int | None
    notes: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceSpec:
    """One GPU: datasheet numbers, the architecture's per-SM limits, and where each number came from.

    ``provenance`` is ``catalog`` (datasheet entry), ``user`` (from a user file), ``derived`` (unknown GPU,
    peaks computed from its architecture) or ``unknown`` (no peaks). ``derived`` names the fields of a catalog
    entry that are computed rather than printed in a datasheet.
    """

    key: str
    name: str
    arch: ArchSpec | None
    sm_count: int | None
    boost_clock_hz: float | None
    base_clock_hz: float | None
    peak_clock_hz: float | None
    memory_bytes: int | None
    memory_bandwidth_bytes_per_s: float | None
    l2_bytes: int | None
    tdp_w: float | None
    peaks_tflops: dict[str, float]
    sources: dict[str, str]
    derived: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    provenance: str = "catalog"

    # -- convenience ------------------------------------------------------------------------------------------
    @property
    def compute_capability(self) -> str | None:
        return self.arch.compute_capability if self.arch else None

    @property
    def smem_per_block_optin_bytes(self) -> int | None:
        return self.arch.smem_per_block_optin_bytes if self.arch else None

    @property
    def smem_per_sm_bytes(self) -> int | None:
        return self.arch.smem_per_sm_bytes if self.arch else None

    @property
    def regs_per_sm(self) -> int | None:
        return self.arch.regs_per_sm if self.arch else None

    @property
    def max_warps_per_sm(self) -> int | None:
        return self.arch.max_warps_per_sm if self.arch else None

    @property
    def notes(self) -> tuple[str, ...]:
        return self.arch.notes if self.arch else ()

    def peak_tflops(self, dtype_class: str | None) -> float | None:
        """Dense peak for an input class (``bf16``, ``fp8``, ``fp4`` ...), TFLOP/s; fp16 and bf16 stand in
        for each other where only one is listed."""
        if not dtype_class:
            return None
        value = self.peaks_tflops.get(dtype_class)
        if value is None and dtype_class in ("bf16", "fp16"):
            value = self.peaks_tflops.get("fp16" if dtype_class == "bf16" else "bf16")
        return value

    def peak_source(self, dtype_class: str | None) -> str:
        if self.provenance in ("derived", "unknown"):
            return self.provenance
        if "peaks_tflops" in self.derived:
            return "derived"
        return "datasheet"

    def ridge_flops_per_byte(self, dtype_class: str) -> float | None:
        """Arithmetic intensity at which the roofline turns from memory- to compute-bound."""
        peak = self.peak_tflops(dtype_class)
        if peak is None or not self.memory_bandwidth_bytes_per_s:
            return None
        return peak * 1e12 / self.memory_bandwidth_bytes_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "arch": self.arch.key if self.arch else None,
            "compute_capability": self.compute_capability,
            "sm_count": self.sm_count,
            "boost_clock_hz": self.boost_clock_hz,
            "peak_clock_hz": self.peak_clock_hz,
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s,
            "l2_bytes": self.l2_bytes,
            "smem_per_block_optin_bytes": self.smem_per_block_optin_bytes,
            "peaks_tflops": dict(self.peaks_tflops),
            "provenance": self.provenance,
            "derived": list(self.derived),
            "sources": dict(self.sources),
        }


# --- loading ----------------------------------------------------------------------------------------------------
def _mhz(value: Any) -> float | None:
    return float(value) * 1e6 if value is not None else None


def _arch_from(key: str, raw: dict[str, Any]) -> ArchSpec:
    return ArchSpec(
        key=key,
        name=str(raw.get("name", key)),
        compute_capability=str(raw.get("compute_capability", "")),
        flops_per_clock_per_sm={
            k: float(v) for k, v in (raw.get("flops_per_clock_per_sm") or {}).items() if v
        },
        smem_per_sm_bytes=raw.get("smem_per_sm_bytes"),
        smem_per_block_optin_bytes=raw.get("smem_per_block_optin_bytes"),
        regs_per_sm=raw.get("regs_per_sm"),
        max_warps_per_sm=raw.get("max_warps_per_sm"),
        max_blocks_per_sm=raw.get("max_blocks_per_sm"),
        notes=tuple(raw.get("notes") or ()),
        sources=dict(raw.get("sources") or {}),
    )


def _device_from(key: str, raw: dict[str, Any], archs: dict[str, ArchSpec], provenance: str) -> DeviceSpec:
    bw = raw.get("memory_bandwidth_gb_s")
    return DeviceSpec(
        key=key,
        name=str(raw.get("name", key)),
        arch=archs.get(str(raw.get("arch"))),
        sm_count=raw.get("sm_count"),
        boost_clock_hz=_mhz(raw.get("boost_clock_mhz")),
        base_clock_hz=_mhz(raw.get("base_clock_mhz")),
        peak_clock_hz=_mhz(raw.get("peak_clock_mhz") or raw.get("boost_clock_mhz")),
        memory_bytes=raw.get("memory_bytes"),
        memory_bandwidth_bytes_per_s=float(bw) * 1e9 if bw else None,
        l2_bytes=raw.get("l2_bytes"),
        tdp_w=raw.get("tdp_w"),
        peaks_tflops={k: float(v) for k, v in (raw.get("peaks_tflops") or {}).items() if v is not None},
        sources=dict(raw.get("sources") or {}),
        derived=tuple(raw.get("derived") or ()),
        aliases=tuple(normalize_name(a) for a in (raw.get("aliases") or ())),
        provenance=provenance,
    )


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _user_file() -> Path | None:
    env = os.environ.get(USER_FILE_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise BadInputError(
                f"{USER_FILE_ENV}={env} does not name a file",
                "point it at a devices.json (same layout as tracekit/data/devices.json) or unset it",
            )
        return path
    path = USER_FILE.expanduser()
    return path if path.is_file() else None


def load_catalog(user_file: Path | None = None) -> tuple[dict[str, ArchSpec], dict[str, DeviceSpec]]:
    """Architectures and devices: the packaged catalog, then ``user_file`` (or the user's default) on top."""
    raw = json.loads(resources.files("tracekit").joinpath("data/devices.json").read_text())
    user_keys: set[str] = set()
    path = user_file if user_file is not None else _user_file()
    if path is not None:
        try:
            user = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise BadInputError(
                f"device file {path} cannot be read ({exc})", "fix the JSON or remove the file"
            ) from exc
        if not isinstance(user, dict):
            raise BadInputError(f"device file {path} is not a JSON object", "see tracekit/data/devices.json")
        user_keys = set((user.get("devices") or {}).keys())
        raw = _merge(raw, {k: user[k] for k in ("architectures", "devices") if k in user})
    archs = {k: _arch_from(k, v) for k, v in raw["architectures"].items()}
    devices = {
        k: _device_from(k, v, archs, "user" if k in user_keys else "catalog")
        for k, v in raw["devices"].items()
    }
    return archs, devices


@lru_cache(maxsize=4)
def _cached(user: str | None, mtime: float | None) -> tuple[dict[str, ArchSpec], dict[str, DeviceSpec]]:
    return load_catalog(Path(user) if user else None)


def catalog() -> tuple[dict[str, ArchSpec], dict[str, DeviceSpec]]:
    """The catalog in effect (cached per user file and its modification time)."""
    path = _user_file()
    return _cached(str(path) if path else None, path.stat().st_mtime if path else None)


# --- matching ---------------------------------------------------------------------------------------------------
def normalize_name(name: str) -> str:
    """``"NVIDIA A100-SXM4-80GB"`` -> ``"a100 sxm4 80gb"``: lower case, no vendor word, single spaces."""
    text = name.lower().replace("_", " ").replace("-", " ")
    text = re.sub(r"\(.*?\)", " ", text)
    text = re.sub(r"\bnvidia\b", " ", text)
    return " ".join(text.split())


def arch_for(compute_capability: str | None) -> ArchSpec | None:
    """The architecture of a compute capability ("9.0" -> sm_90); None when not in the catalog."""
    if not compute_capability:
        return None
    archs, _ = catalog()
    cc = str(compute_capability).strip()
    for arch in archs.values():
        if arch.compute_capability == cc:
            return arch
    try:
        major, minor = (int(x) for x in cc.split(".")[:2])
    except ValueError:
        return None
    # Family fallback: 12.1 behaves like 12.0, 10.3 like 10.0, 8.7 like 8.6; never upwards (7.0 is not 7.5).
    same = []
    for a in archs.values():
        a_major, a_minor = (int(x) for x in a.compute_capability.split("."))
        if a_major == major and a_minor <= minor:
            same.append((a_minor, a))
    return max(same, key=lambda t: t[0])[1] if same else None


def _score(alias: str, norm: str) -> int:
    if alias == norm:
        return 10_000
    if re.search(rf"(^| ){re.escape(alias)}( |$)", norm):
        return len(alias)
    return 0


def match_device(
    name: str | None,
    compute_capability: str | None = None,
    sm_count: int | None = None,
    *,
    clock_hz: float | None = None,
) -> DeviceSpec | None:
    """The catalog entry for a GPU as tools name it ("NVIDIA H200", "NVIDIA H100 80GB HBM3", ...).

    Names are matched on whole words, longest alias first; SM count breaks ties and rejects a match that
    contradicts it (an H100 name with 114 SMs is the PCIe part). An unknown GPU with a known compute capability
    gets a derived spec (peaks from SM count x ``clock_hz`` x its architecture's per-SM rate, or none when those
    are unknown); with neither a match nor a compute capability the answer is None.
    """
    _, devices = catalog()
    norm = normalize_name(name or "")
    best: tuple[int, DeviceSpec] | None = None
    if norm:
        for dev in devices.values():
            score = max([_score(a, norm) for a in (*dev.aliases, normalize_name(dev.name))] or [0])
            if score == 0:
                continue
            if sm_count and dev.sm_count and dev.sm_count != sm_count:
                score -= (
                    5_000 if score >= 10_000 else score
                )  # a contradicting SM count loses to any other match
                if score <= 0:
                    continue
            elif sm_count and dev.sm_count == sm_count:
                score += 1
            if best is None or score > best[0]:
                best = (score, dev)
    if best is not None:
        return best[1]
    arch = arch_for(compute_capability)
    if arch is None:
        return None
    return derived_device(name or f"unknown sm_{compute_capability}", arch, sm_count, clock_hz)


def devices_for_capability(compute_capability: str | None) -> list[DeviceSpec]:
    """The catalog GPUs a compute capability may be (``"12.0"`` -> RTX PRO 6000 Blackwell, RTX 5090), for files
    that name only the architecture (Nsight Compute CSV exports); [] when the capability is unknown."""
    arch = arch_for(compute_capability)
    if arch is None:
        return []
    _, devices = catalog()
    return [d for d in devices.values() if d.arch is not None and d.arch.key == arch.key]


def candidates_line(compute_capability: str | None) -> str | None:
    """One line naming the catalog GPUs of a compute capability and how to pick one, e.g. ``"sm_12.0: RTX PRO
    6000 Blackwell (rtx-pro-6000), GeForce RTX 5090 (rtx-5090); give --device NAME"``; None when none match."""
    found = devices_for_capability(compute_capability)
    if not found:
        return None
    names = ", ".join(f"{d.name.removeprefix('NVIDIA ')} ({d.key})" for d in found)
    return (
        f"sm_{compute_capability}: the report names no GPU; the catalog has {names}; "
        f"give --device NAME for their peaks"
    )


def lookup_device(name: str) -> DeviceSpec:
    """The catalog GPU a user names (``--device``): its key or one of its aliases, any case, ``-`` / ``_`` /
    space alike (``rtx-pro-6000``, ``"RTX PRO 6000 Blackwell"``, ``H200``). Anything else raises BadInputError
    (exit 2) listing the closest names."""
    import difflib

    _, devices = catalog()
    norm = normalize_name(name)
    names: dict[str, DeviceSpec] = {}
    for dev in devices.values():
        for alias in (dev.key, dev.name, *dev.aliases):
            names.setdefault(normalize_name(alias), dev)
    if norm and norm in names:
        return names[norm]
    keys = {normalize_name(d.key): d.key for d in devices.values()}
    close = difflib.get_close_matches(norm, list(names), n=8, cutoff=0.5)
    close += [a for a in names if norm and (norm in a or a in norm)]
    picked: list[str] = []
    for alias in close:
        key = names[alias].key
        if key not in picked:
            picked.append(key)
    hint = (
        f"close matches: {', '.join(picked[:5])}"
        if picked
        else f"catalog keys: {', '.join(sorted(keys.values()))}"
    )
    raise BadInputError(
        f"unknown device {name!r} for --device; {hint}",
        "give a catalog key or alias (tracekit/data/devices.json), e.g. --device rtx-pro-6000",
    )


def derived_device(name: str, arch: ArchSpec, sm_count: int | None, clock_hz: float | None) -> DeviceSpec:
    """A spec for a GPU missing from the catalog, from its architecture's per-SM rates."""
    peaks: dict[str, float] = {}
    if sm_count and clock_hz:
        peaks = {k: v * sm_count * clock_hz / 1e12 for k, v in arch.flops_per_clock_per_sm.items()}
    source = (
        f"derived: {sm_count} SMs x {clock_hz / 1e6:.0f} MHz x {arch.key} per-SM rate"
        if peaks and clock_hz
        else "unknown: SM count or clock missing"
    )
    return DeviceSpec(
        key=normalize_name(name).replace(" ", "-") or arch.key,
        name=name,
        arch=arch,
        sm_count=sm_count,
        boost_clock_hz=clock_hz,
        base_clock_hz=None,
        peak_clock_hz=clock_hz,
        memory_bytes=None,
        memory_bandwidth_bytes_per_s=None,
        l2_bytes=None,
        tdp_w=None,
        peaks_tflops=peaks,
        sources={"peaks_tflops": source},
        derived=("peaks_tflops",) if peaks else (),
        provenance="derived" if peaks else "unknown",
    )


# --- calibration profiles -----------------------------------------------------------------------------------------
CALIBRATION_DIR = Path("~/.cache/tracekit/calibration")
CALIBRATION_FORMAT = "tracekit-calibration"


def calibration_path(gpu_name: str) -> Path:
    """Where ``tracekit calibrate`` saves the profile of a GPU by default."""
    slug = normalize_name(gpu_name).replace(" ", "-") or "gpu"
    return CALIBRATION_DIR.expanduser() / f"{slug}.json"


def load_calibration(path: Path | str) -> dict[str, Any]:
    """A calibration profile written by ``tracekit calibrate`` (``{"format", "device", "gemm": {class:
    {"sustained_tflops", ...}}, "copy": {...}}``)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInputError(
            f"calibration file {path} cannot be read ({exc})",
            "re-run `tracekit calibrate -o FILE` on the GPU",
        ) from exc
    if not isinstance(data, dict) or data.get("format") != CALIBRATION_FORMAT:
        raise BadInputError(
            f"{path} is not a tracekit calibration profile", "make one with `tracekit calibrate -o FILE`"
        )
    return data


def find_calibration(
    run: Run, frames: Mapping[str, Any], explicit: Path | str | None = None
) -> tuple[dict[str, Any] | None, str | None]:
    """The calibration profile to use for ``run`` and where it came from (as shown to the user), or (None, None).

    In order: ``explicit`` (``--calibration FILE``), the profile the run carries (``raw/calibration.json``,
    written by ``tracekit calibrate`` into a capture), else the cached one for the run's GPU
    (:func:`calibration_path` of the name its ``devices`` frame gives, then the name run.json records). Shared
    by ``explain``, ``report`` and the TUI so they measure against the same peak. A profile that cannot be read
    raises :class:`BadInputError`; a viewer may carry on without it."""
    if explicit is not None:
        return load_calibration(explicit), str(explicit)
    carried = run.raw_dir / "calibration.json"
    if carried.is_file():
        return load_calibration(carried), run.relative(carried)
    names: list[str] = []
    devices = frames.get("devices")
    if devices is not None and devices.height and "name" in devices.columns:
        names += [str(n) for n in devices["name"].drop_nulls().to_list()[:1]]
    name = gpu_of(run.manifest.get("environment")).name
    if name:
        names.append(name)
    for name in names:
        cached = calibration_path(name)
        if cached.is_file():
            return load_calibration(cached), str(cached)
    return None, None
