"""``tracekit capture``: run a benchmark under ncu / nsys / the PyTorch profiler into a run, then import it."""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from pathlib import Path
from typing import Any

import click

from tracekit.collectors.torchprof import DEFAULT_TRACE_REPEATS

HELP = """Run CMD under Nsight Compute, Nsight Systems and/or the PyTorch profiler into a new run folder.

\b
Examples:
  tracekit capture -- python bench.py                    # nsys if found, else the PyTorch profiler
  tracekit capture --nsys --ncu -- python bench.py       # a timeline pass, then an ncu pass
  tracekit capture --ncu --instrument -- python serve.py # tracekit ranges around torch's GEMMs, no code change
  tracekit capture --ncu --clock-control base -- ./gemm  # ncu's locked base clock instead of your clocks
  tracekit capture --ncu --ranges 'attn|mlp' -- python serve.py  # ncu only inside YOUR NVTX ranges matching it
  tracekit capture --torch-profiler --timeout 600 -o runs/fp8 -- python -m mypkg.bench
  tracekit capture --ranks --nsys -- torchrun --nproc-per-node 8 bench.py         # one timeline per rank
  tracekit capture --ranks --launcher 'mpirun -np 8' --nsys --ncu -- python bench.py

\b
Multi-GPU (--ranks): the profilers go inside the launcher, one per rank, each writing raw/<tool>.rank<R>.*;
the import merges them into one run whose frames carry the rank (partitioned by rank on disk). A torchrun command
is rewritten with --no-python so each worker runs `<profiler> python bench.py`; any other launcher is named with
--launcher, and the rank is read from --rank-env (default: the first set of RANK, OMPI_COMM_WORLD_RANK, PMI_RANK,
PMIX_RANK, SLURM_PROCID). See docs/RANKS.md.

\b
What each tool gives:
  --nsys            timeline: every kernel with its NVTX range, launch gaps, grid/block, registers (.nsys-rep + .sqlite)
  --ncu             per-kernel hardware metrics (clock, tensor-pipe use, occupancy and its limiter, DRAM bytes, stalls)
                    for kernels inside tracekit NVTX ranges (or --ranges, or --all-kernels); slow: every profiled
                    kernel is replayed 20-30 times, so the pass is bounded (below)
  --torch-profiler  Kineto trace of a Python script (kernels, record_function ranges); no Nsight tools needed;
                    it starts when the script imports torch; by default (--torch-ops shapes) every ATen
                    operator is recorded with its input shapes, so the GEMMs of code tracekit never saw get
                    M, N, K and achieved TFLOP/s (cost over --torch-ops ranges: measured in docs/NOTES.md);
                    GEMM kernels replayed from a CUDA graph sit in the range that replays the graph and take
                    the shapes of the operators recorded while it was captured; in a tracekit benchmark each
                    worker records --trace-repeats repeats of each measurement (default 3, a trace file each,
                    ranges only: tracekit's ranges name the shapes) and nothing of the warm-up or the timed
                    repeats, which run as in a plain sweep
Each tool runs CMD once, in its own pass (ncu and nsys cannot nest). A tracekit benchmark inside writes its own
measurements and failures into the run ($TRACEKIT_RUN_DIR). nsys records every kernel of a CUDA-graph replay
(--cuda-graph-trace=node), so GEMMs launched from graphs keep their kernels (--nsys-arg=--cuda-graph-trace=graph
replaces it where that costs too much). --ncu-arg / --nsys-arg add options of your own after tracekit's; run.json
records them.

\b
--ranges REGEX: ncu profiles only the kernels inside your own NVTX push/pop ranges (default domain) whose name
REGEX matches anywhere (Python re.search style); no ncu --nvtx-include syntax needed. ncu reads / , @ as syntax,
so each becomes "." (any character) in the filter; run.json records REGEX and the filter built
(capture.ncu.ranges, capture.ncu.nvtx_include). Example: --ranges 'layer[0-9]+/attn' profiles ranges named like
layer3/attn.

\b
The ncu pass is bounded: it profiles at most N launches (--max-per-range N, default 2) of each launch
configuration inside the selected ranges. Inside tracekit's ranges that is the first N launches of each range
name (a range is one GEMM call: the same kernel in two shapes is profiled in both). With --ranges or
--all-kernels, Nsight Compute counts launches per kernel and grid, block and shared memory (--filter-mode
per-launch-config --launch-count N; two kernels sharing a configuration each get N, measured): a serving
step's pass went from unfinished after 200 s (every launch in its ranges) to 65 s for 76 kernels (2 of each
of 38 kernel configurations, every GEMM kernel among them) on an H100 (docs/NOTES.md).
--launch-count N instead profiles the first N kernels in all. --ncu-budget SECONDS ends the profiling after
that long and lets the program finish unprofiled (a Python program calls cuProfilerStop itself; any other
program is stopped); run.json (capture.passes[].ncu) and `tracekit show` say how many kernels were profiled
and what was not. Before the pass tracekit prints what it will profile and the bound.

\b
When the program crashes (a signal, a CUDA fault, a hang past --timeout) the run holds one failure of kind
crashed / timeout with the signal, the Python stack (a Python command runs with PYTHONFAULTHANDLER=1 unless you
set it), the last 50 lines of the program's stderr and, with --instrument, the GEMM call in flight (backend, M, N,
K, dtypes, caller). The program's own output is kept whole in raw/program.stdout / raw/program.stderr
(raw/program.<pass>.* with several passes), apart from each profiler's log (raw/<pass>.log).
Under nsys a Python program gets a fatal-signal handler that stops the profiler before the process dies, so the
timeline keeps the kernels it ran (on an H200: 52 of 52 after a SIGSEGV, none without it); --crash-flush none
turns it off.

\b
Missing tools (exit 3):
  ncu:  comes with the CUDA toolkit (/usr/local/cuda/bin/ncu); else --ncu-path or TRACEKIT_NCU=PATH
  nsys: Nsight Systems, or the copy inside Nsight Compute
        (/opt/nvidia/nsight-compute/<v>/host/target-linux-x64/nsys); else --nsys-path or TRACEKIT_NSYS=PATH.
        If that copy writes only a .qdstrm (libdw.so.1 missing): apt-get install libdw1 libelf1, or put
        libdw.so.1 and libelf.so.1 in a folder DIR and export TRACEKIT_NSYS_LIBS=DIR.
  ncu ERR_NVGPUCTRPERM: run as root, or load the driver with NVreg_RestrictProfilingToAdminUsers=0.

\b
Signals: Ctrl-C, SIGTERM (timeout, a Slurm or Kubernetes time limit, kill) and SIGHUP (the terminal closed)
stop the pass the same way: the profiler and the program get SIGINT (a profiler writes what it has), then
SIGTERM, then SIGKILL, so no ncu or nsys is left running; every file is kept and the run is marked incomplete
with the reason ("terminated by SIGTERM during the ncu pass"). A signal ignored when tracekit starts (nohup's
SIGHUP) stays ignored.

\b
Exit codes: 0 complete; 3 a tool is missing; 4 incomplete (the command failed, timed out or a tool failed:
artifacts are kept, the run is marked with the reason); 130 Ctrl-C, 143 SIGTERM, 129 SIGHUP (the partial run
is kept, marked incomplete).
"""


