"""A user's GEMM script that does good work first and then dies, for capturing crashes (``--mode``):

  segv          after the GEMMs, "calling into a native library that faults" (stderr), then SIGSEGV in a
                native call (ctypes.string_at(0)): no GEMM is in flight, the last one finished
  segv-in-gemm  the SIGSEGV happens inside a torch.mm call: its operand is a tensor subclass (as quantization
                or sharding libraries write them) whose ``__torch_function__`` calls into the faulting native
                code, so a wrapper around torch.mm (``tracekit capture --instrument``) has started the call
                and never sees it return: "in flight" means the last call started and did not finish
  abort         os.abort() (SIGABRT) after the GEMMs, as a failed native assertion does
  illegal       a kernel that reads an illegal address (a Triton load at a huge offset with no mask, or raw
                PTX through the CUDA driver if Triton is missing): CUDA reports an illegal memory access at
                the next synchronize and the script ends with that RuntimeError (exit status 1)
  hang          time.sleep(3600) after the GEMMs: only a timeout (``tracekit capture --timeout``) ends it

Before that, always: 3 bf16 GEMMs (torch.mm, range ``good_bf16_gemm``) and 3 FP8 GEMMs (torch._scaled_mm e4m3
tensorwise, range ``good_fp8_gemm``), M=1024 N=2048 K=6144, with a summary line each (median ms from CUDA
events, TFLOP/s), then one NVFP4 torch._scaled_mm (range ``nvfp4_gemm``) that the H200 refuses
(CUBLAS_STATUS_NOT_SUPPORTED): caught and printed, as a user trying FP4 would. The GEMMs go through torch.mm
and torch._scaled_mm, which ``tracekit capture --instrument`` wraps. Does not import tracekit; needs torch and
a GPU."""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

M, N, K = 1024, 2048, 6144
MODES = ("segv", "segv-in-gemm", "abort", "illegal", "hang")
REPS = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=MODES, default="segv", help="how the script dies (default segv)")
    return p.parse_args(argv)


def native_fault() -> None:
    """Read address 0 through ctypes: a native call that faults (SIGSEGV), like a broken extension."""
    print("calling into a native library that faults", file=sys.stderr, flush=True)
    ctypes.string_at(0)


