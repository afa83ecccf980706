"""The report's sections as blocks: environment, GEMM table, waterfalls, Nsight Compute findings, failures
(grouped when summarised), grouped MoE launches and ranks. Each takes the report dict and a :class:`Detail`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..analysis.sections import FailureGroup, MoeSummary, RankSummary, first_line
from ..summary import crash_evidence
from .gather import _LIBS
from .model import (
    Bullets,
    Code,
    Detail,
    Details,
    Heading,
    Inline,
    Para,
    Table,
    _cut,
    _fmt,
    _shape,
)
from .text import _clean, _one_line, md_text


def _moe_blocks(moe: MoeSummary | None, d: Detail) -> tuple[list[Any], list[str]]:
    """The Markdown section on grouped / MoE launches: launches, the focus launch's expert histogram, the what-if."""
    from ..moe import PER_EXPERT_NOTE

    if moe is None or not moe.launches:
        return [], []
    notes: list[str] = []
    blocks: list[Any] = [Heading(3, [("t", "Mixture of experts: grouped GEMMs per expert")])]
    blocks.append(Para([("t", md_text(PER_EXPERT_NOTE))]))
    launches = moe.launches
    shown = launches
    if d.gemm_rows is not None and len(launches) > d.gemm_rows:
        shown = sorted(launches, key=lambda r: -(r.time_ns or 0.0))[: d.gemm_rows]
        notes.append(f"MoE table: the {len(shown)} of {len(launches)} launches with the most time")
    rows = []
    for r in shown:
        hot = (
            f"e{r.hot_expert}: {_fmt(r.hot_rows_share_pct)}% rows, {_fmt(r.hot_time_share_pct)}% "
            f"time, {_fmt(r.hot_vs_median)}× median"
            if r.hot_expert is not None
            else "–"
        )
        rows.append(
            [
                [("c", _one_line(r.backend or "?", d.cell_chars))],
                [("t", md_text(r.route or "–"))],
                [("t", str(r.tokens if r.tokens is not None else "–"))],
                [("t", f"{r.active}/{r.experts}")],
                [("t", _fmt((r.time_ns or 0) / 1e3 if r.time_ns else None))],
                [("t", _fmt(r.tflops))],
                [("t", _fmt(r.pct_of_peak, 2))],
                [("t", _fmt(r.pct_of_roofline))],
                [("t", _fmt(r.padding_waste_pct))],
                [("t", md_text(hot))],
                [("t", md_text(r.verdict or "–", d.cell_chars))],
            ]
        )
    blocks.append(
        Table(
            [
                "backend",
                "route",
                "tokens",
                "active/E",
                "µs",
                "TFLOP/s",
                "% peak",
                "% roofline",
                "padding %",
                "hot expert",
                "verdict",
            ],
            rows,
            ["l", "l", "r", "r", "r", "r", "r", "r", "r", "l", "l"],
        )
    )
    focus = next((r for r in launches if r.launch_id == moe.focus_launch), None)
    if focus is not None and moe.histogram:
        title = f"Expert histogram: {focus.backend} {focus.route or ''} tokens={focus.tokens}"
        blocks.append(Heading(4, [("t", md_text(title))]))
        hrows = []
        for b in moe.histogram:
            bar = "█" * max(1, round((b.time_share_pct or 0) / 5)) if b.time_share_pct else ""
            hrows.append(
                [
                    [("t", b.rows + (" (hot)" if b.hot else ""))],
                    [("t", str(b.experts))],
                    [("t", _fmt(b.rows_share_pct))],
                    [("t", _fmt(b.time_share_pct))],
                    [("t", bar)],
                    [("t", _fmt(b.median_pct_of_peak, 2))],
                    [("t", str(b.memory_bound))],
                ]
            )
        blocks.append(
            Table(
                ["rows / expert", "experts", "% rows", "% time", "", "median % peak", "memory-bound"],
                hrows,
                ["l", "r", "r", "r", "l", "r", "r"],
            )
        )
    if moe.whatif:
        blocks.append(Heading(4, [("t", "What would reach peak: rows per expert, from the measured curve")]))
        wrows = []
        for w in moe.whatif:
            wrows.append(
                [
                    [("c", _one_line(w.backend or "?", d.cell_chars))],
                    [("t", w.curve or "")],
                    [("t", _fmt(w.target_pct, 0))],
                    [("t", _fmt(w.m_needed))],
                    [("t", md_text(w.how or ""))],
                    [("t", _fmt(w.tokens_per_step))],
                    [("t", _fmt(w.ep_degree))],
                ]
            )
        blocks.append(
            Table(
                [
                    "backend",
                    "curve",
                    "% of peak",
                    "rows/expert",
                    "how",
                    "tokens/step (uniform)",
                    "EP degree (64 tokens/GPU)",
                ],
                wrows,
                ["l", "l", "r", "r", "l", "r", "r"],
            )
        )
    return blocks, notes


