"""A user's eager decode loop: 200 small bf16 GEMMs with Python host work between them, in ONE range.

Each iteration does ~75 µs of host work (a busy loop standing in for sampling, bookkeeping, a small numpy op)
before launching ``torch.mm(x, w.t())`` at M=64 N=2048 K=6144, a kernel of roughly 10-15 µs; nothing
synchronizes inside the loop, so the GPU idles between launches: the range's time is mostly launch gaps.
Ranges (the user's own NVTX names, default domain):

  eager_loop  200 GEMMs M=64 N=2048 K=6144 with host work between them (launch gaps)
  graph_loop  the same 200 GEMMs back to back, replayed from a CUDA graph (control: no gaps); if graph capture
              fails, launched eagerly back to back with no host work (the output line says which)

Prints one line per range: total ms (CUDA events around the range), median ms per GEMM, TFLOP/s over the whole
range and GPU-busy share. Does not import tracekit; needs torch and a CUDA GPU."""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

M, N, K = 64, 2048, 6144


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gemms", type=int, default=200, help="GEMMs per loop (default 200)")
    p.add_argument(
        "--host-us", type=float, default=75.0, help="host work before each launch, µs (default 75)"
    )
    args = p.parse_args(argv)
    if args.gemms < 1 or args.host_us < 0:
        p.error("--gemms must be at least 1 and --host-us at least 0")
    return args


def host_work(us: float) -> int:
    """Busy Python work for ``us`` microseconds (no GPU call, no sleep: the interpreter stays busy)."""
    end = time.perf_counter() + us / 1e6
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    flops = 2 * M * N * K * args.gemms

    for _ in range(10):  # warm-up outside ranges: cuBLAS handle, heuristics
        torch.mm(x, w.t(), out=out)
    torch.cuda.synchronize()

    # eager_loop: host work between launches, no synchronize inside
    per = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(args.gemms)
    ]
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.nvtx.range_push("eager_loop")
    t0.record()
    for s, e in per:
        host_work(args.host_us)
        s.record()
        torch.mm(x, w.t(), out=out)
        e.record()
    t1.record()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    total = t0.elapsed_time(t1)
    each = statistics.median(s.elapsed_time(e) for s, e in per)
    print(
        f"eager_loop: {args.gemms} x M={M} N={N} K={K} bf16 torch.mm, "
        f"{args.host_us:.0f} us host work between: total {total:.3f} ms, median {each:.4f} ms per GEMM, "
        f"{flops / (total / 1e3) / 1e12:.1f} TFLOP/s over the range, "
        f"GPU busy {min(1.0, each * args.gemms / total):.0%}",
        flush=True,
    )

    # graph_loop: the same GEMMs back to back
    how = "CUDA graph"
    try:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up on a side stream before capture, as torch's docs do
            torch.mm(x, w.t(), out=out)
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            for _ in range(args.gemms):
                torch.mm(x, w.t(), out=out)
        graph.replay()  # first replay uploads the graph: outside the range
        torch.cuda.synchronize()

        def loop() -> None:
            graph.replay()
    except RuntimeError as exc:
        how = f"eager back to back (graph capture failed: {str(exc).splitlines()[0]})"

        def loop() -> None:
            for _ in range(args.gemms):
                torch.mm(x, w.t(), out=out)

    torch.cuda.nvtx.range_push("graph_loop")
    t0.record()
    loop()
    t1.record()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    total = t0.elapsed_time(t1)
    print(
        f"graph_loop: {args.gemms} x M={M} N={N} K={K} bf16 torch.mm, {how}: total {total:.3f} ms, "
        f"{total / args.gemms:.4f} ms per GEMM, {flops / (total / 1e3) / 1e12:.1f} TFLOP/s over the range",
        flush=True,
    )


if __name__ == "__main__":
    main()