def timed(name: str, fn: Callable[[], torch.Tensor], what: str) -> None:
    """REPS calls of ``fn``, each in the NVTX range ``name``; prints median ms and TFLOP/s."""
    fn()  # warm-up, outside the range
    torch.cuda.synchronize()
    events = []
    for _ in range(REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.nvtx.range_push(name)
        start.record()
        fn()
        end.record()
        torch.cuda.nvtx.range_pop()
        events.append((start, end))
    torch.cuda.synchronize()
    ms = statistics.median(s.elapsed_time(e) for s, e in events)
    print(
        f"{name}: M={M} N={N} K={K} {what}: median {ms:.4f} ms, "
        f"{2 * M * N * K / (ms / 1e3) / 1e12:.0f} TFLOP/s",
        flush=True,
    )


def try_nvfp4() -> None:
    """One NVFP4 torch._scaled_mm (float4_e2m1fn_x2, swizzled e4m3 1x16 scales); before SM 10.0 it raises."""
    if not hasattr(torch, "float4_e2m1fn_x2"):
        print(f"nvfp4_gemm: torch {torch.__version__} has no float4_e2m1fn_x2; skipped", flush=True)
        return
    m = n = 128
    k = 256
    a = torch.randint(0, 256, (m, k // 2), device="cuda", dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    b = torch.randint(0, 256, (n, k // 2), device="cuda", dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    # swizzled block-scale layout: round_up(rows, 128) x round_up(k / 16, 4) e4m3 scales, flattened
    sa = torch.ones(m * (k // 16), device="cuda").to(torch.float8_e4m3fn)
    sb = torch.ones(n * (k // 16), device="cuda").to(torch.float8_e4m3fn)
    torch.cuda.nvtx.range_push("nvfp4_gemm")
    try:
        torch._scaled_mm(a, b.t(), sa, sb, out_dtype=torch.bfloat16)
        torch.cuda.synchronize()
        print(f"nvfp4_gemm: M={m} N={n} K={k} ran on this GPU", flush=True)
    except Exception as exc:  # what the GPU refuses: RuntimeError from cuBLAS, or a check in torch
        print(
            f"nvfp4_gemm: M={m} N={n} K={k} failed: {type(exc).__name__}: {str(exc).splitlines()[0]}",
            flush=True,
        )
    finally:
        torch.cuda.nvtx.range_pop()


class FaultyTensor(torch.Tensor):
    """A tensor subclass whose handler for ``mm`` calls into a faulting native library."""

    @classmethod
    def __torch_function__(
        cls, func: Callable[..., Any], types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        if getattr(func, "__name__", "") == "mm":
            native_fault()
        return super().__torch_function__(func, types, args, kwargs or {})


_PTX = r"""
.version 7.0
.target sm_75
.address_size 64
.visible .entry bad_read(.param .u64 p)
{
  .reg .u64 %rd<2>;
  .reg .f32 %f<2>;
  ld.param.u64 %rd1, [p];
  ld.global.f32 %f1, [%rd1];
  st.global.f32 [%rd1], %f1;
  ret;
}
"""


def launch_illegal_read() -> str:
    """Launch one kernel that reads (and writes back) an address far outside any allocation; returns how."""
    buf = torch.zeros(1024, device="cuda")
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def bad_read(src, dst, offset):
            tl.store(dst, tl.load(src + offset))  # no mask: the offset points past every allocation

        bad_read[(1,)](buf, buf, 1 << 40)
        return "Triton load at element offset 2**40"
    except Exception as exc:  # no Triton, or it could not build the kernel: use PTX below
        print(f"Triton unavailable ({type(exc).__name__}: {exc}); using PTX", file=sys.stderr, flush=True)
    # no Triton: the same read from PTX, loaded and launched through the CUDA driver API
    cuda = ctypes.CDLL("libcuda.so.1")
    module, func = ctypes.c_void_p(), ctypes.c_void_p()
    for call, args in (
        ("cuModuleLoadData", (ctypes.byref(module), ctypes.c_char_p(_PTX.encode()))),
        ("cuModuleGetFunction", (ctypes.byref(func), module, b"bad_read")),
    ):
        rc = getattr(cuda, call)(*args)
        if rc != 0:
            sys.exit(f"{call} failed with CUresult {rc}")
    addr = ctypes.c_uint64(0xDEAD_0000_0000)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(addr), ctypes.c_void_p))
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    rc = cuda.cuLaunchKernel(func, 1, 1, 1, 1, 1, 1, 0, stream, params, None)
    if rc != 0:
        sys.exit(f"cuLaunchKernel failed with CUresult {rc}")
    return "PTX load from 0xdead00000000"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("needs a CUDA GPU")
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    timed("good_bf16_gemm", lambda: torch.mm(x, w.t()), "bf16 torch.mm")
    one = torch.ones((), device="cuda")
    x8, w8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    timed(
        "good_fp8_gemm",
        lambda: torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
        "fp8 e4m3 tensorwise torch._scaled_mm",
    )
    try_nvfp4()
    print(f"mode {args.mode}: the script dies now", flush=True)
    if args.mode == "segv":
        native_fault()
    elif args.mode == "segv-in-gemm":
        xs = x.as_subclass(FaultyTensor)
        torch.cuda.nvtx.range_push("faulty_gemm")
        torch.mm(xs, w.t())
        torch.cuda.nvtx.range_pop()
    elif args.mode == "abort":
        print("a native assertion failed: aborting", file=sys.stderr, flush=True)
        os.abort()
    elif args.mode == "illegal":
        torch.cuda.nvtx.range_push("bad_kernel")
        how = launch_illegal_read()
        torch.cuda.nvtx.range_pop()
        print(f"launched a kernel that reads an illegal address ({how}); synchronizing", flush=True)
        torch.cuda.synchronize()  # raises: CUDA error: an illegal memory access was encountered
    elif args.mode == "hang":
        print("waiting for a peer that never answers", file=sys.stderr, flush=True)
        time.sleep(3600)
    sys.exit(f"mode {args.mode}: still alive, which it should not be")


if __name__ == "__main__":
    main()
