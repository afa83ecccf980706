"""Nsight Systems SQLite exports: kernels, NVTX ranges and devices."""
