"""Nsight Compute reports (.ncu-rep, through NVIDIA's ncu_report) and their CSV exports (raw and details pages)."""
