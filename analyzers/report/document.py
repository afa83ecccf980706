""":func:`document`: the whole report as a list of blocks at one detail level, with notes on what was
summarised."""

from __future__ import annotations

from typing import Any

import msgspec

from ..analysis.model import Analysis
from .breakdown_section import breakdown_blocks
from .cases import case_blocks, cases_table, summary_blocks
from .model import _CUT_MARK, LEVELS, Bullets, Code, Detail, Details, Heading, Image, Para
from .recommend_section import recommendation_blocks
from .sections import _environment_blocks, _failure_blocks, _findings_table, _moe_blocks, _rank_blocks
from .text import _one_line, md_text

_DECODED: list[tuple[dict[str, Any], Analysis]] = []
"""The last report decoded (the writers lay one report out at several detail levels)."""


def analysis_of(rep: dict[str, Any]) -> Analysis:
    """The typed Analysis a report's JSON carries (everything but its ``report`` object), decoded once per report."""
    if _DECODED and _DECODED[0][0] is rep:
        return _DECODED[0][1]
    a = msgspec.convert({k: v for k, v in rep.items() if k != "report"}, Analysis)
    _DECODED[:] = [(rep, a)]
    return a


def document(rep: dict[str, Any], d: Detail = LEVELS[0]) -> tuple[list[Any], list[str]]:
    """The report as blocks under detail level ``d``, and notes on what was summarised: the Analysis' parts are
    rendered typed (:func:`analysis_of`), the ``report`` object (environment, capture, findings) as data."""
    notes: list[str] = []
    a = analysis_of(rep)
    r = rep["report"]
    counts = r["counts"]
    env = r["environment"]
    blocks: list[Any] = [Heading(2, [("t", "tracekit report: "), ("c", _one_line(r["run"]["name"], 120))])]
    lead = (
        f"{counts['gemms']} GEMM cases"
        + (f" ({counts['selected_gemms']} matching {r['gemm_filter']!r})" if r.get("gemm_filter") else "")
        + f", {counts['failures']} failures, {counts['ncu_kernels']} kernels profiled by Nsight Compute, "
        f"{counts['timeline_kernels']} on the timeline; on {env.get('gpu') or 'an unknown GPU'}."
    )
    blocks.append(Para([("t", md_text(lead))]))
    summary_at = len(blocks)
    numbers = {c.id: i for i, c in enumerate(a.cases, 1)}
    blocks += summary_blocks(a.summary, numbers, d)
    blocks += _environment_blocks(rep, d)
    blocks += breakdown_blocks(a.breakdown, d, notes)

    chosen = set(r["selected"])
    selected = [(numbers[c.id], c) for c in a.cases if c.id in chosen]
    blocks.append(Heading(3, [("t", "GEMMs, most time in calls first")]))
    if any(c.timing.achieved_tflops and c.shape for c in a.cases):
        blocks.append(Image("tflops", "TFLOP/s vs M per backend, with peak lines"))
    if selected:
        shown = selected
        if d.gemm_rows is not None and len(selected) > d.gemm_rows:
            shown = selected[: d.gemm_rows]
            notes.append(f"GEMM table: the {len(shown)} of {len(selected)} GEMMs with the most time in calls")
        blocks.append(cases_table(shown, d))
    else:
        blocks.append(
            Para(
                [
                    (
                        "t",
                        "No GEMMs"
                        + (
                            f" match {md_text(repr(r['gemm_filter']))}."
                            if r.get("gemm_filter")
                            else " in this run."
                        ),
                    )
                ]
            )
        )

    blocks += recommendation_blocks(rep, d)
    blocks += _rank_blocks(a.ranks, d, notes)

    cards = set(r["waterfalls"])
    wfs = [(n, c) for n, c in selected if c.id in cards]
    if wfs:
        shown_w = wfs if d.waterfalls is None else wfs[: d.waterfalls]
        if len(shown_w) < len(wfs):
            notes.append(f"waterfalls: {len(shown_w)} of {len(wfs)} GEMMs (most time in calls)")
        if shown_w:
            blocks.append(Heading(3, [("t", "Why each GEMM stops short of peak")]))
            lead_w = (
                "Each factor multiplies the datasheet peak down; their product is the achieved TFLOP/s (sum of "
                "FLOPs / sum of call spans; the kernel rate is FLOPs / GEMM kernel time). The verdict is the "
                "factor that costs the most of the calls' time."
            )
            if len(wfs) < len(selected):
                lead_w += (
                    f" The {len(wfs)} of {len(selected)} GEMMs with the most time in calls (--top N, --all)."
                )
            blocks.append(Para([("t", lead_w)]))
            for n, c in shown_w:
                blocks += case_blocks(c, n, d)

    findings = r["ncu_findings"]
    if findings:
        shown_f = findings if d.findings is None else findings[: d.findings]
        if len(shown_f) < len(findings):
            notes.append(
                f"Nsight Compute findings: {len(shown_f)} of {len(findings)} (largest estimated speed-up)"
            )
        if shown_f:
            blocks.append(Heading(3, [("t", "Nsight Compute findings")]))
            blocks.append(_findings_table(shown_f, d))

    mblocks, mnotes = _moe_blocks(a.moe, d)
    blocks += mblocks
    notes += mnotes
    fblocks, fnotes = _failure_blocks(rep["failures"], a.failure_groups, d)
    blocks += fblocks
    notes += fnotes
    if d.detail_chars is not None and any(
        isinstance(c, Code) and _CUT_MARK in c.text for b in fblocks if isinstance(b, Details) for c in b.body
    ):
        notes.append(f"error texts cut at {d.detail_chars:,} characters")
    if d.cell_chars < LEVELS[0].cell_chars:
        notes.append(f"table cells cut at {d.cell_chars} characters")
    failed_sources = [s for s in r["capture"]["sources"] if s.get("status") == "failed"]
    warnings = r["run"].get("import_warnings") or []
    if failed_sources or warnings:
        items = [
            [("t", md_text(f"{s.get('path')}: {s.get('message')}", d.cell_chars))] for s in failed_sources
        ]
        items += [[("t", md_text(w, d.cell_chars))] for w in warnings[:20]]
        blocks += [Heading(3, [("t", "Import problems")]), Bullets(items)]
    blocks.append(
        Para(
            [
                ("t", f"Made by tracekit {r['tracekit_version']}. Full data: "),
                ("c", "tracekit report RUN --format json"),
                ("t", "; the run itself: "),
                ("c", "tracekit bundle RUN -o run.zip"),
                ("t", "."),
            ]
        )
    )
    if notes:
        blocks.insert(
            summary_at,
            Para(
                [
                    ("b", "Summarised"),
                    (
                        "t",
                        " to fit GitHub's 65,536-character comment limit: " + md_text("; ".join(notes)) + ".",
                    ),
                ]
            ),
        )
    return blocks, notes
