"""What each capture mode costs: wall time of one GEMM sweep run plainly, under nsys, under the PyTorch profiler,
under ncu limited to tracekit ranges (the default sections, 2 launches a range) and under ``ncu --set full``.

Run on a GPU machine (needs torch with CUDA; ncu / nsys where found, else those rows say why they are missing)::

    python benchmarks/bench_capture_overhead.py [--shapes 5] [--reps 20] [--rounds 3] [--keep DIR]

The PyTorch profiler's CPU events, ranges only against ranges and every operator with its input shapes
(``--torch-ops shapes``, capture's default), on a program of your own (GEMMs in no tracekit range, the case the
shapes are for), in one command::

    python benchmarks/bench_capture_overhead.py --modes torch-ranges,torch-shapes --rounds 3 \
        --script benchmarks/foreign/serve_step.py

(``--script`` runs ``python SCRIPT`` instead of the built-in sweep; ``--eager`` runs the built-in sweep without
tracekit ranges, each GEMM an eager ``torch.mm`` in a ``record_function`` step, as an engine's code would.)

Prints one table row per mode: the median wall seconds of its passes (``--rounds`` passes, the modes interleaved
round by round so that a slow stretch of the machine hits every mode alike), the slowest and fastest pass, the
median's ratio to the plain median, the median of the per-round ratios (each pass against the plain pass of its
own round, minutes apart at most: the figure least moved by the machine's drift), and the size of what the last
pass wrote.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tracekit.collectors import tools
from tracekit.collectors.capture import capture
from tracekit.errors import MissingToolError

SWEEP = """
import sys
import torch
from tracekit.collectors.ranges import gemm_range

shapes, reps = int(sys.argv[1]), int(sys.argv[2])
n, k = 2048, 6144
w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
for i in range(shapes):
    m = 16 << (2 * i)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    for _ in range(reps):
        with gemm_range("torch-bf16", "mm", m, n, k, "bf16", "bf16", "bf16"):
            torch.mm(x, w)
torch.cuda.synchronize()
"""

EAGER = """
import sys
import torch

shapes, reps = int(sys.argv[1]), int(sys.argv[2])
n, k = 2048, 6144
w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
for i in range(shapes):
    m = 16 << (2 * i)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    for _ in range(reps):
        with torch.profiler.record_function("step"):
            torch.mm(x, w)
