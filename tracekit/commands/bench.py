"""``tracekit bench gemm``: time GEMM backends over model shapes into a run; failures are recorded as data."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from tracekit.commands._options import gpu_option, out_option, stall_timeout_option
from tracekit.errors import BadInputError, IncompleteError, MissingToolError
from tracekit.numbers import formatted
from tracekit.records import environment_of

_KINDS_HELP = """\b
Failure kinds (raw/failures.jsonl, `tracekit show RUN`):
  unsupported  the library says this GPU or configuration is not supported
               (FlashInfer "does not support backend ... with capability 90",
               cuBLAS CUBLAS_STATUS_NOT_SUPPORTED, torch "Invalid scaling configuration")
  unavailable  a package is not installed here (e.g. sgl-kernel): install it to measure
  crashed      an exception, a CUDA fault (illegal address / instruction) or a
               signal (SIGSEGV ...); the backend's other shapes still run
  wrong        it ran, but the output is all zeros, NaN, or off the fp32 reference
               beyond the dtype's tolerance
  timeout      no progress for --stall-timeout seconds on one shape: the worker was killed"""


def _backends_epilog(names: list[str], registry: dict[str, Any]) -> str:
    """The --help epilog of a bench command: one line per built-in backend, then what each failure kind means."""
    width = max(len(n) for n in names)
    lines = "\n".join(f"  {name.ljust(width)}  {registry[name].description}" for name in names)
    return "\b\nBackends (--backends all = every one):\n" + lines + "\n\n" + _KINDS_HELP


class _BenchCommand(click.Command):
    """Lists the backends in --help without importing anything heavy (the backend registries import no torch)."""

    def backend_table(self) -> tuple[list[str], dict[str, Any]]:
        raise NotImplementedError

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.indentation():
            formatter.write_text(_backends_epilog(*self.backend_table()))


class _GemmCommand(_BenchCommand):
    def backend_table(self) -> tuple[list[str], dict[str, Any]]:
        from tracekit.collectors.backends import BACKENDS, BUILTIN

        return list(BUILTIN), BACKENDS


@dataclass(frozen=True)
class SweepTiming:
    """How a sweep times each case: ``--repeats``, ``--warmup``, ``--stall-timeout``, ``--timing`` and ``--gpu``,
    declared once (:func:`sweep_timing_options`) for ``bench gemm``, its ``--shapes-from`` and ``bench moe``."""

    repeats: int
    warmup: int
    stall_timeout: float
    timing: str
    gpu: int

    def check(self) -> None:
        """BadInputError for counts no sweep can run."""
        if self.repeats < 1 or self.warmup < 0 or self.stall_timeout <= 0:
            raise BadInputError("--repeats must be >= 1, --warmup >= 0 and --stall-timeout > 0")

    def settings(self) -> dict[str, Any]:
        """The fields of a sweep's settings (``collectors.bench.Options``) these options fill."""
        return {
            "warmup": self.warmup,
            "repeats": self.repeats,
            "timeout": self.stall_timeout,
            "timing": self.timing,
            "device": self.gpu,
        }


def sweep_timing_options(unit: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The timing options of a bench command, the command receiving them as one :class:`SweepTiming` ``sweep``;
    ``unit`` is what one timed case is called in their help (shape, case)."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def command(
            *args: Any, repeats: int, warmup: int, stall_timeout: float, timing: str, gpu: int, **kwargs: Any
        ) -> Any:
            return f(*args, sweep=SweepTiming(repeats, warmup, stall_timeout, timing, gpu), **kwargs)

        for option in reversed(
            (
                click.option(
                    "--repeats",
                    default=25,
                    show_default=True,
                    help=f"Timed samples per {unit} (median, p10, p90).",
                ),
                click.option("--warmup", default=10, show_default=True, help="Warm-up passes before timing."),
                stall_timeout_option(
                    f"Seconds without progress on one {unit} before its worker is killed.", 300.0
                ),
                click.option(
                    "--timing",
                    type=click.Choice(["auto", "graph", "events"]),
                    default="auto",
                    show_default=True,
                    help="CUDA-graph replays, eager CUDA events, or auto (graph unless a profiler is attached).",
                ),
                gpu_option,
            )
        ):
            command = option(command)
        return command

    return decorate


