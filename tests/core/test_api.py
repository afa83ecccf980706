"""The Python API (README, "Python"): ``tracekit.load`` of a run folder, a bundle and a raw profiler file (read in
memory, nothing written next to it), ``.frames``, ``.analyze()`` and ``cases_frame()``; the CLI's typed errors;
``import tracekit`` importing nothing heavy; ``--top 0`` and negative counts as usage errors (exit 2)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import tracekit
from tracekit.errors import RunNotFoundError, TracekitError, UnreadableFileError
from tracekit.frames import SPECS

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _numbers(analysis: tracekit.Analysis) -> list[tuple]:
    return [
        (c.id, c.timing.calls, c.timing.span_ns_total, c.timing.achieved_tflops, c.verdict.factor)
        for c in analysis.cases
    ]


def _listing(folder: Path) -> list[tuple[str, int, int]]:
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir())


def test_load_a_run_folder_its_frames_and_analysis() -> None:
    run = tracekit.load(SAMPLES / "h200-capture-gemm")
    assert run.name == "h200-capture-gemm"
    kernels = run.frames["kernels"]
    assert isinstance(kernels, pl.DataFrame) and kernels.height > 0
    assert kernels.schema == SPECS["kernels"].schema
    assert set(run.frames) == set(SPECS)
    lazy = run.scan("ncu")
    assert isinstance(lazy, pl.LazyFrame) and lazy.collect().height == run.frames["ncu"].height
    analysis = run.analyze()
    assert isinstance(analysis, tracekit.Analysis) and analysis.cases
    assert run.analyze() is analysis  # built once
    frame = analysis.cases_frame()
    assert frame.height == len(analysis.cases)
    assert frame["id"].to_list() == [c.id for c in analysis.cases]
    assert frame["span_ns_total"].to_list() == sorted(frame["span_ns_total"].to_list(), reverse=True)
    assert frame["kernel_tflops"].to_list() == [c.timing.kernel_tflops for c in analysis.cases]
    assert tracekit.analyze(SAMPLES / "h200-capture-gemm").to_json() == analysis.to_json()
    # the JSON round trip keeps everything
    assert tracekit.Analysis.from_json(analysis.to_json()) == analysis


def test_load_a_bundle(tmp_path: Path) -> None:
    from tracekit.analyzers.store import open_run
    from tracekit.bundle import write_bundle

    src = SAMPLES / "h200-foreign-simt_smem"
    out = tmp_path / "run.zip"
    write_bundle(open_run(src), out)
    assert _numbers(tracekit.load(out).analyze()) == _numbers(tracekit.load(src).analyze())


def test_load_a_raw_file_in_memory_writes_nothing(tmp_path: Path) -> None:
    """A committed sample's nsys export, copied alone into a folder: loaded in memory, the folder unchanged; its
    cases are those `tracekit import` of the same file gives."""
    raw = tmp_path / "alone"
    raw.mkdir()
    shutil.copy(SAMPLES / "h200-planted-e-launch-gaps" / "raw" / "nsys.sqlite.xz", raw)
    before = _listing(raw)
    run = tracekit.load(raw / "nsys.sqlite.xz")
    analysis = run.analyze()
    assert analysis.cases and run.frames["kernels"].height
    assert analysis.run.sources[0].kind == "nsys"
    assert _listing(raw) == before
    imported = tmp_path / "imported"
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "import", str(raw / "nsys.sqlite.xz"), "-o", str(imported)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert _numbers(tracekit.load(imported).analyze()) == _numbers(analysis)


def test_scan_reads_a_current_run_through_the_frames_store(tmp_path: Path) -> None:
    """A run of this schema: ``scan`` is a parquet scan (a filter reaches the reader), read before the frames are,
    and gives the rows ``frames`` has; a committed sample (an earlier schema) scans its migrated frames, with the
    kernel classes computed on load."""
    raw = SAMPLES / "h200-planted-e-launch-gaps" / "raw" / "nsys.sqlite.xz"
    imported = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "tracekit", "import", str(raw), "-o", str(imported)], check=True)
    run = tracekit.load(imported)
    lazy = run.scan("kernels").filter(pl.col("duration_ns") > 10_000)
    assert "PARQUET SCAN" in lazy.explain().upper()
    scanned = lazy.collect()
    frame = run.frames["kernels"].filter(pl.col("duration_ns") > 10_000)
    assert scanned.height and scanned.equals(frame)
    with pytest.raises(KeyError):
        tracekit.load(imported).scan("nope")
    sample = tracekit.load(SAMPLES / "h200-capture-gemm")
    old = sample.scan("kernels").collect()
    assert old["kernel_class"].null_count() < old.height
    assert old.equals(sample.frames["kernels"])


def test_load_a_shared_kineto_trace(shared_data: Path, tmp_path: Path) -> None:
    trace = shared_data / "thirdparty" / "hta" / "trace_diff__control__control.json.gz"
    run = tracekit.load(trace)
    analysis = run.analyze()
    imported = tmp_path / "td"
    subprocess.run([sys.executable, "-m", "tracekit", "import", str(trace), "-o", str(imported)], check=True)
    assert _numbers(tracekit.analyze(imported)) == _numbers(analysis)


def _cli_error(*args: str) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "tracekit", *args], capture_output=True, text=True)
    return proc.returncode, proc.stderr.strip()


def test_missing_foreign_and_damaged_files_raise_the_cli_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(RunNotFoundError) as err:
        tracekit.load(missing)
    code, line = _cli_error("explain", str(missing))
    assert err.value.exit_code == code == 2 and line == f"tracekit: {err.value.one_line()}"

    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a profile\n" * 10)
    damaged = tmp_path / "trace.json.gz"
    damaged.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "cat": "kernel"')[:-8])
    for bad in (foreign, damaged):
        with pytest.raises(UnreadableFileError) as err:
            tracekit.load(bad)
        code, line = _cli_error("import", str(bad), "-o", str(tmp_path / f"run-{bad.stem}"))
        assert err.value.exit_code == code == 2, line
        assert line.splitlines()[-1] == f"tracekit: {err.value.one_line()}"  # after import's progress line
        assert not (tmp_path / f"run-{bad.stem}").exists()
    assert isinstance(err.value, TracekitError)


def test_import_tracekit_is_cheap() -> None:
    """`import tracekit` loads neither polars, msgspec's users, rich, textual, numpy nor torch; load and analyze
    are there, imported on first use."""
    code = (
        "import sys, tracekit\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('polars', 'pyarrow', 'numpy', 'rich', 'textual', 'torch', 'click'))\n"
        "assert not heavy, heavy\n"
        "assert not [m for m in sys.modules if m.startswith('tracekit.analyzers')]\n"
        "assert callable(tracekit.load) and callable(tracekit.analyze)\n"
        "assert tracekit.Analysis.__name__ == 'Analysis' and tracekit.Run.__name__ == 'Run'\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize("command", ["explain", "report"])
@pytest.mark.parametrize("count", ["0", "-3"])
def test_top_zero_or_negative_is_a_usage_error(command: str, count: str) -> None:
    code, line = _cli_error(command, str(SAMPLES / "h200-capture-gemm"), "--top", count)
    assert code == 2 and "--top" in line and "Traceback" not in line


def test_top_and_all(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from tracekit.cli import main

    monkeypatch.setenv("COLUMNS", "120")
    run = str(SAMPLES / "h200-bench-gemm")
    cases = len(json.loads(_out(main, capsys, "explain", run, "--json"))["cases"])
    assert cases > 10
    assert _out(main, capsys, "explain", run).count("╭─ #") == 10
    assert _out(main, capsys, "explain", run, "--top", "3").count("╭─ #") == 3
    assert _out(main, capsys, "explain", run, "--all").count("╭─ #") == cases
    assert len(json.loads(_out(main, capsys, "explain", run, "--json", "--top", "2"))["cases"]) == 2
    report = json.loads(_out(main, capsys, "report", run, "--format", "json", "--top", "4"))
    assert len(report["report"]["waterfalls"]) == 4 and len(report["cases"]) == cases


def _out(main, capsys: pytest.CaptureFixture[str], *args: str) -> str:  # type: ignore[no-untyped-def]
    try:
        main(list(args))
    except SystemExit as exc:
        assert exc.code in (0, None)
    return capsys.readouterr().out


def test_the_readme_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """README's Python example, as written, from the project root (it reads committed samples only)."""
    import re

    root = SAMPLES.parent
    text = (root / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text[text.index("### Python") :], re.S)
    assert code is not None
    monkeypatch.chdir(root)
    scope: dict = {}
    exec(compile(code.group(1), "README.md", "exec"), scope)
    assert scope["df"].height == len(scope["analysis"].cases) > 0
