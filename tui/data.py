"""What the screens show, computed from a run's frames: the UI's only door to the analyzers.

Workers call these functions (never the screens' draw code), and post the results in messages. Everything here
is plain polars / Python: this module imports no Textual, so it is tested without an app and the analyzers stay
free of UI imports. Frames here are the run's own (``tracekit/frames.py``); the few derived frames are documented
where they are built.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.devices import DeviceSpec, find_calibration
from tracekit.errors import BadInputError, RunNotFoundError, TracekitError
from tracekit.records import gpu_of
from tracekit.run import MANIFEST, Run

__all__ = [
    "Analysis",
    "Comparison",
    "FailureMatrix",
    "RunData",
    "RunEntry",
    "analyze",
    "compare_data",
    "default_run_dirs",
    "default_sample",
    "failure_matrix",
    "filter_frame",
    "find_runs",
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
    "samples_dir",
]


# --- runs on disk ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunEntry:
    """A run folder found on disk, for the picker."""

    path: Path
    name: str
    created: str | None
    created_unix: float
    status: str
    where: str  # the folder it was found in (runs, samples, ...)
    gpu: str | None = None


def samples_dir() -> Path:
    """The repository's samples/ (shipped runs), beside the tracekit package."""
    import tracekit

    return Path(tracekit.__file__).resolve().parents[1] / "samples"


def default_run_dirs() -> list[Path]:
    """Where the picker looks when no run is given: ./runs, then the bundled samples."""
    return [Path("runs"), samples_dir()]


def _entry(path: Path, where: str) -> RunEntry | None:
    """The picker's line for the run at ``path``, read through :class:`Run` (None when it is no run it can open)."""
    try:
        run = Run.open(path)
    except TracekitError:  # not a run, damaged or newer than this tracekit: opening it would say why
        return None
    manifest = run.manifest
    created_unix = manifest.get("created_unix")
    return RunEntry(
        path=path,
        name=path.name,
        created=manifest.get("created"),
        created_unix=float(created_unix) if isinstance(created_unix, int | float) else 0.0,
        status=str(manifest.get("status", "complete")) + (" (partial)" if manifest.get("partial") else ""),
        where=where,
        gpu=gpu_of(manifest.get("environment")).name or _frame_gpu(run),
    )


def _frame_gpu(run: Run) -> str | None:
    """The GPU an imported run's files name (its devices frame, a few KB), when run.json records none."""
    if run.frame_layout("devices") is None:
        return None
    try:
        frame = run.read_frame("devices", lazy=True).select("name").collect()
    except Exception:  # a damaged frame: the picker shows "–", opening the run says what is wrong
        return None
    names = frame["name"].drop_nulls().unique(maintain_order=True)
    return " + ".join(str(n) for n in names.to_list()) or None


def find_runs(dirs: list[Path]) -> list[RunEntry]:
    """Run folders directly inside (or two levels inside) ``dirs``, newest first; a dir that is itself a run
    counts as one."""
    found: dict[Path, RunEntry] = {}
    for d in dirs:
        if not d.is_dir():
            continue
        candidates = [d] if (d / MANIFEST).is_file() else []
        if not candidates:
            for child in sorted(d.iterdir()):
                if (child / MANIFEST).is_file():
                    candidates.append(child)
                elif child.is_dir():
                    candidates.extend(g for g in sorted(child.iterdir()) if (g / MANIFEST).is_file())
        for c in candidates:
            e = _entry(c, d.name or str(d))
            if e is not None:
                found.setdefault(c.resolve(), e)
    return sorted(found.values(), key=lambda e: (-e.created_unix, e.name))


DEFAULT_SAMPLE = "h200-gemm-probe"
"""The sample ``tracekit view`` opens when given nothing and ./runs holds no run: the H200 probe (bf16 and fp8
GEMMs under nsys and ncu; the README's first example)."""


def packaged_sample() -> Path:
    """The default sample as a bundle inside the package (tracekit/data), for installs without samples/;
    tests/test_tui_samples.py checks that it holds the committed sample's manifest and frames."""
    import tracekit

    return Path(tracekit.__file__).resolve().parent / "data" / f"{DEFAULT_SAMPLE}.zip"


