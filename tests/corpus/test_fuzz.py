"""A seeded fuzz campaign: real profiler files damaged (tests/support/fuzz_corpus.py), each through ``tracekit import``.

Every damaged copy of the shared files (nsys SQLite exports, Kineto traces, an ncu report, ncu CSV exports;
byte flips, truncation, a duplicated chunk, SQL-level damage: dropped tables, NULLs, wrong types, malformed
pages) goes through the CLI's own entry point, ``tracekit.cli.main``, in this process (a fresh interpreter per
case would cost ~1 s of imports each). The contract, per case:

- exit 0, 2 or 4, never 1 (an internal error);
- exit 2: one ``tracekit:`` line saying what is wrong (after the ``reading F`` progress line), no traceback,
  and nothing written;
- exit 0 or 4: the run is written, marked partial in run.json exactly on exit 4, and ``show --json`` (which runs
  the GEMM analysis on what was kept) exits 0 and says whether it is partial;
- every stderr line is a ``tracekit:`` line (no exception text spilling over several lines);
- each case ends within ``CASE_LIMIT_S``.

The damaged files that broke tracekit before the readers were fixed (exit 1, a polars abort, 47 s to answer)
are kept by name in ``REGRESSIONS`` and run in a subprocess, as a user runs them (an abort there fails one test;
in this process it would end the session). A case is rebuilt from its name alone:
``fuzz_corpus.by_name(SHARED, "probe.sqlite~pages-363104290").make(path)``. About 170 cases; the file takes
~30 s on two cores.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import fuzz_corpus as F
from tracekit.run import Run

CASE_LIMIT_S = 20.0
"""Wall time one damaged file may take to import (a 75k-event trace damaged in the middle took 30 s once)."""

# damaged files that ended in an internal error (exit 1), took too long, or were refused whole for one bad
# event, before the readers were fixed; and what broke
REGRESSIONS = {
    "mock.sqlite~huge-389462909": "device = 2**63 - 1 failed the cast to Int32",
    "mock.sqlite~pages-576903739": "PRAGMA table_info: a column type that is not UTF-8",
    "probe.sqlite~flip16-196676841": "sqlite_master: a table name that is not UTF-8 (UnicodeDecodeError)",
    "probe.sqlite~pages-363104290": "PRAGMA table_info: could not decode to UTF-8",
    "healthy_1pct.sqlite~dup-311519900": "max(rowid) < min(rowid) in a damaged b-tree (seen while fixing)",
    "ncu_raw.csv~flip16-664224382": "a value past Int32 in the ncu frame (polars ComputeError)",
    "ncu_raw.csv~cells-1059921048": "an ID cell of 1e999 (OverflowError: float infinity to integer)",
    "resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz~dup-78665716": "47 s to refuse it",
    "h100__gaunernst_bert-small-uncased__1016001.json.gz~values-1027333849": "an event whose cat is an object",
    "h100__gaunernst_bert-small-uncased__1016001.json.gz~values-799350778": "one event that is not an object",
    "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz~values-489520195": "2**70 in "
    "deviceProperties (polars ComputeError)",
    "probe.sqlite~blob-782593592": "kernels without a start in GEMM ranges: show / explain / report exit 1",
    "probe.sqlite~huge-3682109": "shared memory of 2**63 - 1 bytes overflowed the GEMM frame in show",
    "healthy_1pct.sqlite~flip16-459437671": "text not UTF-8 in a failed cast's message: polars aborted (SIGABRT)",
}


@dataclass
class Answer:
    """What one in-process CLI call did."""

    rc: int
    stdout: str
    stderr: str
    seconds: float


def call(*args: str | Path) -> Answer:
    """``tracekit ARGS`` through ``tracekit.cli.main``, in this process, as the console script runs it."""
    from tracekit.cli import main

    out, err = io.StringIO(), io.StringIO()
    rc = 0
    start = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
    return Answer(rc, out.getvalue(), err.getvalue(), time.monotonic() - start)


def check(name: str, answer: Answer, run: Path) -> None:
    """The contract of the module docstring for one damaged file imported into ``run``."""
    why = f"{name}: exit {answer.rc}\n{answer.stderr[-3000:]}"
    assert answer.rc in (0, 2, 4), why
    assert "Traceback" not in answer.stderr, why
    lines = [ln for ln in answer.stderr.splitlines() if ln.strip()]
    assert all(ln.startswith("tracekit: ") for ln in lines), why
    assert answer.seconds < CASE_LIMIT_S, f"{name}: {answer.seconds:.1f} s"
    if answer.rc == 2:
        said = [ln for ln in lines if not ln.startswith("tracekit: reading ")]
        assert len(said) == 1 and said[0].startswith("tracekit: cannot read file: "), why
        assert not run.exists(), f"{name}: a refused import must write nothing"
        return
    manifest = Run.open(run).manifest
    assert bool(manifest["partial"]) == (answer.rc == 4), why
    if answer.rc == 4:
        assert "(partial)" in answer.stdout
        assert manifest["import_warnings"] or any(s["status"] != "ok" for s in manifest["sources"])


@pytest.fixture(scope="session")
def campaign(
    shared_data: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Answer, Path, Answer | None]]:
    """Import every mutant once; the partial runs also go through ``show --json``."""
    base = tmp_path_factory.mktemp("fuzz")
    results: dict[str, tuple[Answer, Path, Answer | None]] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRACEKIT_CACHE_DIR", str(base / "cache"))
        mp.setenv("COLUMNS", "100")
        for i, m in enumerate(F.campaign(shared_data)):
            folder = base / str(i)
            folder.mkdir()
            damaged = m.make(folder / m.source.name)
            run = folder / "run"
            answer = call("import", damaged, "-o", run)
            shown = call("show", run, "--json") if answer.rc in (0, 4) else None
            results[m.name] = (answer, run, shown)
    return results


FORMATS = sorted({fmt for fmt, _, _ in F.SOURCES})


@pytest.mark.parametrize("fmt", FORMATS)
def test_damaged_files_never_end_in_an_internal_error(
    campaign: dict[str, tuple[Answer, Path, Answer | None]], fmt: str
) -> None:
    names = {m.name for m in F.campaign(F.SHARED) if m.fmt == fmt}
    cases = {n: r for n, r in campaign.items() if n in names}
    if not cases:
        pytest.skip(f"no {fmt} source file under ../shared/data")
    for name, (answer, run, _) in cases.items():
        check(name, answer, run)


def test_imported_runs_show_and_partial_ones_say_so(
    campaign: dict[str, tuple[Answer, Path, Answer | None]],
) -> None:
    """``show --json`` (which runs the GEMM analysis) on every run a damaged file made: exit 0, marked partial
    exactly when the import said so."""
    shown = {n: (a, s) for n, (a, _, s) in campaign.items() if s is not None}
    assert any(a.rc == 4 for a, _ in shown.values()), "the campaign should hold files that import in part"
    for name, (answer, show) in shown.items():
        assert show.rc == 0, (name, show.stderr[-2000:])
        assert json.loads(show.stdout)["run"]["partial"] is (answer.rc == 4), name


def test_the_campaign_covers_every_answer(campaign: dict[str, tuple[Answer, Path, Answer | None]]) -> None:
    """The damage is neither all fatal nor all harmless: each answer occurs, for each format with sources."""
    by_fmt: dict[str, set[int]] = {}
    fmt_of = {m.name: m.fmt for m in F.campaign(F.SHARED)}
    for name, (answer, _, _) in campaign.items():
        by_fmt.setdefault(fmt_of[name], set()).add(answer.rc)
    assert by_fmt["nsys"] >= {0, 2, 4} and by_fmt["kineto"] >= {0, 2, 4}, by_fmt
    assert 2 in by_fmt["ncu"] and by_fmt["ncu-csv"] >= {0, 2}, by_fmt


def test_campaign_is_seeded(shared_data: Path, tmp_path: Path) -> None:
    """The same name gives the same bytes: a failing case is reproduced from its name alone."""
    for m in F.campaign(shared_data)[::9]:
        a = m.make(tmp_path / "a").read_bytes()
        b = F.by_name(shared_data, m.name).make(tmp_path / "b").read_bytes()
        assert a == b and a != m.source.read_bytes(), m.name


# --- the cases that used to crash, as a user runs them ------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regressions_in_a_subprocess(shared_data: Path, tmp_path: Path, name: str) -> None:
    m = F.by_name(shared_data, name)
    if not m.source.is_file():
        pytest.skip(f"{m.source} is absent")
    damaged = m.make(tmp_path / m.source.name)
    start = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "tracekit", "import", str(damaged), "-o", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TRACEKIT_CACHE_DIR": str(tmp_path / "cache")},
    )
    check(name, Answer(p.returncode, p.stdout, p.stderr, time.monotonic() - start), tmp_path / "run")
    if p.returncode != 2:  # what was kept goes through the GEMM analysis
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
            shown = call("show", tmp_path / "run", "--json")
        assert shown.rc == 0, shown.stderr


# --- the damage issue 18 names, made on purpose ------------------------------------------------------------------
def _zero_page_of(src: Path, dst: Path, table: str) -> Path:
    """A copy of ``src`` whose ``table``'s root b-tree page is overwritten: SQLite then answers "database disk
    image is malformed" when that table is read, and only then."""
    data = bytearray(src.read_bytes())
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        (page,) = con.execute("PRAGMA page_size").fetchone()
    finally:
        con.close()
    data[(root - 1) * page : root * page] = b"\xff" * page
    dst.write_bytes(bytes(data))
    return dst


