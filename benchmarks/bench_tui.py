# ruff: noqa: E402
"""How fast ``tracekit view`` is on a run of a million kernels (issue 5: first screen < 2 s, cursor < 100 ms;
issue 19: first paint <= 2 s and explain <= 5 s on the 1M-kernel Kineto run).

Without ``--run``: builds a run by replicating the kernels of the H200 probe (ncu report + nsys export from
../shared/data) to 1,000,000 launches, each copy shifted in time; only the first copy keeps its GEMM ranges, as
in a real model run where most kernels sit outside tracekit's ranges. Then drives the app with Pilot, headless,
at 80x24 and 200x50, and prints one table (milliseconds, wall clock, this machine; recorded in docs/TUI.md):

    python benchmarks/bench_tui.py [--kernels 1000000] [--keep DIR]

With ``--run RUN`` (repeatable): existing runs (a 1M-kernel Kineto import: benchmarks/bench_kineto.py --keep
DIR, then ``tracekit import``), each measured in fresh processes, the median of ``--repeats``; one table: run,
kernels, open frames s (process start to the frames read), header s and first paint s (process start to the
header and to the GEMM table painted, as ``tracekit view RUN`` does it, at 80x24), explain s (``tracekit explain
RUN --json``, process start to the JSON written), the CPU seconds (all threads) and peak RSS of each process,
and the load average (the machine may be shared: CPU seconds vary less with it than wall seconds):

    python benchmarks/bench_tui.py --run samples/h200-gemm-probe --run /tmp/k1m [--repeats 5]
"""

from __future__ import annotations

import time

T_START = (
    time.perf_counter()
)  # before any import: the fresh-process measure counts imports as a user waits them

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.analyzers.store import read_frame, write_frames

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "h200-probe"


