"""An inference loop through per-layer ranges, as a user marks a model by hand, with no tracekit import.

``--steps`` steps (default 64), each inside the user's NVTX range and ``record_function`` ``step``, run
``--layers`` layers (default 8), each inside its own range ``layer0`` ... ``layer7``: RMSNorm-free, one bf16
``nn.Linear`` of M x N x K = ``--tokens`` x 4096 x 4096 and a GELU. Every layer launches the same GEMM kernel,
so a profile holds steps x layers GEMM launches (512 by default) of one kernel in eight distinct user ranges:
an analysis keyed by range name and GEMM kernel explains eight GEMMs, not 512.

Prints the median ms per step (CUDA events). Needs torch and a CUDA GPU. Capture it with, for example:

  tracekit capture --nsys -- python3 benchmarks/foreign/layer_loop.py
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Iterator

import torch
import torch.nn.functional as F

WIDTH = 4096


@contextlib.contextmanager
def user_range(name: str) -> Iterator[None]:
    """An NVTX push/pop (Nsight tools) and a record_function (the PyTorch profiler), both named ``name``."""
    torch.cuda.nvtx.range_push(name)
    try:
        with torch.profiler.record_function(name):
            yield
    finally:
        torch.cuda.nvtx.range_pop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=64, help="steps (default 64)")
    p.add_argument("--layers", type=int, default=8, help="layers per step, each its own range (default 8)")
    p.add_argument("--tokens", type=int, default=256, help="rows of each GEMM (default 256)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first, outside any range (default 3)")
    args = p.parse_args(argv)
    if min(args.steps, args.layers, args.tokens) < 1 or args.warmup < 0:
        p.error("--steps, --layers and --tokens must be at least 1, --warmup not negative")
    if not torch.cuda.is_available():
        sys.exit("layer_loop.py needs a CUDA GPU")
    torch.manual_seed(0)
    layers = [torch.nn.Linear(WIDTH, WIDTH, bias=False).cuda().bfloat16() for _ in range(args.layers)]
    x0 = torch.randn(args.tokens, WIDTH, device="cuda", dtype=torch.bfloat16)

    def step(ranged: bool) -> torch.Tensor:
        x = x0
        for i, layer in enumerate(layers):
            with user_range(f"layer{i}") if ranged else contextlib.nullcontext():
                x = F.gelu(layer(x))
        return x

    times = []
    with torch.no_grad():
        for _ in range(args.warmup):
            step(False)
        torch.cuda.synchronize()
        for _ in range(args.steps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with user_range("step"):
                start.record()
                step(True)
                end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    flops = 2.0 * args.tokens * WIDTH * WIDTH * args.layers
    ms = statistics.median(times)
    print(
        f"step: {args.steps} steps x {args.layers} layers, median {ms:.3f} ms, {flops / ms / 1e9:.1f} TFLOP/s"
    )


if __name__ == "__main__":
    main()
