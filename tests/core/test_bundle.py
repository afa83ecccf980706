"""Bundles: a round trip through a zip gives the same run, and hostile zips are refused with one clear line
before anything is written outside the bundle cache."""

from __future__ import annotations

import json
import stat
import warnings
import zipfile
from pathlib import Path

import pytest

from tests.support.report_data import probe_run
from tracekit.bundle import Limits, open_bundle, write_bundle
from tracekit.cli import main
from tracekit.errors import BadInputError

MANIFEST = json.dumps({"format": "tracekit-run", "schema_version": 1, "frames": None})


@pytest.fixture(scope="module")
def probe(shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    return probe_run(shared_data, tmp_path_factory.mktemp("probe") / "run")


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(cache))
    return cache


def _show(path: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    main(["show", str(path), "--json"])
    data = json.loads(capsys.readouterr().out)
    data["run"].pop("path")
    return data


@pytest.mark.parametrize("raw", [False, True])
def test_round_trip_show_equal(probe, tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: bool) -> None:
    out = tmp_path / "probe.zip"
    info = write_bundle(probe, out, raw=raw)
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
    assert names[0] == "run.json" and "frames/ncu.parquet" in names
    assert ("raw/probe.ncu-rep" in names) == raw and info["members"] == len(names)
    original = _show(probe.path, capsys)
    assert original["gemms"] and original["ncu_kernel_count"] == 5
    assert _show(out, capsys) == original
    # opened once per distinct file: the second open reuses the cache
    first = open_bundle(out)
    assert open_bundle(out).path == first.path and len(list((tmp_path / "cache" / "bundles").iterdir())) == 1


@pytest.mark.parametrize("raw", [False, True])
def test_sample_round_trip_every_command(
    samples_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], raw: bool
) -> None:
    """The committed capture sample (nsys + ncu + measurements) through a zip: show, explain and report read
    the bundle as they read the folder, and the bundle keeps the run's name."""
    from tracekit.analyzers.store import open_run

    src = samples_dir / "h200-capture-gemm"
    out = tmp_path / "capture.zip"
    write_bundle(open_run(src), out, raw=raw)
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
    assert ("raw/ncu.ncu-rep.xz" in names) == raw and ("raw/nsys.sqlite.xz" in names) == raw
    original = _show(src, capsys)
    assert original["ncu_kernel_count"] == 30 and original["gemms"]
    assert _show(out, capsys) == original
    main(["explain", str(src), "--json"])
    a = json.loads(capsys.readouterr().out)
    main(["explain", str(out), "--json"])
    b = json.loads(capsys.readouterr().out)
    assert a["cases"] and a["cases"] == b["cases"] and a["summary"] == b["summary"]
    main(["report", str(out)])
    assert capsys.readouterr().out.startswith("## tracekit report: `h200-capture-gemm`")


def test_bundles_are_reproducible(probe, tmp_path: Path) -> None:
    write_bundle(probe, tmp_path / "a.zip")
    write_bundle(probe, tmp_path / "b.zip")
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()


def test_bundle_refuses_bad_output(probe, tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match=r"must end in \.zip"):
        write_bundle(probe, tmp_path / "x.tar")
    with pytest.raises(BadInputError, match="inside the run"):
        write_bundle(probe, probe.path / "raw" / "x.zip", raw=True)


def _zip(path: Path, members: list[tuple[zipfile.ZipInfo | str, bytes]], **kw) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns on duplicate names: that is the point here
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, **kw) as zf:
            for info, data in members:
                zf.writestr(info, data)
    return path


def _symlink(name: str, target: str) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info, target.encode()


def _fifo(name: str) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFIFO | 0o644) << 16
    return info, b""


