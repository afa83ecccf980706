"""The report as data: :func:`build_report` gathers environment, capture settings, the reproducing command,
every GEMM with its waterfall, Nsight Compute's findings and every failure into one JSON-able dict."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from tracekit import __version__
from tracekit.devices import DeviceSpec
from tracekit.records import NcuCapture, RunRecord, gpu_of
from tracekit.run import Run

from .recommend_section import recommendation_data
from .text import _f

REPORT_FORMAT = "tracekit-report"
REPORT_VERSION = 2
"""2: the report is the run's Analysis (docs/ANALYSIS.md) with a ``report`` object beside it."""
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


def _environment(run: Run, analysis: Any) -> dict[str, Any]:
    """The capture's environment (run.json), the GPU filled in from the Analysis' devices where run.json names
    none, and the package versions from the Analysis' failure records where run.json has none."""
    env = run.record.environment
    gpu = gpu_of(env)
    devs = [
        {"name": d.name, "compute_capability": d.compute_capability, "sm_count": d.sm_count}
        for d in analysis.devices
    ]
    dev = devs[0] if devs else {}
    versions = {k: v for k, v in (env.versions or {}).items() if v}
    versions_source = "run.json" if versions else None
    if not versions:
        found = next((f.versions for f in analysis.failures if f.versions), None)
        if found:
            versions, versions_source = dict(found), "failure records"
    return {
        "gpu": gpu.name or dev.get("name"),
        "compute_capability": gpu.compute_capability or dev.get("compute_capability"),
        "sm_count": gpu.sm_count or dev.get("sm_count"),
        "gpus_in_run": devs if len(devs) > 1 else None,
        "driver": env.driver,
        "cuda": env.cuda_runtime or env.cuda,
        "max_sm_clock_hz": env.max_sm_clock_hz,
        "default_power_limit_w": env.default_power_limit_w,
        "versions": versions,
        "versions_source": versions_source,
        "python": env.python,
        "platform": env.platform,
    }


def _with_device(env: dict[str, Any], analysis: Any) -> dict[str, Any]:
    """``env`` with the GPU that ``--device`` named (the Analysis' device) in place of the files' (the report
    says the GPU the peaks came from, never "an unknown GPU" beside them)."""
    if not analysis.run.device_override or not analysis.devices:
        return env
    dev = analysis.devices[0]
    return {
        **env,
        "gpu": dev.name,
        "compute_capability": dev.compute_capability or env.get("compute_capability"),
        "sm_count": dev.sm_count or env.get("sm_count"),
        "gpu_source": f"--device {analysis.run.device_override}",
    }


def _capture(run: Run, analysis: Any) -> dict[str, Any]:
    cap = run.record.capture
    ncu = cap.ncu or NcuCapture()
    clock = ncu.clock_control
    clock_from = "capture settings" if clock else None
    if not clock and analysis.tables is not None:
        seen = sorted({k.clock_control for k in analysis.tables.ncu_kernels if k.clock_control})
        if seen:
            clock, clock_from = ", ".join(seen), "the Nsight Compute report"
    passes = [
        {"tool": p.tool, "argv": p.argv, "status": p.status, "reason": p.reason} for p in cap.passes or []
    ]
    imported = [Path(str(p)).name for p in cap.imported_from or []]
    return {
        "tools": cap.tools,
        "instrument": cap.instrument,
        "ncu_clock_control": clock,
        "ncu_clock_control_from": clock_from,
        "ncu_sections": ncu.sections,
        "ncu_nvtx_include": ncu.nvtx_include,
        "ncu_max_per_range": ncu.max_per_range,
        "passes": passes,
        "imported_from": imported or None,
        "sources": [
            {"path": s.path, "kind": s.kind, "status": s.status, "message": s.message}
            for s in run.record.sources
        ],
    }


def reproduce_command(record: RunRecord) -> dict[str, Any]:
    """The shell command that reproduces a run's capture (from its manifest), and a note on how sure that is."""
    cmd = record.command
    cap = record.capture
    cmd = [str(c) for c in cmd] if isinstance(cmd, list) else None
    tools = cap.tools or []
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
        clock_control = cap.ncu.clock_control if cap.ncu is not None else None
        if "ncu" in tools and clock_control:
            flags += ["--clock-control", clock_control]
        if cap.instrument:
            flags.append("--instrument")
        note = f"run from {cap.cwd}" if cap.cwd else None
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
    imported = [Path(str(p)).name for p in cap.imported_from or []]
    if imported:
        return {
            "command": shlex.join(["tracekit", "import", *imported, "-o", "RUN"]),
            "note": "imported from existing profiles: the command that captured them was not recorded",
        }
    return {"command": None, "note": "no capture command was recorded"}


