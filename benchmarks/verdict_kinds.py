"""The verdict kinds of every case, per shared profiling file and per committed sample (docs/CASES.md, "Verdict
kinds per shared file").

``--record`` writes one JSON line per file (its cases and the count of each verdict kind) with the code of the
checkout it runs in; the same script runs at an older commit (it uses only ``read_file``, ``combine``,
``analyze_frames`` and ``analyze_run``), so two recordings give the before and after of a change of verdict
policy. ``--table`` prints the Markdown table of two recordings.

    git worktree add /tmp/before 037500e && (cd /tmp/before && python /path/to/verdict_kinds.py --record before.jsonl)
    python benchmarks/verdict_kinds.py --record after.jsonl
    python benchmarks/verdict_kinds.py --table before.jsonl after.jsonl

``--ncu-default`` prints the table of the planted causes in raw Nsight Compute reports with the default sections
(samples/h100-ncu-default, their facts in its expected.json): each range's planted cause and the verdict tracekit
gives it, read from the raw report as a user would (docs/CASES.md, "Planted causes in default-section ncu reports").

The shared files are those tracekit reads (``.nsys-rep`` needs Nsight Systems and is left out), each imported
alone, and the files users import together (a timeline with its ncu report; an ncu CSV export's details with its
metrics).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ORDER = (
    "explained",
    "fusion",
    "no-measured-loss",
    "latency-bound",
    "stalled",
    "clocks-locked",
    "no-loss",
    "cannot-explain",
)
"""The kinds in the order a table row lists them."""
RTX50 = tuple(
    f"thirdparty/llm-perf-opt-rtx50/kernel_{k}_ncu.{part}.csv"
    for k in ("0003", "0005", "0016")
    for part in ("details", "metrics")
)
TOGETHER = {
    "h200-probe/probe.ncu-rep + probe.sqlite": ("h200-probe/probe.ncu-rep", "h200-probe/probe.sqlite"),
    "thirdparty/llm-perf-opt-rtx50 (details + metrics CSVs)": RTX50,
}
"""Shared files imported together, named as the table names them."""


def record(root: Path, out: Any) -> None:
    """One JSON line per shared file, group of files imported together and sample of the checkout at ``root``."""
    from tracekit.analyzers.analysis.build import analyze_frames, analyze_run
    from tracekit.analyzers.importer import combine, detect_kind, read_file
    from tracekit.analyzers.store import open_run
    from tracekit.errors import TracekitError

    shared = root.parent / "shared" / "data"

    def readable(p: Path) -> bool:
        try:
            return detect_kind(p) != "nsys-rep"
        except TracekitError:
            return False

    def emit(name: str, analysis: Any) -> None:
        kinds = Counter(str(c.verdict.kind) for c in analysis.cases)
        out.write(json.dumps({"file": name, "cases": len(analysis.cases), "kinds": dict(kinds)}) + "\n")

    groups: list[tuple[str, tuple[str, ...]]] = [
        (p.relative_to(shared).as_posix(), (p.relative_to(shared).as_posix(),))
        for p in sorted(shared.rglob("*"))
        if p.is_file() and readable(p)
    ]
    groups += list(TOGETHER.items())
    for name, rels in groups:
        emit(name, analyze_frames(combine([read_file(shared / r) for r in rels]), path=name))
    for d in sorted((root / "samples").iterdir()):
        if (d / "run.json").is_file():
            emit("samples/" + d.name, analyze_run(open_run(d)))


def _kinds(k: dict[str, int]) -> str:
    listed = sorted(k, key=lambda x: ORDER.index(x) if x in ORDER else len(ORDER))
    return ", ".join(f"{k[x]:,} {x}" for x in listed) or "–"


def table(before: Path, after: Path) -> str:
    """The Markdown table of two recordings: per shared file its cases, the kinds before and after and the count
    of cannot-explain; then the totals over the shared files and over the samples."""
    b = {d["file"]: d for d in map(json.loads, before.read_text().splitlines())}
    a = {d["file"]: d for d in map(json.loads, after.read_text().splitlines())}
    lines = [
        "| shared file | cases | verdict kinds before | verdict kinds now | cannot-explain before | now |",
        "|---|---:|---|---|---:|---:|",
    ]
    totals = {"shared": (Counter(), Counter()), "samples": (Counter(), Counter())}
    for name, now in a.items():
        was = b.get(name, {"kinds": {}, "cases": 0})
        group = "samples" if name.startswith("samples/") else "shared"
        totals[group][0].update(was["kinds"])
        totals[group][1].update(now["kinds"])
        if group == "samples":
            continue
        cases = (
            f"{now['cases']:,}" if was["cases"] == now["cases"] else f"{was['cases']:,} -> {now['cases']:,}"
        )
        lines.append(
            f"| {name.removeprefix('thirdparty/')} | {cases} | {_kinds(was['kinds'])} | {_kinds(now['kinds'])} | "
            f"{was['kinds'].get('cannot-explain', 0):,} | {now['kinds'].get('cannot-explain', 0):,} |"
        )
    for group, (was_k, now_k) in totals.items():
        lines.append(
            f"| **all {group}** | {sum(now_k.values()):,} | {_kinds(was_k)} | {_kinds(now_k)} | "
            f"{was_k.get('cannot-explain', 0):,} | {now_k.get('cannot-explain', 0):,} |"
        )
    return "\n".join(lines)


NCU_DEFAULT = Path("samples") / "h100-ncu-default"
"""The raw ncu reports of planted causes, with their facts in ``expected.json``."""


def names(verdict: Any, want: str) -> bool:
    """Whether a case's verdict names ``want``: its kind, its factor or its cause."""
    return want in (str(verdict.kind), verdict.factor, verdict.cause)


