"""``tracekit devices``: the device catalog, the names ``--device`` takes, and what a GPU name resolves to."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from tracekit.devices import DeviceSpec

PEAK_COLUMNS = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")


def _num(value: float | None, digits: int = 1) -> str:
    """``1,307.4``, ``45.25``, ``2,000``: thousands separated, no trailing zeros, two decimals below 10."""
    if value is None:
        return "–"
    if digits and abs(value) < 10:
        digits = 2
    return f"{value:,.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:,.0f}"


def _peak(dev: DeviceSpec, cls: str) -> str:
    value = dev.peaks_tflops.get(cls)
    if value is None:
        return "–"
    marks = ""
    if "peaks_tflops" in dev.derived or f"peaks_tflops.{cls}" in dev.derived:
        marks += "ᵈ"
    if cls in dev.half_rate:
        marks += "½"
    if "peaks_tflops" in dev.unverified or f"peaks_tflops.{cls}" in dev.unverified:
        marks += "?"
    return _num(value) + marks


def _memory(dev: DeviceSpec) -> str:
    return " / ".join(f"{g:g}" for g in dev.memory_gb) or "–"


def _matches(dev: DeviceSpec, query: str) -> bool:
    from tracekit.devices import normalize_name

    q = normalize_name(query)
    return any(q in normalize_name(s) for s in (dev.key, dev.name, *dev.aliases))


def catalog_markdown() -> str:
    """docs/DEVICES.md, generated from the packaged catalog (tests/core/test_devices.py checks the file equals it)."""
    from tracekit.devices import load_catalog

    archs, devices = load_catalog(packaged_only=True)
    out = [
        "# Device catalog",
        "",
        "Generated from `tracekit/data/devices.json` by `tracekit devices --markdown > docs/DEVICES.md`; do not edit",
        "by hand (tests/core/test_devices.py fails when this file and the JSON disagree).",
        "",
        "Peaks are dense (not 2:4 sparse) TFLOP/s (TOP/s for int8) per input class, at the clock each entry's tensor",
        "peaks are quoted at. fp16/bf16/fp8 are the FP32-accumulate rates. fp32 is the",
        "highest FP32 rate (CUDA cores on NVIDIA, matrix FP32 on AMD), fp64 the highest FP64 rate (tensor or matrix",
        "cores where the part has them). Marks: `ᵈ` derived (computed from the source's other figures, or SM count x",
        "clock x the architecture's per-SM rate: see the entry's sources), `½` half the architecture's per-SM rate",
        "(GeForce FP32 accumulate), `?` no vendor document found (or sources disagree). AMD counts are compute units (CUs);",
        "MI250 / MI250X entries are one GCD, the device software sees. Names are matched as the tools spell them",
        "(`tracekit devices NAME` shows what a name resolves to); a GPU the catalog does not know gets no peak.",
        "",
        "| key | name | arch | SMs | clock MHz | memory GB | GB/s | L2 MiB | smem/block KiB |"
        " " + " | ".join(PEAK_COLUMNS) + " |",
        "|" + "---|" * (9 + len(PEAK_COLUMNS)),
    ]
    for dev in devices.values():
        arch = dev.arch
        clock = dev.peak_clock_hz or dev.boost_clock_hz
        out.append(
            "| "
            + " | ".join(
                [
                    f"`{dev.key}`",
                    dev.name,
                    arch.key if arch else "–",
                    _num(dev.sm_count, 0),
                    _num(clock / 1e6 if clock else None, 0),
                    _memory(dev),
                    _num(
                        dev.memory_bandwidth_bytes_per_s / 1e9 if dev.memory_bandwidth_bytes_per_s else None
                    ),
                    _num(dev.l2_bytes / 2**20 if dev.l2_bytes else None, 0),
                    _num(
                        dev.smem_per_block_optin_bytes / 1024 if dev.smem_per_block_optin_bytes else None, 0
                    ),
                    *(_peak(dev, c) for c in PEAK_COLUMNS),
                ]
            )
            + " |"
        )
    out += ["", "## Sources", ""]
    for dev in devices.values():
        out.append(f"### `{dev.key}`: {dev.name}")
        out.append("")
        aliases = ", ".join(f"`{a}`" for a in dev.aliases)
        out.append(f"- matched names: {aliases or '–'}")
        other = {c: v for c, v in dev.peaks_tflops.items() if c not in PEAK_COLUMNS}
        if other:
            out.append("- other peaks: " + ", ".join(f"{c} {_peak(dev, c)}" for c, v in other.items()))
        for what, text in dev.sources.items():
            out.append(f"- {what}: {text}")
        if dev.derived:
            out.append("- derived: " + ", ".join(dev.derived))
        if dev.unverified:
            out.append("- no vendor document found, or sources disagree: " + ", ".join(dev.unverified))
        for cls, why in dev.rate_exceptions.items():
            out.append(f"- {cls} is not the architecture's per-SM rate: {why}")
        out.append("")
    out += ["## Architectures", ""]
    out.append(
        "| key | name | compute capability | smem/SM KiB | smem/block KiB | per-SM FLOP/clk | source |"
    )
    out.append("|---|---|---|---|---|---|---|")
    for arch in archs.values():
        rates = ", ".join(f"{c} {v:g}" for c, v in arch.flops_per_clock_per_sm.items()) or "–"
        out.append(
            f"| `{arch.key}` | {arch.name} | {arch.compute_capability} | "
            f"{_num(arch.smem_per_sm_bytes / 1024 if arch.smem_per_sm_bytes else None, 0)} | "
            f"{_num(arch.smem_per_block_optin_bytes / 1024 if arch.smem_per_block_optin_bytes else None, 0)} | "
            f"{rates} | {'; '.join(arch.sources.values())} |"
        )
    return "\n".join(out) + "\n"


def _table(found: list[DeviceSpec]) -> None:
    """Plain aligned lines (one GPU each), wide rather than wrapped: keys must stay whole to be copied."""
    head = ("key", "arch", "SMs", "MHz", "GB", "GB/s", *PEAK_COLUMNS)
    rows = []
    for dev in found:
        clock = dev.peak_clock_hz or dev.boost_clock_hz
        rows.append(
            (
                dev.key,
                dev.arch.key if dev.arch else "–",
                _num(dev.sm_count, 0),
                _num(clock / 1e6 if clock else None, 0),
                _memory(dev).replace(" ", ""),
                _num(dev.memory_bandwidth_bytes_per_s / 1e9 if dev.memory_bandwidth_bytes_per_s else None, 0),
                *(_peak(dev, c).replace("ᵈ", "d") for c in PEAK_COLUMNS),
            )
        )
    widths = [max(len(str(r[i])) for r in (head, *rows)) for i in range(len(head))]
    click.echo(f"{len(found)} catalog GPUs; dense TFLOP/s (d derived, ½ half rate, ? unverified)")
    for row in (head, *rows):
        cells = [
            str(c).ljust(w) if i < 2 else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        click.echo("  ".join(cells).rstrip())


@click.command()
@click.argument("query", required=False)
@click.option("--json", "as_json", is_flag=True, help='Print {"devices": [...], "resolved": ...} on stdout.')
@click.option(
    "--markdown", is_flag=True, help="Print the catalog as docs/DEVICES.md (packaged catalog only)."
)
def devices(query: str | None, as_json: bool, markdown: bool) -> None:
    """List the device catalog: the GPUs whose peaks tracekit knows, by key (what --device takes).

    QUERY filters by key, name or alias; a GPU name as the tools spell it ("NVIDIA H100 NVL", "AMD Instinct MI250X
    / MI250") also shows what it resolves to, or why it does not. A GPU the catalog does not know gets no peak:
    give --device KEY to explain, report and view, or add it in a user file (TRACEKIT_DEVICES or
    ~/.config/tracekit/devices.json, the layout of tracekit/data/devices.json).

    \b
    --json: {"devices": [{key, name, vendor, arch, compute_capability, sm_count, boost_clock_hz, peak_clock_hz,
             memory_gb, memory_bandwidth_bytes_per_s, l2_bytes, smem_per_block_optin_bytes, peaks_tflops,
             half_rate, derived, unverified, aliases, sources, ...}],
             "resolved": {"query", "key", "candidates", "reason"} (with QUERY)}

    \b
    Examples:
      tracekit devices                       # the whole catalog
      tracekit devices rtx-40                # keys, names or aliases containing it
      tracekit devices "NVIDIA GeForce RTX 4060 Ti" --json
    """
    from tracekit.devices import catalog, resolve

    if markdown:
        click.echo(catalog_markdown(), nl=False)
        return
    _, all_devices = catalog()
    found = [d for d in all_devices.values() if not query or _matches(d, query)]
    resolved: dict[str, Any] | None = None
    if query:
        res = resolve(query)
        resolved = {
            "query": query,
            "key": res.device.key if res.device else None,
            "candidates": [d.key for d in res.candidates],
            "reason": res.reason,
        }
        extra = [d for d in (res.device, *res.candidates) if d is not None and d not in found]
        found = extra + found
    if as_json:
        click.echo(json.dumps({"devices": [d.to_dict() for d in found], "resolved": resolved}, indent=1))
        return
    if resolved is not None:
        if resolved["key"]:
            click.echo(f"{query!r} resolves to {resolved['key']}")
        elif not found or resolved["candidates"]:
            maybe = f"; it may be {', '.join(resolved['candidates'])}" if resolved["candidates"] else ""
            click.echo(f"{query!r} resolves to no catalog GPU ({resolved['reason']}{maybe})")
    if found:
        _table(found)
    elif query:
        click.echo(
            f"no catalog GPU's key, name or alias contains {query!r}; `tracekit devices` lists them all"
        )
