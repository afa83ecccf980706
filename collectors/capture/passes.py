"""One tool pass (nsys, the PyTorch profiler, ncu, or a plain run) and what finishes it: the crash record of
a program that died, the nsys export, ncu's own error lines, and with ranks each rank's files."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import tools
from ..crash import (
    ENV_BREADCRUMB_DIR,
    crash_record,
    read_breadcrumbs,
    read_text,
)
from ..ranks import RANK_TOKEN, RankLaunch, rank_files
from ..torchprof import (
    ENV_TORCH_OPS,
    ENV_TRACE_REPEATS,
    append_jsonl,
)
from . import select
from .budget import BUDGET_LOG, ENV_BUDGET_LOG, ENV_STOP_AT, NcuBudget, ProfiledKernels, describe_bound
from .child import _run_pass
from .common import (
    BREADCRUMB_DIR,
    ENV_CAPTURE_TOOL,
    ENV_CRASH_FLUSH,
    ENV_HANG_DUMP,
    ENV_RUN_DIR,
    FAILURES_FILE,
    SITE_DIR,
    TORCH_TRACE,
    TORCHPROF_PY,
    PassResult,
    _count_lines,
    _describe_exit,
    interrupt_reason,
)
from .plan import _Options, _Plan
from .select import NcuSelection
from .settings import NcuSettings


def _ncu_problem(log_path: Path) -> str | None:
    """A one-line reason from ncu's own messages in its log, with a fix where one is known."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    if "ERR_NVGPUCTRPERM" in text:
        return (
            "ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM): run as root or load the driver "
            "with NVreg_RestrictProfilingToAdminUsers=0"
        )
    errors = [line.strip() for line in text.splitlines() if line.startswith("==ERROR==")]
    return errors[0] if errors else None


def ncu_selection(
    ncu: NcuSettings, ranges: str | None, raw: Path, ranked: bool, *, source: str = "nsys pass's timeline"
) -> NcuSelection | None:
    """The kernels the ncu pass profiles, chosen from the timeline an nsys pass of this capture (``--nsys``, or
    the planning pass) left in raw/nsys.sqlite (collectors/capture/select.py), where
    :meth:`NcuSettings.selects_gemms`; None keeps the bound alone (tracekit's own ranges, ``--ncu-kernels all``,
    ``--launch-count``, a kernel filter of one's own among the ncu options, no timeline, ranks, or a timeline
    with no GEMM in the ranges). ``source`` names the timeline in what is said and recorded."""
    if not ncu.selects_gemms(ranked):
        return None
    chosen = select.from_nsys(
        raw / "nsys.sqlite",
        ranges,
        in_ranges=ncu.mode == "ranges",
        per_range=ncu.max_per_range or 1,
        source=source,
    )
    return None if chosen is None or chosen.empty else chosen


PLANNING_SAID = (
    "planning pass: nsys records the program's timeline first (CUDA and NVTX only, no CPU sampling), so that the "
    "ncu pass profiles each GEMM of it once and no other kernel; the program runs once more for it, and its "
    "timeline is kept and imported (--no-plan-pass skips it)"
)
"""Said before the planning pass starts."""


def _why_every_kernel(plan: _Plan, raw: Path, source: str) -> str:
    """Why an ncu pass that would profile the GEMMs of a timeline profiles every kernel: no planning pass (and
    why), no export of the timeline, or no GEMM in it."""
    if plan.no_planning is not None:
        fix = "" if plan.no_planning == "--no-plan-pass" else "; --nsys-path PATH names one"
        return f"no timeline to choose them from ({plan.no_planning}{fix})"
    if plan.nsys is None:
        return "no nsys timeline to choose them from (capture with --nsys --ncu to profile each GEMM once)"
    if not (raw / "nsys.sqlite").is_file():
        return f"the {source} is missing (no raw/nsys.sqlite)"
    return f"the {source} shows no GEMM kernel in the ranges"


def _plan_record(plan: _Plan, previous: Sequence[PassResult], *, used: bool) -> dict[str, Any] | None:
    """``capture.passes[].ncu.plan``: whether a planning pass ran for this ncu pass (its wall time and how it
    ended, and whether its timeline chose the launches) or why none did; None where none applies."""
    if plan.no_planning is not None:
        return {"ran": False, "reason": plan.no_planning}
    if not plan.planning:
        return None
    ran = next((r for r in previous if r.role == "plan"), None)
    if ran is None:
        return {"ran": False, "reason": "the planning pass did not run"}
    return {
        "ran": True,
        "tool": ran.tool,
        "wall_s": round(ran.wall_s, 3),
        "status": "ok" if ran.ok else "incomplete",
        "chose_launches": used,
    }


