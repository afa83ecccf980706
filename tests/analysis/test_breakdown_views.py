"""The step breakdown as ``show``, ``show --json`` and ``report`` give it, on runs imported from real traces: each
view renders the one ``breakdown(frames)`` result, and a run imported before memcpy / memset were kept says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.support.views import analysis_of, cli, imported_run
from tracekit.analyzers.breakdown import breakdown, breakdown_and
from tracekit.analyzers.breakdown.steps import STEPS, step_windows
from tracekit.analyzers.store import load_frames, open_run

TRACE_DIFF = "thirdparty/hta/trace_diff__control__control.json.gz"


@pytest.fixture(scope="module")
def run_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return imported_run(shared_data / TRACE_DIFF, tmp_path_factory.mktemp("views") / "trace-diff")


def test_show_json_is_the_breakdown(
    run_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = json.loads(cli(capsys, monkeypatch, "show", str(run_dir), "--json", columns=200))["breakdown"]
    steps = analysis_of(run_dir).breakdown  # the Analysis' own: the one breakdown(frames), with its headline
    assert steps is not None and steps.headline is not None and steps.headline.startswith(f"{STEPS} (×")
    assert msgspec.structs.replace(steps, headline=None) == breakdown(load_frames(open_run(run_dir)))
    assert data == json.loads(json.dumps(msgspec.to_builtins(steps)))
    (gpu,) = data["devices"]
    assert (gpu["rank"], gpu["device"], gpu["kernels"]) == (3, 3, 8568 + 882)
    assert abs(sum(c["pct"] for c in gpu["classes"]) - 100) < 1e-9 and gpu["classes"][-1]["class"] == "idle"
    assert {c["class"] for c in gpu["classes"]} >= {"gemm", "communication", "memory", "idle"}
    assert data["notes"] == []  # imported now: memcpy / memset are in the run
    names = {r["range"] for r in data["ranges"]}
    assert len(names) == 20 < data["ranges_total"] and "ProfilerStep" in names
    every = json.loads(cli(capsys, monkeypatch, "show", str(run_dir), "--json", "--all", columns=200))[
        "breakdown"
    ]
    assert len({r["range"] for r in every["ranges"]}) == every["ranges_total"] == data["ranges_total"]


def test_show_table(
    run_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = cli(capsys, monkeypatch, "show", str(run_dir), "--limit", "3", columns=200)
    assert "Step breakdown (% of each GPU's span by kernel class" in out
    line = next(ln for ln in out.splitlines() if "(whole run)" in ln)
    b = breakdown(load_frames(open_run(run_dir)))
    idle = b.devices[0].share("idle")
    assert idle is not None and f"{idle.pct:.2f}" in line
    assert "ProfilerStep" in out and "more range names" in out


def test_report_section(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cli(capsys, monkeypatch, "report", str(run_dir), "-o", str(tmp_path / "r.md"), columns=200)
    md = (tmp_path / "r.md").read_text()
    assert "### Step breakdown" in md
    assert "- GPU r3:3, " in md and "hidden under compute" in md
    cli(
        capsys,
        monkeypatch,
        "report",
        str(run_dir),
        "--format",
        "json",
        "-o",
        str(tmp_path / "r.json"),
        columns=200,
    )
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
    data = json.loads(cli(capsys, monkeypatch, "show", str(old), "--json", columns=200))["breakdown"]
    assert len(data["notes"]) == 1 and "tracekit import --rebuild" in data["notes"][0]
    new = json.loads(cli(capsys, monkeypatch, "show", str(run_dir), "--json", columns=200))["breakdown"]
    assert data["devices"][0]["idle_ns"] > new["devices"][0]["idle_ns"]
    assert "memory" in {c["class"] for c in data["devices"][0]["classes"]}  # PyTorch fills are still there


def test_step_slices_from_the_shared_pass_are_a_breakdown_of_their_own(run_dir: Path) -> None:
    """breakdown_and breaks the step windows down from the run breakdown's covers and range extents: the same
    slices as a breakdown of the renamed ranges alone, and the run's own breakdown unchanged beside them."""
    frames = load_frames(open_run(run_dir))
    found = step_windows(frames["ranges"])
    assert found is not None and found[0] == STEPS
    whole, steps = breakdown_and(frames, also=found[1])
    alone = breakdown({**frames, "ranges": found[1]}, range_limit=None)
    assert steps and [s.range for s in steps] == [STEPS] * len(steps)
    assert steps == alone.ranges
    assert whole == breakdown(frames)
    assert sum(s.instances or 0 for s in steps) > 1
