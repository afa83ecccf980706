"""How Nsight Compute's tensor-op counters relate to 2*M*N*K: bf16 / fp8 / fp32 GEMMs of known shape.

Run under ``ncu --metrics sm__ops_path_tensor_src_bf16_dst_fp32.sum,...``; each GEMM sits in its own NVTX range
named ``probe_<dtype>_M<m>_N<n>_K<k>`` so the counters can be divided by the shape's 2*M*N*K afterwards.
Does not import tracekit.
"""

import torch

SHAPES = [(16, 2048, 6144), (128, 2048, 6144), (1024, 2048, 6144), (4096, 768, 6144)]


def main() -> None:
    dev = torch.device("cuda")
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        torch.cuda.nvtx.range_push(f"probe_bf16_M{m}_N{n}_K{k}")
        torch.mm(a, b.t())
        torch.cuda.nvtx.range_pop()
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device=dev)
        torch.cuda.nvtx.range_push(f"probe_fp8_M{m}_N{n}_K{k}")
        torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        torch.cuda.nvtx.range_pop()
        torch.backends.cuda.matmul.allow_tf32 = False
        af, bf = a.float(), b.float()
        torch.cuda.nvtx.range_push(f"probe_fp32_M{m}_N{n}_K{k}")
        torch.mm(af, bf.t())
        torch.cuda.nvtx.range_pop()
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.cuda.nvtx.range_push(f"probe_tf32_M{m}_N{n}_K{k}")
        torch.mm(af, bf.t())
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
