"""Names read from files never become paths unsanitized: a GPU name (the calibration cache), a file's name (the
run's name, its name in raw/), a backend label (the sweep's log files) and a bundle's member names.

Hypothesis draws long names, control characters, path separators, ``..`` and non-ASCII text; each name's path is
then created for real in a temporary folder (the file system is the judge: ``File name too long`` and a path
that leaves the folder both fail). The end-to-end case is the damaged nsys export whose GPU name is 1,800
characters, which made ``show --json`` fail with ``OSError: [Errno 36]`` when the calibration folder existed.
"""

from __future__ import annotations

import json
import sqlite3
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit import devices
from tracekit.bundle import check_members
from tracekit.errors import BadInputError
from tracekit.run import RAW_NAME_BYTES, new_run_name, raw_name
from tracekit.slug import MAX_CHARS, slug

_PIECES = st.one_of(
    st.sampled_from(
        ["/", "\\", "..", ".", "\x00", "\x01", "\n", "\x7f", " ", "-", ":", "é", "漢", "\U0001f600"]
    ),
    st.characters(codec="utf-8"),
    st.text(max_size=4).map(lambda s: s * 120),  # long runs: names of hundreds of characters
)
NASTY = st.lists(_PIECES, max_size=60).map("".join)
"""Names a damaged or hostile file may carry: separators, dots, control characters, multi-byte text, up to
2,000 characters."""

_SAFE_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _lands_inside(folder: Path, component: str) -> None:
    """``component`` can be created as one file directly inside ``folder`` (not elsewhere, not too long)."""
    target = folder / component
    assert target.parent == folder, f"{component!r} is more than one path component"
    assert component not in ("", ".", ".."), component
    target.write_text("x")
    assert target.resolve().parent == folder.resolve()
    target.unlink()


@_SAFE_SETTINGS
@given(name=NASTY)
def test_slug_is_one_short_safe_component(tmp_path: Path, name: str) -> None:
    out = slug(name)
    assert 0 < len(out) <= MAX_CHARS
    assert out.isascii() and out == out.lower()
    assert not out.startswith((".", "-"))
    _lands_inside(tmp_path, out)


@_SAFE_SETTINGS
@given(a=NASTY, b=NASTY)
def test_different_long_or_changed_names_keep_different_slugs(a: str, b: str) -> None:
    # a name that had to be cut or changed carries a hash of itself: two such names differ
    if a != b and slug(a) == slug(b):
        assert " ".join(a.lower().split()) == " ".join(b.lower().split())


def test_ordinary_names_are_kept_readable() -> None:
    assert slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert slug("torch-fp8", lower=False) == "torch-fp8"
    assert devices.calibration_path("NVIDIA H200").name == "h200.json"
    cut = slug("x" * 500)
    assert len(cut) == MAX_CHARS and cut.startswith("x" * 40)


@_SAFE_SETTINGS
@given(name=NASTY)
def test_calibration_path_of_any_gpu_name(tmp_path: Path, name: str) -> None:
    path = devices.calibration_path(name)
    assert path.parent == devices.CALIBRATION_DIR.expanduser()
    _lands_inside(tmp_path, path.name)


@_SAFE_SETTINGS
@given(name=NASTY)
def test_run_name_of_any_file_name(tmp_path: Path, name: str) -> None:
    _lands_inside(tmp_path, new_run_name(name))


@_SAFE_SETTINGS
@given(name=NASTY.filter(lambda s: s not in ("", ".", "..") and "/" not in s and "\x00" not in s))
def test_raw_name_of_any_file_name(tmp_path: Path, name: str) -> None:
    got = raw_name(name)
    assert len(got.encode("utf-8", "surrogateescape")) <= RAW_NAME_BYTES
    _lands_inside(tmp_path, got)
    _lands_inside(tmp_path, f"{got.partition('.')[0]}-99.{got.partition('.')[2]}")  # a clash's number fits


def test_raw_name_keeps_the_suffixes_that_say_the_format() -> None:
    assert raw_name("trace.pt.trace.json.gz") == "trace.pt.trace.json.gz"
    long = raw_name("a" * 300 + ".pt.trace.json.gz")
    assert long.endswith(".json.gz") and len(long) < 100


@_SAFE_SETTINGS
@given(backend=NASTY)
def test_sweep_log_names_of_any_backend_label(tmp_path: Path, backend: str) -> None:
    # collectors/harness/sweep.py names its logs f"{slug(backend, lower=False)}.{n}.jsonl"
    _lands_inside(tmp_path, f"{slug(backend, lower=False, empty='backend')}.12.stderr.txt")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(component=NASTY.filter(lambda s: s and "\x00" not in s))
def test_bundle_members_with_any_name_are_refused_or_extractable(tmp_path: Path, component: str) -> None:
    zpath = tmp_path / "b.zip"
    name = f"raw/{component}"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("run.json", "{}")
        zf.writestr(name, "x")
    with zipfile.ZipFile(zpath) as zf:
        try:
            files = check_members(zpath, zf)
        except BadInputError:
            return  # refused with a message: the name never reached the file system
        for info in files:
            target = tmp_path / "out" / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("x")  # raises where a checked member cannot be created
            assert target.resolve().is_relative_to((tmp_path / "out").resolve())


def test_show_json_of_an_export_with_a_huge_gpu_name(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tracekit.analyzers.importer import import_files
    from tracekit.cli import main

    export = tmp_path / "probe.sqlite"
    export.write_bytes((shared_data / "h200-probe" / "probe.sqlite").read_bytes())
    huge = "NVIDIA " + "H\x01/../" * 300
    with sqlite3.connect(export) as con:
        con.execute("UPDATE TARGET_INFO_GPU SET name = ?", (huge,))
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(devices, "CALIBRATION_DIR", Path("~/.cache/tracekit/calibration"))
    (home / ".cache" / "tracekit" / "calibration").mkdir(
        parents=True
    )  # the cache exists: the name is looked up
    run, _ = import_files([export], tmp_path / "run")
    code = 0
    try:
        main(["show", str(run.path), "--json"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["kernel_count"] > 0
