"""The one place the commands obtain a run's Analysis (``explain``, ``show``, ``report``, ``compare``; the TUI's is
:func:`tracekit.tui.data.analyze`): the Analysis stored with the run, or the per-user cache's, or one built now
(:func:`~.stored.load_analysis`). Every view renders what it returns and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
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
    say: Callable[[str], None] | None = None,
) -> Analysis:
    """The Analysis of ``run`` (its ``frames`` when already read) with ``--device`` and ``--calibration``;
    ``breakdown`` how much of the step breakdown it holds (:data:`~.build.BREAKDOWN_SCOPES`); ``say`` gets the
    one-line hint for a run whose stored Analysis is missing or stale."""
    from .stored import load_analysis

    return load_analysis(
        run, device=device, calibration=calibration, breakdown=breakdown, frames=frames, say=say
    )
