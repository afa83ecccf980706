"""Tensor-parallel GEMMs on every rank with an all-reduce per step: the plumbing test of ``tracekit capture --ranks``.

Each rank holds a column slice of W1 and a row slice of W2 (Megatron-style MLP): ``h = x @ W1_r^T`` then
``y_r = h @ W2_r^T``, and the partial outputs are summed across ranks with an all-reduce. Both GEMMs run inside
tracekit GEMM ranges; every step inside a ``step`` range (default NVTX domain, so Nsight Compute's filter does not
profile the step's other kernels). The all-reduce uses gloo on a CPU copy, so two ranks can share one GPU (NCCL
refuses two ranks on one device); on several GPUs pass ``--backend nccl`` for a real NCCL all-reduce on the GPU.

``--slow-rank R --extra-gemms N`` plants a straggler: rank R launches N more GEMMs per step outside any range.

    tracekit capture --ranks --nsys -- torchrun --nproc-per-node 2 samples/scripts/tp_gemm_gloo.py --steps 8
    tracekit capture --ranks --nsys -- python3 -m torch.distributed.run --nproc-per-node 2 \\
        samples/scripts/tp_gemm_gloo.py --slow-rank 1 --extra-gemms 4
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8, help="timed steps (each in a step range)")
    ap.add_argument("--warmup", type=int, default=2, help="steps before, outside step ranges")
    ap.add_argument("--m", type=int, default=1024, help="tokens (rows of x)")
    ap.add_argument("--hidden", type=int, default=4096, help="model width: K of the first GEMM, N of the second")
    ap.add_argument("--ffn", type=int, default=16384, help="FFN width, split across ranks")
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: plumbing only, no GPU")
    ap.add_argument("--slow-rank", type=int, default=-1, help="rank that does extra GPU work (a straggler)")
    ap.add_argument("--extra-gemms", type=int, default=4, help="extra unranged GEMMs per step on --slow-rank")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist

    from tracekit import naming
    from tracekit.collectors.ranges import gemm_range

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    cuda = args.device == "cuda"
    dev = torch.device("cuda", local % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    try:  # step ranges in the default NVTX domain (tracekit's own domain would make ncu profile every kernel)
        import nvtx

        push, pop = (lambda name: nvtx.push_range(message=name)), nvtx.pop_range
    except ImportError:
        push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    if args.backend == "gloo" and os.environ.get("MASTER_ADDR", "127.0.0.1") in ("127.0.0.1", "localhost"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: loopback, whatever the hostname resolves to
    dist.init_process_group(args.backend)
    if args.ffn % world:
        raise SystemExit(f"--ffn {args.ffn} does not split over {world} ranks")
    f = args.ffn // world
    m, d = args.m, args.hidden
    torch.manual_seed(1234 + rank)
    x = torch.randn(m, d, device=dev, dtype=torch.bfloat16)
    w1 = torch.randn(f, d, device=dev, dtype=torch.bfloat16) / d**0.5
    w2 = torch.randn(d, f, device=dev, dtype=torch.bfloat16) / f**0.5
    up = gemm_range("torch-bf16", "mm", m, f, d, "bf16", "bf16", "bf16", tp=world)
    down = gemm_range("torch-bf16", "mm", m, d, f, "bf16", "bf16", "bf16", tp=world)
    t0 = time.perf_counter()
    for step in range(args.warmup + args.steps):
        timed = step >= args.warmup
        if timed:
            push(naming.encode("step", i=step - args.warmup))
        with up:
            h = x @ w1.t()
        with down:
            y = h @ w2.t()
        if rank == args.slow_rank:
            for _ in range(args.extra_gemms):
                h = x @ w1.t()
        if args.backend == "nccl":
            dist.all_reduce(y)
        else:
            host = y.float().cpu()
            dist.all_reduce(host)
            y = host.to(dev, torch.bfloat16)
        if cuda:
            torch.cuda.synchronize()
        if timed:
            pop()
    wall = time.perf_counter() - t0
    ref = x.float() @ w1.float().t()  # the local up-projection against an fp32 reference
    err = ((h.float() - ref).norm() / ref.norm()).item()
    dist.barrier()
    print(f"rank {rank}/{world} on {dev}: {args.steps} steps in {wall:.2f} s, y {tuple(y.shape)}, rel. error {err:.1e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
