"""Kineto trace reading at scale: tracekit's streaming reader against HolisticTraceAnalysis, and its memory curve.

A real trace (default: HTA's df_index_resolver test trace, 19,370 kernels in 216k events) is replicated until it
holds the wanted number of kernel events: each copy is shifted in time past the previous one, its correlation
and External ids are offset, and its ProfilerStep numbers continue, so the result is one long, valid trace. It is
written as one ``.json.gz``; then each tool parses it in its own subprocess and a row is printed: tool, seconds,
CPU seconds (the process and its workers), kernels parsed, kernels/second, peak memory. Peak memory is the largest sum of the resident memory of the
measuring process and its children (tracekit decodes chunks in worker threads), sampled every 20 ms,
and at least the process's own high-water mark.

One row per size (``--sizes``, default 0.2M, 1M and 3M kernels: the memory curve; the decode holds a few chunks
at a time whatever the size, so what grows is the frames). HolisticTraceAnalysis (``pip install HolisticTraceAnalysis``, a benchmark-only dependency) is
timed as ``TraceAnalysis(trace_dir=...)`` on the first ``--hta-rows`` sizes (default 1: it needs minutes and
more memory than the machine has at 1M). It keeps only kernels inside complete ProfilerStep iterations, so its
kernel count is lower. tracekit is also timed with the worker counts ``--also-workers`` (default 1: one process)
on the first ``--also-rows`` sizes.
Each trace is deleted after its row unless ``--keep``.

    python benchmarks/bench_kineto.py [--sizes 200000,1000000,3000000] [--hta-rows 1] [--also-workers 1]
                                      [--work /tmp] [--keep] [--no-hta]
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = (
    ROOT.parent / "shared" / "data" / "thirdparty" / "hta" / "df_index_resolver__df_index_resolver.json.gz"
)

try:
    import orjson

    def _loads(b: bytes) -> Any:
        return orjson.loads(b)

    def _dumps(o: Any) -> bytes:
        return orjson.dumps(o)

except ImportError:  # stdlib fallback: slower, same output

    def _loads(b: bytes) -> Any:
        return json.loads(b)

    def _dumps(o: Any) -> bytes:
        return json.dumps(o, separators=(",", ":")).encode()


def _is_kernel(e: dict[str, Any]) -> bool:
    return e.get("cat") in ("kernel", "Kernel") and e.get("ph") == "X"


def replicate(source: Path, kernels: int, out: Path) -> tuple[int, int, int]:
    """Write ``out`` (.json.gz) holding copies of ``source`` until it has >= ``kernels`` kernel events.

    Returns (kernel events, all events, bytes of JSON) written.
    """
    trace = _loads(gzip.decompress(source.read_bytes()))
    events: list[dict[str, Any]] = trace.pop("traceEvents")
    per_copy = sum(1 for e in events if _is_kernel(e))
    copies = max(1, math.ceil(kernels / per_copy))
    timed = [e for e in events if isinstance(e.get("ts"), int | float)]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    span = (t1 - t0) + 1000  # 1 ms gap between copies
    if isinstance(t0, int):
        span = int(span)
    ids = [0]
    steps = [0]
    for e in events:
        a = e.get("args") or {}
        for key in ("correlation", "External id", "external id"):
            if isinstance(a.get(key), int):
                ids.append(a[key])
        if isinstance(e.get("id"), int):
            ids.append(e["id"])
        name = e.get("name")
        if isinstance(name, str) and name.startswith("ProfilerStep#") and name[13:].isdigit():
            steps.append(int(name[13:]))
    id_step = max(ids) + 1
    step_step = max(steps) + 1
    meta = [e for e in events if e.get("ph") == "M"]  # process/thread names: once
    body = [e for e in events if e.get("ph") != "M"]
    head = _dumps(trace)[:-1]  # the top-level keys, without the closing brace
    written = 0
    text = 0
    with gzip.open(out, "wb", compresslevel=1) as gz:

        def write(b: bytes) -> None:
            nonlocal text
            text += len(b)
            gz.write(b)

        f = SimpleNamespace(write=write)
        f.write(head + (b"," if trace else b"") + b'"traceEvents":[')
        f.write(b",".join(_dumps(e) for e in meta))
        for i in range(copies):
            dt, di, ds = span * (i and 1), id_step * (i and 1), step_step * (i and 1)
            for e in body:  # shift in place, cumulatively: copy i = source + i * step
                if isinstance(e.get("ts"), int | float):
                    e["ts"] += dt
                a = e.get("args")
                if a:
                    for key in ("correlation", "External id", "external id"):
                        v = a.get(key)
                        if isinstance(v, int) and v:
                            a[key] = v + di
                if isinstance(e.get("id"), int):
                    e["id"] += di
                name = e.get("name")
                if ds and isinstance(name, str) and name.startswith("ProfilerStep#") and name[13:].isdigit():
                    e["name"] = f"ProfilerStep#{int(name[13:]) + ds}"
            f.write(b"," + b",".join(_dumps(e) for e in body))
            written += len(body)
        f.write(b"]}")
    return per_copy * copies, written + len(meta), text


SAMPLER = """
import os, threading, time
_peak = [0]
def _rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(l.split()[1]) for l in f if l.startswith("VmRSS:")), 0)
    except OSError:
        return 0