def _one_pass(
    tool: str,
    opts: _Options,
    plan: _Plan,
    raw: Path,
    run_dir: Path,
    *,
    output: Callable[[str, bytes], None],
    log: Callable[..., None],
    python_cmd: bool = False,
    program_stem: str = "program",
    previous: Sequence[PassResult] = (),
) -> PassResult:
    """Run one pass of ``tool`` with the checked command and settings ``opts`` into ``raw`` and return its
    result: files, exit, reason, and for ncu what it profiled (``previous``: the passes run before it, the
    planning pass among them)."""
    s = opts.settings
    cmd, cwd, ranks, ncu = opts.cmd, opts.cwd, s.ranks, s.ncu
    instrument, timeout, grace_s, ranges_regex = s.instrument, s.timeout, s.grace_s, s.ranges
    torch_ops, trace_repeats = s.torch.ops, s.torch.trace_repeats
    nsys_extra, crash_flush = list(s.nsys.extra), s.nsys.crash_flush
    env = dict(opts.env)
    # with ranks, each tool wraps one rank's command and names its files raw/<tool>.rank<R>.* (rankwrap.py)
    inner = list(ranks.command) if ranks is not None else cmd
    tag = f".rank{RANK_TOKEN}" if ranks is not None else ""
    env[ENV_RUN_DIR] = str(run_dir)
    env[ENV_CAPTURE_TOOL] = tool
    # the per-range budget belongs to the ncu pass only: elsewhere it would hide launches from the timeline
    env.pop(tools.ENV_MAX_PER_RANGE, None)
    env["PYTHONUNBUFFERED"] = "1"
    crumbs_dir = raw / BREADCRUMB_DIR / tool
    crumbs_dir.mkdir(parents=True, exist_ok=True)
    env[ENV_BREADCRUMB_DIR] = str(crumbs_dir)
    if python_cmd and not env.get("PYTHONFAULTHANDLER"):
        env["PYTHONFAULTHANDLER"] = "1"  # a native crash prints the Python stack
    flush = tool == "nsys" and python_cmd and crash_flush != "none"
    env.pop(ENV_CRASH_FLUSH, None)
    env.pop(ENV_HANG_DUMP, None)
    if flush:
        env[ENV_CRASH_FLUSH] = crash_flush
    hang_dump = python_cmd and timeout is not None and timeout > 1.0
    if hang_dump:
        assert timeout is not None
        env[ENV_HANG_DUMP] = f"{timeout - min(2.0, timeout * 0.1):.3f}"
    for name in (ENV_STOP_AT, ENV_BUDGET_LOG):
        env.pop(name, None)
    # --ncu-budget: in a Python program the site folder's thread stops ncu's profiling (collectors/site)
    budget_in_program = tool == "ncu" and bool(ncu.budget_s) and python_cmd
    if instrument or flush or hang_dump or budget_in_program:
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(SITE_DIR) + (os.pathsep + old if old else "")
        if not instrument:
            env["TRACEKIT_INSTRUMENT"] = "0"  # the site folder is there for the crash / hang handlers only
    selection, every_kernel = None, None
    if tool == "ncu":
        assert plan.ncu is not None
        env[tools.ENV_MAX_PER_RANGE] = str(ncu.max_per_range)
        source = "planning pass's timeline" if plan.planning else "nsys pass's timeline"
        selection = ncu_selection(ncu, ranges_regex, raw, ranks is not None, source=source)
        if selection is None and ncu.selects_gemms(ranks is not None):
            every_kernel = _why_every_kernel(plan, raw, source)
        argv = tools.ncu_command(
            plan.ncu.path,
            raw / f"ncu{tag}",
            inner,
            sections=list(ncu.sections),
            metrics=list(ncu.metrics),
            nvtx_include=ncu.nvtx_include,
            clock_control=ncu.clock_control,
            launch_count=ncu.launch_count,
            per_config=selection.per_config if selection is not None else ncu.per_config,
            kernel_filter=selection.args() if selection is not None else (),
            extra=list(ncu.extra),
        )
        log("info", "ncu", describe_bound(ncu, ranges_regex, selection, every_kernel))
    elif tool == "nsys":
        assert plan.nsys is not None
        env = tools.nsys_env(env)
        if plan.planning:
            log("info", "nsys", PLANNING_SAID)
        argv = tools.nsys_command(plan.nsys.path, raw / f"nsys{tag}", inner, extra=nsys_extra)
    elif tool == "torch":
        assert plan.python is not None
        interp, target = plan.python
        env[ENV_TORCH_OPS] = torch_ops  # a tracekit benchmark's profiled workers record what the parent does
        env[ENV_TRACE_REPEATS] = "all" if trace_repeats is None else str(trace_repeats)
        argv = [
            *interp,
            str(TORCHPROF_PY),
            "--ops",
            torch_ops,
            "--out",
            str(raw / TORCH_TRACE.replace(".json.gz", f"{tag}.json.gz")),
            "--failures",
            str(raw / FAILURES_FILE),
            "--",
            *target,
        ]
    else:
        argv = list(cmd)
    if ranks is not None and tool != "plain":
        argv = ranks.wrap(argv)
    result = PassResult(tool, argv, role="plan" if tool == "nsys" and plan.planning else None)
    log_path = raw / f"{tool}.log"
    program = {"stdout": raw / f"{program_stem}.stdout", "stderr": raw / f"{program_stem}.stderr"}
    failures_before = _count_lines(raw / FAILURES_FILE)
    before = {p.name for p in raw.iterdir()}
    log("start", tool, f"{tool} pass: {' '.join(argv)}", log=f"raw/{log_path.name}")
    profiled = ProfiledKernels() if tool == "ncu" else None
    budget = None
    if profiled is not None and ncu.budget_s:  # the clock starts with the pass
        (raw / BUDGET_LOG).unlink(missing_ok=True)
        budget = NcuBudget(ncu.budget_s, profiled, raw / BUDGET_LOG, in_program=budget_in_program)
        if budget_in_program:
            env.update(budget.env())
    _run_pass(
        result,
        env,
        log_path,
        timeout=timeout,
        grace_s=grace_s,
        on_output=profiled.tap(output) if profiled is not None else output,
        cwd=cwd,
        program=program,
        must_stop=budget.check if budget is not None else None,
    )
    if profiled is not None:
        result.ncu = {
            "bound": describe_bound(ncu, ranges_regex, selection, every_kernel),
            "profiled": profiled.count,
            "kernels": dict(sorted(profiled.names.items(), key=lambda kv: -kv[1])[:200]),
        }
        if selection is not None:
            result.ncu["selection"] = selection.record()
        planned = _plan_record(plan, previous, used=selection is not None)
        if planned is not None:
            result.ncu["plan"] = planned
        if budget is not None:
            result.ncu["budget"] = budget.record(result.wall_s)
            said = budget.reason()
            if said and not result.interrupted and not result.timed_out:
                result.reason = said
            elif result.ncu["budget"]["spent"]:
                log("warning", "ncu", f"ncu budget spent: {result.ncu['budget']['not_profiled']}")

    code = result.exit_code
    if result.reason is None:
        if result.interrupted:
            result.reason = interrupt_reason(result.signum, f"during the {tool} pass")
        elif result.timed_out:
            result.reason = f"{tool} pass timed out after {timeout:g} s and was stopped"
        elif code not in (0, None):
            result.reason = f"{tool} pass: the command ended with {_describe_exit(code)}"
            if tool == "ncu":
                problem = _ncu_problem(log_path)
                if problem:
                    result.reason += f" ({problem})"
    if ranks is not None:
        _finish_ranks(result, tool, ranks, plan, raw, log_path, log, grace_s, ncu.nvtx_include)
    elif tool == "nsys":
        try:
            _finish_nsys(result, plan.nsys if not result.interrupted else None, raw, log_path, log, grace_s)
        except KeyboardInterrupt as exc:  # Ctrl-C / SIGTERM while `nsys export` ran (it has been killed)
            result.interrupted = True
            result.signum = int(getattr(exc, "signum", signal.SIGINT))
            rep = "raw/nsys.nsys-rep"
            result.reason = (
                f"{interrupt_reason(result.signum, 'during the nsys export')}; {rep} is kept: "
                f"`nsys export --type sqlite -o {run_dir / 'raw/nsys.sqlite'} {run_dir / rep}`, then "
                f"`tracekit import --rebuild {run_dir}`"
            )
            log("error", "nsys-export", result.reason)
        if (result.timed_out or code not in (0, None)) and nsys_kernel_count(raw / "nsys.sqlite") == 0:
            extra = (
                "nsys kept no kernels of the program that died (its CUDA buffers went with it); GEMM times "
                "come from ncu's kernel durations where an ncu pass profiled them"
                + ("" if crash_flush != "none" or not python_cmd else "; try --crash-flush profiler-stop")
            )
            result.reason = f"{result.reason}; {extra}" if result.reason else extra
    elif tool == "ncu":
        _finish_ncu(result, raw, log_path, ncu.nvtx_include)
    elif tool == "torch" and not (raw / TORCH_TRACE).is_file() and result.reason is None:
        result.reason = f"the PyTorch profiler wrote no {TORCH_TRACE} (see raw/{log_path.name})"
    # a crash that left no crash record of its own gets one, naming the GEMM in flight, so the failures frame
    # says why; the program's own output (never the profiler's progress lines) is its evidence
    stopped_by_budget = budget is not None and budget.stopped_program
    ended_badly = result.timed_out or (
        code not in (0, None) and not result.interrupted and not stopped_by_budget
    )
    if ended_badly and not _own_crash_record(raw / FAILURES_FILE, failures_before):
        tool_text = _tool_text(log_path, program["stdout"], program["stderr"])
        append_jsonl(
            raw / FAILURES_FILE,
            crash_record(
                kind="timeout" if result.timed_out else "crashed",
                returncode=code,
                program_stderr=read_text(program["stderr"]),
                tool_text=tool_text if tool != "plain" else "",
                crumbs=read_breadcrumbs(crumbs_dir),
                timeout_s=timeout,
                versions={"python": platform.python_version()},
            ),
        )
    result.files = sorted(
        f"raw/{p.name}"
        for p in raw.iterdir()
        if p.is_file() and (p.name not in before or p.name == FAILURES_FILE)
    )
    if result.reason:
        log("error", tool, result.reason, exit_code=code, wall_s=round(result.wall_s, 3))
    else:
        log("done", tool, f"{tool} pass done in {result.wall_s:.1f} s", exit_code=code, files=result.files)
    return result


