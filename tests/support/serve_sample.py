"""The committed H100 serving sample's nsys export and the GEMM kernels its ncu pass chooses: the real timeline
the capture tests select launches from."""

from __future__ import annotations

from pathlib import Path

SERVE_NSYS = (
    Path(__file__).resolve().parents[2] / "samples" / "h100-serve-nsys-ncu" / "raw" / "nsys.sqlite.xz"
)
"""samples/h100-serve-nsys-ncu's nsys export (xz-compressed)."""

SERVE_GEMMS = [
    "nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_coopA_algo2_TNT",
    "nvjet_sm90_qqtst_128x16_128x11_4x1_v_bz_algo2_splitK_TNT",
    "nvjet_sm90_qqtst_64x16_128x16_4x1_v_bz_algo2_TNT",
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT",
    "nvjet_sm90_tst_64x16_64x16_2x1_v_bz_splitK_TNT",
    "nvjet_sm90_tst_64x16_64x16_4x1_v_bz_TNT",
]
"""The GEMM kernels of its serve ranges, sorted: what the ncu pass profiles by name."""
