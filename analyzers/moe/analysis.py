""":func:`analyze_moe`: launches, experts and the what-if of a run together in a :class:`MoeAnalysis`, and
:func:`moe_json` for ``show --json`` and reports."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.frames import SPECS
from tracekit.records import Environment

from ..gemm import device_from_frames
from .experts import _analyze_launch
from .launches import DEFAULT_EP_BATCH, DEFAULT_TARGETS, launch_cases
from .what_if import _curves, _whatif_rows


@dataclass
class MoeAnalysis:
    """What :func:`analyze_moe` found: the three frames (schemas in tracekit/frames.py)."""

    launches: pl.DataFrame
    experts: pl.DataFrame
    whatif: pl.DataFrame

    @property
    def empty(self) -> bool:
        return self.launches.height == 0


# --- all together ---------------------------------------------------------------------------------------------------
def analyze_moe(
    frames: dict[str, pl.DataFrame],
    *,
    environment: Environment | dict[str, Any] | None = None,
    targets: tuple[float, ...] = DEFAULT_TARGETS,
    ep_batch: float = DEFAULT_EP_BATCH,
) -> MoeAnalysis:
    """The MoE frames of a run (empty frames when it holds no grouped launch)."""
    launches = launch_cases(frames, environment)
    lrows, erows = [], []
    for i, launch in enumerate(launches):
        lr, er = _analyze_launch(i, launch)
        lrows.append(lr)
        erows.extend(er)
    device = device_from_frames(frames, environment)
    wrows = _whatif_rows(_curves(frames, launches, device), targets, ep_batch)

    def frame(name: str, rows: list[dict[str, Any]]) -> pl.DataFrame:
        spec = SPECS[name]
        return spec.conform(pl.DataFrame(rows, infer_schema_length=None)) if rows else spec.empty()

    return MoeAnalysis(frame("moe_launches", lrows), frame("moe_experts", erows), frame("moe_whatif", wrows))


def moe_json(analysis: MoeAnalysis, experts: bool = True) -> dict[str, Any]:
    """The ``moe`` object of ``show --json`` / ``explain --json``: launches, each with its per-expert rows (key
    ``per_expert``), and the
    what-if rows."""

    def records(df: pl.DataFrame) -> list[dict[str, Any]]:
        return json.loads(df.write_json()) if df.height else []

    launches = records(analysis.launches)
    if experts:
        by_launch: dict[int, list[dict[str, Any]]] = {}
        for r in records(analysis.experts):
            by_launch.setdefault(r["launch_id"], []).append(r)
        for launch in launches:
            launch["per_expert"] = by_launch.get(launch["launch_id"], [])
    return {"launches": launches, "whatif": records(analysis.whatif)}