def _tree(pid):
    out = [pid]
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                for c in f.read().split():
                    out += _tree(int(c))
    except OSError:
        pass
    return out
def _sample():
    me = os.getpid()
    while True:
        _peak[0] = max(_peak[0], sum(_rss(p) for p in _tree(me)))
        time.sleep(0.02)
threading.Thread(target=_sample, daemon=True).start()
def cpu_s():
    import resource
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
def peak_kb():
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
    return max(_peak[0], int(hwm[0].split()[1]) if hwm else 0)
"""

TRACEKIT_CHILD = (
    SAMPLER
    + """
import json, sys, time
from pathlib import Path
if __name__ == "__main__":
    t = time.perf_counter()
    from tracekit.analyzers.readers.kineto.reader import read_kineto
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else None
    ex = read_kineto(Path(sys.argv[1]), workers=workers)
    n = ex.frame("kernels").height
    s = time.perf_counter() - t
    print(json.dumps({"seconds": s, "kernels": n, "peak_kb": peak_kb(), "cpu": cpu_s()}))
"""
)

HTA_CHILD = (
    SAMPLER
    + """
import json, logging, sys, time
logging.disable(logging.CRITICAL)
if __name__ == "__main__":
    t = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis
    a = TraceAnalysis(trace_dir=sys.argv[1])
    s = time.perf_counter() - t
    tr = a.t
    n = 0
    for rank in tr.traces:
        df = tr.get_trace(rank)
        sym = tr.symbol_table.get_sym_id_map()
        cats = {sym[c] for c in ("kernel", "Kernel") if c in sym}
        n += int(df["cat"].isin(cats).sum())
    print(json.dumps({"seconds": s, "kernels": n, "peak_kb": peak_kb(), "cpu": cpu_s()}))
"""
)


FLOOR_CHILD = (
    SAMPLER
    + """
import gzip, json, sys, time
if __name__ == "__main__":
    t = time.perf_counter()
    import ijson
    names, starts, durs = [], [], []
    with gzip.open(sys.argv[1], "rb") as f:
        for e in ijson.items(f, "traceEvents.item", use_float=True):
            if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel"):
                names.append(e.get("name")); starts.append(e.get("ts")); durs.append(e.get("dur"))
    s = time.perf_counter() - t
    print(json.dumps({"seconds": s, "kernels": len(names), "peak_kb": peak_kb(), "cpu": cpu_s()}))
"""
)
"""The naive streaming floor: ijson (its C backend) walks the event array one dict at a time and keeps the kernels'
name, start and duration, nothing else (no launches, ranges, ops or frames). Memory stays flat; the time is what
building a Python object per event costs."""


def run_child(code: str, arg: str, timeout: float, *more: str) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; its peak memory and CPU seconds come back."""
    try:
        p = subprocess.run(
            [sys.executable, "-c", code, arg, *more],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {timeout:.0f} s"}
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["?"])[-1]
        why = "killed (out of memory?)" if p.returncode < 0 else f"exit {p.returncode}: {last[:120]}"
        return {"error": why}
    return json.loads(p.stdout.strip().splitlines()[-1])


def measure(
    trace: Path,
    kernels_in_file: int,
    *,
    hta: bool,
    hta_timeout: float,
    also_workers: tuple[int, ...] = (),
    floor: bool = False,
) -> list[dict[str, Any]]:
    rows = []
    r = run_child(TRACEKIT_CHILD, str(trace), 3600)
    rows.append({"tool": "tracekit read_kineto", **r})
    for w in also_workers:
        r = run_child(TRACEKIT_CHILD, str(trace), 3600, str(w))
        rows.append({"tool": f"tracekit, workers={w}", **r})
    if floor:
        r = run_child(FLOOR_CHILD, str(trace), 3600)
        rows.append({"tool": "floor: ijson streaming, kernels only", **r})
    if hta:
        folder = Path(tempfile.mkdtemp(prefix="bench-hta-"))
        try:
            os.symlink(trace, folder / trace.name)
            r = run_child(HTA_CHILD, str(folder), hta_timeout)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        rows.append({"tool": "HolisticTraceAnalysis", **r})
    for row in rows:
        row["in_file"] = kernels_in_file
    return rows


