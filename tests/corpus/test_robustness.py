"""Bad input end to end through the CLI: a corpus of damaged real files (truncated, bit-flipped, wrong content,
old schemas, hostile kernel names), damaged run folders, and a capture that runs out of disk.

Every file goes through ``tracekit import F -o RUN`` in a fresh process; every run that comes out goes through
``show``, ``show --json``, ``explain``, ``explain --json``, ``report -o`` (subprocesses) and ``view`` (the app
factory under ``App.run_test()``). Each answer is exit 0, 2 or 4 (4 marked partial in run.json), never a
traceback; an error is one ``tracekit:`` line; ``--json`` output parses; each call ends within 30 s. The
subprocesses run three at a time in one session fixture, so the file takes about a minute on two cores.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from tests.support import robustness_corpus as C
from tracekit.run import Run

pytestmark = (
    pytest.mark.slow
)  # the session fixture runs ~150 CLI processes: CI runs it, `-m "not slow"` skips it

# import: expected exit code and a fragment of the one line it prints (exit 2) per corpus file
EXPECT_IMPORT: dict[str, tuple[int, str | None]] = {
    "truncated-half.ncu-rep": (2, "past the end of the file"),
    "truncated-header.ncu-rep": (2, "impossible header size"),
    "bitflip.ncu-rep": (2, "damaged"),
    "empty.ncu-rep": (2, "is empty"),
    "bomb.json.gz": (2, "decompression bomb"),
    "text.ncu-rep": (2, "is not a file tracekit reads"),
    "kineto-inside.ncu-rep": (0, None),
    "truncated.ncu-rep.xz": (2, "damaged xz file"),
    "old-tool.ncu-rep": (0, None),
    "truncated.sqlite": (2, "is truncated: its header says"),
    "bitflip.sqlite": (2, "cannot be opened as SQLite"),
    "no-kernel-table.sqlite": (0, None),
    "old-schema.sqlite": (0, None),
    "not-nsys.sqlite": (2, "not an Nsight Systems export"),
    "pdf.sqlite": (2, "is not a file tracekit reads"),
    "other-exporter.sqlite": (0, None),
    "truncated.json.gz": (4, None),
    "bitflip.json.gz": (2, "damaged gz file"),
    "empty.json.gz": (2, "empty gz file"),
    "nan-huge-missing.json": (0, None),
    "not-a-trace.json": (2, "is not a file tracekit reads"),
    "events-not-list.json": (2, "is not a PyTorch profiler trace"),
    "text.json.gz": (2, "is not a file tracekit reads"),
    "old-kineto.json.gz": (0, None),
    "truncated.csv": (2, "holds no kernels"),
    "unrelated.csv": (2, "is not a file tracekit reads"),
    "bad-lines.jsonl": (4, None),
    "probe.nsys-rep": (2, "nsys export --type sqlite"),
    "folder": (2, "is a folder"),
    "missing.ncu-rep": (2, "does not exist"),
    "hostile.sqlite": (0, None),
    "hostile.json": (4, None),
    "hostile-failures.jsonl": (0, None),
}
RUN_CASES = sorted(n for n, (rc, _) in EXPECT_IMPORT.items() if rc != 2)
HOSTILE = [c.name for c in C.HOSTILE_CASES]
# every command on every run; the text renderings (show, explain) on the hostile runs and two real ones
COMMANDS = {
    "show-json": ["show", "{run}", "--json"],
    "explain-json": ["explain", "{run}", "--json"],
    "report": ["report", "{run}", "-o", "{out}/report.md"],
}
TEXT_COMMANDS = {"show": ["show", "{run}"], "explain": ["explain", "{run}"]}
TEXT_RUNS = [*HOSTILE, "old-schema.sqlite", "old-kineto.json.gz"]
# damaged run folders: exit 2 with a fragment of its line, or 0 after a rebuild from raw/
EXPECT_BAD_RUN: dict[str, tuple[int, str | None]] = {
    "run-json-truncated": (2, "is not valid JSON"),
    "run-json-not-json": (2, "is not valid JSON"),
    "run-json-wrong-format": (2, "is not a tracekit manifest"),
    "run-json-a-list": (2, "is not a tracekit manifest"),
    "run-json-future-schema": (2, "schema version 99"),
    "run-json-missing": (2, "is not a tracekit run"),
    "frame-truncated": (2, "tracekit import --rebuild"),
    "frame-not-parquet": (2, "tracekit import --rebuild"),
    "frames-stale-schema": (0, None),
    "frames-missing": (0, None),
    "frames-and-raw-missing": (2, "no raw files to rebuild them from"),
    "frames-and-raw-emptied": (2, "no raw files to rebuild them from"),
    "stale-frames-no-raw": (2, "no raw files to rebuild them from"),
}


def _sh(args: list[str], run: Path, out: Path) -> list[str]:
    return [a.format(run=run, out=out) for a in args]


@pytest.fixture(scope="session")
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Build the corpus and damaged runs, and run every CLI call (three at a time); tests read the results."""
    try:
        shared: Path | None = request.getfixturevalue("shared_data")
    except pytest.skip.Exception:
        shared = None
    base = tmp_path_factory.mktemp("robust")
    src = C.find_sources(shared, base / "src")
    if src.ncu is None or src.sqlite is None:
        pytest.skip(
            "neither ../shared/data/h200-probe nor the committed samples hold the probe's ncu + sqlite"
        )
    files = C.build_corpus(src, base / "files", C.CASES + C.HOSTILE_CASES)
    env = {"TRACEKIT_CACHE_DIR": str(base / "cache")}
    pool = ThreadPoolExecutor(3)

    def import_one(name: str) -> C.Result:
        return C.cli("import", files[name], "-o", base / "runs" / name, env=env)

    present = [n for n, p in files.items() if p is not None]
    imports = dict(zip(present, pool.map(import_one, present), strict=True))

    # the good run the damaged copies come from: the probe's ncu report + nsys export
    from tracekit.analyzers.importer import import_files

    good, _ = import_files([src.ncu, src.sqlite], base / "good")
    bad_runs = C.build_bad_runs(good.path, base / "bad")

    def commands(item: tuple[str, Path]) -> dict[str, C.Result]:
        name, run = item
        out = base / "out" / name
        out.mkdir(parents=True, exist_ok=True)
        cmds = dict(COMMANDS)
        if name in TEXT_RUNS or name.startswith("frames-"):
            cmds.update(TEXT_COMMANDS)
        return {c: C.cli(*_sh(args, run, out), env=env) for c, args in cmds.items()}  # in order: one rebuild

    targets = {n: base / "runs" / n for n, r in imports.items() if r.rc in (0, 4)}
    targets.update(bad_runs)
    results = dict(zip(targets, pool.map(commands, targets.items()), strict=True))
    pool.shutdown()
    original = json.loads(C.cli("show", good.path, "--json", env=env).stdout)
    con = sqlite3.connect(f"file:{src.sqlite}?mode=ro", uri=True)
    try:  # what the source export holds, read with SQL (24 in ../shared's probe, 99 in the committed sample's)
        (source_kernels,) = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    finally:
        con.close()
    return {
        "source_kernels": source_kernels,
        "base": base,
        "files": files,
        "imports": imports,
        "runs": targets,
        "results": results,
        "original": original,
    }


