"""Where ``read_nsys_sqlite`` + the join spend their time: wall seconds per phase on bench_nsys.py's scaled export.

Wraps the reader's phase functions (analyzers/readers/nsys/reader.py, analyzers/readers/nsys/db.py) and the join (analyzers/join.py)
with timers for one run, so the cost is a clock read per call (a few hundred calls in all), not a sampling
profiler's. Phases nest: a row's seconds include its children's, and each parent gets an ``(own code)`` row
with the remainder. The table reads (``_Db.query``) run on a thread pool: the ``parallel table reads`` row is wall
time, the per-table rows below it are summed over the worker threads (they overlap, so they add up to more).

    python benchmarks/nsys_profile_parts.py                       # builds the 1M + 5M copy (about 10 s)
    python benchmarks/nsys_profile_parts.py --keep /tmp/s.sqlite  # build once and keep it; reuse it next time
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_nsys import DEFAULT_SOURCE, _peak_rss_mib, build_scaled

_local = threading.local()
_wall: dict[str, float] = defaultdict(float)  # phase path -> seconds (inclusive)
_calls: dict[str, int] = defaultdict(int)
_rows: dict[str, int] = defaultdict(int)


def _rows_of(out: Any) -> int:
    height = getattr(out, "height", None)
    if isinstance(height, int):
        return height
    frames = getattr(out, "frames", None)
    if isinstance(frames, dict):
        return sum(f.height for f in frames.values())
    return 0


def _timed(name: str, fn: Callable[..., Any], label: Callable[..., str] | None = None) -> Callable[..., Any]:
    """``fn`` recording its wall time under the caller's phase path (thread-local, so pool threads nest alone)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        leaf = label(*args, **kwargs) if label else name
        # a pool thread starts with an empty stack: file its reads under the parallel read
        base = stack or (["read_nsys_sqlite", "parallel table reads (wall)"] if label else [])
        path = "/".join([*base, leaf])
        stack.append(leaf)
        t0 = time.perf_counter()
        try:
            out = fn(*args, **kwargs)
        finally:
            stack.pop()
            _wall[path] += time.perf_counter() - t0
            _calls[path] += 1
        _rows[path] += _rows_of(out)
        return out

    return wrapper


def _query_label(self: Any, sql: str, schema: Any) -> str:
    table = re.search(r'FROM "([^"]+)"', sql)
    return f"query {table.group(1) if table else '?'}"


def instrument() -> None:
    """Wrap the phases of the reader and the join (module attributes, so the reader's own calls go through)."""
    from tracekit.analyzers import join
    from tracekit.analyzers.readers import base
    from tracekit.analyzers.readers.nsys import db as _nsys_db
    from tracekit.analyzers.readers.nsys import pages as _pages
    from tracekit.analyzers.readers.nsys import ranges as _ranges
    from tracekit.analyzers.readers.nsys import reader as nsys

    for name in (
        "_check_file",
        "_read_devices",
        "_read_kernels",
        "_resolve",
        "_link_launches",
        "_lookup",
        "_fit",
    ):
        setattr(nsys, name, _timed(name, getattr(nsys, name)))
    for name in ("event_ids", "read_ranges", "nvtx_op_shapes"):  # the reader imports them when it runs
        setattr(_ranges, name, _timed(name, getattr(_ranges, name)))
    for name in ("_lookup", "_fit"):  # the ranges module's own references
        setattr(_ranges, name, getattr(nsys, name))
    _pages.Part.read = _timed("page reader part", _pages.Part.read)  # type: ignore[method-assign]
    nsys.fit_frame = _timed("fit_frame", base.fit_frame)
    _nsys_db._Db.query = _timed("query", _nsys_db._Db.query, _query_label)  # type: ignore[method-assign]
    _nsys_db._Db.chunks = _timed("chunks (rowid bounds)", _nsys_db._Db.chunks)  # type: ignore[method-assign]
    for name in ("_query_sqlite3",):
        setattr(_nsys_db, name, _timed(name, getattr(_nsys_db, name)))
    orig_pool = nsys.ThreadPoolExecutor

    class _Pool(orig_pool):  # type: ignore[misc,valid-type]
        """Times the pool's life (submit .. last result) as the parallel read's wall time."""

        def __enter__(self) -> Any:
            self._t0 = time.perf_counter()
            return super().__enter__()

        def __exit__(self, *exc: Any) -> Any:
            out = super().__exit__(*exc)
            _wall["read_nsys_sqlite/parallel table reads (wall)"] += time.perf_counter() - self._t0
            return out

    nsys.ThreadPoolExecutor = _Pool  # type: ignore[misc]
    nsys.read_nsys_sqlite = _timed("read_nsys_sqlite", nsys.read_nsys_sqlite)
    join.nest_ranges = _timed("nest_ranges", join.nest_ranges)
    join.assign_ranges = _timed("assign_ranges", join.assign_ranges)