def newest_sample() -> Path | None:
    runs = find_runs([samples_dir()])
    return runs[0].path if runs else None


def default_sample() -> Path | None:
    """What ``tracekit view`` opens with no argument and no runs: samples/h200-gemm-probe in a checkout, else
    the same run bundled in the package, else the newest run under samples/."""
    folder = samples_dir() / DEFAULT_SAMPLE
    if (folder / MANIFEST).is_file():
        return folder
    bundled = packaged_sample()
    if bundled.is_file():
        return bundled
    return newest_sample()


# --- one run ----------------------------------------------------------------------------------------------------
@dataclass
class RunData:
    """A run opened for viewing: its manifest, every frame, the devices it saw."""

    path: Path
    name: str
    manifest: dict[str, Any]
    frames: dict[str, pl.DataFrame]
    devices: list[dict[str, Any]]

    @property
    def status(self) -> str:
        return str(self.manifest.get("status", "complete")) + (
            " (partial)" if self.manifest.get("partial") else ""
        )

    @property
    def device_label(self) -> str:
        if not self.devices:
            return "device unknown"
        parts = []
        for d in self.devices:
            text = str(d.get("name") or "GPU ?")
            if d.get("compute_capability"):
                text += f" (SM {d['compute_capability']}"
                text += f", {d['sm_count']} SMs)" if d.get("sm_count") else ")"
            parts.append(text)
        return " + ".join(parts)

    @property
    def failure_count(self) -> int:
        return self.frames["failures"].height


def load_run(path: Path | str) -> RunData:
    """Open a run folder or bundle and read all its frames (rebuilding them from raw/ when stale)."""
    from tracekit.analyzers.importer import load_frames, open_run
    from tracekit.analyzers.summary import devices

    path = Path(path)
    run = open_run(path)
    frames = load_frames(run)
    return RunData(
        path=run.path, name=run.name, manifest=run.manifest, frames=frames, devices=devices(frames, run)
    )


@dataclass
class Analysis:
    """The explainer's result for a run: the ``gemms`` frame (``gemm_id`` = index into ``explanations``) and,
    per GEMM, the dict ``tracekit explain --json`` prints."""

    gemms: pl.DataFrame
    explanations: list[dict[str, Any]] = field(default_factory=list)
    calibration: str | None = None
    note: str | None = None


def _calibration(data: RunData) -> tuple[dict[str, Any] | None, str | None]:
    """The profile ``tracekit explain`` would use for this run (:func:`tracekit.devices.find_calibration`)."""
    try:
        return find_calibration(Run(data.path, data.manifest), data.frames)
    except BadInputError:  # a broken cached profile must not stop the viewer; the explainer runs without it
        return None, None


def analyze(data: RunData, device: DeviceSpec | None = None) -> Analysis:
    """Every GEMM of the run with its waterfall (analyzers/gemm.py + analyzers/explain.py); ``device``
    (``tracekit view --device``) overrides the GPU the files name."""
    from tracekit.analyzers.gemm import build_cases, gemm_frame

    cal, cal_source = _calibration(data)
    env = data.manifest.get("environment")
    cases = build_cases(data.frames, calibration=cal, environment=env, device=device)
    try:
        from tracekit.analyzers.explain import explain_case
    except ImportError:
        return Analysis(
            gemm_frame(cases), [], cal_source, "the explainer (analyzers/explain.py) is not installed"
        )
    waterfalls = [explain_case(c) for c in cases]
    verdicts: dict[int, tuple[str | None, float | None]] = {}
    for i, wf in enumerate(waterfalls):
        v = wf.verdict
        verdicts[i] = (v.name + (f": {v.cause}" if v.cause else "") if v else None, v.gain_pct if v else None)
    return Analysis(gemm_frame(cases, verdicts), [wf.to_dict() for wf in waterfalls], cal_source)


def rank_analysis(data: RunData) -> Any:
    """The cross-rank view of a run of two or more ranks (:class:`tracekit.analyzers.ranks.RankAnalysis`), None
    for a single-process run."""
    from tracekit.analyzers.ranks import analyze_ranks

    cal, _ = _calibration(data)
    return analyze_ranks(data.frames, environment=data.manifest.get("environment"), calibration=cal)


