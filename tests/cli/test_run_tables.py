"""The run's tables (the Analysis' ``tables``: range and kernel names by total time, the Nsight Compute kernels)
are grouped once, when the Analysis is built, and every view renders them: ``show`` (table and ``--json``) and the
TUI's kernels grouped by name. Checked against the frames grouped here, row by row, and with every frame read
refused while the views run."""

from __future__ import annotations

import json
import shutil
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests.support.views import SAMPLES, cli
from tracekit.analyzers.analysis import load_analysis
from tracekit.analyzers.analysis.sections import TABLE_ROWS
from tracekit.analyzers.importer import import_into
from tracekit.analyzers.store import load_frames, open_run

RUNS = ["h200-capture-gemm", "h200-ranks-gloo", "h100-serve-torchprof"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Copies of samples imported again (their Analysis stored by this code, as ``import --rebuild`` does)."""
    out = {}
    for name in RUNS:
        run = tmp_path_factory.mktemp("tables") / name
        shutil.copytree(SAMPLES / name, run)
        import_into(open_run(run))
        out[name] = run
    return out


def _grouped(run: Path) -> tuple[dict[Any, dict[str, Any]], dict[Any, dict[str, Any]]]:
    """The frames grouped by name here, in plain Python: ranges (count, total, median, kernels inside) and kernels
    (launches, total, min, max)."""
    frames = load_frames(open_run(run))
    inside: dict[int, int] = defaultdict(int)
    for rid in frames["kernels"]["range_id"].to_list():
        if rid is not None:
            inside[rid] += 1
    ranges: dict[Any, dict[str, Any]] = {}
    for r in frames["ranges"].select("name", "range_id", "start_ns", "end_ns").iter_rows(named=True):
        g = ranges.setdefault(r["name"], {"count": 0, "spans": [], "kernels": 0})
        g["count"] += 1
        g["kernels"] += inside.get(r["range_id"], 0)
        if r["end_ns"] is not None and r["start_ns"] is not None:
            g["spans"].append(r["end_ns"] - r["start_ns"])
    kernels: dict[Any, dict[str, Any]] = {}
    for name, ns in frames["kernels"].select("name", "duration_ns").iter_rows():
        kernels.setdefault(name, []).append(ns)  # type: ignore[arg-type]
    return ranges, kernels


@pytest.mark.parametrize("name", RUNS)
def test_show_json_tables_are_the_frames_grouped(
    name: str, imported: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = imported[name]
    tables = json.loads(cli(capsys, monkeypatch, "show", str(run), "--json"))["tables"]
    ranges, kernels = _grouped(run)
    assert tables["ranges_total"] == len(ranges) and tables["kernels_total"] == len(kernels)
    assert len(tables["ranges"]) == min(len(ranges), TABLE_ROWS)
    for row in tables["ranges"]:
        g = ranges[row["name"]]
        assert (row["count"], row["kernels"]) == (g["count"], g["kernels"]), row
        assert row["total_ns"] == (sum(g["spans"]) if g["spans"] else None)
        assert row["median_ns"] == (pytest.approx(statistics.median(g["spans"])) if g["spans"] else None)
    totals = [r["total_ns"] or 0 for r in tables["ranges"]]
    assert totals == sorted(totals, reverse=True)
    every = sum(sum(v) for v in kernels.values())
    for row in tables["kernels"]:
        ns = kernels[row["name"]]
        assert (row["launches"], row["total_ns"], row["min_ns"], row["max_ns"]) == (
            len(ns),
            sum(ns),
            min(ns),
            max(ns),
        )
        assert row["pct"] == pytest.approx(100 * sum(ns) / every)
    ncu = load_frames(open_run(run))["ncu"]
    assert [r["ncu_id"] for r in tables["ncu_kernels"]] == ncu["ncu_id"].to_list()
    assert [r["duration_ns"] for r in tables["ncu_kernels"]] == ncu["duration_ns"].to_list()


def test_the_views_render_the_analysis_and_read_no_frame(
    imported: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``show`` (table and --json), ``explain``, ``report`` (every format) and ``compare`` of imported runs read
    none of their frames but the devices (which name the calibration the stored Analysis is keyed by): every table
    is the stored Analysis'. The table's rows are its rows, cut to --limit with the count of those left out."""
    from tracekit.analyzers import store

    run = imported["h200-capture-gemm"]
    analysis = load_analysis(open_run(run))
    assert analysis.tables is not None
    read: list[str] = []
    real = store.read_frame

    def record(r: Any, name: str, **kw: Any) -> Any:
        read.append(name)
        return real(r, name, **kw)

    monkeypatch.setattr(store, "read_frame", record)
    out = cli(capsys, monkeypatch, "show", str(run), "--limit", "2", columns=250)
    cli(capsys, monkeypatch, "show", str(run), "--json")
    cli(capsys, monkeypatch, "explain", str(run))
    for fmt in ("md", "json", "html"):
        cli(capsys, monkeypatch, "report", str(run), "--format", fmt, "-o", str(run.parent / f"r.{fmt}"))
    cli(capsys, monkeypatch, "compare", str(run), str(imported["h100-serve-torchprof"]), "--json")
    # only the small devices frame, which names the calibration profile the stored Analysis is keyed by
    assert set(read) <= {"devices"}, read
    t = analysis.tables
    for title, rows, total, what in (
        ("Top ranges (by total time)", t.ranges, t.ranges_total, "range names"),
        ("Top kernels (by total time)", t.kernels, t.kernels_total, "kernel names"),
        ("Nsight Compute kernels", t.ncu_kernels, len(t.ncu_kernels), "Nsight Compute kernels"),
    ):
        section = out.split(title, 1)[1]
        for row in rows[:2]:
            assert row.name[:40] in section
        assert f"… {total - 2} more {what}" in section


def test_show_all_holds_every_name(
    imported: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stored Analysis keeps the first TABLE_ROWS names of each table; ``show --all`` renders an Analysis
    of every name (built into the per-user cache, the run untouched)."""
    run = imported["h100-serve-torchprof"]
    every = json.loads(cli(capsys, monkeypatch, "show", str(run), "--json", "--all"))["tables"]
    assert len(every["kernels"]) == every["kernels_total"] > 0
    assert len(every["ranges"]) == every["ranges_total"] > 0
    from tracekit.analyzers.analysis.tables import run_tables

    frames = load_frames(open_run(run))
    cut = run_tables(frames, limit=3)
    assert [r.name for r in cut.kernels] == [r["name"] for r in every["kernels"][:3]]
    assert cut.kernels_total == every["kernels_total"] and cut.ranges_total == every["ranges_total"]
