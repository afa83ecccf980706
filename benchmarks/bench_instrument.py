"""Cost of tracekit's GEMM ranges and instrument wrappers with no profiler attached.

    python benchmarks/bench_instrument.py [--number 200000]
    python benchmarks/bench_instrument.py --torch [--number 20000] [--rounds 10]   # real torch (CUDA if any)
    python benchmarks/bench_instrument.py [--torch] --breadcrumbs                    # + breadcrumbs on

Default (CPU only, no torch): prints ns/call for a bare call of a stand-in GEMM entry point, the same call
through the `tracekit.instrument()` wrapper (shape / dtype keying, cached range, NVTX push/pop), a
`gemm_range(...)` block around it, and a reused range scope. The nvtx package without a tool attached is what a
user's program sees outside a profiler. ``--breadcrumbs`` adds the instrumented call with breadcrumbs on
(``TRACEKIT_BREADCRUMB_DIR`` set to a temporary folder: every call writes its slot of the mapped file) and the
breadcrumb's own ``enter`` + ``done`` with the caller's frame lookup, outside any wrapper.

``--torch``: the same comparison with the real ``torch.mm`` on small bf16 matrices (CUDA when available, else
float32 on the CPU, where tensors are not named and the wrapper only passes through). Host time per call over
``--rounds`` rounds of ``--number`` calls, bare and instrumented interleaved A B B A, each round ended by a device
synchronize; the added cost is the best round against the best round and the median of the per-pair
differences, launch included. Then the wrapper alone around a no-op on the same real tensors: the cost with the
launch and its noise taken out.
"""

from __future__ import annotations

import argparse
import sys
import timeit
import types
from collections.abc import Callable

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


def _with_breadcrumbs(measure: Callable[[], float | None]) -> float | None:
    """``measure()`` with breadcrumbs on, written to a temporary folder (collectors/breadcrumb.py)."""
    import os
    import tempfile

    from tracekit.collectors import breadcrumb

    with tempfile.TemporaryDirectory(prefix="tracekit-bench-") as tmp:
        os.environ[breadcrumb.ENV_DIR] = tmp
        breadcrumb.reload()
        try:
            return measure()
        finally:
            del os.environ[breadcrumb.ENV_DIR]
            breadcrumb.reload()


