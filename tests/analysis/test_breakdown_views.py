"""The step breakdown as ``show``, ``show --json`` and ``report`` give it, on runs imported from real traces: each
view renders the one ``breakdown(frames)`` result, and a run imported before memcpy / memset were kept says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tracekit.analyzers.breakdown import breakdown
from tracekit.analyzers.breakdown.steps import step_headline
from tracekit.analyzers.importer import import_files
from tracekit.analyzers.store import load_frames, open_run
from tracekit.cli import main

TRACE_DIFF = "thirdparty/hta/trace_diff__control__control.json.gz"


@pytest.fixture(scope="module")
def run_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("views") / "trace-diff"
    import_files([shared_data / TRACE_DIFF], out)
    return out


def _cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")
    try:
        main(list(args))
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr().err
    return capsys.readouterr().out


def test_show_json_is_the_breakdown(
    run_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = json.loads(_cli(capsys, monkeypatch, "show", str(run_dir), "--json"))["breakdown"]
    frames = load_frames(open_run(run_dir))
    whole = breakdown(frames)
    want = json.loads(json.dumps(msgspec.to_builtins(whole)))
    # the Analysis' breakdown carries the headline every view prints (over the user's steps where the run has
    # any); the rest is the breakdown itself
    assert data.pop("headline") == step_headline(frames, whole) and want.pop("headline") is None
    assert data == want
    (gpu,) = data["devices"]
    assert (gpu["rank"], gpu["device"], gpu["kernels"]) == (3, 3, 8568 + 882)
    assert abs(sum(c["pct"] for c in gpu["classes"]) - 100) < 1e-9 and gpu["classes"][-1]["class"] == "idle"
    assert {c["class"] for c in gpu["classes"]} >= {"gemm", "communication", "memory", "idle"}
    assert data["notes"] == []  # imported now: memcpy / memset are in the run
    names = {r["range"] for r in data["ranges"]}
    assert len(names) == 20 < data["ranges_total"] and "ProfilerStep" in names
    every = json.loads(_cli(capsys, monkeypatch, "show", str(run_dir), "--json", "--all"))["breakdown"]
    assert len({r["range"] for r in every["ranges"]}) == every["ranges_total"] == data["ranges_total"]


def test_show_table(
    run_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _cli(capsys, monkeypatch, "show", str(run_dir), "--limit", "3")
    assert "Step breakdown (% of each GPU's span by kernel class" in out
    line = next(ln for ln in out.splitlines() if "(whole run)" in ln)
    b = breakdown(load_frames(open_run(run_dir)))
    idle = b.devices[0].share("idle")
    assert idle is not None and f"{idle.pct:.2f}" in line
    assert "ProfilerStep" in out and "more range names" in out


def test_report_section(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _cli(capsys, monkeypatch, "report", str(run_dir), "-o", str(tmp_path / "r.md"))
    md = (tmp_path / "r.md").read_text()
    assert "### Step breakdown" in md
    assert "- GPU r3:3, " in md and "hidden under compute" in md
    _cli(capsys, monkeypatch, "report", str(run_dir), "--format", "json", "-o", str(tmp_path / "r.json"))
    rep: dict[str, Any] = json.loads((tmp_path / "r.json").read_text())
    assert (
        rep["breakdown"]["devices"]
        == json.loads(json.dumps(msgspec.to_builtins(breakdown(load_frames(open_run(run_dir))))))["devices"]
    )


def test_a_run_without_memops_says_so(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose frames were written before the memops frame (its manifest lists no memops): the copies'
    time counts as idle and the breakdown's notes say how to count them."""
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    manifest = json.loads((old / "run.json").read_text())
    del manifest["frames"]["rows"]["memops"]
    (old / "run.json").write_text(json.dumps(manifest))
    (old / "frames" / "memops.parquet").unlink()
    data = json.loads(_cli(capsys, monkeypatch, "show", str(old), "--json"))["breakdown"]
    assert len(data["notes"]) == 1 and "tracekit import --rebuild" in data["notes"][0]
    new = json.loads(_cli(capsys, monkeypatch, "show", str(run_dir), "--json"))["breakdown"]
    assert data["devices"][0]["idle_ns"] > new["devices"][0]["idle_ns"]
    assert "memory" in {c["class"] for c in data["devices"][0]["classes"]}  # PyTorch fills are still there