def _environment_blocks(rep: dict[str, Any], d: Detail) -> list[Any]:
    r = rep["report"]
    env, cap, run = r["environment"], r["capture"], r["run"]
    cc = d.cell_chars
    gpu = env.get("gpu") or "unknown GPU"
    extra = []
    if env.get("compute_capability"):
        extra.append(f"CC {env['compute_capability']}")
    if env.get("sm_count"):
        extra.append(f"{env['sm_count']} SMs")
    if env.get("gpu_source"):
        extra.append(f"named by {env['gpu_source']}")
    rows: list[list[Inline]] = [
        [[("t", "GPU")], [("t", md_text(gpu, cc) + (f" ({', '.join(extra)})" if extra else ""))]]
    ]
    for dev in env.get("gpus_in_run") or []:
        rows.append(
            [
                [("t", "also in run")],
                [("t", md_text(f"{dev.get('name')} CC {dev.get('compute_capability')}", cc))],
            ]
        )
    for label, key in (
        ("driver", "driver"),
        ("CUDA", "cuda"),
        ("Python", "python"),
        ("platform", "platform"),
    ):
        if env.get(key):
            rows.append([[("t", label)], [("c", str(env[key]))]])
    if env.get("max_sm_clock_hz"):
        rows.append([[("t", "max SM clock")], [("t", f"{env['max_sm_clock_hz'] / 1e6:,.0f} MHz")]])
    if env.get("default_power_limit_w"):
        rows.append([[("t", "power limit")], [("t", f"{env['default_power_limit_w']:,.0f} W")]])
    versions = env.get("versions") or {}
    libs = [k for k in _LIBS if k in versions] + sorted(k for k in versions if k not in _LIBS)
    for lib in libs:
        rows.append([[("t", md_text(lib, cc))], [("c", str(versions[lib]))]])
    if not versions:
        rows.append([[("t", "libraries")], [("t", "not recorded (imported profiles)")]])
    tools = cap.get("tools")
    if tools:
        rows.append([[("t", "capture")], [("t", md_text(", ".join(map(str, tools)), cc))]])
    clock = cap.get("ncu_clock_control")
    if clock:
        meaning = {"none": "kernels ran at the run's own clocks", "base": "ncu locked clocks to base"}.get(
            clock, ""
        )
        rows.append(
            [
                [("t", "ncu clock control")],
                [
                    ("c", str(clock)),
                    ("t", " " + md_text(f"({meaning}; from {cap.get('ncu_clock_control_from')})", cc)),
                ],
            ]
        )
    if cap.get("ncu_sections"):
        rows.append([[("t", "ncu sections")], [("t", md_text(", ".join(map(str, cap["ncu_sections"])), cc))]])
    if cap.get("imported_from"):
        rows.append([[("t", "imported from")], [("t", md_text(", ".join(cap["imported_from"]), cc))]])
    status = run["status"] + (" (partial)" if run.get("partial") else "")
    if run.get("incomplete_reason"):
        status += f": {run['incomplete_reason']}"
    rows.append(
        [[("t", "run")], [("t", md_text(f"{run['name']}, {status}, created {run.get('created')}", cc))]]
    )
    rows.append(
        [
            [("t", "tracekit")],
            [("t", md_text(f"{r['tracekit_version']} (run made by {run.get('tracekit_version')})", cc))],
        ]
    )
    blocks: list[Any] = [Heading(3, [("t", "Environment")]), Table(["", ""], rows, ["l", "l"])]
    repro = r["reproduce"]
    blocks.append(Heading(3, [("t", "Reproduce")]))
    if repro.get("command"):
        blocks.append(Code(repro["command"], "sh"))
    if repro.get("note"):
        blocks.append(Para([("i", md_text(repro["note"], cc))]))
    return blocks


