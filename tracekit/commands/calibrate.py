"""``tracekit calibrate``: measure this GPU's sustained GEMM and copy ceilings into a JSON profile."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tracekit.commands._options import gpu_option, out_option


@click.command()
@out_option("Profile file (default ~/.cache/tracekit/calibration/<gpu>.json).",
            type=click.Path(path_type=Path, dir_okay=False), default=None)  # fmt: skip
@click.option("--dtype", "dtypes", multiple=True, type=click.Choice(["bf16", "fp8", "fp4"]),
              help="GEMM input types to measure (default: all; fp4 is recorded as a failure where unsupported).")  # fmt: skip
@click.option("--size", default=8192, show_default=True, help="M = N = K of the GEMM.")
@click.option("--seconds", default=3.0, show_default=True, help="Sustained-loop length per dtype.")
@gpu_option
@click.option("--json", "as_json", is_flag=True, help="Print the profile as JSON on stdout.")
def calibrate(
    out: Path | None, dtypes: tuple[str, ...], size: int, seconds: float, gpu: int, as_json: bool
) -> None:
    """Measure what this GPU sustains: a large GEMM per dtype (first launches vs the sustained rate, SM clock,
    power and throttle reasons from NVML), and device-to-device copy bandwidth.

    `tracekit explain RUN --calibration FILE` then shows each GEMM against this measured peak beside the
    datasheet's.

    \b
    Examples:
      tracekit calibrate                       # all dtypes, 3 s each
      tracekit calibrate --dtype bf16 --seconds 5 -o h200.json
    """
    from tracekit.collectors.calibrate import DTYPES, save_profile
    from tracekit.collectors.calibrate import calibrate as run
    from tracekit.devices import match_device

    profile = run(
        dtypes=dtypes or DTYPES,
        size=size,
        seconds=seconds,
        device_index=gpu,
        on_event=lambda m: click.echo(f"tracekit: {m}", err=True),
    )
    path = save_profile(profile, out)
    click.echo(f"tracekit: saved {path}", err=True)
    if as_json:
        click.echo(json.dumps(profile, indent=2, default=str))
        return
    dev = profile["device"]
    spec = match_device(dev["name"], dev["compute_capability"], dev["sm_count"])
    from rich.table import Table

    from tracekit.text import make_console

    table = Table(title=f"{dev['name']} ({dev['sm_count']} SMs)", title_justify="left")
    for col in ("dtype", "first TF/s", "sustained TF/s", "datasheet", "% of datasheet", "SM MHz", "power W"):
        table.add_column(col, justify="right" if col != "dtype" else "left")
    for dtype, g in profile["gemm"].items():
        peak = spec.peak_tflops(dtype) if spec else None
        table.add_row(
            dtype,
            f"{g['first_tflops']:.0f}",
            f"{g['sustained_tflops']:.0f}",
            f"{peak:.0f}" if peak else "–",
            f"{100 * g['sustained_tflops'] / peak:.0f}%" if peak else "–",
            f"{g['sm_clock_hz'] / 1e6:.0f}" if g.get("sm_clock_hz") else "–",
            f"{g['power_w']:.0f}" if g.get("power_w") else "–",
        )
    console = make_console()
    console.print(table)
    if profile.get("copy"):
        console.print(f"device-to-device copy: {profile['copy']['bytes_per_s'] / 1e9:.0f} GB/s copied")
    from rich.text import Text

    for f in profile["failures"]:
        console.print(Text.assemble((f["what"], "yellow"), f": {f['error_type']}: {f['message'][:300]}"))
