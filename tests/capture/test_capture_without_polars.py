"""The capture path runs in bare GPU environments: `tracekit capture` and `tracekit bench --help` must work where
polars (and textual) cannot be imported, as on the GPU machine (seen there: an import of polars for printing a
progress line failed a capture)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _blocked_env(tmp_path: Path) -> dict[str, str]:
    block = tmp_path / "block"
    block.mkdir()
    for mod in ("polars", "textual"):
        (block / f"{mod}.py").write_text(f"raise ModuleNotFoundError(\"No module named '{mod}'\")\n")
    import os

    return {**os.environ, "PYTHONPATH": str(block)}


def test_capture_cli_without_polars(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracekit",
            "capture",
            "--json",
            "-o",
            str(out),
            "--",
            sys.executable,
            "-c",
            "print(42)",
        ],
        capture_output=True,
        text=True,
        env=_blocked_env(tmp_path),
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert Path(data["run"]).resolve() == out.resolve()
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["status"] == "complete"
    # the fingerprint's worker runs there too: it answered, with the host it ran on
    assert "fingerprint_error" not in manifest["environment"], manifest["environment"]["fingerprint_error"]
    assert manifest["environment"]["hostname"]
    assert "polars" in proc.stderr  # the import is deferred with a clear line, not a crash


def test_bench_help_without_polars(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "bench", "gemm", "--help"],
        capture_output=True,
        text=True,
        env=_blocked_env(tmp_path),
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--backends" in proc.stdout
