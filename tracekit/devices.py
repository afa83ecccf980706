"""The device catalog: what each GPU can do on paper, with a source for every number.

``tracekit/data/devices.json`` holds, per GPU, the SM (or CU) count, clocks, memory size and bandwidth, L2, the dense
peaks per input class (fp4, fp6, fp8, int8, bf16/fp16, tf32, fp32, fp64) and, per architecture, the per-SM limits
(shared memory per SM and per block, registers, warps, blocks) and notes. Each entry names its sources; ``derived``
lists the figures computed rather than printed there and ``unverified`` those no vendor document was found for (or
whose sources disagree). docs/DEVICES.md is generated from it (``tracekit devices --markdown``). A user file
(``TRACEKIT_DEVICES`` or ``~/.config/tracekit/devices.json``, same layout) overrides or extends it, field by field.

Why ``peak_clock_hz`` is separate from ``boost_clock_hz``: NVIDIA quotes Hopper's tensor peaks at 1830 MHz (SXM)
although the part boosts to 1980 MHz, so the clock factor of the waterfall must compare against the clock the
peak was computed at, not the highest clock the GPU reports.

A GPU is matched by the name its tools give (:mod:`tracekit.device_names`), checked against the SM count, compute
capability and memory size the files report. A GPU the catalog does not know, or a name that fits several entries,
gets no peak: never one guessed from a similar part or from the architecture's per-SM rate, which differs between
parts of one architecture (GeForce halves FP32-accumulate math, the H20 is capped far below its SM count). It keeps
its architecture's per-SM limits where the compute capability gives them, and the catalog entries it may be.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.device_names import is_amd_name, match_alias, memory_fits, normalize_name
from tracekit.errors import BadInputError
from tracekit.records import gpu_of

if TYPE_CHECKING:
    from tracekit.run import Run

__all__ = [
    "ArchSpec",
    "DeviceSpec",
    "Resolution",
    "arch_for",
    "candidates_line",
    "catalog",
    "devices_for_capability",
    "find_calibration",
    "load_catalog",
    "lookup_device",
    "match_device",
    "normalize_name",
    "peak_note",
    "resolve",
]

USER_FILE_ENV = "TRACEKIT_DEVICES"
USER_FILE = Path("~/.config/tracekit/devices.json")
LISTING_HINT = "`tracekit devices` lists the catalog"
NOT_IN_CATALOG = "not in the device catalog"


@dataclass(frozen=True)
class ArchSpec:
    """Per-SM facts of one architecture (``sm_90`` ..., or an AMD CDNA generation, per CU)."""

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
    vendor: str = "nvidia"
    gfx: str | None = None


@dataclass(frozen=True)
class DeviceSpec:
    """One GPU: datasheet numbers, the architecture's per-SM limits, and where each number came from.

    ``provenance`` is ``catalog`` (datasheet entry), ``user`` (from a user file) or ``unknown`` (a GPU the catalog
    does not know: no peaks; ``candidates`` are the catalog keys it may be, ``reason`` why none was taken).
    ``derived`` names the fields (``peaks_tflops`` or ``peaks_tflops.bf16``) computed rather than printed in the
    source, ``unverified`` those no vendor document was found for (or whose sources disagree).
    """

    key: str
    name: str
    arch: ArchSpec | None
    sm_count: int | None
    boost_clock_hz: float | None
    base_clock_hz: float | None
    peak_clock_hz: float | None
    memory_gb: tuple[float, ...]
    memory_bandwidth_bytes_per_s: float | None
    l2_bytes: int | None
    tdp_w: float | None
    peaks_tflops: dict[str, float]
    sources: dict[str, str]
    derived: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    provenance: str = "catalog"
    half_rate: tuple[str, ...] = ()
    rate_exceptions: dict[str, str] = field(default_factory=dict)
    unverified: tuple[str, ...] = ()
    candidates: tuple[str, ...] = ()
    reason: str = ""

    # -- convenience ------------------------------------------------------------------------------------------
    @property
    def compute_capability(self) -> str | None:
        return self.arch.compute_capability if self.arch else None

    @property
    def vendor(self) -> str | None:
        return self.arch.vendor if self.arch else None

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
        """Dense peak for an input class (``bf16``, ``fp8``, ``fp4`` ...), TFLOP/s; fp16 and bf16 stand in for each
        other where only one is listed and the architecture has both (Volta and Turing have no BF16 math)."""
        if not dtype_class:
            return None
        value = self.peaks_tflops.get(dtype_class)
        if value is None and dtype_class in ("bf16", "fp16"):
            other = "fp16" if dtype_class == "bf16" else "bf16"
            rates = self.arch.flops_per_clock_per_sm if self.arch else {}
            if not rates or dtype_class in rates:
                value = self.peaks_tflops.get(other)
        return value

    def peak_source(self, dtype_class: str | None) -> str:
        """``datasheet``, ``derived`` (computed from the datasheet's other figures or SM count x clock x per-SM
        rate: see the entry's sources) or ``unknown``."""
        if self.provenance == "unknown":
            return "unknown"
        if "peaks_tflops" in self.derived or f"peaks_tflops.{dtype_class}" in self.derived:
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
            "vendor": self.vendor,
            "arch": self.arch.key if self.arch else None,
            "compute_capability": self.compute_capability,
            "sm_count": self.sm_count,
            "boost_clock_hz": self.boost_clock_hz,
            "peak_clock_hz": self.peak_clock_hz,
            "memory_gb": list(self.memory_gb),
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s,
            "l2_bytes": self.l2_bytes,
            "smem_per_sm_bytes": self.smem_per_sm_bytes,
            "smem_per_block_optin_bytes": self.smem_per_block_optin_bytes,
            "tdp_w": self.tdp_w,
            "peaks_tflops": dict(self.peaks_tflops),
            "half_rate": list(self.half_rate),
            "provenance": self.provenance,
            "derived": list(self.derived),
            "unverified": list(self.unverified),
            "aliases": list(self.aliases),
            "sources": dict(self.sources),
            **(
                {"candidates": list(self.candidates), "reason": self.reason}
                if self.provenance == "unknown"
                else {}
            ),
        }