def _check_answer(r: C.Result, *, json_out: bool = False) -> None:
    """The contract every call keeps: a documented exit, no traceback, one error line, JSON that parses."""
    assert r.rc in (0, 2, 4), (r.args, r.rc, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and "panicked" not in r.stderr, r.stderr[-2000:]
    assert r.seconds < C.TIME_LIMIT_S
    assert r.max_rss_mb is not None and r.max_rss_mb < C.MEMORY_LIMIT_MB, (r.args, r.max_rss_mb)
    if r.rc == 2:
        # import's progress lines ("tracekit: reading F") may come first; the error itself is one line
        lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("tracekit: reading ")]
        assert len(lines) == 1 and lines[0].startswith("tracekit: "), r.stderr
    elif json_out:
        json.loads(r.stdout)


def _case(world: dict[str, Any], name: str) -> C.Result:
    if name not in world["imports"]:
        pytest.skip(f"{name}: its source file is absent here")
    return world["imports"][name]


# --- import -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(EXPECT_IMPORT))
def test_import_answers_each_bad_file(world: dict[str, Any], name: str) -> None:
    r = _case(world, name)
    _check_answer(r)
    rc, says = EXPECT_IMPORT[name]
    assert r.rc == rc, (r.rc, r.stderr)
    run = world["base"] / "runs" / name
    if rc == 2:
        assert says is not None and says in r.stderr
        assert not run.exists(), "a refused import must write nothing"
        return
    manifest = Run.open(run).manifest
    assert bool(manifest["partial"]) == (rc == 4)
    if rc == 4:
        assert "(partial)" in r.stdout
        assert manifest["import_warnings"] or any(s["status"] != "ok" for s in manifest["sources"])
    # what was given is kept, byte for byte
    kept = run / "raw" / name
    assert kept.read_bytes() == world["files"][name].read_bytes()


