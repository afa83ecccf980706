"""``tracekit explain``: each GEMM's gap to peak as a waterfall of factors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tracekit.records import gpu_of

DEVICE_HELP = (
    "The GPU the run was captured on, by catalog key or alias (case-insensitive): rtx-pro-6000, rtx-5090, b200, "
    "h200, ... Sets the peaks where the files name no GPU (Nsight Compute CSV exports give only the compute "
    "capability); where they name another GPU, this one is used and the output says so."
)


def device_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--device NAME`` for explain, report and view."""
    return click.option("--device", "device_name", default=None, metavar="NAME", help=DEVICE_HELP)(f)


def resolve_device(name: str | None) -> Any:
    """The catalog DeviceSpec of ``--device`` (None without it); an unknown name is bad input (exit 2) with the
    closest catalog names."""
    if name is None:
        return None
    from tracekit.devices import lookup_device

    return lookup_device(name)


def device_notes(frames: dict, environment: dict | None, device: Any) -> list[str]:
    """One line each: the GPU ``--device`` replaced (when the run names another), or, without ``--device``,
    the catalog GPUs a run that names no GPU but a compute capability may have run on."""
    from tracekit.devices import candidates_line

    named = _named_gpus(frames, environment)
    if device is not None:
        others = sorted(n for n in named if _catalog_key(n) != device.key)
        if others:
            return [f"--device {device.key}: the run names {', '.join(others)}; using {device.name} as asked"]
        return []
    if named:
        return []
    capabilities: set[str] = set()
    for frame in ("ncu", "devices"):
        df = frames.get(frame)
        if df is not None and df.height and "compute_capability" in df.columns:
            capabilities.update(df["compute_capability"].drop_nulls().unique().to_list())
    lines = [candidates_line(cc) for cc in sorted(capabilities)]
    return [line for line in lines if line]


def _named_gpus(frames: dict, environment: dict | None) -> set[str]:
    """Every GPU name the run's files and environment give."""
    names: set[str] = set()
    for frame in ("devices", "ncu"):
        df = frames.get(frame)
        col = "name" if frame == "devices" else "device_name"
        if df is not None and df.height and col in df.columns:
            names.update(df[col].drop_nulls().unique().to_list())
    name = gpu_of(environment).name
    if name:
        names.add(name)
    return names


def _catalog_key(name: str) -> str | None:
    """The catalog key a GPU name matches, None when it matches none."""
    from tracekit.devices import match_device

    dev = match_device(name)
    return dev.key if dev is not None and dev.provenance not in ("derived", "unknown") else None


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
@device_option
def explain(
    run: Path, gemm_filter: str | None, as_json: bool, calibration: Path | None, device_name: str | None
) -> None:
    """Explain why each GEMM of RUN stops short of peak.

    Each GEMM gets a waterfall: the datasheet peak times clock, wave-quantization, memory-bound, in-kernel,
    auxiliary-kernel and launch-gap factors equals its achieved TFLOP/s. The largest loss is the verdict, with
    what to try and the gain if it were removed. Nsight Compute's own findings are listed beside it.

    \b
    --json: {"gemms": [{range, achieved_tflops, peak_tflops, factors: [{name, value, sentence, evidence}],
             verdict: {factor, cause, sentence, remedy, gain_pct}, ncu_rules, notes, ...}], "calibration": FILE,
             "moe": {launches: [{..., per_expert: [...]}], whatif: [...]} for runs with grouped launches}

    A run whose files name only the compute capability (Nsight Compute CSV exports) gets a line naming the
    catalog GPUs it may be; --device NAME picks one and sets the peaks.

    \b
    Examples:
      tracekit explain runs/h200-probe
      tracekit explain runs/h200-probe --gemm M=8192 --json | jq '.gemms[0].verdict'
      tracekit import kernel_*_ncu.details.csv -o runs/rtx && tracekit explain runs/rtx --device rtx-pro-6000
    """
    from tracekit.analyzers.explain import explain as run_explain
    from tracekit.analyzers.store import load_frames, open_run
    from tracekit.devices import find_calibration

    device = resolve_device(device_name)  # a bad name fails before the run is read
    r = open_run(run)
    frames = load_frames(r)
    cal, cal_source = find_calibration(r, frames, calibration)
    env = r.manifest.get("environment")
    waterfalls = run_explain(frames, calibration=cal, gemm_filter=gemm_filter, environment=env, device=device)
    notes = device_notes(frames, env, device)
    for line in notes:  # stdout carries only data
        click.echo(line, err=True)
    if as_json:
        gemms = []
        for w in waterfalls:
            d = w.to_dict()
            d.setdefault("device_key", w.case.device.key if w.case.device else None)
            gemms.append(d)
        out = {"run": str(run), "calibration": cal_source, "gemms": gemms}
        if device is not None:
            out["device"] = {"key": device.key, "name": device.name, "source": "--device"}
        if notes:
            out["device_notes"] = notes
        from tracekit.analyzers.summary import moe_summary

        moe = moe_summary(frames, r.manifest.get("environment"))
        if moe is not None:  # grouped launches: per-expert rows and the what-if (docs/MOE.md)
            out["moe"] = moe
        click.echo(json.dumps(out, indent=2, default=str, allow_nan=False))
        return
    from tracekit.commands._explain_render import render_waterfalls

    render_waterfalls(waterfalls, cal_source, gemm_filter)
