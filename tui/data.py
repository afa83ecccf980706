"""What the screens show, computed from a run's frames: the UI's only door to the analyzers.

Workers call these functions (never the screens' draw code), and post the results in messages. Everything here
is plain polars / Python: this module imports no Textual, so it is tested without an app and the analyzers stay
free of UI imports. Frames here are the run's own (``tracekit/frames.py``); the few derived frames are documented
where they are built.

By concern: this module opens one run, analyses it and compares two; :mod:`tracekit.tui.runs` finds runs on
disk (the picker, the first screen's target); :mod:`tracekit.tui.tables` derives the screens' tables. Their
public names are importable from here too.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from tracekit.analyzers.analysis.model import Analysis as TypedAnalysis
from tracekit.devices import DeviceSpec, find_calibration
from tracekit.errors import BadInputError
from tracekit.records import RunRecord
from tracekit.run import Run
from tracekit.tui.runs import (
    DEFAULT_SAMPLE,
    RunEntry,
    default_run_dirs,
    default_sample,
    find_runs,
    first_target,
    newest_sample,
    packaged_sample,
    samples_dir,
)
from tracekit.tui.tables import (
    FailureMatrix,
    PlotData,
    failure_matrix,
    filter_frame,
    gemm_kernels,
    gemm_rules,
    gemm_view,
    kernel_groups,
    kernel_view,
    plot_series,
)

__all__ = [
    "DEFAULT_SAMPLE",
    "Analysis",
    "Comparison",
    "FailureMatrix",
    "PlotData",
    "Prefetch",
    "RunData",
    "RunEntry",
    "analyze",
    "compare_data",
    "default_run_dirs",
    "default_sample",
    "failure_matrix",
    "filter_frame",
    "find_runs",
    "first_target",
    "gemm_kernels",
    "gemm_rules",
    "gemm_view",
    "kernel_groups",
    "kernel_view",
    "load_run",
    "newest_sample",
    "packaged_sample",
    "plot_series",
    "rank_analysis",
    "rank_count",
    "samples_dir",
]


# --- one run ----------------------------------------------------------------------------------------------------
@dataclass
class RunData:
    """A run opened for viewing: the run (its manifest as :attr:`record`), every frame, the devices it saw."""

    path: Path
    name: str
    run: Run
    frames: dict[str, pl.DataFrame]
    devices: list[dict[str, Any]]
    ranks: int | None = None
    """How many distributed ranks the frames hold (:func:`rank_count`), counted while the run is opened, so a
    damaged frame file is reported by the opening (an error dialog) and not later by the header's paint."""

    @property
    def record(self) -> RunRecord:
        """The run's manifest, typed (tracekit/records.py)."""
        return self.run.record

    @property
    def status(self) -> str:
        return self.record.status + (" (partial)" if self.record.partial else "")

    @property
    def device_label(self) -> str:
        return devices_label(self.devices)

    @property
    def failure_count(self) -> int:
        """The run's failures, from the manifest's count (no frame read for the header)."""
        return self.count("failures")

    def count(self, name: str) -> int:
        """A frame's rows, without reading the frame where the manifest counts them."""
        from tracekit.analyzers.store import RunFrames

        if isinstance(self.frames, RunFrames):
            return self.frames.height(name)
        return self.frames[name].height


def analysis_devices_label(data: RunData, analysis: Any) -> str:
    """The overview's GPU: the one ``--device`` named once the Analysis is built (its devices), else the files'."""
    if analysis is not None and analysis.run.device_override and analysis.devices:
        return devices_label([msgspec.structs.asdict(d) for d in analysis.devices])
    return data.device_label


def devices_label(devices: list[dict[str, Any]]) -> str:
    """GPUs as the overview's header names them: ``NVIDIA H200 (SM 9.0, 132 SMs)``, several joined by ``+``."""
    if not devices:
        return "device unknown"
    parts = []
    for d in devices:
        text = str(d.get("name") or "GPU ?")
        if d.get("compute_capability"):
            text += f" (SM {d['compute_capability']}"
            text += f", {d['sm_count']} SMs)" if d.get("sm_count") else ")"
        parts.append(text)
    return " + ".join(parts)


def load_run(path: Path | str) -> RunData:
    """Open a run folder or bundle; its frames are read as the screens need them (``store.RunFrames``: the
    overview's table comes from the stored Analysis, not from the frames)."""
    from tracekit.analyzers.store import RunFrames, open_run
    from tracekit.analyzers.summary import devices

    path = Path(path)
    run = open_run(path)
    frames = RunFrames(run)
    found = devices(frames, run)  # type: ignore[arg-type]
    ranks = rank_count(frames)  # type: ignore[arg-type]
    return RunData(path=run.path, name=run.name, run=run, frames=frames, devices=found, ranks=ranks)  # type: ignore[arg-type]


