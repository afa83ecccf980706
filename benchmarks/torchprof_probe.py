"""Where a PyTorch-profiled worker process spends its time, variant by variant (run on a GPU machine).

Each variant runs in a fresh process: import torch, start CUDA, optionally start a profiler, run ``--iters`` small
fp8-style GEMM steps (amax, scale, cast, ``_scaled_mm``; each in a ``record_function`` range, as tracekit's
ranges are under the PyTorch profiler), stop, export. Prints one row per variant: the process's wall time as its
parent saw it, the phases inside it, trace size and event counts by category (to see whether ranges survive).

    python benchmarks/torchprof_probe.py [--iters 3000]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t_import = time.perf_counter()
variant, iters, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t_cuda = time.perf_counter()
prof = None
if variant == "autograd-cpu+cuda":
    from torch.autograd.profiler import profile
    prof = profile(use_cpu=True, use_device="cuda", use_kineto=True)
elif variant == "autograd-ranges+cuda":
    import torch.autograd.profiler as ap
    from torch._C._profiler import RecordScope
    prof = ap.profile(use_cpu=True, use_device="cuda", use_kineto=True)
    enable = ap._enable_profiler
    ap._enable_profiler = lambda c, a: enable(c, a, scopes={RecordScope.USER_SCOPE})
elif variant == "autograd-cuda-only":
    from torch.autograd.profiler import profile
    prof = profile(use_cpu=False, use_device="cuda", use_kineto=True)
elif variant == "torch.profiler-cuda-only":
    from torch.profiler import profile, ProfilerActivity
    prof = profile(activities=[ProfilerActivity.CUDA])
if prof is not None:
    prof.__enter__()
    if variant == "autograd-ranges+cuda":
        ap._enable_profiler = enable
t_enter = time.perf_counter()
m, n, k = 16, 768, 6144
x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn)
ws = torch.ones((), device="cuda")
for i in range(iters):
    with torch.autograd.profiler.record_function(f"gemm backend=probe M={m} N={n} K={k}"):
        amax = x.abs().amax().float().clamp(min=1e-12)
        scale = 448.0 / amax
        xq = (x.float() * scale).to(torch.float8_e4m3fn)
        torch._scaled_mm(xq, w.t(), scale_a=scale.reciprocal(), scale_b=ws, out_dtype=torch.bfloat16)
torch.cuda.synchronize()
t_work = time.perf_counter()
size = 0
if prof is not None:
    prof.__exit__(None, None, None)
t_stop = time.perf_counter()
if prof is not None:
    prof.export_chrome_trace(out)
t_export = time.perf_counter()
print(json.dumps({"import": t_import - t0, "cuda": t_cuda - t_import, "enter": t_enter - t_cuda,
                  "work": t_work - t_enter, "stop": t_stop - t_work, "export": t_export - t_stop}))
"""

VARIANTS = ("plain", "autograd-cpu+cuda", "autograd-ranges+cuda", "autograd-cuda-only")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iters", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    ns = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tk-torchprof-probe-"))
    child = tmp / "child.py"
    child.write_text(CHILD)
    print("variant | wall s | import | cuda | enter | work | stop | export | trace MB | events by cat")
    for rnd in range(ns.rounds):
        for v in VARIANTS:
            out = tmp / f"{v}.{rnd}.json"
            start = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, str(child), v, str(ns.iters), str(out)], capture_output=True, text=True
            )
            wall = time.perf_counter() - start
            if proc.returncode != 0:
                print(f"{v} | exit {proc.returncode} | {proc.stderr.strip().splitlines()[-1:]} ")
                continue
            t = json.loads(proc.stdout.strip().splitlines()[-1])
            cats = ""
            size = 0.0
            if out.exists():
                size = out.stat().st_size / 1e6
                ev = json.loads(out.read_text()).get("traceEvents", [])
                c = collections.Counter(e.get("cat") for e in ev)
                cats = " ".join(f"{k}={v}" for k, v in c.most_common(8))
                with gzip.open(str(out) + ".gz", "wb", compresslevel=1) as f:
                    f.write(out.read_bytes())
            phases = " | ".join(f"{t[p]:.2f}" for p in ("import", "cuda", "enter", "work", "stop", "export"))
            print(f"{v} | {wall:.2f} | {phases} | {size:.1f} | {cats}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