def _own_crash_record(path: Path, skip: int) -> bool:
    """True if the program itself recorded a crash or timeout in failures.jsonl during this pass (a tracekit
    benchmark does, for its workers); its other failures (unsupported, wrong ...) do not count."""
    try:
        lines = [line for line in path.read_bytes().splitlines() if line.strip()][skip:]
    except OSError:
        return False
    for line in lines:
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            if isinstance(obj, dict) and obj.get("kind") in ("crashed", "timeout"):
                return True
    return False


def _tool_text(log_path: Path, *program_files: Path) -> str:
    """The profiler's own lines of a pass: its log less what the program printed."""
    mine = set()
    for path in program_files:
        mine.update(line for line in read_text(path).split("\n") if line.strip())
    return "\n".join(line for line in read_text(log_path).split("\n") if line not in mine)


def nsys_kernel_count(sqlite: Path) -> int | None:
    """Kernels in an nsys SQLite export (0 when it has no CUPTI kernel table: the program died before nsys
    flushed them); None when there is no readable export to tell."""
    import sqlite3

    if not sqlite.is_file():
        return None
    try:
        con = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            return 0
        return int(con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0])
    except sqlite3.Error:
        return None
    finally:
        con.close()


def _finish_nsys(
    result: PassResult,
    nsys: tools.Tool | None,
    raw: Path,
    log_path: Path,
    log: Callable[..., None],
    grace_s: float,
    stem: str = "nsys",
) -> None:
    """Make sure an .sqlite exists: export it from the .nsys-rep when the profile's own export did not finish;
    explain a lone .qdstrm (the importer could not run)."""
    rep, sqlite = raw / f"{stem}.nsys-rep", raw / f"{stem}.sqlite"
    if sqlite.is_file() and sqlite.stat().st_size > 0:
        return
    if rep.is_file() and nsys is not None:
        log("start", "nsys-export", f"no {sqlite.name} yet; exporting it from {rep.name}")
        argv = tools.nsys_export_command(nsys.path, rep)
        try:
            with log_path.open("ab") as f:
                proc = subprocess.Popen(
                    argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=tools.nsys_env()
                )
                try:
                    code = proc.wait(timeout=max(600.0, grace_s))
                except BaseException:  # timeout or Ctrl-C: stop the export and reap it before going on
                    proc.kill()
                    proc.wait()
                    raise
            ok = code == 0 and sqlite.is_file()
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok = False
            log("error", "nsys-export", f"nsys export failed: {exc}")
        if ok:
            log("done", "nsys-export", f"exported {sqlite.name}")
            return
        extra = f"nsys export of {rep.name} failed (see raw/{log_path.name}); run `{' '.join(argv)}` later"
    elif list(raw.glob("*.qdstrm")):
        extra = (
            f"nsys wrote only a .qdstrm: its QdstrmImporter could not build the report (libdw.so.1 missing?) — "
            f"{tools.LIBDW_FIX}"
        )
    else:
        extra = f"nsys wrote no report (see raw/{log_path.name})"
    result.reason = f"{result.reason}; {extra}" if result.reason else extra


