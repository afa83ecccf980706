"""The Kineto read over worker counts: threads with the C scanner against the same threads without it (msgspec).

Builds a large plain-JSON trace once (``bench_kineto.replicate`` of a given trace, gunzipped, so that the
workers read their own byte ranges and no single thread inflates the whole file), then reads it with
``read_kineto(path, workers=N)`` in a fresh process for each worker count, once with the scanner (worker
threads) and once with ``TRACEKIT_NO_SCANNER=1`` (the same threads decoding with msgspec: the fallback). Prints wall and CPU seconds (the process and its children) per run.

    python benchmarks/bench_kineto_workers.py --source samples/h100-serve-torchprof/raw/torch_trace.json.gz \\
        --kernels 1000000 --workers 1,2,4,8 [--work /tmp/kw]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_kineto  # noqa: E402

from tracekit.analyzers.readers.kineto import native  # noqa: E402

CHILD = """
import json, sys, time
from pathlib import Path
from tracekit.analyzers.readers.kineto.reader import read_kineto
t = time.perf_counter()
ex = read_kineto(Path(sys.argv[1]), workers=int(sys.argv[2]))
print(json.dumps({"wall": time.perf_counter() - t, "kernels": ex.frame("kernels").height}))
"""


def _run(path: Path, workers: int, scanner: bool) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(workers)],
        env=native.environ(scanner),
        capture_output=True,
        text=True,
        check=True,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    got["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, required=True, help="a Kineto trace (.json.gz) to replicate")
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench-kineto-workers"))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    plain = args.work / f"trace_{args.kernels}.json"
    if not plain.exists():
        t = time.perf_counter()
        gz = args.work / "trace.json.gz"
        kernels, events, size = bench_kineto.replicate(args.source, args.kernels, gz)
        with gzip.open(gz, "rb") as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 24)
        gz.unlink()
        print(
            f"built {plain}: {kernels:,} kernels, {events:,} events, {size / 1e9:.2f} GB in {time.perf_counter() - t:.0f} s"
        )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cores} cores; {plain.stat().st_size / 1e9:.2f} GB of JSON")
    print(
        f"{'workers':>7s} {'threads + scanner: wall / CPU s':>32s} {'threads + msgspec: wall / CPU s':>34s}"
    )
    for w in (int(x) for x in args.workers.split(",")):
        a, b = _run(plain, w, True), _run(plain, w, False)
        assert a["kernels"] == b["kernels"], (a, b)
        print(f"{w:7d} {a['wall']:20.2f} / {a['cpu']:8.2f} {b['wall']:22.2f} / {b['cpu']:8.2f}")


if __name__ == "__main__":
    main()