@click.group()
def bench() -> None:
    """Benchmark GEMM backends (`tracekit bench gemm --help`) and grouped MoE GEMMs (`tracekit bench moe --help`)."""


@bench.command("gemm", cls=_GemmCommand)
@click.option(
    "--backends",
    default="torch-bf16,torch-fp8-tensorwise",
    show_default=True,
    help="Comma-separated backend names, or 'all'.",
)
@click.option(
    "--shapes",
    default="glm5",
    show_default=True,
    help="'glm5' (M 16..4096 x (N,K) (768,6144),(2048,6144)) or MxNxK,...",
)
@out_option("Run folder to create [runs/<time>-bench-gemm-<id>].", type=click.Path(path_type=Path))
@sweep_timing_options("shape")
@click.option(
    "--shapes-from",
    "shapes_from",
    type=click.Path(path_type=Path),
    default=None,
    help="A profiled run (folder, bundle or profiler file): its GEMM cases with shapes and dtypes, most GEMM "
    "time first, each timed with every backend of its dtype that runs on this GPU (--backends narrows it).",
)
@click.option(
    "--what-if",
    "what_if",
    default=None,
    help="With --shapes-from: also time lower-precision backends (fp8, fp4), reported apart, e.g. fp8,fp4.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="With --shapes-from: print the plan (shapes, dtypes, calls, backends, what-ifs) and run nothing "
    "(no GPU, no torch).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON object {run, status, gemms, failures} on stdout (--shapes-from adds "
    "recommendation; --dry-run prints {plan}).",
)
def gemm(
    backends: str,
    shapes: str,
    shapes_from: Path | None,
    what_if: str | None,
    dry_run: bool,
    out: Path | None,
    sweep: SweepTiming,
    as_json: bool,
) -> None:
    """Time each GEMM backend over the shapes into a new run (one worker process per backend).

    Every backend x shape ends as a measurement (median / p10 / p90 µs, TFLOP/s, error vs an fp32 reference,
    NVML clock / power / throttle reasons) or as a failure, recorded in full with its kind. Failures are data:
    the command exits 0 when the sweep ran to the end, 4 when it was cut short (partial results kept).

    \b
    With --shapes-from RUN the shapes come from a profiled run's GEMM cases (its Analysis: a PyTorch-profiler
    serving step, an nsys + ncu capture, an ncu report), and after the sweep a recommendation table says per
    shape: the run's own GEMM time per call (mean per call), the fastest working backend and its time, and the
    projected saving over the run's calls (Δ per call x calls, and its share of the run's GPU time). The bench
    run keeps the source run's path and hashes in run.json; `tracekit report` and `tracekit view` show the
    table (docs/GEMM_OPS.md).

    \b
    Examples:
      tracekit bench gemm                                    # bf16 vs fp8 on GLM-5 shapes
      tracekit bench gemm --shapes-from samples/h100-serve-torchprof --dry-run   # the plan, no GPU
      tracekit bench gemm --shapes-from samples/h100-serve-torchprof --what-if fp8 --dry-run --json
      tracekit bench gemm --shapes-from my-step-run --what-if fp8 -o step-backends   # on the GPU: measure
      tracekit bench gemm --backends all -o runs/h200-all    # every backend, FP4 failures included
      tracekit bench gemm --backends torch-bf16 --shapes 1024x2048x6144,4096x768x6144 --json
      tracekit capture --ncu -- tracekit bench gemm --shapes 1024x2048x6144   # profile the same GEMMs
    """
    from tracekit.collectors.backends import all_backends
    from tracekit.collectors.bench import SweepSettings, parse_shapes

    known = all_backends()
    if shapes_from is not None:
        ctx = click.get_current_context()
        if ctx.get_parameter_source("shapes") != click.core.ParameterSource.DEFAULT:
            raise BadInputError("--shapes and --shapes-from exclude each other", "give one of them")
        explicit = ctx.get_parameter_source("backends") != click.core.ParameterSource.DEFAULT
        chosen = _pick_backends(backends, known, "backend") if explicit else None
        sweep.check()
        _gemm_from(shapes_from, what_if, dry_run, chosen, out, sweep, as_json)
        return
    if dry_run or what_if:
        raise BadInputError("--dry-run and --what-if go with --shapes-from RUN", "add --shapes-from RUN")
    names = _pick_backends(backends, known, "backend")
    shape_list = parse_shapes(shapes)
    sweep.check()
    settings = SweepSettings(backends=names, shapes=shape_list, **sweep.settings())
    cuda = any(known[n].timer == "cuda" for n in names)
    environment = _require_gpu(settings.python, sweep.gpu) if cuda else None
    run_dir, inside = _sweep_dir(out, "gemm")
    result = _sweep(run_dir, settings, len(names) * len(shape_list), "gemm", environment)
    if inside is not None:
        _hand_over(result.run, inside)
    if as_json:
        payload = {
            "run": str(result.run.path),
            "status": result.status,
            "gemms": result.measurements,
            "failures": result.failures,
        }
        click.echo(json.dumps(payload, indent=2, default=str))
    else:
        _print_table(result)
    if result.status != "complete":
        raise IncompleteError(f"the sweep into {result.run.path} did not finish", result.reason or "")


