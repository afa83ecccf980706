"""The bounded ncu pass: the exact ncu command line of each mode (tracekit's ranges, --ranges, --all-kernels,
--launch-count), what is printed before the pass, the kernels it profiled (counted from ncu's own lines), and
--ncu-budget with stand-in tools: an ncu that profiles until its program calls cuProfilerStop, and a libcuda
built here whose cuProfilerStop notes the call (and refuses it, as the driver does, without a current
context)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tracekit.collectors import tools
from tracekit.collectors.capture import NcuSettings, capture, ranges_filter
from tracekit.collectors.capture.budget import ProfiledKernels, describe_bound
from tracekit.errors import BadInputError
from tracekit.naming import NCU_FILTER
from tracekit.run import Run

PY = sys.executable


def _exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env["PATH"] = f"{Path(PY).parent}:/usr/bin:/bin"
    env.update(extra)
    return env


def _argv_ncu(tmp_path: Path) -> tuple[Path, Path]:
    """An ncu that records its command line and the per-range bound it was given, profiles nothing and writes a
    report."""
    argv_file = tmp_path / "argv"
    ncu = _exe(
        tmp_path / "bin/ncu",
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0"; exit 0; fi\n'
        f'printf "%s\\n" "$@" > {argv_file}\n'
        f'echo "$TRACEKIT_NCU_MAX_PER_RANGE" > {argv_file}.max\n'
        'out=""; prev=""\nfor a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
        'printf report > "$out.ncu-rep"\n'
        "exit 0\n",
    )
    return ncu, argv_file


def _cli(tmp_path: Path, ncu: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "tracekit", "capture", "--ncu", "--ncu-path", str(ncu), "--no-import", "--json", *args],
        env=_env(), capture_output=True, text=True, check=False, cwd=tmp_path, timeout=120,
    )  # fmt: skip


# --- command lines ------------------------------------------------------------------------------------------------
def test_ncu_command_per_launch_config_exact():
    assert tools.ncu_command(
        "ncu", "/r/raw/ncu", ["python3", "serve.py"], sections=["SpeedOfLight"], metrics=(),
        nvtx_include="regex:.*(?:serve).*/", per_config=2,
    ) == [
        "ncu", "--nvtx", "--nvtx-include", "regex:.*(?:serve).*/", "--section", "SpeedOfLight",
        "--clock-control", "none", "--target-processes", "all",
        "--filter-mode", "per-launch-config", "--launch-count", "2",
        "-o", "/r/raw/ncu", "--force-overwrite", "python3", "serve.py",
    ]  # fmt: skip
    with pytest.raises(BadInputError, match="not both"):
        tools.ncu_command("ncu", "o", ["./a"], per_config=2, launch_count=5)


@pytest.mark.parametrize(
    ("args", "nvtx", "bound", "per_range"),
    [
        ((), NCU_FILTER, [], "2"),  # tracekit's ranges: the range code bounds each range name
        (("--max-per-range", "3"), NCU_FILTER, [], "3"),
        (("--launch-count", "5"), NCU_FILTER, ["--launch-count", "5"], "2"),
        (("--ranges", "serve"), ranges_filter("serve"), ["--filter-mode", "per-launch-config", "--launch-count", "2"], "2"),
        (("--ranges", "serve", "--max-per-range", "1"), ranges_filter("serve"), ["--filter-mode", "per-launch-config", "--launch-count", "1"], "1"),
        (("--all-kernels",), None, ["--filter-mode", "per-launch-config", "--launch-count", "2"], "2"),
        (("--all-kernels", "--launch-count", "7"), None, ["--launch-count", "7"], "2"),
    ],
)  # fmt: skip
def test_cli_builds_the_exact_ncu_command_of_each_mode(tmp_path, args, nvtx, bound, per_range):
    ncu, argv_file = _argv_ncu(tmp_path)
    done = _cli(tmp_path, ncu, *args, "--", PY, "-c", "pass")
    assert done.returncode == 0, done.stderr
    run = Run.open(tmp_path / json.loads(done.stdout)["run"])
    raw = run.raw_dir.absolute() / "ncu"
    head = [str(ncu)] + (["--nvtx", "--nvtx-include", nvtx] if nvtx else [])
    sections = [a for s in tools.DEFAULT_SECTIONS for a in ("--section", s)]
    expected = [
        *head, *sections, "--metrics", ",".join(tools.DEFAULT_METRICS), "--clock-control", "none",
        "--target-processes", "all", *bound, "-o", str(raw), "--force-overwrite", PY, "-c", "pass",
    ]  # fmt: skip
    assert argv_file.read_text().splitlines() == expected[1:]
    assert (tmp_path / "argv.max").read_text().strip() == per_range
    settings = run.manifest["capture"]["ncu"]
    assert settings["max_per_range"] == int(per_range)
    assert settings["per_launch_config"] == (int(bound[-1]) if "per-launch-config" in bound else None)
    assert settings["bound_mode"] == (
        "tracekit-ranges" if nvtx == NCU_FILTER else "ranges" if nvtx else "all-kernels"
    )
    # before the pass: what will be profiled and the bound, on stderr (stdout holds the JSON only)
    said = " ".join(done.stderr.split())
    assert "ncu profiles the kernels" in said
    if "per-launch-config" in bound:
        assert f"at most {bound[-1]} launch(es) of each kernel's launch configuration" in said
    (p,) = run.manifest["capture"]["passes"]
    assert p["ncu"]["profiled"] == 0 and p["ncu"]["bound"].startswith("ncu profiles the kernels")


def test_launch_count_replaces_the_per_configuration_count_and_bad_budgets_are_refused(tmp_path):
    ncu, argv_file = _argv_ncu(tmp_path)
    done = _cli(
        tmp_path, ncu, "--ranges", "x", "--launch-count", "5", "--max-per-range", "3", "--", PY, "-c", "pass"
    )
    assert done.returncode == 0, done.stderr
    argv = argv_file.read_text().splitlines()
    assert "--filter-mode" not in argv and argv[argv.index("--launch-count") + 1] == "5"
    assert (tmp_path / "argv.max").read_text().strip() == "3"  # tracekit ranges in the program: 3 each
    runs = tmp_path / "runs"
    before = sorted(runs.iterdir())
    bad = _cli(tmp_path, ncu, "--ncu-budget", "0", "--", PY, "-c", "pass")
    assert bad.returncode == 2 and "--ncu-budget" in bad.stderr and "Traceback" not in bad.stderr
    assert sorted(runs.iterdir()) == before  # nothing made


def test_the_bound_said_before_the_pass():
    opts = NcuSettings(nvtx_include=ranges_filter("serve"), max_per_range=2, budget_s=60.0)
    assert (opts.mode, opts.per_config) == ("ranges", 2)
    said = describe_bound(opts, "serve")
    assert "matching 'serve'" in said and "at most 2 launch(es) of each kernel's launch configuration" in said
    assert "after 60 s (--ncu-budget)" in said and "the program runs on" in said
    own = describe_bound(NcuSettings(nvtx_include=NCU_FILTER, max_per_range=3), None)
    assert "first 3 launch(es) of each range name" in own and "no time limit" in own
    everything = describe_bound(NcuSettings(nvtx_include=None, max_per_range=2, launch_count=9), None)
    assert NcuSettings(nvtx_include=None, launch_count=9).mode == "all-kernels"
    assert "anywhere in the program" in everything and "first 9 kernel(s) in all" in everything


# --- kernels profiled ----------------------------------------------------------------------------------------------
def test_profiled_kernels_counts_each_line_once_however_it_arrives():
    seen = ProfiledKernels()
    text = (
        b"==PROF== Connected to process 42 (/usr/bin/python3.12)\n"
        b'==PROF== Profiling "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT" - 0: 0%....50%....100% - 27 passes\n'
        b"serve/decode (CUDA graph): 50 steps\n"
        b'==PROF== Profiling "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT" - 1: 0%....50%....100% - 27 passes\n'
        b'==PROF== Profiling "act_and_mul_kernel" - 2: 0%....50%....100% - 20 passes\n'
    )
    # a byte at a time (the worst split), the progress dots arriving after the name
    for i in range(len(text)):
        seen.feed("stdout", text[i : i + 1])
    assert seen.count == 3
    assert seen.names == {"nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT": 2, "act_and_mul_kernel": 1}
    other = ProfiledKernels()
    other.feed("stderr", text)
    other.feed("stdout", text[:60])  # streams are apart
    assert other.count == 3


def test_the_pass_records_the_kernels_ncu_profiled(tmp_path):
    ncu = _exe(
        tmp_path / "bin/ncu",
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0"; exit 0; fi\n'
        "printf '==PROF== Profiling \"gemm_a\" - 0: 0%%....50%%'\n"
        "printf '....100%% - 27 passes\\n'\n"
        "echo '==PROF== Profiling \"gemm_b\" - 1: 0%....50%....100% - 27 passes'\n"
        "echo '==PROF== Profiling \"gemm_a\" - 2: 0%....50%....100% - 27 passes'\n",
    )
    run = capture([PY, "-c", "pass"], ncu=True, ncu_path=ncu, ranges="serve", runs_dir=tmp_path / "runs",
                  env=_env(), on_output=lambda *a: None)  # fmt: skip
    (p,) = run.manifest["capture"]["passes"]
    assert p["ncu"]["profiled"] == 3 and p["ncu"]["kernels"] == {"gemm_a": 2, "gemm_b": 1}
    assert "budget" not in p["ncu"]


# --- --ncu-budget ------------------------------------------------------------------------------------------------
FAKE_LIBCUDA = r"""
#include <stdio.h>
#include <stdlib.h>
/* the few driver calls tracekit's site folder makes; the current context is per thread, as in the driver */
static __thread void *current = 0;
static int primary;
int cuInit(unsigned flags) { return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
int cuDevicePrimaryCtxGetState(int dev, unsigned *flags, int *active) { *flags = 0; *active = 1; return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = &primary; return 0; }
int cuDevicePrimaryCtxRelease_v2(int dev) { return 0; }
int cuCtxPushCurrent_v2(void *ctx) { current = ctx; return 0; }
int cuCtxPopCurrent_v2(void **ctx) { if (ctx) *ctx = current; current = 0; return 0; }
int cuProfilerStop(void) {
    if (!current) return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    FILE *f = fopen(getenv("FAKE_CUDA_STOPPED"), "a");
    if (f) { fputs("stopped\n", f); fclose(f); }
    return 0;
}
"""

# An ncu that runs the program and profiles a kernel every 0.1 s until the program's libcuda says profiling was
# stopped (or, with FAKE_NCU_IGNORES_STOP, for ever); on SIGINT it writes what it has, as ncu does.
FAKE_NCU = r"""
import os, signal, subprocess, sys, time
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("Version 2025.3.1.0")
    sys.exit(0)
out = args[args.index("-o") + 1]
cmd = args[args.index("--force-overwrite") + 1:]
stopped, ignore = os.environ["FAKE_CUDA_STOPPED"], os.environ.get("FAKE_NCU_IGNORES_STOP")
proc = subprocess.Popen(cmd)
n = 0
try:
    while proc.poll() is None:
        if ignore or not os.path.exists(stopped):
            print(f'==PROF== Profiling "gemm_kernel" - {n}: 0%....50%....100% - 27 passes', flush=True)
            n += 1
        time.sleep(0.1)
except KeyboardInterrupt:
    proc.wait()
with open(out + ".ncu-rep", "w") as f:
    f.write(f"{n} kernels")
print("==PROF== Report: " + out + ".ncu-rep", flush=True)
sys.exit(proc.returncode if proc.returncode >= 0 else 128 - proc.returncode)
"""

PROGRAM = (
    "import ctypes, time\n"
    "ctypes.CDLL('libcuda.so.1')\n"
    "print('cuda loaded', flush=True)\n"
    "for _ in range(60):\n"
    "    time.sleep(0.1)\n"
    "print('program done', flush=True)\n"
)


@pytest.fixture()
def stand_ins(tmp_path: Path) -> dict[str, str]:
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler to build the stand-in libcuda")
    lib = tmp_path / "lib"
    lib.mkdir()
    src = tmp_path / "libcuda.c"
    src.write_text(FAKE_LIBCUDA)
    compiler = shutil.which("cc") or shutil.which("gcc")
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(lib / "libcuda.so.1"), str(src)],
        check=True, capture_output=True,
    )  # fmt: skip
    _exe(tmp_path / "bin/ncu", f"#!{PY}\n{FAKE_NCU}")
    return {"LD_LIBRARY_PATH": str(lib), "FAKE_CUDA_STOPPED": str(tmp_path / "cuda-stopped")}


def _budget_capture(tmp_path: Path, cmd: list[str], env: dict[str, str], budget: float) -> Run:
    return capture(cmd, ncu=True, ncu_path=tmp_path / "bin/ncu", ranges="serve", ncu_budget=budget,
                   runs_dir=tmp_path / "runs", env=_env(**env), on_output=lambda *a: None, grace_s=5.0)  # fmt: skip


def test_budget_stops_profiling_inside_the_program_which_runs_on(tmp_path, stand_ins):
    start = time.monotonic()
    run = Run.open(_budget_capture(tmp_path, [PY, "-c", PROGRAM], stand_ins, 3.0).path)
    assert time.monotonic() - start < 60
    assert run.status == "complete", run.manifest["incomplete_reason"]
    assert "program done" in (run.raw_dir / "program.stdout").read_text()  # it ran to its end
    assert (tmp_path / "cuda-stopped").read_text() == "stopped\n"  # cuProfilerStop with a context current
    (p,) = run.manifest["capture"]["passes"]
    b = p["ncu"]["budget"]
    assert (
        b["spent"]
        and b["budget_s"] == 3.0
        and b["stopped_by"] == "profiler-stop"
        and b["contexts_stopped"] == 1
    )
    assert b["profiled_before"] >= 1 and b["profiled_after"] <= 3  # the 6 s program would have given ~60
    assert p["ncu"]["profiled"] == b["profiled_before"] + b["profiled_after"] < 40
    assert b["ran_on_s"] > 1.0 and "the program ran on" in b["not_profiled"]
    stops = [json.loads(line) for line in (run.raw_dir / "ncu_budget.jsonl").read_text().splitlines()]
    assert [(s["device"], s["cuProfilerStop"]) for s in stops] == [(0, 0)]
    assert run.manifest["capture"]["ncu"]["budget_s"] == 3.0
    # show says how many were profiled and what was not
    from tracekit.analyzers.importer import import_into

    (run.raw_dir / "ncu.ncu-rep").unlink()  # the stand-in's report is no report: nothing to import from it
    import_into(run)
    shown = subprocess.run([PY, "-m", "tracekit", "show", str(run.path)], capture_output=True, text=True,
                           env=_env(COLUMNS="200"), check=False)  # fmt: skip
    text = " ".join(shown.stdout.split())
    assert f"ncu pass: {p['ncu']['profiled']} kernel(s) profiled" in text
    assert "ncu budget 3 s spent" in text and "cuProfilerStop in the program" in text and "ran on" in text
    data = json.loads(subprocess.run([PY, "-m", "tracekit", "show", "--json", str(run.path)], capture_output=True,
                                     text=True, env=_env(), check=True).stdout)  # fmt: skip
    assert data["run"]["ncu_pass"]["budget"]["stopped_by"] == "profiler-stop"


def test_budget_stops_a_program_tracekit_cannot_reach_inside(tmp_path, stand_ins):
    # budgets of a few seconds: the stand-in ncu must be running (an interpreter start on a loaded machine) when
    # the stop comes, to write its report as ncu does
    start = time.monotonic()
    run = _budget_capture(tmp_path, ["/bin/sh", "-c", "echo started; sleep 30"], stand_ins, 4.0)
    assert time.monotonic() - start < 25
    assert run.status == "incomplete"
    reason = run.manifest["incomplete_reason"]
    assert reason.startswith("ncu budget of 4 s spent: tracekit stopped the program")
    assert "from inside Python programs only" in reason
    b = run.manifest["capture"]["passes"][0]["ncu"]["budget"]
    assert b["stopped_by"] == "stopping the program" and "did not run" in b["not_profiled"]
    assert (run.raw_dir / "ncu.ncu-rep").is_file()  # stopped with SIGINT first: the report is written
    assert not (run.raw_dir / "failures.jsonl").exists()  # a stop tracekit chose is no crash


def test_budget_stops_the_program_when_profiling_goes_on_after_the_stop(tmp_path, stand_ins):
    run = _budget_capture(tmp_path, [PY, "-c", PROGRAM], {**stand_ins, "FAKE_NCU_IGNORES_STOP": "1"}, 2.0)
    assert run.status == "incomplete"
    assert "went on profiling after cuProfilerStop" in run.manifest["incomplete_reason"]
    b = run.manifest["capture"]["passes"][0]["ncu"]["budget"]
    assert b["settle_s"] == 2.0 and b["stopped_by"] == "stopping the program"
    assert "program done" not in (run.raw_dir / "program.stdout").read_text()
