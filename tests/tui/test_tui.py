"""Behaviour of ``tracekit view`` driven through ``App.run_test()`` and Pilot, on runs imported from real files
(the H200 probe) and runs built here from tracekit's own JSONL records holding the error texts seen on the H200
(DEVICE.md). Appearance is pinned in test_tui_snapshots.py."""

from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracekit.analyzers.store import write_frames
from tracekit.frames import SPECS
from tracekit.run import MANIFEST, Run, write_json_atomic


def run_async(fn: Any) -> Any:
    """Run an async test with asyncio (no async pytest plugin is installed)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


FIXED_CREATED = "2026-12-02T18:00:00+00:00"

# Median TFLOP/s of the H200 probe (DEVICE.md, N=2048 K=6144): bf16 and fp8 tensorwise.
H200_TFLOPS = {16: (34, 46), 256: (466, 642), 1024: (650, 1179), 4096: (722, 1159), 16384: (693, 1186)}

CUBLAS_FP4 = (
    "CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmulAlgoGetHeuristic( ltHandle, computeDesc, "
    "Adesc, Bdesc, Cdesc, Ddesc, preference, 1, &heuristicResult, &returnedResult)"
)
FLASHINFER_AUTO = "No suitable auto backends found for mm_fp4"
FLASHINFER_CUTLASS = "mm_fp4 does not support backend 'cutlass' with capability 90"


def _edit_manifest(path: Path, **changes: Any) -> None:
    """Replace top-level keys of the run.json at ``path`` (as another tool writing it would)."""
    manifest = json.loads((path / MANIFEST).read_text())
    manifest.update(changes)
    write_json_atomic(path / MANIFEST, manifest)


def _fix_created(run: Run) -> Run:
    _edit_manifest(run.path, created=FIXED_CREATED, created_unix=1_800_000_000.0)
    return Run.open(run.path)


def make_measured_run(path: Path, *, speedup: float = 1.0) -> Path:
    """A run of tracekit's benchmark: bf16 / fp8 measurements at the probe's figures and the FP4 failures."""
    from tracekit.analyzers.importer import import_into

    run = Run.create(
        path, environment={"gpu_name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}
    )
    n, k = 2048, 6144
    meas = []
    for m, (bf16, fp8) in H200_TFLOPS.items():
        for backend, dtype, tf in (("torch-bf16", "bf16", bf16), ("torch-fp8", "e4m3", fp8)):
            tf = tf * (speedup if backend == "torch-bf16" else 1.0)
            meas.append(
                {
                    "range": f"gemm backend={backend} op=mm M={m} N={n} K={k} a={dtype} b={dtype} out=bf16",
                    "backend": backend,
                    "op": "mm" if dtype == "bf16" else "scaled_mm",
                    "m": m,
                    "n": n,
                    "k": k,
                    "dtype": dtype,
                    "dtype_out": "bf16",
                    "time_us": 2 * m * n * k / (tf * 1e12) * 1e6,
                    "repeats": 25,
                    "tflops": tf,
                    "status": "ok",
                    "sm_clock_hz": 1.47e9,
                    "power_w": 691.0,
                    "power_limit_w": 700.0,
                    "throttle_reasons": 4,
                    "timing": "cuda-graph",
                }
            )
    fails = []
    tb = (
        'Traceback (most recent call last):\n  File "collectors/backends.py", line 212, in run\n'
        "    out = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)\n"
        f"RuntimeError: {CUBLAS_FP4}\n"
    )
    for m in H200_TFLOPS:
        fails.append(
            {
                "backend": "torch-nvfp4",
                "op": "scaled_mm",
                "m": m,
                "n": n,
                "k": k,
                "kind": "unsupported",
                "error_type": "RuntimeError",
                "message": CUBLAS_FP4,
                "traceback": tb,
                "device_name": "NVIDIA H200",
                "compute_capability": "9.0",
                "versions": {"torch": "2.11.0+cu130"},
                "time_unix": 1_800_000_000.0,
            }
        )
        fails.append(
            {
                "backend": "flashinfer-fp4",
                "op": "mm_fp4",
                "m": m,
                "n": n,
                "k": k,
                "kind": "unsupported",
                "error_type": "flashinfer.utils.BackendSupportedError",
                "message": FLASHINFER_AUTO if m != 1024 else FLASHINFER_CUTLASS,
                "traceback": f"Traceback (most recent call last):\nBackendSupportedError: {FLASHINFER_AUTO}\n",
                "device_name": "NVIDIA H200",
                "compute_capability": "9.0",
                "versions": {"flashinfer": "0.5.3"},
                "time_unix": 1_800_000_000.0,
            }
        )
    (run.raw_dir / "measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in meas))
    (run.raw_dir / "failures.jsonl").write_text("".join(json.dumps(r) + "\n" for r in fails))
    import_into(run)
    _fix_created(run)
    return path


NASTY_NAMES = [
    "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4[abc]>(Params)",
    "\x1b[31mred\x1b[0m_kernel\x07",
    "[bold red]x[/]",
    "void very_long<" + "T" * 10_000 + ">(int)",
]


def make_nasty_run(path: Path) -> Path:
    """A run whose kernel names are hostile: brackets, ANSI escapes, Rich markup, 10,000 characters."""
    run = Run.create(path)
    rows = []
    for i in range(40):
        name = NASTY_NAMES[i % len(NASTY_NAMES)]
        rows.append(
            {
                "kernel_id": i,
                "source": "synthetic",
                "pid": 1,
                "device": 0,
                "stream": 7,
                "correlation_id": i,
                "name": name,
                "short_name": name[:30],
                "start_ns": i * 10_000,
                "end_ns": i * 10_000 + 5_000 + i,
                "duration_ns": 5_000 + i,
                "grid_x": 132,
                "grid_y": 1,
                "grid_z": 1,
                "block_x": 384,
                "block_y": 1,
                "block_z": 1,
                "registers_per_thread": 168,
            }
        )
    frames = {name: spec.empty() for name, spec in SPECS.items()}
    frames["kernels"] = SPECS["kernels"].conform(pl.DataFrame(rows))
    write_frames(run, frames)
    _fix_created(run)
    return path


@pytest.fixture(scope="session")
def probe_run(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The H200 probe (ncu report + nsys export) imported into a run."""
    from tracekit.analyzers.importer import import_files

    probe = shared_data / "h200-probe"
    out = tmp_path_factory.mktemp("probe") / "h200-probe"
    run, _ = import_files([probe / "probe.ncu-rep", probe / "probe.sqlite"], out)
    _fix_created(run)
    return out


