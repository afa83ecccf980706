"""The summary of a run that ``tracekit show`` prints: device(s), counts, per-range and per-kernel tables,
measured GEMMs and failures. Pure functions over frames; the command only renders."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from tracekit.records import gpu_of
from tracekit.run import Run

_CRASH_FIELDS = (
    "dtype_a",
    "dtype_b",
    "dtype_out",
    "range",
    "caller",
    "signal",
    "python_stack",
    "stderr_tail",
)
"""Failure columns a crashed program's record fills (collectors/crash.py), shown in ``show --json``."""


def devices(frames: dict[str, pl.DataFrame], run: Run | None = None) -> list[dict[str, Any]]:
    """Distinct GPUs seen in the run: from device tables, ncu reports and the capture's environment."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}

    def add(name: Any, cc: Any, sms: Any) -> None:
        if name is None and cc is None:
            return
        key = (name, cc)
        current = seen.get(key)
        if current is None:
            seen[key] = {"name": name, "compute_capability": cc, "sm_count": sms}
        elif current["sm_count"] is None and sms is not None:
            current["sm_count"] = sms

    for row in frames["devices"].select("name", "compute_capability", "sm_count").unique().iter_rows():
        add(*row)
    for row in frames["ncu"].select("device_name", "compute_capability", "sm_count").unique().iter_rows():
        add(*row)
    for row in frames["failures"].select("device_name", "compute_capability").unique().iter_rows():
        add(row[0], row[1], None)
    gpu = gpu_of(run.manifest.get("environment") if run else None)
    if gpu.name:
        add(gpu.name, gpu.compute_capability, gpu.sm_count)
    # The same GPU can appear with and without a name in different files; prefer fully named entries.
    out = sorted(seen.values(), key=lambda d: (str(d["name"]), str(d["compute_capability"])))
    named = [d for d in out if d["name"]]
    return named or out


def crash_evidence(failure: dict[str, Any]) -> list[tuple[str, str]]:
    """A crash's evidence (capture's ``crashed`` / ``timeout`` records) as (label, text) pairs, for the report and
    the TUI alike: the signal, the GEMM call in flight and where it was made, the Python stack (when it is not
    the traceback already shown) and the program's last stderr lines. Texts are raw: each view escapes them."""
    out: list[tuple[str, str]] = []
    if failure.get("signal"):
        out.append(("signal", str(failure["signal"])))
    if failure.get("range") or failure.get("caller"):
        call = str(failure.get("range") or "?")
        if failure.get("dtype_a"):
            call += f" dtypes {failure['dtype_a']}/{failure.get('dtype_b')}->{failure.get('dtype_out')}"
        if failure.get("caller"):
            call += f" called at {failure['caller']}"
        out.append(("GEMM call in flight", call))
    stack = failure.get("python_stack")
    if stack and stack != failure.get("traceback"):
        out.append(("Python stack", str(stack).rstrip()))
    if failure.get("stderr_tail"):
        out.append(("the program's last stderr lines", str(failure["stderr_tail"]).rstrip()))
    return out


