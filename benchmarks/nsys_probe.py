"""Where Nsight Systems' time goes around one short CUDA program (run on a GPU machine with nsys).

A child prints wall-clock stamps at its start, after ``import torch``, after CUDA starts and at its end; nsys is
run with tracekit's settings (``tools.nsys_command``) but ``--export=none``, and the SQLite export is timed on its
own. One row per pass, seconds:

    launch    nsys start until the program's first line runs (injection, daemon)
    import    the program's ``import torch``
    cuda      the program's first CUDA call (CUPTI attaches here under nsys)
    work      the program's ``--iters`` small GEMMs, each in a tracekit NVTX range
    exit      program end until nsys itself exits (report generation: .qdstrm -> .nsys-rep)
    export    ``nsys export --type sqlite`` of that report

    python benchmarks/nsys_probe.py [--iters 3000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tracekit.collectors import tools

CHILD = r"""
import json, sys, time
stamps = {"start": time.time()}
import torch
stamps["import"] = time.time()
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
stamps["cuda"] = time.time()
from tracekit.collectors.ranges import gemm_range
m, n, k = 16, 768, 6144
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
for _ in range(int(sys.argv[1])):
    with gemm_range("torch-bf16", "mm", m, n, k, "bf16", "bf16", "bf16"):
        torch.mm(x, w)
torch.cuda.synchronize()
stamps["end"] = time.time()
print("STAMPS " + json.dumps(stamps), flush=True)
"""


def _stamps(text: str) -> dict[str, float]:
    for line in text.splitlines():
        if line.startswith("STAMPS "):
            return json.loads(line[len("STAMPS ") :])
    raise RuntimeError("the child printed no stamps:\n" + text[-2000:])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iters", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    ns = parser.parse_args()
    nsys = tools.find_nsys()
    tools.require_nsys_importer(nsys)
    tmp = Path(tempfile.mkdtemp(prefix="tk-nsys-probe-"))
    child = tmp / "child.py"
    child.write_text(CHILD)
    env = tools.nsys_env(dict(os.environ))
    print("pass | total | launch | import | cuda | work | exit | export | report MB")
    for rnd in range(ns.rounds):
        for mode in ("plain", "nsys"):
            cmd = [sys.executable, str(child), str(ns.iters)]
            base = tmp / f"r{rnd}"
            if mode == "nsys":
                cmd = tools.nsys_command(nsys.path, base, cmd)
                cmd = [c if c != "--export=sqlite" else "--export=none" for c in cmd]
            t0 = time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            t1 = time.time()
            if proc.returncode != 0:
                print(f"{mode} | exit {proc.returncode} | {proc.stderr.strip().splitlines()[-1:]}")
                continue
            s = _stamps(proc.stdout)
            export = 0.0
            size = 0.0
            if mode == "nsys":
                report = base.with_suffix(".nsys-rep")
                size = report.stat().st_size / 1e6
                e0 = time.time()
                subprocess.run(
                    tools.nsys_export_command(nsys.path, report), env=env, capture_output=True, check=True
                )
                export = time.time() - e0
            parts = [
                s["start"] - t0,
                s["import"] - s["start"],
                s["cuda"] - s["import"],
                s["end"] - s["cuda"],
                t1 - s["end"],
                export,
            ]
            total = t1 - t0 + export
            print(
                f"{mode} | {total:.2f} | " + " | ".join(f"{p:.2f}" for p in parts) + f" | {size:.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
