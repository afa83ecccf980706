"""Failures are data: how a backend x shape that did not produce a good measurement is classified and recorded.

Kinds (the ``failures.kind`` column):

``unsupported``
    the library says this GPU or configuration is not supported: FlashInfer's ``BackendSupportedError`` and
    "does not support backend ... with capability 90", cuBLAS ``CUBLAS_STATUS_NOT_SUPPORTED``, torch's
    "Invalid scaling configuration", "doesn't support fast accum with 128x128 blockwise scaling", an arch check.
``unavailable``
    a package is not installed here (sgl-kernel absent, flashinfer missing): not a crash.
``crashed``
    anything else went wrong: an exception that names no support limit, a CUDA fault (illegal address /
    instruction: the CUDA context is then poisoned and the worker restarts), or the process died by a signal.
``error``
    a GEMM call wrapped by ``tracekit.instrument()`` raised an exception that names no support limit, and the
    process went on (the caller may have caught it): recorded by collectors/breadcrumb.py, not a crash.
``wrong``
    the GEMM ran but its output is all zeros, not finite, or off the reference beyond the dtype's tolerance.
``timeout``
    a benchmark worker gave no sign of progress for ``--stall-timeout`` seconds on one shape and was killed;
    a captured program ran past ``capture --timeout`` (its wall-time limit) and was stopped.
"""

from __future__ import annotations

import re
import signal
import time
from typing import Any

try:
    from tracekit.records import Failure, row
    from tracekit.schema import jsonl_keys
except ImportError:  # loaded by path beside torchprof.py, by an interpreter without tracekit (or msgspec)
    import importlib.util
    import sys
    from pathlib import Path

    def _schema_by_path() -> Any:
        """tracekit/schema.py (standard library only), beside this folder installed or in the checkout."""
        here = Path(__file__).resolve().parent
        for path in (here.parent / "schema.py", here.parent / "tracekit" / "schema.py"):
            spec = importlib.util.spec_from_file_location("_tracekit_schema", path)
            if path.is_file() and spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module  # its dataclasses look their module up there
                spec.loader.exec_module(module)
                return module
        raise

    Failure = row = None  # type: ignore[assignment,misc]
    jsonl_keys = _schema_by_path().jsonl_keys

UNSUPPORTED = "unsupported"
UNAVAILABLE = "unavailable"
CRASHED = "crashed"
WRONG = "wrong"
TIMEOUT = "timeout"
ERROR = "error"
KINDS = (UNSUPPORTED, UNAVAILABLE, CRASHED, WRONG, TIMEOUT, ERROR)

FAILURE_KEYS = jsonl_keys("failures")
"""Keys of a ``raw/failures.jsonl`` line: the columns of the ``failures`` frame (tracekit/schema.py) but its id."""

_UNSUPPORTED_TYPES = ("BackendSupportedError", "NotImplementedError")
_UNAVAILABLE_TYPES = ("ModuleNotFoundError", "BackendUnavailable")

_UNSUPPORTED_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"does not support backend",
        r"No suitable auto backends",
        r"CUBLAS_STATUS_NOT_SUPPORTED",
        r"CUBLAS_STATUS_ARCH_MISMATCH",
        r"CUDNN_STATUS_NOT_SUPPORTED",
        r"invalid scaling configuration",
        r"doesn't support fast accum",
        r"\bnot supported\b",
        r"\bis not supported on\b",
        r"\bunsupported (?:gpu|architecture|arch|compute capability|device|sm)\b",
        r"requires (?:compute capability|sm_?\d|SM\s?\d|CUDA capability|hopper|blackwell)",
        r"only supported on (?:sm|compute|cuda|h100|b200|blackwell|hopper)",
        r"no kernel image is available for execution on the device",
        r"capability \d+ is not supported",
        r"is only supported on CUDA capability",
    )
)

_POISON_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"illegal memory access",
        r"illegal instruction",
        r"misaligned address",
        r"unspecified launch failure",
        r"device-side assert",
        r"CUDA error: an illegal",
        r"cudaErrorIllegalAddress",
        r"cudaErrorLaunchFailure",
        r"CUDA_ERROR_ILLEGAL",
        r"uncorrectable ECC error",
    )
)


def classify(error_type: str, message: str) -> str:
    """Kind of a failure from its (module-qualified) exception type and its full message."""
    short = error_type.rsplit(".", 1)[-1]
    if short in _UNAVAILABLE_TYPES:
        return UNAVAILABLE
    if short == "ImportError" and ("No module named" in message or "cannot import name" in message):
        return UNAVAILABLE
    if poisons_context(message):
        return CRASHED
    if short in _UNSUPPORTED_TYPES:
        return UNSUPPORTED
    if any(p.search(message) for p in _UNSUPPORTED_PATTERNS):
        return UNSUPPORTED
    return CRASHED


def poisons_context(message: str) -> bool:
    """True for CUDA faults after which the process's CUDA context is unusable (the worker must restart)."""
    return any(p.search(message) for p in _POISON_PATTERNS)


def type_name(exc: BaseException) -> str:
    """Module-qualified exception type: ``torch.AcceleratorError``, ``flashinfer.utils.BackendSupportedError``."""
    cls = type(exc)
    module = getattr(cls, "__module__", "") or ""
    if module in ("builtins", "__main__", ""):
        return cls.__qualname__
    return f"{module}.{cls.__qualname__}"


def full_message(exc: BaseException) -> str:
    """The untruncated message, with chained causes appended (cuBLAS errors often hide in ``__cause__``)."""
    parts = [str(exc) or repr(exc)]
    seen = {id(exc)}
    cur = exc.__cause__ or exc.__context__
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        parts.append(f"caused by {type_name(cur)}: {cur}")
        cur = cur.__cause__ or cur.__context__
    return "\n".join(parts)


def signal_name(returncode: int) -> str | None:
    """``SIGSEGV`` for a child that died by signal 11 (Popen returncode -11), else None."""
    if returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"SIG{-returncode}"


def failure_record(
    *,
    backend: str | None,
    op: str | None,
    m: int | None,
    n: int | None,
    k: int | None,
    kind: str,
    error_type: str,
    message: str,
    traceback: str | None = "",
    device_name: str | None = None,
    compute_capability: str | None = None,
    versions: dict[str, Any] | str | None = None,
    time_unix: float | None = None,
    dtype_a: str | None = None,
    dtype_b: str | None = None,
    dtype_out: str | None = None,
    range: str | None = None,
    caller: str | None = None,
    signal: str | None = None,
    python_stack: str | None = None,
    stderr_tail: str | None = None,
) -> dict[str, Any]:
    """One ``raw/failures.jsonl`` object, keys in :data:`FAILURE_KEYS` order, built through
    :class:`tracekit.records.Failure`: the one place a failure row is made (the benchmark worker, the capture's
    crash records, the PyTorch-profiler runner and the instrument wrapper all call it). ``versions`` is an
    object of package -> version (JSON text of one is read as the object); the crash fields (``dtype_a`` ...
    ``stderr_tail``) are for a program that died under ``tracekit capture``."""
    if kind not in KINDS:
        raise ValueError(f"unknown failure kind {kind!r}")
    if time_unix is None:
        time_unix = time.time()
    given = locals()
    values = {key: given.get(key) for key in FAILURE_KEYS}  # the parameters are the frame's columns
    # standalone (see the imports): the values as given; else typed through the record (versions text -> object)
    return values if Failure is None else row(Failure(**values))