def test_corpus_counts_hold_real_numbers(world: dict[str, Any]) -> None:
    """The files that import hold what the real files hold: the old schema keeps every probe kernel."""
    counts = {
        n: json.loads(res["show-json"].stdout)["kernel_count"]
        for n, res in world["results"].items()
        if n in world["imports"] and res["show-json"].rc == 0
    }
    want = world["source_kernels"]
    assert want > 0
    assert counts["old-schema.sqlite"] == want and counts["hostile.sqlite"] == want
    assert counts["no-kernel-table.sqlite"] == 0
    assert counts["hostile.json"] == 9  # every event kept, the one with bytes not UTF-8 included
    assert counts["nan-huge-missing.json"] >= 4
    if "truncated.json.gz" in counts:
        assert 0 <= counts["truncated.json.gz"] < counts.get("kineto-inside.ncu-rep", 10**9)


# --- commands on every run --------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", RUN_CASES)
def test_commands_on_imported_runs(world: dict[str, Any], name: str) -> None:
    _case(world, name)
    results = world["results"][name]
    for cmd, r in results.items():
        _check_answer(r, json_out=cmd.endswith("json"))
        assert r.rc == 0, (cmd, r.stderr)
    data = json.loads(results["show-json"].stdout)
    assert data["run"]["partial"] == (EXPECT_IMPORT[name][0] == 4)
    report = (world["base"] / "out" / name / "report.md").read_text()
    assert report.startswith("#")
    if data["run"]["partial"]:
        assert "(partial)" in report


@pytest.mark.parametrize("name", sorted(EXPECT_BAD_RUN))
def test_damaged_run_folders(world: dict[str, Any], name: str) -> None:
    rc, says = EXPECT_BAD_RUN[name]
    for cmd, r in world["results"][name].items():
        _check_answer(r, json_out=cmd.endswith("json"))
        assert r.rc == rc, (cmd, r.stderr)
        if rc == 2:
            assert says in r.stderr, (cmd, r.stderr)
    if rc == 0:  # rebuilt from raw/: the same numbers as the run it was copied from
        data = json.loads(world["results"][name]["show-json"].stdout)
        orig = world["original"]
        assert (data["kernel_count"], data["ncu_kernel_count"]) == (
            orig["kernel_count"],
            orig["ncu_kernel_count"],
        )
        assert (
            data["kernel_count"] == world["source_kernels"] and len(data["gemms"]) == len(orig["gemms"]) > 0
        )
        assert not Run.open(world["runs"][name]).frames_current()  # rebuilt in memory: reads never write


