"""Re-opening a run's frames: a run with ~1M kernels, written once, then read back from parquet.

The frames come from a real trace (default: HTA's df_index_resolver, 19,370 kernels) read with tracekit's Kineto
reader and replicated (times shifted past the previous copy, ids offset) to ``--kernels`` rows; ranges and
devices are replicated alongside. They are written with ``write_frames(Run.create(...), {...})``; then
``read_frame(Run.open(path), name)`` is timed for every frame (best and first of ``--repeat`` runs). Target: the
kernels frame re-opens in under 0.2 s.

    python benchmarks/bench_parquet.py [--kernels 1000000] [--repeat 5] [--source TRACE]
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from tracekit.analyzers.readers.kineto.reader import read_kineto
from tracekit.analyzers.store import read_frame, write_frames
from tracekit.run import Run

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = (
    ROOT.parent / "shared" / "data" / "thirdparty" / "hta" / "df_index_resolver__df_index_resolver.json.gz"
)


def replicate_frames(source: Path, kernels: int) -> dict[str, pl.DataFrame]:
    ex = read_kineto(source)
    k, r = ex.frame("kernels"), ex.frame("ranges")
    copies = max(1, math.ceil(kernels / max(k.height, 1)))
    span = int(
        max(k["end_ns"].max() or 0, r["end_ns"].max() or 0) - min(k["start_ns"].min(), r["start_ns"].min())
    )
    span += 1_000_000
    corr = int(k["correlation_id"].max() or 0) + 1
    ks, rs = [], []
    for i in range(copies):
        dt = i * span
        ks.append(
            k.with_columns(
                pl.col("kernel_id") + i * k.height,
                pl.col("start_ns") + dt,
                pl.col("end_ns") + dt,
                pl.col("launch_start_ns") + dt,
                pl.col("correlation_id") + i * corr,
            )
        )
        rs.append(
            r.with_columns(pl.col("range_id") + i * r.height, pl.col("start_ns") + dt, pl.col("end_ns") + dt)
        )
    kernels_df = pl.concat(ks).head(kernels)
    return {"kernels": kernels_df, "ranges": pl.concat(rs), "devices": ex.frame("devices")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    args = ap.parse_args()
    if not args.source.is_file():
        sys.exit(f"source trace {args.source} not found (give --source)")
    frames = replicate_frames(args.source, args.kernels)
    work = Path(tempfile.mkdtemp(prefix="bench-parquet-"))
    try:
        t = time.perf_counter()
        write_frames(Run.create(work / "run"), frames)
        write_s = time.perf_counter() - t
        print(f"wrote {', '.join(f'{n} {df.height:,} rows' for n, df in frames.items())} in {write_s:.2f} s")
        print(f"\n{'frame':10} {'rows':>10} {'columns':>8} {'file MB':>8} {'first s':>8} {'best s':>8}")
        total_best = 0.0
        for name, df in frames.items():
            times = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                got = read_frame(Run.open(work / "run"), name)
                times.append(time.perf_counter() - t)
            assert isinstance(got, pl.DataFrame) and got.height == df.height and got.schema == df.schema
            size = (work / "run" / "frames" / f"{name}.parquet").stat().st_size / 1e6
            total_best += min(times)
            print(f"{name:10} {df.height:10,d} {df.width:8d} {size:8.1f} {times[0]:8.3f} {min(times):8.3f}")
        t = time.perf_counter()
        run = Run.open(work / "run")
        all_frames = {n: read_frame(run, n) for n in frames}
        print(f"{'all three':10} {'':>10} {'':>8} {'':>8} {time.perf_counter() - t:8.3f}  (one Run.open)")
        assert all_frames["kernels"].height == frames["kernels"].height
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