@dataclass(frozen=True)
class Resolution:
    """What a GPU name resolves to: the one catalog entry that fits, or none with the entries it may be and why."""

    device: DeviceSpec | None
    candidates: tuple[DeviceSpec, ...] = ()
    reason: str = ""


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
        vendor=str(raw.get("vendor") or "nvidia"),
        gfx=raw.get("gfx"),
    )


def _memory_gb(raw: dict[str, Any]) -> tuple[float, ...]:
    """``memory_gb`` (a size or a list of the sizes a part ships in); older user files give ``memory_bytes``."""
    gb = raw.get("memory_gb")
    if gb is None and raw.get("memory_bytes"):
        gb = raw["memory_bytes"] / 2**30
    if gb is None:
        return ()
    return tuple(float(g) for g in (gb if isinstance(gb, list) else [gb]))


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
        memory_gb=_memory_gb(raw),
        memory_bandwidth_bytes_per_s=float(bw) * 1e9 if bw else None,
        l2_bytes=raw.get("l2_bytes"),
        tdp_w=raw.get("tdp_w"),
        peaks_tflops={k: float(v) for k, v in (raw.get("peaks_tflops") or {}).items() if v is not None},
        sources=dict(raw.get("sources") or {}),
        derived=tuple(raw.get("derived") or ()),
        aliases=tuple(normalize_name(a) for a in (raw.get("aliases") or ())),
        provenance=provenance,
        half_rate=tuple(raw.get("half_rate") or ()),
        rate_exceptions=dict(raw.get("rate_exceptions") or {}),
        unverified=tuple(raw.get("unverified") or ()),
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