@pytest.mark.parametrize(
    ("table", "rc"),
    [
        ("ENUM_NSYS_EVENT_TYPE", 0),  # the event-type lookup: the usual ids are used instead, with a warning
        ("NVTX_EVENTS", 4),  # kernels kept, ranges lost, marked partial
        ("StringIds", 4),  # kernels and ranges kept without names
        ("CUPTI_ACTIVITY_KIND_KERNEL", 4),  # ranges kept
    ],
)
def test_malformed_table_in_the_probe_export(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str, rc: int
) -> None:
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    damaged = _zero_page_of(shared_data / "h200-probe/probe.sqlite", tmp_path / "probe.sqlite", table)
    answer = call("import", damaged, "-o", tmp_path / "run")
    check(table, answer, tmp_path / "run")
    assert answer.rc == rc, answer.stderr
    assert table in answer.stderr and "malformed" in answer.stderr
    data: dict[str, Any] = json.loads(call("show", tmp_path / "run", "--json").stdout)
    assert (data["kernel_count"] > 0) == (table != "CUPTI_ACTIVITY_KIND_KERNEL")
    assert (data["range_count"] > 0) == (table != "NVTX_EVENTS")


def test_every_table_malformed_is_refused_in_one_line(shared_data: Path, tmp_path: Path) -> None:
    src = shared_data / "h200-probe/probe.sqlite"
    damaged = _zero_page_of(src, tmp_path / "a.sqlite", "CUPTI_ACTIVITY_KIND_KERNEL")
    damaged = _zero_page_of(damaged, tmp_path / "probe.sqlite", "NVTX_EVENTS")
    answer = call("import", damaged, "-o", tmp_path / "run")
    check("kernels and ranges malformed", answer, tmp_path / "run")
    assert answer.rc == 2 and "export the report again" in answer.stderr
    assert "is damaged: CUPTI_ACTIVITY_KIND_KERNEL could not be read (database disk image is malformed)" in (
        answer.stderr
    )


