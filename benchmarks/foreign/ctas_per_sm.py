"""Does one resident CTA keep an SM busy, where several fit? Times a Triton BF16 GEMM over grids of 1/2 to 4x the
SM count, at a tile small enough that several CTAs fit per SM.

The waves factor must choose between two models of a grid that does not fill every CTA slot (docs/KERNELS.md):
the *slot* model (each CTA runs at 1/k of an SM that holds k: a half-empty SM is half idle) and the *SM* model
(an SM's throughput does not depend on how many CTAs it holds). Here K and the tile are fixed, so every CTA does
the same work: if the time stays flat from 1 CTA per SM up to k, the SM had room (slot model); if it grows with
the CTAs per SM, one CTA already kept it busy (SM model). Prints one line per grid: CTAs, CTAs per SM, median ms
(CUDA events, launches queued behind a GPU spin), µs per CTA-wave-slot. Does not import tracekit.

    python benchmarks/foreign/ctas_per_sm.py [--tile 64x64x64] [--stages 3] [--warps 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triton_waves import build_kernel, queue_ahead

K = 8192
PER_SM = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tile", default="64x64x64", help="BMxBNxBK (default 64x64x64)")
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--warps", type=int, default=4)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument(
        "--waves",
        default="",
        help="grids as waves of CTA slots (e.g. 1,1.5,2,15.5,16) with --per-sm K; default: CTAs per SM",
    )
    p.add_argument("--per-sm", type=int, default=0, help="CTAs per SM the tile allows (for --waves)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    bm, bn, bk = (int(x) for x in args.tile.split("x"))
    kernel = build_kernel()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(
        f"{torch.cuda.get_device_name(0)}: {sms} SMs; tile {bm}x{bn}x{bk}, {args.stages} stages, {args.warps} warps"
    )
    torch.manual_seed(0)
    n_tiles = 12  # tiles across N; M sets the grid
    n = bn * n_tiles
    base = None
    grids = [float(w) * args.per_sm for w in args.waves.split(",")] if args.waves and args.per_sm else PER_SM
    for per_sm in grids:
        ctas = round(per_sm * sms)
        m_tiles = max(1, ctas // n_tiles)
        ctas = m_tiles * n_tiles
        m = bm * m_tiles
        a = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        compiled: list[object] = []

        def launch(a=a, b=b, c=c, m=m, ctas=ctas, compiled=compiled) -> None:
            out = kernel[(ctas,)](a, b, c, m, n, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                  c.stride(0), c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                  GROUP_SIZE_M=8, num_stages=args.stages, num_warps=args.warps)  # fmt: skip
            if not compiled:
                compiled.append(out)

        for _ in range(3):
            launch()
        torch.cuda.synchronize()
        queue_ahead()
        events = []
        for _ in range(args.reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            launch()
            e.record()
            events.append((s, e))
        torch.cuda.synchronize()
        ms = statistics.median(s.elapsed_time(e) for s, e in events)
        meta = getattr(compiled[0], "metadata", None)
        smem, regs = getattr(meta, "shared", None), getattr(compiled[0], "n_regs", None)
        base = base or ms / (ctas / sms)
        print(
            f"CTAs {ctas:5d} ({ctas / sms:4.2f}/SM) M={m} N={n} K={K}: median {ms:.4f} ms, "
            f"{2 * m * n * K / (ms / 1e3) / 1e12:6.1f} TFLOP/s, time / (CTAs per SM) {ms / (ctas / sms):.4f} ms "
            f"({ms / (ctas / sms) / base:.2f}x the first); smem/CTA {smem} B, regs {regs}",
            flush=True,
        )


if __name__ == "__main__":
    main()
