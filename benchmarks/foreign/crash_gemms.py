"""A benchmark that dies: N bf16 GEMMs of one shape (each in its own NVTX range ``crash_gemm_<i>``), then a
crash of the chosen kind, as a user's own script would. Does not import tracekit.

    python3 crash_gemms.py --n 50 --die segv     # SIGSEGV in a native call (ctypes reads address 0)
    python3 crash_gemms.py --n 50 --die abort    # os.abort()
    python3 crash_gemms.py --n 50 --die kill     # SIGSEGV sent to itself (os.kill)
    python3 crash_gemms.py --n 50 --die hang     # sleeps (for capture --timeout)
    python3 crash_gemms.py --n 50 --die none     # exits cleanly: the reference kernel count
"""

import argparse
import ctypes
import os
import signal
import sys
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=50, help="GEMMs before the crash")
    parser.add_argument("--die", choices=["segv", "abort", "kill", "hang", "none"], default="segv")
    parser.add_argument("--shape", default="1024,2048,6144", help="M,N,K")
    args = parser.parse_args()
    m, n, k = (int(x) for x in args.shape.split(","))
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for i in range(args.n):
        torch.cuda.nvtx.range_push(f"crash_gemm_{i}")
        torch.mm(a, b.t())
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"ran {args.n} GEMMs {m}x{n}x{k}", flush=True)
    sys.stderr.write(f"about to die: {args.die}\n")
    sys.stderr.flush()
    if args.die == "segv":
        ctypes.string_at(0)
    elif args.die == "abort":
        os.abort()
    elif args.die == "kill":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif args.die == "hang":
        time.sleep(3600)


if __name__ == "__main__":
    main()
