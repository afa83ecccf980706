"""Run tests/corpus/test_fuzz.py's seeded campaign of damaged files, larger, and print what tracekit answered.

Usage: python benchmarks/fuzz_table.py [--scale 3] [--seed 18] > fuzz.md

One row per format and damage kind: how many damaged files imported whole (exit 0), in part (exit 4, marked
partial), were refused with one line (exit 2), or broke tracekit (anything else: a bug), and the slowest case.
Each run that imported also goes through ``show --json``; a failure there counts as broken. The cases that
broke are listed by name, so ``fuzz_corpus.by_name`` rebuilds them. Needs ../shared/data.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support import fuzz_corpus as F


def _call(*args: str | Path) -> int:
    from tracekit.cli import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # anything that escapes main() is a bug to count
            return -1
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=3.0, help="times the test suite's number of cases")
    ap.add_argument("--seed", type=int, default=18)
    args = ap.parse_args()
    if not F.SHARED.is_dir():
        sys.exit(f"{F.SHARED} is absent: the campaign damages the files there")
    base = Path(tempfile.mkdtemp(prefix="tracekit-fuzz-"))
    os.environ["TRACEKIT_CACHE_DIR"] = str(base / "cache")
    rows: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    broken: list[str] = []
    try:
        for i, m in enumerate(F.campaign(F.SHARED, args.scale, args.seed)):
            folder = base / str(i)
            folder.mkdir()
            damaged = m.make(folder / m.source.name)
            start = time.monotonic()
            rc = _call("import", damaged, "-o", folder / "run")
            seconds = time.monotonic() - start
            if rc in (0, 4) and _call("show", folder / "run", "--json") != 0:
                rc = -2
            row = rows[(m.fmt, m.name.split("~")[1].rsplit("-", 1)[0])]
            row[str(rc) if rc in (0, 2, 4) else "broke"] += 1
            row["slowest"] = max(row["slowest"], seconds)
            if rc not in (0, 2, 4):
                broken.append(f"{m.name} (exit {rc})")
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("| format | damage | whole (0) | partial (4) | refused (2) | broke | slowest |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (fmt, kind), r in sorted(rows.items()):
        counts = " | ".join(str(int(r[k])) for k in ("0", "4", "2", "broke"))
        print(f"| {fmt} | {kind} | {counts} | {r['slowest']:.2f} s |")
    print(
        f"\n{sum(sum(r[k] for k in ('0', '2', '4', 'broke')) for r in rows.values()):.0f} cases, seed {args.seed}"
    )
    for name in broken:
        print(f"- broke: `{name}`")


if __name__ == "__main__":
    main()