def _trace_repeats(ctx: click.Context, param: click.Parameter, value: str) -> int | None:
    from tracekit.collectors.torchprof import parse_trace_repeats

    try:
        return parse_trace_repeats(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a positive integer or all") from None


class _Progress:
    """Draws capture events on stderr (a rich spinner per phase on a terminal, plain lines otherwise) and
    routes the child's output so it never tangles with the spinner or pollutes ``--json`` stdout."""

    def __init__(self, as_json: bool, quiet: bool) -> None:
        from tracekit.text import make_console

        self.console = make_console(stderr=True, highlight=False, soft_wrap=True)
        self.as_json = as_json
        self.quiet = quiet
        self.live = self.console.is_terminal
        self.status: Any = None
        self.lock = threading.Lock()
        self.partial: dict[str, bytes] = {"stdout": b"", "stderr": b""}
        # through the console when both go to the same terminal (or stdout must stay clean for --json)
        self.stdout_via_console = as_json or (self.live and sys.stdout.isatty())

    def event(self, ev: Any) -> None:
        from rich.text import Text

        from tracekit.commands._render import safe

        with self.lock:
            if ev.kind == "start" and self.live:
                self._stop_status()
                self.status = self.console.status(Text(safe(ev.message, 160)))
                self.status.start()
                return
            if ev.kind in ("done", "error", "warning"):
                self._stop_status() if ev.kind != "warning" else None
            if self.quiet and ev.kind == "info":
                return
            style = {"error": "red", "warning": "yellow", "done": "green"}.get(ev.kind, "")
            mark = {"error": "✗", "warning": "!", "done": "✓", "start": "…"}.get(ev.kind, "·")
            self.console.print(Text(f"tracekit: {mark} {safe(ev.message)}", style=style))

    def _stop_status(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None

    def output(self, stream: str, data: bytes) -> None:
        if stream == "stdout" and not self.stdout_via_console:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        if not self.live:
            sys.stderr.buffer.write(data)
            sys.stderr.buffer.flush()
            return
        from rich.text import Text

        with self.lock:
            text = self.partial[stream] + data
            head, sep, rest = text.rpartition(b"\n")
            self.partial[stream] = rest
            if sep:
                self.console.print(Text(head.decode(errors="replace")), markup=False, highlight=False)

    def close(self) -> None:
        with self.lock:
            self._stop_status()
            for stream, rest in self.partial.items():
                if rest:
                    self.console.print(rest.decode(errors="replace"), markup=False, highlight=False)
                    self.partial[stream] = b""


def _import(run: Any, progress: _Progress) -> tuple[dict[str, Any] | None, str | None]:
    """Build the run's frames with the importer; polars missing (a bare GPU environment, where the capture itself
    needs none: tests/capture/test_capture_without_polars.py) is a warning, not a failure."""
    try:
        from tracekit.analyzers.importer import import_into
    except ImportError as exc:  # polars (the importer always ships)
        return None, (
            f"frames not built ({exc}); on a machine with tracekit's analysis dependencies run "
            f"`tracekit import --rebuild {run.path}`"
        )
    from tracekit.errors import TracekitError

    def on_event(message: str) -> None:
        progress.event(_Event("info", "import", message))

    progress.event(_Event("start", "import", "building frames"))
    try:
        summary = import_into(run, on_event)
    except TracekitError as exc:
        return None, f"import failed: {exc.one_line()}"
    progress.event(_Event("done", "import", "frames built"))
    return summary, None


def _signal_name(exc: BaseException | None) -> str | None:
    """SIGINT / SIGTERM / SIGHUP: what stopped the capture (None when nothing did)."""
    if exc is None:
        return None
    import signal

    return signal.Signals(getattr(exc, "signum", signal.SIGINT)).name


class _Event:
    def __init__(self, kind: str, phase: str, message: str) -> None:
        self.kind, self.phase, self.message = kind, phase, message


@click.command(
    "capture",
    help=HELP,
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
)
@click.option("--ncu", "use_ncu", is_flag=True, help="Pass under Nsight Compute (metrics per GEMM kernel).")
@click.option("--nsys", "use_nsys", is_flag=True, help="Pass under Nsight Systems (timeline).")
@click.option(
    "--torch-profiler", "use_torch", is_flag=True, help="Pass under the PyTorch profiler (Python only)."
)
@click.option(
    "--torch-ops",
    type=click.Choice(["shapes", "ranges", "all"]),
    default="shapes",
    show_default=True,
    help="PyTorch profiler's CPU events: shapes = record_function ranges and every ATen operator with its input "
    "shapes, so GEMM ops (aten::mm, addmm, _scaled_mm, ...) get M, N, K and FLOPs (its cost over ranges: "
    "measured in docs/NOTES.md); ranges = record_function ranges only (enough where GEMMs sit in tracekit ranges, "
    "which name their shapes); all = every ATen operator, no shapes.",
)
@click.option(
    "--trace-repeats",
    default=str(DEFAULT_TRACE_REPEATS),
    show_default=True,
    metavar="N|all",
    callback=_trace_repeats,
    help="PyTorch profiler, for a tracekit benchmark inside: record N repeats of each measurement after its "
    "warm-up (every GEMM in its range) and nothing else; all = every launch (slower: the profiler's cost "
    "grows with --repeats, and the timed repeats run under it).",
)
@click.option(
    "--instrument", is_flag=True, help="Wrap torch's GEMM entry points in tracekit ranges (no code change)."
)
@click.option(
    "--ncu-path", type=click.Path(path_type=Path), help="ncu executable (else $TRACEKIT_NCU, PATH, ...)."
)
@click.option(
    "--nsys-path", type=click.Path(path_type=Path), help="nsys executable (else $TRACEKIT_NSYS, PATH, ...)."
)
@click.option(
    "--clock-control",
    type=click.Choice(["none", "base"]),
    default="none",
    show_default=True,
    help="ncu clock control: none = the clocks your run sees; base = ncu's locked base clock.",
)
@click.option(
    "--sections",
    help="Comma-separated ncu sections (default: SpeedOfLight,Occupancy,LaunchStats,ComputeWorkloadAnalysis,"
    "MemoryWorkloadAnalysis,WarpStateStats).",
)
@click.option("--metrics", help="Comma-separated extra ncu metrics ('' for none).")
@click.option(
    "--all-kernels", is_flag=True, help="ncu: profile every kernel, not only those inside tracekit ranges."
)
@click.option(
    "--ranges",
    "ranges_regex",
    metavar="REGEX",
    help="ncu: profile only kernels inside your own NVTX ranges whose name matches REGEX, e.g. 'attn|mlp'.",
)
@click.option(
    "--crash-flush",
    type=click.Choice(["none", "profiler-stop"]),
    default="profiler-stop",
    show_default=True,
    help="nsys, Python programs: on a fatal signal, stop the profiler (cuProfilerStop) before the process dies "
    "so the timeline keeps its kernels.",
)
@click.option(
    "--max-per-range",
    type=click.IntRange(min=1),
    metavar="N",
    help="ncu: profile at most N launches of each launch configuration inside the selected ranges (default "
    "$TRACEKIT_NCU_MAX_PER_RANGE or 2). Inside tracekit's ranges: the first N launches of each range name (one "
    "GEMM call each); with --ranges or --all-kernels: of each grid/block/shared-memory configuration (ncu "
    "--filter-mode per-launch-config --launch-count N).",
)
@click.option(
    "--launch-count",
    type=click.IntRange(min=1),
    metavar="N",
    help="ncu: profile the first N kernels in all, then none (with --ranges or --all-kernels it replaces ncu's "
    "per-configuration count of --max-per-range: ncu applies one count).",
)
@click.option(
    "--ncu-kernels",
    type=click.Choice(["gemm", "all"]),
    default="gemm",
    show_default=True,
    help="ncu, with --ranges or --all-kernels: gemm profiles only the GEMM kernels (with their split-K reduce and "
    "quantize kernels) of a timeline, each kernel, launch configuration and place once; all profiles every "
    "kernel. The timeline is the --nsys pass's or, without --nsys, a planning pass's: nsys (found as for --nsys) "
    "runs the program once first, and its timeline is kept and imported like an --nsys pass's.",
)
@click.option(
    "--no-plan-pass",
    "no_plan_pass",
    is_flag=True,
    help="ncu without --nsys: no planning pass; the ncu pass profiles every kernel of the ranges, bounded by "
    "--max-per-range (use it where running the program twice costs more than profiling the other kernels).",
)
@click.option(
    "--ncu-budget",
    type=click.FloatRange(min=0, min_open=True),
    metavar="SECONDS",
    help="ncu: after SECONDS of the ncu pass, profile nothing more and let the program run on (a Python "
    "program stops ncu's profiling itself; any other is stopped); run.json and show say what was not profiled.",
)
@click.option(
    "--ncu-arg",
    "ncu_args",
    multiple=True,
    metavar="ARG",
    help="Extra ncu option, placed after tracekit's own (repeatable), e.g. --ncu-arg=--cache-control=none.",
)
@click.option(
    "--nsys-arg",
    "nsys_args",
    multiple=True,
    metavar="ARG",
    help="Extra nsys option, placed after tracekit's own (repeatable), e.g. --nsys-arg=--cuda-memory-usage=true.",
)
@click.option(
    "--ranks",
    "use_ranks",
    is_flag=True,
    help="One profiler per rank inside the launcher (torchrun after --, or --launcher); files named by rank.",
)
@click.option(
    "--launcher",
    metavar="TEXT",
    help="With --ranks: the launcher that starts the ranks, e.g. 'mpirun -np 8' or 'srun -n 8' (CMD is one rank).",
)
@click.option(
    "--rank-env",
    metavar="VAR",
    help="With --ranks: environment variable holding each process's rank (default: RANK, OMPI_COMM_WORLD_RANK, "
    "PMI_RANK, PMIX_RANK, SLURM_PROCID).",
)
@click.option(
    "-o", "--out", type=click.Path(path_type=Path), help="Run folder to create (default: RUNS_DIR/<name>)."
)
@click.option(
    "--runs-dir",
    type=click.Path(path_type=Path),
    default=Path("runs"),
    show_default=True,
    help="Where runs go.",
)
@click.option(
    "--timeout", type=click.FloatRange(min=0, min_open=True), help="Stop each pass after S seconds."
)
@click.option(
    "--no-import",
    is_flag=True,
    help="Keep raw files only; build frames later with tracekit import --rebuild.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object on stdout (progress stays on stderr)."
)
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED, required=True)
def capture(
    use_ncu: bool,
    use_nsys: bool,
    use_torch: bool,
    torch_ops: str,
    trace_repeats: int | None,
    instrument: bool,
    ncu_path: Path | None,
    nsys_path: Path | None,
    clock_control: str,
    sections: str | None,
    metrics: str | None,
    all_kernels: bool,
    ranges_regex: str | None,
    crash_flush: str,
    max_per_range: int | None,
    launch_count: int | None,
    ncu_kernels: str,
    no_plan_pass: bool,
    ncu_budget: float | None,
    ncu_args: tuple[str, ...],
    nsys_args: tuple[str, ...],
    use_ranks: bool,
    launcher: str | None,
    rank_env: str | None,
    out: Path | None,
    runs_dir: Path,
    timeout: float | None,
    no_import: bool,
    as_json: bool,
    cmd: tuple[str, ...],
) -> None:
    from tracekit.collectors import tools
    from tracekit.collectors.capture import (
        CaptureInterrupted,
        CaptureSettings,
        NcuSettings,
        NsysSettings,
        TorchSettings,
        interrupt_reason,
        signals_as_interrupts,
    )
    from tracekit.collectors.capture import capture as run_capture
    from tracekit.errors import EXIT_INCOMPLETE, interrupt_exit_code
    from tracekit.naming import NCU_FILTER
    from tracekit.run import STATUS_INCOMPLETE

    argv = list(cmd)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if ranges_regex is not None and all_kernels:
        raise click.UsageError("--ranges and --all-kernels contradict each other: give one of them")
    ranks = None
    if use_ranks or launcher or rank_env:
        from tracekit.collectors.ranks import plan_ranks

        ranks = plan_ranks(argv, launcher=launcher, rank_env=rank_env)

    def split(text: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
        if text is None:
            return tuple(default)
        return tuple(t.strip() for t in text.split(",") if t.strip())

    asked = (("nsys", use_nsys), ("torch", use_torch), ("ncu", use_ncu))
    settings = CaptureSettings(
        tools=tuple(tool for tool, on in asked if on),
        ncu=NcuSettings(
            path=ncu_path,
            sections=split(sections, tools.DEFAULT_SECTIONS),
            metrics=split(metrics, tools.DEFAULT_METRICS),
            nvtx_include=None if all_kernels else NCU_FILTER,
            clock_control=clock_control,
            max_per_range=max_per_range,
            launch_count=launch_count,
            budget_s=ncu_budget,
            extra=ncu_args,
            kernels=ncu_kernels,
            plan_pass=not no_plan_pass,
        ),
        nsys=NsysSettings(path=nsys_path, extra=nsys_args, crash_flush=crash_flush),
        torch=TorchSettings(ops=torch_ops, trace_repeats=trace_repeats),
        instrument=instrument,
        timeout=timeout,
        ranks=ranks,
        ranges=ranges_regex,
        out=out,
        runs_dir=runs_dir,
    )
    progress = _Progress(as_json, quiet=False)
    interrupted: BaseException | None = None
    try:
        try:
            run = run_capture(argv, settings, on_event=progress.event, on_output=progress.output)
        except CaptureInterrupted as exc:
            run, interrupted = exc.run, exc
        summary, import_problem = (None, None)
        if not no_import and interrupted is None:
            try:
                with signals_as_interrupts():
                    summary, import_problem = _import(run, progress)
            except KeyboardInterrupt as exc:
                # The capture is complete and kept; frames are recorded as current only once all are written,
                # so the next command (or import --rebuild) builds them from raw/.
                interrupted = exc
                said = interrupt_reason(getattr(exc, "signum", None), "while building frames")
                import_problem = (
                    f"{said}; the capture is complete and kept — "
                    f"`tracekit import --rebuild {run.path}` builds them"
                )
                with contextlib.suppress(Exception):
                    run.log("import", import_problem, level="error")
    finally:
        progress.close()
    if import_problem:
        progress.event(_Event("warning", "import", import_problem))
    import msgspec

    passes = msgspec.to_builtins(run.record.capture.passes or [])
    data = {
        "run": str(run.path),
        "status": run.status,
        "incomplete_reason": run.record.incomplete_reason,
        "interrupted": interrupted is not None,
        "signal": _signal_name(interrupted),
        "passes": passes,
        "import": summary,
        "import_problem": import_problem,
    }
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        from rich.text import Text

        from tracekit.commands._render import safe
        from tracekit.text import make_console

        console = make_console(highlight=False, soft_wrap=True)
        style = "green" if run.status != STATUS_INCOMPLETE else "yellow"
        console.print(Text(f"run {safe(run.path)}  status: {run.status}", style=f"bold {style}"))
        if data["incomplete_reason"]:
            console.print(Text(f"  incomplete: {safe(data['incomplete_reason'])}", style="yellow"))
        for p in passes:
            files = ", ".join(Path(f).name for f in p.get("files", [])) or "no files"
            console.print(
                Text(
                    f"  {p['tool']:<6} {p['status']:<10} {p['wall_s']:>8.1f} s  exit {p['exit_code']}  {files}"
                )
            )
        if summary:
            rows = summary.get("rows", {})
            console.print(
                Text(
                    f"  frames: {rows.get('kernels', 0)} kernels, {rows.get('ranges', 0)} ranges, "
                    f"{rows.get('ncu', 0)} ncu kernels, {rows.get('measurements', 0)} measurements, "
                    f"{rows.get('failures', 0)} failures"
                    + (f", {len(summary['ranks'])} ranks" if summary.get("ranks") else "")
                    + (" (partial import)" if summary.get("partial") else "")
                )
            )
            console.print(Text(f"  next: tracekit show {safe(run.path)}"))
    if interrupted is not None:
        sys.exit(interrupt_exit_code(interrupted))
    if run.status == STATUS_INCOMPLETE or (summary and summary.get("partial")):
        sys.exit(EXIT_INCOMPLETE)