def build_run(out: Path, n: int) -> Path:
    """A run of ``n`` kernel launches made of copies of the probe's real kernels."""
    from tracekit.analyzers.importer import import_files
    from tracekit.analyzers.store import load_frames
    from tracekit.run import Run

    src_dir = out.parent / "probe-src"
    src, _ = import_files([SHARED / "probe.ncu-rep", SHARED / "probe.sqlite"], src_dir)
    frames = load_frames(src)
    k = frames["kernels"]
    span = int(k["end_ns"].max() - k["start_ns"].min()) + 1_000
    copies = n // k.height + 1
    big = (
        pl.concat([k] * copies)
        .head(n)
        .with_row_index("i")
        .with_columns(
            kernel_id=pl.col("i").cast(pl.Int64),
            start_ns=pl.col("start_ns") + (pl.col("i") // k.height).cast(pl.Int64) * span,
            end_ns=pl.col("end_ns") + (pl.col("i") // k.height).cast(pl.Int64) * span,
            range_id=pl.when(pl.col("i") < k.height).then(pl.col("range_id")),
        )
        .drop("i")
    )
    run = Run.create(out, capture={"note": f"bench_tui: probe kernels replicated to {n:,}"})
    frames = dict(frames)
    frames["kernels"] = big
    write_frames(run, frames)
    return out


async def first_screen_fresh(run: Path, prefetch: bool) -> dict[str, float]:
    """In this (fresh) process, as ``tracekit view RUN`` does it: time to the header and to the GEMM table."""
    pre = None
    out: dict[str, float] = {}
    if prefetch:
        from tracekit.tui.data import Prefetch

        pre = Prefetch(run)
        pre.data.add_done_callback(lambda _: out.setdefault("frames", time.perf_counter() - T_START))
    from tracekit.tui.app import make_app

    app = make_app(run, prefetch=pre)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        while getattr(screen, "data", None) is None:
            await pilot.pause(0.005)
        await pilot.pause()
        out["header"] = time.perf_counter() - T_START
        while screen.table.row_count == 0:
            await pilot.pause(0.005)
        await pilot.pause()
        out["table"] = time.perf_counter() - T_START
    out["peak_kb"] = _peak_kb()
    out["cpu"] = time.process_time()
    return out


def _peak_kb() -> float:
    """This process's peak resident set (VmHWM), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return float(line.split()[1])
    import resource

    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def explain_fresh(run: Path) -> dict[str, float]:
    """In this (fresh) process, as ``tracekit explain RUN --json`` does it: seconds to the JSON written."""
    import contextlib
    import io

    from tracekit.cli import main

    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        try:
            main(["explain", str(run), "--json"])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    wall = time.perf_counter() - T_START
    return {"explain": wall, "peak_kb": _peak_kb(), "cpu": time.process_time(), "bytes": len(sink.getvalue())}


def _child(*args: str) -> dict[str, float]:
    res = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["?"])[-1]
        raise SystemExit(f"{' '.join(args)}: exit {res.returncode}: {last}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def run_table(runs: list[Path], repeats: int) -> None:
    """The table of ``--run``: per run, medians over ``repeats`` fresh processes of each kind."""
    import os

    from tracekit.run import Run

    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    head = (
        f"{'run':<24} {'kernels':>10} {'open frames s':>13} {'header s':>9} {'first paint s':>13} "
        f"{'view cpu s':>10} {'explain s':>9} {'explain cpu s':>13} {'peak RSS view':>13} {'explain':>8}"
    )
    print(head)
    for run in runs:
        rows = read_frame(Run.open(run), "kernels", lazy=True).select(pl.len()).collect().item()
        view = [_child("--first-screen", str(run)) for _ in range(repeats)]
        expl = [_child("--explain", str(run)) for _ in range(repeats)]

        def med(rs: list[dict[str, float]], key: str) -> float:
            return statistics.median(r[key] for r in rs)

        print(
            f"{run.name[:24]:<24} {rows:>10,} {med(view, 'frames'):>13.2f} {med(view, 'header'):>9.2f} "
            f"{med(view, 'table'):>13.2f} {med(view, 'cpu'):>10.2f} {med(expl, 'explain'):>9.2f} "
            f"{med(expl, 'cpu'):>13.2f} {med(view, 'peak_kb') / 1048576:>10.2f} GB "
            f"{med(expl, 'peak_kb') / 1048576:>5.2f} GB"
        )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


class Frames:
    """Timestamps of the frames the compositor produces (headless apps compute them and skip the write)."""

    def __init__(self, app: Any) -> None:
        self.times: list[float] = []
        original = app._display

        def display(screen: Any, renderable: Any) -> None:
            if renderable is not None:
                self.times.append(time.perf_counter())
            original(screen, renderable)

        app._display = display

    async def latency(self, app: Any, key: str, done: Any) -> float:
        """Seconds from a key reaching the app to the first frame drawn once ``done()`` holds."""
        from textual import events

        t0 = time.perf_counter()
        app._driver.send_message(events.Key(key, None))
        while not done():
            await asyncio.sleep(0.0005)
        t_done = time.perf_counter()
        while not self.times or self.times[-1] < t_done:
            await asyncio.sleep(0.0005)
        return self.times[-1] - t0


async def measure(run: Path, size: tuple[int, int]) -> dict[str, float]:
    from tracekit.tui.app import make_app
    from tracekit.tui.screens.kernels import KernelsScreen

    out: dict[str, float] = {}
    t0 = time.perf_counter()
    app = make_app(run)
    async with app.run_test(size=size) as pilot:
        screen = app.screen
        while getattr(screen, "data", None) is None:
            await pilot.pause(0.005)
        await pilot.pause()
        out["header painted (frames read)"] = time.perf_counter() - t0
        while screen.table.row_count == 0:
            await pilot.pause(0.005)
        await pilot.pause()
        out["GEMM table painted (first screen)"] = time.perf_counter() - t0

        t = time.perf_counter()
        await pilot.press("k")
        ks = app.screen
        assert isinstance(ks, KernelsScreen)
        while ks.table.row_count < ks.base.height:
            await pilot.pause(0.005)
        await pilot.pause()
        out["kernels screen painted (1M rows)"] = time.perf_counter() - t

        frames = Frames(app)
        table = ks.table

        async def move(key: str, target: Any) -> float:
            return await frames.latency(app, key, lambda: table.cursor == target())

        steps = []
        for _ in range(40):
            c = table.cursor
            steps.append(await move("down", lambda c=c: c + 1))
            await pilot.pause()
        out["cursor down (key to frame), median"] = statistics.median(steps)
        out["cursor down (key to frame), max"] = max(steps)
        c = table.cursor
        page = table.size.height - 1
        out["page down"] = await move("pagedown", lambda: c + page)
        await pilot.pause()
        out["jump to last row (end)"] = await move("end", lambda: table.row_count - 1)
        await pilot.pause()
        out["jump to first row (home)"] = await move("home", lambda: 0)
        await pilot.pause()

        async def until_view(action: str, *keys: str) -> float:
            t = time.perf_counter()
            before = ks.table.frame
            await pilot.press(*keys)
            while ks.table.frame is before:
                await pilot.pause(0.005)
            await pilot.pause()
            return time.perf_counter() - t

        await pilot.press("slash", *"nvje")  # typed with Pilot (slow by itself), then the last key is timed
        while ks.table.frame.height == ks.base.height:
            await pilot.pause(0.01)
        await app.workers.wait_for_complete()
        await pilot.pause(0.2)
        out["filter: last key typed to rows shown ('nvjet')"] = await until_view("filter", "t")
        await pilot.press("enter")
        out["clear filter (esc)"] = await until_view("clear", "escape")
        out["sort (s: by name)"] = await until_view("sort", "s")
        out["reverse sort (r)"] = await until_view("reverse", "r")
        out["group by name (g)"] = await until_view("group", "g")
        await pilot.press("g")
        while ks.grouped:
            await pilot.pause(0.01)
        await pilot.pause(0.3)
        steps = []
        for _ in range(10):
            c = table.cursor
            steps.append(await move("down", lambda c=c: c + 1))
            await pilot.pause()
        out["cursor down in the sorted 1M, median"] = statistics.median(steps)
        t = time.perf_counter()
        for _ in range(20):
            ks.table._strips.clear()
            for y in range(size[1]):
                ks.table.render_line(y)
        out["render one full table page (uncached)"] = (time.perf_counter() - t) / 20
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, default=None, help="build the run here and keep it")
    ap.add_argument(
        "--run", type=Path, action="append", default=[], help="measure this existing run (repeatable)"
    )
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per measure with --run (median)")
    ap.add_argument("--first-screen", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--explain", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--no-prefetch", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.first_screen is not None:  # the child process of the fresh-start measure
        print(json.dumps(asyncio.run(first_screen_fresh(args.first_screen, not args.no_prefetch))))
        return
    if args.explain is not None:
        print(json.dumps(explain_fresh(args.explain)))
        return
    if args.run:
        run_table(args.run, max(1, args.repeats))
        return
    tmp = Path(tempfile.mkdtemp(prefix="bench_tui."))
    try:
        target = (args.keep or tmp) / "tk-1m"
        if target.exists():
            shutil.rmtree(target)
        t = time.perf_counter()
        run = build_run(target, args.kernels)
        print(f"built {run} ({args.kernels:,} kernels) in {time.perf_counter() - t:.1f} s")
        print(f"\n{'fresh process, as `tracekit view RUN` (3 runs each)':<52} {'header s':>9} {'table s':>9}")
        for flags, label in (([], "with prefetch (the CLI)"), (["--no-prefetch"], "without prefetch")):
            runs = []
            for _ in range(3):
                res = subprocess.run(
                    [sys.executable, __file__, "--first-screen", str(run), *flags],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
            med = {k: statistics.median(r[k] for r in runs) for k in ("header", "table")}
            print(f"  {label:<50} {med['header']:>9.2f} {med['table']:>9.2f}")
        results = {size: asyncio.run(measure(run, size)) for size in ((80, 24), (200, 50))}
        print(f"\n{'step':<42} {'80x24 ms':>10} {'200x50 ms':>10}")
        for key in results[(80, 24)]:
            a, b = results[(80, 24)][key], results[(200, 50)][key]
            print(f"{key:<42} {a * 1e3:>10.1f} {b * 1e3:>10.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