def load_catalog(
    user_file: Path | None = None, *, packaged_only: bool = False
) -> tuple[dict[str, ArchSpec], dict[str, DeviceSpec]]:
    """Architectures and devices: the packaged catalog, then ``user_file`` (or the user's default) on top, unless
    ``packaged_only``."""
    raw = json.loads(resources.files("tracekit").joinpath("data/devices.json").read_text())
    user_keys: set[str] = set()
    path = None if packaged_only else user_file if user_file is not None else _user_file()
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
def arch_for(compute_capability: str | None, vendor: str = "nvidia") -> ArchSpec | None:
    """The NVIDIA architecture of a compute capability ("9.0" -> sm_90); None when not in the catalog.

    Only NVIDIA's: HIP reports an AMD GPU's GFXIP version in the same fields (9.0 for gfx90a, but also for
    gfx906 and gfx908), so an AMD architecture comes from its gfx name instead (:func:`_amd_arch`)."""
    if not compute_capability or vendor != "nvidia":
        return None
    archs, _ = catalog()
    nvidia = [a for a in archs.values() if a.vendor == "nvidia"]
    cc = str(compute_capability).strip()
    for arch in nvidia:
        if arch.compute_capability == cc:
            return arch
    try:
        major, minor = (int(x) for x in cc.split(".")[:2])
    except ValueError:
        return None
    # Family fallback: 12.1 behaves like 12.0, 10.3 like 10.0; never upwards (7.0 is not 7.5).
    same = []
    for a in nvidia:
        a_major, a_minor = (int(x) for x in a.compute_capability.split("."))
        if a_major == major and a_minor <= minor:
            same.append((a_minor, a))
    return max(same, key=lambda t: t[0])[1] if same else None


def _amd_arch(words: list[str]) -> ArchSpec | None:
    """The AMD architecture a ``gfx`` word of the name gives (``gfx942:sramecc+`` -> CDNA 3)."""
    archs, _ = catalog()
    for arch in archs.values():
        if arch.gfx and arch.gfx in words:
            return arch
    return None


def _same_cc(reported: str, arch: ArchSpec) -> bool:
    return str(reported).strip() == arch.compute_capability


def _contradiction(
    dev: DeviceSpec, compute_capability: str | None, sm_count: int | None, memory_bytes: int | None
) -> str | None:
    """Why the facts a file reports rule out a catalog entry its name fits (a MIG slice, a variant), else None."""
    if sm_count and dev.sm_count and int(sm_count) != dev.sm_count:
        return f"the file reports {sm_count} SMs, the catalog's {dev.name} has {dev.sm_count}"
    if compute_capability and dev.arch and not _same_cc(compute_capability, dev.arch):
        return (
            f"the file reports compute capability {compute_capability}, the catalog's {dev.name} "
            f"is {dev.arch.compute_capability}"
        )
    if memory_bytes and dev.memory_gb and not memory_fits(dev.memory_gb, memory_bytes / 2**30):
        return (
            f"the file reports {memory_bytes / 2**30:.0f} GiB, the catalog's {dev.name} has "
            f"{' or '.join(f'{g:g}' for g in dev.memory_gb)} GB"
        )
    return None


def _hardware_candidates(
    amd: bool, compute_capability: str | None, sm_count: int | None, memory_bytes: int | None
) -> tuple[DeviceSpec, ...]:
    """Catalog entries of the vendor whose SM count (and compute capability, memory) equal what a file reports."""
    if not sm_count:
        return ()
    _, devices = catalog()
    return tuple(
        d
        for d in devices.values()
        if d.arch is not None
        and (d.arch.vendor == "amd") == amd
        and d.sm_count == int(sm_count)
        and _contradiction(d, compute_capability, sm_count, memory_bytes) is None
    )


