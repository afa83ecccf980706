"""Check that ``tracekit explain`` names the planted cause of each captured planted script.

    tracekit capture --nsys -o runs/planted-b -- python benchmarks/planted/b_waves.py
    python benchmarks/planted/check.py b_waves runs/planted-b [more SCRIPT RUN pairs ...]

Exits 1 if any verdict differs from expected.json (and, where it names a `kernel`, the largest loss among the
kernel's own factors), printing each GEMM's factors either way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tracekit.analyzers.analysis import case_list
from tracekit.analyzers.rules.registry import kernel_limit
from tracekit.analyzers.store import load_frames, open_run

EXPECTED = json.loads((Path(__file__).with_name("expected.json")).read_text())


def check(script: str, run_path: str) -> bool:
    want = EXPECTED[script]
    run = open_run(run_path)
    wfs = [
        c for c in case_list(load_frames(run), environment=run.record.environment) if want["gemm"] in c.name
    ]
    if not wfs:
        print(f"{script}: no GEMM matching {want['gemm']!r} in {run_path}")
        return False
    ok = True
    for wf in wfs:
        v = wf.verdict
        got = (v.factor, v.cause)
        good = got[0] == want["verdict"] and ("cause" not in want or got[1] == want["cause"])
        if good and "sentence_contains" in want:
            good = want["sentence_contains"] in v.sentence
        if good and "kernel" in want:  # the plant inside the kernel, where the call's verdict is another
            limit = kernel_limit(wf.factors)
            good = limit is not None and limit.name == want["kernel"]
        ok &= good
        factors = ", ".join(f"{f.name} {f.value:.2f}" for f in wf.factors)
        print(f"{'ok  ' if good else 'FAIL'} {script}: {wf.label}: {wf.timing.achieved_tflops or 0:.0f} TF/s; "
              f"{factors}; verdict {got}")  # fmt: skip
    return ok


def main(argv: list[str]) -> int:
    if len(argv) < 2 or len(argv) % 2:
        print(__doc__)
        return 2
    pairs = list(zip(argv[::2], argv[1::2], strict=True))
    return 0 if all([check(s, r) for s, r in pairs]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
