"""``tracekit bench gemm --shapes-from RUN``: the plan (the source run's shaped GEMM cases x the backends that
run each dtype on this GPU), its dry run, and the recommendation table printed after the sweep.

The plan's rows come from the source run's Analysis (tracekit.analyzers.recommend); this module adds what only
the CLI knows: the backend registry (tracekit.collectors.backends, which imports no torch) and the GPU.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import click

from tracekit.errors import BadInputError

CC_FLOOR: dict[str, tuple[int, int]] = {"e4m3": (8, 9), "e5m2": (8, 9), "e2m1": (10, 0)}
"""The lowest compute capability whose tensor cores take the dtype (FP8: Ada / Hopper, sm_89; FP4: Blackwell,
sm_100): a CUDA backend of that dtype is not planned on an older GPU."""


def parse_what_if(text: str | None) -> list[str]:
    """``--what-if fp8,fp4`` into names of :data:`WHAT_IF_DTYPES`; BadInputError names an unknown one."""
    from tracekit.analyzers.recommend import WHAT_IF_DTYPES

    names = [w.strip().lower() for w in (text or "").split(",") if w.strip()]
    unknown = [w for w in names if w not in WHAT_IF_DTYPES]
    if unknown:
        raise BadInputError(
            f"unknown --what-if precision(s): {', '.join(unknown)}",
            f"choose from: {', '.join(WHAT_IF_DTYPES)}",
        )
    return list(dict.fromkeys(names))


def _cc(text: str | None) -> tuple[int, int] | None:
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except (TypeError, ValueError):
        return None


def _runs_here(backend: Any, cc: tuple[int, int] | None) -> str | None:
    """Why ``backend`` cannot run on a GPU of compute capability ``cc`` (None: it can, or cc is unknown)."""
    floor = CC_FLOOR.get(backend.dtype)
    if backend.timer != "cuda" or floor is None or cc is None or cc >= floor:
        return None
    return f"{backend.dtype} needs compute capability {floor[0]}.{floor[1]}+ (this GPU: {cc[0]}.{cc[1]})"


def _analysis_of(source: Path) -> Any:
    """The source run's Analysis. Where polars is not installed (a bare inference environment on the GPU machine,
    as the capture path allows), the Analysis stored with a run folder by `tracekit import` is read as it is:
    its key cannot be checked without reading the frames, so a line on stderr says so."""
    import importlib.util

    import tracekit

    if importlib.util.find_spec("polars") is not None:
        return tracekit.load(source).analyze()
    from tracekit.analyzers.analysis.stored import STORED_FILE, decode_analysis, read_stored

    stored = read_stored(source / STORED_FILE) if source.is_dir() else None
    analysis = decode_analysis(stored) if stored is not None else None
    if analysis is None:
        raise BadInputError(
            f"{source}: reading a run without its stored Analysis needs polars, which is not installed here",
            f"install it (pip install polars), or run `tracekit import --rebuild {source}` where it is installed "
            "and bring the run folder (its analysis.msgpack) here",
        )
    click.echo(
        f"tracekit: polars is not installed: {source}/{STORED_FILE} read as stored (not checked against the "
        "run's frames)",
        err=True,
    )
    return analysis


def load_plan(source: Path, what_if: Sequence[str]) -> Any:
    """The plan's rows from the source run's Analysis (no backends yet); BadInputError when no case has a shape."""
    from tracekit.analyzers.recommend import plan_from_analysis, source_of

    analysis = _analysis_of(source)
    plan = plan_from_analysis(analysis, source_of(source, analysis), what_if)
    if not plan.rows:
        raise BadInputError(
            f"{source}: none of its {len(analysis.cases)} GEMM cases has a shape and dtype to benchmark",
            "capture the step with `tracekit capture --torch-profiler` (records each op's shapes), "
            "or name the GEMM's NVTX range with its shape (docs/GEMM_OPS.md)",
        )
    return plan


def with_backends(
    plan: Any, known: Mapping[str, Any], chosen: Sequence[str] | None, compute_capability: str | None
) -> Any:
    """The plan with each row's backends: every backend (of ``chosen``, else of the registry) whose input dtype is
    the row's and that runs on the GPU (``compute_capability``), the others of that dtype in ``skipped``; and per
    what-if the lower-precision backends."""
    import msgspec

    from tracekit.analyzers.recommend import WHAT_IF_DTYPES, lower_precision

    cc = _cc(compute_capability)
    pool = [known[n] for n in (chosen or list(known))]
    rows = []
    for r in plan.rows:
        own, skipped = [], {}
        for b in pool:
            if b.dtype != r.dtype:
                continue
            why = _runs_here(b, cc)
            if why:
                skipped[b.name] = why
            else:
                own.append(b.name)
        what_if = {}
        for name in plan.what_if:
            dtype = WHAT_IF_DTYPES[name]
            if not lower_precision(r.dtype, dtype):
                continue
            runs = [b for b in pool if b.dtype == dtype]
            for b in runs:
                why = _runs_here(b, cc)
                if why:
                    skipped[b.name] = why
            what_if[name] = [b.name for b in runs if not _runs_here(b, cc)]
        rows.append(msgspec.structs.replace(r, backends=own, skipped=skipped, what_if=what_if))
    return msgspec.structs.replace(plan, rows=rows, compute_capability=compute_capability)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _us(ns: float | None) -> str:
    return "" if ns is None else f"{ns / 1e3:,.1f}"


def _ms(ns: float | None) -> str:
    return "" if ns is None else f"{ns / 1e6:,.2f}"


def print_plan(plan: Any, as_json: bool) -> None:
    """The dry run: shapes, dtypes, calls, the run's time per call and the backends, on stdout."""
    from tracekit.analyzers.recommend import to_builtins

    if as_json:
        click.echo(json.dumps({"plan": to_builtins(plan)}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    s = plan.source
    gpu = f"{plan.gpu or 'unknown GPU'}" + (
        f", sm {plan.compute_capability}" if plan.compute_capability else ""
    )
    console.print(
        Text(
            f"plan: {len(plan.rows)} shapes of {s.name or s.path} ({gpu}), most GEMM time first; run µs = the "
            f"run's GEMM time {plan.per_call}; nothing runs (--dry-run)"
        )
    )
    table = Table(show_lines=False, box=None, pad_edge=False)
    for col, just in (
        ("#", "right"),
        ("shape MxNxK", "left"),
        ("dtype", "left"),
        ("calls", "right"),
        ("run µs", "right"),
        ("run ms", "right"),
        ("ranges", "left"),
    ):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for i, r in enumerate(plan.rows, 1):
        table.add_row(
            str(i),
            r.shape,
            Text(r.dtype),
            f"{r.calls:,}",
            _us(r.per_call_ns),
            _ms(r.gemm_ns_total),
            Text(_cut(", ".join(r.ranges) or "(no range)", 40)),
        )
    console.print(table)
    by_dtype: dict[str, list[str]] = {}
    for r in plan.rows:
        by_dtype.setdefault(r.dtype, r.backends)
    for dtype, names in by_dtype.items():
        console.print(Text(f"{dtype} rows: {', '.join(names) or '(no backend runs it here)'}"))
    for name in plan.what_if:
        names = next((r.what_if[name] for r in plan.rows if name in r.what_if), None)
        if names is not None:
            console.print(
                Text(f"what-if {name} (rows of a wider dtype): {', '.join(names) or '(none runs here)'}")
            )
    why_not: dict[str, list[str]] = {}
    for b, why in {b: why for r in plan.rows for b, why in r.skipped.items()}.items():
        why_not.setdefault(why, []).append(b)
    for why, names in why_not.items():
        console.print(Text(f"not planned ({why}): {', '.join(names)}", style="dim"))
    if plan.left_out:
        console.print(
            Text(f"left out: {len(plan.left_out)} cases ({plan.left_out[0]['why']} ...)", style="dim")
        )


def print_recommendation(rec: Any) -> None:
    """The recommendation table after the sweep (stdout)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from tracekit.analyzers.recommend import recommendation_lines

    console = Console()
    head, header, rows, foot = recommendation_lines(rec)
    console.print(Text(head, style="bold"))
    table = Table(box=None, pad_edge=False)
    for col in header[:10]:  # failures and what-ifs go on lines of their own below: the table fits 80 columns
        table.add_column(
            col, justify="left" if col in ("shape MxNxK", "dtype", "fastest backend") else "right"
        )
    for row in rows:
        table.add_row(*(Text(c) for c in row[:10]))
    console.print(table)
    for row in rows:
        if row[10]:
            console.print(Text(f"#{row[0]} failed: {row[10]}", style="yellow"))
        if row[11]:
            console.print(Text(f"#{row[0]} what-if {row[11]}"))
    for line in foot:
        console.print(Text(line, style="dim"))
