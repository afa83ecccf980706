"""Does pausing the PyTorch profiler (``_toggle_collection_dynamic``) keep the kernels of the resumed stretch?
(run on a GPU machine)

Each variant runs in a fresh process, started as tracekit's profiler runner starts a worker's profiler (the
autograd-level Kineto profiler, CPU and CUDA, started before the process creates its CUDA context), then:
``pre`` recorded matmuls, pause, 10 matmuls, resume, 3 matmuls (each in a ``record_function`` range), pause,
10 matmuls, stop. A pause/resume that works leaves pre + 3 kernels and pre + 3 ranges; the row says how many
kernels, ranges and runtime launch events the trace holds, what the toggles cost, and how many warnings torch
printed.

    python benchmarks/toggle_probe.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
import torch
from torch.autograd.profiler import profile, record_function
from torch._C._autograd import _toggle_collection_dynamic
from torch._C._profiler import ProfilerActivity as A
variant, pre, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sets = {
    "cpu+cuda+xpu": [{A.CPU, A.CUDA, A.XPU}],
    "cpu+cuda": [{A.CPU, A.CUDA}],
    "cuda,cpu": [{A.CUDA}, {A.CPU}],
    "cuda": [{A.CUDA}],
    "none": [],
}[variant]
spent = [0.0]
def toggle(on):
    t = time.perf_counter()
    for s in sets:
        _toggle_collection_dynamic(on, s)
    spent[0] += time.perf_counter() - t
prof = profile(use_cpu=True, use_device="cuda", use_kineto=True)
prof.__enter__()
x = torch.randn(512, 512, device="cuda")
def mm(n):
    for _ in range(n):
        with record_function("probe-mm"):
            x @ x
    torch.cuda.synchronize()
mm(pre)
toggle(False); mm(10); toggle(True); mm(3); toggle(False); mm(10)
prof.__exit__(None, None, None)
prof.export_chrome_trace(out)
print(json.dumps({"toggle_s": spent[0]}))
"""


def main() -> int:
    tmp = Path(tempfile.mkdtemp(prefix="tk-toggle-"))
    rows = []
    for pre in (0, 2):
        for variant in ("none", "cpu+cuda+xpu", "cpu+cuda", "cuda,cpu", "cuda"):
            out = tmp / f"{variant}-{pre}.json"
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, variant, str(pre), str(out)],
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
            if proc.returncode != 0 or not out.is_file():
                rows.append((variant, pre, "-", "-", "-", "-", proc.stderr.strip().splitlines()[-1:]))
                continue
            events = json.loads(out.read_text())["traceEvents"]
            kernels = sum(1 for e in events if e.get("cat") == "kernel")
            ranges = sum(
                1 for e in events if e.get("cat") == "user_annotation" and e.get("name") == "probe-mm"
            )
            launches = sum(
                1 for e in events if e.get("cat") == "cuda_runtime" and "Launch" in str(e.get("name"))
            )
            toggle_s = json.loads(proc.stdout.strip().splitlines()[-1])["toggle_s"]
            warnings = sum(1 for line in proc.stderr.splitlines() if "Toggling" in line)
            rows.append((variant, pre, kernels, ranges, launches, f"{toggle_s:.4f}", warnings))
    header = ("toggle set", "pre", "kernels", "ranges", "launches", "toggle s", "warnings")
    print("expected with working pauses: kernels = ranges = pre + 3; without toggling (none): pre + 23")
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(14) for c in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