def _findings_table(findings: Sequence[dict[str, Any]], d: Detail) -> Table:
    rows = []
    for f in findings:
        what = " — ".join(x for x in (f.get("title"), f.get("message")) if x)
        rows.append(
            [
                [("t", ", ".join(str(g) for g in f["cases"]))],
                [("c", str(f.get("rule") or "?"))],
                [("t", md_text(f.get("kind") or "", 20))],
                [("t", f"{f['speedup_pct']:.0f}%" if f.get("speedup_pct") is not None else "–")],
                [("t", md_text(what, d.cell_chars))],
            ]
        )
    return Table(["cases #", "rule", "type", "est. speed-up", "finding"], rows, ["r", "l", "l", "r", "l"])


def _crash_parts(f: dict[str, Any]) -> list[str]:
    """A crash's evidence (analyzers/summary.py crash_evidence): one-line items together, then each multi-line
    one (stack, stderr) as its own block, whole."""
    evidence = crash_evidence(f)
    head = [f"{label}: {_one_line(text)}" for label, text in evidence if "\n" not in text]
    blocks = [f"{label}:\n{_clean(text)}" for label, text in evidence if "\n" in text]
    return (["\n".join(head)] if head else []) + blocks


def _failure_text(f: dict[str, Any], d: Detail) -> str:
    parts = [_clean(f.get("message")).rstrip()]
    if f.get("traceback"):
        parts.append(_clean(f["traceback"]).rstrip())
    parts += _crash_parts(f)
    extra = []
    if f.get("device_name"):
        cc = f" (CC {f['compute_capability']})" if f.get("compute_capability") else ""
        extra.append(f"device: {_one_line(f['device_name'])}{cc}")
    if f.get("versions"):
        v = f["versions"]
        extra.append(
            "versions: "
            + (", ".join(f"{k} {v[k]}" for k in sorted(v)) if isinstance(v, dict) else _one_line(v))
        )
    if extra:
        parts.append("\n".join(extra))
    return _cut("\n\n".join(p for p in parts if p), d.detail_chars)


def _summary_text(text: str) -> str:
    return text.replace("@", "@\u2060")


def _failure_blocks(
    failures: list[dict[str, Any]], groups: list[FailureGroup], d: Detail
) -> tuple[list[Any], list[str]]:
    """Every failure in full, or (summarised) the Analysis' failure groups with one full example each."""
    notes: list[str] = []
    if not failures:
        return [], notes
    cc = d.cell_chars
    blocks: list[Any] = [Heading(3, [("t", f"Failures ({len(failures)})")])]
    if d.group_failures:
        notes.append(
            f"{len(failures)} failures grouped into {len(groups)} (same backend, error type and first message line)"
        )
        shown_groups = groups if d.failure_groups is None else groups[: d.failure_groups]
        if len(shown_groups) < len(groups):
            notes.append(f"failure table: the {len(shown_groups)} largest of {len(groups)} failure groups")
        rows = []
        for g in shown_groups:
            shapes = ", ".join(g.shapes[:12]) + (
                f", … ({len(g.shapes)} in all)" if len(g.shapes) > 12 else ""
            )
            rows.append(
                [
                    [("c", str(g.backend))],
                    [("c", str(g.error_type or "?"))],
                    [("c", _one_line(g.first_line, cc))] if g.first_line else [("t", "–")],
                    [("t", md_text(", ".join(g.kinds), 40))],
                    [("t", str(g.count))],
                    [("t", md_text(shapes or "–", cc))],
                ]
            )
        blocks.append(
            Para(
                [
                    (
                        "t",
                        f"{len(failures)} failures in {len(groups)} groups (same backend, error type and first message line); one full example per group.",
                    )
                ]
            )
        )
        blocks.append(
            Table(
                ["backend", "error", "first line", "kind", "count", "shapes (M×N×K)"],
                rows,
                ["l", "l", "l", "l", "r", "l"],
            )
        )
        detail_groups = shown_groups if d.failure_details is None else shown_groups[: d.failure_details]
        if len(detail_groups) < len(groups):
            notes.append(f"full error text for {len(detail_groups)} of {len(groups)} failure groups")
        for g in detail_groups:
            ex = failures[g.example]
            summary = (
                f"{g.backend} {_shape(ex)} — {g.error_type}: {_one_line(g.first_line, 160)} (×{g.count})"
            )
            blocks.append(Details(summary, [Code(_failure_text(ex, d))]))
    else:
        rows = []
        for f in failures:
            rows.append(
                [
                    [("c", str(f.get("backend")))],
                    [("c", str(f["op"]))] if f.get("op") else [("t", "–")],
                    [("t", _shape(f))],
                    [("t", md_text(f.get("kind") or "", 20))],
                    [("c", str(f.get("error_type") or "?"))],
                    [("c", _one_line(first_line(_clean(f.get("message"))), cc))]
                    if first_line(_clean(f.get("message")))
                    else [("t", "–")],
                ]
            )
        blocks.append(
            Table(
                ["backend", "op", "M×N×K", "kind", "error", "first line"],
                rows,
                ["l", "l", "r", "l", "l", "l"],
            )
        )
        for f in failures:
            summary = f"{f.get('backend')} {_shape(f)} — {f.get('error_type')}: {_one_line(first_line(_clean(f.get('message'))), 160)}"
            blocks.append(Details(summary, [Code(_failure_text(f, d))]))
    return blocks, notes