def _gemm_from(
    source: Path,
    what_if: str | None,
    dry_run: bool,
    chosen: list[str] | None,
    out: Path | None,
    sweep: SweepTiming,
    as_json: bool,
) -> None:
    """``bench gemm --shapes-from``: plan from the source run's Analysis, then (unless --dry-run) time each
    backend at the shapes of its dtype and print the recommendation table."""
    from tracekit.analyzers.recommend import recommend, to_builtins
    from tracekit.collectors.backends import all_backends
    from tracekit.collectors.bench import ShapesFromSettings
    from tracekit.commands import _shapes_from as sf

    known = all_backends()
    plan = sf.load_plan(source, sf.parse_what_if(what_if))
    if dry_run:
        plan = sf.with_backends(plan, known, chosen, plan.compute_capability)
        sf.print_plan(plan, as_json)
        return
    python = sys.executable
    names = chosen or list(known)
    cuda = any(known[n].timer == "cuda" for n in names)
    environment = _require_gpu(python, sweep.gpu) if cuda else None
    here = environment_of(environment).compute_capability if environment else None
    plan = sf.with_backends(plan, known, chosen, here or plan.compute_capability)
    backends = plan.backends()
    if not backends:
        raise BadInputError(
            f"no backend runs the dtypes of {source}'s GEMMs on this GPU "
            f"({', '.join(sorted({r.dtype for r in plan.rows}))})",
            "see `tracekit bench gemm --shapes-from RUN --dry-run` for the plan, and --what-if fp8,fp4",
        )
    settings = ShapesFromSettings(
        backends=backends,
        shapes=plan.shapes(),
        per_backend={b: plan.shapes_of(b) for b in backends},
        plan=to_builtins(plan),
        **sweep.settings(),
    )
    run_dir, inside = _sweep_dir(out, "gemm")
    total = sum(len(v) for v in settings.per_backend.values())
    result = _sweep(run_dir, settings, total, "gemm", environment)
    if inside is not None:
        _hand_over(result.run, inside)
    rec = recommend(plan, result.measurements, result.failures)
    if as_json:
        payload = {
            "run": str(result.run.path),
            "status": result.status,
            "gemms": result.measurements,
            "failures": result.failures,
            "recommendation": to_builtins(rec),
        }
        click.echo(json.dumps(payload, indent=2, default=str))
    else:
        _print_table(result)
        sf.print_recommendation(rec)
    if result.status != "complete":
        raise IncompleteError(f"the sweep into {result.run.path} did not finish", result.reason or "")


def _capture_run_dir() -> Path | None:
    """The run of an enclosing `tracekit capture` (it exports TRACEKIT_RUN_DIR), if any."""
    value = os.environ.get("TRACEKIT_RUN_DIR")
    if not value:
        return None
    path = Path(value)
    return path if (path / "run.json").is_file() else None


