"""tracekit: explains why GPU GEMM kernels stop short of peak.

The core package holds the run model (:mod:`tracekit.run`), frame schemas (:mod:`tracekit.frames`), range names
(:mod:`tracekit.naming`), the device catalog and the CLI. Collectors, analyzers and the TUI live in
``tracekit.collectors``, ``tracekit.analyzers`` and ``tracekit.tui``. Importing ``tracekit`` is cheap: nothing
heavy (polars, torch, textual) is imported until it is used.
"""

from __future__ import annotations

from typing import Any

from tracekit._version import SCHEMA_VERSION, __version__

__all__ = ["SCHEMA_VERSION", "__version__", "instrument"]


def instrument(*args: Any, **kwargs: Any) -> Any:
    """Wrap the GEMM entry points of torch, FlashInfer and sgl-kernel in tracekit NVTX ranges.

    See :func:`tracekit.collectors.instrument.instrument`; imported lazily so ``import tracekit`` stays cheap.
    """
    from tracekit.collectors.instrument import instrument as _instrument

    return _instrument(*args, **kwargs)