def gemm_table(frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Measured GEMMs: from tracekit's benchmark when present, else GEMM ranges with their kernels' time."""
    meas = frames["measurements"]
    if meas.height:
        return meas.select(
            "range",
            "backend",
            "op",
            "m",
            "n",
            "k",
            "dtype",
            "dtype_out",
            "scale",
            "time_us",
            "tflops",
            "status",
            "sm_clock_hz",
            "power_w",
        )
    ranges = frames["ranges"].filter(pl.col("range_kind") == "gemm")
    if ranges.height == 0:
        return pl.DataFrame(
            schema={
                "range": pl.String,
                "backend": pl.String,
                "m": pl.Int64,
                "n": pl.Int64,
                "k": pl.Int64,
                "dtype": pl.String,
                "time_us": pl.Float64,
                "tflops": pl.Float64,
                "launches": pl.UInt32,
            }
        )
    per_range = (
        frames["kernels"]
        .filter(pl.col("range_id").is_not_null())
        .group_by("range_id")
        .agg(pl.col("duration_ns").sum().alias("kernel_ns"))
    )
    joined = ranges.join(per_range, on="range_id", how="left")
    grouped = (
        joined.group_by("name", "backend", "op", "m", "n", "k", "dtype_a", "scale")
        .agg(pl.len().alias("launches"), pl.col("kernel_ns").median().alias("kernel_ns"))
        .join(_ncu_range_ns(frames), on="name", how="left")
        .with_columns(
            pl.when(pl.col("kernel_ns").is_null() & pl.col("ncu_ns").is_not_null())
            .then(pl.lit("ncu"))
            .when(pl.col("kernel_ns").is_not_null())
            .then(pl.lit("timeline"))
            .alias("time_source"),
            pl.coalesce("kernel_ns", "ncu_ns").alias("kernel_ns"),
        )
        .with_columns((pl.col("kernel_ns") / 1e3).alias("time_us"))
        .with_columns(
            (2.0 * pl.col("m") * pl.col("n") * pl.col("k") / (pl.col("time_us") * 1e-6) / 1e12).alias(
                "tflops"
            )
        )
        .rename({"name": "range", "dtype_a": "dtype"})
        .sort("backend", "m", "n", "k", nulls_last=True)
    )
    failed = {
        (r["backend"], r["m"], r["n"], r["k"])
        for r in frames["failures"].select("backend", "m", "n", "k").iter_rows(named=True)
    }
    status = [
        "ok" if t is not None else "failed" if (b, m, n, k) in failed else "no kernels"
        for b, m, n, k, t in grouped.select("backend", "m", "n", "k", "time_us").iter_rows()
    ]
    return grouped.with_columns(pl.Series("status", status, pl.String)).select(
        "range", "backend", "op", "m", "n", "k", "dtype", "scale", "time_us", "tflops", "launches", "status",
        "time_source",
    )  # fmt: skip


def _ncu_range_ns(frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Per NVTX range name, Nsight Compute's kernel time of one launch of the range (all profiled kernels of the
    range over the launches of its most frequent kernel): the time of GEMMs a timeline lost (a program that
    died under nsys keeps no kernel table)."""
    ncu = frames.get("ncu")
    if ncu is None or ncu.height == 0 or "nvtx_range" not in ncu.columns:
        return pl.DataFrame(schema={"name": pl.String, "ncu_ns": pl.Float64})
    return (
        ncu.filter(pl.col("nvtx_range").is_not_null() & pl.col("duration_ns").is_not_null())
        .group_by("nvtx_range")
        .agg(
            pl.col("duration_ns").sum().alias("total"),
            pl.col("name").value_counts().struct.field("count").max().alias("launches"),
        )
        .select(pl.col("nvtx_range").alias("name"), (pl.col("total") / pl.col("launches")).alias("ncu_ns"))
    )


def range_table(frames: dict[str, pl.DataFrame], limit: int = 20) -> pl.DataFrame:
    """Ranges grouped by name: count, total and median duration, kernels inside."""
    ranges = frames["ranges"]
    if ranges.height == 0:
        return pl.DataFrame(
            schema={"name": pl.String, "count": pl.UInt32, "total_ms": pl.Float64, "kernels": pl.UInt32}
        )
    kcount = (
        frames["kernels"]
        .filter(pl.col("range_id").is_not_null())
        .group_by("range_id")
        .agg(pl.len().alias("nk"))
    )
    return (
        ranges.join(kcount, on="range_id", how="left")
        .with_columns(((pl.col("end_ns") - pl.col("start_ns")) / 1e6).alias("ms"))
        .group_by("name")
        .agg(
            pl.len().alias("count"),
            pl.col("ms").sum().alias("total_ms"),
            pl.col("ms").median().alias("median_ms"),
            pl.col("nk").fill_null(0).sum().alias("kernels"),
        )
        .sort("total_ms", descending=True, nulls_last=True)
        .head(limit)
    )


def kernel_table(frames: dict[str, pl.DataFrame], limit: int = 20) -> pl.DataFrame:
    """Timeline kernels grouped by name: launches, total and mean time, share of GPU time."""
    k = frames["kernels"]
    if k.height == 0:
        return pl.DataFrame(schema={"name": pl.String, "launches": pl.UInt32, "total_ms": pl.Float64})
    total = k["duration_ns"].sum() or 1
    return (
        k.group_by("name")
        .agg(
            pl.len().alias("launches"),
            (pl.col("duration_ns").sum() / 1e6).alias("total_ms"),
            (pl.col("duration_ns").mean() / 1e3).alias("mean_us"),
        )
        .with_columns((pl.col("total_ms") * 1e6 / total * 100).alias("pct"))
        .sort("total_ms", descending=True)
        .head(limit)
    )


def _records(df: pl.DataFrame) -> list[dict[str, Any]]:
    return json.loads(df.write_json()) if df.height else []


def moe_summary(frames: dict[str, pl.DataFrame], environment: dict[str, Any] | None) -> dict[str, Any] | None:
    """``moe`` of ``show --json`` / ``explain --json``: grouped launches, each with its per-expert rows, and the
    what-if (analyzers/moe/); None for a run without grouped launches."""
    from .moe import analyze_moe, moe_json

    has_rows = frames.get("moe") is not None and frames["moe"].height > 0
    ranges = frames["ranges"]
    if not has_rows and not (ranges.height and ranges.filter(pl.col("range_kind") == "moe").height):
        return None
    analysis = analyze_moe(frames, environment=environment)
    return None if analysis.empty else moe_json(analysis)


def _case_row(r: dict[str, Any]) -> dict[str, Any]:
    """A ``gemms`` frame row (analyzers/explain.py) in the shape of ``show --json``'s GEMM rows, with where its
    FLOPs and dtype came from."""
    main = r.get("main_time_ns")
    return {
        "range": r.get("range"),
        "backend": r.get("backend"),
        "op": r.get("op"),
        "m": r.get("m"),
        "n": r.get("n"),
        "k": r.get("k"),
        "dtype": r.get("dtype_a") or r.get("dtype_class"),
        "time_us": main / 1e3 if main is not None else None,
        "tflops": r.get("kernel_tflops"),
        "launches": r.get("launches"),
        "pct_of_peak": r.get("pct_of_peak"),
        "verdict": r.get("verdict"),
        "origin": r.get("origin"),
        "main_kernel": r.get("main_kernel"),
        "flops_source": r.get("flops_source"),
        "dtype_source": r.get("dtype_source"),
    }


def summary(run: Run, frames: dict[str, pl.DataFrame]) -> dict[str, Any]:
    """The JSON object of ``tracekit show --json``."""
    from tracekit.frames import SCHEMA_VERSION

    devs = devices(frames, run)
    gemms = gemm_table(frames)
    from .explain import gemm_summary

    extra = gemm_summary(frames, environment=run.manifest.get("environment"))  # % of peak and the verdict
    gemm_rows = _records(gemms)
    if extra is not None and extra.height and "range" in extra.columns:
        by_range = {r["range"]: r for r in _records(extra)}
        for row in gemm_rows:
            info = by_range.get(row.get("range"), {})
            row["pct_of_peak"] = info.get("pct_of_peak")
            row["verdict"] = info.get("verdict")
        if not gemm_rows:  # no tracekit ranges or measurements: the explainer's cases (the user's own ranges)
            gemm_rows = [_case_row(r) for r in _records(extra)]
    # a crash's evidence columns too; frames written before they existed lack them (null)
    wanted = ("backend", "op", "m", "n", "k", "kind", "error_type", "message", "traceback", *_CRASH_FIELDS)
    failures = frames["failures"].select(
        [pl.col(c) if c in frames["failures"].columns else pl.lit(None).alias(c) for c in wanted]
    )
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "run": {
            "path": str(run.path),
            "status": run.status,
            "partial": bool(run.manifest.get("partial")),
            "incomplete_reason": run.manifest.get("incomplete_reason"),
            "created": run.manifest.get("created"),
            "command": run.manifest.get("command"),
        },
        "kernel_count": frames["kernels"].height,
        "range_count": frames["ranges"].height,
        "ncu_kernel_count": frames["ncu"].height,
        "gemms": gemm_rows,
        "failures": _records(failures),
        "sources": [
            {k: s.get(k) for k in ("path", "kind", "status", "message")}
            for s in run.manifest.get("sources", [])
        ],
    }
    moe = moe_summary(frames, run.manifest.get("environment"))
    if moe is not None:
        out["moe"] = moe
    if len(devs) > 1:
        out["devices"] = devs
        out["device"] = None
    else:
        out["device"] = devs[0] if devs else {"name": None, "compute_capability": None, "sm_count": None}
    out.update(rank_summary(frames, run))
    return out


def rank_summary(frames: dict[str, pl.DataFrame], run: Run | None = None) -> dict[str, Any]:
    """``ranks`` (one object per rank: the columns of analyzers/ranks/'s rank table, times in ns) and
    ``straggler`` ({rank, reasons}) for a run of two or more ranks; nothing for a single-process run."""
    from .ranks import analyze_ranks

    env = run.manifest.get("environment") if run is not None else None
    ra = analyze_ranks(frames, environment=env)
    if ra is None:
        return {}
    return {"ranks": _records(ra.ranks), "straggler": {"rank": ra.straggler, "reasons": ra.reasons}}