def rank_count(frames: dict[str, pl.DataFrame]) -> int:
    """How many distributed ranks the run's frames hold (0 for a single-process run)."""
    from tracekit.analyzers.ranks import run_ranks

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


def first_target(run: Path | None, compare: Path | None = None) -> tuple[str, Any]:
    """What ``tracekit view [RUN]`` opens: ``("run", path)`` or ``("picker", [dirs])``. A run folder or bundle
    opens its overview; a folder of runs the picker over it; no RUN the picker over ./runs and the samples when
    ./runs holds runs, else the bundled sample (:func:`default_sample`; the picker when there is none)."""
    if compare is not None and not compare.exists():
        raise RunNotFoundError(f"{compare} does not exist", "give --compare a run folder or bundle")
    if run is not None:
        if not run.exists():
            raise RunNotFoundError(
                f"{run} does not exist", "give a run folder, a bundle, or a folder of runs"
            )
        if (run / MANIFEST).is_file() or (run.is_file() and run.suffix == ".zip"):
            return "run", run
        if run.is_dir():
            return "picker", [run]
        raise RunNotFoundError(
            f"{run} is a file, not a run", f"make a run from it first: `tracekit import {run} -o runs/NAME`"
        )
    if find_runs([Path("runs")]):
        return "picker", default_run_dirs()
    sample = default_sample()
    if sample is not None:
        return "run", sample
    return "picker", default_run_dirs()


# --- derived frames ----------------------------------------------------------------------------------------------
def gemm_view(gemms: pl.DataFrame) -> pl.DataFrame:
    """The overview's GEMM table. Columns: gemm_id, backend, m, n, k, dtype, time_ns (per launch: own kernels +
    aux + gaps), tflops (achieved), pct_of_peak, verdict, range, origin."""
    return gemms.select(
        "gemm_id",
        pl.col("backend").fill_null(pl.col("origin")),
        "m",
        "n",
        "k",
        pl.coalesce("dtype_a", "dtype_class").alias("dtype"),
        (
            pl.col("main_time_ns") + pl.col("aux_time_ns").fill_null(0) + pl.col("gap_time_ns").fill_null(0)
        ).alias("time_ns"),
        pl.col("achieved_tflops").alias("tflops"),
        "pct_of_peak",
        "verdict",
        "range",
        "origin",
    )


_TERM = re.compile(r"^([A-Za-z_]+)(>=|<=|!=|=|>|<)(.+)$")


def filter_frame(df: pl.DataFrame, query: str, text_columns: list[str] | None = None) -> pl.DataFrame:
    """Rows of ``df`` matching every space-separated term of ``query``.

    A term ``col=value`` / ``col>value`` / ``col<=value`` ... compares a column (numbers numerically, text
    case-insensitively); any other term must appear (case-insensitive substring) in one of ``text_columns``
    (default: every text column). Substring tests run on the distinct values only, so filtering a million kernels
    by name costs one pass over their few hundred distinct names.
    """
    terms = query.split()
    if not terms:
        return df
    texts = text_columns or [c for c, t in df.schema.items() if t == pl.String]
    cond: pl.Expr | None = None
    for term in terms:
        m = _TERM.match(term)
        expr: pl.Expr | None = None
        if m and m.group(1).lower() in {c.lower() for c in df.columns}:
            col = next(c for c in df.columns if c.lower() == m.group(1).lower())
            op, raw = m.group(2), m.group(3)
            dtype = df.schema[col]
            if dtype.is_numeric():
                try:
                    value: Any = float(raw.replace(",", ""))
                except ValueError:
                    value = None
                target = pl.col(col)
            else:
                value, target = raw.lower(), pl.col(col).str.to_lowercase()
            if value is not None:
                expr = {
                    "=": target == value,
                    "!=": target != value,
                    ">": target > value,
                    "<": target < value,
                    ">=": target >= value,
                    "<=": target <= value,
                }[op]
                if op == "=" and not dtype.is_numeric():
                    expr = target.str.contains(re.escape(str(value)))
        if expr is None:
            needle = term.lower()
            parts = []
            for col in texts:
                uniq = df.get_column(col).drop_nulls().unique()
                hits = uniq.filter(uniq.str.to_lowercase().str.contains(needle, literal=True))
                if hits.len():
                    parts.append(pl.col(col).is_in(hits.implode()))
            expr = pl.any_horizontal(parts) if parts else pl.lit(False)
        cond = expr if cond is None else cond & expr
    return df.filter(cond) if cond is not None else df


