"""tracekit's kernel rate beside TraceLens's per GEMM operator on the shared Kineto traces (docs/CASES.md).

TraceLens's numbers (AMD-AGI/TraceLens at 171dd747, ``TreePerfAnalyzer.build_df_perf_metrics`` over the GEMM ops,
median per shape) are in shared/data/peers/tracelens-gemm-ops.json: no TraceLens is needed. For each trace the
table gives the operators TraceLens rates and how many tracekit matched (operator, M, N, K, batch and dtype, with
the same number of calls), the ratio of tracekit's kernel rate to TraceLens's (median, min, max), how many ops
differ by more than 2% and why (the memsets and copies TraceLens adds to the time; else the median of per-call
rates against sum over sum), and the largest deviation once tracekit's calls are rated by TraceLens's definition
(analyzers/gemm/tracelens.py).

    python benchmarks/tracelens_compare.py            # Markdown table
    python benchmarks/tracelens_compare.py --ops      # one line per operator
    python benchmarks/tracelens_compare.py --record before.json          # achieved per operator, at one commit
    python benchmarks/tracelens_compare.py --achieved --before before.json   # achieved against TraceLens
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
PEERS = SHARED / "peers" / "tracelens-gemm-ops.json"
PRECISE = 0.01
"""TraceLens's file rounds TFLOP/s to 4 decimals: below this many TFLOP/s the rounding is more than 0.5% of its
rate (a 1,536-FLOP ``mm`` at 0.0003), too coarse to compare within 2%; such ops are compared by their last digit."""


def trace_path(name: str) -> Path | None:
    """The shared file of a trace the peers file names."""
    for folder in ("thirdparty/tracelens", "thirdparty/hta", "h200-probe"):
        found = sorted((SHARED / folder).glob(f"*{name}.json.gz"))
        if found:
            return found[0]
    return None


def compare(name: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each TraceLens row of a trace with tracekit's numbers beside it (``tracekit`` None: not matched)."""
    from tracekit.analyzers.gemm import build_cases, dtype_class
    from tracekit.analyzers.gemm.tracelens import op_rates
    from tracekit.analyzers.importer import combine, read_file

    path = trace_path(name)
    if path is None:
        return []
    frames = combine([read_file(path)])
    cases = build_cases(frames)
    rates = op_rates(frames, cases)
    out = []
    for r in rows:
        op = (r["op"] or "").removeprefix("aten::")
        shape = (r["m"], r["n"], r["k"], r.get("batch") or 1)
        if op:
            mine = [
                x
                for x in rates
                if (x.op, x.m, x.n, x.k, x.batch) == (op, *shape) and x.dtype_class == r["dtype"]
            ]
            one = mine[0] if len(mine) == 1 else None
            achieved = one.achieved_tflops if one else None
            owned = one.owned_tflops if one else None
            gap = one.gap_ns_total if one else None
            fusion = one.fusion_ns_total if one else None
            kernel = mine[0].kernel_tflops if len(mine) == 1 else None
            defined = mine[0].tracelens_tflops if len(mine) == 1 else None
            median = mine[0].median_call_tflops if len(mine) == 1 else None
            flops = mine[0].flops_per_call if len(mine) == 1 else None
            calls = mine[0].calls if len(mine) == 1 else None
            added = mine[0].added_ns_total if len(mine) == 1 else None
        else:  # tracekit's own ranges (the H200 probe): their kernel rate, no operator to hold memsets
            mine = [
                c
                for c in cases
                if c.shape
                and (c.m, c.n, c.k, c.batch or 1) == shape
                and dtype_class(c.dtype_a, c.dtype_b) == r["dtype"]
            ]
            kernel = mine[0].kernel_tflops if len(mine) == 1 else None
            achieved = mine[0].achieved_tflops if len(mine) == 1 else None
            owned, gap, fusion = None, None, None
            defined, median, added = None, None, None
            flops = mine[0].flops if len(mine) == 1 else None
            calls = mine[0].timing.calls if len(mine) == 1 else None
        out.append(
            {
                **r,
                "tracekit": kernel,
                "tracekit_flops": flops,
                "tracekit_median_call": median,
                "tracekit_tl_definition": defined,
                "tracekit_calls": calls,
                "added_ns": added,
                "tracekit_achieved": achieved,
                "tracekit_owned": owned,
                "gap_ns": gap,
                "fusion_ns": fusion,
            }
        )
    return out


def why_beyond(g: dict[str, Any]) -> str | None:
    """Why a matched op's kernel rate is more than 2% from TraceLens's: ``added`` (TraceLens's time holds memsets
    or copies besides the GEMM and its split-K reduce), ``aggregation`` (TraceLens's median of per-call rates
    against tracekit's sum over sum: the rate of tracekit's median call agrees), ``unexplained``; None within 2%
    (TraceLens's M*N for an addmm bias counted in)."""
    tl = g["tflops_median"]
    bias = 1 + 1 / (2 * g["k"]) if g["op"] == "aten::addmm" else 1.0
    if tl < PRECISE or abs(g["tracekit"] * bias / tl - 1) <= 0.02:
        return None
    if g["added_ns"]:
        return "added"
    median = g.get("tracekit_median_call")
    if median is not None and abs(median * bias / tl - 1) <= 0.02:
        return "aggregation"
    return "unexplained"


