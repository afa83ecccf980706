"""tracekit.analyzers: readers (ncu reports, nsys SQLite, Kineto JSON) into polars frames, the kernel-to-range
join, GEMM metrics, the plateau explainer, compare and report rendering. Analyzers never launch a GPU tool and
never import torch, textual or rich."""
