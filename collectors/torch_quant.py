"""torch helpers shared by the torch-based GEMM backends (collectors/backends.py, collectors/moe): seeded random
bf16 inputs, FP8 (tensorwise, rowwise, blockwise), NVFP4 and MXFP4 quantization and dequantization in torch ops,
the blocked scale layout, and the relative error of a result. torch is imported only when a helper is called.
"""

from __future__ import annotations

import math
from typing import Any


def _torch() -> Any:
    import torch

    return torch


def _randn(shape: tuple[int, ...], device: Any, seed: int, salt: int) -> Any:
    torch = _torch()
    g = torch.Generator(device=device)
    g.manual_seed(seed * 1000003 + salt)
    return torch.randn(shape, device=device, dtype=torch.bfloat16, generator=g)


E4M3_MAX = 448.0


E2M1_MAX = 6.0


E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def to_blocked(scales: Any) -> Any:
    """cuBLAS / CUTLASS 128x4 block-scale swizzle ("32_4_4") of an (rows, cols) scale matrix, flattened.

    Rows pad to 128 and columns to 4; each 128 x 4 tile is stored as 32 x (4 x 4): row r of the tile goes to
    (r % 32, r // 32). This is the layout torch's ``_scaled_mm`` (SWIZZLE_32_4_4), FlashInfer's
    ``SfLayout.layout_128x4`` and sgl-kernel's ``scaled_fp4_quant`` use.
    """
    torch = _torch()
    rows, cols = scales.shape
    rb, cb = _ceil_div(rows, 128), _ceil_div(cols, 4)
    padded = scales
    if (rb * 128, cb * 4) != (rows, cols):
        padded = torch.zeros((rb * 128, cb * 4), device=scales.device, dtype=scales.dtype)
        padded[:rows, :cols] = scales
    blocks = padded.view(rb, 128, cb, 4).permute(0, 2, 1, 3)
    return blocks.reshape(-1, 4, 32, 4).transpose(1, 2).reshape(-1, 32, 16).flatten()


def from_blocked(flat: Any, rows: int, cols: int) -> Any:
    """Inverse of :func:`to_blocked`: the (rows, cols) scale matrix from a swizzled buffer of any shape."""
    rb, cb = _ceil_div(rows, 128), _ceil_div(cols, 4)
    tiles = flat.reshape(rb, cb, 32, 4, 4)  # (row block, col block, r % 32, r // 32, col)
    tiles = tiles.permute(0, 1, 3, 2, 4).reshape(rb, cb, 128, 4)
    return tiles.permute(0, 2, 1, 3).reshape(rb * 128, cb * 4)[:rows, :cols]


def unpack_e2m1(packed: Any) -> Any:
    """fp32 values of packed FP4 (e2m1) bytes, two per byte, low nibble first."""
    torch = _torch()
    raw = packed.view(torch.uint8)
    lut = torch.tensor([*E2M1_VALUES, *(-v for v in E2M1_VALUES)], device=raw.device, dtype=torch.float32)
    lo = (raw & 0x0F).long()
    hi = (raw >> 4).long()
    vals = torch.stack((lut[lo], lut[hi]), dim=-1)
    return vals.reshape(*raw.shape[:-1], raw.shape[-1] * 2)


def quantize_nvfp4_torch(x: Any) -> tuple[Any, Any, Any]:
    """NVFP4 with torch ops only (torch has no public FP4 quantize): (packed uint8 [R, C/2], e4m3 block scales
    [R, C/16] unswizzled, fp32 global decode scale). Two-level scaling as in torch's own NVFP4 tests."""
    torch = _torch()
    rows, cols = x.shape
    xf = x.float()
    global_amax = xf.abs().amax().clamp(min=1e-12)
    s_enc = E2M1_MAX * E4M3_MAX / global_amax
    blocks = xf.reshape(rows, cols // 16, 16)
    block_amax = blocks.abs().amax(dim=-1).clamp(min=1e-12)
    scale_e4m3 = (block_amax / E2M1_MAX * s_enc).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    enc = s_enc / scale_e4m3.float().clamp(min=1e-12)
    scaled = (blocks * enc.unsqueeze(-1)).reshape(rows, cols).clamp(-E2M1_MAX, E2M1_MAX)
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], device=x.device)
    code = torch.bucketize(scaled.abs(), mids).to(torch.uint8)
    code = code | ((scaled < 0).to(torch.uint8) << 3)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    return packed.contiguous(), scale_e4m3, (1.0 / s_enc).float()


