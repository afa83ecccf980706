"""Run the bad-input corpus of tests/test_robustness.py through the CLI and print docs/ROBUSTNESS.md's table.

Usage: python benchmarks/robustness_table.py [--shared ../shared/data] > table.md

Each row: the input, what tracekit answered (exit code, the line it printed) and what was kept, as observed
in this run, not as intended.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import _robustness_corpus as C


def _clean(text: str, base: Path) -> str:
    text = text.replace(str(base) + "/", "").replace("|", "\\|")
    text = re.sub(r"/tmp/\S+?/", "", text)
    return text if len(text) <= 160 else text[:157] + "..."


def _answer(r: C.Result, base: Path) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip() and not ln.startswith("tracekit: reading ")]
    if r.rc == 2:
        return f"**{r.rc}** `{_clean(lines[-1], base)}`"
    warn = [ln for ln in lines if "warning" in ln or "skipped" in ln]
    return f"**{r.rc}**" + (f" `{_clean(warn[0], base)}`" if warn else "")


def _kept(run: Path, rc: int) -> str:
    if rc == 2 or not (run / "run.json").is_file():
        return "nothing written" if not run.exists() else "the folder as it was"
    show = C.cli("show", run, "--json")
    if show.rc != 0:
        return f"show exits {show.rc}"
    d = json.loads(show.stdout)
    parts = [f"{d['kernel_count']} kernels", f"{d['range_count']} ranges", f"{d['ncu_kernel_count']} ncu"]
    if d["failures"]:
        parts.append(f"{len(d['failures'])} failures")
    tag = "; marked partial" if d["run"]["partial"] else ""
    return f"run: {', '.join(parts)}; the file kept in raw/{tag}"


def _capture(tmp: Path, limit: int, code: str) -> tuple[int, str, Path]:
    out = tmp / f"capture-{limit}"

    def lim() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracekit",
            "capture",
            "-o",
            str(out),
            "--timeout",
            "20",
            "--",
            sys.executable,
            "-c",
            code,
        ],
        preexec_fn=lim,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return p.returncode, p.stderr, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=C.SHARED)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="tracekit-robust-"))
    src = C.find_sources(args.shared if args.shared.is_dir() else None, base / "src")
    cases = C.CASES + C.HOSTILE_CASES
    files = C.build_corpus(src, base / "files", cases)
    print("| input | file | tracekit answered (exit, line) | what was kept |")
    print("|---|---|---|---|")
    for case in cases:
        path = files[case.name]
        if path is None:
            print(f"| {case.kind} | `{case.name}` | (source absent here) | |")
            continue
        run = base / "runs" / case.name
        r = C.cli("import", path, "-o", run)
        print(f"| {case.kind} | `{case.name}` | `import`: {_answer(r, base)} | {_kept(run, r.rc)} |")

    from tracekit.analyzers.importer import import_files

    good, _ = import_files([src.ncu, src.sqlite], base / "good")
    for name, run in C.build_bad_runs(good.path, base / "bad").items():
        r = C.cli("show", run, "--json")
        kept = _kept(run, r.rc) if r.rc != 2 else "the folder as it was"
        if r.rc == 0:
            kept = "frames rebuilt from raw/: " + kept.removeprefix("run: ")
        print(f"| run folder: {C.BAD_RUNS[name][0]} | `{name}` | `show`: {_answer(r, base)} | {kept} |")

    chatty = "for i in range(20000): print('line %d ' % i + 'x' * 80)"
    for limit, what in ((200_000, "log"), (3_000, "manifest")):
        rc, err, out = _capture(base, limit, chatty)
        lines = [
            ln for ln in err.splitlines() if ln.startswith("tracekit: ") and not ln.startswith("tracekit: …")
        ]
        line = (
            lines[-1]
            if rc == 2 or "incomplete:" in lines[-1]
            else next((ln for ln in lines if "✗" in ln), lines[-1])
        )
        m = json.loads((out / "run.json").read_text())
        kept = f"run.json valid, status {m['status']}; raw/plain.log {(out / 'raw/plain.log').stat().st_size:,} bytes"
        print(
            f"| disk full (RLIMIT_FSIZE {limit:,} B) while writing the {what} | `capture` | "
            f"`capture`: **{rc}** `{_clean(line, base)}` | {kept} |"
        )


if __name__ == "__main__":
    main()
