"""One chunk of a Kineto trace read both ways, in one process: the C scanner (``native.scan_part``) against the
general way (msgspec's ``decode`` + ``make_part``), which it replaces wherever it is sure of the text.

Each shared trace's event array is read as a middle chunk is (``[event, ...]``), best of ``--repeats`` runs of
each way, CPU seconds of this process (the scanner releases the GIL, but runs in the calling thread here). The
table gives both, their ratio and the events per second of each.

    python benchmarks/bench_kineto_scan.py [--repeats 5] [--only REGEX]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import re
import time
from pathlib import Path

import msgspec

from tracekit.analyzers.readers.kineto import decode as kdecode
from tracekit.analyzers.readers.kineto import native
from tracekit.analyzers.readers.kineto.part import make_part

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
DEFAULT = (
    "thirdparty/hta/df_index_resolver__df_index_resolver.json.gz",
    "thirdparty/tracelens/h100__google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "thirdparty/kineto-tbplugin/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz",
    "h200-probe/torch_trace.json.gz",
)


def _best(fn: object, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        t = time.process_time()
        fn()  # type: ignore[operator]
        best = min(best, time.process_time() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", help="a regex: the shared traces to read (default: four of them)")
    args = ap.parse_args()
    if not native.AVAILABLE:
        raise SystemExit(
            "the C scanner is not built with this install (no C compiler, or TRACEKIT_NO_SCANNER set)"
        )
    names = (
        sorted(
            p.relative_to(SHARED).as_posix()
            for p in SHARED.rglob("*.json.gz")
            if re.search(args.only, str(p))
        )
        if args.only
        else list(DEFAULT)
    )
    print(f"{'trace':58s} {'MB':>6s} {'events':>9s} {'general s':>10s} {'scanner s':>10s} {'ratio':>6s}")
    for name in names:
        text = gzip.decompress((SHARED / name).read_bytes())
        doc = (
            bytes(msgspec.json.decode(text, type=kdecode._LooseTrace).traceEvents)
            if text.lstrip()[:1] == b"{"
            else text
        )
        count = len(kdecode.decode(doc, "list").events or ())

        def general(doc: bytes = doc) -> None:
            with kdecode.gc_paused():
                out = kdecode.decode(doc, "list")
                make_part(out.events or [])

        def scanner(doc: bytes = doc, name: str = name) -> None:
            if native.scan_part(doc, "list") is None:
                raise SystemExit(f"the scanner declined {name}")

        g, s = _best(general, args.repeats), _best(scanner, args.repeats)
        short = name if len(name) <= 58 else "..." + name[-55:]
        print(f"{short:58s} {len(doc) / 1e6:6.1f} {count:9,d} {g:10.3f} {s:10.3f} {s / g:6.2f}")


if __name__ == "__main__":
    main()
