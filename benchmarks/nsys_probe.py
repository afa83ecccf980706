"""Where Nsight Systems' time goes around one short CUDA program (run on a GPU machine with nsys).

A child prints wall-clock stamps at its start, after ``import torch``, after CUDA starts and at its end; nsys is
run with tracekit's settings (``tools.nsys_command``) but ``--export=none``, and the SQLite export is timed on its
own. One row per pass, seconds:

    launch    nsys start until the program's first line runs (injection, daemon)
    import    the program's ``import torch``
    cuda      the program's first CUDA call (CUPTI attaches here under nsys)
    work      the program's ``--iters`` small GEMMs, each in a tracekit NVTX range
    procs     ``--procs`` further short CUDA programs the child runs one after another (import torch, first CUDA
              call, 100 GEMMs): what each extra profiled process costs, as in a sweep's worker per backend
    exit      program end until nsys itself exits (report generation: .qdstrm -> .nsys-rep)
    export    ``nsys export --type sqlite`` of that report
    tables    the same export limited to the tables tracekit reads (``--tables``), where this nsys has the option

The ``nsys`` row (with ``--split``) exports separately; the ``nsys-inline`` row runs tracekit's exact command
(``--export=sqlite`` inside ``nsys profile``): its exit column holds report generation and export together;
``nsys-nosym`` adds ``--resolve-symbols=false``. ``--dump DIR`` writes ``nsys --version`` and the help of
``nsys profile`` and ``nsys export`` there.

    python benchmarks/nsys_probe.py [--iters 3000] [--procs 3] [--rounds 2] [--dump DIR]
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
import subprocess
for _ in range(int(sys.argv[2])):
    subprocess.run([sys.executable, sys.argv[0], "100", "0"], check=True, capture_output=True)
stamps["procs"] = time.time()
print("STAMPS " + json.dumps(stamps), flush=True)
"""

# The tables analyzers/nsys.py reads; the export's own bookkeeping tables are kept by nsys regardless.
TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
    "StringIds",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_DEVICE",
    "ENUM_NSYS_EVENT_TYPE",
)


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
    parser.add_argument("--procs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--dump", type=Path)
    parser.add_argument(
        "--split",
        action="store_true",
        help="also a pass with the export run on its own (--export=none + nsys export)",
    )
    ns = parser.parse_args()
    nsys = tools.find_nsys()
    tools.require_nsys_importer(nsys)
    tmp = Path(tempfile.mkdtemp(prefix="tk-nsys-probe-"))
    child = tmp / "child.py"
    child.write_text(CHILD)
    env = tools.nsys_env(dict(os.environ))
    helps = {
        "version": [nsys.path, "--version"],
        "profile-help": [nsys.path, "profile", "--help"],
        "export-help": [nsys.path, "export", "--help"],
    }
    texts = {
        k: subprocess.run(v, capture_output=True, text=True, env=env, check=False).stdout
        for k, v in helps.items()
    }
    print("nsys", texts["version"].strip())
    if ns.dump:
        ns.dump.mkdir(parents=True, exist_ok=True)
        for k, text in texts.items():
            (ns.dump / f"nsys-{k}.txt").write_text(text)
    has_tables = "--tables" in texts["export-help"]
    print("pass | total | launch | import | cuda | work | procs | exit | export | tables | report MB")
    for rnd in range(ns.rounds):
        for mode in ("plain", "nsys", "nsys-inline", "nsys-nosym"):
            if mode == "nsys" and not ns.split:
                continue
            cmd = [sys.executable, str(child), str(ns.iters), str(ns.procs)]
            base = tmp / f"r{rnd}-{mode}"
            # nsys-nosym: symbol resolution is on by default on Linux, even with CPU sampling off
            extra = ["--resolve-symbols=false"] if mode == "nsys-nosym" else []
            if mode != "plain":
                cmd = tools.nsys_command(nsys.path, base, cmd, extra=extra)
            if mode == "nsys":
                cmd = [c if c != "--export=sqlite" else "--export=none" for c in cmd]
            t0 = time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            t1 = time.time()
            if proc.returncode != 0:
                print(f"{mode} | exit {proc.returncode} | {proc.stderr.strip().splitlines()[-1:]}")
                continue
            s = _stamps(proc.stdout)
            export = tables = 0.0
            size = 0.0
            if mode != "plain":
                report = base.with_suffix(".nsys-rep")
                size = report.stat().st_size / 1e6
            if mode == "nsys":
                e0 = time.time()
                subprocess.run(
                    tools.nsys_export_command(nsys.path, report), env=env, capture_output=True, check=True
                )
                export = time.time() - e0
                print(f"full export: {report.with_suffix('.sqlite').stat().st_size / 1e6:.1f} MB")
                if has_tables:
                    argv = tools.nsys_export_command(nsys.path, report)
                    argv = [*argv[:2], "--tables", ",".join(TABLES), *argv[2:]]
                    argv[argv.index("-o") + 1] = str(base) + "-tables.sqlite"
                    e0 = time.time()
                    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
                    tables = time.time() - e0
                    if done.returncode != 0:
                        print(f"--tables export failed ({done.returncode}): {done.stderr.strip()[-400:]}")
                        has_tables = False
                    else:
                        print(
                            f"--tables export: {Path(argv[argv.index('-o') + 1]).stat().st_size / 1e6:.1f} MB"
                        )
            parts = [
                s["start"] - t0,
                s["import"] - s["start"],
                s["cuda"] - s["import"],
                s["end"] - s["cuda"],
                s["procs"] - s["end"],
                t1 - s["procs"],
                export,
                tables,
            ]
            total = t1 - t0 + export
            print(
                f"{mode} | {total:.2f} | " + " | ".join(f"{p:.2f}" for p in parts) + f" | {size:.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