def test_device_name_not_utf8_is_kept_visibly(shared_data: Path, tmp_path: Path) -> None:
    """A GPU name whose bytes are not UTF-8: the device row stays, the bad bytes shown as U+FFFD, and said."""
    from tracekit.analyzers.readers.nsys.reader import read_nsys_sqlite

    path = tmp_path / "probe.sqlite"
    path.write_bytes((shared_data / "h200-probe/probe.sqlite").read_bytes())
    con = sqlite3.connect(path)
    con.execute("UPDATE TARGET_INFO_GPU SET name = CAST(x'483230ff30' AS TEXT)")
    con.commit()
    con.close()
    ex = read_nsys_sqlite(path)
    assert ex.frames["devices"]["name"].to_list() == ["H20\ufffd0"]
    assert any("not UTF-8" in w for w in ex.warnings)


def test_ncu_values_past_their_column_are_null_and_counted() -> None:
    """A bit flip in a report's launch metrics (a grid of 5,460,000,000 blocks, 1e300 registers): the kernel
    stays, those values are null and counted, the rest of the row is kept."""
    from tracekit.analyzers.readers.ncu.report import frames_from_actions

    action = {
        "range": 0,
        "action": 0,
        "name": "k",
        "demangled": "k",
        "nvtx": [],
        "rules": [],
        "metrics": [
            ["launch__grid_dim_x", "i", 5_460_000_000, ""],
            ["launch__registers_per_thread", "f", 1e300, ""],
            ["launch__grid_dim_y", "i", 7, ""],
        ],
    }
    lost: list[int] = []
    ncu = frames_from_actions([action], "x.ncu-rep", lost=lost)["ncu"]
    assert ncu.select("grid_x", "grid_y", "registers_per_thread").rows() == [(None, 7, None)]
    assert lost == [2]


def test_kernels_without_times_in_gemm_ranges(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe's PyTorch trace with every kernel's ``dur`` null: the kernels are kept (Kineto's reader keeps
    what it can), and show, explain and report still answer: a GEMM whose kernels have no time has no time."""
    import gzip

    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    doc = json.loads(gzip.decompress((shared_data / "h200-probe/torch_trace.json.gz").read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels:
        e["dur"] = None
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(doc))
    answer = call("import", trace, "-o", tmp_path / "run")
    check("dur null", answer, tmp_path / "run")
    for args in (("show",), ("show", "--json"), ("explain", "--json"), ("report", "-o", tmp_path / "r.md")):
        result = call(args[0], tmp_path / "run", *args[1:])
        assert result.rc == 0, (args, result.stderr)
    data = json.loads(call("show", tmp_path / "run", "--json").stdout)
    assert data["kernel_count"] == len(kernels) > 0 and data["range_count"] > 0
