"""Times the whole ``tracekit import`` command, as a user runs it, against the sum of its phases.

The phase benchmarks (bench_nsys.py: read + join; bench_kineto.py: read) time one function each in a warm
process. A user waits for more: the interpreter and its imports, hashing the file, decompressing and sniffing it,
combining the extracts, writing the frames and the manifest. This script builds the two large inputs of those
benchmarks once (kept in ``--work`` for later runs):

- ``nsys``: the 2-GPU H100 export ``nsys-ai/h100_2gpu_1s.sqlite`` scaled to ~1M kernels and ~5M NVTX ranges
  (bench_nsys.py's ``build_scaled``);
- ``kineto``: HTA's ``df_index_resolver`` trace replicated to ~1M kernels (bench_kineto.py's ``replicate``);

then, per input and repeat, runs ``python -m tracekit import FILE -o RUN`` in a fresh process (wall seconds, CPU
seconds of it and its workers, peak RSS: the largest sum over the process tree, sampled every 20 ms) and, in
another fresh process, the import's phases one after another, each timed (:data:`PHASES_CHILD`). The table gives
both and their difference (what no phase benchmark sees: start-up, imports, the manifest, process exit).

With ``--against PYTHON`` (the interpreter of another checkout's environment, e.g. main's, with tracekit
installed there) each repeat runs the whole command with that interpreter and with this one, in alternating
order, and the table gives each round side by side and the ratio of this code to the baseline. Use it for every
speed claim: on this machine the same code has run 1.6x slower from one day to the next (docs/PERFORMANCE.md), so only
code against code in the same minutes compares.

    python benchmarks/bench_import.py [--inputs nsys,kineto] [--repeats 3] [--work /tmp/bench-import]
    python benchmarks/bench_import.py --against ../main/.venv/bin/python --no-phases
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_kineto  # noqa: E402
import bench_nsys  # noqa: E402

PHASES_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from pathlib import Path
import tracekit.analyzers.importer as importer
from tracekit.run import Run
phases = {"start + imports": time.perf_counter() - t0}
src, out = Path(sys.argv[1]), Path(sys.argv[2])

def timed(name, fn):
    t = time.perf_counter()
    value = fn()
    phases[name] = time.perf_counter() - t
    return value

run = timed("create run", lambda: Run.create(out, command=None))
raw = run.raw_dir / src.name
job = importer.ReadJob(0, str(src), str(raw), f"raw/{src.name}", True)
copies = importer.Copies([job], held=True)  # as import_files: the copy starts once the file is read
result = timed("read (its copy into raw/ held)", lambda: importer.read_job(job, copies=copies))
timed("settle (copy + hash meanwhile)", lambda: importer.settled(result))
frames = timed("place", lambda: importer.place([result.frames]))
timed("copy + hash, what is left", lambda: (importer.hash_copies([result], copies), copies.join()))
timed("write frames + manifest", lambda: importer._write(run, frames, [result]))
print(json.dumps(phases))
"""
"""The phases of an import, in the order the importer runs them, each timed in one process."""


class TreeSampler:
    """The largest sum of resident memory over a process and its descendants, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_kb, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _rss(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/status") as f:
                return next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
        except OSError:
            return 0

    def _tree(self, pid: int) -> list[int]:
        out = [pid]
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    for child in f.read().split():
                        out += self._tree(int(child))
        except OSError:
            pass
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kb = max(self.peak_kb, sum(self._rss(p) for p in self._tree(self.pid)))
            time.sleep(0.02)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak_kb


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


NEUTRAL_CWD = tempfile.gettempdir()
"""Where the timed commands run: ``python -m`` puts the working folder first on ``sys.path``, so run from a
checkout, another environment's interpreter imports that checkout's ``tracekit`` core package beside its own
install's ``tracekit.analyzers`` (a baseline run from this checkout timed a mix of the two)."""


def whole_command(src: Path, out: Path, python: str = sys.executable) -> dict[str, Any]:
    """``python -m tracekit import SRC -o OUT`` in a fresh process: wall s, CPU s, peak tree RSS, exit code."""
    shutil.rmtree(out, ignore_errors=True)
    load = os.getloadavg()[0]
    cpu0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.Popen(
        [python, "-m", "tracekit", "import", str(src.resolve()), "-o", str(out.resolve())],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=NEUTRAL_CWD,
    )
    sampler = TreeSampler(proc.pid)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    peak = sampler.stop()
    if proc.returncode != 0:
        raise SystemExit(f"tracekit import {src} exited {proc.returncode}: {stderr.strip()[-400:]}")
    return {
        "seconds": wall,
        "load": load,
        "cpu": _children_cpu() - cpu0,
        "peak_gb": peak / 1048576,
        "said": stdout.strip(),
    }


