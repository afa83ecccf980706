""":func:`document`: the whole report as a list of blocks at one detail level, with notes on what was
summarised."""

from __future__ import annotations

from typing import Any

from .breakdown_section import breakdown_blocks
from .model import _CUT_MARK, LEVELS, Bullets, Code, Detail, Details, Heading, Image, Para
from .sections import (
    _environment_blocks,
    _failure_blocks,
    _findings_table,
    _gemm_table,
    _moe_blocks,
    _rank_blocks,
    _waterfall_blocks,
)
from .text import _one_line, md_text


def document(rep: dict[str, Any], d: Detail = LEVELS[0]) -> tuple[list[Any], list[str]]:
    """The report as blocks under detail level ``d``, and notes on what was summarised."""
    notes: list[str] = []
    counts = rep["counts"]
    env = rep["environment"]
    blocks: list[Any] = [Heading(2, [("t", "tracekit report: "), ("c", _one_line(rep["run"]["name"], 120))])]
    lead = (
        f"{counts['gemms']} GEMMs"
        + (f" ({counts['selected_gemms']} matching {rep['gemm_filter']!r})" if rep.get("gemm_filter") else "")
        + f", {counts['failures']} failures, {counts['ncu_kernels']} kernels profiled by Nsight Compute, "
        f"{counts['timeline_kernels']} on the timeline; on {env.get('gpu') or 'an unknown GPU'}."
    )
    blocks.append(Para([("t", md_text(lead))]))
    summary_at = len(blocks)
    blocks += _environment_blocks(rep, d)
    blocks += breakdown_blocks(rep.get("breakdown"), d, notes)

    selected = [g for g in rep["gemms"] if g["selected"]]
    blocks.append(Heading(3, [("t", "GEMMs")]))
    if any(g.get("achieved_tflops") and g.get("m") for g in rep["gemms"]):
        blocks.append(Image("tflops", "TFLOP/s vs M per backend, with peak lines"))
    if selected:
        shown = selected
        if d.gemm_rows is not None and len(selected) > d.gemm_rows:
            top = sorted(selected, key=lambda g: -(g.get("gpu_time_us") or 0.0))[: d.gemm_rows]
            keep = {g["gemm_id"] for g in top}
            shown = [g for g in selected if g["gemm_id"] in keep]
            notes.append(f"GEMM table: the {len(shown)} of {len(selected)} GEMMs with the most GPU time")
        blocks.append(_gemm_table(shown, d))
    else:
        blocks.append(
            Para(
                [
                    (
                        "t",
                        "No GEMMs"
                        + (
                            f" match {md_text(repr(rep['gemm_filter']))}."
                            if rep.get("gemm_filter")
                            else " in this run."
                        ),
                    )
                ]
            )
        )

    blocks += _rank_blocks(rep, d, notes)

    wfs = rep["waterfalls"]
    if wfs:
        shown_w = wfs
        if d.waterfalls is not None and len(wfs) > d.waterfalls:
            by_id = {g["gemm_id"]: g for g in rep["gemms"]}
            top = sorted(wfs, key=lambda w: -(by_id[w["gemm_id"]].get("gpu_time_us") or 0.0))[: d.waterfalls]
            keep = {w["gemm_id"] for w in top}
            shown_w = [w for w in wfs if w["gemm_id"] in keep]
            notes.append(f"waterfalls: {len(shown_w)} of {len(wfs)} GEMMs (most GPU time)")
        if shown_w:
            blocks.append(Heading(3, [("t", "Why each GEMM stops short of peak")]))
            blocks.append(
                Para(
                    [
                        (
                            "t",
                            "Each factor multiplies the datasheet peak down; their product is the achieved TFLOP/s. The largest loss is the verdict.",
                        )
                    ]
                )
            )
            for w in shown_w:
                blocks += _waterfall_blocks(w, d, w["gemm_id"])

    findings = rep["ncu_findings"]
    if findings:
        shown_f = findings if d.findings is None else findings[: d.findings]
        if len(shown_f) < len(findings):
            notes.append(
                f"Nsight Compute findings: {len(shown_f)} of {len(findings)} (largest estimated speed-up)"
            )
        if shown_f:
            blocks.append(Heading(3, [("t", "Nsight Compute findings")]))
            blocks.append(_findings_table(shown_f, d))

    mblocks, mnotes = _moe_blocks(rep.get("moe"), d)
    blocks += mblocks
    notes += mnotes
    fblocks, fnotes = _failure_blocks(rep, d)
    blocks += fblocks
    notes += fnotes
    if d.detail_chars is not None and any(
        isinstance(c, Code) and _CUT_MARK in c.text for b in fblocks if isinstance(b, Details) for c in b.body
    ):
        notes.append(f"error texts cut at {d.detail_chars:,} characters")
    if d.cell_chars < LEVELS[0].cell_chars:
        notes.append(f"table cells cut at {d.cell_chars} characters")
    failed_sources = [s for s in rep["capture"]["sources"] if s.get("status") == "failed"]
    warnings = rep["run"].get("import_warnings") or []
    if failed_sources or warnings:
        items = [
            [("t", md_text(f"{s.get('path')}: {s.get('message')}", d.cell_chars))] for s in failed_sources
        ]
        items += [[("t", md_text(w, d.cell_chars))] for w in warnings[:20]]
        blocks += [Heading(3, [("t", "Import problems")]), Bullets(items)]
    blocks.append(
        Para(
            [
                ("t", f"Made by tracekit {rep['tracekit_version']}. Full data: "),
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
