"""tracekit: explains why GPU GEMM kernels stop short of peak.

The core package holds the run model (:mod:`tracekit.run`), frame schemas (:mod:`tracekit.frames`), range names
(:mod:`tracekit.naming`), the device catalog and the CLI. Collectors, analyzers and the TUI live in
``tracekit.collectors``, ``tracekit.analyzers`` and ``tracekit.tui``. Importing ``tracekit`` is cheap: nothing
heavy (polars, torch, textual) is imported until it is used.

In Python (README, "Python")::

    import tracekit
    run = tracekit.load("samples/h200-gemm-probe")  # a run folder, a bundle .zip, or a raw profiler file
    run.frames["kernels"]                          # polars DataFrames of the documented schemas
    analysis = run.analyze()                       # the typed Analysis every view renders
    analysis.cases_frame()                         # one row per GEMM case, largest GPU time first
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit._version import SCHEMA_VERSION, __version__

if TYPE_CHECKING:
    from tracekit.analyzers.analysis.api import Run
    from tracekit.analyzers.analysis.model import Analysis

__all__ = [
    "SCHEMA_VERSION",
    "Analysis",
    "PartialRunWarning",
    "Run",
    "__version__",
    "analyze",
    "instrument",
    "load",
]


def instrument(*args: Any, **kwargs: Any) -> Any:
    """Wrap the GEMM entry points of torch, FlashInfer and sgl-kernel in tracekit NVTX ranges.

    See :func:`tracekit.collectors.instrument.instrument`; imported lazily so ``import tracekit`` stays cheap.
    """
    from tracekit.collectors.instrument import instrument as _instrument

    return _instrument(*args, **kwargs)


def load(path: Any) -> Run:
    """Open a run folder, a bundle (.zip) or a raw profiler file (read in memory, nothing written next to it).

    Returns a :class:`tracekit.Run` with ``frames`` (polars DataFrames by name) and ``analyze()``. A missing,
    damaged or foreign file raises a :class:`tracekit.errors.TracekitError` (the CLI's one-line errors).
    See :func:`tracekit.analyzers.analysis.api.load`."""
    from tracekit.analyzers.analysis.api import load as _load

    run = _load(path)
    _warn_partial(run)
    return run


class PartialRunWarning(UserWarning):
    """A run or file that was read only in part (a truncated trace, a file of a run that did not read): its
    frames hold what could be read. The CLI says the same on stderr and exits 4 where it imports."""


def _warn_partial(run: Any) -> None:
    """Python's ``warnings`` for a partial run, as the CLI's ``tracekit: warning:`` lines: a notebook that loads a
    truncated trace hears it once, and ``warnings.simplefilter("error")`` makes it an error."""
    import warnings

    record = run.record
    if not record.partial:
        return
    said = "; ".join(record.import_warnings or []) or "some of its files could not be read"
    warnings.warn(f"{run.path} was read only in part: {said}", PartialRunWarning, stacklevel=3)


def analyze(run: Any, device: Any = None, calibration: Any = None) -> Analysis:
    """The :class:`tracekit.Analysis` of ``run`` (a path, a :class:`tracekit.Run` or a run directory object);
    ``device`` a catalog name such as ``"h200"`` (the CLI's ``--device``), ``calibration`` a profile from
    ``tracekit calibrate``. See :func:`tracekit.analyzers.analysis.api.analyze`."""
    from tracekit.analyzers.analysis.api import analyze as _analyze

    return _analyze(run, device=device, calibration=calibration)


def __getattr__(name: str) -> Any:
    """``tracekit.Run`` and ``tracekit.Analysis``, imported on first use."""
    if name == "Run":
        from tracekit.analyzers.analysis.api import Run

        return Run
    if name == "Analysis":
        from tracekit.analyzers.analysis.model import Analysis

        return Analysis
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