def phases(src: Path, out: Path) -> dict[str, float]:
    """The import's phases, each timed, in one fresh process (:data:`PHASES_CHILD`)."""
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.run(
        [sys.executable, "-c", PHASES_CHILD, str(src), str(out)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"phase run of {src} failed: {proc.stderr.strip()[-400:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def checkout_of(python: str) -> str:
    """Where ``python``'s tracekit lives and its commit, for the table's header."""
    code = "import tracekit, pathlib; print(pathlib.Path(tracekit.__file__).resolve().parents[1])"
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False, cwd=NEUTRAL_CWD)
    if proc.returncode != 0:
        raise SystemExit(f"{python} cannot import tracekit: {proc.stderr.strip()[-300:]}")
    root = proc.stdout.strip()
    head = subprocess.run(
        ["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return f"{root} at {head.stdout.strip() or 'an unknown commit'}"


def single(src: Path, tmp: Path, repeats: int, *, phased: bool) -> None:
    """This code alone: the whole command ``repeats`` times (median, runs, CPU, peak RSS) and, with ``phased``,
    the import's phases (median of runs) against it."""
    wholes, parts = [], []
    for _ in range(repeats):
        wholes.append(whole_command(src, tmp / "run"))
        if phased:
            parts.append(phases(src, tmp / "phases"))
    secs = [w["seconds"] for w in wholes]
    print(f"  {wholes[-1]['said']}")
    print(
        f"  tracekit import (whole command): median {statistics.median(secs):.2f} s "
        f"(runs {', '.join(f'{s:.2f}' for s in secs)}), CPU {statistics.median(w['cpu'] for w in wholes):.1f} s, "
        f"peak RSS {max(w['peak_gb'] for w in wholes):.2f} GB"
    )
    if parts:
        print(f"  {'phase (one process, median of runs)':42} {'seconds':>8}")
        total = 0.0
        for key in parts[0]:
            value = statistics.median(p[key] for p in parts)
            total += value
            print(f"  {key:42} {value:8.2f}")
        print(f"  {'sum of phases':42} {total:8.2f}")
        print(f"  {'whole command - sum of phases':42} {statistics.median(secs) - total:8.2f}")


def paired(src: Path, out: Path, baseline: str, repeats: int) -> None:
    """The whole command with ``baseline``'s interpreter and with this one, alternating which goes first, and
    the ratio of this code's wall and CPU seconds to the baseline's in each round."""
    print(
        f"  {'round':>5} {'first':>8} {'baseline wall / CPU s':>22} {'this wall / CPU s':>18} {'ratio wall / CPU':>17}"
    )
    ratios = []
    for i in range(repeats):
        order = ["baseline", "this"] if i % 2 == 0 else ["this", "baseline"]
        got = {
            who: whole_command(src, out, baseline if who == "baseline" else sys.executable) for who in order
        }
        b, t = got["baseline"], got["this"]
        ratios.append((t["seconds"] / b["seconds"], t["cpu"] / b["cpu"]))
        print(
            f"  {i + 1:>5} {order[0]:>8} {b['seconds']:>11.2f} / {b['cpu']:>7.2f} {t['seconds']:>8.2f} / {t['cpu']:>7.2f}"
            f" {ratios[-1][0]:>8.3f} / {ratios[-1][1]:.3f}   (load {b['load']:.1f} / {t['load']:.1f}; peak "
            f"{b['peak_gb']:.2f} / {t['peak_gb']:.2f} GB)"
        )
    print(
        f"  median ratio, this / baseline: wall {statistics.median(r[0] for r in ratios):.3f}, "
        f"CPU {statistics.median(r[1] for r in ratios):.3f} (below 1: this code is faster)"
    )


def build_inputs(work: Path, wanted: list[str]) -> dict[str, Path]:
    """The scaled nsys export and the replicated Kineto trace, made once and kept in ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    made: dict[str, Path] = {}
    if "nsys" in wanted:
        path = work / "nsys_1m_5m.sqlite"
        if not path.is_file():
            print("building the scaled nsys export ...", file=sys.stderr)
            tmp = work / "nsys_1m_5m.sqlite.tmp"
            bench_nsys.build_scaled(bench_nsys.DEFAULT_SOURCE, tmp, 1_000_000, 5_000_000)
            tmp.rename(path)
        made["nsys"] = path
    if "kineto" in wanted:
        path = work / "kineto_1m.json.gz"
        if not path.is_file():
            print("building the replicated Kineto trace ...", file=sys.stderr)
            tmp = work / "kineto_1m.tmp.json.gz"
            bench_kineto.replicate(bench_kineto.DEFAULT_SOURCE, 1_000_000, tmp)
            tmp.rename(path)
        made["kineto"] = path
    return made


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--inputs",
        default="nsys,kineto",
        help="which inputs: nsys, kineto, or both (nsys,kineto, the default)",
    )
    ap.add_argument("--repeats", type=int, default=3, help="runs of each measurement (median reported)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-import")
    ap.add_argument("--no-phases", action="store_true", help="time the whole command only")
    ap.add_argument(
        "--against",
        metavar="PYTHON",
        help="also time the whole command with this interpreter (another checkout's environment), alternating",
    )
    ap.add_argument(
        "--only-against", action="store_true", help="with --against: time the alternating pairs only"
    )
    args = ap.parse_args(argv)
    if args.only_against and not args.against:
        ap.error("--only-against needs --against PYTHON")
    wanted = ["nsys", "kineto"] if args.inputs == "both" else [x for x in args.inputs.split(",") if x]
    if not wanted or set(wanted) - {"nsys", "kineto"}:
        ap.error(f"--inputs: nsys, kineto or both, not {args.inputs!r}")  # "both" once ran nothing, silently
    inputs = build_inputs(args.work, wanted)
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}; "
        f"load average at start {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    if args.against:
        print(f"this code: {checkout_of(sys.executable)}\nbaseline:  {checkout_of(args.against)}")
    with tempfile.TemporaryDirectory(prefix="bench-import-run-", dir=args.work) as tmp:
        for name, src in inputs.items():
            print(f"\n{name}: {src.name}, {src.stat().st_size / 1e6:,.0f} MB")
            if not args.only_against:
                single(src, Path(tmp), args.repeats, phased=not args.no_phases)
            if args.against:
                print("  whole command against the baseline, alternating:")
                paired(src, Path(tmp) / "run", args.against, args.repeats)
            print(f"  load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