def kernel_view(kernels: pl.DataFrame) -> pl.DataFrame:
    """The kernels screen's rows: one per launch, in timeline order (no copy of the names is made)."""
    return kernels.select(
        "kernel_id",
        "name",
        "duration_ns",
        "start_ns",
        "device",
        "stream",
        "grid_x",
        "grid_y",
        "grid_z",
        "block_x",
        "block_y",
        "block_z",
        "registers_per_thread",
        pl.coalesce("smem_bytes", pl.col("static_smem_bytes") + pl.col("dynamic_smem_bytes")).alias(
            "smem_bytes"
        ),
        "range_id",
    )


def kernel_groups(kernels: pl.DataFrame) -> pl.DataFrame:
    """Kernels grouped by name. Columns: name, launches, total_ns, mean_ns, min_ns, max_ns, pct (of GPU time)."""
    if kernels.height == 0:
        return pl.DataFrame(
            schema={
                "name": pl.String,
                "launches": pl.UInt32,
                "total_ns": pl.Int64,
                "mean_ns": pl.Float64,
                "min_ns": pl.Int64,
                "max_ns": pl.Int64,
                "pct": pl.Float64,
            }
        )
    total = kernels["duration_ns"].sum() or 1
    return (
        kernels.group_by("name")
        .agg(
            pl.len().alias("launches"),
            pl.col("duration_ns").sum().alias("total_ns"),
            pl.col("duration_ns").mean().alias("mean_ns"),
            pl.col("duration_ns").min().alias("min_ns"),
            pl.col("duration_ns").max().alias("max_ns"),
        )
        .with_columns((pl.col("total_ns") / total * 100.0).alias("pct"))
        .sort("total_ns", descending=True, nulls_last=True)
    )


def _range_ids(frames: dict[str, pl.DataFrame], gemm: dict[str, Any]) -> list[int]:
    """Ranges of one GEMM (its name, under its context) and every range nested in them."""
    ranges = frames["ranges"]
    if ranges.height == 0 or not gemm.get("range"):
        return []
    own = ranges.filter(pl.col("name") == gemm["range"])
    if gemm.get("context"):
        parents = ranges.filter(pl.col("name") == gemm["context"])["range_id"]
        own = own.filter(pl.col("parent_id").is_in(parents.implode()))
    ids = set(own["range_id"].to_list())
    frontier = ids
    while frontier:
        children = set(ranges.filter(pl.col("parent_id").is_in(list(frontier)))["range_id"].to_list()) - ids
        ids |= children
        frontier = children
    return sorted(ids)


def gemm_kernels(frames: dict[str, pl.DataFrame], gemm: dict[str, Any]) -> pl.DataFrame:
    """The kernels of one GEMM, grouped by name: from the timeline (its ranges) or, failing that, from Nsight
    Compute (its NVTX range or its profiled kernel). Columns: name, launches, total_ns, mean_ns, min_ns, max_ns,
    pct (of the GEMM's kernel time), source."""
    ids = _range_ids(frames, gemm)
    if ids:
        k = frames["kernels"].filter(pl.col("range_id").is_in(ids))
        if k.height:
            return kernel_groups(k).with_columns(pl.lit("timeline").alias("source"))
    ncu = frames["ncu"]
    rows = ncu.filter(pl.col("nvtx_range") == gemm.get("range")) if gemm.get("range") else ncu.clear()
    if rows.height == 0 and gemm.get("ncu_id") is not None:
        rows = ncu.filter(pl.col("ncu_id") == gemm["ncu_id"])
    if rows.height == 0:
        return kernel_groups(frames["kernels"].clear()).with_columns(pl.lit(None, pl.String).alias("source"))
    k = rows.select(pl.coalesce("demangled_name", "name").alias("name"), pl.col("duration_ns").cast(pl.Int64))
    return kernel_groups(k).with_columns(pl.lit("ncu").alias("source"))


