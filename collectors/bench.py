"""``tracekit bench gemm``: the GEMM family's settings for the sweep harness (tracekit.collectors.harness).

:class:`SweepSettings` names the backends and the (M, N, K) shapes; :func:`run_sweep` (the harness's) runs each
backend over the shapes in its own worker process (``python -m tracekit.collectors.worker``), rows to
``raw/measurements.jsonl`` (:data:`MEASUREMENT_KEYS`) and ``raw/failures.jsonl`` (:data:`FAILURE_KEYS`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.collectors.failures import FAILURE_KEYS
from tracekit.collectors.harness import (
    FAILURES_FILE,
    Case,
    Options,
    SweepEvent,
    SweepResult,
    profiled_worker,
    run_sweep,
    take_fingerprint,
)
from tracekit.collectors.worker import MEASUREMENT_KEYS
from tracekit.errors import BadInputError
from tracekit.run import Run

__all__ = [
    "FAILURE_KEYS",
    "GLM5_SHAPES",
    "MEASUREMENT_KEYS",
    "SHAPE_SETS",
    "ShapesFromSettings",
    "SweepEvent",
    "SweepResult",
    "SweepSettings",
    "parse_shapes",
    "profiled_worker",
    "read_rows",
    "run_sweep",
    "take_fingerprint",
]

GLM5_SHAPES: tuple[tuple[int, int, int], ...] = tuple(
    (m, n, k) for m in (16, 64, 256, 512, 1024, 4096) for (n, k) in ((768, 6144), (2048, 6144))
)
"""GLM-5's dense projections: M (tokens) in 16..4096 against (N, K) = (768, 6144) and (2048, 6144)."""

SHAPE_SETS: dict[str, tuple[tuple[int, int, int], ...]] = {"glm5": GLM5_SHAPES}

MEASUREMENTS_FILE = "measurements.jsonl"


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``glm5`` or ``MxNxK,MxNxK,...`` into (M, N, K) tuples; BadInputError says what is wrong."""
    text = (text or "").strip()
    if text.lower() in SHAPE_SETS:
        return list(SHAPE_SETS[text.lower()])
    shapes = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        if item.lower() in SHAPE_SETS:
            shapes.extend(SHAPE_SETS[item.lower()])
            continue
        parts = item.lower().split("x")
        try:
            m, n, k = (int(p) for p in parts)
        except ValueError:
            raise BadInputError(
                f"shape {item!r} is not MxNxK",
                f"write shapes like 1024x2048x6144, or one of {', '.join(SHAPE_SETS)}",
            ) from None
        if min(m, n, k) <= 0:
            raise BadInputError(f"shape {item!r} has a non-positive dimension", "M, N and K must be >= 1")
        shapes.append((m, n, k))
    if not shapes:
        raise BadInputError("no shapes given", f"use --shapes {' | '.join(SHAPE_SETS)} or MxNxK,...")
    return shapes


@dataclass
class SweepSettings(Options):
    """What ``tracekit bench gemm`` runs (a :class:`~tracekit.collectors.harness.SweepPlan`); saved as the run
    manifest's ``capture``."""

    backends: list[str]
    shapes: list[tuple[int, int, int]]

    tool: str = field(default="tracekit bench gemm", init=False, repr=False)
    measurements_file: str = field(default=MEASUREMENTS_FILE, init=False, repr=False)
    measurement_keys: tuple[str, ...] = field(default=MEASUREMENT_KEYS, init=False, repr=False)
    side_files: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict, init=False, repr=False)

    def manifest(self) -> dict[str, Any]:
        return {
            "backends": list(self.backends),
            "shapes": [f"{m}x{n}x{k}" for m, n, k in self.shapes],
            **self.options(),
            "tool": self.tool,
        }

    @property
    def cases(self) -> list[Case]:
        return list(self.shapes)

    def case_of(self, row: dict[str, Any]) -> tuple[Any, ...]:
        return (row.get("m"), row.get("n"), row.get("k"))

    def worker_cmd(self, backend: str, cases: Iterable[Case], out: Path) -> list[str]:
        shapes = ",".join(f"{m}x{n}x{k}" for m, n, k in cases)
        return self.worker_cmd_for("tracekit.collectors.worker", backend, ["--shapes", shapes], out)

    def prepare_run(self, run: Run) -> None:
        """Nothing: the shapes travel on the worker's command line."""


@dataclass
class ShapesFromSettings(SweepSettings):
    """``tracekit bench gemm --shapes-from RUN``: each backend measured at its own shapes (those of the dtype it
    runs, and of the what-ifs it stands for), and the plan saved in the run manifest's ``capture.shapes_from``
    (the source run's link, the run's calls and kernel time per call: tracekit.analyzers.recommend)."""

    per_backend: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)

    def manifest(self) -> dict[str, Any]:
        return {**super().manifest(), "shapes_from": self.plan}

    def cases_for(self, backend: str) -> list[Case]:
        """The shapes ``backend`` runs at (every shape when the plan does not name it)."""
        return list(self.per_backend.get(backend, self.shapes))


def read_rows(run: Run) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The measurement and failure rows of a bench run (for ``--json`` and tests)."""

    def load(name: str) -> list[dict[str, Any]]:
        p = run.raw_dir / name
        if not p.exists():
            return []
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]

    return load(MEASUREMENTS_FILE), load(FAILURES_FILE)
