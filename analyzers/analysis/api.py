"""The Python API behind ``tracekit.load`` and ``tracekit.analyze`` (README, "Python").

``load(PATH)`` opens a run folder, a bundle (.zip) or a raw profiler file (Nsight Compute report or CSV export,
Nsight Systems SQLite export, PyTorch profiler trace, tracekit JSONL; read in memory, nothing written next to it)
and gives a :class:`Run`: its ``frames`` (polars DataFrames by name, the schemas of docs/SCHEMA or
``tracekit.frames.SPECS``), ``scan(name)`` (a LazyFrame) and ``analyze()`` (the :class:`~.model.Analysis`: the one stored with the run
where it fits, analyzers/analysis/stored.py).
Errors are the CLI's: a missing path, a damaged or foreign file raises a :class:`tracekit.errors.TracekitError`
subclass whose ``exit_code`` and ``one_line()`` are what the command line prints.

Frames are read through the frames store (analyzers/store.py: ``load_frames``, ``scan_frame``,
``file_in_memory``), the one place that knows where they come from.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.devices import DeviceSpec
from tracekit.records import RunRecord
from tracekit.run import Run as RunDir

if TYPE_CHECKING:
    import polars as pl

    from .model import Analysis

__all__ = ["Run", "analyze", "load"]


def _read_frames(run: RunDir) -> dict[str, pl.DataFrame]:
    """Every frame of a run folder or opened bundle (the frames store: rebuilt in memory from raw/ when stale;
    never written)."""
    from ..store import load_frames

    return load_frames(run)


def _import_file(path: Path) -> tuple[RunDir, dict[str, pl.DataFrame]]:
    """A raw profiler file read in memory into frames, with a run object that lives only in memory (its path is
    the file's; nothing is written there): the frames store's :func:`~tracekit.analyzers.store.file_in_memory`."""
    from ..store import file_in_memory

    return file_in_memory(path)


def _device(device: str | DeviceSpec | None) -> DeviceSpec | None:
    if device is None or isinstance(device, DeviceSpec):
        return device
    from tracekit.devices import lookup_device

    return lookup_device(device)


class Run:
    """A run opened by :func:`load`: ``path``, ``name``, ``record`` (run.json typed), ``manifest`` (run.json as a
    dict), ``frames`` and :meth:`analyze`. Frames are read on first use; the analysis is the stored one where it fits, else
    built on first call (and kept per device and calibration, and in the per-user cache)."""

    def __init__(self, run: RunDir, frames: dict[str, pl.DataFrame] | None = None) -> None:
        self._run = run
        self._frames = frames
        self._analyses: dict[tuple[Any, ...], Analysis] = {}

    def __repr__(self) -> str:
        return f"<tracekit.Run {self.name!r} at {str(self.path)!r}>"

    @property
    def path(self) -> Path:
        return self._run.path

    @property
    def name(self) -> str:
        return self._run.name

    @property
    def record(self) -> RunRecord:
        """run.json as its typed record (:class:`tracekit.records.RunRecord`): environment, capture, sources."""
        return self._run.record

    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of run.json as plain data (keys this tracekit does not know included)."""
        return self._run.manifest

    @property
    def frames(self) -> dict[str, pl.DataFrame]:
        """The run's frames by name (kernels, ranges, ncu, ncu_metrics, ncu_rules, measurements, failures,
        devices, ...): polars DataFrames of the documented schemas (``tracekit.frames.SPECS``)."""
        if self._frames is None:
            self._frames = _read_frames(self._run)
        return self._frames

    def scan(self, name: str) -> pl.LazyFrame:
        """One frame as a polars LazyFrame (KeyError for a name no schema defines): from the frames already read,
        else through the frames store, which scans the run's files where they are current (a filter reads only
        the rows it keeps) and gives the migrated or rebuilt frame otherwise."""
        if self._frames is not None:
            return self._frames[name].lazy()
        from ..store import scan_frame

        return scan_frame(self._run, name)

    def analyze(
        self, device: str | DeviceSpec | None = None, calibration: str | Path | dict[str, Any] | None = None
    ) -> Analysis:
        """The run's :class:`~tracekit.analyzers.analysis.Analysis`: ``device`` a catalog name (``"h200"``) or
        DeviceSpec that replaces the GPU the files name (``--device``); ``calibration`` a `tracekit calibrate`
        profile (path or dict), else the one the run carries or the cached one of its GPU."""
        from .stored import load_analysis

        spec = _device(device)
        key = (
            spec.key if spec else None,
            str(calibration) if not isinstance(calibration, dict) else id(calibration),
        )
        if key not in self._analyses:
            # the stored Analysis where it fits, else the per-user cache's, else built (stored.py)
            self._analyses[key] = load_analysis(
                self._run, device=spec, calibration=calibration, frames=self._frames
            )
        return self._analyses[key]


def load(path: str | Path) -> Run:
    """Open ``path``: a run folder, a bundle (.zip) or a raw profiler file (imported in memory)."""
    p = Path(path)
    if p.is_file() and p.suffix.lower() != ".zip":
        run, frames = _import_file(p)
        return Run(run, frames)
    from ..store import open_run

    return Run(open_run(p))


def analyze(
    run: str | Path | Run | RunDir,
    device: str | DeviceSpec | None = None,
    calibration: str | Path | dict[str, Any] | None = None,
) -> Analysis:
    """The Analysis of ``run`` (a path :func:`load` opens, a :class:`Run`, or a ``tracekit.run.Run``)."""
    if isinstance(run, RunDir):
        run = Run(run)
    elif not isinstance(run, Run):
        run = load(run)
    return run.analyze(device=device, calibration=calibration)