def print_table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    print(
        f"{'tool':37} {'seconds':>9} {'CPU s':>7} {'kernels parsed':>15} {'kernels/s':>12} {'peak RSS':>10}"
    )
    for r in rows:
        if "error" in r:
            print(f"{r['tool']:37} {'-':>9} {'-':>7} {'-':>15} {'-':>12} {'-':>10}  ({r['error']})")
            continue
        rate = r["kernels"] / r["seconds"] if r["seconds"] else float("inf")
        print(
            f"{r['tool']:37} {r['seconds']:9.2f} {r['cpu']:7.1f} {r['kernels']:15,d} {rate:12,.0f} "
            f"{r['peak_kb'] / 1048576:8.2f} GB"
        )
    ok = [r for r in rows if "error" not in r]
    hta = [r for r in ok if r["tool"] == "HolisticTraceAnalysis"]
    if hta and ok[0]["tool"] == "tracekit read_kineto":
        print(f"speed-up over HTA: {hta[0]['seconds'] / ok[0]['seconds']:.1f}x")


def print_curve(curve: list[dict[str, Any]]) -> None:
    """tracekit's seconds and peak memory against the file's size."""
    print("\nmemory curve (tracekit read_kineto)")
    print(
        f"{'kernels':>10} {'events':>11} {'JSON GB':>8} {'gzip MB':>8} {'seconds':>8} {'CPU s':>7} {'peak RSS GB':>12}"
    )
    for c in curve:
        r = c["row"]
        sec = f"{r['seconds']:8.1f} {r['cpu']:7.1f}" if "seconds" in r else f"{'-':>8} {'-':>7}"
        mem = f"{r['peak_kb'] / 1048576:12.2f}" if "peak_kb" in r else f"{'-':>12}"
        print(f"{c['kernels']:10,d} {c['events']:11,d} {c['json_gb']:8.2f} {c['gz_mb']:8.0f} {sec} {mem}")


def _json_bytes(path: Path) -> int:
    """The size of the gzipped file's text, read as a stream."""
    total = 0
    with gzip.open(path, "rb") as f:
        while b := f.read(64 << 20):
            total += len(b)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200000,1000000,3000000", help="kernel events per replicated trace")
    ap.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real trace to replicate")
    ap.add_argument("--hta-rows", type=int, default=1, help="time HTA on this many sizes, the smallest first")
    ap.add_argument("--hta-timeout", type=float, default=900, help="seconds HTA may take")
    ap.add_argument("--no-hta", action="store_true", help="time tracekit only")
    ap.add_argument("--also-workers", default="1", help="also time tracekit with these worker counts ...")
    ap.add_argument("--also-rows", type=int, default=2, help="... on this many sizes, the smallest first")
    ap.add_argument(
        "--floor-rows",
        type=int,
        default=0,
        help="time the naive streaming floor (ijson, kernels only; pip install ijson) on this many sizes",
    )
    ap.add_argument("--work", type=Path, help="folder for the replicated traces (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the replicated traces in --work")
    args = ap.parse_args()
    if not args.source.is_file():
        sys.exit(f"source trace {args.source} not found (give --source)")
    hta_rows = 0 if args.no_hta else args.hta_rows
    if hta_rows:
        try:
            import hta as _hta  # noqa: F401
        except ImportError:
            sys.exit(
                "HolisticTraceAnalysis is not installed: pip install HolisticTraceAnalysis (or --no-hta)"
            )
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-kineto-"))
    work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(
        f"source: {args.source.name}; machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    curve = []
    try:
        for i, n in enumerate(sorted(int(x) for x in args.sizes.split(","))):
            path = work / f"replicated_{n}.json.gz"
            t = time.perf_counter()
            if not path.is_file():
                k, ev, text = replicate(args.source, n, path)
            else:  # kept from an earlier run
                k, ev = _counts(args.source, n)
                text = _json_bytes(path)
            print(
                f"\n{path.name}: {k:,} kernels, {ev:,} events, {path.stat().st_size / 1e6:,.0f} MB gzip "
                f"(written in {time.perf_counter() - t:.0f} s)"
            )
            rows = measure(
                path,
                k,
                hta=i < hta_rows,
                hta_timeout=args.hta_timeout,
                also_workers=tuple(int(w) for w in args.also_workers.split(",") if w)
                if i < args.also_rows
                else (),
                floor=i < args.floor_rows,
            )
            load = os.getloadavg()
            print_table(f"{k:,} kernel events ({ev:,} events); load average after: {load[0]:.1f}", rows)
            curve.append(
                {
                    "kernels": k,
                    "events": ev,
                    "json_gb": text / 1e9,
                    "gz_mb": path.stat().st_size / 1e6,
                    "row": rows[0],
                }
            )
            if not args.keep:
                path.unlink()
        print_curve(curve)
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)


def _counts(source: Path, kernels: int) -> tuple[int, int]:
    """(kernel events, all events) that ``replicate`` writes for ``kernels``, without writing."""
    trace = _loads(gzip.decompress(source.read_bytes()))
    events = trace["traceEvents"]
    per_copy = sum(1 for e in events if _is_kernel(e))
    copies = max(1, math.ceil(kernels / per_copy))
    meta = sum(1 for e in events if e.get("ph") == "M")
    return per_copy * copies, (len(events) - meta) * copies + meta


if __name__ == "__main__":
    main()
