"""``tracekit show`` read by a person: cut tables say what they left out and how to see it, failures are grouped.

On the committed samples (h200-bench-gemm: 48 GEMMs and 120 failures of 10 FP4 / FP8 backends; h200-capture-gemm:
ranges, kernels and ncu kernels), through the CLI's entry point. Expected counts come from ``show --json`` and the
run's frames, never written into the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import robustness_corpus as C
from tracekit.analyzers.analysis.model import Failure
from tracekit.analyzers.analysis.sections import failure_groups, shapes_text
from tracekit.analyzers.importer import import_files
from tracekit.analyzers.store import load_frames, open_run
from tracekit.cli import main

BENCH = "h200-bench-gemm"
CAPTURE = "h200-capture-gemm"


def _show(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str, columns: int = 100
):
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setenv("NO_COLOR", "1")
    code = 0
    try:
        main(["show", *args])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def _json(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, run: Path) -> dict[str, Any]:
    return json.loads(_show(capsys, monkeypatch, str(run), "--json"))


def _expected_groups(failures: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    """The grouping, done here from the JSON: (backend, kinds, error type, first line of the message)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for f in failures:
        first = (f["message"] or "").strip().split("\n")[0].strip()
        groups.setdefault((f["backend"], f["error_type"], first), []).append(f)
    return {
        (b, ", ".join(dict.fromkeys(f["kind"] for f in members if f["kind"])), e, first): members
        for (b, e, first), members in groups.items()
    }