Analysis = TypedAnalysis
"""The run's analysis as every view renders it (:class:`tracekit.analyzers.analysis.Analysis`)."""


def _calibration(data: RunData) -> tuple[dict[str, Any] | None, str | None]:
    """The profile ``tracekit explain`` would use for this run (:func:`tracekit.devices.find_calibration`)."""
    try:
        return find_calibration(data.run, data.frames)
    except BadInputError:  # a broken cached profile must not stop the viewer; the explainer runs without it
        return None, None


def analyze(data: RunData, device: DeviceSpec | None = None) -> TypedAnalysis:
    """The run's Analysis (:func:`tracekit.analyzers.analysis.load_analysis`, what explain, show and report
    render: the stored one where it fits): cases most time in calls first, each with its waterfall, and the
    summary; ``device`` (``tracekit view --device``) overrides the GPU the files name."""
    from tracekit.analyzers.analysis import analyze_frames, load_analysis
    from tracekit.analyzers.store import RunFrames

    try:
        return load_analysis(
            data.run, device=device, frames=None if isinstance(data.frames, RunFrames) else data.frames
        )
    except BadInputError:
        pass  # a broken cached calibration profile: analysed without it, as below
    cal, cal_source = _calibration(data)
    return analyze_frames(
        data.frames,
        run=data.run,
        device=device,
        calibration=cal,
        calibration_source=cal_source,
        breakdown="top",  # as show and report hold it: per GPU and the longest range names
    )


_RANK_COLUMNS = {
    "gemm_spread": [
        "gemm", "origin", "ranks", "min_ns", "median_ns", "max_ns", "spread_pct", "fastest_rank", "slowest_rank",
        "why",
    ],
    "steps": [
        "rank", "step", "name", "start_ns", "end_ns", "duration_ns", "kernels", "gemm_ns", "comm_ns", "other_ns",
        "compute_ns",
    ],
}  # fmt: skip


def _rows_frame(rows: list[dict[str, Any]], columns: list[str]) -> pl.DataFrame:
    if rows:
        return pl.DataFrame(rows, infer_schema_length=None)
    return pl.DataFrame({c: [] for c in columns})


def rank_analysis(data: RunData, analysis: TypedAnalysis | None = None) -> Any:
    """The cross-rank view of a run of two or more ranks (:class:`tracekit.analyzers.ranks.RankAnalysis`), None
    for a single-process run. With the run's Analysis, its ``ranks`` as that view's frames (what show, report and
    explain --json hold); without, computed from the frames."""
    from tracekit.analyzers.ranks import RankAnalysis, analyze_ranks
    from tracekit.analyzers.ranks.gemms import _GEMM_SCHEMA

    if analysis is not None:
        r = analysis.ranks
        if r is None:
            return None
        import msgspec

        rows = msgspec.to_builtins(r)
        gemms = (
            pl.DataFrame(rows["gemms"], schema=_GEMM_SCHEMA) if r.gemms else pl.DataFrame(schema=_GEMM_SCHEMA)
        )
        return RankAnalysis(
            ranks=pl.DataFrame(rows["ranks"], infer_schema_length=None),
            gemms=gemms,
            gemm_spread=_rows_frame(rows["gemm_spread"], _RANK_COLUMNS["gemm_spread"]),
            steps=_rows_frame(rows["steps"], _RANK_COLUMNS["steps"]),
            collectives=pl.DataFrame(),
            straggler=r.straggler,
            reasons=list(r.reasons),
            notes=list(r.notes),
        )
    cal, _ = _calibration(data)
    return analyze_ranks(data.frames, environment=data.record.environment, calibration=cal)


def rank_count(frames: dict[str, pl.DataFrame]) -> int:
    """How many distributed ranks the run's frames hold (0 for a single-process run); of a run's frames read as
    needed (``store.RunFrames``), only the rank columns are read."""
    from tracekit.analyzers.ranks import RANKED_FRAMES, run_ranks
    from tracekit.analyzers.store import RunFrames

    if isinstance(frames, RunFrames):
        found: set[int] = set()
        for name in RANKED_FRAMES:
            scan = frames.scan(name)
            if "rank" in scan.collect_schema().names():
                found |= set(scan.select(pl.col("rank").drop_nulls().unique()).collect()["rank"].to_list())
        return len(found)
    return len(run_ranks(frames))


