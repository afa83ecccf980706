"""Reads never write: show, explain, report, compare, bundle and the TUI's loader leave a run byte-identical.

Each committed sample is copied twice: a writable copy as committed, and a read-only copy (``chmod -R a-w``) whose
manifest says its frames are of an older schema, so every read has to rebuild them from raw/ (in memory). Every
file of both copies is hashed before and after the reads. Running as root, the read-only bits do not stop a write;
the hashes still catch one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import zipfile
from pathlib import Path

import polars as pl
import pytest

from tracekit.analyzers.importer import import_into
from tracekit.analyzers.store import load_frames, open_run
from tracekit.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
RUNS = sorted(p.parent for p in SAMPLES.glob("*/run.json"))


def _snapshot(root: Path) -> dict[str, str]:
    """Path -> sha256 (or the mode, for a folder) of everything under ``root``."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else f"dir {p.stat().st_mode:o}"
    return out


def _chmod_tree(root: Path, writable: bool) -> None:
    for p in [root, *root.rglob("*")]:
        mode = p.stat().st_mode
        mode = mode | stat.S_IWUSR if writable else mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
        os.chmod(p, mode)


def _make_stale(run: Path) -> None:
    manifest = json.loads((run / "run.json").read_text())
    manifest["frames"]["schema_version"] = 1
    (run / "run.json").write_text(json.dumps(manifest, indent=2) + "\n")


def _cli(args: list[str]) -> int:
    try:
        main(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def _read_everything(run: Path, out: Path) -> list[tuple[str, int]]:
    """Every read command on ``run``; (command, exit code) of each."""
    from tracekit.tui.data import load_run

    codes = []
    for args in (
        ["show", str(run)],
        ["show", str(run), "--json"],
        ["explain", str(run)],
        ["explain", str(run), "--json"],
        ["report", str(run), "-o", str(out / "ticket.md")],
        ["compare", str(run), str(run)],
        ["bundle", str(run), "-o", str(out / "run.zip")],
    ):
        codes.append((" ".join(a for a in args if a != str(run)), _cli(args)))
    assert load_run(run).frames["kernels"].height == load_frames(open_run(run))["kernels"].height
    return codes


@pytest.mark.parametrize("sample", RUNS, ids=[p.name for p in RUNS])
def test_reads_leave_a_sample_byte_identical(
    sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    writable = tmp_path / "writable" / sample.name
    readonly = tmp_path / "readonly" / sample.name
    shutil.copytree(sample, writable)
    shutil.copytree(sample, readonly)
    _make_stale(readonly)
    assert not open_run(readonly).frames_current()
    _chmod_tree(readonly, writable=False)
    outs = tmp_path / "out-w", tmp_path / "out-r"
    for o in outs:
        o.mkdir()
    try:
        for run, out in ((writable, outs[0]), (readonly, outs[1])):
            before = _snapshot(run)
            codes = _read_everything(run, out)
            assert [c for c in codes if c[1] != 0] == [], capsys.readouterr().err
            after = _snapshot(run)
            changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
            assert changed == [], f"{run.name}: a read changed {changed}"
    finally:
        _chmod_tree(readonly, writable=True)
    capsys.readouterr()


def test_stale_frames_are_rebuilt_in_memory_and_bundled(tmp_path: Path) -> None:
    """A run whose frames are stale reads the same rows as a fresh import, and its bundle holds those frames."""
    sample = SAMPLES / "h200-capture-gemm"
    stale, fresh = tmp_path / "stale", tmp_path / "fresh"
    shutil.copytree(sample, stale)
    shutil.copytree(sample, fresh)
    _make_stale(stale)
    shutil.rmtree(stale / "frames")  # missing frames too: nothing on disk to fall back on
    import_into(open_run(fresh))
    run = open_run(stale)
    frames = load_frames(run)
    want = load_frames(open_run(fresh))
    for name in ("kernels", "ranges", "ncu", "measurements", "failures"):
        assert frames[name].equals(want[name]), name
    assert run.manifest["frames"]["in_memory"] is True and len(run.manifest["sources"]) >= 2
    assert not (stale / "frames").exists()

    out = tmp_path / "b.zip"
    assert _cli(["bundle", str(stale), "-o", str(out)]) == 0
    assert not (stale / "frames").exists()
    with zipfile.ZipFile(out) as zf:
        names = set(zf.namelist())
        assert "frames/kernels.parquet" in names
        kernels = pl.read_parquet(zf.open("frames/kernels.parquet").read())
        manifest = json.loads(zf.read("run.json"))
    assert kernels.height == want["kernels"].height
    assert manifest["frames"]["in_memory"] is False
    opened = open_run(out)
    assert opened.frames_current()
    assert load_frames(opened)["ranges"].height == want["ranges"].height
