"""PyTorch-profiler (Kineto) Chrome-trace JSON, plain or gzipped: kernels, ranges, GEMM ops and devices."""
