"""A user's decode-time linear layer: torch bf16 mm (cuBLAS) with 16 tokens against a 2048 x 6144 weight.

At M=16 the weight (2048 x 6144 x 2 B = 25 MB) dominates the bytes moved and the GEMM is memory-bound; the
prefill-sized control at M=4096 is compute-bound. Ranges (the user's own NVTX names, default domain):

  decode_gemm_m16     M=16   N=2048 K=6144  (memory-bound)
  prefill_gemm_m4096  M=4096 N=2048 K=6144  (control: not memory-bound)

Each range holds one ``torch.mm(x, w.t())``; --reps calls per shape run inside ranges after --warmup calls
outside them, queued behind a ~5 ms GPU spin (torch.cuda._sleep) so they run back to back: a 12 µs kernel
issued by a host slowed by a profiler would otherwise look launch-bound, which is not what this program is
about. Weights rotate over enough copies to exceed the 60 MB L2, so each call reads its weight from DRAM as a
real model's next layer would. Prints one line per shape: median ms (CUDA events), TFLOP/s, GB/s. Does not
import tracekit; needs torch and a CUDA GPU."""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

SHAPES = [("decode_gemm_m16", 16, 2048, 6144), ("prefill_gemm_m4096", 4096, 2048, 6144)]
COPIES = 4  # 4 x 25 MB of weights > 60 MB L2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3, help="calls per shape inside its range (default 3)")
    p.add_argument("--warmup", type=int, default=5, help="calls per shape before, outside ranges (default 5)")
    args = p.parse_args(argv)
    if args.reps < 1 or args.warmup < 1:
        p.error("--reps and --warmup must be at least 1")
    return args


def queue_ahead(ms: float = 5.0) -> None:
    """Hold the GPU busy for about ``ms`` so the launches that follow queue up and run back to back: the
    timed kernels are then measured as the GPU runs them, not as fast as a host slowed by a profiler issues
    them."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(ms * 1e-3 * 1.98e9))  # GPU clock cycles at the H200's boost clock


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    torch.manual_seed(0)
    for name, m, n, k in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(COPIES)]
        for i in range(args.warmup):
            torch.mm(x, ws[i % COPIES].t())
        torch.cuda.synchronize()
        queue_ahead()
        events = []
        for i in range(args.reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.nvtx.range_push(name)
            start.record()
            y = torch.mm(x, ws[i % COPIES].t())
            end.record()
            torch.cuda.nvtx.range_pop()
            events.append((start, end))
        torch.cuda.synchronize()
        ms = statistics.median(s.elapsed_time(e) for s, e in events)
        moved = 2 * (m * k + n * k + m * n)
        print(
            f"{name}: M={m} N={n} K={k} bf16 torch.mm: median {ms:.4f} ms, "
            f"{2 * m * n * k / (ms / 1e3) / 1e12:.1f} TFLOP/s, {moved / (ms / 1e3) / 1e9:.0f} GB/s "
            f"(out {tuple(y.shape)})",
            flush=True,
        )


if __name__ == "__main__":
    main()