HOSTILE = {
    "traversal": ([("run.json", MANIFEST), ("raw/../../evil.txt", b"x")], "path traversal"),
    "traversal-top": ([("run.json", MANIFEST), ("../evil.txt", b"x")], "path traversal"),
    "absolute": ([("run.json", MANIFEST), ("/tmp/tracekit-evil.txt", b"x")], "absolute path"),
    "drive": ([("run.json", MANIFEST), ("C:/evil.txt", b"x")], "drive letter"),
    "backslash": ([("run.json", MANIFEST), ("raw\\..\\evil.txt", b"x")], "backslash"),
    "symlink": ([("run.json", MANIFEST), _symlink("raw/link", "/etc/passwd")], "symbolic link"),
    "fifo": ([("run.json", MANIFEST), _fifo("raw/pipe")], "special file"),
    "duplicate": ([("run.json", MANIFEST), ("raw/a.txt", b"1"), ("raw/a.txt", b"2")], "appears twice"),
    "case-duplicate": (
        [("run.json", MANIFEST), ("raw/A.txt", b"1"), ("raw/a.txt", b"2")],
        "differing only in case",
    ),
    "unexpected": (
        [("run.json", MANIFEST), ("sitecustomize.py", b"import os")],
        "not part of a tracekit run",
    ),
    "pickle-frame": ([("run.json", MANIFEST), ("frames/ncu.pkl", b"x")], "not part of a tracekit run"),
    "unknown-frame": ([("run.json", MANIFEST), ("frames/evil.parquet", b"x")], "not part of a tracekit run"),
    "hidden-raw": ([("run.json", MANIFEST), ("raw/.bashrc", b"x")], "not part of a tracekit run"),
    "no-manifest": ([("frames/ncu.parquet", b"x")], "no run.json"),
    "control-char": ([("run.json", MANIFEST), ("raw/a\x1b[2J.txt", b"x")], "control character"),
    # C1: U+009B is CSI to terminals that take 8-bit controls (tracekit/text.py, the one sanitizer)
    "c1-control-char": ([("run.json", MANIFEST), ("raw/a\x9b2J.txt", b"x")], "control character"),
    "bad-manifest": ([("run.json", b"{not json")], "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_bundles_refused(case: str, tmp_path: Path, _cache: Path) -> None:
    members, why = HOSTILE[case]
    work = tmp_path / "work"
    work.mkdir()
    bundle = _zip(work / f"{case}.zip", members)
    before = sorted(p for p in tmp_path.rglob("*"))
    with pytest.raises(BadInputError) as exc:
        open_bundle(bundle)
    line = exc.value.one_line()
    assert why in line and "\n" not in line and str(bundle) in line
    after = sorted(p for p in tmp_path.rglob("*"))
    # nothing new but (at most) the empty private cache folder
    assert [p for p in after if p not in before and not p.is_dir()] == []
    assert not list(_cache.glob("bundles/*/*"))
    assert not Path("/tmp/tracekit-evil.txt").exists() and not (tmp_path / "evil.txt").exists()


def test_decompression_bomb_refused(tmp_path: Path) -> None:
    bomb = _zip(tmp_path / "bomb.zip", [("run.json", MANIFEST), ("raw/zeros.bin", b"\0" * (64 << 20))])
    assert bomb.stat().st_size < 200_000  # 64 MiB of zeros deflate ~1000x
    with pytest.raises(BadInputError, match="decompression bomb"):
        open_bundle(bomb)


def test_absolute_size_caps(tmp_path: Path) -> None:
    data = bytes(range(256)) * 400  # ~100 KB, barely compressible
    z = _zip(tmp_path / "big.zip", [("run.json", MANIFEST), ("raw/a.bin", data), ("raw/b.bin", data)])
    with pytest.raises(BadInputError, match="byte limit"):
        open_bundle(z, limits=Limits(max_member_bytes=50_000))
    with pytest.raises(BadInputError, match="in all"):
        open_bundle(z, limits=Limits(max_total_bytes=150_000))
    with pytest.raises(BadInputError, match="members"):
        open_bundle(z, limits=Limits(max_members=2))


def test_cli_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = _zip(tmp_path / "t.zip", HOSTILE["traversal"][0])
    with pytest.raises(SystemExit) as exc:
        main(["show", str(bundle)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "path traversal" in err
    (tmp_path / "junk.zip").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(SystemExit) as exc:
        main(["show", str(tmp_path / "junk.zip")])
    assert exc.value.code == 2 and "not a readable zip" in capsys.readouterr().err


def test_stale_frames_need_the_rebuild_passed_in(samples_dir: Path, tmp_path: Path) -> None:
    """tracekit/bundle.py imports no analyzers: a run whose frames are missing (or were rebuilt in memory only)
    is refused with one line unless the caller passes the rebuild, as ``tracekit bundle`` does."""
    import shutil

    from tracekit.analyzers.store import load_frames, open_run
    from tracekit.commands.bundle import current_frames
    from tracekit.errors import SchemaError

    src = tmp_path / "run"
    shutil.copytree(samples_dir / "h200-capture-gemm", src)
    shutil.rmtree(src / "frames")
    run = open_run(src)
    out = tmp_path / "b.zip"
    with pytest.raises(SchemaError, match="missing or older") as exc:
        write_bundle(run, out)
    assert "\n" not in exc.value.one_line() and not out.exists()
    load_frames(run)  # rebuilt in memory: the manifest says current, the disk does not
    with pytest.raises(SchemaError, match="missing or older"):
        write_bundle(run, out)
    info = write_bundle(run, out, make_current=current_frames)
    assert info["members"] > 1 and not (src / "frames").exists()
    with zipfile.ZipFile(out) as zf:
        assert "frames/kernels.parquet" in zf.namelist()