def table(peers: dict[str, Any], ops: bool = False) -> list[str]:
    """The Markdown table (and with ``ops`` one line per operator under each trace)."""
    lines = [
        "| trace | ops | matched | kernel rate / TraceLens: median | min | max | beyond 2% | of them: TraceLens adds "
        "memsets or copies | median of calls vs sum over sum | TraceLens's definition from tracekit's calls: "
        "largest deviation |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rows in peers["traces"].items():
        got = compare(name, rows)
        matched = [g for g in got if g["tracekit"] is not None and g["tracekit_calls"] == g["calls"]]
        rated = [g for g in matched if g["tflops_median"] >= PRECISE]
        ratios = [g["tracekit"] / g["tflops_median"] for g in rated]
        why = [why_beyond(g) for g in matched]
        dev = [
            abs(g["tracekit_tl_definition"] / g["tflops_median"] - 1)
            for g in rated
            if g["tracekit_tl_definition"]
        ]
        stats = (
            f"{statistics.median(ratios):.3f} | {min(ratios):.3f} | {max(ratios):.3f}"
            if ratios
            else "– | – | –"
        )
        last = f"{100 * max(dev):.2f}%" if dev else "– (tracekit's own ranges: no operator)"
        beyond = sum(1 for w in why if w)
        lines.append(
            f"| {name} | {len(rows)} | {len(matched)} | {stats} | {beyond} | {why.count('added')} | "
            f"{why.count('aggregation')} | {last} |"
        )
        if ops:
            for g in got:
                lines.append(
                    f"    {g['op']} {g['m']}x{g['n']}x{g['k']} b{g.get('batch')} {g['dtype']}: TraceLens "
                    f"{g['tflops_median']}, kernel rate {g['tracekit']}, median call {g['tracekit_median_call']}, "
                    f"TraceLens's definition {g['tracekit_tl_definition']}, added {g['added_ns']} ns"
                )
    return lines


def op_key(name: str, g: dict[str, Any]) -> str:
    """One operator of one trace, as ``--record`` and ``--before`` key it."""
    return f"{name}|{g['op']}|{g['m']}x{g['n']}x{g['k']}"


def achieved_table(peers: dict[str, Any], before: dict[str, Any] | None = None) -> list[str]:
    """Per operator TraceLens rates: its rate, tracekit's achieved (with ``before``, an earlier recording's
    beside it), TraceLens's definition from the kernels each call owns and its deviation, and the time that tells
    achieved from TraceLens's rate: the calls' gaps (achieved counts them) and the fusion candidates (neither
    does)."""
    lines = [
        "| trace | op | M x N x K | TraceLens | achieved before | achieved | achieved / TraceLens | owned "
        "kernels, TraceLens's definition | deviation | gap per call (µs) | fusion candidates per call (µs) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rows in peers["traces"].items():
        for g in compare(name, rows):
            if g["op"] is None or g["tracekit_achieved"] is None:
                continue
            tl, ach, owned = g["tflops_median"], g["tracekit_achieved"], g["tracekit_owned"]
            was = (before or {}).get(op_key(name, g))
            calls = g["tracekit_calls"] or 1
            dev = f"{100 * (owned / tl - 1):+.2f}%" if owned and tl >= PRECISE else "(rounded)"
            lines.append(
                f"| {name} | {g['op']} | {g['m']}x{g['n']}x{g['k']} | {tl:.4g} | "
                f"{f'{was:.4g}' if was is not None else '–'} | {ach:.4g} | {ach / tl:.3f} | "
                f"{f'{owned:.4g}' if owned else '–'} | {dev} | {(g['gap_ns'] or 0) / calls / 1e3:.1f} | "
                f"{(g['fusion_ns'] or 0) / calls / 1e3:.1f} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", action="store_true", help="one line per operator")
    p.add_argument("--achieved", action="store_true", help="per operator: achieved and owned kernels' rate")
    p.add_argument("--before", type=Path, help="with --achieved: a --record file of an earlier commit")
    p.add_argument("--record", type=Path, help="write each operator's achieved rate to this JSON file")
    args = p.parse_args(argv)
    if not PEERS.is_file():
        print(
            f"tracelens_compare: {PEERS} is absent (it sits in shared/data beside the checkout)",
            file=sys.stderr,
        )
        return 2
    peers = json.loads(PEERS.read_text())
    if args.record:
        got = {
            op_key(name, g): g["tracekit_achieved"]
            for name, rows in peers["traces"].items()
            for g in compare(name, rows)
            if g["op"] is not None
        }
        args.record.write_text(json.dumps(got, indent=0, sort_keys=True) + "\n")
        return 0
    if args.achieved:
        before = json.loads(args.before.read_text()) if args.before else None
        print("\n".join(achieved_table(peers, before)))
        return 0
    print("\n".join(table(peers, args.ops)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