def resolve(
    name: str | None,
    compute_capability: str | None = None,
    sm_count: int | None = None,
    memory_bytes: int | None = None,
) -> Resolution:
    """The catalog entry of a GPU as its tools name it, checked against what the file reports.

    The name must fit an alias (:func:`tracekit.device_names.match_alias`); among the entries it fits, those the
    reported SM count, compute capability or memory size contradict drop out, and the most specific alias wins.
    No winner, or a tie (``"AMD Instinct MI250X / MI250"`` without a CU count), is no device: ``candidates`` then
    holds the entries it may be (those it fits, else those with its SM count) and ``reason`` says why."""
    words = normalize_name(name or "").split()
    if not words:
        return Resolution(None, (), "no GPU name")
    _, devices = catalog()
    fits: dict[str, tuple[int, DeviceSpec]] = {}
    ruled_out: list[str] = []
    for dev in devices.values():
        best = None
        for alias in (*dev.aliases, normalize_name(dev.name)):
            m = match_alias(alias.split(), words)
            if m is None or (dev.memory_gb and not all(memory_fits(dev.memory_gb, g) for g in m.memory_gb)):
                continue
            best = max(best or 0, m.score)
        if best is None:
            continue
        why = _contradiction(dev, compute_capability, sm_count, memory_bytes)
        if why:
            ruled_out.append(why)
            continue
        fits[dev.key] = (best, dev)
    if fits:
        top = max(score for score, _ in fits.values())
        winners = tuple(d for score, d in fits.values() if score == top)
        if len(winners) == 1:
            return Resolution(winners[0])
        keys = ", ".join(d.key for d in winners)
        return Resolution(None, winners, f"the name fits {keys} alike and the file does not tell them apart")
    amd = is_amd_name(words)
    candidates = _hardware_candidates(amd, compute_capability, sm_count, memory_bytes)
    reason = "; ".join(ruled_out) if ruled_out else NOT_IN_CATALOG
    return Resolution(None, candidates, reason)


def match_device(
    name: str | None,
    compute_capability: str | None = None,
    sm_count: int | None = None,
    *,
    clock_hz: float | None = None,
    memory_bytes: int | None = None,
) -> DeviceSpec | None:
    """The catalog entry for a GPU as tools name it ("NVIDIA H200", "NVIDIA H100 80GB HBM3", ...): see
    :func:`resolve`. A GPU it does not resolve gets an ``unknown`` spec: no peaks, its architecture's per-SM limits
    where the compute capability (NVIDIA) or a gfx name (AMD) gives them, the SM count and ``clock_hz`` the file
    reports, and the catalog entries it may be. None when there is neither a name nor a compute capability."""
    found = resolve(name, compute_capability, sm_count, memory_bytes)
    if found.device is not None:
        return found.device
    if not name and not compute_capability:
        return None
    words = normalize_name(name or "").split()
    amd = is_amd_name(words)
    arch = _amd_arch(words) if amd else arch_for(compute_capability)
    candidates = found.candidates if words else tuple(devices_for_capability(compute_capability))
    return unknown_device(
        name or f"unknown GPU (compute capability {compute_capability})",
        arch,
        sm_count,
        clock_hz,
        tuple(d.key for d in candidates),
        found.reason,
    )


def unknown_device(
    name: str,
    arch: ArchSpec | None,
    sm_count: int | None,
    clock_hz: float | None,
    candidates: tuple[str, ...] = (),
    reason: str = "",
) -> DeviceSpec:
    """A GPU the catalog does not resolve: what its files report (SM count, clock) and its architecture's limits,
    never a peak (see the module docstring)."""
    return DeviceSpec(
        key=normalize_name(name).replace(" ", "-") or (arch.key if arch else "unknown"),
        name=name,
        arch=arch,
        sm_count=sm_count,
        boost_clock_hz=clock_hz,
        base_clock_hz=None,
        peak_clock_hz=None,
        memory_gb=(),
        memory_bandwidth_bytes_per_s=None,
        l2_bytes=None,
        tdp_w=None,
        peaks_tflops={},
        sources={"peaks_tflops": f"unknown: {reason or NOT_IN_CATALOG}"},
        provenance="unknown",
        candidates=candidates,
        reason=reason,
    )