def test_cut_tables_say_how_many_rows_they_left_out(
    samples_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = samples_dir / BENCH
    data = _json(capsys, monkeypatch, run)
    out = _show(capsys, monkeypatch, str(run))
    gemms, groups = len(data["gemms"]), len(_expected_groups(data["failures"]))
    assert gemms > 15 and groups > 3
    assert f"… {gemms - 15} more GEMMs: `tracekit show {run} --all` or `--json`" in out
    assert f"… {groups - 15} more" not in out  # 10 groups fit in the default 15
    small = _show(capsys, monkeypatch, str(run), "--limit", "3")
    assert f"… {gemms - 3} more GEMMs" in small and f"… {groups - 3} more failure groups" in small
    every = _show(capsys, monkeypatch, str(run), "--all")
    assert "more GEMMs" not in every and "more failure groups" not in every
    rows = [ln for ln in every.splitlines() if ln.startswith("│ torch-")]
    assert len(rows) == gemms


def test_failures_are_grouped_with_count_and_shapes(
    samples_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = samples_dir / BENCH
    data = _json(capsys, monkeypatch, run)
    lines = _show(capsys, monkeypatch, str(run), columns=120).splitlines()
    expected = _expected_groups(data["failures"])
    header = next(ln for ln in lines if ln.startswith("Failures: "))
    assert header.startswith(f"Failures: {len(data['failures'])} in {len(expected)} groups")
    for (backend, kind, etype, first), members in expected.items():
        shapes = shapes_text([f["m"] for f in members], [f["n"] for f in members], [f["k"] for f in members])
        i = next(
            i
            for i, ln in enumerate(lines)
            if ln.split()[:2] == [backend, kind] and f"×{len(members)}  {shapes}" in ln
        )
        message = lines[i + 1].strip()
        assert message.rstrip("…") in f"{etype.rsplit('.', 1)[-1]}: {first}", (message, first)
    # the issue's own example, on the committed sweep: 12 NVFP4 calls, 6 values of M, 2 of N, one K
    nvfp4 = expected[
        next(key for key in expected if key[0] == "torch-nvfp4" and "CUBLAS_STATUS_NOT_SUPPORTED" in key[3])
    ]
    assert sorted({f["m"] for f in nvfp4}) == [16, 64, 256, 512, 1024, 4096]
    line = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["torch-nvfp4"])
    assert "unsupported" in lines[line] and "×12  M=16..4096, N=768|2048, K=6144" in lines[line]
    assert lines[line + 1].strip().startswith("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED")


def test_json_keeps_every_failure_in_full(
    samples_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run = samples_dir / BENCH
    data = _json(capsys, monkeypatch, run)
    frame = load_frames(open_run(run), ["failures"])["failures"]
    assert len(data["failures"]) == frame.height > 100
    assert [f["message"] for f in data["failures"]] == frame["message"].to_list()
    # the Analysis' failures: an empty text is None there (strings are never empty in the Analysis)
    assert [f["traceback"] for f in data["failures"]] == [t or None for t in frame["traceback"].to_list()]
    assert any("\n" in f["message"] for f in data["failures"])  # multi-line messages, whole


def test_lines_fit_the_terminal(
    samples_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for columns in (60, 80, 100):
        out = _show(capsys, monkeypatch, str(samples_dir / BENCH), "--all", columns=columns)
        # but the lines that hold the run's path (the `run` line, hints' commands), never folded (test_layout.py)
        run = str(samples_dir / BENCH)
        assert all(len(ln) <= columns for ln in out.splitlines() if run not in ln), columns


def test_ranges_kernels_and_ncu_tables_say_what_they_left_out(
    samples_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the run as a user in the checkout names it: the hint line quotes it, and an absolute path as long as some
    # clones' would wrap that line at 110 columns
    monkeypatch.chdir(samples_dir.parent)
    run = Path(samples_dir.name) / CAPTURE
    frames = load_frames(open_run(run))
    names = {
        "range names": frames["ranges"]["name"].n_unique(),
        "kernel names": frames["kernels"]["name"].n_unique(),
        "Nsight Compute kernels": frames["ncu"].height,
    }
    out = _show(capsys, monkeypatch, str(run), "--limit", "4", columns=110)
    flat = " ".join(out.split())  # a long checkout path wraps the line at 110 columns
    for what, total in names.items():
        assert total > 4, what
        assert f"… {total - 4} more {what}: `tracekit show {run} --all` or `--json`" in flat, what
    every = _show(capsys, monkeypatch, str(run), "--all", columns=110)
    assert "… " not in every.replace("…│", "").replace("… │", "")  # no "N more" line, only elided cells


def test_failure_groups_of_odd_records() -> None:
    """Unknown shapes, no message, a module path in the exception type, one shape and four values."""
    rows = zip(
        ["a", "a", "a", "a", "b", "b"],
        ["crashed", "crashed", "crashed", "crashed", "error", "error"],
        ["x.y.Boom", "x.y.Boom", "x.y.Boom", "x.y.Boom", None, None],
        ["bad\nmore", "bad\nother", " bad ", "bad", None, None],
        [1, 2, 3, 8, None, None],
        [5, 5, 5, 5, None, None],
        [7, 9, 7, 9, None, None],
        strict=True,
    )
    failures = [
        Failure(id=i, backend=b, kind=kind, error_type=e, message=msg, m=m, n=n, k=k)
        for i, (b, kind, e, msg, m, n, k) in enumerate(rows)
    ]
    g = failure_groups(failures)
    assert [(x.backend, x.kinds, x.count, x.shapes_text, x.message, x.failure_ids) for x in g] == [
        ("a", ["crashed"], 4, "M=1..8, N=5, K=7|9", "Boom: bad", [0, 1, 2, 3]),
        ("b", ["error"], 2, "shape unknown", "(no message)", [4, 5]),
    ]
    assert g[0].shapes == ["1x5x7", "2x5x9", "3x5x7", "8x5x9"] and g[1].shapes == []


def test_hostile_failures_stay_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Backends and messages holding Rich markup and escapes are shown as text, escapes made visible."""
    run, _ = import_files([C.hostile_jsonl(tmp_path / "failures.jsonl")], tmp_path / "run")
    out = _show(capsys, monkeypatch, str(run.path), columns=200)
    assert "\x1b" not in out and "\x07" not in out
    assert "[bold red]x[/]" in out and "\\x1b[31mred" in out and "[link=https://evil" in out


def test_show_in_a_subprocess(samples_dir: Path) -> None:
    """The console script as a user runs it: exit 0, the cut line and the groups on stdout, nothing on stderr."""
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "tracekit", "show", str(samples_dir / BENCH), "--limit", "5"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert "more GEMMs: `tracekit show" in p.stdout and "more failure groups" in p.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "tracekit", "show", str(samples_dir / BENCH), "--limit", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--limit" in bad.stderr


def test_moe_launches_one_line_each_and_cut(
    samples_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MoE table at 100 columns: a line per launch (the verdict elided, never folded), and the cut said."""
    run = samples_dir / "h200-moe"
    launches = _json(capsys, monkeypatch, run)["moe"]["launches"]
    out = _show(capsys, monkeypatch, str(run), "--limit", "5")
    lines = out.splitlines()
    # every line fits but those that hold a command or the run's path, which are never folded (test_layout.py)
    assert all(len(ln) <= 100 for ln in lines if str(run) not in ln)
    rows = [ln for ln in lines if ln.startswith("│ ") and ln.split("│")[1].strip() == launches[0]["backend"]]
    tokens = [int(ln.split("│")[3]) for ln in rows[:5]]
    assert tokens == [r["tokens"] for r in launches[:5]]  # one line per launch, in order
    assert f"… {len(launches) - 5} more MoE launches: `tracekit show {run} --all` or `--json`" in out
