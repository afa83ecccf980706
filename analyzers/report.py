"""Reports for kernel tickets: one run as GitHub-flavoured Markdown, JSON, or one self-contained HTML file.

:func:`build_report` gathers everything a maintainer needs into one JSON-able dict (environment, capture
settings, the command that reproduces the capture, every GEMM with its waterfall and verdict, Nsight Compute's
findings, every failure in full). :func:`document` lays that out as a list of blocks (headings, tables, code,
collapsible details, plots) under a :class:`Detail` level; :func:`render_markdown` and :func:`render_html` write
the same blocks out. Markdown must fit a GitHub comment (65,536 characters): it is summarised level by level (failures
grouped by backend + error type + first message line, then the top GEMMs by GPU time, fewer waterfalls, shorter
texts) and says what it left out; a table is never cut mid-row. JSON and HTML are never summarised.

Everything from the run is data, not markup: kernel names, ranges and error texts are escaped for Markdown
(``|``, backticks, ``<``, emphasis, ``$`` math, ``@`` mentions) and HTML, and multi-line texts go in fenced blocks
whose fence is longer than any backtick run inside, so a traceback cannot break out of its ``<details>``.
"""

from __future__ import annotations

import html
import json
import re
import shlex
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from tracekit import __version__
from tracekit.devices import DeviceSpec
from tracekit.run import Run

from . import plots as P

__all__ = [
    "GITHUB_COMMENT_LIMIT",
    "LEVELS",
    "Detail",
    "Rendered",
    "build_report",
    "document",
    "md_code",
    "md_text",
    "render_html",
    "render_markdown",
    "reproduce_command",
    "write_report",
]

GITHUB_COMMENT_LIMIT = 65_536
"""GitHub's limit on an issue comment or body, in characters."""
REPORT_FORMAT = "tracekit-report"
REPORT_VERSION = 1
_LIBS = (
    "torch",
    "flashinfer-python",
    "flashinfer-cubin",
    "sgl-kernel",
    "triton",
    "nvidia-cublas",
    "nvidia-cublas-cu12",
    "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
)
_CTRL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


# --- escaping --------------------------------------------------------------------------------------------------------
def _clean(text: Any) -> str:
    """Text with control characters (ANSI escapes included) made visible; newlines kept."""
    s = "" if text is None else str(text)
    s = s.replace("\r\n", "\n").replace("\r", "\n")
    return _CTRL.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


def _one_line(text: Any, limit: int | None = None) -> str:
    s = " ".join(_clean(text).split())
    if limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    return s


_MD_ESCAPES = {c: "\\" + c for c in "\\`*_[]|~$#!{}"}
_MD_ESCAPES.update({"<": "&lt;", ">": "&gt;", "&": "&amp;", "@": "@\u2060"})
_MD_TABLE = str.maketrans(_MD_ESCAPES)


def md_text(text: Any, limit: int | None = None) -> str:
    """One line of data as Markdown text: emphasis, code, links, tables, math, HTML and @mentions neutralised
    (a word joiner after ``@`` keeps GitHub from notifying anyone)."""
    return _one_line(text, limit).translate(_MD_TABLE)


def md_code(text: Any, limit: int | None = None, *, in_table: bool = True) -> str:
    """One line of data as a Markdown code span, with a fence longer than any backtick run in it."""
    s = _one_line(text, limit)
    if not s:
        return ""
    if in_table:
        s = s.replace("|", "\\|")
    run = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (run + 1)
    pad = " " if s.startswith(("`", " ")) or s.endswith(("`", " ")) or run else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _fence(text: str) -> str:
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, run + 1)


def _html_attr_safe(text: str) -> str:
    return html.escape(text, quote=True)


# --- the report as data -----------------------------------------------------------------------------------------------
def _f(value: Any) -> float | None:
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def _environment(run: Run, frames: dict[str, pl.DataFrame]) -> dict[str, Any]:
    from .summary import devices

    env = run.manifest.get("environment") or {}
    gpu_env = env.get("gpu") if isinstance(env.get("gpu"), dict) else env
    devs = devices(frames, run)
    dev = devs[0] if devs else {}
    versions = {k: v for k, v in (env.get("versions") or {}).items() if v}
    versions_source = "run.json" if versions else None
    if not versions and frames["failures"].height:
        for text in frames["failures"]["versions"].drop_nulls().to_list():
            try:
                found = json.loads(text)
            except ValueError:
                continue
            if isinstance(found, dict) and found:
                versions = {str(k): str(v) for k, v in found.items() if v}
                versions_source = "failure records"
                break
    return {
        "gpu": gpu_env.get("gpu_name") or gpu_env.get("name") or dev.get("name"),
        "compute_capability": gpu_env.get("compute_capability") or dev.get("compute_capability"),
        "sm_count": gpu_env.get("sm_count") or dev.get("sm_count"),
        "gpus_in_run": devs if len(devs) > 1 else None,
        "driver": env.get("driver"),
        "cuda": env.get("cuda_runtime") or env.get("cuda"),
        "max_sm_clock_hz": env.get("max_sm_clock_hz"),
        "default_power_limit_w": env.get("default_power_limit_w"),
        "versions": versions,
        "versions_source": versions_source,
        "python": env.get("python"),
        "platform": env.get("platform"),
    }