def peak_note(device: DeviceSpec | None, device_name: str | None, dtype_class: str | None) -> str:
    """The one line a GEMM gets when it has no peak to be rated against, saying why and what to do."""
    if device is None or device.provenance == "unknown":
        name = device.name if device else (device_name or "the GPU")
        reason = (device.reason if device else "") or NOT_IN_CATALOG
        maybe = f"; it may be {', '.join(device.candidates)}" if device and device.candidates else ""
        return f"peak unknown: give --device NAME ({name}: {reason}{maybe}; {LISTING_HINT})"
    listed = ", ".join(sorted(device.peaks_tflops)) or "no classes"
    if dtype_class:
        return (
            f"no {dtype_class} peak known for {device.name}: the catalog lists {listed} for it; "
            "only relative factors shown"
        )
    return f"no tensor peak known for {device.name}: the GEMM's dtype is unknown; only relative factors shown"


def devices_for_capability(compute_capability: str | None) -> list[DeviceSpec]:
    """The catalog GPUs a compute capability may be (``"12.0"`` -> RTX PRO 6000 Blackwell, RTX 5090 ...), for files
    that name only the architecture (Nsight Compute CSV exports); [] when the capability is unknown."""
    arch = arch_for(compute_capability)
    if arch is None:
        return []
    _, devices = catalog()
    return [d for d in devices.values() if d.arch is not None and d.arch.key == arch.key]


def candidates_line(compute_capability: str | None) -> str | None:
    """One line naming the catalog GPUs of a compute capability and how to pick one, e.g. ``"sm_12.0: the report
    names no GPU; the catalog has rtx-5060, ..., rtx-pro-6000; give --device NAME for their peaks"``; None when
    none match."""
    found = devices_for_capability(compute_capability)
    if not found:
        return None
    keys = ", ".join(d.key for d in found)
    return (
        f"sm_{compute_capability}: the report names no GPU; the catalog has {keys}; "
        f"give --device NAME for their peaks ({LISTING_HINT})"
    )


def lookup_device(name: str) -> DeviceSpec:
    """The catalog GPU a user names (``--device``): its key, name or one of its aliases, any case, ``-`` / ``_`` /
    space alike (``rtx-pro-6000``, ``"RTX PRO 6000 Blackwell"``, ``H200``), or a tool's spelling that resolves
    to one entry (``"NVIDIA H100 80GB HBM3"``). Anything else raises BadInputError (exit 2) listing the closest
    names."""
    import difflib

    _, devices = catalog()
    norm = normalize_name(name)
    names: dict[str, DeviceSpec] = {}
    for dev in devices.values():
        for alias in (dev.key, dev.name, *dev.aliases):
            names.setdefault(normalize_name(alias), dev)
    if norm and norm in names:
        return names[norm]
    found = resolve(name)
    if found.device is not None:
        return found.device
    squash = norm.replace(" ", "")
    close = [d.key for d in found.candidates]
    close += [
        dev.key for alias, dev in names.items() if len(squash) >= 3 and squash in alias.replace(" ", "")
    ]
    close += [names[a].key for a in difflib.get_close_matches(norm, list(names), n=8, cutoff=0.5)]
    picked = list(dict.fromkeys(close))
    hint = f"close matches: {', '.join(picked[:6])}" if picked else "no catalog name is close"
    raise BadInputError(
        f"unknown device {name!r} for --device; {hint}",
        f"give a catalog key or alias, e.g. --device rtx-pro-6000 ({LISTING_HINT}, --json for scripts)",
    )


# --- calibration profiles -----------------------------------------------------------------------------------------
CALIBRATION_DIR = Path("~/.cache/tracekit/calibration")
CALIBRATION_FORMAT = "tracekit-calibration"


def calibration_path(gpu_name: str) -> Path:
    """Where ``tracekit calibrate`` saves the profile of a GPU by default. The name comes from a file (a trace's
    device table, a run's manifest): :func:`tracekit.slug.slug` bounds it and drops separators and control
    characters, so any name gives a path that can be opened."""
    from tracekit.slug import slug

    return CALIBRATION_DIR.expanduser() / f"{slug(normalize_name(gpu_name), empty='gpu')}.json"


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
    name = gpu_of(run.record.environment).name
    if name:
        names.append(name)
    for name in names:
        cached = calibration_path(name)
        if cached.is_file():
            return load_calibration(cached), str(cached)
    return None, None
