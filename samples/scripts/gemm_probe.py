"""Makes the `h200-gemm-probe` sample: NVTX-ranged torch bf16 and fp8 GEMMs at GLM-5 shapes.

Each GEMM launch is wrapped in an NVTX push/pop range in tracekit's domain, named with tracekit's range codec
(``tracekit.naming.encode``), so `ncu --nvtx --nvtx-include regex:tracekit@.+/` profiles exactly these launches.
Warm-up launches are pushed in ``naming.SKIP_DOMAIN`` so ncu skips them while the timeline still shows them.

Run on a GPU machine (see samples/scripts/make_probe_sample.sh):
    PYTHONPATH=. python3 samples/scripts/gemm_probe.py [--launches 2]
"""

from __future__ import annotations

import argparse

import nvtx
import torch

from tracekit import naming

SHAPES = [(m, 2048, 6144) for m in (16, 256, 4096)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=2, help="ranged launches per GEMM")
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    dom = nvtx.get_domain(naming.DOMAIN)
    skip = nvtx.get_domain(naming.SKIP_DOMAIN)
    torch.manual_seed(0)
    dev = torch.device("cuda")
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.to(torch.float8_e4m3fn)
        one = torch.ones((), device=dev, dtype=torch.float32)
        cases = [
            ("torch-bf16", "mm", "bf16", "none", lambda a=a, b=b: a @ b.t()),
            (
                "torch-fp8-tensorwise",
                "scaled_mm",
                "e4m3",
                "tensorwise",
                lambda a8=a8, b8=b8, one=one: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
            ),
        ]
        for backend, op, dt, scale, fn in cases:
            name = naming.encode(
                "gemm", backend=backend, op=op, M=m, N=n, K=k, a=dt, b=dt, out="bf16", scale=scale
            )
            for _ in range(args.warmup):
                skip.push_range(message=name)
                fn()
                skip.pop_range()
            torch.cuda.synchronize()
            for _ in range(args.launches):
                dom.push_range(message=name)
                out = fn()
                dom.pop_range()
            torch.cuda.synchronize()
            ref = a.float() @ b.float().t()
            err = ((out.float() - ref).norm() / ref.norm()).item()
            print(f"{name}: rel_err={err:.2e}", flush=True)


if __name__ == "__main__":
    main()