def test_stale_frames_are_never_replaced_by_empty_ones(world: dict[str, Any]) -> None:
    run = world["runs"]["stale-frames-no-raw"]
    assert (run / "frames" / "kernels.parquet").stat().st_size > 1000


# --- hostile kernel names ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["hostile.sqlite", "hostile.json"])
def test_hostile_names_in_show_and_explain(world: dict[str, Any], name: str) -> None:
    _case(world, name)
    res = world["results"][name]
    for cmd in ("show", "explain", "show-json", "explain-json"):
        out = res[cmd].stdout
        assert "\x1b" not in out and "\x07" not in out, cmd  # an escape never reaches the terminal raw
    show = res["show"].stdout
    assert "[bold red]x[/]" in show  # the literal text: Rich did not eat it as markup
    assert "\\x1b[31mred" in show  # the escape shown visibly
    assert "[link=https://evil" in show


def test_hostile_names_keep_the_markdown_well_formed(world: dict[str, Any]) -> None:
    for name in (*HOSTILE,):
        if name not in world["imports"]:
            continue
        md = (world["base"] / "out" / name / "report.md").read_text()
        assert "\x1b" not in md and "\x07" not in md
        lines = md.splitlines()
        assert not any(len(ln) > 20_000 for ln in lines)  # 10,000-character names are elided
        tokens = MarkdownIt("commonmark").enable("table").parse(md)
        # a table row per line: every row of a table has as many cells as its header
        rows, cells, in_table = [], 0, False
        for t in tokens:
            if t.type == "table_open":
                in_table, rows = True, []
            elif t.type == "tr_open":
                cells = 0
            elif t.type in ("th_open", "td_open"):
                cells += 1
            elif t.type == "tr_close":
                rows.append(cells)
            elif t.type == "table_close":
                assert len(set(rows)) == 1, (name, rows)
                in_table = False
        assert not in_table
        text_lines = [ln for ln in lines if ln.startswith("|")]
        assert all(ln.rstrip().endswith("|") for ln in text_lines)
    md = (world["base"] / "out" / "hostile-failures.jsonl" / "report.md").read_text()
    html = MarkdownIt("commonmark").enable("table").render(md)
    assert 'href="https://evil' not in html
    assert "[bold red]x[/]" in md.replace("\\[", "[").replace("\\]", "]")


def _run_async(coro: Any) -> Any:
    return asyncio.run(coro)


async def _view(run: Path) -> dict[str, Any]:
    """Open ``run`` in the app; return what the overview (or its error dialog) shows and the kernel rows."""
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.dialogs import ErrorScreen

    app = make_app(run)
    seen: dict[str, Any] = {"error": None, "kernels": []}
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(200):
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            screen = app.screen
            if isinstance(screen, ErrorScreen) or getattr(screen, "analysis", None) is not None:
                break
        if isinstance(app.screen, ErrorScreen):
            seen["error"] = (app.screen.error_title, f"{app.screen.message} {app.screen.hint}")
            return seen
        await pilot.press("k")
        for _ in range(100):
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
            if getattr(app.screen, "table", None) is not None and app.screen.table.row_count:
                break
        table = app.screen.table
        seen["kernels"] = [
            "".join(seg.text for seg in table.render_line(y)) for y in range(1, min(8, table.row_count + 1))
        ]
    return seen


@pytest.mark.parametrize(
    "name",
    ["hostile.sqlite", "hostile.json", "truncated.json.gz", "run-json-future-schema", "frame-truncated"],
)
def test_view(world: dict[str, Any], name: str) -> None:
    run = world["runs"].get(name)
    if run is None:
        pytest.skip(f"{name}: its source file is absent here")
    seen = _run_async(_view(run))
    if name in EXPECT_BAD_RUN:  # shown as a dialog with the same message as the CLI's, the app alive
        title, message = seen["error"]
        assert not title.startswith("internal error") and EXPECT_BAD_RUN[name][1] in message + title
        return
    assert seen["error"] is None
    if name.startswith("hostile"):
        text = "\n".join(seen["kernels"])
        assert "\x1b" not in text and ("[bold red]x[/]" in text or "\\x1b[31mred" in text), text


