"""One large bf16 GEMM (8192^3, torch.mm / cuBLAS) in the user's range ``big_gemm``, a few launches.

Captured twice: under Nsight Compute's ``--clock-control base`` (clocks locked to base: the GEMM runs at about
1.34 GHz of the H200's 1.98 GHz boost, so a clock factor must appear) and under ``--clock-control none`` (the
clocks the program sees). --reps launches inside ranges after --warmup launches outside them. Prints one line:
median ms (CUDA events), TFLOP/s. Does not import tracekit; needs torch and a CUDA GPU."""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

M = N = K = 8192


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3, help="launches inside the range (default 3)")
    p.add_argument("--warmup", type=int, default=2, help="launches before, outside ranges (default 2)")
    args = p.parse_args(argv)
    if args.reps < 1 or args.warmup < 1:
        p.error("--reps and --warmup must be at least 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    for _ in range(args.warmup):
        torch.mm(a, b.t())
    torch.cuda.synchronize()
    events = []
    for _ in range(args.reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.nvtx.range_push("big_gemm")
        start.record()
        torch.mm(a, b.t())
        end.record()
        torch.cuda.nvtx.range_pop()
        events.append((start, end))
    torch.cuda.synchronize()
    ms = statistics.median(s.elapsed_time(e) for s, e in events)
    print(
        f"big_gemm: M={M} N={N} K={K} bf16 torch.mm: median {ms:.3f} ms, "
        f"{2 * M * N * K / (ms / 1e3) / 1e12:.0f} TFLOP/s",
        flush=True,
    )


if __name__ == "__main__":
    main()