torch.cuda.synchronize()
"""


# key -> (table label, capture() options). "ncu-full-all" is what an engineer runs by hand (`ncu --set full
# python bench.py`: every kernel, every section); "ncu-full" keeps tracekit's range filter and launch budget.
MODES: dict[str, tuple[str, dict]] = {
    "plain": ("plain", {}),
    "nsys": ("nsys", {"nsys": True}),
    "nsys-nosym": ("nsys --resolve-symbols=false", {"nsys": True, "nsys_extra": ["--resolve-symbols=false"]}),
    "torch-profiler": ("torch-profiler", {"torch_profiler": True}),
    # the PyTorch profiler's CPU events: record_function ranges only, against ranges and every operator with its
    # input shapes (capture's default: GEMM ops get M, N, K), and every operator without shapes
    "torch-ranges": ("torch-profiler --torch-ops ranges", {"torch_profiler": True, "torch_ops": "ranges"}),
    "torch-shapes": ("torch-profiler --torch-ops shapes", {"torch_profiler": True, "torch_ops": "shapes"}),
    "torch-all": ("torch-profiler --torch-ops all", {"torch_profiler": True, "torch_ops": "all"}),
    # what the PyTorch profiler cost before workers paused it outside a traced pass (--trace-repeats all)
    "torch-profiler-all": (
        "torch-profiler --trace-repeats all",
        {"torch_profiler": True, "trace_repeats": None},
    ),
    "ncu": ("ncu ranges (6 sections)", {"ncu": True}),
    # the default minus the SIMT FP32 counters (SASS-patched, costly passes) / minus every math counter
    "ncu-nosimt": (
        "ncu ranges, tensor counters only",
        {"ncu": True, "metrics": tuple(m for m in tools.DEFAULT_METRICS if m not in tools.SIMT_FLOP_METRICS)},
    ),
    "ncu-nocount": (
        "ncu ranges, no math counters",
        {
            "ncu": True,
            "metrics": tuple(
                m
                for m in tools.DEFAULT_METRICS
                if m not in tools.SIMT_FLOP_METRICS and m != tools.TENSOR_OPS_METRIC
            ),
        },
    ),
    "ncu-full": (
        "ncu --set full (ranges)",
        {"ncu": True, "sections": (), "metrics": (), "ncu_extra": ["--set", "full"]},
    ),
    "ncu-full-all": (
        "ncu --set full (every kernel)",
        {"ncu": True, "sections": (), "metrics": (), "nvtx_include": None, "ncu_extra": ["--set", "full"]},
    ),
}


def _size(run_raw: Path) -> int:
    return sum(p.stat().st_size for p in run_raw.iterdir() if p.is_file() and not p.name.endswith(".log"))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", type=int, default=5, help="M = 16, 64, 256, ... (N=2048, K=6144)")
    parser.add_argument("--reps", type=int, default=20, help="launches per shape")
    parser.add_argument("--keep", type=Path, help="keep the runs in this folder")
    parser.add_argument("--timeout", type=float, default=600.0, help="limit of each pass, seconds")
    parser.add_argument(
        "--rounds", type=int, default=1, help="passes of every mode, interleaved (median reported)"
    )
    parser.add_argument(
        "--modes",
        default="all",
        help=f"comma-separated subset of: {', '.join(MODES)} (plain always runs: it is the baseline)",
    )
    parser.add_argument(
        "--bench",
        metavar="BACKENDS",
        help="time `tracekit bench gemm --shapes glm5 --backends BACKENDS` instead of the built-in sweep script",
    )
    parser.add_argument(
        "--script",
        type=Path,
        metavar="SCRIPT",
        help="time `python SCRIPT` (e.g. benchmarks/foreign/serve_step.py) instead of the built-in sweep",
    )
    parser.add_argument(
        "--eager",
        action="store_true",
        help="the built-in sweep without tracekit ranges: each GEMM an eager torch.mm in a record_function step",
    )
    ns = parser.parse_args()
    base = ns.keep or Path(tempfile.mkdtemp(prefix="tk-overhead-"))
    script = base / "sweep.py"
    base.mkdir(parents=True, exist_ok=True)
    script.write_text(EAGER if ns.eager else SWEEP)
    cmd = [sys.executable, str(script), str(ns.shapes), str(ns.reps)]
    if ns.script:
        cmd = [sys.executable, str(ns.script.absolute())]
    if ns.bench:
        cmd = [sys.executable, "-m", "tracekit", "bench", "gemm", "--shapes", "glm5", "--backends", ns.bench]
        cmd += ["--repeats", str(ns.reps), "--warmup", "5"]

    wanted = set(MODES) if ns.modes == "all" else {m.strip() for m in ns.modes.split(",")} | {"plain"}
    unknown = wanted - set(MODES)
    if unknown:
        parser.error(f"unknown mode(s) {', '.join(sorted(unknown))}; choose from {', '.join(MODES)}")
    modes = [(MODES[key][0], MODES[key][1]) for key in MODES if key in wanted]
    walls: dict[str, list[float]] = {label: [] for label, _ in modes}
    paired: dict[str, list[float]] = {label: [] for label, _ in modes}  # wall / the same round's plain wall
    notes: dict[str, str] = {}
    sizes: dict[str, float] = {}
    last_run: dict[str, Path] = {}
    for round_ in range(max(1, ns.rounds)):
        for label, opts in modes:
            if label in notes and notes[label] != "ok":
                continue  # a missing tool stays missing; a failed pass is not repeated
            try:
                if label == "plain":
                    # a plain bench run needs an -o of its own; under capture the sweep writes into the capture's run
                    plain_cmd = [*cmd, "-o", str(base / f"bench-plain-{round_}")] if ns.bench else cmd
                    start = time.perf_counter()
                    proc = subprocess.run(plain_cmd, check=False, timeout=ns.timeout)
                    walls[label].append(time.perf_counter() - start)
                    notes[label] = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
                    sizes[label] = 0.0
                    continue
                if opts.get("nsys"):
                    tools.require_nsys_importer(tools.find_nsys())
                run = capture(cmd, runs_dir=base / "runs", timeout=ns.timeout, **opts)
            except MissingToolError as exc:
                notes[label] = exc.one_line()
                continue
            walls[label].append(sum(p.wall_s or 0.0 for p in run.record.capture.passes or []))
            if len(walls["plain"]) == round_ + 1:
                paired[label].append(walls[label][-1] / walls["plain"][-1])
            notes[label] = run.record.incomplete_reason or "ok"
            sizes[label] = _size(run.raw_dir) / 1e6
            last_run[label] = run.path
    plain_s = statistics.median(walls["plain"]) if walls["plain"] else None
    rows: list[tuple[str, ...]] = []
    for label, _opts in modes:
        w = walls[label]
        if not w:
            rows.append((label, "-", "-", "-", "-", "-", notes.get(label, "-")))
            continue
        med = statistics.median(w)
        ratio = f"{med / plain_s:.2f}x" if plain_s else "-"
        pairs = paired[label]
        per_round = (
            f"{statistics.median(pairs):.2f}x ({min(pairs):.2f}-{max(pairs):.2f})"
            if pairs and label != "plain"
            else "-"
        )
        spread = f"{min(w):.1f}-{max(w):.1f} ({len(w)})"
        rows.append((label, f"{med:.1f}", spread, ratio, per_round, f"{sizes[label]:.2f}", notes[label]))
    header = ("mode", "median s", "min-max (passes)", "vs plain", "per round", "MB written", "status")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    what = (
        f"tracekit bench gemm --shapes glm5 --backends {ns.bench}"
        if ns.bench
        else f"python {ns.script}"
        if ns.script
        else f"{ns.shapes} shapes x {ns.reps} launches" + (" (eager, no tracekit ranges)" if ns.eager else "")
    )
    print(f"\nsweep: {what}; runs in {base}")
    for label, path in last_run.items():
        lines = _profiler_lines(path)
        if lines:
            print(f"\n{label}, last pass: where the profiled processes' time went")
            for line in lines:
                print(f"  {line}")
    return 0


def _profiler_lines(run_path: Path) -> list[str]:
    """The PyTorch-profiler runner's and the workers' own summary lines (profiler start, program, stop, export;
    traced passes and toggling) from a kept run's logs, each prefixed with its log's name."""
    out = []
    for log in sorted([*run_path.glob("raw/*.log"), *run_path.glob("raw/logs/**/*.stderr.txt")]):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith(("tracekit torchprof", "tracekit worker:")):
                out.append(f"{log.name}: {line}")
    return out


if __name__ == "__main__":
    sys.exit(main())
