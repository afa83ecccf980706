"""tracekit's step breakdown beside HolisticTraceAnalysis's on HTA's own test traces: idle, compute,
non-compute and communication shares of the span, and communication overlapped by compute, side by side with
the difference in percentage points.

HTA runs where it is importable (``pip install holistictraceanalysis``), or in another interpreter that has it
(``--hta-python``: tracekit and HTA need not share an environment); without either, HTA's numbers come from the
peers file that ``--write-peers`` saved (tests/analysis/data/hta-breakdown.json, what the CPU test compares against).

    python benchmarks/hta_compare.py --hta-python /path/to/hta-venv/bin/python --write-peers tests/analysis/data/hta-breakdown.json
    python benchmarks/hta_compare.py                      # HTA's numbers from the peers file

Like with like (docs/BREAKDOWN.md): tracekit is run on the kernels and memcpy / memset rows HTA
keeps (launched before the last ProfilerStep began: analyzers/breakdown/peers.py), its compute is every class but
communication and memory, and shares are of the device's span. HTA's shares come from ``get_temporal_breakdown``
(idle, compute, non-compute of its span), ``get_gpu_kernel_breakdown(include_memory_kernels=True)`` (the
communication union: every kernel-type row naming COMMUNICATION, over the same span) and ``get_comm_comp_overlap``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "data" / "thirdparty" / "hta"
PEERS = ROOT / "tests" / "analysis" / "data" / "hta-breakdown.json"
SHARES = ("idle", "compute", "non_compute", "communication")


# --- HTA's side (runs in an interpreter with hta; imports nothing of tracekit) ---------------------------------------
def hta_numbers(trace: Path) -> dict[str, Any]:
    """HTA's breakdown of one trace, in percent of its span (``kernel_time``), or ``{"error": ...}``."""
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(trace, Path(tmp) / trace.name)
        try:
            ta = TraceAnalysis(trace_dir=tmp)
            temporal = ta.get_temporal_breakdown(visualize=False)
        except Exception as exc:  # HTA fails on some of its own test traces (no kernels, one kernel)
            return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200]}
        if temporal.shape[0] != 1:
            return {"error": f"{temporal.shape[0]} ranks in one file"}
        row = temporal.iloc[0]
        span = float(row["kernel_time(us)"])
        out: dict[str, Any] = {
            "rank": int(row["rank"]),
            "span_us": span,
            "idle_us": float(row["idle_time(us)"]),
            "compute_us": float(row["compute_time(us)"]),
            "non_compute_us": float(row["non_compute_time(us)"]),
            "idle_pct": float(row["idle_time_pctg"]),
            "compute_pct": float(row["compute_time_pctg"]),
            "non_compute_pct": float(row["non_compute_time_pctg"]),
        }
        trace_df = next(iter(ta.t.traces.values()))
        out["gpu_events"] = int((trace_df["stream"] != -1).sum())
        kinds, _ = ta.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
        by_kind = {str(k): float(v) for k, v in zip(kinds["kernel_type"], kinds["sum"], strict=True)}
        out["kernel_types_us"] = by_kind
        comm = sum(v for k, v in by_kind.items() if "COMMUNICATION" in k)
        out["communication_us"] = comm
        out["communication_pct"] = round(100.0 * comm / span, 2) if span else 0.0
        overlap = ta.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].iloc[0]
        out["overlap_pct"] = None if overlap != overlap else float(overlap)  # NaN: no communication
        return out


def _hta_version() -> str:
    from importlib.metadata import version

    return version("HolisticTraceAnalysis")