def table(total: float) -> list[str]:
    """Markdown rows: phase (indented by depth), seconds, % of ``total``, calls, rows; ``(own code)`` remainders."""
    paths = sorted(_wall, key=lambda p: p.split("/"))  # depth first, siblings by name
    out = ["| phase | seconds | % of total | calls | rows out |", "|---|---:|---:|---:|---:|"]
    children: dict[str, list[str]] = defaultdict(list)
    for p in paths:
        parent = p.rsplit("/", 1)[0] if "/" in p else ""
        children[parent].append(p)

    def emit(p: str, depth: int) -> None:
        name = p.rsplit("/", 1)[-1]
        pad = "&nbsp;&nbsp;" * depth
        out.append(
            f"| {pad}{name} | {_wall[p]:.2f} | {100 * _wall[p] / total:.0f} | {_calls[p] or 1} | {_rows[p]:,} |"
        )
        kids = children.get(p, [])
        threaded = [k for k in kids if k.rsplit("/", 1)[-1].startswith("query ")]
        serial = [k for k in kids if k not in threaded]
        for k in serial:
            emit(k, depth + 1)
        if serial:
            own = _wall[p] - sum(_wall[k] for k in serial)
            out.append(f"| {pad}&nbsp;&nbsp;(own code) | {own:.2f} | {100 * own / total:.0f} | | |")
        for k in threaded:  # pool threads: summed over threads, not part of the parent's wall time
            emit(k, depth + 1)

    for top in children[""]:
        emit(top, 0)
    return out


def main(argv: list[str] | None = None) -> int:
    from tracekit.analyzers.readers.nsys.db import ENGINES

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=1_000_000, help="kernels in the scaled copy (about)")
    ap.add_argument("--nvtx", type=int, default=5_000_000, help="NVTX rows in the scaled copy (about)")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="nsys SQLite export to scale")
    ap.add_argument("--keep", type=Path, help="build the scaled copy here once and reuse it when it exists")
    ap.add_argument("--engine", choices=ENGINES, default="auto", help="reader engine (db.ENGINES)")
    args = ap.parse_args(argv)
    if not args.source.is_file():
        print(f"source export not found: {args.source} (pass --source)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="nsys_parts_") as tmp:
        target = args.keep or Path(tmp) / "scaled.sqlite"
        if not target.is_file():
            build_scaled(args.source, target, args.kernels, args.nvtx)
        instrument()
        from tracekit.analyzers import join
        from tracekit.analyzers.readers.nsys import reader as nsys

        ex = nsys.read_nsys_sqlite(target, engine=args.engine)
        nested = join.nest_ranges(ex.frames["ranges"])
        join.assign_ranges(ex.frames["kernels"], nested)
    total = sum(_wall[p] for p in ("read_nsys_sqlite", "nest_ranges", "assign_ranges"))
    print(
        f"engine {args.engine}; {target.name}; read + join {total:.2f} s; peak RSS {_peak_rss_mib():,.0f} MiB"
    )
    print("\n".join(table(total)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
