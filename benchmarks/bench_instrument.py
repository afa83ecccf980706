"""Cost of tracekit's GEMM ranges and instrument wrappers with no profiler attached (CPU only, no torch).

    python benchmarks/bench_instrument.py [--number 200000]

Prints ns/call for: a bare call of a stand-in GEMM entry point, the same call through the `tracekit.instrument()`
wrapper (shape / dtype keying, cached range, NVTX push/pop), a `gemm_range(...)` block around it, and a reused
range scope. The nvtx package without a tool attached is what a user's program sees outside a profiler.
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--number", type=int, default=200_000)
    args = parser.parse_args()
    n = args.number

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
