"""Times what a user waits for after an import, against a baseline commit, in one run: the import, then the
first and the second read of each command (show, explain, report, and the TUI's case table), wall seconds and
peak RSS (the largest sum over the process tree), each in a fresh process, as a user runs them.

The inputs are bench_import.py's (made once and kept in ``--work``): the 2-GPU nsys export scaled to ~1M kernels
and ~5M NVTX ranges, and the Kineto trace replicated to ~1M kernels. The baseline is another commit (default: the
merge base of HEAD and ``main``, the commit before this branch's first change), checked out as a git worktree in
``--work`` with its own virtual environment (``pip install -e``), made once and kept. Per input, the baseline and
this checkout take turns (which goes first alternates per input): each imports the input into a run of its own,
then reads it, each command twice, with a per-user cache of its own (``TRACEKIT_CACHE_DIR``, empty at the first
read). The TUI's case table is timed as the app loads it (``tracekit.tui.data.load_run`` then ``analyze``: what
the overview's worker does before it fills the table), in a fresh process that imports the same modules.

    python benchmarks/bench_read.py [--inputs kineto,nsys] [--baseline COMMIT] [--work /tmp/bench-import]

Run it on a quiet machine for numbers to quote; on a shared one, say so beside them (the ratios hold better than
the seconds).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_import import NEUTRAL_CWD, TreeSampler, build_inputs, checkout_of  # noqa: E402

TUI_CHILD = """
import sys
from tracekit.tui.data import analyze, load_run
data = load_run(sys.argv[1])
analysis = analyze(data)
print(f"{len(analysis.cases)} cases")
"""
"""The TUI's case table as the overview's worker loads it: the run opened, then its Analysis (the table's rows)."""

COMMANDS = ("show", "explain", "report", "tui")


def _git(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def baseline_python(commit: str, work: Path) -> str:
    """The interpreter of a worktree of ``commit`` with tracekit installed (made once in ``work``)."""
    sha = _git("rev-parse", "--verify", f"{commit}^{{commit}}")
    tree = work / f"baseline-{sha[:12]}"
    python = tree / ".venv" / "bin" / "python"
    if python.is_file():
        return str(python)
    if not tree.is_dir():
        print(f"checking out the baseline {sha[:12]} in {tree} ...", file=sys.stderr)
        _git("worktree", "add", "--detach", str(tree), sha)
    print("installing the baseline's environment ...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(tree / ".venv")], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-e", str(tree)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return str(python)


def timed(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """One command in a fresh process: wall seconds, peak tree RSS (MB), exit code."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=NEUTRAL_CWD, env=env
    )
    sampler = TreeSampler(proc.pid)
    _, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    peak = sampler.stop()
    if proc.returncode not in (0, 4):  # 4: a partial import still makes a run
        raise SystemExit(f"{' '.join(argv[2:4])} exited {proc.returncode}: {stderr.strip()[-400:]}")
    return {"seconds": wall, "peak_mb": peak / 1024}


def one_side(python: str, src: Path, scratch: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Import ``src`` with ``python``'s tracekit, then each command twice: {(step, read): timing}."""
    run, cache, out = scratch / "run", scratch / "cache", scratch / "report.md"
    for p in (run, cache):
        shutil.rmtree(p, ignore_errors=True)
    env = {**os.environ, "TRACEKIT_CACHE_DIR": str(cache), "COLUMNS": "120", "NO_COLOR": "1"}
    got = {("import", ""): timed([python, "-m", "tracekit", "import", str(src), "-o", str(run)], env)}
    argv = {
        "show": [python, "-m", "tracekit", "show", str(run)],
        "explain": [python, "-m", "tracekit", "explain", str(run)],
        "report": [python, "-m", "tracekit", "report", str(run), "-o", str(out)],
        "tui": [python, "-c", TUI_CHILD, str(run)],
    }
    for command in COMMANDS:
        for read in ("first", "second"):
            got[command, read] = timed(argv[command], env)
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", default="kineto,nsys", help="kineto, nsys, or both comma-separated")
    ap.add_argument(
        "--baseline", default=None, help="the commit to compare with (default: merge base with main)"
    )
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-import")
    args = ap.parse_args(argv)
    wanted = [x for x in args.inputs.split(",") if x]
    if not wanted or set(wanted) - {"nsys", "kineto"}:
        ap.error(f"--inputs: kineto, nsys or both, not {args.inputs!r}")
    commit = args.baseline or _git("merge-base", "HEAD", "main")
    inputs = build_inputs(args.work, wanted)
    base = baseline_python(commit, args.work)
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}; load average at start "
        f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\nthis code: {checkout_of(sys.executable)}\n"
        f"baseline:  {checkout_of(base)}"
    )
    header = f"{'input':<7} {'step':<8} {'read':<7} {'baseline s':>10} {'MB':>6} {'this s':>8} {'MB':>6} {'ratio s':>8}"
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-read-", dir=args.work) as tmp:
        for i, name in enumerate(wanted):
            sides = ["baseline", "this"] if i % 2 == 0 else ["this", "baseline"]
            got = {}
            for side in sides:
                scratch = Path(tmp) / side
                scratch.mkdir(exist_ok=True)
                got[side] = one_side(base if side == "baseline" else sys.executable, inputs[name], scratch)
            for step, read in got["this"]:
                b, t = got["baseline"][step, read], got["this"][step, read]
                rows.append(
                    f"{name:<7} {step:<8} {read or '-':<7} {b['seconds']:>10.2f} {b['peak_mb']:>6.0f} "
                    f"{t['seconds']:>8.2f} {t['peak_mb']:>6.0f} {t['seconds'] / b['seconds']:>8.3f}"
                )
            print(
                f"\n{name} done (first: {sides[0]}); load average {os.getloadavg()[0]:.1f}", file=sys.stderr
            )
    print(header)
    print("\n".join(rows))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
