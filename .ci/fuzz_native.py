"""Damaged real files through every native reader, for the sanitizer build (.ci/sanitize).

Run by ``.ci/sanitize`` in an interpreter with AddressSanitizer preloaded, after it built the two C modules
with ``-fsanitize=address,undefined`` into ``BUILD_LIB``; this script loads those builds in place of the
installed ones (and checks it did), then feeds them:

- ``_pages.c``: each damaged nsys export (tests/support/fuzz_corpus.py: bit flips, truncation, duplicated and
  zeroed blocks, b-tree page flips, SQL-level damage) read table by table with the page reader
  (``engine="pages"``), then imported whole (``import_files``: the reader, the join, the writes);
- ``_scan.c``: each damaged Kineto trace (byte damage and JSON values of the wrong type, inside the gzip) scanned
  whole, as chunks at seeded cut points, and imported with the scanner forced on for any size.

A Python exception from a damaged file is expected (the file is bad); a sanitizer report aborts the process
(``halt_on_error``, ``-fno-sanitize-recover``), which fails the run. Prints one line per source and totals.

    python .ci/fuzz_native.py BUILD_LIB [--seed 48] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.machinery
import importlib.util
import random
import re
import sys
import tempfile
import time
import zlib
from collections import Counter
from importlib.abc import MetaPathFinder
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NATIVE = {
    "tracekit.analyzers.readers.kineto._scan": "tracekit/analyzers/readers/kineto/_scan",
    "tracekit.analyzers.readers.nsys._pages": "tracekit/analyzers/readers/nsys/_pages",
}
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


class SanitizedBuilds(MetaPathFinder):
    """Finds the native modules in the sanitizer build folder, before the installed ones."""

    def __init__(self, lib: Path) -> None:
        self.lib = lib

    def find_spec(self, name: str, path: object = None, target: object = None) -> object:
        if name not in NATIVE:
            return None
        file = self.lib / f"{NATIVE[name]}{SUFFIX}"
        if not file.is_file():
            raise ImportError(f"{file} was not built")
        loader = importlib.machinery.ExtensionFileLoader(name, str(file))
        return importlib.util.spec_from_file_location(name, file, loader=loader)


def _sources(shared: Path) -> list[tuple[str, Path, int]]:
    from tests.support import fuzz_corpus as F

    return [
        (fmt, shared / rel, n)
        for fmt, rel, n in F.SOURCES
        if fmt in ("nsys", "kineto") and (shared / rel).is_file()
    ]


def nsys_case(path: Path, out: Path, tally: Counter[str]) -> None:
    from tracekit.analyzers.importer import import_files
    from tracekit.analyzers.readers.nsys.reader import read_nsys_sqlite

    try:
        read_nsys_sqlite(path, engine="pages")
        tally["pages read"] += 1
    except Exception:
        tally["pages refused"] += 1
    try:
        import_files([path], out)
        tally["imported"] += 1
    except Exception:
        tally["import refused"] += 1


def kineto_case(path: Path, out: Path, rng: random.Random, tally: Counter[str]) -> None:
    from tracekit.analyzers.importer import import_files
    from tracekit.analyzers.readers.kineto import native

    data = path.read_bytes()
    try:
        text = gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        text = data
    for form, doc in [("object", text), *(("list", _slice(text, rng)) for _ in range(6))]:
        got = native.scan_part(doc, form)  # type: ignore[arg-type]
        tally["scanned" if got is not None else "scan declined"] += 1
    native.release()
    try:
        import_files([path], out)
        tally["imported"] += 1
    except Exception:
        tally["import refused"] += 1


def _slice(text: bytes, rng: random.Random) -> bytes:
    """A chunk as the reader cuts one (``[`` + events + ``]``): half at event boundaries (the damage inside is
    the mutant's), half at seeded byte offsets."""
    gaps = [(m.start() + 1, m.end() - 1) for m in _EVENT_GAP.finditer(text, 0, 1 << 22)]
    if gaps and rng.random() < 0.5:
        i = rng.randrange(len(gaps))
        j = rng.randrange(i, min(len(gaps), i + 2000))
        a, b = gaps[i][1], gaps[j][0] if j > i else len(text)  # from an event's start to an event's end
        return b"[" + text[a:b] + b"]"
    start = text.find(b"[", text.find(b"traceEvents")) + 1 if b"traceEvents" in text else 0
    a = rng.randrange(start, max(start + 1, len(text)))
    b = rng.randrange(a, min(len(text), a + (1 << rng.randrange(6, 18))) + 1)
    return b"[" + text[a:b] + (b"]" if rng.random() < 0.5 else b"")


_EVENT_GAP = re.compile(rb"\},\s*\{")
"""Between two events of the array: the chunk boundaries the reader itself cuts at."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "build_lib", type=Path, help="where .ci/sanitize built the modules (setup.py --build-lib)"
    )
    ap.add_argument("--seed", type=int, default=48)
    ap.add_argument(
        "--scale", type=float, default=1.0, help="mutants per source, times fuzz_corpus.SOURCES' count"
    )
    args = ap.parse_args(argv)
    sys.meta_path.insert(0, SanitizedBuilds(args.build_lib.resolve()))

    from tests.support import fuzz_corpus as F
    from tracekit.analyzers.readers.kineto import native
    from tracekit.analyzers.readers.nsys import pages

    loaded = [native._scan, pages._pages]
    for module in loaded:
        where = Path(getattr(module, "__file__", "") or "")
        if not where.is_relative_to(args.build_lib.resolve()):
            raise SystemExit(f"{module} was not loaded from the sanitizer build {args.build_lib}")
    native.MIN_BYTES = 0  # the reader scans every size with the C scanner, not only large documents
    shared = F.SHARED
    if not shared.is_dir():
        raise SystemExit(f"{shared} is absent: the corpus is made from its real files")
    rng = random.Random(args.seed)
    total: Counter[str] = Counter()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tracekit-fuzz-native-") as tmp:
        work = Path(tmp)
        for fmt, src, count in _sources(shared):
            tally: Counter[str] = Counter()
            kinds = [*F.kinds(fmt), *F.EXTRA_BYTE_DAMAGE]
            t = time.perf_counter()
            for i in range(max(len(kinds), round(count * args.scale))):
                m = F.mutant(fmt, src, kinds[i % len(kinds)], rng.randrange(1 << 30))
                path = m.make(work / m.name)
                out = work / f"run-{len(list(work.iterdir()))}"
                if fmt == "nsys":
                    nsys_case(path, out, tally)
                else:
                    kineto_case(path, out, rng, tally)
                path.unlink()
            total.update(tally)
            print(
                f"{src.name[:60]:60} {time.perf_counter() - t:6.1f} s  {dict(sorted(tally.items()))}",
                flush=True,
            )
    print(f"total {time.perf_counter() - t0:.1f} s: {dict(sorted(total.items()))}; no sanitizer report")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
