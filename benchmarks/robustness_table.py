"""Run the bad-input corpus of tests/corpus/test_robustness.py through the CLI and print docs/ROBUSTNESS.md's table.

Usage: python benchmarks/robustness_table.py [--shared ../shared/data] > table.md

Each row: the input, what tracekit answered (exit code, the line it printed), its wall time and peak memory
(resident, children included) and what was kept, as observed in this run, not as intended. Then damaged run
folders, hostile bundles, and captures that crash, hang, are killed, interrupted or fill the disk.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import signal
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support import robustness_corpus as C


def _clean(text: str, base: Path) -> str:
    text = text.replace(str(base) + "/", "").replace("|", "\\|")
    text = re.sub(r"/tmp/\S+?/", "", text)
    return text if len(text) <= 160 else text[:157] + "..."


def _cost(r: C.Result) -> str:
    rss = "?" if r.max_rss_mb is None else f"{r.max_rss_mb:,.0f}"
    return f"{r.seconds:.1f} s, {rss} MB"


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


def _member(name: str, data: bytes, mode: int | None = None) -> tuple[zipfile.ZipInfo, bytes]:
    info = zipfile.ZipInfo(name)
    if mode is not None:
        info.create_system = 3
        info.external_attr = mode << 16
    return info, data


def _bundles(base: Path, good: Path) -> None:
    """Zips a stranger could send, opened with `tracekit show`: each refused before anything is written."""
    import warnings

    manifest = (good / "run.json").read_bytes()
    cases = [
        ("path traversal (`raw/../../evil`)", "traversal.zip", [("raw/../../evil.txt", b"x")]),
        ("absolute path", "absolute.zip", [("/tmp/tracekit-evil.txt", b"x")]),
        (
            "symbolic link to /etc/passwd",
            "symlink.zip",
            [_member("raw/link", b"/etc/passwd", stat.S_IFLNK | 0o777)],
        ),
        ("the same name twice", "duplicate.zip", [("raw/a.txt", b"1"), ("raw/a.txt", b"2")]),
        ("a pickle among the frames", "pickle.zip", [("frames/ncu.pkl", b"cos\nsystem\n")]),
        ("a Python file (sitecustomize.py)", "python.zip", [("sitecustomize.py", b"import os")]),
        ("decompression bomb: 64 MiB of zeros in 65 KB", "bomb.zip", [("raw/zeros.bin", b"\0" * (64 << 20))]),
    ]
    for what, name, members in cases:
        path = base / "bundles" / name
        path.parent.mkdir(exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
                zf.writestr("run.json", manifest)
                for info, data in members:
                    zf.writestr(info, data)
        cache = base / "bundle-cache"
        r = C.cli("show", path, env={"TRACEKIT_CACHE_DIR": str(cache)})
        written = [p for p in cache.rglob("*") if p.is_file()] if cache.exists() else []
        kept = "nothing written" if not written else f"{len(written)} file(s) in the cache"
        print(f"| bundle: {what} | `{name}` | `show`: {_answer(r, base)} | {_cost(r)} | {kept} |")


def _captures(base: Path) -> None:
    """`tracekit capture` of benchmarks that crash, hang, are killed or interrupted (no GPU tool: a plain pass)."""
    py = sys.executable
    cases = [
        ("benchmark segfaults", "print('before', flush=True); import ctypes; ctypes.string_at(0)", []),
        (
            "benchmark hangs (--timeout 1)",
            "import time; print('waiting', flush=True); time.sleep(60)",
            ["--timeout", "1"],
        ),
        ("benchmark is killed (SIGKILL)", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", []),
        ("benchmark exits with status 7", "raise SystemExit(7)", []),
    ]
    for what, code, extra in cases:
        out = base / "captures" / what.split()[1]
        start = time.monotonic()
        p = subprocess.run(
            [py, "-m", "tracekit", "capture", "-o", str(out), "--no-import", *extra, "--", py, "-c", code],
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = p.stderr.splitlines()
        line = next((ln for ln in lines if "✗" in ln), "") or next(
            (ln for ln in lines if "incomplete" in ln), ""
        )
        m = json.loads((out / "run.json").read_text())
        kept = f"run.json valid, status {m['status']}; {m['incomplete_reason']}"
        print(
            f"| {what} | `capture` | `capture`: **{p.returncode}** `{_clean(line, base)}` | "
            f"{time.monotonic() - start:.1f} s | {_clean(kept, base)} |"
        )
    # Ctrl-C while the benchmark runs: SIGINT to the tracekit process, as a terminal sends it
    out = base / "captures" / "ctrl-c"
    start = time.monotonic()
    proc = subprocess.Popen(
        [
            py,
            "-m",
            "tracekit",
            "capture",
            "-o",
            str(out),
            "--",
            py,
            "-c",
            "import time; print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = out / "raw" / "plain.log"
    while time.monotonic() - start < 30 and not (log.is_file() and "ready" in log.read_text()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    m = json.loads((out / "run.json").read_text())
    line = next((ln for ln in reversed(err.splitlines()) if "interrupted" in ln), "")
    print(
        f"| Ctrl-C while the benchmark runs | `capture` | `capture`: **{proc.returncode}** `{_clean(line, base)}` | "
        f"{time.monotonic() - start:.1f} s | run.json valid, status {m['status']}; {m['incomplete_reason']}; "
        "raw/plain.log kept |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=C.SHARED)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="tracekit-robust-"))
    src = C.find_sources(args.shared if args.shared.is_dir() else None, base / "src")
    cases = C.CASES + C.HOSTILE_CASES
    files = C.build_corpus(src, base / "files", cases)
    print("| input | file | tracekit answered (exit, line) | time, peak memory | what was kept |")
    print("|---|---|---|---:|---|")
    for case in cases:
        path = files[case.name]
        if path is None:
            print(f"| {case.kind} | `{case.name}` | (source absent here) | | |")
            continue
        run = base / "runs" / case.name
        r = C.cli("import", path, "-o", run)
        print(
            f"| {case.kind} | `{case.name}` | `import`: {_answer(r, base)} | {_cost(r)} | {_kept(run, r.rc)} |"
        )

    from tracekit.analyzers.importer import import_files

    good, _ = import_files([src.ncu, src.sqlite], base / "good")
    for name, run in C.build_bad_runs(good.path, base / "bad").items():
        r = C.cli("show", run, "--json")
        kept = _kept(run, r.rc) if r.rc != 2 else "the folder as it was"
        if r.rc == 0:
            kept = "frames rebuilt from raw/: " + kept.removeprefix("run: ")
        print(
            f"| run folder: {C.BAD_RUNS[name][0]} | `{name}` | `show`: {_answer(r, base)} | {_cost(r)} | {kept} |"
        )
    _bundles(base, good.path)
    _captures(base)

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
            f"`capture`: **{rc}** `{_clean(line, base)}` | | {kept} |"
        )


if __name__ == "__main__":
    main()