def _capture(run: Run, frames: dict[str, pl.DataFrame]) -> dict[str, Any]:
    cap = run.manifest.get("capture") or {}
    ncu = cap.get("ncu") if isinstance(cap.get("ncu"), dict) else {}
    clock = ncu.get("clock_control")
    clock_from = "capture settings" if clock else None
    if not clock and frames["ncu"].height:
        seen = sorted(frames["ncu"]["clock_control"].drop_nulls().unique().to_list())
        if seen:
            clock, clock_from = ", ".join(seen), "the Nsight Compute report"
    passes = [
        {"tool": p.get("tool"), "argv": p.get("argv"), "status": p.get("status"), "reason": p.get("reason")}
        for p in cap.get("passes") or []
        if isinstance(p, dict)
    ]
    imported = [Path(str(p)).name for p in cap.get("imported_from") or []]
    return {
        "tools": cap.get("tools"),
        "instrument": cap.get("instrument"),
        "ncu_clock_control": clock,
        "ncu_clock_control_from": clock_from,
        "ncu_sections": ncu.get("sections"),
        "ncu_nvtx_include": ncu.get("nvtx_include"),
        "ncu_max_per_range": ncu.get("max_per_range"),
        "passes": passes,
        "imported_from": imported or None,
        "sources": [
            {k: s.get(k) for k in ("path", "kind", "status", "message")}
            for s in run.manifest.get("sources") or []
            if isinstance(s, dict)
        ],
    }


def reproduce_command(manifest: dict[str, Any]) -> dict[str, Any]:
    """The shell command that reproduces a run's capture, and a note on how sure that is."""
    cmd = manifest.get("command")
    cap = manifest.get("capture") or {}
    cmd = [str(c) for c in cmd] if isinstance(cmd, list) else None
    tools = cap.get("tools") or []
    bench = None
    if (
        cmd
        and "bench" in cmd
        and any(c == "tracekit" or c.endswith("/tracekit") for c in cmd[: cmd.index("bench")])
    ):
        bench = ["tracekit", *cmd[cmd.index("bench") :]]  # `python3 -m tracekit bench ...` as the CLI
    if cmd and tools:  # captured under ncu / nsys / the profiler: the capture is what reproduces it
        flags = []
        for tool, flag in (("ncu", "--ncu"), ("nsys", "--nsys"), ("torch", "--torch-profiler")):
            if tool in tools:
                flags.append(flag)
        ncu = cap.get("ncu") if isinstance(cap.get("ncu"), dict) else {}
        if "ncu" in tools and ncu.get("clock_control"):
            flags += ["--clock-control", str(ncu["clock_control"])]
        if cap.get("instrument"):
            flags.append("--instrument")
        note = f"run from {cap.get('cwd')}" if cap.get("cwd") else None
        if bench:
            note = (
                "tracekit's own benchmark under "
                + " and ".join(t for t in tools if t != "plain")
                + (f"; {note}" if note else "")
            )
        return {"command": shlex.join(["tracekit", "capture", *flags, "--", *(bench or cmd)]), "note": note}
    if bench:
        return {"command": shlex.join(bench), "note": "tracekit's own benchmark"}
    if cmd:
        return {"command": shlex.join(cmd), "note": "the command recorded in run.json"}
    imported = [Path(str(p)).name for p in cap.get("imported_from") or []]
    if imported:
        return {
            "command": shlex.join(["tracekit", "import", *imported, "-o", "RUN"]),
            "note": "imported from existing profiles: the command that captured them was not recorded",
        }
    return {"command": None, "note": "no capture command was recorded"}


def _measurement_extras(frames: dict[str, pl.DataFrame]) -> dict[int, dict[str, Any]]:
    meas = frames["measurements"]
    if not meas.height:
        return {}
    cols = [
        "measurement_id",
        "time_us",
        "time_us_p10",
        "time_us_p90",
        "repeats",
        "status",
        "rel_error",
        "timing",
    ]
    return {r["measurement_id"]: r for r in meas.select(cols).iter_rows(named=True)}


def _matches(row: dict[str, Any], pattern: str | None) -> bool:
    if not pattern:
        return True
    p = pattern.lower()
    return any(p in str(row.get(k) or "").lower() for k in ("range", "context", "main_kernel", "backend"))


_NCU_LINK = re.compile(r"@(section|url):([^:@]*):([^@]*)@")


def ncu_text(text: Any) -> str | None:
    """ncu's own link markup (``@section:Id:Title@``, ``@url:Title:https://...@``) as plain words."""
    if text is None:
        return None

    def sub(m: re.Match[str]) -> str:
        if m.group(1) == "url":
            return f"{m.group(2)} ({m.group(3)})"
        # ncu writes both "see @section:X:Title@" and "the @section:X:Title@ section"
        said = m.string[m.end() :].lstrip().lower().startswith("section")
        return m.group(3) if said else f"{m.group(3)} section"

    return _NCU_LINK.sub(sub, str(text))


def ncu_noise(kind: Any, message: Any) -> bool:
    """True for ncu rule results that say nothing about the kernel: ``OK`` results and notes that an optional
    metric could not be found (tooling noise; the report and the terminal UI leave them out)."""
    return str(kind or "").upper() in ("OK", "") or str(message or "").startswith("The optional metric")


