"""Times the Nsight Systems SQLite reader and the kernel-to-range join on a scaled copy of a real export.

The copy (in a temporary folder) replicates every kernel, runtime API and NVTX row of
``nsys-ai/h100_2gpu_1s.sqlite`` (3,442 kernels, 16,782 NVTX ranges, 2 processes) with timestamps shifted by the
trace's span and correlation ids shifted past the largest one, so each copy is a new, consistent stretch of the
same two-process trace. Target: read + join of ~1M kernels and ~5M NVTX ranges under 10 s on 2 cores.

    python benchmarks/bench_nsys.py                      # ~1M kernels, ~5M NVTX ranges
    python benchmarks/bench_nsys.py --kernels 100000 --nvtx 500000 --engine sqlite3
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_SOURCE = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "thirdparty" / "nsys-ai" / "h100_2gpu_1s.sqlite"
)
KERNEL, RUNTIME, NVTX = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"


def _count(con: sqlite3.Connection, table: str) -> int:
    return con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]


def _replicate(con: sqlite3.Connection, table: str, copies: int, span: int, corr_span: int) -> None:
    """Append ``copies - 1`` shifted copies of the table's current rows (INSERT ... SELECT, all in SQLite)."""
    cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
    n0 = con.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0] or 0
    exprs = []
    for c in cols:
        if c in ("start", "end"):
            exprs.append(f'"{c}" + copies.i * {span}')
        elif c == "correlationId":
            exprs.append(f'"{c}" + copies.i * {corr_span}')
        else:
            exprs.append(f'"{c}"')
    con.execute("DROP TABLE IF EXISTS temp.copies")
    con.execute("CREATE TEMP TABLE copies (i INTEGER)")
    con.executemany("INSERT INTO temp.copies VALUES (?)", [(i,) for i in range(1, copies)])
    names = ", ".join(f'"{c}"' for c in cols)
    con.execute(
        f'INSERT INTO "{table}" ({names}) SELECT {", ".join(exprs)} FROM "{table}", temp.copies AS copies '
        f'WHERE "{table}".rowid <= {n0}'
    )


def build_scaled(source: Path, target: Path, kernels: int, nvtx: int) -> dict[str, int]:
    """Copy ``source`` to ``target`` and scale it to about ``kernels`` kernels and ``nvtx`` NVTX rows."""
    shutil.copyfile(source, target)
    con = sqlite3.connect(target)
    try:
        con.execute("PRAGMA journal_mode = OFF")
        con.execute("PRAGMA synchronous = OFF")
        lo, hi = con.execute(
            f"SELECT min(lo), max(hi) FROM (SELECT min(start) lo, max(end) hi FROM {KERNEL} "
            f"UNION ALL SELECT min(start), max(end) FROM {RUNTIME} "
            f"UNION ALL SELECT min(start), max(coalesce(end, start)) FROM {NVTX})"
        ).fetchone()
        span = hi - lo + 1_000
        corr_span = (
            con.execute(
                f"SELECT max(c) FROM (SELECT max(correlationId) c FROM {KERNEL} "
                f"UNION ALL SELECT max(correlationId) FROM {RUNTIME})"
            ).fetchone()[0]
            + 1
        )
        k_copies = max(1, math.ceil(kernels / _count(con, KERNEL)))
        n_copies = max(1, math.ceil(nvtx / _count(con, NVTX)))
        # Both kernel-side tables get the same copies so every copy keeps its launch records.
        _replicate(con, KERNEL, k_copies, span, corr_span)
        _replicate(con, RUNTIME, k_copies, span, corr_span)
        _replicate(con, NVTX, n_copies, span, corr_span)
        con.commit()
        return {t: _count(con, t) for t in (KERNEL, RUNTIME, NVTX)}
    finally:
        con.close()


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _timed(rows_of: Callable[[Any], int], fn: Callable[[], Any]) -> tuple[Any, int, float, float]:
    """``fn()``, its row count, wall seconds and CPU seconds (all threads; the machine may be shared)."""
    t0, c0 = time.perf_counter(), _cpu_s()
    out = fn()
    return out, rows_of(out), time.perf_counter() - t0, _cpu_s() - c0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=1_000_000, help="kernels in the scaled copy (about)")
    ap.add_argument("--nvtx", type=int, default=5_000_000, help="NVTX rows in the scaled copy (about)")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="nsys SQLite export to scale")
    ap.add_argument("--engine", choices=("auto", "pages", "sqlite3"), default="auto", help="reader engine")
    ap.add_argument("--budget", type=float, default=10.0, help="seconds allowed for read + join")
    args = ap.parse_args(argv)
    if not args.source.is_file():
        print(f"source export not found: {args.source} (pass --source)", file=sys.stderr)
        return 2

    from tracekit.analyzers.join import assign_ranges, nest_ranges
    from tracekit.analyzers.readers.nsys.reader import read_nsys_sqlite

    results: list[tuple[str, int, float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench_nsys_") as tmp:
        target = Path(tmp) / "scaled.sqlite"
        counts, _, t_build, _ = _timed(
            lambda c: 0, lambda: build_scaled(args.source, target, args.kernels, args.nvtx)
        )
        size_mib = target.stat().st_size / 2**20
        print(
            f"scaled copy: {counts[KERNEL]:,} kernels, {counts[RUNTIME]:,} runtime rows, {counts[NVTX]:,} NVTX rows, "
            f"{size_mib:,.0f} MiB, built in {t_build:.1f} s",
            file=sys.stderr,
        )
        ex, _, t_read, c_read = _timed(lambda e: 0, lambda: read_nsys_sqlite(target, engine=args.engine))
        kernels, ranges = ex.frames["kernels"], ex.frames["ranges"]
        results.append(("read_nsys_sqlite", kernels.height + ranges.height, t_read, c_read, _peak_rss_mib()))
        total, total_cpu = t_read, c_read
        nested, n, t, c = _timed(lambda f: f.height, lambda: nest_ranges(ranges))
        results.append(("nest_ranges", n, t, c, _peak_rss_mib()))
        assigned, n, t2, c2 = _timed(lambda f: f.height, lambda: assign_ranges(kernels, nested))
        results.append(("assign_ranges", n, t2, c2, _peak_rss_mib()))
        total, total_cpu = total + t + t2, total_cpu + c + c2
        linked = assigned["range_id"].is_not_null().sum()
        print(f"kernels with a range: {linked:,} of {assigned.height:,}", file=sys.stderr)
        results.append(
            ("total (read + join)", kernels.height + ranges.height, total, total_cpu, _peak_rss_mib())
        )

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"engine: {args.engine}; kernels {kernels.height:,}, ranges {ranges.height:,}; load average {load}")
    print(f"{'stage':<22} {'rows':>12} {'seconds':>9} {'CPU s':>7} {'rows/s':>13} {'peak RSS MiB':>13}")
    for stage, rows, secs, cpu, rss in results:
        rate = rows / secs if secs else 0
        print(f"{stage:<22} {rows:>12,} {secs:>9.2f} {cpu:>7.2f} {rate:>13,.0f} {rss:>13,.0f}")
    verdict = "within" if total <= args.budget else "OVER"
    print(f"read + join: {total:.2f} s, {verdict} the {args.budget:.0f} s budget")
    return 0 if total <= args.budget else 1


if __name__ == "__main__":
    raise SystemExit(main())