def real_torch(n: int, rounds: int, breadcrumbs: bool = False) -> None:
    """Bare vs instrumented ``torch.mm`` with real torch (see the module docstring)."""
    import statistics
    import time

    import torch

    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    a = torch.randn(16, 64, device=device, dtype=dtype)
    b = torch.randn(64, 16, device=device, dtype=dtype)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def round_ns(fn, *args) -> float:
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn(*args)
        sync()
        return (time.perf_counter() - t0) / n * 1e9

    # 1. torch.mm bare and instrumented, rounds interleaved A B B A so drift (clocks, allocator, the GPU queue)
    #    falls on both alike; the added cost is the median of the per-pair differences.
    bare = torch.mm
    round_ns(bare, a, b)  # warm-up: cuBLAS handle, kernel selection
    I.instrument(flashinfer=False, sgl=False)
    wrapped = torch.mm
    round_ns(wrapped, a, b)  # warm-up: the first call of a shape builds and caches its range
    I.uninstrument()
    bare_t: list[float] = []
    inst_t: list[float] = []
    for r in range(rounds):
        order = ((bare, bare_t), (wrapped, inst_t)) if r % 2 == 0 else ((wrapped, inst_t), (bare, bare_t))
        for fn, out in order:
            out.append(round_ns(fn, a, b))
    diffs = [i - b_ for i, b_ in zip(inst_t, bare_t, strict=True)]

    # 2. The wrapper alone around a no-op, real tensors: what instrument() adds with the launch taken out.
    mm_target = next(t for t in I.TARGETS if t.package == "torch" and t.path == "mm")

    def noop(x, y):
        return None

    lone = I.make_wrapper(noop, mm_target, torch)
    lone(a, b)
    noop_t = min(timeit.repeat(lambda: noop(a, b), number=n * 10, repeat=5)) / (n * 10) * 1e9
    lone_t = min(timeit.repeat(lambda: lone(a, b), number=n * 10, repeat=5)) / (n * 10) * 1e9
    crumbs_t = None
    if breadcrumbs:
        crumbs_t = _with_breadcrumbs(
            lambda: min(timeit.repeat(lambda: lone(a, b), number=n * 10, repeat=5)) / (n * 10) * 1e9
        )

    # 3. Its parts, on the same tensors: what each step of the hot path costs here.
    scope = ranges.range_for(("bench-parts",), lambda: "gemm bench parts")
    push, arg, pop = scope.main
    comp = torch.compiler.is_compiling
    key = (a.shape, b.shape, a.dtype, a.is_cuda)
    cache = {key: scope}
    parts = {
        "a.shape": lambda: a.shape,
        "a.dtype": lambda: a.dtype,
        "a.is_cuda": lambda: a.is_cuda,
        "key (a.shape, b.shape, a.dtype, a.is_cuda)": lambda: (a.shape, b.shape, a.dtype, a.is_cuda),
        "dict lookup of that key": lambda: cache.get(key),
        "torch.compiler.is_compiling()": comp,
        "NVTX push + pop": lambda: (push(arg), pop()),
        "empty lambda (the timing floor)": lambda: None,
    }
    part_ns = {
        label: min(timeit.repeat(fn, number=n * 10, repeat=5)) / (n * 10) * 1e9 for label, fn in parts.items()
    }

    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    print(
        f"torch {torch.__version__} on {name}; {tuple(a.shape)} x {tuple(b.shape)} {dtype}; sink "
        f"{ranges.get_sink().kind}; {rounds} interleaved rounds x {n} calls; python {sys.version.split()[0]}; "
        f"torch._dynamo {'imported' if 'torch._dynamo' in sys.modules else 'not imported'}"
    )
    print(f"{'call':<44} {'ns/call':>9} {'added ns':>9}")
    print(f"{'bare torch.mm (best round)':<44} {min(bare_t):9.0f} {0:9.0f}")
    print(f"{'instrumented torch.mm (best round)':<44} {min(inst_t):9.0f} {min(inst_t) - min(bare_t):9.0f}")
    q = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else [diffs[0]] * 3
    print(f"{'instrumented - bare (median of pairs)':<44} {'':>9} {q[1]:9.0f}")
    print(f"{'  quartiles of the pair differences':<44} {'':>9} {q[0]:4.0f}-{q[2]:.0f}")
    print(f"{'no-op(a, b), real tensors':<44} {noop_t:9.0f} {0:9.0f}")
    print(f"{'instrument wrapper around the no-op':<44} {lone_t:9.0f} {lone_t - noop_t:9.0f}")
    if crumbs_t is not None:
        print(f"{'  the same, breadcrumbs on':<44} {crumbs_t:9.0f} {crumbs_t - noop_t:9.0f}")
    print(f"{'parts of the hot path (each called alone)':<44} {'ns/call':>9}")
    for label, ns in part_ns.items():
        print(f"  {label:<42} {ns:9.0f}")
    if not cuda:
        print("(no CUDA: CPU tensors are not named, so the wrapper takes its pass-through path)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--number", type=int, default=None, help="calls per round (200,000; 20,000 with --torch)"
    )
    parser.add_argument("--torch", action="store_true", help="real torch.mm (CUDA when available)")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds with --torch (10)")
    parser.add_argument(
        "--breadcrumbs", action="store_true", help="also time the wrapper with breadcrumbs on"
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.torch:
        real_torch(args.number or 20_000, args.rounds, args.breadcrumbs)
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
    if args.breadcrumbs:
        from tracekit.collectors import breadcrumb

        scope = ranges.range_for(("bench-breadcrumb",), lambda: "gemm bench breadcrumb")
        getframe = sys._getframe

        def crumb() -> None:  # what the wrapper adds for its breadcrumb, the caller's frame lookup included
            breadcrumb.done(breadcrumb.enter(scope, getframe(1)))

        def with_crumbs() -> None:
            bench("instrumented torch.mm(a, b), breadcrumbs on", lambda: torch.mm(a, b))
            bench("breadcrumb enter + done alone", crumb)

        _with_breadcrumbs(with_crumbs)
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
    print(f"{'call':<44} {'ns/call':>9} {'added ns':>9}")
    for label, ns in rows:
        print(f"{label:<44} {ns:9.0f} {ns - base:9.0f}")


if __name__ == "__main__":
    main()