def _finish_ncu(result: PassResult, raw: Path, log_path: Path, nvtx_include: str | None) -> None:
    if (raw / "ncu.ncu-rep").is_file():
        return
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        text = ""
    if "No kernels were profiled" in text and (result.interrupted or result.timed_out):
        # stopped before the program reached a profiled kernel: nothing is wrong with the ranges
        where = f" inside NVTX ranges matching {nvtx_include}" if nvtx_include else ""
        extra = f"ncu profiled no kernels before it was stopped (none had run{where} yet)"
    elif "No kernels were profiled" in text:
        where = f"inside NVTX ranges matching {nvtx_include}" if nvtx_include else "at all"
        extra = (
            f"ncu profiled no kernels: none ran {where}; wrap the GEMMs in tracekit ranges "
            "(tracekit.collectors.ranges), use --instrument, or --all-kernels"
        )
    else:
        problem = _ncu_problem(log_path)
        extra = f"ncu wrote no report ({problem or f'see raw/{log_path.name}'})"
    if result.reason and extra.removeprefix("ncu wrote no report (").rstrip(")") in result.reason:
        extra = "ncu wrote no report"
    result.reason = f"{result.reason}; {extra}" if result.reason else extra


_RANK_OUTPUTS = {
    "nsys": ("nsys", ".nsys-rep"),
    "ncu": ("ncu", ".ncu-rep"),
    "torch": ("torch_trace", ".json.gz"),
}