def gemm_rules(frames: dict[str, pl.DataFrame], gemm: dict[str, Any]) -> pl.DataFrame:
    """Nsight Compute's own findings for one GEMM's profiled kernels: one row per distinct finding (rule, kind,
    title, message with ncu's ``@section:``/``@url:`` link markup as words, largest speed-up, speedup_type, and
    ``kernels``: how many profiled launches it was made for), optimizations and the largest estimated speed-up
    first. ``OK`` results and ncu's notes about optional metrics are left out, as in the report."""
    from tracekit.analyzers.report import ncu_noise, ncu_text

    ncu = frames["ncu"]
    ids: list[int] = []
    if gemm.get("ncu_id") is not None:
        ids.append(int(gemm["ncu_id"]))
    if gemm.get("range") and ncu.height:
        ids.extend(ncu.filter(pl.col("nvtx_range") == gemm["range"])["ncu_id"].to_list())
    rules = frames["ncu_rules"].filter(pl.col("ncu_id").is_in(sorted(set(ids))))
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rules.iter_rows(named=True):
        message = ncu_text(r.get("message"))
        if ncu_noise(r.get("kind"), message) or not (r.get("title") or message):
            continue
        key = (r.get("rule"), r.get("kind"), r.get("title"), message)
        entry = found.setdefault(
            key,
            {
                "rule": r.get("rule"),
                "kind": r.get("kind"),
                "title": r.get("title"),
                "message": message,
                "speedup_pct": None,
                "speedup_type": r.get("speedup_type"),
                "kernels": set(),
            },
        )
        entry["kernels"].add(r["ncu_id"])
        sp = r.get("speedup_pct")
        if sp is not None and (entry["speedup_pct"] is None or sp > entry["speedup_pct"]):
            entry["speedup_pct"], entry["speedup_type"] = sp, r.get("speedup_type")
    order = {"OPTIMIZATION": 0, "ERROR": 0, "WARNING": 1}
    rows = sorted(
        ({**e, "kernels": len(e["kernels"])} for e in found.values()),
        key=lambda e: (order.get(str(e["kind"]).upper(), 2), -(e["speedup_pct"] or -1.0)),
    )
    schema = {
        "rule": pl.String,
        "kind": pl.String,
        "title": pl.String,
        "message": pl.String,
        "speedup_pct": pl.Float64,
        "speedup_type": pl.String,
        "kernels": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema)


# --- failures ------------------------------------------------------------------------------------------------------
@dataclass
class FailureMatrix:
    """Backends x shapes: each cell holds the failures of that backend at that shape (and its best TFLOP/s
    when it was also measured)."""

    backends: list[str]
    shapes: list[tuple[int | None, int | None, int | None]]
    failures: dict[tuple[str, tuple[Any, Any, Any]], list[dict[str, Any]]]
    tflops: dict[tuple[str, tuple[Any, Any, Any]], float]

    @staticmethod
    def shape_label(shape: tuple[Any, Any, Any]) -> str:
        return "x".join("?" if v is None else str(v) for v in shape)


def failure_matrix(failures: pl.DataFrame, measurements: pl.DataFrame | None = None) -> FailureMatrix:
    """The failures screen's matrix (failures are few: at most backends x shapes rows)."""
    fails: dict[tuple[str, tuple[Any, Any, Any]], list[dict[str, Any]]] = {}
    for row in failures.sort("failure_id").iter_rows(named=True):
        key = (str(row["backend"]), (row["m"], row["n"], row["k"]))
        fails.setdefault(key, []).append(row)
    tflops: dict[tuple[str, tuple[Any, Any, Any]], float] = {}
    if measurements is not None and measurements.height:
        for row in measurements.iter_rows(named=True):
            if row.get("tflops") is None:
                continue
            key = (str(row["backend"]), (row["m"], row["n"], row["k"]))
            tflops[key] = max(tflops.get(key, 0.0), float(row["tflops"]))
    keys = set(fails) | set(tflops)
    backends = sorted({b for b, _ in keys})
    shapes = sorted({s for _, s in keys}, key=lambda s: tuple(-1 if v is None else v for v in s))
    return FailureMatrix(backends, shapes, fails, tflops)


