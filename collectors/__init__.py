"""tracekit.collectors: NVTX ranges around GEMMs, GEMM backends and the sweep, ncu / nsys / PyTorch-profiler
drivers and NVML sampling. Collectors never draw and never import polars or textual, so a capture runs in a bare
GPU environment; the run is imported (frames built) afterwards, here or on another machine."""