def _finish_ranks(
    result: PassResult,
    tool: str,
    ranks: RankLaunch,
    plan: _Plan,
    raw: Path,
    log_path: Path,
    log: Callable[..., None],
    grace_s: float,
    nvtx_include: str | None,
) -> None:
    """After a pass with one profiler per rank: every rank's report there (nsys ones exported to SQLite), and the
    ranks the launcher should have started all accounted for; what is missing becomes the pass's reason."""
    if tool not in _RANK_OUTPUTS:
        return
    stem, suffix = _RANK_OUTPUTS[tool]
    found = rank_files(raw, stem, suffix)
    if tool == "nsys":
        for rank in found:
            sub = PassResult(tool, result.argv)
            nsys = plan.nsys if not result.interrupted else None
            _finish_nsys(sub, nsys, raw, log_path, log, grace_s, stem=f"{stem}.rank{rank}")
            if sub.reason:
                result.reason = f"{result.reason}; rank {rank}: {sub.reason}" if result.reason else sub.reason
    if not found:
        extra = f"no rank wrote a {stem}.rank<R>{suffix} (see raw/{log_path.name})"
        if tool == "ncu":
            probe = PassResult(tool, result.argv)
            _finish_ncu(probe, raw, log_path, nvtx_include)
            extra = probe.reason or extra
        result.reason = f"{result.reason}; {extra}" if result.reason else extra
        return
    if ranks.world_size is not None:
        missing = sorted(set(range(ranks.world_size)) - set(found))
        if missing and len(found) < ranks.world_size:
            extra = (
                f"{tool}: {len(found)} of {ranks.world_size} ranks wrote a report (missing ranks "
                f"{', '.join(map(str, missing[:16]))}; see raw/{log_path.name})"
            )
            result.reason = f"{result.reason}; {extra}" if result.reason else extra
