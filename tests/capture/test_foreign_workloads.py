"""The foreign workloads of benchmarks/foreign (programs that do not import tracekit) and their capture script:
the programs stay free of tracekit, every range EXPECTED.json names exists in its program and in the capture
script's ncu filter, and capture_all.sh builds the tracekit capture command lines it documents (fake ncu / nsys
record them; the GPU runs are the lead's)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOREIGN = ROOT / "benchmarks" / "foreign"
EXPECTED = json.loads((FOREIGN / "EXPECTED.json").read_text())
WORKLOADS = {name: w for name, w in EXPECTED.items() if not name.startswith("_") and "ranges" in w}
SCRIPT = FOREIGN / "capture_all.sh"


def _script_path(workload: dict) -> Path:
    return FOREIGN / workload["script"].split()[0]


def _string_literals(path: Path) -> set[str]:
    """Every string constant of a Python file, or every double-quoted string of a CUDA file."""
    text = path.read_text()
    if path.suffix == ".py":
        return {
            n.value
            for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
    out, parts = set(), text.split('"')
    out.update(parts[1::2])
    return out


@pytest.mark.parametrize("path", sorted(FOREIGN.glob("*.py")), ids=lambda p: p.name)
def test_workloads_do_not_import_tracekit(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        assert not any(n == "tracekit" or n.startswith("tracekit.") for n in names), (path.name, names)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_expected_ranges_exist_in_program_and_capture_filter(name: str) -> None:
    workload = WORKLOADS[name]
    literals = _string_literals(_script_path(workload))
    table = SCRIPT.read_text().split("declare -A RANGES=(", 1)[1].split(")\n", 1)[0]
    row = next(line for line in table.splitlines() if line.strip().startswith(f"[{name}]="))
    filtered = row.split("=", 1)[1].strip().strip('"').split()
    assert workload["run"] == f"h200-foreign-{name}"
    for r in workload["ranges"]:
        assert r["range"] in literals, f"{r['range']} is not a string in {workload['script']}"
        assert r["range"] in filtered, f"{r['range']} is not in capture_all.sh's RANGES[{name}]"
        assert {"M", "N", "K", "dtype", "verdict"} <= set(r)


def test_crash_modes_exist_in_program() -> None:
    literals = _string_literals(FOREIGN / "crash_segv.py")
    crashes = {name: w for name, w in EXPECTED.items() if name.startswith("crash_")}
    assert crashes
    for w in crashes.values():
        assert w["script"].split("--mode ")[1] in literals
        for r in w["good_ranges"]:
            assert r["range"] in literals


def _exe(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def fake_tools(tmp_path: Path) -> dict[str, str]:
    """ncu and nsys that record their command lines and write empty reports; python3 = this interpreter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.log"
    out_of = 'out=""; prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
    _exe(
        bin_dir / "ncu",
        'if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0"; exit 0; fi\n'
        f'echo "NCU $*" >> {calls}\n{out_of}printf rep > "$out.ncu-rep"\n',
    )
    _exe(
        bin_dir / "nsys",
        'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2025.3.1.90-1"; exit 0; fi\n'
        f'echo "NSYS $*" >> {calls}\n{out_of}'
        'if [ "$1" = "export" ]; then printf sqlite > "$out"; exit 0; fi\nprintf rep > "$out.nsys-rep"\n',
    )
    _exe(bin_dir / "python3", f'exec "{sys.executable}" "$@"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACEKIT_", "TK_"))}
    env.pop("OUT", None)
    env.update(
        PATH=f"{bin_dir}:/usr/bin:/bin",
        TRACEKIT_NCU=str(bin_dir / "ncu"),
        TRACEKIT_NSYS=str(bin_dir / "nsys"),
        TK_OUT=str(tmp_path / "runs"),
        TK_PACK=str(tmp_path / "pack"),
    )
    return env


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_capture_all_command_lines(tmp_path: Path, fake_tools: dict[str, str]) -> None:
    proc = subprocess.run(
        ["bash", str(SCRIPT), "base_clock", "crash_abort"],
        env=fake_tools,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    calls = (tmp_path / "calls.log").read_text().splitlines()
    ncu = [c for c in calls if c.startswith("NCU ")]
    nsys = [c for c in calls if c.startswith("NSYS profile")]
    # base_clock: ncu only, locked base clock, the program's own range, no tracekit-domain filter
    base = next(c for c in ncu if "h200-foreign-base-clock" in c or "h200-foreign-base_clock" in c)
    assert "--clock-control base" in base and "--nvtx-include=big_gemm/" in base and "--nvtx " in base
    assert "regex:tracekit" not in base and "--kernel-name=regex:" in base and "--launch-count 8" in base
    assert base.endswith(f"{FOREIGN / 'base_clock.py'}")
    assert not any("base_clock" in c for c in nsys)
    # crash_abort: both tools, tracekit's own ranges (--instrument), the mode on the program's command line
    crash = next(c for c in ncu if "h200-crash-abort" in c)
    assert "regex:tracekit@.+/" in crash and crash.endswith("crash_segv.py --mode abort")
    assert any("h200-crash-abort" in c for c in nsys)
    rows = (tmp_path / "runs" / "summary.tsv").read_text().splitlines()
    assert [r.split("\t")[:2] for r in rows[1:]] == [["base_clock", "0"], ["crash_abort", "0"]]
    packed = sorted(p.name for p in (tmp_path / "pack").iterdir())
    assert packed == ["crash18.tgz", "foreign17.tgz", "logs.tgz"]


def test_capture_all_unknown_workload(tmp_path: Path, fake_tools: dict[str, str]) -> None:
    proc = subprocess.run(
        ["bash", str(SCRIPT), "no_such_workload"], env=fake_tools, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "unknown workload 'no_such_workload'" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "calls.log").exists()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")
def test_simt_smem_compiles(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            "nvcc",
            "-O3",
            "-arch=sm_90",
            "-o",
            str(tmp_path / "simt_smem"),
            str(FOREIGN / "simt_smem.cu"),
            "-ldl",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    usage = subprocess.run(
        [str(tmp_path / "simt_smem"), "--bogus"], capture_output=True, text=True, timeout=60
    )
    assert usage.returncode == 2 and "usage:" in usage.stderr
