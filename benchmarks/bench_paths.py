"""The whole ``tracekit import`` command on the scale files, once per read path, alternating: what each native
module saves of the command a user waits for.

Each variant runs the import command in a fresh interpreter (``tracekit.cli.main``, as ``python -m tracekit``
does) with the native modules switched off through their environment variables (inherited by worker
processes) or, for variants that existed only as code paths, a few lines run before the command:

- nsys (``nsys_1m_5m.sqlite``: ~1M kernels, ~5M NVTX ranges): ``native`` (the page reader), ``sqlite3`` (the
  fallback);
- Kineto (``kineto_1m.json.gz``: ~1M kernels): ``native`` (the C scanner in threads), ``msgspec`` (msgspec
  in the same threads; the fallback).

The variants that decided which paths stay (ADBC, the C nesting sweep, msgspec in worker processes) ran with
this script at commit 5686a2c, where they still existed; docs/PERFORMANCE.md has their numbers.

Rounds alternate the variants' order (the first of a round runs on a colder page cache); the table gives each
run, the median, and each variant's saving against the fallback as a share of the fallback's command. The files
are built by bench_import.py (``--work``, shared with it).

    python benchmarks/bench_paths.py [--inputs nsys,kineto] [--rounds 3] [--work /tmp/bench-import]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_import  # noqa: E402

RUN = "import sys; from tracekit.cli import main; main(['import', sys.argv[1], '-o', sys.argv[2]])"
VARIANTS: dict[str, dict[str, tuple[dict[str, str], str]]] = {
    "nsys": {
        "native": ({}, ""),
        "sqlite3": ({"TRACEKIT_NO_PAGE_READER": "1"}, ""),
    },
    "kineto": {
        "native": ({}, ""),
        "msgspec": ({"TRACEKIT_NO_SCANNER": "1"}, ""),
    },
}
"""Per input: variant -> (environment added, code run before the command). The fallback is the last."""


def run_once(src: Path, out: Path, env: dict[str, str], prelude: str) -> dict[str, float]:
    """One import in a fresh interpreter: wall s, CPU s of it and its children, peak RSS of the tree (GB)."""
    shutil.rmtree(out, ignore_errors=True)
    cpu0, t0 = bench_import._children_cpu(), time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", f"{prelude}\n{RUN}", str(src.resolve()), str(out.resolve())],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=bench_import.NEUTRAL_CWD,
        env={**os.environ, **env},
    )
    sampler = bench_import.TreeSampler(proc.pid)
    _, stderr = proc.communicate()
    wall = time.perf_counter() - t0
    peak = sampler.stop()
    if proc.returncode != 0:
        raise SystemExit(f"import of {src} ({env}) exited {proc.returncode}: {stderr.strip()[-400:]}")
    return {"wall": wall, "cpu": bench_import._children_cpu() - cpu0, "peak": peak / 1048576}


def compare(name: str, src: Path, tmp: Path, rounds: int) -> None:
    variants = VARIANTS[name]
    order = list(variants)
    got: dict[str, list[dict[str, float]]] = {v: [] for v in order}
    for r in range(rounds):
        turn = order if r % 2 == 0 else order[::-1]
        for v in turn:
            env, prelude = variants[v]
            got[v].append(run_once(src, tmp / "run", env, prelude))
        load = os.getloadavg()[0]
        print(
            f"  round {r + 1} ({' then '.join(turn)}; load {load:.1f}): "
            + ", ".join(f"{v} {got[v][-1]['wall']:.2f} s" for v in order),
            flush=True,
        )
    fallback = order[-1]
    base = statistics.median(x["wall"] for x in got[fallback])
    print(f"  {'variant':10} {'median wall s':>13} {'CPU s':>7} {'peak GB':>8} {'saves of the fallback':>22}")
    for v in order:
        wall = statistics.median(x["wall"] for x in got[v])
        cpu = statistics.median(x["cpu"] for x in got[v])
        peak = max(x["peak"] for x in got[v])
        print(f"  {v:10} {wall:13.2f} {cpu:7.1f} {peak:8.2f} {100 * (1 - wall / base):21.0f}%")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", default="nsys,kineto", help="nsys, kineto or nsys,kineto (the default)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of all variants, alternating the order")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-import")
    args = ap.parse_args(argv)
    wanted = [x for x in args.inputs.split(",") if x]
    if not wanted or set(wanted) - set(VARIANTS):
        ap.error(f"--inputs: nsys, kineto or nsys,kineto, not {args.inputs!r}")
    inputs = bench_import.build_inputs(args.work, wanted)
    load = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}; "
        f"load average at start {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-paths-", dir=args.work) as tmp:
        for name, src in inputs.items():
            print(f"\n{name}: {src.name}, {src.stat().st_size / 1e6:,.0f} MB")
            compare(name, src, Path(tmp), args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