# --- disk full during a capture ---------------------------------------------------------------------------------
def _capture_with_file_limit(tmp_path: Path, limit: int, code: str) -> subprocess.CompletedProcess[str]:
    """``tracekit capture`` with RLIMIT_FSIZE: a write past ``limit`` bytes fails with EFBIG (Python ignores
    SIGXFSZ), as on a full disk. The limit is set by a small trampoline process that then becomes tracekit, not
    by a ``preexec_fn``: that would fork this test process, and a pytest process that has mapped a large address
    space (polars' allocator) can be refused the fork (ENOMEM) under the kernel's overcommit heuristic."""
    trampoline = (
        "import os, resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]),) * 2);"
        "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
    )
    return subprocess.run(
        [
            sys.executable,
            "-c",
            trampoline,
            str(limit),
            *("-m", "tracekit", "capture", "-o", str(tmp_path / "run"), "--timeout", "20", "--"),
            sys.executable,
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


CHATTY = "for i in range(20000): print('line %d ' % i + 'x' * 80)"


def test_disk_full_while_logging_keeps_a_valid_incomplete_run(tmp_path: Path) -> None:
    p = _capture_with_file_limit(tmp_path, 200_000, CHATTY)
    assert p.returncode == 4 and "Traceback" not in p.stderr, p.stderr[-2000:]
    run = Run.open(tmp_path / "run")
    assert run.status == "incomplete" and "could not write raw/plain.log" in run.manifest["incomplete_reason"]
    log = (run.raw_dir / "plain.log").read_bytes()
    assert len(log) == 200_000 and log.startswith(b"line 0 ")  # what fitted is kept
    assert run.frames_current()


def test_disk_full_for_the_manifest_is_one_line_and_the_last_manifest_stays(tmp_path: Path) -> None:
    p = _capture_with_file_limit(tmp_path, 3_000, CHATTY)
    assert p.returncode == 4 and "Traceback" not in p.stderr, p.stderr[-2000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("tracekit: incomplete: capture into") and "tracekit import --rebuild" in last
    run = Run.open(tmp_path / "run")  # the last manifest that fitted, still valid JSON
    assert run.status in ("capturing", "incomplete")
    # with room again, a later import completes it
    r = C.cli("import", "--rebuild", tmp_path / "run")
    assert r.rc == 0, r.stderr
    assert Run.open(tmp_path / "run").frames_current()


def test_benchmark_hitting_the_limit_is_a_recorded_crash(tmp_path: Path) -> None:
    code = "import os; open(os.environ['TRACEKIT_RUN_DIR'] + '/raw/big.bin', 'wb').write(b'x' * 10**6)"
    p = _capture_with_file_limit(tmp_path, 200_000, code)
    assert p.returncode == 4 and "Traceback" not in p.stderr.split("plain pass")[0]
    run = Run.open(tmp_path / "run")
    assert run.status == "incomplete" and "exit status 1" in run.manifest["incomplete_reason"]
    fail = json.loads((run.raw_dir / "failures.jsonl").read_text().splitlines()[0])
    assert "File too large" in fail["traceback"]


def test_frames_that_cannot_be_written_are_a_storage_error(tmp_path: Path, world: dict[str, Any]) -> None:
    """``tracekit import`` onto a full disk: one line, exit 2, no half-written frame left behind."""
    src = world["files"]["nan-huge-missing.json"]
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000));"
        "from tracekit.cli import main; main(sys.argv[1:])"
    )
    p = subprocess.run(
        [sys.executable, "-c", code, "import", str(src), "-o", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and lines[-1].startswith("tracekit: cannot write:"), p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    assert not list((tmp_path / "run" / "frames").glob("*.tmp")) and not list(
        (tmp_path / "run" / "frames").glob(".*")
    )
    shutil.rmtree(tmp_path / "run")