class Prefetch:
    """Reads a run (and analyses it) on a background thread started before the UI is imported, so reading a big
    run overlaps Textual's start-up; the overview's worker then waits on it instead of starting afresh."""

    def __init__(self, path: Path, device: DeviceSpec | None = None) -> None:
        from concurrent.futures import Future

        self.path = path
        self.device = device
        self.data: Future[RunData] = Future()
        self.analysis: Future[Analysis] = Future()
        self._thread = threading.Thread(target=self._work, name="tracekit-prefetch", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        try:
            data = load_run(self.path)
        except BaseException as exc:  # handed to the worker that waits on it, which reports it
            self.data.set_exception(exc)
            self.analysis.set_exception(exc)
            return
        self.data.set_result(data)
        try:
            self.analysis.set_result(analyze(data, self.device))
        except BaseException as exc:
            self.analysis.set_exception(exc)


# --- compare ----------------------------------------------------------------------------------------------------
COMPARE_SCHEMA = {
    "row": pl.Int64,
    "backend": pl.String,
    "m": pl.Int64,
    "n": pl.Int64,
    "k": pl.Int64,
    "dtype": pl.String,
    "time_a_ns": pl.Float64,
    "time_b_ns": pl.Float64,
    "time_change_pct": pl.Float64,
    "tflops_a": pl.Float64,
    "tflops_b": pl.Float64,
    "tflops_change_pct": pl.Float64,
    "status": pl.String,
}
_STATUS_ORDER = ["broken", "regression", "improvement", "within threshold", "noise", "unchanged", "untimed"]


@dataclass
class Comparison:
    """Two runs compared by :func:`tracekit.analyzers.compare.compare_runs` (what ``tracekit compare`` prints):
    ``frame`` is one table row per GEMM (``row`` indexes ``details``), ``result`` the whole comparison dict
    (counts, new / fixed failures, ``passed``)."""

    frame: pl.DataFrame
    details: list[dict[str, Any]]
    result: dict[str, Any]


def compare_data(
    a: RunData,
    b: RunData,
    threshold_pct: float | None = None,
    a_analysis: TypedAnalysis | None = None,
    b_analysis: TypedAnalysis | None = None,
) -> Comparison:
    """Run A against run B, GEMM by GEMM, with the CLI's matching, noise band and statuses (regression,
    improvement, noise, broken, ...); GEMMs found in one run only get status ``only in A`` / ``only in B``.
    Columns: row, backend, m, n, k, dtype, time_a_ns, time_b_ns, time_change_pct (B vs A; negative = faster),
    tflops_a, tflops_b, tflops_change_pct, status. Worst first: broken, regressions, improvements, ....
    ``a_analysis`` / ``b_analysis``: the runs' Analyses when already built (else built here)."""
    from tracekit.analyzers.compare import DEFAULT_THRESHOLD_PCT, compare_runs

    result = compare_runs(
        a.frames,
        b.frames,
        threshold_pct=DEFAULT_THRESHOLD_PCT if threshold_pct is None else threshold_pct,
        base_environment=a.record.environment,
        new_environment=b.record.environment,
        base_analysis=a_analysis if a_analysis is not None else analyze(a),
        new_analysis=b_analysis if b_analysis is not None else analyze(b),
    )

    def ns(us: Any) -> float | None:
        return None if us is None else float(us) * 1e3

    details: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    for g in result["gemms"]:
        details.append(g)
        rows.append(
            {
                "row": len(rows),
                **{k: g.get(k) for k in ("backend", "m", "n", "k", "dtype")},
                "backend": g.get("backend") or g.get("gemm"),  # a bare profiled kernel: its name
                "time_a_ns": ns(g.get("base_time_us")),
                "time_b_ns": ns(g.get("new_time_us")),
                "time_change_pct": g.get("time_change_pct"),
                "tflops_a": g.get("base_tflops"),
                "tflops_b": g.get("new_tflops"),
                "tflops_change_pct": g.get("tflops_change_pct"),
                "status": g.get("status"),
            }
        )
    for side, status in (("only_in_base_gemms", "only in A"), ("only_in_new_gemms", "only in B")):
        for g in result.get(side) or []:
            details.append({**g, "status": status})
            tag = "a" if status == "only in A" else "b"
            rows.append(
                {
                    "row": len(rows),
                    **{k: g.get(k) for k in ("backend", "m", "n", "k", "dtype")},
                    "backend": g.get("backend") or g.get("gemm"),
                    f"time_{tag}_ns": ns(g.get("time_us")),
                    f"tflops_{tag}": g.get("tflops"),
                    "status": status,
                }
            )
    order = {s: i for i, s in enumerate([*_STATUS_ORDER, "only in A", "only in B"])}
    frame = (
        pl.DataFrame(rows, schema=COMPARE_SCHEMA)
        .with_columns(pl.col("status").replace_strict(order, default=99, return_dtype=pl.Int32).alias("_o"))
        .sort("_o", "backend", "m", "n", "k", nulls_last=True)
        .drop("_o")
    )
    return Comparison(frame, details, result)