@pytest.fixture(scope="session")
def measured_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_measured_run(tmp_path_factory.mktemp("meas") / "h200-bench")


@pytest.fixture(scope="session")
def nasty_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_nasty_run(tmp_path_factory.mktemp("nasty") / "nasty-names")


async def wait_loaded(pilot: Any) -> None:
    """Let the workers finish and their messages land."""
    for _ in range(100):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        screen = pilot.app.screen
        if getattr(screen, "analysis", True) is not None and not pilot.app.workers._workers:
            break
    await pilot.pause()


def table_text(table: Any, y: int) -> str:
    return "".join(seg.text for seg in table.render_line(y))


# --- the core stays free of the UI ---------------------------------------------------------------------------------
def test_analyzers_and_tui_data_import_no_textual() -> None:
    code = (
        "import sys\n"
        "import tracekit.analyzers.importer, tracekit.analyzers.summary, tracekit.analyzers.explain\n"
        "import tracekit.tui.data, tracekit.tui.text, tracekit.tui.keys\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'textual')\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- overview ---------------------------------------------------------------------------------------------------------
@run_async
async def test_overview_sort_filter_and_detail(probe_run: Path) -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.gemm import GemmScreen
    from tracekit.tui.screens.overview import OverviewScreen

    app = make_app(probe_run)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        screen = app.screen
        assert isinstance(screen, OverviewScreen)
        assert screen.table.row_count == 5
        info = str(screen.info.render())
        assert "NVIDIA H200" in info and "132 SMs" in info and "no failures" in info
        # sort by TFLOP/s (click its header): the fp8 16384 GEMM at 1,424 TFLOP/s achieved comes first (its
        # 855.7 us kernel, cuBLAS's 1.1 us memset before it and the 12.1 us the host took to launch it after)
        screen.sort_by("tflops")
        await wait_loaded(pilot)
        top = screen.table.row(0)
        assert (top["backend"], top["m"]) == ("torch-fp8", 16384)
        assert top["tflops"] == pytest.approx(
            2 * 16384 * 6144 * 6144 / (855_734 + 1_088 + 12_127) / 1e3, abs=0.5
        )
        assert "1,424" in table_text(screen.table, 1)
        # filter: a word and a numeric term
        await pilot.press("slash", *"fp8")
        await wait_loaded(pilot)
        assert screen.table.row_count == 2
        await pilot.press("escape")
        await wait_loaded(pilot)
        assert screen.table.row_count == 5
        await pilot.press("slash", *"m>2000", "enter")
        await wait_loaded(pilot)
        assert sorted(screen.table.row(i)["m"] for i in range(screen.table.row_count)) == [8192, 16384]
        await pilot.press("escape")
        await wait_loaded(pilot)
        # unsorted, the cases come most time in calls first (the Analysis' order)
        screen.sort_key = None
        screen.refresh_view()
        await wait_loaded(pilot)
        gpu = [screen.table.row(i)["gpu_ns"] for i in range(screen.table.row_count)]
        assert gpu == sorted(gpu, reverse=True)
        # open the bf16 1024x2048x6144 GEMM
        await pilot.press("slash", *"m=1024", "enter")
        await wait_loaded(pilot)
        await pilot.press("enter")
        await wait_loaded(pilot)
        detail = app.screen
        assert isinstance(detail, GemmScreen)
        assert detail.case.shape.m == 1024 and detail.case.backend == "torch-bf16"
        names = [f.name for f in detail.case.factors]
        assert names[:2] == ["clock", "waves"] and "in-kernel" in names
        assert "nvjet_sm90_tst_128x128_64x6" in table_text(detail.kernels_table, 1)
        rules = str(detail.rules_text.render())
        assert "TheoreticalOccupancy" in rules and "81%" in rules
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)