def _hand_over(sweep_run: Any, capture_run: Path) -> None:
    """Copy the sweep's records into the capture's raw/ as ``measurements-<tool>.jsonl`` / ``failures-<tool>.jsonl``,
    and move its workers' PyTorch-profiler traces there.

    Under ncu the timings are distorted by replay and serialisation, so only failures are handed over from an ncu
    pass; the nsys / PyTorch-profiler / plain passes hand over both. The importer reads these files by content.
    """
    import shutil

    tool = os.environ.get("TRACEKIT_CAPTURE_TOOL", "run")
    raw = capture_run / "raw"
    # the workers' own PyTorch-profiler traces (collectors.bench.profiled_worker) are profiler output: moved
    for trace in sorted(sweep_run.raw_dir.glob("torch_trace.*.json.gz")):
        shutil.move(trace, raw / trace.name)
    wanted = ["failures"] if tool == "ncu" else ["measurements", "moe", "moe_curve", "failures"]
    for kind in wanted:
        src = sweep_run.raw_dir / f"{kind}.jsonl"
        if src.is_file() and src.stat().st_size:
            shutil.copyfile(src, raw / f"{kind}-{tool}.jsonl")


def _pick_backends(text: str, known: Mapping[str, object], what: str) -> list[str]:
    """``--backends``: a comma-separated list of names from ``known``, or ``all``; BadInputError names the unknown."""
    if text.strip().lower() == "all":
        return list(known)
    names = [b.strip() for b in text.split(",") if b.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise BadInputError(
            f"unknown {what}(s): {', '.join(unknown) or '(none given)'}",
            f"choose from: {', '.join(known)} (or 'all')",
        )
    return names


def _require_gpu(python: str, device: int) -> dict[str, Any]:
    """Check that torch (in ``python``, the workers' interpreter) sees CUDA device ``device`` and return the
    environment fingerprint that says so.

    The check runs in the fingerprint worker the sweep needs anyway, so this process never imports torch (3-5 s
    per sweep on an H200 host) and never starts CUDA (under nsys that would cost this process its own injection);
    nothing is created when the check fails."""
    if importlib.util.find_spec("torch") is None:
        raise MissingToolError(
            "torch is not installed here; the GEMM backends need torch with CUDA",
            "pip install torch (a CUDA build), plus flashinfer-python / sgl-kernel for those backends; "
            "or run `tracekit bench gemm` on the GPU machine and `tracekit show` the run here",
        )
    from tracekit.collectors.bench import take_fingerprint

    with tempfile.TemporaryDirectory(prefix="tracekit-fingerprint-") as tmp:
        env = take_fingerprint(python, device, Path(tmp) / "fingerprint.jsonl")
    found = environment_of(env)
    count = found.device_count or 0
    if not found.cuda_available:
        why = (
            found.cuda_error
            or found.torch_error
            or found.fingerprint_error
            or "torch.cuda.is_available() is False"
        )
        raise MissingToolError(
            f"no CUDA GPU is usable here ({str(why).strip().splitlines()[-1]})",
            "run on a machine with an NVIDIA GPU and a CUDA build of torch (check nvidia-smi)",
        )
    if device >= count:
        raise MissingToolError(f"CUDA device {device} does not exist ({count} visible)", "pick --gpu 0..N-1")
    return env


class _Progress:
    """A rich progress bar on stderr fed by the sweep's events (stdout stays data-only)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> _Progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from tracekit.text import make_console

        console = make_console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
            disable=not console.is_terminal,
        )
        self._progress.__enter__()
        self._task = self._progress.add_task("starting", total=self.total)
        self._console = console
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(*exc)

    def on_event(self, event: Any) -> None:
        p = self._progress
        if event.kind == "backend_started":
            p.update(self._task, description=event.backend)
        elif event.kind == "shape_done":
            p.advance(self._task)
        elif event.kind == "failure":
            m = event.shape
            shape = f"{m[0]}x{m[1]}x{m[2]}" if m else "?"
            first = (event.data.get("message") or "").strip().splitlines()[:1]
            p.console.print(
                f"[yellow]{event.backend} {shape}: {event.data.get('kind')}[/] {first[0][:160] if first else ''}",
                markup=True,
                highlight=False,
            )


def _print_table(result: Any) -> None:
    from tracekit.text import make_console

    console = make_console()
    console.print(gemm_table(result.measurements, f"GEMMs — {result.run.path}", console.width))
    if result.failures:
        console.print(_failures_table(result.failures, "M", console.width))


def _text_table(
    rows: list[dict[str, Any]], cols: list[str], title: str, width: int | None, **layout: Any
) -> Any:
    """``rows`` (every cell already text) drawn by the commands' shared layout
    (:func:`tracekit.commands._render.frame_table`): whole to a pipe; on a narrow terminal the least needed
    columns are left out and the title names them."""
    import polars as pl

    from tracekit.commands._render import frame_table

    frame = pl.DataFrame(rows, schema=dict.fromkeys(cols, pl.String))
    return frame_table(frame, title, width=width, **layout)


GEMM_TABLE_COLUMNS = [
    "backend", "M", "N", "K", "µs", "p10–p90 µs", "TFLOP/s", "rel err", "SM MHz", "W", "status"
]  # fmt: skip


def gemm_table(measurements: list[dict[str, Any]], title: str, width: int | None) -> Any:
    """``bench gemm``'s result table (one line per backend and shape, raw/measurements.jsonl rows) fitted to
    ``width`` cells (None: Rich's own layout): numbers and statuses whole; on a narrow terminal the power, clock,
    spread and error columns go first, and the title says which went."""
    rows = [
        {
            "backend": r["backend"],
            "M": str(r["m"]),
            "N": str(r["n"]),
            "K": str(r["k"]),
            "µs": formatted(r.get("time_us"), "{:.1f}", ""),
            "p10–p90 µs": f"{formatted(r.get('time_us_p10'), '{:.1f}', '')}–"
            f"{formatted(r.get('time_us_p90'), '{:.1f}', '')}",
            "TFLOP/s": formatted(r.get("tflops"), "{:.1f}", ""),
            "rel err": formatted(r.get("rel_error"), "{:.2g}", ""),
            "SM MHz": formatted(r["sm_clock_hz"] / 1e6 if r.get("sm_clock_hz") else None, "{:.0f}", ""),
            "W": formatted(r.get("power_w"), "{:.0f}", ""),
            "status": r["status"],
        }
        for r in measurements
    ]
    return _text_table(
        rows,
        GEMM_TABLE_COLUMNS,
        title,
        width,
        widths={"backend": 40},
        priority=[
            "backend",
            "M",
            "N",
            "K",
            "µs",
            "status",
            "TFLOP/s",
            "rel err",
            "p10–p90 µs",
            "SM MHz",
            "W",
        ],
        min_widths={"backend": 16},
        whole=tuple(GEMM_TABLE_COLUMNS[1:]),
    )


# --- tracekit bench moe ------------------------------------------------------------------------------------------
class _MoeCommand(_BenchCommand):
    def backend_table(self) -> tuple[list[str], dict[str, Any]]:
        from tracekit.collectors.moe import BUILTIN_MOE, MOE_BACKENDS

        return list(BUILTIN_MOE), MOE_BACKENDS


@bench.command("moe", cls=_MoeCommand)
@click.option(
    "--backends",
    default="torch-bf16-grouped,torch-fp8-grouped,torch-bf16-loop",
    show_default=True,
    help="Comma-separated MoE backend names, or 'all'.",
)
@click.option(
    "--tokens", default="glm5", show_default=True, help="Tokens per step: 'glm5' (1,4,16,...,4096) or a list."
)
@click.option(
    "--routing",
    default="uniform,zipf:1.2",
    show_default=True,
    help="uniform, zipf:S (expert 0 hottest) and/or file:PATH (captured routing, docs/MOE.md).",
)
@click.option("--hidden", default=6144, show_default=True, help="Model hidden size.")
@click.option("--inter", default=2048, show_default=True, help="Expert intermediate size.")
@click.option("--experts", default=256, show_default=True, help="Routed experts.")
@click.option("--topk", default=8, show_default=True, help="Experts per token.")
@click.option(
    "--proj",
    type=click.Choice(["gate_up", "down"]),
    default="gate_up",
    show_default=True,
    help="gate_up: N = 2 x inter, K = hidden; down: N = hidden, K = inter.",
)
@out_option("Run folder to create [runs/<time>-bench-moe-<id>].", type=click.Path(path_type=Path))
@sweep_timing_options("case")
@click.option("--seed", default=0, show_default=True, help="Seed of the routing draws and the inputs.")
@click.option("--json", "as_json", is_flag=True, help="Print {run, status, moe, curve, failures} on stdout.")
def moe(
    backends: str,
    tokens: str,
    routing: str,
    hidden: int,
    inter: int,
    experts: int,
    topk: int,
    proj: str,
    out: Path | None,
    sweep: SweepTiming,
    seed: int,
    as_json: bool,
) -> None:
    """Time grouped (MoE) expert GEMMs over tokens per step and routings into a new run.

    Each case is a step of T tokens routed top-k over the experts (uniform, Zipf-skewed, or read from a file);
    every expert gets the rows routed to it, and a backend runs all experts' GEMMs (one grouped launch, or one
    GEMM per expert for the loop reference). Rows: raw/moe.jsonl (one per backend x case, with the per-expert
    counts), per-expert curve points of the loop backends in raw/moe_curve.jsonl, failures in
    raw/failures.jsonl. `tracekit show/explain/report/view RUN` then give the per-expert analysis (docs/MOE.md).

    \b
    Examples:
      tracekit bench moe                                        # GLM-5 experts, uniform and zipf:1.2
      tracekit bench moe --tokens 1,64,4096 --routing zipf:2 --backends torch-fp8-grouped
      tracekit bench moe --routing file:routing.jsonl --proj down
      tracekit capture --nsys -- tracekit bench moe --tokens 16,256   # kernel names give the tile size
    """
    from tracekit.collectors.moe import MoeConfig, MoeSettings, all_moe_backends, parse_routing, parse_tokens

    known = all_moe_backends()
    names = _pick_backends(backends, known, "MoE backend")
    if min(hidden, inter, experts, topk) < 1 or topk > experts:
        raise BadInputError("--hidden, --inter, --experts, --topk must be >= 1 and --topk <= --experts")
    sweep.check()
    config = MoeConfig(hidden=hidden, inter=inter, experts=experts, topk=topk, proj=proj)
    settings = MoeSettings(
        backends=names,
        config=config,
        tokens=parse_tokens(tokens),
        routing=parse_routing(routing),
        seed=seed,
        **sweep.settings(),
    )
    cuda = any(known[n].timer == "cuda" for n in names)
    environment = _require_gpu(settings.python, sweep.gpu) if cuda else None
    run_dir, inside = _sweep_dir(out, "moe")
    result = _sweep(run_dir, settings, len(names) * len(settings.cases), "moe", environment)
    if inside is not None:
        _hand_over(result.run, inside)
    if as_json:
        payload = {
            "run": str(result.run.path),
            "status": result.status,
            "moe": result.measurements,
            "curve": _read_jsonl(result.run.raw_dir / "moe_curve.jsonl"),
            "failures": result.failures,
        }
        click.echo(json.dumps(payload, indent=2, default=str))
    else:
        _print_moe_table(result)
    if result.status != "complete":
        raise IncompleteError(f"the sweep into {result.run.path} did not finish", result.reason or "")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _print_moe_table(result: Any) -> None:
    from tracekit.text import make_console

    console = make_console()
    console.print(moe_table(result.measurements, f"MoE grouped GEMMs — {result.run.path}", console.width))
    if result.failures:
        console.print(_failures_table(result.failures, "rows", console.width))
    console.print("per-expert analysis: tracekit show RUN · tracekit report RUN · tracekit view RUN (key e)")


MOE_TABLE_COLUMNS = [
    "backend", "route", "tokens", "rows", "active", "max/expert", "µs", "TFLOP/s", "rel err", "SM MHz", "status"
]  # fmt: skip


def moe_table(measurements: list[dict[str, Any]], title: str, width: int | None) -> Any:
    """``bench moe``'s result table (one line per backend and routed case, raw/moe.jsonl rows) fitted to ``width``
    cells as :func:`gemm_table` is."""
    rows = [
        {
            "backend": r["backend"],
            "route": r.get("route") or "",
            "tokens": str(r["tokens"]),
            "rows": str(r["rows"]),
            "active": f"{r['active']}/{r['experts']}",
            "max/expert": str(max(r.get("counts") or [0])),
            "µs": formatted(r.get("time_us"), "{:.1f}", ""),
            "TFLOP/s": formatted(r.get("tflops"), "{:.1f}", ""),
            "rel err": formatted(r.get("rel_error"), "{:.2g}", ""),
            "SM MHz": formatted(r["sm_clock_hz"] / 1e6 if r.get("sm_clock_hz") else None, "{:.0f}", ""),
            "status": r["status"],
        }
        for r in measurements
    ]
    return _text_table(
        rows,
        MOE_TABLE_COLUMNS,
        title,
        width,
        widths={"backend": 40},
        priority=["backend", "route", "tokens", "µs", "status", "TFLOP/s", "active", "max/expert", "rows"],
        min_widths={"backend": 16, "route": 8},
        whole=tuple(MOE_TABLE_COLUMNS[2:]),
    )


def _sweep_dir(out: Path | None, verb: str) -> tuple[Path, Path | None]:
    """(the sweep's run folder, the capture's run folder when running under `tracekit capture`, else None).
    Under a capture the sweep gets a private run in the capture's raw/logs; its records are handed over after."""
    from tracekit.run import new_run_name

    inside = _capture_run_dir() if out is None else None
    if inside is not None:
        tool = os.environ.get("TRACEKIT_CAPTURE_TOOL", "run")
        prefix = "bench" if verb == "gemm" else f"bench-{verb}"
        return inside / "raw" / "logs" / new_run_name(f"{prefix}-{tool}"), inside
    return out or Path("runs") / new_run_name(f"bench-{verb}"), None


def _sweep(out: Path, settings: Any, total: int, verb: str, environment: dict[str, Any] | None) -> Any:
    """Run the sweep with a progress bar; Ctrl-C says where the partial results are kept. ``environment``: the
    fingerprint the GPU check took, or None for the sweep to take its own."""
    from tracekit.collectors.bench import run_sweep

    command = ["tracekit", "bench", verb, *sys.argv[3:]] if sys.argv[1:3] == ["bench", verb] else None
    progress = _Progress(total)
    try:
        with progress:
            return run_sweep(
                out, settings, on_event=progress.on_event, command=command, environment=environment
            )
    except KeyboardInterrupt:
        click.echo(f"tracekit: interrupted; partial results kept in {out} (marked incomplete)", err=True)
        raise


def _failures_table(failures: list[dict[str, Any]], m_label: str, width: int | None = None) -> Any:
    """The sweep's failures, one line each (backend, shape, kind, first message line), in the commands' shared
    layout (:func:`_text_table`). Messages are data: a ninja log's ``[1/2]`` or a C++ ``<...>`` must show as
    written, so every cell is a Text, never markup."""
    rows = []
    for r in failures:
        msg = (r.get("message") or "").strip().splitlines()
        first = f"{r.get('error_type')}: {msg[0][:120] if msg else ''}"
        rows.append(
            {
                "backend": r["backend"],
                m_label: str(r.get("m")),
                "N": str(r.get("n")),
                "K": str(r.get("k")),
                "kind": r["kind"],
                "error": first,
            }
        )
    return _text_table(
        rows,
        ["backend", m_label, "N", "K", "kind", "error"],
        "Failures (full messages in raw/failures.jsonl)",
        width,
        widths={"backend": 40, "error": 200},
        priority=["backend", "kind", "error", m_label, "N", "K"],
        min_widths={"backend": 12, "error": 16},
        whole=(m_label, "N", "K"),
    )
