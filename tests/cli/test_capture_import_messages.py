"""Capture and import say what went wrong in one documented way: a missing torch is exit 3 (a missing package)
whatever the profiler, with no run folder left behind; a file an import does not read is named in a warning;
``tracekit.load`` of a partial file warns through Python's ``warnings``; no help example rewrites a tracked file.

Through the CLI as a user runs it (subprocesses), on a committed sample's PyTorch-profiler trace.
"""

from __future__ import annotations

import gzip
import json
import os
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import tracekit
from tests.cli.test_help_examples import EXAMPLES
from tracekit.errors import EXIT_MISSING_TOOL

TRACE = "h200-instrument-torchprof/raw/torch_trace.json.gz"


def _tracekit(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None):
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
    )


def _python_without_torch(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``python`` cannot import torch (site-packages off: ``-S``) and that has no nsys."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "python"
    wrapper.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S "$@"\n')
    wrapper.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_") and k != "PYTHONPATH"}
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    return env


@pytest.mark.parametrize("profiler", [[], ["--torch-profiler"]])
def test_capture_without_torch_exits_3_and_leaves_no_run(tmp_path: Path, profiler: list[str]) -> None:
    env = _python_without_torch(tmp_path)
    probe = subprocess.run(["python", "-c", "import torch"], env=env, capture_output=True, check=False)
    assert probe.returncode != 0  # the wrapper hides torch, installed or not
    (tmp_path / "bench.py").write_text("print('hi')\n")
    p = _tracekit("capture", *profiler, "--", "python", "bench.py", env=env, cwd=tmp_path)
    assert p.returncode == EXIT_MISSING_TOOL, p.stderr
    assert "torch" in p.stderr and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_no_help_example_writes_into_the_samples() -> None:
    """`import --rebuild samples/...` rewrote tracked files (run.json's build time, parquet's writer version)."""
    for name, line in EXAMPLES:
        words = shlex.split(line, comments=True)
        for i, w in enumerate(words[:-1]):
            if w in ("-o", "--out", "--rebuild"):
                assert not words[i + 1].startswith("samples/"), (
                    f"{name} --help: {line!r} writes into samples/"
                )


def test_an_import_names_a_file_it_does_not_read(samples_dir: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("what I ran\n")
    p = _tracekit("import", samples_dir / TRACE, notes, "-o", tmp_path / "run", "--json")
    assert p.returncode == 0, p.stderr
    said = [w for w in json.loads(p.stdout)["warnings"] if w.startswith("notes.txt:")]
    assert len(said) == 1 and "not a profiler file" in said[0]
    plain = _tracekit("import", samples_dir / TRACE, notes, "-o", tmp_path / "run2")
    assert "tracekit: warning: notes.txt: not a profiler file" in plain.stderr
    alone = _tracekit("import", samples_dir / TRACE, "-o", tmp_path / "run3", "--json")
    assert not [w for w in json.loads(alone.stdout)["warnings"] if "not a profiler file" in w]


def test_load_of_a_truncated_trace_warns(samples_dir: Path, tmp_path: Path) -> None:
    data = gzip.decompress((samples_dir / TRACE).read_bytes())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(data[: len(data) * 2 // 3]))
    with pytest.warns(tracekit.PartialRunWarning, match="read only in part"):
        run = tracekit.load(cut)
    assert run.record.partial and run.frames["kernels"].height > 0
    cli = _tracekit("import", cut, "-o", tmp_path / "run")
    assert cli.returncode == 4 and "warning" in cli.stderr  # the CLI says the same
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tracekit.load(samples_dir / TRACE)  # a whole file: no warning
