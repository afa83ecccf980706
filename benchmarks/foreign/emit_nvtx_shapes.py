"""PyTorch GEMMs of known shape inside ``torch.autograd.profiler.emit_nvtx(record_shapes=True)``: an Nsight Systems
capture of it holds the NVTX range text tracekit parses into M, N, K (analyzers/readers/torch_ops.py). No tracekit import.

    nsys profile -t cuda,nvtx -s none --cpuctxsw=none --export=sqlite -o emit_nvtx_shapes \
        python3 benchmarks/foreign/emit_nvtx_shapes.py
    tracekit import emit_nvtx_shapes.sqlite -o runs/emit-nvtx-shapes

Expected gemm-op ranges: mm 1024x2048x6144, addmm 16x6144x6144, bmm 8 x 256x512x1024, linear M=4*197 N=768 K=768
(calls addmm / mm), matmul 3-D x 2-D (M folded: 2*512), and an fp8 _scaled_mm 1024x2048x6144 where supported.
"""

import torch

dev, bf16 = "cuda", torch.bfloat16
a, b = torch.randn(1024, 6144, device=dev, dtype=bf16), torch.randn(6144, 2048, device=dev, dtype=bf16)
s, w = torch.randn(16, 6144, device=dev, dtype=bf16), torch.randn(6144, 6144, device=dev, dtype=bf16)
x, y = torch.randn(8, 256, 1024, device=dev, dtype=bf16), torch.randn(8, 1024, 512, device=dev, dtype=bf16)
t, lw = torch.randn(4, 197, 768, device=dev, dtype=bf16), torch.randn(768, 768, device=dev, dtype=bf16)
bias = torch.randn(6144, device=dev, dtype=bf16)
with torch.no_grad(), torch.autograd.profiler.emit_nvtx(record_shapes=True):
    for _ in range(3):
        torch.mm(a, b)
        torch.addmm(bias, s, w)
        torch.bmm(x, y)
        torch.nn.functional.linear(t, lw, bias[:768])
        torch.matmul(torch.randn(2, 512, 1024, device=dev, dtype=bf16), y[0])
        if torch.cuda.get_device_capability() >= (8, 9):
            fa, fb = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=dev)
            torch._scaled_mm(fa, fb, scale_a=one, scale_b=one, out_dtype=bf16)
    torch.cuda.synchronize()
print("done: GEMMs inside emit_nvtx(record_shapes=True)")
