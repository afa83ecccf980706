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
from tracekit.records import gpu_of
from tracekit.run import Run

from .text import _clean, _f

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


def _environment(run: Run, frames: dict[str, pl.DataFrame]) -> dict[str, Any]:
    from ..summary import devices

    env = run.manifest.get("environment") or {}
    gpu = gpu_of(env)
    devs = devices(frames, run)
    dev = devs[0] if devs else {}
    versions = {k: v for k, v in (env.get("versions") or {}).items() if v}
    versions_source = "run.json" if versions else None
    if not versions and frames["failures"].height:
        for pairs in frames["failures"]["versions"].drop_nulls().to_list():
            found = {p["package"]: p["version"] for p in pairs if p["version"]}
            if found:
                versions = found
                versions_source = "failure records"
                break
    return {
        "gpu": gpu.name or dev.get("name"),
        "compute_capability": gpu.compute_capability or dev.get("compute_capability"),
        "sm_count": gpu.sm_count or dev.get("sm_count"),
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
        versions = {p["package"]: p["version"] for p in r["versions"]} if r.get("versions") else None
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
    from ..explain import explain_case
    from ..gemm import build_cases

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
    from ..ranks import analyze_ranks

    cross = analyze_ranks(frames, environment=env, calibration=calibration)
    from ..breakdown import breakdown, memops_recorded

    steps = breakdown(frames, memops=memops_recorded(run.manifest))
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
        "breakdown": steps.to_dict(),
    }


def moe_section(frames: dict[str, pl.DataFrame], environment: dict[str, Any] | None) -> dict[str, Any] | None:
    """The report's MoE data (analyzers/moe/): launches, the focus launch's expert histogram, the what-if; None
    for a run without grouped launches."""
    from ..moe import analyze_moe, expert_histogram, focus_launch, moe_json

    analysis = analyze_moe(frames, environment=environment)
    if analysis.empty:
        return None
    data = moe_json(analysis, experts=False)
    focus = focus_launch(analysis.launches)
    data["focus_launch"] = focus
    data["histogram"] = expert_histogram(analysis.experts, focus) if focus is not None else []
    return data