def _rank_blocks(cross: RankSummary | None, d: Detail, notes: list[str]) -> list[Any]:
    """The per-rank section of a multi-rank run (analyzers/ranks/): the rank table, who the others wait for and
    why, and the GEMMs whose time differs most between ranks."""
    if cross is None:
        return []
    cc = d.cell_chars

    def ms(v: Any) -> str:
        return _fmt(v / 1e6 if isinstance(v, int | float) else None, 2)

    blocks: list[Any] = [Heading(3, [("t", "Ranks")])]
    n = len(cross.ranks)
    lead = f"{n} ranks. "
    lead += (
        f"Rank {cross.straggler} is the straggler."
        if cross.straggler is not None
        else "No straggler stands out."
    )
    blocks.append(Para([("t", md_text(lead))]))
    rows = []
    for r in cross.ranks:
        rows.append(
            [
                [("b" if r.straggler else "t", str(r.rank))],
                [("t", "–" if r.pid is None else str(r.pid))],
                [("t", "–" if r.device is None else str(r.device))],
                [("t", md_text(r.gpu or "–", 60))],
                [("t", f"{r.kernels or 0:,}")],
                [("t", ms(r.gemm_ns))],
                [("t", ms(r.comm_ns))],
                [("t", ms(r.compute_ns))],
                [("t", ms(r.idle_ns))],
                [("t", str(r.last_arrivals or 0))],
            ]
        )
    headers = [
        "rank",
        "pid",
        "device",
        "GPU",
        "kernels",
        "GEMM ms",
        "comm ms",
        "compute ms",
        "idle ms",
        "last in",
    ]
    blocks.append(Table(headers, rows, ["r", "r", "r", "l", "r", "r", "r", "r", "r", "r"]))
    blocks.append(
        Para(
            [
                (
                    "t",
                    "Kernel time per rank: compute is kernel time outside collectives, idle the time in its span "
                    "when no kernel ran, last in the collectives it reached last (the others waited inside theirs).",
                )
            ]
        )
    )
    if cross.reasons or cross.notes:
        said = [*(cross.reasons or []), *(cross.notes or [])]
        blocks.append(Bullets([[("t", md_text(x, cc))] for x in said]))
    spread = [g for g in cross.gemm_spread or [] if g.spread_pct is not None]
    if spread:
        shown = spread if d.gemm_rows is None else spread[: d.gemm_rows]
        if len(shown) < len(spread):
            notes.append(f"GEMMs across ranks: the {len(shown)} of {len(spread)} that differ most")
        blocks.append(
            Para([("t", "The same GEMM on every rank (time per launch), largest difference first:")])
        )
        srows = [
            [
                [("c", _one_line(g.gemm, min(cc, 120)))],
                [("t", str(g.ranks))],
                [("t", _fmt(g.min_ns / 1e3, 2))],
                [("t", _fmt(g.max_ns / 1e3, 2))],
                [("t", _fmt(g.spread_pct, 1))],
                [("t", f"{g.slowest_rank} (fastest {g.fastest_rank})")],
                [("t", md_text(g.why or "–", cc))],
            ]
            for g in shown
        ]
        blocks.append(
            Table(
                ["GEMM", "ranks", "min µs", "max µs", "spread %", "slowest rank", "why"],
                srows,
                ["l", "r", "r", "r", "r", "l", "l"],
            )
        )
    for note in cross.notes or []:
        blocks.append(Para([("i", md_text(note, cc))]))
    return blocks
