"""``bench gemm`` and ``bench moe`` print their result tables by the commands' one layout rule
(tracekit.commands._render.frame_table): to a pipe every column and every cell whole; on a narrow terminal one line
per result that fits, with the title naming the columns it left out.

The tables are printed by the commands' own printers (the ones the sweeps call) on the measurements of committed
H200 runs (samples/h200-bench-gemm's raw/measurements.jsonl and failures.jsonl, samples/h200-moe's grouped GEMMs), in
a subprocess whose stdout is a pipe, as a user's ``tracekit bench gemm | less`` runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.commands.bench import GEMM_TABLE_COLUMNS, MOE_TABLE_COLUMNS

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
GEMM = SAMPLES / "h200-bench-gemm" / "raw"
MOE = SAMPLES / "h200-moe" / "raw" / "moe-nsys.jsonl"

PRINT = """
import json, sys
from pathlib import Path
from types import SimpleNamespace
from tracekit.commands import bench
measurements, failures, kind = sys.argv[1], sys.argv[2], sys.argv[3]
read = lambda p: [json.loads(line) for line in Path(p).read_text().splitlines() if line.strip()] if p else []
result = SimpleNamespace(run=SimpleNamespace(path="runs/bench"), measurements=read(measurements), failures=read(failures))
(bench._print_table if kind == "gemm" else bench._print_moe_table)(result)
"""


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _print(kind: str, measurements: Path, failures: Path | None, columns: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["NO_COLOR"] = "1"
    if columns is not None:
        env["COLUMNS"] = columns
    args = [sys.executable, "-c", PRINT, str(measurements), str(failures or ""), kind]
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=True)
    return done.stdout


def _header_cells(out: str, first: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith("┃") and f" {first} " in line)
    return [c.strip() for c in line.strip("┃").split("┃")]


@pytest.mark.parametrize("kind", ["gemm", "moe"])
def test_to_a_pipe_every_column_and_cell_whole(kind: str) -> None:
    measurements, failures = (
        (GEMM / "measurements.jsonl", GEMM / "failures.jsonl") if kind == "gemm" else (MOE, None)
    )
    out = _print(kind, measurements, failures, None)
    assert "left out" not in out and "…" not in out
    assert _header_cells(out, "backend") == (GEMM_TABLE_COLUMNS if kind == "gemm" else MOE_TABLE_COLUMNS)
    rows = _rows(measurements)
    body = [line for line in out.splitlines() if line.startswith("│")]
    for r in rows:  # each result's line, whole: its backend, its time and its status
        time = f"{r['time_us']:.1f}"
        assert any(r["backend"] in line and f" {time} " in line and r["status"] in line for line in body), r
    if failures is not None:
        for f in _rows(failures)[:10]:  # the error's first line as written, up to the 120 characters kept
            first = f["message"].strip().splitlines()[0][:120]
            assert any(first in line for line in out.splitlines()), first


@pytest.mark.parametrize("kind", ["gemm", "moe"])
def test_a_narrow_terminal_gets_one_line_per_result_and_names_what_it_left_out(kind: str) -> None:
    measurements, failures = (
        (GEMM / "measurements.jsonl", GEMM / "failures.jsonl") if kind == "gemm" else (MOE, None)
    )
    out = _print(kind, measurements, failures, "60")
    lines = out.splitlines()
    assert all(len(line) <= 60 for line in lines), max(lines, key=len)
    assert "left out at this width" in out
    header = _header_cells(out, "backend")
    assert header[:2] == (["backend", "M"] if kind == "gemm" else ["backend", "route"]) and "µs" in header
    assert "status" in header
    rows = _rows(measurements)
    table = out.split("Failures")[0]
    body = [line for line in table.splitlines() if line.startswith("│")]
    assert len(body) == len(rows)  # one line per result: nothing folded over two
    for r, line in zip(rows, body, strict=True):  # the backend, or its start where 60 cells cannot hold it
        cell = line.split("│")[1].strip()
        assert cell == r["backend"] or (cell.endswith("…") and r["backend"].startswith(cell[:-1])), cell
        assert f" {r['time_us']:.1f} " in line and f" {r['status']} " in line
    if failures is not None:  # the failures keep their kind and the start of the error
        header = _header_cells(out, "kind")
        assert {"backend", "kind", "error"} <= set(header)
        assert all(f" {f['kind']} " in out for f in _rows(failures))
