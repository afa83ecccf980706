"""Units and names: the ncu table's times and clocks in µs and MHz, a bundle named by its zip (never the cache
folder it is unpacked in), ``show --json`` rows and ``cases_frame()`` under the same names for the same
quantities, and the breakdown's headline over the user's steps where there are any, saying which.

On the committed samples, through the CLI and the Python API. Expected numbers come from the frames and the
Analysis, never written here.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.analyzers.analysis import analyze_run
from tracekit.analyzers.breakdown.steps import OUTERMOST, STEPS, WHOLE
from tracekit.analyzers.store import load_frames, open_run


def _tracekit(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def _table(out: str, title: str) -> tuple[list[str], list[list[str]]]:
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith(title))
    header = next(ln for ln in lines[at:] if ln.startswith("┃"))
    rows = []
    for ln in lines[lines.index(header, at) + 2 :]:
        if not ln.startswith("│"):
            break
        rows.append([c.strip() for c in ln.split("│")[1:-1]])
    return [c.strip() for c in header.split("┃")[1:-1]], rows


def test_ncu_times_and_clocks_carry_units(samples_dir: Path) -> None:
    run = samples_dir / "h200-capture-gemm"
    ncu = load_frames(open_run(run))["ncu"]
    head, rows = _table(_tracekit("show", run, "--limit", "3").stdout, "Nsight Compute kernels")
    assert "duration_ns" not in head and "sm_clock_hz" not in head
    us, mhz = head.index("duration_µs"), head.index("sm_clock_MHz")
    for row, want in zip(rows, ncu.head(3).iter_rows(named=True), strict=True):
        assert math.isclose(float(row[us].replace(",", "")), want["duration_ns"] / 1e3, rel_tol=0.01)
        assert math.isclose(float(row[mhz].replace(",", "")), want["sm_clock_hz"] / 1e6, rel_tol=0.01)


def test_a_bundle_is_named_by_its_zip(samples_dir: Path, tmp_path: Path) -> None:
    assert _tracekit("bundle", samples_dir / "h200-capture-gemm", "-o", tmp_path / "cg.zip").returncode == 0
    out = _tracekit("show", "cg.zip", "--limit", "1", cwd=tmp_path).stdout
    assert out.splitlines()[0].startswith("run cg.zip  status:")
    assert "`tracekit show cg.zip --all`" in out
    assert "bundles" not in out and ".cache" not in out
    data = json.loads(_tracekit("show", "cg.zip", "--json", cwd=tmp_path).stdout)
    assert data["run"]["path"] == "cg.zip"


@pytest.mark.parametrize("sample", ["h200-bench-gemm", "h200-capture-gemm"])
def test_show_json_rows_and_cases_frame_share_names(samples_dir: Path, sample: str) -> None:
    frame = tracekit.load(samples_dir / sample).analyze().cases_frame()
    rows = json.loads(_tracekit("show", samples_dir / sample, "--json").stdout)["gemms"]
    by_id = {r["id"]: r for r in frame.iter_rows(named=True)}
    shared = [
        "dtype_a",
        "dtype_b",
        "dtype_out",
        "kernel",
        "span_ns_median",
        "gemm_ns_median",
        "span_ns_total",
    ]
    shared += ["m", "n", "k", "calls", "achieved_tflops", "kernel_tflops", "pct_of_peak", "dtype_class"]
    assert rows
    for r in rows:
        want = by_id[r["id"]]
        for key in shared:
            assert key in r and key in want, key
            if isinstance(want[key], float) and r[key] is not None:
                assert math.isclose(r[key], want[key], rel_tol=1e-9), key
            else:
                assert r[key] == want[key], key
        if r["time_us"] is not None:  # one real call's span: the median call (analyzers/analysis/figures.py)
            assert math.isclose(r["time_us"] * 1e3, want["median_call_ns"], rel_tol=1e-9)


@pytest.mark.parametrize(
    ("sample", "what"),
    [("h100-layer-loop", STEPS), ("h200-capture-gemm", OUTERMOST), ("h200-bench-gemm", None)],
)
def test_the_headline_is_over_the_users_steps_and_says_which(
    samples_dir: Path, sample: str, what: str
) -> None:
    r = open_run(samples_dir / sample)
    frames = load_frames(r)
    analysis = analyze_run(r, frames, breakdown="devices")
    line = analysis.summary.breakdown
    if frames["kernels"].height == 0:
        assert line is None  # no timeline, no breakdown
        return
    assert line.startswith(f"{what} (×")
    assert (
        analysis.breakdown is not None and analysis.breakdown.headline == line
    )  # carried in the typed breakdown
    whole = analysis.breakdown.devices[0]
    spans = float(line.split("GPU ")[1].split(",")[1].split(" ms")[0].replace(",", "") or 0)
    assert spans * 1e6 < whole.span_ns  # the steps' windows, not the process with its start-up


def test_a_run_without_ranges_says_it_is_the_whole_run(samples_dir: Path) -> None:
    r = open_run(samples_dir / "h200-capture-gemm")
    frames = load_frames(r)
    frames = {**frames, "ranges": frames["ranges"].clear()}
    from tracekit.analyzers.analysis import analyze_frames

    line = analyze_frames(frames, run=r, breakdown="devices").summary.breakdown
    assert line.startswith(f"{WHOLE}: GPU 0, ")