@run_async
async def test_help_theme_and_no_color(probe_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.dialogs import HelpScreen

    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(probe_run, theme="light")
    assert app.no_color
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        assert app.theme == "textual-light"
        await pilot.press("t")
        assert app.theme == "textual-dark"
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "group launches by kernel name" in str(app.screen.query_one("#help-text").render())
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


# --- kernels --------------------------------------------------------------------------------------------------------
@run_async
async def test_kernel_names_are_data_never_markup(nasty_run: Path) -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.dialogs import TextScreen
    from tracekit.tui.screens.kernels import KernelsScreen

    app = make_app(nasty_run)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        await pilot.press("k")
        await wait_loaded(pilot)
        screen = app.screen
        assert isinstance(screen, KernelsScreen)
        lines = [table_text(screen.table, y) for y in range(1, 5)]
        assert "cutlass::Kernel<cutlass_80_tensorop" in lines[0]
        assert "\x1b" not in lines[1] and "\\x1b[31mred" in lines[1] and "\\x07" in lines[1]
        assert "[bold red]x[/]" in lines[2]
        assert lines[3].rstrip().count("T") < 80 and "…" in lines[3]
        assert all(len(line) == 80 for line in lines)
        # the whole 10,000-character name in the detail dialog
        screen.table.move_cursor(3)
        await pilot.press("enter")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, TextScreen)
        body = str(dialog.query_one("#dialog-body").render())
        assert "T" * 10_000 in body
        await pilot.press("escape")
        # search and group by name
        await pilot.press("slash", *"bold", "enter")
        await wait_loaded(pilot)
        assert screen.table.row_count == 10
        await pilot.press("escape", "g")
        await wait_loaded(pilot)
        # a group's dialog: its launches and times, and its share of GPU time
        await pilot.press("enter")
        await pilot.pause()
        body = str(app.screen.query_one("#dialog-body").render())
        assert "launches: " in body and "min / max: " in body and "share of GPU time: " in body
        assert screen.table.row_count == 4
        assert {screen.table.row(i)["launches"] for i in range(4)} == {10}