def verdict_text(verdict: Any) -> str:
    """A verdict in a table cell: its kind, factor and cause, and the calls' time it costs."""
    text = str(verdict.kind)
    named = [x for x in (verdict.factor, verdict.cause) if x and x != text]
    if named:
        text += ": " + " — ".join(named)
    if verdict.lost_ns_total:
        text += f" ({verdict.lost_ns_total / 1e3:,.1f} µs lost)"
    return text


def ncu_default_table(root: Path, analyses: dict[str, Any] | None = None) -> str:
    """The Markdown table of the planted causes of ``root``'s samples/h100-ncu-default: per report and range what
    was planted, what tracekit must name (or must not, for a control) and the verdict it gives. ``analyses`` (by
    report file name) saves reading the reports again."""
    import tracekit

    folder = root / NCU_DEFAULT
    facts = json.loads((folder / "expected.json").read_text())
    lines = ["| report | range | planted | must name | verdict |", "|---|---|---|---|---|"]
    for report, fact in facts.items():
        if report.startswith("_"):
            continue
        analysis = (analyses or {}).get(report) or tracekit.load(folder / report).analyze()
        for r in fact["ranges"]:
            case = next(c for c in analysis.cases if c.range == r["range"])
            must = r["verdict"] if "verdict" in r else f"not {r['not']}"
            lines.append(
                f"| {report} | {r['range']} | {r['planted']} | {must} | {verdict_text(case.verdict)} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--record", type=Path, help="write the JSON lines of this checkout's verdict kinds here"
    )
    parser.add_argument("--table", type=Path, nargs=2, metavar=("BEFORE", "AFTER"), help="the Markdown table")
    parser.add_argument(
        "--ncu-default",
        action="store_true",
        help="the table of the planted causes in samples/h100-ncu-default",
    )
    args = parser.parse_args(argv)
    root = Path.cwd() if (Path.cwd() / "samples").is_dir() else Path(__file__).resolve().parents[1]
    if args.record:
        with args.record.open("w") as out:
            record(root, out)
    if args.table:
        print(table(*args.table))
    if args.ncu_default:
        print(ncu_default_table(root))
    if not args.record and not args.table and not args.ncu_default:
        parser.error("give --record FILE, --table BEFORE AFTER or --ncu-default")
    return 0


if __name__ == "__main__":
    sys.exit(main())
