"""One layout rule for every command (tracekit.text.make_console): commands and paths are never folded, output to
a pipe is not cut to 80 columns, and a terminal too narrow for a table says which columns it left out.

On the committed samples, through the CLI as a user runs it (a subprocess whose stdout is a pipe) and in-process.
Expected values (GEMM counts, statuses, numbers) come from ``--json`` of the same command, never written here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.cli import main
from tracekit.text import PIPE_WIDTH, make_console, short_kernel_name

SEED, GEMM = "h200-capture-seed", "h200-capture-gemm"


def _tracekit(*args: str, columns: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m tracekit ARGS`` with stdout a pipe; ``COLUMNS`` unset unless given."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["NO_COLOR"] = "1"
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        cwd=cwd,
    )


def _rows(out: str) -> list[list[str]]:
    """The body rows of the Rich tables in ``out``, as stripped cells."""
    return [[c.strip() for c in ln.split("│")[1:-1]] for ln in out.splitlines() if ln.startswith("│")]


def test_a_pipe_gets_the_wide_layout_and_a_terminal_width_is_kept() -> None:
    import io

    assert make_console(file=io.StringIO()).width == 100  # the tests' COLUMNS (conftest)
    os.environ.pop("COLUMNS", None)
    try:
        assert make_console(file=io.StringIO()).width == PIPE_WIDTH
        os.environ["COLUMNS"] = "77"
        assert make_console(file=io.StringIO()).width == 77
    finally:
        os.environ["COLUMNS"] = "100"


@pytest.mark.slow
def test_compare_to_a_pipe_cuts_no_number_status_or_name(samples_dir: Path) -> None:
    base, new = str(samples_dir / SEED), str(samples_dir / GEMM)
    data = json.loads(_tracekit("compare", base, new, "--json").stdout)
    p = _tracekit("compare", base, new)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    rows = _rows(p.stdout)
    assert len(rows) == len(data["gemms"]) > 0
    assert "left out at this width" not in p.stdout
    for row, g in zip(rows, data["gemms"], strict=True):
        assert row[0] == g["gemm"]  # a shape label, whole
        assert row[6] == g["status"]  # "within threshold", never "thresh…"
        assert row[1] == f"{g['base_time_us']:,.2f}" and row[2] == f"{g['new_time_us']:,.2f}"
        assert "…" not in "".join(row[1:7])


@pytest.mark.slow
def test_a_narrow_terminal_says_which_columns_it_left_out(samples_dir: Path) -> None:
    p = _tracekit("compare", str(samples_dir / SEED), str(samples_dir / GEMM), columns="70")
    assert p.returncode == 0, p.stderr
    said = re.search(r"left out at this width: ([^;]+);", " ".join(p.stdout.split()))
    assert said, p.stdout
    header = next(ln for ln in p.stdout.splitlines() if ln.startswith("┃"))
    for col in said.group(1).split(", "):
        assert col not in header
    assert all(len(ln) <= 70 for ln in p.stdout.splitlines() if ln[:1] in "┏┃┡│└")
    for row in _rows(p.stdout):
        assert re.fullmatch(r"[+-]\d+\.\d%", row[1])  # Δ time kept whole


def test_show_of_two_ranks_to_a_pipe_names_every_column(samples_dir: Path) -> None:
    run = samples_dir / "h200-ranks-gloo"
    ranks = json.loads(_tracekit("show", str(run), "--json").stdout)["ranks"]
    out = _tracekit("show", str(run)).stdout
    header = next(ln for ln in out.splitlines() if ln.startswith("┃") and "rank" in ln)
    assert [c.strip() for c in header.split("┃")[1:-1]][:4] == ["rank", "pid", "device", "kernels"]
    rows = [r for r in _rows(out) if len(r) >= 4 and r[0] in {str(x["rank"]) for x in ranks}][: len(ranks)]
    assert [int(r[3]) for r in rows] == [x["kernels"] for x in ranks]


def _deep(tmp_path: Path, run: Path) -> Path:
    """``run`` copied to a folder whose path is over 150 characters."""
    deep = tmp_path.joinpath(*["a-rather-long-folder-name-for-a-clone"] * 5) / run.name
    assert len(str(deep)) > 150
    shutil.copytree(run, deep)
    return deep


def test_hints_and_the_run_line_keep_a_long_path_whole(
    samples_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At 100 columns, a run path of over 150 characters: the `run` line and every hint's command on one line."""
    run = _deep(tmp_path, samples_dir / "h200-bench-gemm")
    main(["show", str(run), "--limit", "3"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(ln.startswith(f"run {run}  status:") for ln in lines)
    hints = [ln for ln in lines if "`tracekit show" in ln]
    assert len(hints) >= 2
    for ln in hints:
        assert f"`tracekit show {run} --all`" in ln


def test_short_kernel_names() -> None:
    long = "void cutlass::Kernel2<cutlass::gemm::kernel::GemmUniversal<cutlass::half_t, 4>>(cutlass::Params)"
    assert short_kernel_name(long) == "cutlass::Kernel2<…>"
    assert short_kernel_name("void at::native::(anonymous namespace)::f<float, 4>(float*)") == (
        "at::native::(anonymous namespace)::f<…>"
    )
    tile = "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>"
    assert short_kernel_name(f"void {tile}(cutlass::gemm::Params)") == tile  # the name that tells them apart
    assert short_kernel_name("void cutlass::Kernel2<cutlass::gemm::GemmUniv") == "cutlass::Kernel2<…>"
    plain = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
    assert short_kernel_name(plain) == plain
    assert short_kernel_name("bad\x1b[31m") == "bad\\x1b[31m"


def test_explain_to_a_pipe_reads_at_a_fixed_width(samples_dir: Path) -> None:
    """Cards are prose: to a pipe they are drawn at 200 columns (the factor table's wide layout), not 1,000."""
    from tracekit.commands._explain_render import WIDE

    p = _tracekit("explain", str(samples_dir / GEMM), "--top", "1")
    assert p.returncode == 0, p.stderr
    borders = [ln for ln in p.stdout.splitlines() if ln.startswith(("╭", "╰"))]
    assert borders and all(len(ln) == WIDE + 20 for ln in borders)
    assert any(ln.startswith("│ factor ") for ln in p.stdout.splitlines())  # the wide factor table
