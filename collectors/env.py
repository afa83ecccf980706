"""The environment fingerprint a run's manifest carries: which GPU, driver, CUDA and library versions.

:func:`fingerprint` is the one place it is taken: ``tracekit capture`` calls it in its own process
(collectors/capture/common.py), ``tracekit bench`` runs it in a worker in the user's python
(``python -m tracekit.collectors.worker --fingerprint``, collectors/harness/sweep.py ``take_fingerprint``), so both
write the same keys in the same order (:data:`FIELDS`). When the worker never answers, :func:`unanswered` is the
fingerprint with what this process cannot know left None.

Each field is read lazily and independently; one that cannot be known is None, never a guess. Versions come
from package metadata (no import), so fingerprinting does not import FlashInfer (9 s) or sgl-kernel. The GPU
fields need torch and initialise CUDA, so a sweep reads them in its worker, never in the process that drives it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import socket
import sys
from typing import Any

PACKAGES = (
    "torch",
    "flashinfer-python",
    "flashinfer-cubin",
    "sgl-kernel",
    "triton",
    "nvidia-cublas-cu12",
    "nvidia-cublas",
    "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
    "nvtx",
    "nvidia-ml-py",
    "tracekit",
)


def library_versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution, None when absent."""
    out: dict[str, str | None] = {}
    for name in packages:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
        except Exception:
            out[name] = None
    return out


def versions_json(packages: tuple[str, ...] | None = None) -> str:
    """Versions of the installed packages among ``packages`` as a compact JSON object (``failures.versions``)."""
    found = {k: v for k, v in library_versions(packages or PACKAGES).items() if v is not None}
    return json.dumps(found, sort_keys=True)


DEVICE_FIELDS = (
    "gpu_name",
    "compute_capability",
    "sm_count",
    "l2_bytes",
    "memory_bytes",
    "gpu_uuid",
    "pci_bus_id",
    "cuda_runtime",
    "cuda_available",
    "device_count",
)
"""What torch says of the device (:func:`device_info`); ``torch_error`` / ``cuda_error`` follow where either
failed."""
DRIVER_FIELDS = ("driver", "max_sm_clock_hz", "default_power_limit_w", "nvml")
"""What NVML says of the driver and board (``nvml``: ``ok`` or why it could not be read)."""
HOST_FIELDS = ("hostname", "platform", "python", "executable", "cuda_visible_devices")
FIELDS = (*DEVICE_FIELDS, *DRIVER_FIELDS, "versions", *HOST_FIELDS)
"""The keys of every fingerprint in the order run.json holds them (tracekit/records.py ``Environment``); a step
that raised adds ``fingerprint_error`` last."""


def _host() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def device_info(device: int = 0) -> dict[str, Any]:
    """GPU fields from torch (initialises CUDA); all None when torch or a GPU is missing."""
    info: dict[str, Any] = {
        "gpu_name": None,
        "compute_capability": None,
        "sm_count": None,
        "l2_bytes": None,
        "memory_bytes": None,
        "gpu_uuid": None,
        "pci_bus_id": None,
        "cuda_runtime": None,
        "cuda_available": False,
        "device_count": 0,
    }
    try:
        import torch
    except Exception as exc:
        info["torch_error"] = f"{type(exc).__name__}: {exc}"
        return info
    info["cuda_runtime"] = getattr(torch.version, "cuda", None)
    try:
        if not torch.cuda.is_available():
            return info
        info["cuda_available"] = True
        info["device_count"] = torch.cuda.device_count()
        props = torch.cuda.get_device_properties(device)
    except Exception as exc:
        info["cuda_error"] = f"{type(exc).__name__}: {exc}"
        return info
    info["gpu_name"] = props.name
    info["compute_capability"] = f"{props.major}.{props.minor}"
    info["sm_count"] = getattr(props, "multi_processor_count", None)
    info["l2_bytes"] = getattr(props, "L2_cache_size", None)
    info["memory_bytes"] = getattr(props, "total_memory", None)
    uuid = getattr(props, "uuid", None)
    info["gpu_uuid"] = str(uuid) if uuid is not None else None
    bus, dev, dom = (getattr(props, a, None) for a in ("pci_bus_id", "pci_device_id", "pci_domain_id"))
    if bus is not None and dev is not None and dom is not None:
        info["pci_bus_id"] = f"{int(dom):08x}:{int(bus):02x}:{int(dev):02x}.0"
    return info


def _driver(device: int, env: dict[str, Any]) -> dict[str, Any]:
    """The NVML fields of the GPU torch named (matched by UUID, then PCI bus, then index)."""
    from tracekit.collectors.nvml import Nvml

    nvml = Nvml(index=device, uuid=env.get("gpu_uuid"), pci_bus_id=env.get("pci_bus_id"))
    static = nvml.static()
    return {
        "driver": static.get("driver"),
        "max_sm_clock_hz": static.get("max_sm_clock_hz"),
        "default_power_limit_w": static.get("default_power_limit_w"),
        "nvml": "ok" if nvml.ok else nvml.reason,
    }


def _step(errors: list[str], what: str, read: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    """``read()``, or every one of ``fields`` None and the reason added to ``errors``: a fingerprint is evidence,
    not a prerequisite, so no step may end it."""
    try:
        return dict(read())
    except Exception as exc:
        errors.append(f"{what}: {type(exc).__name__}: {exc}")
        return dict.fromkeys(fields)


def fingerprint(device: int = 0) -> dict[str, Any]:
    """Everything the manifest's ``environment`` holds (:data:`FIELDS`, in order): device, driver, CUDA, library
    versions, host. Never raises: a step that fails leaves its fields None and says why in ``fingerprint_error``."""
    errors: list[str] = []
    env = _step(errors, "device", lambda: device_info(device), DEVICE_FIELDS)
    env.update(_step(errors, "nvml", lambda: _driver(device, env), DRIVER_FIELDS))
    env["versions"] = _step(errors, "versions", library_versions, ())
    env.update(_step(errors, "host", _host, HOST_FIELDS))
    if errors:
        env["fingerprint_error"] = "; ".join(errors)
    return env


def unanswered(error: str) -> dict[str, Any]:
    """The fingerprint of a worker that never answered (it timed out, crashed, or its python is missing): the
    keys of :func:`fingerprint`, the device and driver fields None (only the worker could read them), versions
    and host as this process sees them, and ``fingerprint_error`` saying what went wrong."""
    env: dict[str, Any] = dict.fromkeys((*DEVICE_FIELDS, *DRIVER_FIELDS))
    env["versions"] = library_versions()
    env.update(_host())
    env["fingerprint_error"] = error
    return env
