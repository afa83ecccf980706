"""The screens' tables, derived from a run's frames or the explainer's ``gemms`` frame: the GEMM and kernel
tables, the query filter, one GEMM's kernels and Nsight Compute findings, the failures matrix and the plot's
points. Plain polars / Python (no Textual): tested without an app. Each function documents the columns it
returns."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tracekit.analyzers.analysis.tables import KERNEL_GROUP_SCHEMA, group_kernels

__all__ = [
    "FailureMatrix",
    "PlotData",
    "case_ref",
    "failure_matrix",
    "filter_frame",
    "gemm_kernels",
    "gemm_rules",
    "gemm_view",
    "kernel_groups",
    "kernel_view",
    "plot_series",
    "tables_kernels",
]


# --- derived frames ----------------------------------------------------------------------------------------------
def gemm_view(cases: pl.DataFrame) -> pl.DataFrame:
    """The overview's GEMM table from :meth:`Analysis.cases_frame` (most time in calls first). Columns: gemm_id
    (the case's place in that order, 0-based: the index into ``Analysis.cases``), backend (else the case's
    name), m, n, k, dtype, calls, gpu_ns (sum of call spans), time_ns (the median call's span: GEMM + aux + gap,
    analyzers/analysis/figures.py), tflops
    (achieved: FLOPs / call spans), kernel_tflops (FLOPs / GEMM time), pct_of_peak, verdict, range, origin."""
    return cases.select(
        (pl.col("rank") - 1).alias("gemm_id"),
        pl.coalesce("backend", "name").alias("backend"),
        "m",
        "n",
        "k",
        pl.coalesce("dtype_a", "dtype_class").alias("dtype"),
        "calls",
        pl.col("span_ns_total").alias("gpu_ns"),
        pl.col("median_call_ns").alias("time_ns"),
        pl.col("achieved_tflops").alias("tflops"),
        "kernel_tflops",
        "pct_of_peak",
        "verdict",
        pl.coalesce("range", "name").alias("range"),
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


def kernel_labels(names: pl.Series) -> dict[str, str]:
    """Each distinct kernel name -> the text a table shows for it: the short name
    (:func:`tracekit.text.short_name`: no return type or parameters, template arguments elided), or, where several
    names share that short name (``at::native::vectorized_elementwise_kernel<…>``), the name with its template
    arguments, which tell them apart. One call per distinct name: a million launches of 50 kernels cost 50."""
    from tracekit.text import short_kernel_name, short_name

    short = {n: short_name(n) for n in names.drop_nulls().unique().to_list()}
    counts: dict[str, int] = {}
    for s in short.values():
        counts[s] = counts.get(s, 0) + 1
    return {n: s if counts[s] == 1 else short_kernel_name(n, elide=False) for n, s in short.items()}


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
    """Kernels grouped by name (the Analysis' own grouping, :func:`~tracekit.analyzers.analysis.tables.group_kernels`):
    name, launches, total_ns, mean_ns, min_ns, max_ns, pct (of GPU time). The view groups a run's launches itself
    only while its Analysis is being built; then it shows :func:`tables_kernels`."""
    return group_kernels(kernels)


def tables_kernels(tables: Any) -> pl.DataFrame:
    """The Analysis' kernels by name (:class:`~tracekit.analyzers.analysis.sections.RunTables`) with
    :func:`kernel_groups`' columns, most total time first."""
    rows = [
        {"name": r.name, "launches": r.launches, "total_ns": r.total_ns, "mean_ns": r.mean_ns,
         "min_ns": r.min_ns, "max_ns": r.max_ns, "pct": r.pct}
        for r in tables.kernels
    ]  # fmt: skip
    return pl.DataFrame(rows, schema=KERNEL_GROUP_SCHEMA)


def case_ref(case: Any) -> dict[str, Any]:
    """What :func:`gemm_kernels` and :func:`gemm_rules` need of a case: its range, the range around it and its
    profiled kernel's ``ncu_id``."""
    return {
        "range": case.range,
        "context": case.parents[-1] if case.parents else None,
        "ncu_id": case.ncu.ncu_id if case.ncu is not None else None,
    }


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
    """Nsight Compute's own findings for one GEMM's profiled GEMM kernel: one row per distinct finding (rule, kind,
    title, message with ncu's ``@section:``/``@url:`` link markup as words, largest speed-up, speedup_type, and
    ``kernels``: how many profiled launches it was made for), optimizations and the largest estimated speed-up
    first. ``OK`` results and ncu's notes about optional metrics are left out, as in the report."""
    from tracekit.analyzers.gemm.ncu_evidence import same_kernel
    from tracekit.analyzers.report import ncu_noise, ncu_text

    ncu = frames["ncu"]
    ids: list[int] = []
    if gemm.get("ncu_id") is not None:
        ids.append(int(gemm["ncu_id"]))
    if gemm.get("range") and ncu.height:
        # the GEMM kernel's launches in its range: a split-K reduce's or quantize's findings are about that kernel
        main = gemm.get("main_kernel")
        ids.extend(
            r["ncu_id"]
            for r in ncu.filter(pl.col("nvtx_range") == gemm["range"]).iter_rows(named=True)
            if not main or same_kernel(main, r.get("demangled_name") or r.get("name"))
        )
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
    """Backends x shapes: each cell holds the failures of that backend at that shape (and the achieved TFLOP/s
    of its case where one ran)."""

    backends: list[str]
    shapes: list[tuple[int | None, int | None, int | None]]
    failures: dict[tuple[str, tuple[Any, Any, Any]], list[dict[str, Any]]]
    tflops: dict[tuple[str, tuple[Any, Any, Any]], float]

    @staticmethod
    def shape_label(shape: tuple[Any, Any, Any]) -> str:
        return "x".join("?" if v is None else str(v) for v in shape)


def failure_matrix(analysis: Any) -> FailureMatrix:
    """The failures screen's matrix from the run's Analysis: its failures (as dicts, in their order) per backend
    and shape, and where a case of that backend and shape ran, its achieved TFLOP/s (the overview's figure; where
    several cases share a cell, as a timed loop and its profiled run, the one with the most time in calls: the
    overview's first row of that backend and shape)."""
    import msgspec

    fails: dict[tuple[str, tuple[Any, Any, Any]], list[dict[str, Any]]] = {}
    for f in analysis.failures:
        row = msgspec.to_builtins(f)
        row["versions"] = [{"package": p, "version": v} for p, v in (f.versions or {}).items()]
        fails.setdefault((str(f.backend), (f.m, f.n, f.k)), []).append(row)
    tflops: dict[tuple[str, tuple[Any, Any, Any]], float] = {}
    for c in analysis.cases:
        if c.timing.achieved_tflops is None or c.backend is None:
            continue
        s = c.shape
        key = (str(c.backend), (s.m, s.n, s.k) if s else (None, None, None))
        tflops.setdefault(key, c.timing.achieved_tflops)  # cases come most time in calls first
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
    None); ``gemms`` is :meth:`Analysis.cases_frame`."""
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