def _ncu_findings(waterfalls: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """ncu's findings for the selected GEMMs, one entry per distinct finding with the GEMMs it was made for;
    its notes about optional metrics it could not find are tooling noise, left out."""
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    for wf in waterfalls:
        for r in wf.get("ncu_rules") or []:
            message = ncu_text(r.get("message"))
            if ncu_noise(r.get("kind"), message) or not (r.get("title") or message):
                continue
            key = (r.get("rule"), r.get("title"), message)
            entry = found.get(key)
            if entry is None:
                entry = found[key] = {
                    "rule": r.get("rule"),
                    "kind": r.get("kind"),
                    "title": r.get("title"),
                    "message": message,
                    "speedup_pct": None,
                    "gemm_ids": [],
                }
            if wf["gemm_id"] not in entry["gemm_ids"]:
                entry["gemm_ids"].append(wf["gemm_id"])
            sp = _f(r.get("speedup_pct"))
            if sp is not None and (entry["speedup_pct"] is None or sp > entry["speedup_pct"]):
                entry["speedup_pct"] = sp
    return sorted(found.values(), key=lambda f: (-(f["speedup_pct"] or -1.0), f["gemm_ids"][0]))


def _first_line(text: Any) -> str:
    for line in _clean(text).split("\n"):
        if line.strip():
            return line.strip()
    return ""


def _failures(frames: dict[str, pl.DataFrame]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows = []
    for r in frames["failures"].iter_rows(named=True):
        versions = None
        if r.get("versions"):
            try:
                versions = json.loads(r["versions"])
            except ValueError:
                versions = r["versions"]
        rows.append({**r, "versions": versions, "first_line": _first_line(r.get("message"))})
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for i, r in enumerate(rows):
        key = (r.get("backend"), r.get("error_type"), r["first_line"])
        g = groups.get(key)
        if g is None:
            g = groups[key] = {
                "backend": r.get("backend"),
                "op": r.get("op"),
                "error_type": r.get("error_type"),
                "first_line": r["first_line"],
                "kinds": [],
                "count": 0,
                "shapes": [],
                "failure_ids": [],
                "example": i,
            }
        g["count"] += 1
        g["failure_ids"].append(r.get("failure_id"))
        if r.get("kind") and r["kind"] not in g["kinds"]:
            g["kinds"].append(r["kind"])
        if r.get("m") is not None:
            g["shapes"].append(f"{r['m']}x{r['n']}x{r['k']}")
    ordered = sorted(groups.values(), key=lambda g: (-g["count"], str(g["backend"]), str(g["error_type"])))
    return rows, ordered


def build_report(
    run: Run,
    frames: dict[str, pl.DataFrame],
    *,
    gemm_filter: str | None = None,
    calibration: dict[str, Any] | None = None,
    calibration_source: str | None = None,
    device: DeviceSpec | None = None,
) -> dict[str, Any]:
    """Everything a report shows, as one JSON-able dict (the ``--format json`` output); ``device`` overrides the
    GPU the files name (``--device``)."""
    from .explain import explain_case
    from .gemm import build_cases

    env = run.manifest.get("environment") or {}
    cases = build_cases(frames, calibration=calibration, environment=env, device=device)
    extras = _measurement_extras(frames)
    gemms: list[dict[str, Any]] = []
    waterfalls: list[dict[str, Any]] = []
    for i, case in enumerate(cases):
        wf = explain_case(case).to_dict()
        m = extras.get(case.measurement_id) if case.measurement_id is not None else None
        total_ns = case.total_ns
        time_us = _f(m["time_us"]) if m else (total_ns / 1e3 if total_ns else None)
        verdict = wf.get("verdict") or {}
        row = {
            "gemm_id": i,
            "range": case.name,
            "context": case.context,
            "origin": case.origin,
            "backend": case.backend,
            "op": case.op,
            "m": case.m,
            "n": case.n,
            "k": case.k,
            "dtype": case.dtype_a,
            "dtype_out": case.dtype_out,
            "scale": case.scale,
            "dtype_class": case.dtype_class,
            "dtype_source": case.dtype_source,
            "flops": _f(case.flops),
            "flops_source": case.flops_source,
            "launches": case.launches,
            "main_kernel": case.main_kernel,
            "time_us": time_us,
            "time_us_p10": _f(m["time_us_p10"]) if m else None,
            "time_us_p90": _f(m["time_us_p90"]) if m else None,
            "repeats": m["repeats"] if m else None,
            "status": m["status"] if m else None,
            "rel_error": _f(m["rel_error"]) if m else None,
            "achieved_tflops": _f(wf.get("achieved_tflops")),
            "kernel_tflops": _f(wf.get("kernel_tflops")),
            "peak_tflops": _f(wf.get("peak_tflops")),
            "peak_source": wf.get("peak_source"),
            "pct_of_peak": _f(wf.get("pct_of_peak")),
            "sm_clock_hz": _f(case.sm_clock_hz),
            "clock_source": case.clock_source,
            "power_w": _f(case.power_w),
            "power_limit_w": _f(case.power_limit_w),
            "verdict": verdict.get("factor"),
            "verdict_cause": verdict.get("cause"),
            "verdict_gain_pct": _f(verdict.get("gain_pct")),
            "gpu_time_us": time_us * max(case.launches, 1) if time_us else None,
        }
        row["selected"] = _matches(row, gemm_filter)
        gemms.append(row)
        if row["selected"]:
            waterfalls.append({"gemm_id": i, **wf})
    findings = _ncu_findings(waterfalls)
    failures, groups = _failures(frames)
    selected = [g for g in gemms if g["selected"]]
    from .ranks import analyze_ranks

    cross = analyze_ranks(frames, environment=env, calibration=calibration)
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "tracekit_version": __version__,
        "run": {
            "name": run.name,
            "bundle": (run.manifest.get("bundle") or {}).get("opened_from"),
            "status": run.status,
            "partial": bool(run.manifest.get("partial")),
            "incomplete_reason": run.manifest.get("incomplete_reason"),
            "created": run.manifest.get("created"),
            "tracekit_version": run.manifest.get("tracekit_version"),
            "schema_version": run.manifest.get("schema_version"),
            "import_warnings": run.manifest.get("import_warnings") or [],
        },
        "environment": _environment(run, frames),
        "capture": _capture(run, frames),
        "reproduce": reproduce_command(run.manifest),
        "calibration": calibration_source,
        "gemm_filter": gemm_filter,
        "counts": {
            "gemms": len(gemms),
            "selected_gemms": len(selected),
            "failures": len(failures),
            "failure_groups": len(groups),
            "ncu_kernels": frames["ncu"].height,
            "timeline_kernels": frames["kernels"].height,
        },
        "gemms": gemms,
        "waterfalls": waterfalls,
        "ncu_findings": findings,
        "failures": failures,
        "failure_groups": groups,
        "moe": moe_section(frames, env),
        "ranks": cross.to_dict() if cross is not None else None,
    }


def moe_section(frames: dict[str, pl.DataFrame], environment: dict[str, Any] | None) -> dict[str, Any] | None:
    """The report's MoE data (analyzers/moe.py): launches, the focus launch's expert histogram, the what-if; None
    for a run without grouped launches."""
    from .moe import analyze_moe, expert_histogram, focus_launch, moe_json

    analysis = analyze_moe(frames, environment=environment)
    if analysis.empty:
        return None
    data = moe_json(analysis, experts=False)
    focus = focus_launch(analysis.launches)
    data["focus_launch"] = focus
    data["histogram"] = expert_histogram(analysis.experts, focus) if focus is not None else []
    return data


def _moe_blocks(moe: dict[str, Any] | None, d: Detail) -> tuple[list[Any], list[str]]:
    """The Markdown section on grouped / MoE launches: launches, the focus launch's expert histogram, the what-if."""
    from .moe import PER_EXPERT_NOTE

    if not moe:
        return [], []
    notes: list[str] = []
    blocks: list[Any] = [Heading(3, [("t", "Mixture of experts: grouped GEMMs per expert")])]
    blocks.append(Para([("t", md_text(PER_EXPERT_NOTE))]))
    launches = moe["launches"]
    shown = launches
    if d.gemm_rows is not None and len(launches) > d.gemm_rows:
        shown = sorted(launches, key=lambda r: -(r.get("time_ns") or 0.0))[: d.gemm_rows]
        notes.append(f"MoE table: the {len(shown)} of {len(launches)} launches with the most time")
    rows = []
    for r in shown:
        hot = (
            f"e{r['hot_expert']}: {_fmt(r.get('hot_rows_share_pct'))}% rows, {_fmt(r.get('hot_time_share_pct'))}% "
            f"time, {_fmt(r.get('hot_vs_median'))}× median"
            if r.get("hot_expert") is not None
            else "–"
        )
        rows.append(
            [
                [("c", _one_line(r.get("backend") or "?", d.cell_chars))],
                [("t", md_text(r.get("route") or "–"))],
                [("t", str(r.get("tokens") if r.get("tokens") is not None else "–"))],
                [("t", f"{r.get('active')}/{r.get('experts')}")],
                [("t", _fmt((r.get("time_ns") or 0) / 1e3 if r.get("time_ns") else None))],
                [("t", _fmt(r.get("tflops")))],
                [("t", _fmt(r.get("pct_of_peak"), 2))],
                [("t", _fmt(r.get("pct_of_roofline")))],
                [("t", _fmt(r.get("padding_waste_pct")))],
                [("t", md_text(hot))],
                [("t", md_text(r.get("verdict") or "–", d.cell_chars))],
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
    focus = next((r for r in launches if r["launch_id"] == moe.get("focus_launch")), None)
    if focus is not None and moe.get("histogram"):
        title = f"Expert histogram: {focus.get('backend')} {focus.get('route') or ''} tokens={focus.get('tokens')}"
        blocks.append(Heading(4, [("t", md_text(title))]))
        hrows = []
        for b in moe["histogram"]:
            bar = "█" * max(1, round((b.get("time_share_pct") or 0) / 5)) if b.get("time_share_pct") else ""
            hrows.append(
                [
                    [("t", b["rows"] + (" (hot)" if b.get("hot") else ""))],
                    [("t", str(b["experts"]))],
                    [("t", _fmt(b.get("rows_share_pct")))],
                    [("t", _fmt(b.get("time_share_pct")))],
                    [("t", bar)],
                    [("t", _fmt(b.get("median_pct_of_peak"), 2))],
                    [("t", str(b.get("memory_bound")))],
                ]
            )
        blocks.append(
            Table(
                ["rows / expert", "experts", "% rows", "% time", "", "median % peak", "memory-bound"],
                hrows,
                ["l", "r", "r", "r", "l", "r", "r"],
            )
        )
    if moe.get("whatif"):
        blocks.append(Heading(4, [("t", "What would reach peak: rows per expert, from the measured curve")]))
        wrows = []
        for w in moe["whatif"]:
            wrows.append(
                [
                    [("c", _one_line(w.get("backend") or "?", d.cell_chars))],
                    [("t", w.get("curve") or "")],
                    [("t", _fmt(w.get("target_pct"), 0))],
                    [("t", _fmt(w.get("m_needed")))],
                    [("t", md_text(w.get("how") or ""))],
                    [("t", _fmt(w.get("tokens_per_step")))],
                    [("t", _fmt(w.get("ep_degree")))],
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


# --- the document: blocks shared by the Markdown and HTML writers -----------------------------------------------------
Inline = list[tuple[str, str]]
"""Runs of inline content: ("t", text) plain, ("c", text) code, ("b", text) bold, ("i", text) italic."""


@dataclass
class Heading:
    level: int
    parts: Inline


@dataclass
class Para:
    parts: Inline


@dataclass
class Bullets:
    items: list[Inline]


@dataclass
class Table:
    headers: list[str]
    rows: list[list[Inline]]
    align: list[str] = field(default_factory=list)  # "l" | "r" per column


@dataclass
class Code:
    text: str
    lang: str = "text"


@dataclass
class Details:
    summary: str
    body: list[Any]


@dataclass
class Image:
    key: str  # plot key: "tflops" or "waterfall-<gemm_id>"
    alt: str


@dataclass(frozen=True)
class Detail:
    """How much a Markdown report holds; later levels summarise more (see :data:`LEVELS`). None = everything."""

    name: str = "full"
    group_failures: bool = False
    gemm_rows: int | None = None
    waterfalls: int | None = None
    findings: int | None = None
    failure_details: int | None = None
    failure_groups: int | None = None
    detail_chars: int | None = None
    cell_chars: int = 600


LEVELS: tuple[Detail, ...] = (
    Detail("full"),
    Detail("grouped failures", group_failures=True),
    # GEMM sections shrink before error texts are cut: a failure's whole text is what a maintainer needs
    Detail("top", True, 200, 20, 60, 40, 400, None, 600),
    Detail("top", True, 100, 10, 30, 40, 400, None, 400),
    Detail("top", True, 200, 20, 60, 40, 400, 8000, 400),
    Detail("top", True, 100, 10, 30, 20, 200, 4000, 300),
    Detail("top", True, 50, 5, 15, 10, 100, 2000, 200),
    Detail("top", True, 25, 3, 8, 5, 50, 1000, 160),
    Detail("top", True, 10, 1, 3, 3, 20, 500, 120),
    Detail("top", True, 5, 0, 0, 0, 10, 300, 100),
)


def _fmt(value: Any, digits: int = 1) -> str:
    v = _f(value)
    if v is None:
        return "–"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def _shape(r: dict[str, Any]) -> str:
    return f"{r['m']}×{r['n']}×{r['k']}" if r.get("m") is not None else "–"


_CUT_MARK = " more characters: see `tracekit report --format json` or the bundle)"


def _cut(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit:,}{_CUT_MARK}"


def _gemm_label(r: dict[str, Any]) -> str:
    if r.get("backend"):
        return str(r["backend"])
    return str(r.get("main_kernel") or r.get("range") or "?")


def _environment_blocks(rep: dict[str, Any], d: Detail) -> list[Any]:
    env, cap, run = rep["environment"], rep["capture"], rep["run"]
    cc = d.cell_chars
    gpu = env.get("gpu") or "unknown GPU"
    extra = []
    if env.get("compute_capability"):
        extra.append(f"CC {env['compute_capability']}")
    if env.get("sm_count"):
        extra.append(f"{env['sm_count']} SMs")
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
            [("t", md_text(f"{rep['tracekit_version']} (run made by {run.get('tracekit_version')})", cc))],
        ]
    )
    blocks: list[Any] = [Heading(3, [("t", "Environment")]), Table(["", ""], rows, ["l", "l"])]
    repro = rep["reproduce"]
    blocks.append(Heading(3, [("t", "Reproduce")]))
    if repro.get("command"):
        blocks.append(Code(repro["command"], "sh"))
    if repro.get("note"):
        blocks.append(Para([("i", md_text(repro["note"], cc))]))
    return blocks


def _gemm_table(rows: Sequence[dict[str, Any]], d: Detail) -> Table:
    headers = [
        "#",
        "backend / kernel",
        "op",
        "M×N×K",
        "dtype",
        "time µs",
        "p10–p90 µs",
        "TFLOP/s",
        "% peak",
        "SM MHz",
        "verdict",
    ]
    out = []
    for r in rows:
        spread = (
            f"{_fmt(r['time_us_p10'], 2)}–{_fmt(r['time_us_p90'], 2)}"
            if r.get("time_us_p10") is not None and r.get("time_us_p90") is not None
            else "–"
        )
        verdict = "–"
        if r.get("verdict"):
            verdict = str(r["verdict"]) + (f": {r['verdict_cause']}" if r.get("verdict_cause") else "")
            if r.get("verdict_gain_pct") is not None:
                verdict += f" (+{r['verdict_gain_pct']:.0f}%)"
        status = " (wrong result)" if r.get("status") == "wrong" else ""
        out.append(
            [
                [("t", str(r["gemm_id"]))],
                [("c", _gemm_label(r))],
                [("c", str(r["op"]))] if r.get("op") else [("t", "–")],
                [("t", _shape(r))],
                [("t", md_text(r.get("dtype") or r.get("dtype_class") or "–", 40))],
                [("t", _fmt(r.get("time_us"), 2) + status)],
                [("t", spread)],
                [("t", _fmt(r.get("achieved_tflops")))],
                [("t", _fmt(r.get("pct_of_peak"), 0))],
                [("t", _fmt(r["sm_clock_hz"] / 1e6 if r.get("sm_clock_hz") else None, 0))],
                [("t", md_text(verdict, d.cell_chars))],
            ]
        )
    return Table(headers, out, ["r", "l", "l", "r", "l", "r", "r", "r", "r", "r", "l"])


def _waterfall_blocks(wf: dict[str, Any], d: Detail, index: int) -> list[Any]:
    cc = d.cell_chars
    title: Inline = [("t", f"{index}. "), ("c", _one_line(wf.get("range"), cc))]
    if wf.get("context"):
        title += [("t", " in "), ("c", _one_line(wf["context"], cc))]
    blocks: list[Any] = [Heading(4, title)]
    head: Inline = []
    if wf.get("main_kernel"):
        head += [("t", "kernel "), ("c", _one_line(wf["main_kernel"], cc)), ("t", "; ")]
    ach, peak = _f(wf.get("achieved_tflops")), _f(wf.get("peak_tflops"))
    if ach is not None:
        head.append(("b", f"{ach:,.1f} TFLOP/s"))
    if peak is not None:
        head.append(
            (
                "t",
                f" of a {peak:,.0f} TFLOP/s {md_text(wf.get('dtype_class') or '')} peak ({md_text(wf.get('peak_source') or '?')})",
            )
        )
        if ach is not None:
            head.append(("t", f" = {100 * ach / peak:.0f}%"))
    if wf.get("calibrated_tflops"):
        head.append(("t", f"; calibrated {wf['calibrated_tflops']:,.0f} TFLOP/s"))
    if wf.get("flops_source") in ("ncu-counters", "profiler-flops") and head:
        what = (
            "Nsight Compute's counters"
            if wf["flops_source"] == "ncu-counters"
            else "the profiler's FLOP count"
        )
        head.append(
            ("t", f" (no shape: FLOPs from {what}, dtype from {md_text(wf.get('dtype_source') or '?')})")
        )
    if head:
        blocks.append(Para(head))
    factors = wf.get("factors") or []
    if peak is not None and factors:
        blocks.append(Image(f"waterfall-{wf['gemm_id']}", f"waterfall of {_one_line(wf.get('range'), 80)}"))
    rows: list[list[Inline]] = []
    running = peak
    if peak is not None:
        rows.append([[("t", "datasheet peak")], [("t", "")], [("t", f"{peak:,.1f}")], [("t", "")]])
    for f in factors:
        value = _f(f.get("value")) or 0.0
        name = str(f.get("name")) + (f" ({f['cause']})" if f.get("cause") else "")
        loss = ""
        if running is not None:
            after = running * value
            loss = f"{after:,.1f} (−{running - after:,.1f})"
            running = after
        rows.append(
            [
                [("b", md_text(name, cc))],
                [("t", f"×{value:.3f}")],
                [("t", loss or "–")],
                [("t", md_text(f.get("sentence"), cc))],
            ]
        )
    if rows:
        if ach is not None:
            rows.append([[("t", "achieved")], [("t", "")], [("b", f"{ach:,.1f}")], [("t", "")]])
        blocks.append(Table(["factor", "×", "TFLOP/s after", "why"], rows, ["l", "r", "r", "l"]))
    v = wf.get("verdict")
    if v:
        what = str(v.get("factor")) + (f" ({v['cause']})" if v.get("cause") else "")
        text: Inline = [("b", "Verdict:"), ("t", " " + md_text(what, cc))]
        if v.get("gain_pct") is not None:
            text.append(("t", f": removing this loss would give +{v['gain_pct']:.0f}%."))
        if v.get("remedy"):
            text.append(("t", " Try: " + md_text(v["remedy"], cc)))
        blocks.append(Para(text))
    notes = wf.get("notes") or []
    if notes:
        blocks.append(Bullets([[("i", md_text(n, cc))] for n in notes]))
    return blocks


def _findings_table(findings: Sequence[dict[str, Any]], d: Detail) -> Table:
    rows = []
    for f in findings:
        what = " — ".join(x for x in (f.get("title"), f.get("message")) if x)
        rows.append(
            [
                [("t", ", ".join(str(g) for g in f["gemm_ids"]))],
                [("c", str(f.get("rule") or "?"))],
                [("t", md_text(f.get("kind") or "", 20))],
                [("t", f"{f['speedup_pct']:.0f}%" if f.get("speedup_pct") is not None else "–")],
                [("t", md_text(what, d.cell_chars))],
            ]
        )
    return Table(["GEMMs #", "rule", "type", "est. speed-up", "finding"], rows, ["r", "l", "l", "r", "l"])


def _crash_parts(f: dict[str, Any]) -> list[str]:
    """A crash's evidence (capture's ``crashed`` / ``timeout`` records): the signal, the GEMM call in flight, the
    Python stack and the program's last stderr lines, each whole."""
    parts = []
    head = []
    if f.get("signal"):
        head.append(f"signal: {_one_line(f['signal'])}")
    call = " ".join(
        str(x)
        for x in (
            f.get("range"),
            f"dtypes {f.get('dtype_a')}/{f.get('dtype_b')}->{f.get('dtype_out')}"
            if f.get("dtype_a")
            else None,
        )
        if x
    )
    if call or f.get("caller"):
        where = f" called at {_one_line(f['caller'])}" if f.get("caller") else ""
        head.append(f"GEMM call in flight: {_one_line(call) or '?'}{where}")
    if head:
        parts.append("\n".join(head))
    if f.get("python_stack") and f.get("python_stack") != f.get("traceback"):
        parts.append("Python stack:\n" + _clean(f["python_stack"]).rstrip())
    if f.get("stderr_tail"):
        parts.append("the program's last stderr lines:\n" + _clean(f["stderr_tail"]).rstrip())
    return parts


def _failure_text(f: dict[str, Any], d: Detail) -> str:
    parts = [_clean(f.get("message")).rstrip()]
    if f.get("traceback"):
        parts.append(_clean(f["traceback"]).rstrip())
    parts += _crash_parts(f)
    extra = []
    if f.get("device_name"):
        extra.append(f"device: {_one_line(f['device_name'])} (CC {f.get('compute_capability') or '?'})")
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


def _failure_blocks(rep: dict[str, Any], d: Detail) -> tuple[list[Any], list[str]]:
    failures, groups = rep["failures"], rep["failure_groups"]
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
            shapes = ", ".join(g["shapes"][:12]) + (
                f", … ({len(g['shapes'])} in all)" if len(g["shapes"]) > 12 else ""
            )
            rows.append(
                [
                    [("c", str(g.get("backend")))],
                    [("c", str(g.get("error_type") or "?"))],
                    [("c", _one_line(g["first_line"], cc))] if g["first_line"] else [("t", "–")],
                    [("t", md_text(", ".join(g["kinds"]), 40))],
                    [("t", str(g["count"]))],
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
            ex = failures[g["example"]]
            summary = f"{g.get('backend')} {_shape(ex)} — {g.get('error_type')}: {_one_line(g['first_line'], 160)} (×{g['count']})"
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
                    [("c", _one_line(f["first_line"], cc))] if f["first_line"] else [("t", "–")],
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
            summary = (
                f"{f.get('backend')} {_shape(f)} — {f.get('error_type')}: {_one_line(f['first_line'], 160)}"
            )
            blocks.append(Details(summary, [Code(_failure_text(f, d))]))
    return blocks, notes


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


def _rank_blocks(rep: dict[str, Any], d: Detail, notes: list[str]) -> list[Any]:
    """The per-rank section of a multi-rank run (analyzers/ranks.py): the rank table, who the others wait for and
    why, and the GEMMs whose time differs most between ranks."""
    cross = rep.get("ranks")
    if not cross:
        return []
    cc = d.cell_chars

    def ms(v: Any) -> str:
        return _fmt(v / 1e6 if isinstance(v, int | float) else None, 2)

    blocks: list[Any] = [Heading(3, [("t", "Ranks")])]
    n = len(cross["ranks"])
    lead = f"{n} ranks. "
    lead += (
        f"Rank {cross['straggler']} is the straggler."
        if cross.get("straggler") is not None
        else "No straggler stands out."
    )
    blocks.append(Para([("t", md_text(lead))]))
    rows = []
    for r in cross["ranks"]:
        rows.append(
            [
                [("b" if r.get("straggler") else "t", str(r["rank"]))],
                [("t", "–" if r.get("pid") is None else str(r["pid"]))],
                [("t", "–" if r.get("device") is None else str(r["device"]))],
                [("t", md_text(r.get("gpu") or "–", 60))],
                [("t", f"{r.get('kernels') or 0:,}")],
                [("t", ms(r.get("gemm_ns")))],
                [("t", ms(r.get("comm_ns")))],
                [("t", ms(r.get("compute_ns")))],
                [("t", ms(r.get("idle_ns")))],
                [("t", str(r.get("last_arrivals") or 0))],
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
                    "Kernel time per rank: compute is kernel time outside collectives, idle the GPU's idle time in "
                    "its span, last in the collectives it reached last (the others waited inside theirs).",
                )
            ]
        )
    )
    if cross.get("reasons"):
        blocks.append(Bullets([[("t", md_text(x, cc))] for x in cross["reasons"]]))
    spread = [g for g in cross.get("gemm_spread") or [] if g.get("spread_pct") is not None]
    if spread:
        shown = spread if d.gemm_rows is None else spread[: d.gemm_rows]
        if len(shown) < len(spread):
            notes.append(f"GEMMs across ranks: the {len(shown)} of {len(spread)} that differ most")
        blocks.append(
            Para([("t", "The same GEMM on every rank (time per launch), largest difference first:")])
        )
        srows = [
            [
                [("c", _one_line(g["gemm"], min(cc, 120)))],
                [("t", str(g["ranks"]))],
                [("t", _fmt(g["min_ns"] / 1e3, 2))],
                [("t", _fmt(g["max_ns"] / 1e3, 2))],
                [("t", _fmt(g["spread_pct"], 1))],
                [("t", f"{g['slowest_rank']} (fastest {g['fastest_rank']})")],
                [("t", md_text(g.get("why") or "–", cc))],
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
    for note in cross.get("notes") or []:
        blocks.append(Para([("i", md_text(note, cc))]))
    return blocks


# --- Markdown -----------------------------------------------------------------------------------------------------------
def _md_inline(parts: Inline, *, in_table: bool) -> str:
    out = []
    for kind, text in parts:
        if kind == "c":
            out.append(md_code(text, in_table=in_table))
        elif kind == "b":
            out.append(f"**{text}**" if text else "")
        elif kind == "i":
            out.append(f"*{text}*" if text else "")
        else:
            out.append(text)
    return "".join(out)


def _md_block(b: Any, image_path: Callable[[str], str | None]) -> str:
    if isinstance(b, Heading):
        return "#" * b.level + " " + _md_inline(b.parts, in_table=False)
    if isinstance(b, Para):
        return _md_inline(b.parts, in_table=False)
    if isinstance(b, Bullets):
        return "\n".join("- " + _md_inline(item, in_table=False) for item in b.items)
    if isinstance(b, Table):
        n = len(b.headers)
        head = "| " + " | ".join(md_text(h) for h in b.headers) + " |"
        align = b.align or ["l"] * n
        sep = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
        lines = [head, sep]
        for row in b.rows:
            cells = [_md_inline(c, in_table=True) or " " for c in row]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)
    if isinstance(b, Code):
        fence = _fence(b.text)
        return f"{fence}{b.lang}\n{b.text}\n{fence}"
    if isinstance(b, Details):
        summary = html.escape(_summary_text(_one_line(b.summary, 300)), quote=False)
        body = "\n\n".join(_md_block(x, image_path) for x in b.body)
        return f"<details>\n<summary>{summary}</summary>\n\n{body}\n\n</details>"
    if isinstance(b, Image):
        path = image_path(b.key)
        if path is None:
            return ""
        return f"![{md_text(b.alt)}]({urllib.parse.quote(path)})"
    raise TypeError(f"unknown block {b!r}")


@dataclass
class Rendered:
    """A rendered Markdown report: its text, the plots it links (file name -> key), and what was summarised."""

    text: str
    images: dict[str, str]
    summarised: list[str]
    level: str


def render_markdown(
    rep: dict[str, Any],
    *,
    plot_stem: str | None = None,
    limit: int | None = GITHUB_COMMENT_LIMIT,
    levels: Sequence[Detail] = LEVELS,
) -> Rendered:
    """Markdown of ``rep`` at the first detail level that fits ``limit`` characters. Plots are linked as
    ``<plot_stem>-<key>.svg`` beside the Markdown (none when ``plot_stem`` is None)."""
    chosen: Rendered | None = None
    for d in levels:
        images: dict[str, str] = {}

        def image_path(key: str, images: dict[str, str] = images) -> str | None:
            if plot_stem is None:
                return None
            name = f"{plot_stem}-{key}.svg"
            images[name] = key
            return name

        blocks, notes = document(rep, d)
        text = "\n\n".join(s for s in (_md_block(b, image_path) for b in blocks) if s) + "\n"
        chosen = Rendered(text, images, notes, d.name)
        if limit is None or len(text) <= limit:
            return chosen
    assert chosen is not None
    return chosen


# --- plots -----------------------------------------------------------------------------------------------------------
def plot_svg(rep: dict[str, Any], key: str) -> str:
    """The SVG text of plot ``key`` ("tflops" or "waterfall-<gemm_id>")."""
    if key == "tflops":
        groups: dict[str, list[tuple[float, float]]] = {}
        nk: dict[str, set[tuple[Any, Any]]] = {}
        for g in rep["gemms"]:
            if g.get("m") and g.get("achieved_tflops"):
                name = _gemm_label(g)
                nk.setdefault(name, set()).add((g["n"], g["k"]))
        peaks: dict[str, float] = {}
        for g in rep["gemms"]:
            if not (g.get("m") and g.get("achieved_tflops")):
                continue
            name = _gemm_label(g)
            if len(nk[name]) > 1:
                name += f" N={g['n']} K={g['k']}"
            groups.setdefault(name, []).append((float(g["m"]), float(g["achieved_tflops"])))
            if g.get("peak_tflops") and g.get("dtype_class"):
                peaks[str(g["dtype_class"])] = float(g["peak_tflops"])
        series = [P.Series(name, pts) for name, pts in sorted(groups.items())]
        gpu = rep["environment"].get("gpu") or "GPU"
        return P.tflops_vs_m(series[:24], peaks, title=f"TFLOP/s vs M per backend on {gpu}")
    if key.startswith("waterfall-"):
        gid = int(key.split("-", 1)[1])
        wf = next(w for w in rep["waterfalls"] if w["gemm_id"] == gid)
        steps = [(str(f["name"]), float(f["value"])) for f in wf.get("factors") or []]
        return P.waterfall(float(wf["peak_tflops"]), steps, title=f"{wf.get('range')}: peak to achieved")
    raise KeyError(key)


# --- HTML ------------------------------------------------------------------------------------------------------------
_CSS = """body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#1f2328}
table{border-collapse:collapse;margin:0.8em 0}th,td{border:1px solid #d0d7de;padding:3px 8px;vertical-align:top}
th{background:#f6f8fa}td.r{text-align:right}code{background:#f6f8fa;padding:0 3px;border-radius:4px}
pre{background:#f6f8fa;padding:8px;overflow-x:auto;white-space:pre-wrap}summary{cursor:pointer}svg{max-width:100%;height:auto}"""


def _unmd(text: str) -> str:
    """Undo md_text's escapes (the HTML writer escapes for HTML instead)."""
    text = text.replace("@\u2060", "@").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return re.sub(r"\\(.)", r"\1", text)


def _html_inline(parts: Inline) -> str:
    out = []
    for kind, text in parts:
        if kind == "c":
            out.append(f"<code>{html.escape(text)}</code>")
        elif kind == "b":
            out.append(f"<b>{html.escape(_unmd(text))}</b>")
        elif kind == "i":
            out.append(f"<i>{html.escape(_unmd(text))}</i>")
        else:
            out.append(html.escape(_unmd(text)))
    return "".join(out)


def _html_block(b: Any, rep: dict[str, Any]) -> str:
    if isinstance(b, Heading):
        return f"<h{b.level}>{_html_inline(b.parts)}</h{b.level}>"
    if isinstance(b, Para):
        return f"<p>{_html_inline(b.parts)}</p>"
    if isinstance(b, Bullets):
        return "<ul>" + "".join(f"<li>{_html_inline(i)}</li>" for i in b.items) + "</ul>"
    if isinstance(b, Table):
        align = b.align or ["l"] * len(b.headers)
        head = "".join(f"<th>{html.escape(h)}</th>" for h in b.headers)
        rows = "".join(
            "<tr>"
            + "".join(f'<td class="{a}">{_html_inline(c)}</td>' for a, c in zip(align, row, strict=False))
            + "</tr>"
            for row in b.rows
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    if isinstance(b, Code):
        return f"<pre><code>{html.escape(b.text)}</code></pre>"
    if isinstance(b, Details):
        body = "".join(_html_block(x, rep) for x in b.body)
        return f"<details><summary>{html.escape(_one_line(b.summary, 300))}</summary>{body}</details>"
    if isinstance(b, Image):
        svg = plot_svg(rep, b.key)
        return f'<figure role="img" aria-label="{_html_attr_safe(b.alt)}">{svg}</figure>'
    raise TypeError(f"unknown block {b!r}")


def render_html(rep: dict[str, Any]) -> str:
    """One self-contained HTML page (plots inlined as SVG, no scripts, nothing fetched), never summarised."""
    blocks, _ = document(rep, replace(LEVELS[0], cell_chars=100_000))
    body = "\n".join(_html_block(b, rep) for b in blocks)
    title = html.escape(f"tracekit report: {rep['run']['name']}")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{_CSS}</style></head>\n<body>\n{body}\n</body></html>\n"
    )


# --- files -----------------------------------------------------------------------------------------------------------
def write_report(
    rep: dict[str, Any], fmt: str, out: Path | None
) -> tuple[str | None, list[Path], Rendered | None]:
    """Render ``rep`` as ``fmt`` (md | json | html). With ``out``, write it there (Markdown's plots beside it)
    and return ``(None, files, rendered)``; without, return the text to print (Markdown then links no plots)."""
    from tracekit.run import atomic_path

    rendered: Rendered | None = None
    if fmt == "json":
        text = json.dumps(rep, indent=2, default=str, allow_nan=False) + "\n"
    elif fmt == "html":
        text = render_html(rep)
    elif fmt == "md":
        rendered = render_markdown(rep, plot_stem=out.stem if out is not None else None)
        text = rendered.text
    else:
        raise ValueError(f"unknown report format {fmt!r}")
    if out is None:
        return text, [], rendered
    files: list[Path] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    if rendered is not None:
        for name, key in rendered.images.items():
            target = out.parent / name
            with atomic_path(target) as tmp:
                tmp.write_text(plot_svg(rep, key), encoding="utf-8")
                tmp.chmod(0o644)  # a file to share, not mkstemp's private 0600
            files.append(target)
    with atomic_path(out) as tmp:
        tmp.write_text(text, encoding="utf-8")
        tmp.chmod(0o644)
    files.insert(0, out)
    return None, files, rendered
