"""``tracekit bench moe``: grouped (MoE) expert GEMMs over tokens per step and routing distributions.

One expert GEMM is ``rows_e x N x K`` where ``rows_e`` is how many of the step's tokens the router sent to expert
``e``; a grouped launch runs all experts' GEMMs at once. The defaults are GLM-5's expert MLP: hidden 6144, expert
intermediate 2048, 256 experts, top-8; ``--proj gate_up`` times the fused gate+up projection (N = 2 x 2048,
K = 6144), ``--proj down`` the down projection (N = 6144, K = 2048).

Routing (``--routing``, comma-separated, each is a set of cases):

``uniform``
    every token picks ``topk`` distinct experts uniformly at random (seeded).
``zipf:S``
    distinct experts drawn with probability proportional to ``rank^-S`` (expert 0 is the hottest; S = 1.2 is
    a plausible skew, larger is more skewed).
``file:PATH``
    a routing the user captured, JSON lines (format in docs/MOE.md)::

        {"format": "tracekit-moe-routing", "experts": 256, "topk": 8}          optional header
        {"step": "decode-17", "counts": [3, 0, 12, ...]}                         tokens per expert, or
        {"step": "decode-18", "topk_ids": [[4, 17, ...], [0, 9, ...], ...]}      each token's experts

    Each step is one case (its tokens = sum(counts) / topk); ``--tokens`` does not apply to file steps.

Backends (each in its own worker process, failures recorded as in ``bench gemm``):
``torch-bf16-grouped`` (``torch._grouped_mm``), ``torch-fp8-grouped`` (``torch._scaled_grouped_mm``, e4m3 with
rowwise scales), ``torch-bf16-loop`` / ``torch-fp8-loop`` (one ``torch.mm`` / ``torch._scaled_mm`` per active
expert: the reference path), ``flashinfer-cutlass-moe`` (``flashinfer.fused_moe.cutlass_fused_moe`` bf16: both
expert GEMMs and the activation, where FlashInfer imports).

Per-expert time: a grouped launch is one kernel, so its experts are not timed apart here; the launch time is
attributed to experts by the analyzer (analyzers/moe/: in proportion to each expert's CTA tiles). The loop
backends time each distinct per-expert row count on its own (a dense ``m x N x K`` GEMM on a cold expert weight,
rotated over enough experts to defeat the L2), which is both each expert's measured time and the time-vs-M curve
the what-if analysis reads; those curve points are written to ``raw/moe_curve.jsonl`` (the keys of a GEMM measurement).

Worker: ``python -m tracekit.collectors.moe --backend NAME --cases raw/logs/moe_cases.json --ids 0,1 --out EV``
runs :class:`MoeFamily` in the sweep harness (tracekit.collectors.harness), which also runs ``bench gemm``;
measurement rows go to ``raw/moe.jsonl``
(:data:`MOE_KEYS`), curve rows to ``raw/moe_curve.jsonl``, failures to ``raw/failures.jsonl``. Imports no polars;
torch only inside the backends.

The package by concern: ``cases`` (config, routing, cases), ``backends`` (the backends and their registry),
``sweep`` (:class:`MoeSettings`, the harness's sweep plan), ``worker`` (:class:`MoeFamily`, the harness's
family), ``__main__`` (its entry
point). Every public name is importable from here.
"""

from __future__ import annotations

from .backends import (
    BUILTIN_MOE,
    DEFAULT_BACKENDS,
    MOE_BACKENDS,
    FlashinferCutlassMoe,
    MoeBackend,
    TorchBf16Grouped,
    TorchBf16Loop,
    TorchFp8Grouped,
    TorchFp8Loop,
    all_moe_backends,
    register_moe,
)
from .cases import (
    CASES_FILE,
    CURVE_FILE,
    DEFAULT_TOKENS,
    GLM5,
    MOE_FILE,
    MOE_KEYS,
    ROUTING_FORMAT,
    MoeCase,
    MoeConfig,
    build_cases,
    parse_routing,
    parse_tokens,
    read_routing_file,
    route_counts,
    tile_rule,
)
from .sweep import MoeSettings
from .worker import MoeFamily, main, measure_case
from .worker import _curve_row as _curve_row  # used by tests
from .worker import _row as _row  # used by tests

__all__ = [
    "BUILTIN_MOE",
    "CASES_FILE",
    "CURVE_FILE",
    "DEFAULT_BACKENDS",
    "DEFAULT_TOKENS",
    "GLM5",
    "MOE_BACKENDS",
    "MOE_FILE",
    "MOE_KEYS",
    "ROUTING_FORMAT",
    "FlashinferCutlassMoe",
    "MoeBackend",
    "MoeCase",
    "MoeConfig",
    "MoeFamily",
    "MoeSettings",
    "TorchBf16Grouped",
    "TorchBf16Loop",
    "TorchFp8Grouped",
    "TorchFp8Loop",
    "all_moe_backends",
    "build_cases",
    "main",
    "measure_case",
    "parse_routing",
    "parse_tokens",
    "read_routing_file",
    "register_moe",
    "route_counts",
    "tile_rule",
]
