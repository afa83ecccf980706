"""Cost of tracekit's GEMM ranges and instrument wrappers with no profiler attached.

    python benchmarks/bench_instrument.py [--number 200000]
    python benchmarks/bench_instrument.py --torch [--number 20000]     # real torch: on a GPU machine, CUDA

Default (CPU only, no torch): prints ns/call for a bare call of a stand-in GEMM entry point, the same call
through the `tracekit.instrument()` wrapper (shape / dtype keying, cached range, NVTX push/pop), a
`gemm_range(...)` block around it, and a reused range scope. The nvtx package without a tool attached is what a
user's program sees outside a profiler.

``--torch``: the same comparison with the real ``torch.mm`` on small bf16 matrices (CUDA when available, else
float32 on the CPU): host time per call, bare / instrumented / bare again (interleaved, best of 5 rounds of
``--number`` calls, each round ended by a device synchronize), so the added time is the wrapper's cost on a real
call, launch included.
"""

from __future__ import annotations

import argparse
import sys
import timeit
import types

from tracekit.collectors import instrument as I
from tracekit.collectors import ranges


class _DType:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"


class _Tensor:
    __slots__ = ("dtype", "is_cuda", "shape")

    def __init__(self, *shape: int, dtype: _DType) -> None:
        self.shape, self.dtype, self.is_cuda = tuple(shape), dtype, True


def real_torch(n: int) -> None:
    """Bare vs instrumented ``torch.mm`` with real torch (see the module docstring)."""
    import time

    import torch

    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    a = torch.randn(16, 64, device=device, dtype=dtype)
    b = torch.randn(64, 16, device=device, dtype=dtype)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def best_ns(fn) -> float:
        times = []
        for _ in range(5):
            sync()
            t0 = time.perf_counter()
            for _ in range(n):
                fn(a, b)
            sync()
            times.append((time.perf_counter() - t0) / n * 1e9)
        return min(times)

    rows = []
    for label in ("bare torch.mm", "instrumented torch.mm", "bare torch.mm (again)"):
        if label.startswith("instrumented"):
            I.instrument(flashinfer=False, sgl=False)
        best_ns(torch.mm)  # warm-up (the first instrumented call builds and caches its range)
        rows.append((label, best_ns(torch.mm)))
        if label.startswith("instrumented"):
            I.uninstrument()
    base = min(rows[0][1], rows[2][1])
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    print(
        f"torch {torch.__version__} on {name}; {tuple(a.shape)} x {tuple(b.shape)} {dtype}; sink "
        f"{ranges.get_sink().kind}; best of 5 x {n} calls; python {sys.version.split()[0]}"
    )
    print(f"{'call':<40} {'ns/call':>9} {'added ns':>9}")
    for label, ns in rows:
        print(f"{label:<40} {ns:9.0f} {ns - base:9.0f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--number", type=int, default=None, help="calls per round (200,000; 20,000 with --torch)"
    )
    parser.add_argument("--torch", action="store_true", help="real torch.mm (CUDA when available)")
    args = parser.parse_args()
    if args.torch:
        real_torch(args.number or 20_000)
        return
    n = args.number or 200_000

    bf16 = _DType("bfloat16")
    torch = types.ModuleType("torch")
    torch.bfloat16 = bf16

    def mm(a, b):
        return a

    torch.mm = mm
    torch.compiler = types.SimpleNamespace(is_compiling=lambda: False)
    sys.modules["torch"] = torch
    a, b = _Tensor(1024, 6144, dtype=bf16), _Tensor(6144, 2048, dtype=bf16)

    rows = []

    def bench(label: str, stmt) -> float:
        stmt()
        best = min(timeit.repeat(stmt, number=n, repeat=5)) / n * 1e9
        rows.append((label, best))
        return best

    base = bench("baseline: torch.mm(a, b) stand-in", lambda: torch.mm(a, b))
    I.instrument(flashinfer=False, sgl=False)
    bench("instrumented torch.mm(a, b)", lambda: torch.mm(a, b))
    I.uninstrument()

    def block():
        with ranges.gemm_range("torch-bf16", "mm", 1024, 2048, 6144, "bf16", "bf16", "bf16"):
            mm(a, b)

    bench("with gemm_range(...): mm(a, b)", block)
    scope = ranges.gemm_range("torch-bf16", "mm", 1024, 2048, 6144, "bf16", "bf16", "bf16")

    def reused():
        with scope:
            mm(a, b)

    bench("with <reused scope>: mm(a, b)", reused)

    print(f"sink: {ranges.get_sink().kind}; python {sys.version.split()[0]}; best of 5 x {n} calls")
    print(f"{'call':<40} {'ns/call':>9} {'added ns':>9}")
    for label, ns in rows:
        print(f"{label:<40} {ns:9.0f} {ns - base:9.0f}")


if __name__ == "__main__":
    main()