# --- plot -----------------------------------------------------------------------------------------------------------
@dataclass
class PlotData:
    """TFLOP/s against M per backend, for one N x K (or all), with the peaks drawn as lines."""

    series: dict[str, list[tuple[int, float]]]
    datasheet: dict[str, float]  # dtype class -> datasheet peak
    measured: dict[str, float]  # dtype class -> calibrated (or best measured) peak
    measured_source: str
    nk: tuple[int, int] | None
    nk_choices: list[tuple[int, int]]
    nk_counts: list[int] = field(default_factory=list)  # GEMMs plotted at each of nk_choices


def plot_series(gemms: pl.DataFrame, nk: tuple[int, int] | None = None) -> PlotData:
    """Points of the plot screen: achieved TFLOP/s vs M, per backend, for GEMMs of one ``(N, K)`` (all when
    None)."""
    g = gemms.filter(pl.col("m").is_not_null() & pl.col("achieved_tflops").is_not_null())
    per_nk = g.filter(pl.col("n").is_not_null() & pl.col("k").is_not_null()).group_by("n", "k").len()
    counted = {(int(n), int(k)): int(c) for n, k, c in per_nk.iter_rows() if n and k}
    choices = sorted(counted)
    if nk is not None:
        g = g.filter((pl.col("n") == nk[0]) & (pl.col("k") == nk[1]))
    series: dict[str, list[tuple[int, float]]] = {}
    for b, m, t in g.select(pl.col("backend").fill_null("?"), "m", "achieved_tflops").iter_rows():
        series.setdefault(str(b), []).append((int(m), float(t)))
    for pts in series.values():
        pts.sort()
    datasheet: dict[str, float] = {}
    measured: dict[str, float] = {}
    source = "calibrated"
    for cls, peak, cal in g.select("dtype_class", "peak_tflops", "calibrated_tflops").iter_rows():
        if cls and peak:
            datasheet[str(cls)] = float(peak)
        if cls and cal:
            measured[str(cls)] = float(cal)
    if not measured:
        source = "best in run"
        for cls, t in g.group_by("dtype_class").agg(pl.col("achieved_tflops").max()).iter_rows():
            if cls and t:
                measured[str(cls)] = float(t)
    return PlotData(series, datasheet, measured, source, nk, choices, [counted[c] for c in choices])


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


def compare_data(a: RunData, b: RunData, threshold_pct: float | None = None) -> Comparison:
    """Run A against run B, GEMM by GEMM, with the CLI's matching, noise band and statuses (regression,
    improvement, noise, broken, ...); GEMMs found in one run only get status ``only in A`` / ``only in B``.
    Columns: row, backend, m, n, k, dtype, time_a_ns, time_b_ns, time_change_pct (B vs A; negative = faster),
    tflops_a, tflops_b, tflops_change_pct, status. Worst first: broken, regressions, improvements, ...."""
    from tracekit.analyzers.compare import DEFAULT_THRESHOLD_PCT, compare_runs

    result = compare_runs(
        a.frames,
        b.frames,
        threshold_pct=DEFAULT_THRESHOLD_PCT if threshold_pct is None else threshold_pct,
        base_environment=a.manifest.get("environment"),
        new_environment=b.manifest.get("environment"),
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


# --- MoE ------------------------------------------------------------------------------------------------------------
def moe_analysis(frames: dict[str, pl.DataFrame], environment: dict[str, Any] | None) -> Any:
    """The run's grouped launches, per-expert rows and what-if (analyzers/moe.py ``MoeAnalysis``)."""
    from tracekit.analyzers.moe import analyze_moe

    return analyze_moe(frames, environment=environment)


def moe_histogram(experts: pl.DataFrame, launch_id: int) -> list[dict[str, Any]]:
    """One launch's experts binned by rows (analyzers/moe.py ``expert_histogram``)."""
    from tracekit.analyzers.moe import expert_histogram

    return expert_histogram(experts, launch_id)
