"""The environment fingerprint a run's manifest carries: which GPU, driver, CUDA and library versions.

:func:`fingerprint` is the one place it is taken, always in a worker process
(``python -m tracekit.collectors.worker --fingerprint``, :class:`FingerprintWorker`): ``tracekit bench`` runs it
in the user's python (:func:`take_fingerprint`), ``tracekit capture`` in its own python, started with the capture
and read when the passes are done (collectors/capture/driver.py). Both write the same keys in the same order
(:data:`FIELDS`). Neither process imports torch for it: a cold ``import torch`` takes 3-12 s, and a Ctrl-C during
it would land inside torch's import. When the worker never answers, :func:`unanswered` is the fingerprint with
what this process cannot know left None.

Each field is read lazily and independently; one that cannot be known is None, never a guess. Versions come
from package metadata (no import), so fingerprinting does not import FlashInfer (9 s) or sgl-kernel. The GPU
fields need torch and initialise CUDA, so a sweep reads them in its worker, never in the process that drives it.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
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


ENV_TIMEOUT = "TRACEKIT_FINGERPRINT_TIMEOUT_S"
TIMEOUT_S = 120.0
"""How long a fingerprint worker may take, from its start, unless ``$TRACEKIT_FINGERPRINT_TIMEOUT_S`` says
otherwise: ``import torch`` and CUDA's start took 4.4 s on the H200 host (docs/NOTES.md), 12 s on a loaded
machine; a driver that hangs must not hold the run."""


def timeout_s() -> float:
    """The fingerprint worker's time limit: ``$TRACEKIT_FINGERPRINT_TIMEOUT_S`` when it is a positive number,
    else :data:`TIMEOUT_S`."""
    try:
        value = float(os.environ.get(ENV_TIMEOUT, ""))
    except ValueError:
        return TIMEOUT_S
    return value if value > 0 else TIMEOUT_S


class FingerprintWorker:
    """:func:`fingerprint` of CUDA device ``device`` taken by ``python -m tracekit.collectors.worker
    --fingerprint`` running ``python``, started here and read with :meth:`result` (waits until ``timeout`` seconds
    after the start at most) or :meth:`stop` (waits not at all); the worker's event line is left in ``out``, its
    stderr beside it. Neither raises: a worker that cannot start, crashes, says nothing or is still running at
    its limit gives :func:`unanswered` with the reason in ``fingerprint_error``. Leaving the ``with`` block (or
    :meth:`close`) kills a worker still running and waits for it, so a Ctrl-C leaves no process behind. The
    worker stays in this process's group: a Ctrl-C at the terminal reaches it too."""

    def __init__(self, python: str, device: int, out: Path, timeout: float | None = None) -> None:
        self.out = out
        self.err = out.with_suffix(".stderr.txt")
        self.timeout = timeout_s() if timeout is None else timeout
        self.started = time.monotonic()
        self._answer: dict[str, Any] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        cmd = [python, "-m", "tracekit.collectors.worker", "--fingerprint", "--out", str(out)]
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            with self.err.open("wb") as err:
                self._proc = subprocess.Popen(
                    [*cmd, "--device", str(device)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
        except OSError as exc:
            self._answer = unanswered(f"{type(exc).__name__}: {exc}")

    def answered(self) -> bool:
        """Whether the worker has ended (or never started): :meth:`result` will not wait."""
        return self._answer is not None or self._proc is None or self._proc.poll() is not None

    def result(self) -> dict[str, Any]:
        """The worker's fingerprint, waiting for it until ``timeout`` seconds after its start; a worker still
        running then is killed and the fingerprint says it timed out."""
        if self._answer is None and self._proc is not None:
            left = self.started + self.timeout - time.monotonic()
            try:
                self._proc.wait(timeout=max(left, 0.0))
            except subprocess.TimeoutExpired:
                return self.stop(f"the fingerprint worker did not answer within {self.timeout:g} s")
            answer = self._read()
            self._answer = answer if answer is not None else unanswered(self._why())
        assert self._answer is not None
        return self._answer

    def stop(self, reason: str) -> dict[str, Any]:
        """The worker's fingerprint if it has answered; else it is killed (if still running), and the fingerprint
        says ``reason``."""
        if self._answer is None:
            self.close()
            answer = self._read()
            self._answer = answer if answer is not None else unanswered(reason)
        return self._answer

    def close(self) -> None:
        """Kill the worker if it is still running and wait for it to end (idempotent)."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(OSError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)

    def __enter__(self) -> FingerprintWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self) -> dict[str, Any] | None:
        """The fingerprint of the worker's event line, None when there is none."""
        with contextlib.suppress(OSError, UnicodeDecodeError):
            for line in self.out.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if isinstance(event, dict) and event.get("event") == "fingerprint":
                        return event.get("environment") or {}
        return None

    def _why(self) -> str:
        """Why a worker that ended gave no answer: the end of its stderr, else its exit status."""
        with contextlib.suppress(OSError):
            tail = self.err.read_bytes()[-4000:].decode("utf-8", errors="replace").strip()
            if tail:
                return tail
        code = self._proc.returncode if self._proc is not None else None
        return f"the fingerprint worker ended with exit status {code} and no answer"


def take_fingerprint(python: str, device: int, out: Path, timeout: float | None = None) -> dict[str, Any]:
    """The fingerprint taken by a :class:`FingerprintWorker` running ``python``, waited for: so this process
    never imports torch or initialises CUDA. Never raises (but KeyboardInterrupt, after killing the worker)."""
    with FingerprintWorker(python, device, out, timeout) as worker:
        return worker.result()
