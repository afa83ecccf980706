"""The one place the commands obtain a run's Analysis (``explain``, ``show``, ``report``, ``compare``; the TUI's is
:func:`tracekit.tui.data.analyze`).

Today the Analysis is built from the run's frames (:func:`~.build.analyze_run`); where it is stored with the run,
loading it replaces this function's body and no view changes: every view renders what it returns and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from tracekit.devices import DeviceSpec
    from tracekit.run import Run

    from .model import Analysis

__all__ = ["run_analysis"]


def run_analysis(
    run: Run,
    frames: dict[str, pl.DataFrame] | None = None,
    *,
    device: DeviceSpec | None = None,
    calibration: Path | str | dict[str, Any] | None = None,
    breakdown: str = "top",
) -> Analysis:
    """The Analysis of ``run`` (its ``frames`` when already read) with ``--device`` and ``--calibration``;
    ``breakdown`` how much of the step breakdown it holds (:data:`~.build.BREAKDOWN_SCOPES`)."""
    from .build import analyze_run

    return analyze_run(run, frames, device=device, calibration=calibration, breakdown=breakdown)
