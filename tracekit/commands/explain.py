"""``tracekit explain``: each GEMM's gap to peak as a waterfall of factors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


def _calibration(run: Any, frames: dict, explicit: Path | None) -> tuple[dict | None, str | None]:
    """The calibration profile to use: --calibration, else one the run carries, else the cached one for its GPU."""
    from tracekit.devices import calibration_path, load_calibration

    if explicit is not None:
        return load_calibration(explicit), str(explicit)
    carried = run.raw_dir / "calibration.json"
    if carried.is_file():
        return load_calibration(carried), run.relative(carried)
    names = []
    devices = frames.get("devices")
    if devices is not None and devices.height:
        names += devices["name"].drop_nulls().to_list()[:1]
    gpu = (run.manifest.get("environment") or {}).get("gpu_name")
    if gpu:
        names.append(gpu)
    for name in names:
        cached = calibration_path(name)
        if cached.is_file():
            return load_calibration(cached), str(cached)
    return None, None


@click.command()
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "--gemm", "gemm_filter", default=None, help="Only GEMMs whose range, kernel or backend contain this."
)
@click.option("--json", "as_json", is_flag=True, help='Print {"gemms": [...]} on stdout.')
@click.option(
    "--calibration",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="A profile from `tracekit calibrate` (measured peak shown beside the datasheet's).",
)
def explain(run: Path, gemm_filter: str | None, as_json: bool, calibration: Path | None) -> None:
    """Explain why each GEMM of RUN stops short of peak.

    Each GEMM gets a waterfall: the datasheet peak times clock, wave-quantization, memory-bound, in-kernel,
    auxiliary-kernel and launch-gap factors equals its achieved TFLOP/s. The largest loss is the verdict, with
    what to try and the gain if it were removed. Nsight Compute's own findings are listed beside it.

    \b
    --json: {"gemms": [{range, achieved_tflops, peak_tflops, factors: [{name, value, sentence, evidence}],
             verdict: {factor, cause, sentence, remedy, gain_pct}, ncu_rules, notes, ...}], "calibration": FILE,
             "moe": {launches: [{..., per_expert: [...]}], whatif: [...]} for runs with grouped launches}

    \b
    Examples:
      tracekit explain runs/h200-probe
      tracekit explain runs/h200-probe --gemm M=8192 --json | jq '.gemms[0].verdict'
    """
    from tracekit.analyzers.explain import explain as run_explain
    from tracekit.analyzers.importer import load_frames, open_run

    r = open_run(run)
    frames = load_frames(r)
    cal, cal_source = _calibration(r, frames, calibration)
    waterfalls = run_explain(
        frames, calibration=cal, gemm_filter=gemm_filter, environment=r.manifest.get("environment")
    )
    if as_json:
        out = {"run": str(run), "calibration": cal_source, "gemms": [w.to_dict() for w in waterfalls]}
        from tracekit.analyzers.summary import moe_summary

        moe = moe_summary(frames, r.manifest.get("environment"))
        if moe is not None:  # grouped launches: per-expert rows and the what-if (docs/MOE.md)
            out["moe"] = moe
        click.echo(json.dumps(out, indent=2, default=str, allow_nan=False))
        return
    from tracekit.commands._explain_render import render_waterfalls

    render_waterfalls(waterfalls, cal_source, gemm_filter)
