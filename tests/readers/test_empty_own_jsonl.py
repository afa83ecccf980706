"""A sweep where nothing failed leaves an empty ``raw/failures.jsonl`` (the harness opens it before the first
case): reading it is a file with no rows, not a damaged file, so the run is complete, not partial. A foreign empty
file is still reported as empty."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "h200-bench-gemm" / "raw" / "measurements.jsonl"


def _import(*args: str | Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tracekit", "import", *map(str, args), "--json"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)


def test_empty_failures_of_a_sweep_is_no_rows(tmp_path: Path) -> None:
    shutil.copy(SAMPLE, tmp_path / "measurements.jsonl")
    (tmp_path / "failures.jsonl").write_bytes(b"")
    (tmp_path / "moe_curve.jsonl").write_bytes(b"")
    proc = _import(
        tmp_path / "measurements.jsonl",
        tmp_path / "failures.jsonl",
        tmp_path / "moe_curve.jsonl",
        "-o",
        tmp_path / "run",
        "--workers",
        "1",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    rows = sum(1 for line in SAMPLE.read_text().splitlines() if line.strip())
    assert summary["failed"] == [] and not summary["partial"]
    assert summary["rows"]["measurements"] == rows and summary["rows"].get("failures", 0) == 0


def test_an_empty_file_of_another_name_is_still_reported(tmp_path: Path) -> None:
    shutil.copy(SAMPLE, tmp_path / "measurements.jsonl")
    (tmp_path / "trace.json").write_bytes(b"")
    proc = _import(
        tmp_path / "measurements.jsonl", tmp_path / "trace.json", "-o", tmp_path / "run", "--workers", "1"
    )
    assert proc.returncode == 4, proc.stderr  # partial: one file could not be read
    summary = json.loads(proc.stdout)
    assert [f["path"] for f in summary["failed"]] == ["raw/trace.json"]
    assert "is empty" in summary["failed"][0]["message"]
