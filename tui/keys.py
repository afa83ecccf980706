"""The keys of ``tracekit view``, written once: the help screen (``?``) and ``tracekit view --help`` both show
this table. Plain data, no Textual import, so ``--help`` stays instant."""

from __future__ import annotations

HELP: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "Everywhere",
        [
            ("?", "this help"),
            ("escape", "back to the previous screen (close a dialog, clear a filter)"),
            ("q", "quit"),
            ("t", "toggle light / dark theme"),
            ("↑ ↓ pgup pgdn home end", "move the cursor; the mouse wheel scrolls, a click selects"),
            ("enter", "open the row under the cursor (click it twice)"),
            ("/", "filter the table: words match text columns; m>1024, dtype=fp8, backend=torch ... compare"),
            ("s / r", "sort by the next column / reverse the order (or click a column header)"),
        ],
    ),
    (
        "Runs (picker)",
        [
            ("enter", "open the run"),
            ("m", "mark the run as the baseline A of a comparison"),
            ("c", "compare the run under the cursor with the marked (or open) run"),
        ],
    ),
    (
        "Run overview (GEMM table)",
        [
            ("enter", "GEMM detail: waterfall of factors, kernels, Nsight Compute findings"),
            ("k", "kernels: every kernel launch, searchable; g groups by name"),
            ("f", "failures: backend x shape matrix with each error's full text"),
            ("p", "plot: TFLOP/s vs M per backend, with datasheet and measured peaks"),
            ("e", "MoE: grouped launches, the highlighted one's expert histogram and the what-if"),
            ("b", "step breakdown: GPU time by kernel class and idle, per GPU and per range name"),
            (
                "a",
                "backends at the source run's shapes (a `bench gemm --shapes-from` run): the recommendation",
            ),
            ("c", "compare with another run (the --compare run, else pick one)"),
            ("o", "open another run"),
        ],
    ),
    (
        "GEMM detail",
        [
            ("tab", "move between the kernels table and the text"),
            ("enter", "a kernel's whole name and numbers"),
        ],
    ),
    (
        "Kernels",
        [
            ("g", "group launches by kernel name (launches, total, mean, % of GPU time)"),
            ("enter", "the kernel's whole name and launch configuration"),
        ],
    ),
    (
        "Failures",
        [("arrows", "move across backends (rows) and shapes (columns); the full error text shows below")],
    ),
    (
        "Compare",
        [
            ("enter", "one GEMM's pair in full: times and spreads, noise band, factors that moved, verdicts"),
        ],
    ),
    ("Plot", [("n", "next N x K shape, then all shapes together")]),
    ("MoE", [("↑ ↓", "choose a launch; its expert histogram and what-if show below")]),
    (
        "Backends (a `bench gemm --shapes-from RUN` run)",
        [("a", "in the run overview: per shape of RUN, its GEMM time, the fastest backend and the saving")],
    ),
    (
        "Ranks (multi-GPU runs)",
        [
            ("d", "in the run overview: every rank side by side, the straggler and why"),
            ("g", "switch between ranks and the same GEMM on every rank"),
            ("enter", "a rank's steps, or a GEMM's time on every rank"),
        ],
    ),
]


def help_text(width: int = 26) -> str:
    """The key table as plain text (for ``--help``)."""
    lines = []
    for section, keys in HELP:
        lines.append(f"{section}:")
        for key, what in keys:
            lines.append(f"  {key:<{width}} {what}")
    return "\n".join(lines)
