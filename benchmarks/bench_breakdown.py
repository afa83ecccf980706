"""Times the step breakdown (analyzers/breakdown) on scaled copies of a real trace's frames.

The frames of HTA's ``trace_diff`` trace (8,568 kernels, 882 memcpy / memset, 2,682 ranges, one A100, NCCL on its
own streams) are repeated ``--copies`` times, each copy shifted past the previous one's end with fresh range ids,
so the breakdown sees one long run of the same steps. Prints rows, range names and seconds for the whole-run
slices alone and with the per-range windows.

    python benchmarks/bench_breakdown.py                  # 1, 10, 100 copies (~9.5k to ~945k rows)
    python benchmarks/bench_breakdown.py --copies 10 50
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "data" / "thirdparty" / "hta" / "trace_diff__control__control.json.gz"


def scaled(frames: dict[str, pl.DataFrame], copies: int) -> dict[str, pl.DataFrame]:
    """``frames`` repeated ``copies`` times one after another (kernels, memops, ranges)."""
    k, m, r = frames["kernels"], frames["memops"], frames["ranges"]
    t0 = min(k["start_ns"].min(), r["start_ns"].min())
    t1 = max(k["end_ns"].max(), r["end_ns"].max())
    shift = t1 - t0 + 1
    rid = int(r["range_id"].max()) + 1
    time_cols = ("start_ns", "end_ns", "launch_start_ns")

    def copy(df: pl.DataFrame, i: int, ids: tuple[str, ...]) -> pl.DataFrame:
        return df.with_columns(
            *[pl.col(c) + i * shift for c in time_cols if c in df.columns],
            *[pl.col(c) + i * rid for c in ids],
        )

    return {
        "kernels": pl.concat([copy(k, i, ("range_id",)) for i in range(copies)]),
        "memops": pl.concat([copy(m, i, ("range_id",)) for i in range(copies)]),
        "ranges": pl.concat([copy(r, i, ("range_id", "parent_id")) for i in range(copies)]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, nargs="+", default=[1, 10, 100])
    args = ap.parse_args()
    from tracekit.analyzers.breakdown import breakdown
    from tracekit.analyzers.importer import combine
    from tracekit.analyzers.readers.kineto.reader import read_kineto

    base = combine([read_kineto(TRACE)])
    print(f"{'copies':>6} {'rows':>9} {'ranges':>9} {'devices s':>10} {'+ranges s':>10} {'names':>6}")
    for n in args.copies:
        frames = scaled(base, n)
        rows = frames["kernels"].height + frames["memops"].height
        t = time.perf_counter()
        breakdown(frames, with_ranges=False)
        dev = time.perf_counter() - t
        t = time.perf_counter()
        b = breakdown(frames)
        full = time.perf_counter() - t
        print(
            f"{n:>6} {rows:>9,} {frames['ranges'].height:>9,} {dev:>10.2f} {full:>10.2f} {b.ranges_total:>6}"
        )


if __name__ == "__main__":
    main()