def case_matches(case: dict[str, Any], pattern: str | None) -> bool:
    """Whether ``--gemm PATTERN`` selects a case (its name, range, enclosing ranges, kernel or backend)."""
    if not pattern:
        return True
    p = pattern.lower()
    fields = (
        case.get("name"),
        case.get("range"),
        *(case.get("parents") or []),
        case["kernel"].get("name"),
        case.get("backend"),
    )
    return any(p in str(f or "").lower() for f in fields)


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


def _ncu_findings(cases: Sequence[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """ncu's findings for the selected cases (``(number, case)``: the case's place in GPU-time order, 1 = most),
    one entry per distinct finding with the cases it was made for (``cases``: their numbers); its notes about
    optional metrics it could not find are tooling noise, left out."""
    found: dict[tuple[Any, ...], dict[str, Any]] = {}
    for number, case in cases:
        for r in (case.get("ncu") or {}).get("rules") or []:
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
                    "cases": [],
                    "case_ids": [],
                }
            if number not in entry["cases"]:
                entry["cases"].append(number)
                entry["case_ids"].append(case["id"])
            sp = _f(r.get("speedup_pct"))
            if sp is not None and (entry["speedup_pct"] is None or sp > entry["speedup_pct"]):
                entry["speedup_pct"] = sp
    return sorted(found.values(), key=lambda f: (-(f["speedup_pct"] or -1.0), f["cases"][0]))


TOP_CARDS = 10
"""Cases the report writes a waterfall for without ``--top`` / ``--all``."""


def build_report(
    run: Run,
    frames: dict[str, pl.DataFrame] | None = None,
    *,
    gemm_filter: str | None = None,
    calibration: dict[str, Any] | None = None,
    calibration_source: str | None = None,
    device: DeviceSpec | None = None,
    analysis: Any = None,
    top: int | None = TOP_CARDS,
) -> dict[str, Any]:
    """Everything a report shows, as one JSON-able dict (the ``--format json`` output): the run's Analysis
    (docs/ANALYSIS.md; built here unless given) with a ``report`` object beside it: environment, capture
    settings, the reproducing command, which cases ``--gemm`` selected and which of them get a waterfall (the
    ``top`` with the most time in calls; None: all), Nsight Compute's findings per distinct finding and the failures
    grouped. ``device`` overrides the GPU the files name (``--device``)."""
    if analysis is None:
        from ..analysis import analyze_frames
        from ..store import load_frames

        analysis = analyze_frames(
            frames if frames is not None else load_frames(run),
            run=run,
            device=device,
            calibration=calibration,
            calibration_source=calibration_source,
        )
    data = analysis.to_builtins()
    record = (
        run.record
    )  # after the frames were read (a rebuild in memory sets the run's sources and warnings)
    cases = data["cases"]
    numbered = [(i, c) for i, c in enumerate(cases, 1) if case_matches(c, gemm_filter)]
    cards = numbered if top is None else numbered[:top]
    return {
        **data,
        "report": {
            "format": REPORT_FORMAT,
            "version": REPORT_VERSION,
            "tracekit_version": __version__,
            "run": {
                "name": run.name,
                "bundle": record.bundle.opened_from if record.bundle else None,
                "status": run.status,
                "partial": bool(record.partial),
                "incomplete_reason": record.incomplete_reason,
                "created": record.created,
                "tracekit_version": record.tracekit_version,
                "schema_version": record.schema_version,
                "import_warnings": record.import_warnings or [],
            },
            "environment": _with_device(_environment(run, analysis), analysis),
            "capture": _capture(run, analysis),
            "reproduce": reproduce_command(record),
            "calibration": analysis.run.calibration,
            "gemm_filter": gemm_filter,
            "top": top,
            "selected": [c["id"] for _, c in numbered],
            "waterfalls": [c["id"] for _, c in cards],
            "counts": {
                "gemms": len(cases),
                "selected_gemms": len(numbered),
                "failures": len(data["failures"]),
                "failure_groups": len(analysis.failure_groups),
                "ncu_kernels": analysis.run.ncu_kernel_count,
                "timeline_kernels": analysis.run.kernel_count,
            },
            "recommendation": recommendation_data(analysis),
            "ncu_findings": _ncu_findings(numbered),
            "failure_groups": data["failure_groups"],  # the Analysis' groups (one rule for every view)
        },
    }