# --- failures, plot, compare ------------------------------------------------------------------------------------------
@run_async
async def test_failures_matrix_and_full_text(measured_run: Path) -> None:
    from textual.widgets import DataTable

    from tracekit.tui.app import make_app
    from tracekit.tui.screens.failures import FailuresScreen
    from tracekit.tui.screens.overview import OverviewScreen

    app = make_app(measured_run)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        assert isinstance(app.screen, OverviewScreen)
        assert "10 failures" in str(app.screen.info.render())
        assert app.screen.table.row_count == 10
        await pilot.press("f")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FailuresScreen)
        m = screen.matrix
        assert m.backends == ["flashinfer-fp4", "torch-bf16", "torch-fp8", "torch-nvfp4"]
        assert len(m.shapes) == 5
        table = screen.query_one("#matrix", DataTable)
        assert table.cursor_coordinate == (0, 1)  # first failing cell: flashinfer-fp4 at M=16
        assert FLASHINFER_AUTO in str(screen.detail.render())
        # move to torch-nvfp4 (row 3) at M=1024 (column 3): the whole cuBLAS message and the traceback
        await pilot.press("down", "down", "down", "right", "right")
        await pilot.pause()
        text = str(screen.detail.render())
        assert CUBLAS_FP4 in text and "torch._scaled_mm(a, b" in text and "torch 2.11.0+cu130" in text
        # a measured cell shows its TFLOP/s
        await pilot.press("up")
        await pilot.pause()
        assert "1,179 TFLOP/s" in str(screen.detail.render())


@run_async
async def test_plot_draws_backends_and_peaks(measured_run: Path) -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.plot import PlotScreen

    app = make_app(measured_run)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_loaded(pilot)
        await pilot.press("p")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PlotScreen)
        assert screen.data.series["torch-fp8"][-1] == (16384, pytest.approx(1186))
        assert screen.data.datasheet["bf16"] == pytest.approx(989.4, abs=1)
        text = str(screen.plot.render())
        assert "● torch-bf16" in text and "▲ torch-fp8" in text and "bf16 datasheet 989" in text


@run_async
async def test_compare_two_runs(measured_run: Path, tmp_path: Path) -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.compare import CompareScreen

    faster = make_measured_run(tmp_path / "h200-bench-faster", speedup=1.25)
    app = make_app(measured_run, compare=faster)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        await wait_loaded(pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        rows = [screen.table.row(i) for i in range(screen.table.row_count)]
        assert len(rows) == 10
        bf16 = [r for r in rows if r["backend"] == "torch-bf16"]
        fp8 = [r for r in rows if r["backend"] == "torch-fp8"]
        assert all(r["time_change_pct"] == pytest.approx(-20.0) for r in bf16)
        assert all(r["tflops_change_pct"] == pytest.approx(25.0) for r in bf16)
        assert all(abs(r["time_change_pct"]) < 1e-9 for r in fp8)
        # the statuses of `tracekit compare`: improvements first, and the gate passes
        assert [r["status"] for r in rows] == ["improvement"] * 5 + ["unchanged"] * 5
        assert "passes the gate" in str(screen.title_bar.render())
        # enter: the pair in full
        await pilot.press("enter")
        await pilot.pause()
        body = str(app.screen.query_one("#dialog-body").render())
        assert "improvement" in body and "time -20.00%" in body


# --- picker and first screen ------------------------------------------------------------------------------------------
@run_async
async def test_picker_lists_runs_and_opens_one(measured_run: Path, nasty_run: Path, tmp_path: Path) -> None:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.overview import OverviewScreen
    from tracekit.tui.screens.picker import RunPickerScreen

    runs = tmp_path / "runs"
    runs.mkdir()
    for src in (measured_run, nasty_run):
        (runs / src.name).symlink_to(src)
    app = make_app(runs)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_loaded(pilot)
        screen = app.screen
        assert isinstance(screen, RunPickerScreen)
        assert sorted(screen.table.row(i)["name"] for i in range(2)) == ["h200-bench", "nasty-names"]
        await pilot.press("slash", *"bench", "enter", "enter")
        await wait_loaded(pilot)
        assert isinstance(app.screen, OverviewScreen) and app.screen.data.name == "h200-bench"


def test_no_argument_opens_newest_sample(
    measured_run: Path, nasty_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracekit.tui import runs
    from tracekit.tui.app import first_screen
    from tracekit.tui.screens.overview import OverviewScreen
    from tracekit.tui.screens.picker import RunPickerScreen

    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "old").symlink_to(nasty_run)
    newer = make_measured_run(samples / "new")
    _edit_manifest(newer, created_unix=1_900_000_000.0)
    monkeypatch.setattr(runs, "samples_dir", lambda: samples)
    # neither samples/h200-gemm-probe nor its packaged copy: the newest sample (test_tui_samples.py has both)
    monkeypatch.setattr(runs, "packaged_sample", lambda: tmp_path / "absent.zip")
    monkeypatch.chdir(tmp_path)  # no ./runs here
    screen = first_screen(None)
    assert isinstance(screen, OverviewScreen) and screen.path == newer
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "mine").symlink_to(measured_run)
    assert isinstance(first_screen(None), RunPickerScreen)


