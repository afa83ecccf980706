"""Which capture setting keeps the kernels of a program that dies under Nsight Systems? (issue 18 item 3)

Captures benchmarks/foreign/crash_gemms.py (N bf16 GEMMs, then a crash) with ``tracekit capture --nsys`` once per
variant and prints how many kernels each run's nsys SQLite export kept, against a clean run of the same script:

    baseline        no help: the measured H200 result was no kernel table at all
    flush50         --nsys-arg=--cuda-flush-interval=50
    stop            --crash-flush profiler-stop (a fatal-signal handler calls cuProfilerStop, then re-raises)
    stop+flush50    both
    stop+wait1      the handler waits 1 s after cuProfilerStop (TRACEKIT_CRASH_FLUSH_WAIT_S=1)
    ncu             the same crash under Nsight Compute: its exit status and what its log says of the crash

Each row also shows the profiler's own exit status and its log lines about the end of the target (what tracekit
reads a signal from when the return code does not carry it).

Run on the GPU machine from the repository root, with nsys usable by tracekit (TRACEKIT_NSYS, TRACEKIT_NSYS_LIBS):

    python3 benchmarks/foreign/crash_nsys_probe.py --n 50 --die segv --out /tmp/crash-probe

Goal (issue 18): the crashing run keeps at least 90% of the clean run's kernels. Prints one table row per variant
and writes the same rows as JSON lines to OUT/results.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NSYS = ["--nsys"]
VARIANTS: dict[str, tuple[list[str], dict[str, str]]] = {
    "baseline": (NSYS, {}),
    "flush50": ([*NSYS, "--nsys-arg=--cuda-flush-interval=50"], {}),
    "stop": ([*NSYS, "--crash-flush", "profiler-stop"], {}),
    "stop+flush50": ([*NSYS, "--crash-flush", "profiler-stop", "--nsys-arg=--cuda-flush-interval=50"], {}),
    "stop+wait1": ([*NSYS, "--crash-flush", "profiler-stop"], {"TRACEKIT_CRASH_FLUSH_WAIT_S": "1"}),
    "ncu": (["--ncu", "--all-kernels", "--launch-count", "5"], {}),
}
"""Each variant's capture options; ``ncu`` shows what Nsight Compute returns and prints when its target dies."""
_TOOL_SAYS = re.compile(r"terminat|signal|SIG[A-Z]|error code", re.IGNORECASE)


def kernels(sqlite: Path) -> int | None:
    """Kernel rows in an nsys export (0 without a kernel table), None if there is no export."""
    if not sqlite.is_file():
        return None
    con = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            return 0
        return int(con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0])
    finally:
        con.close()


def capture(out: Path, name: str, opts: list[str], env: dict[str, str], n: int, die: str) -> dict:
    run = out / name
    cmd = [
        sys.executable, "-m", "tracekit", "capture", "--no-import", "--json", "--timeout", "300",
        "-o", str(run), *opts, "--", sys.executable, str(HERE / "crash_gemms.py"), "--n", str(n), "--die", die,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, check=False)
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        data = {"status": f"capture printed no JSON (exit {proc.returncode}): {proc.stderr[-300:]}"}
    fails = run / "raw/failures.jsonl"
    first = json.loads(fails.read_text().splitlines()[0]) if fails.is_file() and fails.read_text() else {}
    passes = data.get("passes") or [{}]
    tool = passes[0].get("tool") or "nsys"
    log = run / f"raw/{tool}.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    return {
        "variant": name,
        "die": die,
        "exit": proc.returncode,
        "tool_exit": passes[0].get("exit_code"),
        "tool_says": [line.strip()[:200] for line in text.splitlines() if _TOOL_SAYS.search(line)][-5:],
        "kernels": kernels(run / "raw/nsys.sqlite") if tool == "nsys" else None,
        "status": data.get("status"),
        "reason": data.get("incomplete_reason"),
        "signal": first.get("signal"),
        "stack": bool(first.get("python_stack")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--die", default="segv", choices=["segv", "abort", "kill", "hang"])
    parser.add_argument("--out", type=Path, default=Path("/tmp/crash-probe"))
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = [capture(args.out, "clean", NSYS, {}, args.n, "none")]
    reference = rows[0]["kernels"] or 0
    for name in args.variants.split(","):
        opts, env = VARIANTS[name]
        die = args.die
        if die == "hang":
            opts = [*opts, "--timeout", "20"]
        rows.append(capture(args.out, name, opts, env, args.n, die))
    with (args.out / "results.jsonl").open("w") as f:
        for row in rows:
            row["kept_pct"] = round(100.0 * (row["kernels"] or 0) / reference, 1) if reference else None
            f.write(json.dumps(row) + "\n")
    print(
        f"{'variant':<14} {'die':<6} {'tool exit':>9} {'kernels':>8} {'kept %':>7} {'signal':<8} stack  reason"
    )
    for r in rows:
        print(
            f"{r['variant']:<14} {r['die']:<6} {r['tool_exit']!s:>9} {r['kernels']!s:>8} {r['kept_pct']!s:>7} "
            f"{r['signal']!s:<8} {r['stack']!s:<6} {(r['reason'] or '')[:120]}"
        )
        for line in r["tool_says"]:
            print(f"{'':<16}{r['variant']} log: {line}")


if __name__ == "__main__":
    main()
