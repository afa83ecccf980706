"""Two user NVTX ranges around torch GEMMs (``attn_proj``, ``mlp_up``), no tracekit import: under
``tracekit capture --ncu --ranges attn`` only the ``attn_proj`` kernels must be profiled."""

import torch

a = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)
b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
for _ in range(2):
    torch.cuda.nvtx.range_push("attn_proj")
    torch.mm(a, b)
    torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_push("mlp_up")
    torch.mm(a, b)
    torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
print("done")