def dequant_nvfp4(packed: Any, scales: Any, global_decode: Any, rows: int, cols: int, swizzled: bool) -> Any:
    """fp32 values of an NVFP4 tensor: e2m1 x e4m3 block scale (1x16) x global decode scale."""
    torch = _torch()
    vals = unpack_e2m1(packed.reshape(rows, cols // 2))
    sc = scales.view(torch.float8_e4m3fn)
    sc = from_blocked(sc.reshape(-1), rows, cols // 16) if swizzled else sc.reshape(rows, cols // 16)
    return (vals.reshape(rows, cols // 16, 16) * sc.float().unsqueeze(-1)).reshape(rows, cols) * global_decode


def _rel_error(out: Any, ref: Any) -> float:
    torch = _torch()
    diff = torch.linalg.vector_norm((out.float() - ref.float()).flatten())
    den = torch.linalg.vector_norm(ref.float().flatten())
    return float(diff / den) if float(den) > 0 else math.inf


def _fp8_tensorwise(x: Any) -> tuple[Any, Any]:
    torch = _torch()
    amax = x.float().abs().amax().clamp(min=1e-12)
    scale = E4M3_MAX / amax
    q = (x.float() * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, (1.0 / scale).float().reshape(())


def _fp8_rowwise(x: Any) -> tuple[Any, Any]:
    torch = _torch()
    amax = x.float().abs().amax(dim=1, keepdim=True).clamp(min=1e-12)
    scale = E4M3_MAX / amax
    q = (x.float() * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, (1.0 / scale).float()  # (rows, 1) decode scales


def _fp8_block(x: Any, block_rows: int, block_cols: int = 128) -> tuple[Any, Any]:
    """Block-quantize (block_rows x block_cols); returns (fp8, decode scales [rows/br, cols/bc])."""
    torch = _torch()
    rows, cols = x.shape
    blocks = x.float().reshape(rows // block_rows, block_rows, cols // block_cols, block_cols)
    amax = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-12)
    scale = E4M3_MAX / amax
    q = (blocks * scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).reshape(rows, cols)
    return q, (1.0 / scale).reshape(rows // block_rows, cols // block_cols).float()


def _quantize_mxfp4_torch(x: Any) -> tuple[Any, Any]:
    """MXFP4 with torch ops: packed e2m1 and biased e8m0 exponents (uint8) per 1x32 block."""
    torch = _torch()
    rows, cols = x.shape
    blocks = x.float().reshape(rows, cols // 32, 32)
    amax = blocks.abs().amax(dim=-1).clamp(min=2.0**-126)
    exp = (torch.floor(torch.log2(amax)) - 2).clamp(-127, 127)  # 2 = log2 of e2m1's largest power of two
    scaled = (blocks / torch.exp2(exp).unsqueeze(-1)).reshape(rows, cols).clamp(-E2M1_MAX, E2M1_MAX)
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], device=x.device)
    code = torch.bucketize(scaled.abs(), mids).to(torch.uint8) | ((scaled < 0).to(torch.uint8) << 3)
    packed = code[:, 0::2] | (code[:, 1::2] << 4)
    return packed.contiguous(), (exp + 127).to(torch.uint8)


def rel_error(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in fp32 (inf when the reference is all zeros)."""
    return _rel_error(out, ref)
