"""The stored Analysis (analyzers/analysis/stored.py, docs/ANALYSIS.md "The stored Analysis and its cache").

An import stores the Analysis with the run; every read loads it where its key (the frames' content, tracekit's
version, the Analysis schema, --device, the calibration, the breakdown held) is the read's, else builds it into
the per-user cache without writing the run. Runs are copies of the committed samples, rebuilt with
``import_into`` (what ``import --rebuild`` does).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import polars as pl
import pytest

from tracekit.analyzers.analysis import Analysis, analyze_run, load_analysis
from tracekit.analyzers.analysis import stored as S
from tracekit.analyzers.importer import import_into
from tracekit.analyzers.store import open_run, read_frame, write_frame
from tracekit.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
EQUAL_ON = ["h200-gemm-probe", "h200-bench-gemm", "h200-ranks-gloo", "h200-moe", "h100-serve-torchprof"]


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private per-user cache for each test."""
    root = tmp_path / "cache"
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(root))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return root / "analyses"


def _snapshot(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _imported(sample: str, tmp_path: Path) -> Path:
    """A copy of a sample, its frames and Analysis rebuilt as ``import --rebuild`` does."""
    run = tmp_path / sample
    shutil.copytree(SAMPLES / sample, run)
    (run / S.STORED_FILE).unlink(missing_ok=True)
    import_into(open_run(run))
    return run


def _cached(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.msgpack")) if cache.is_dir() else []


def _as_stored(analysis: Analysis) -> Analysis:
    return msgspec.msgpack.decode(msgspec.msgpack.encode(analysis), type=Analysis)


def _no_build(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the Analysis was built, not loaded")

    monkeypatch.setattr(S, "_build", refuse)


@pytest.mark.parametrize("sample", EQUAL_ON)
def test_stored_analysis_is_a_fresh_build(sample: str, tmp_path: Path, cache: Path) -> None:
    """The import stores it; a read loads it (building nothing, caching nothing), and it is the Analysis a
    fresh build from the frames gives, byte for byte as JSON."""
    run = _imported(sample, tmp_path)
    assert (run / S.STORED_FILE).is_file()
    fresh = analyze_run(open_run(run), breakdown=S.DEFAULT_BREAKDOWN)
    before = _snapshot(run)
    with pytest.MonkeyPatch.context() as mp:
        _no_build(mp)
        loaded = load_analysis(open_run(run))
    assert loaded.to_json() == fresh.to_json()
    assert _cached(cache) == [] and _snapshot(run) == before


def test_stored_analysis_is_the_same_wherever_the_run_was_imported(tmp_path: Path) -> None:
    """The stored file names no folder: rebuilt twice, at two paths, the bytes are the same (committed samples
    carry it), and a moved run's Analysis names the folder it was opened at."""
    a = _imported("h200-gemm-probe", tmp_path / "a")
    first = (a / S.STORED_FILE).read_bytes()
    import_into(open_run(a))
    assert (a / S.STORED_FILE).read_bytes() == first
    b = tmp_path / "elsewhere" / "renamed"
    shutil.copytree(a, b)
    assert (b / S.STORED_FILE).read_bytes() == first
    loaded = load_analysis(open_run(b))
    assert loaded.run.path == str(b) and loaded.run.name == "renamed"


def test_other_options_build_into_the_cache_and_leave_the_run(tmp_path: Path, cache: Path) -> None:
    """--device (and the breakdown ``show --all`` asks for) are other keys: built once into the cache, loaded
    from it the second time; the run is byte-identical."""
    run = _imported("h200-gemm-probe", tmp_path)
    before = _snapshot(run)
    h100 = load_analysis(open_run(run), device="h100-sxm")
    assert h100.run.device_override == "h100-sxm" and len(_cached(cache)) == 1
    whole = load_analysis(open_run(run), breakdown="all")
    assert len(_cached(cache)) == 2
    with pytest.MonkeyPatch.context() as mp:
        _no_build(mp)
        assert load_analysis(open_run(run), device="h100-sxm").to_json() == h100.to_json()
        assert load_analysis(open_run(run), breakdown="all").to_json() == whole.to_json()
    assert _snapshot(run) == before


def test_other_version_and_changed_frames_are_stale(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another tracekit version, another Analysis schema or frames changed since the import: the stored one is
    stale; the read builds (a fresh Analysis of the frames as they are) into the cache, the run untouched."""
    run = _imported("h200-gemm-probe", tmp_path)
    before = _snapshot(run)
    with monkeypatch.context() as mp:
        mp.setattr(S, "code_version", lambda: "99.0")
        load_analysis(open_run(run))
        assert len(_cached(cache)) == 1
    with monkeypatch.context() as mp:
        mp.setattr(S, "ANALYSIS_SCHEMA_VERSION", 999)
        load_analysis(open_run(run))
        assert len(_cached(cache)) == 2
    assert _snapshot(run) == before
    # the frames change under the stored Analysis: half the kernels gone
    r = open_run(run)
    kernels = read_frame(r, "kernels")
    assert isinstance(kernels, pl.DataFrame) and kernels.height > 10
    write_frame(r, "kernels", kernels.head(kernels.height // 2))
    changed = _snapshot(run)
    got = load_analysis(open_run(run))
    assert got.run.kernel_count == kernels.height // 2
    fresh = analyze_run(open_run(run), breakdown=S.DEFAULT_BREAKDOWN)
    # as stored (the builders give an int where the model says float for a case with no aux kernels)
    assert got.to_json() == _as_stored(fresh).to_json()
    assert len(_cached(cache)) == 3 and _snapshot(run) == changed


def test_a_copied_run_rehashes_and_still_loads(tmp_path: Path, cache: Path) -> None:
    """The frames' hashes are remembered per folder by size, time and inode; a copy (new times) is hashed again
    and, its content being the same, loads the stored Analysis."""
    run = _imported("h200-gemm-probe", tmp_path / "a")
    copy = tmp_path / "b" / run.name
    shutil.copytree(run, copy)
    with pytest.MonkeyPatch.context() as mp:
        _no_build(mp)
        load_analysis(open_run(copy))
    assert _cached(cache) == []


def test_a_bundle_read_uses_the_cache(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bundle holds no stored Analysis (run.json, frames, raw): its first read builds into the cache, the next
    loads it from there."""
    from tracekit.bundle import write_bundle

    run = _imported("h200-gemm-probe", tmp_path)
    zipped = tmp_path / "probe.zip"
    write_bundle(open_run(run), zipped)
    first = load_analysis(open_run(zipped))
    assert len(_cached(cache)) == 1
    with monkeypatch.context() as mp:
        _no_build(mp)
        assert load_analysis(open_run(zipped)).to_json() == first.to_json()
    said: list[str] = []
    load_analysis(open_run(zipped), say=said.append)
    assert said == []  # a bundle cannot be rebuilt in place: no hint


def test_import_rebuild_refreshes_the_stored_analysis(tmp_path: Path) -> None:
    """A stored Analysis of another version is replaced by ``tracekit import --rebuild``; reads then load it."""
    run = _imported("h200-gemm-probe", tmp_path)
    path = run / S.STORED_FILE
    old = S.read_stored(path)
    assert old is not None
    stale = msgspec.structs.replace(old.inputs, tracekit_version="0.0.1")
    path.write_bytes(msgspec.msgpack.encode(S.Stored(stale.key(), stale, old.analysis)))
    said: list[str] = []
    load_analysis(open_run(run), say=said.append)
    assert len(said) == 1 and f"tracekit import --rebuild {run}" in said[0]
    try:
        main(["import", "--rebuild", str(run)])
    except SystemExit as exc:
        assert exc.code in (0, None)
    new = S.read_stored(path)
    assert new is not None and new.inputs.tracekit_version == S.code_version() and new.key != stale.key()
    said.clear()
    with pytest.MonkeyPatch.context() as mp:
        _no_build(mp)
        load_analysis(open_run(run), say=said.append)
    assert said == []


def test_a_run_without_a_stored_analysis_reads_and_says_how_to_store_it(tmp_path: Path, cache: Path) -> None:
    """A run imported before the Analysis was stored: every read command works, prints what it printed, and says
    once on stderr how to store it; the run stays byte-identical."""
    run = _imported("h200-gemm-probe", tmp_path)
    stored_out = {}
    env = {"TRACEKIT_CACHE_DIR": str(cache.parent), "COLUMNS": "120", "NO_COLOR": "1"}
    commands = [["explain", "--json"], ["show", "--json"], ["report", "--format", "json"], ["explain"]]

    def read(args: list[str]) -> subprocess.CompletedProcess[str]:
        import os

        return subprocess.run(
            [sys.executable, "-m", "tracekit", args[0], str(run), *args[1:]],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=300,
        )

    for args in commands:
        done = read(args)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        stored_out[args[0], len(args)] = done.stdout
    (run / S.STORED_FILE).unlink()
    before = _snapshot(run)
    for args in commands:
        done = read(args)
        assert done.returncode == 0, done.stderr
        assert done.stdout == stored_out[args[0], len(args)]
        lines = done.stderr.strip().splitlines()
        assert lines == [S.hint_line(open_run(run))], done.stderr
    assert _snapshot(run) == before and _cached(cache)


def test_no_view_builds_the_analysis_of_an_imported_run(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """show (table and --json), explain, report, compare and the TUI's loading all load the stored Analysis:
    the builder refuses to run, and none of them fails."""
    from click.testing import CliRunner

    from tracekit.analyzers.analysis import build
    from tracekit.cli import cli
    from tracekit.tui.data import analyze, load_run

    run = _imported("h200-bench-gemm", tmp_path)
    other = _imported("h200-capture-gemm", tmp_path)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a view built the Analysis")

    monkeypatch.setattr(build, "analyze_frames", refuse)
    runner = CliRunner()
    for args in (
        ["show", str(run)],
        ["show", str(run), "--json"],
        ["explain", str(run)],
        ["explain", str(run), "--json"],
        ["report", str(run), "--format", "json"],
        ["report", str(run), "-o", str(tmp_path / "t.md")],
        ["compare", str(other), str(run)],
    ):
        done = runner.invoke(cli, args)
        assert done.exit_code == 0, (args, done.output[-2000:], done.exception)
    data = load_run(run)
    assert analyze(data).to_json() == load_analysis(open_run(run)).to_json()
    assert _cached(cache) == []
