"""``tracekit export`` at scale: peak memory and time of exporting a run of N kernels, against its import.

The scale trace is the one benchmarks/bench_kineto.py builds (a real Kineto trace replicated until it holds N kernel
events). It is imported into a run (``tracekit import``), then the run is exported (``tracekit export``); each step
runs in its own process and reports its wall time and peak resident memory (its own high-water mark and its worker
processes', from getrusage). The claim checked: the export streams (batches of frame rows encoded by polars and
written as they are made), so it needs about the memory of reading the run, not of the JSON it writes.

    python benchmarks/bench_export.py [--kernels 1000000] [--work /tmp] [--keep]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_kineto import DEFAULT_SOURCE, replicate

CHILD = """
import contextlib, io, resource, sys, time
from tracekit.cli import main
t = time.perf_counter()
try:
    with contextlib.redirect_stdout(io.StringIO()):
        main(sys.argv[1:])
except SystemExit as e:
    assert not e.code, e.code
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print({"wall_s": round(time.perf_counter() - t, 2), "peak_mb": round(max(own, kids) / 1024), "own_mb": round(own / 1024), "workers_mb": round(kids / 1024)}, file=sys.stderr)
"""


def step(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"tracekit {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return eval(proc.stderr.strip().splitlines()[-1])  # the child's own dict literal


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tracekit-export-", dir=a.work))
    trace = work / "scale.json.gz"
    t = time.perf_counter()
    kernels, events, _ = replicate(a.source, a.kernels, trace)
    print(
        f"trace: {kernels:,} kernels, {events:,} events, built in {time.perf_counter() - t:.1f} s", flush=True
    )
    imp = step("import", str(trace), "-o", str(work / "run"))
    print(f"import: {json.dumps(imp)}", flush=True)
    read = step("show", str(work / "run"), "--json")  # reading the run and building its Analysis, no export
    print(f"read (show --json): {json.dumps(read)}", flush=True)
    out = work / "trace.json"
    exp = step("export", str(work / "run"), "-o", str(out))
    size = out.stat().st_size
    print(f"export: {json.dumps(exp)}, {size / 1e6:.0f} MB of JSON", flush=True)
    print(
        f"export peak / import peak = {exp['peak_mb'] / imp['peak_mb']:.2f}; / read peak = {exp['peak_mb'] / read['peak_mb']:.2f}"
    )
    if not a.keep:
        import shutil

        shutil.rmtree(work)


if __name__ == "__main__":
    main()