def run_hta(traces: list[Path], python: str | None) -> dict[str, Any]:
    """HTA's numbers for ``traces``: in this interpreter, or in ``python`` (one subprocess for all)."""
    if python is None:
        return {"hta_version": _hta_version(), "traces": {t.name: hta_numbers(t) for t in traces}}
    cmd = [python, str(Path(__file__).resolve()), "--hta-json", *map(str, traces)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"HTA in {python} failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout)


# --- tracekit's side --------------------------------------------------------------------------------------------------
def tracekit_numbers(trace: Path, *, window: bool = True) -> dict[str, Any]:
    """tracekit's breakdown of one trace (its one device), in percent of the span; ``window``: on the rows HTA
    keeps (analyzers/breakdown/peers.py), else on every row."""
    from tracekit.analyzers.breakdown import breakdown
    from tracekit.analyzers.breakdown.peers import hta_window
    from tracekit.analyzers.importer import combine
    from tracekit.analyzers.readers.kineto.reader import read_kineto

    frames = combine([read_kineto(trace)])
    if window:
        frames = hta_window(frames)
    b = breakdown(frames, with_ranges=False)
    if not b.devices:
        return {"error": "no kernels"}
    if len(b.devices) > 1:
        return {"error": f"{len(b.devices)} devices"}
    s = b.devices[0]
    return {
        "span_us": s.span_ns / 1e3,
        "idle_pct": s.pct(s.idle_ns),
        "compute_pct": s.pct(s.compute_ns),
        "non_compute_pct": s.pct(s.busy_ns - s.compute_ns),
        "communication_pct": s.pct(s.communication_ns),
        "overlap_pct": s.overlap_pct,
        "compute_us": s.compute_ns / 1e3,
        "rows": s.kernels,
    }


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:6.2f}"


def table(hta: dict[str, Any], traces: list[Path]) -> list[str]:
    """One line per trace: HTA | tracekit | difference (pp) for each share, and the overlap."""
    head = f"{'trace':44s} {'rows hta/tk':>12s} " + " ".join(
        f"{s[:7]:>7s} hta/tk/d" for s in (*SHARES, "overlap")
    )
    lines = [head, "-" * len(head)]
    for t in traces:
        h = hta["traces"].get(t.name, {"error": "not in the peers file"})
        tk = tracekit_numbers(t)
        name = t.name.removesuffix(".json.gz")[:44]
        if "error" in h or "error" in tk:
            lines.append(f"{name:44s} HTA: {h.get('error', 'ok')}; tracekit: {tk.get('error', 'ok')}")
            continue
        cells = []
        for s in (*SHARES, "overlap"):
            a, b = h.get(f"{s}_pct"), tk.get(f"{s}_pct")
            d = None if a is None or b is None else b - a
            cells.append(f"{_fmt(a)}/{_fmt(b)}/{'-' if d is None else f'{d:+.2f}'}")
        rows = f"{h.get('gpu_events')}/{tk['rows']}"
        lines.append(f"{name:44s} {rows:>12s} " + " ".join(f"{c:>24s}" for c in cells))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=Path, default=TRACES, help="folder of HTA's test traces (*.json.gz)")
    ap.add_argument("--hta-python", help="an interpreter with HolisticTraceAnalysis installed")
    ap.add_argument("--peers", type=Path, default=PEERS, help="HTA's saved numbers, used without HTA")
    ap.add_argument("--write-peers", type=Path, help="save HTA's numbers here (JSON)")
    ap.add_argument("--hta-json", nargs="+", type=Path, help=argparse.SUPPRESS)  # the subprocess's mode
    args = ap.parse_args(argv)
    if args.hta_json:
        print(json.dumps(run_hta(args.hta_json, None)))
        return 0
    if not args.traces.is_dir():
        print(f"no traces folder {args.traces}: give --traces DIR", file=sys.stderr)
        return 2
    traces = sorted(args.traces.glob("*.json.gz"))
    try:
        import hta  # noqa: F401

        hta_numbers_ = run_hta(traces, None)
    except ImportError:
        if args.hta_python:
            hta_numbers_ = run_hta(traces, args.hta_python)
        elif args.peers.is_file():
            hta_numbers_ = json.loads(args.peers.read_text())
            print(f"HTA not importable: its numbers from {args.peers}", file=sys.stderr)
        else:
            print("HTA is not importable and there is no peers file: give --hta-python", file=sys.stderr)
            return 3
    if args.write_peers:
        args.write_peers.parent.mkdir(parents=True, exist_ok=True)
        args.write_peers.write_text(json.dumps(hta_numbers_, indent=1, sort_keys=True) + "\n")
    print(
        f"HolisticTraceAnalysis {hta_numbers_['hta_version']}: % of span, HTA / tracekit / tracekit - HTA (pp)"
    )
    print("\n".join(table(hta_numbers_, traces)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