def test_cli_help_and_bad_run(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tracekit.cli import cli

    out = CliRunner().invoke(cli, ["view", "--help"])
    assert out.exit_code == 0
    assert (
        "--compare" in out.output
        and "group launches by kernel name" in out.output
        and "failures" in out.output
    )
    res = subprocess.run(
        [sys.executable, "-m", "tracekit", "view", str(tmp_path / "missing")], capture_output=True, text=True
    )
    assert res.returncode == 2
    assert res.stderr.strip().startswith("tracekit: no run:") and "Traceback" not in res.stderr


def test_picker_lists_runs_read_through_run(samples_dir: Path, tmp_path: Path) -> None:
    """The picker reads each run through ``Run`` (run.json checked, frames in either layout): every committed
    sample is listed with its GPU, also h200-gemm-probe whose run.json names none (its devices frame does) and
    the multi-rank sample (frames partitioned by rank); folders that are no run it can open are left out."""
    from tracekit.tui.data import find_runs

    entries = {e.name: e for e in find_runs([samples_dir])}
    folders = {p.parent.name for p in samples_dir.glob("*/run.json")}
    assert set(entries) == folders and "h200-gemm-probe" in entries and "h200-ranks-gloo" in entries
    assert entries["h200-gemm-probe"].gpu == "NVIDIA H200" and entries["h200-ranks-gloo"].gpu == "NVIDIA H200"
    good = Run.create(tmp_path / "runs" / "good", environment={"gpu": {"gpu_name": "NVIDIA B200"}})
    for name, text in {"broken": "{not json", "foreign": '{"format": "other"}'}.items():
        (tmp_path / "runs" / name).mkdir()
        (tmp_path / "runs" / name / "run.json").write_text(text)
    newer = Run.create(tmp_path / "runs" / "newer")
    _edit_manifest(newer.path, schema_version=10**6)
    listed = find_runs([tmp_path / "runs"])
    assert [(e.name, e.gpu, e.status) for e in listed] == [("good", "NVIDIA B200", "complete")]
    assert listed[0].path == good.path


def test_viewer_uses_the_runs_calibration_and_survives_a_broken_one(
    samples_dir: Path, tmp_path: Path
) -> None:
    """The TUI finds the profile as ``tracekit explain`` does (tracekit.devices.find_calibration): the one the
    run carries; a damaged one is left out and the explainer runs on the datasheet peak."""
    import shutil

    from tracekit.tui.data import analyze, load_run

    src = tmp_path / "run"
    shutil.copytree(samples_dir / "h200-capture-gemm", src)
    shutil.copy(samples_dir / "calibration-h200.json", src / "raw" / "calibration.json")
    analysis = analyze(load_run(src))
    assert analysis.run.calibration == "raw/calibration.json" and analysis.cases
    (src / "raw" / "calibration.json").write_text("{damaged")
    broken = analyze(load_run(src))
    assert broken.run.calibration is None and len(broken.cases) == len(analysis.cases)
