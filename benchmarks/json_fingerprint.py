"""Hashes every machine-readable output of tracekit on every committed sample and every shared profiling file, so
a refactoring can prove that it changed nothing a user or a script sees.

Each case imports one or more files into a fresh run in a temporary folder (one run per shared file, the
multi-file imports the tests use, and every sample rebuilt from its ``raw/`` with ``import --rebuild``; each
sample is also read as committed), then runs ``show --json``, ``explain --json`` and ``report --format json`` on
it. Every output is normalised (the temporary folder, the checkout and the shared folder become placeholders; the
wall-clock fields ``created``, ``created_unix``, ``built_unix``, ``time_unix`` are masked) and hashed with sha256;
the import's ``--json`` summary, its exit code, the run's ``run.json`` (normalised) and the written frames (per parquet file: its schema and
``hash_rows``) are hashed too. The commands run in this process through ``tracekit.cli.main`` (each one's stdout
and exit code captured), which is what ``python -m tracekit`` runs.

    python benchmarks/json_fingerprint.py -o before.json [--outputs DIR]       # record
    python benchmarks/json_fingerprint.py -o after.json --compare before.json  # prove: lists every difference

``--outputs DIR`` keeps each normalised output as a file, to diff two recordings; ``--only REGEX`` limits the
cases. Exit status with ``--compare``: 0 when every hash matches, 1 when any differs.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SAMPLES = ROOT / "samples"
VOLATILE = {"created", "created_unix", "built_unix", "time_unix"}
"""Keys whose values are wall-clock times of the import, not results."""
_DECOMPRESSED = re.compile(r"/tmp/tracekit-raw-[A-Za-z0-9_]+/")
"""A temporary folder holding a decompressed copy of a raw file, which some error messages name."""
RESNET = "thirdparty/kineto-tbplugin/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
RTX50 = "thirdparty/llm-perf-opt-rtx50"
DAMAGED = b"\x00not a trace\xff" * 64
"""A file no reader can read."""


def _mask(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: ("<masked>" if k in VOLATILE and v is not None else _mask(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_mask(v) for v in obj]
    return obj


class Normaliser:
    """Replaces the machine's paths by placeholders, and masks wall-clock fields of JSON text."""

    def __init__(self, tmp: Path) -> None:
        self.pairs = [
            (str(tmp.resolve()), "<TMP>"),
            (str(tmp), "<TMP>"),
            (str(SHARED.resolve()), "<SHARED>"),
            (str(ROOT.resolve()), "<ROOT>"),
        ]

    def text(self, s: str) -> str:
        for old, new in self.pairs:
            s = s.replace(old, new)
        return _DECOMPRESSED.sub("<DECOMPRESSED>/", s)

    def json(self, s: str) -> str:
        s = self.text(s)
        try:
            obj = json.loads(s)
        except ValueError:
            return s
        return json.dumps(_mask(obj), indent=1, sort_keys=False)


@contextlib.contextmanager
def _captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


def cli(*args: str | Path) -> tuple[int, str, str]:
    """``tracekit ARGS`` in this process: (exit code, stdout, stderr)."""
    from tracekit.cli import main

    code = 0
    with _captured() as (out, err):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return code, out.getvalue(), err.getvalue()


def frame_hashes(run: Path) -> dict[str, str]:
    """Each parquet file of ``run/frames`` (relative path) -> sha256 of its schema and row hashes."""
    import polars as pl

    out = {}
    frames = run / "frames"
    for p in sorted(frames.rglob("*.parquet")) if frames.is_dir() else []:
        if any(part.startswith(".") for part in p.relative_to(frames).parts):
            continue
        df = pl.read_parquet(p, hive_partitioning=False)
        h = hashlib.sha256(str(df.schema).encode())
        h.update(pl.DataFrame({"h": df.hash_rows(seed=0)}).write_csv().encode())
        out[p.relative_to(run).as_posix()] = h.hexdigest()
    return out


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Recorder:
    def __init__(self, tmp: Path, outputs: Path | None) -> None:
        self.norm = Normaliser(tmp)
        self.outputs = outputs
        self.results: dict[str, dict[str, Any]] = {}

    def keep(self, case: str, what: str, text: str) -> str:
        if self.outputs is not None:
            safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", case)
            folder = self.outputs / safe
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{what}.txt").write_text(text)
        return _sha(text)

    def views(self, case: str, run: Path, extra: tuple[str, ...] = ()) -> None:
        """show / explain / report of ``run``: each output's hash and exit code."""
        entry = self.results.setdefault(case, {})
        for what, args in (
            ("show", ("show", run, "--json")),
            ("explain", ("explain", run, "--json", *extra)),
            ("report", ("report", run, "--format", "json", *extra)),
        ):
            code, out, _err = cli(*args)
            entry[what] = {"rc": code, "sha256": self.keep(case, what, self.norm.json(out))}

    def imported(self, case: str, args: tuple[str | Path, ...], run: Path) -> bool:
        """``tracekit import ARGS --json``: its summary, exit code, first stderr line (on failure) and frames."""
        code, out, err = cli("import", *args, "--json")
        entry = self.results.setdefault(case, {})
        summary = self.norm.json(out)
        entry["import"] = {"rc": code, "sha256": self.keep(case, "import", summary)}
        if code not in (0, 4):
            entry["import"]["error"] = self.norm.text(err.strip().splitlines()[-1] if err.strip() else "")
            return False
        self.built(case, run)
        return True

    def built(self, case: str, run: Path) -> None:
        """The run's manifest (normalised) and frames, as an import wrote them."""
        entry = self.results.setdefault(case, {})
        manifest = run / "run.json"
        text = self.norm.json(manifest.read_text()) if manifest.is_file() else ""
        entry["run.json"] = {"sha256": self.keep(case, "run.json", text)}
        entry["frames"] = frame_hashes(run)


def shared_files() -> list[Path]:
    return sorted(p for p in SHARED.rglob("*") if p.is_file())


def rank_job(shared: Path, samples: Path, tmp: Path) -> list[Path]:
    """A many-rank job's files as they arrive, copied under ``tmp/in`` where a name or the content is made up: ranks
    from names, from the file, from the processes of one export; a truncated and a damaged file, repeated names,
    tracekit's JSONL and an Nsight Compute report. tests/readers/test_import_parallel.py imports this job too."""
    inp = tmp / "in"
    (inp / "other").mkdir(parents=True)
    files = []
    for rank in (4, 5):
        files.append(inp / f"rank{rank}.json.gz")
        shutil.copy(shared / RESNET, files[-1])
    files.append(inp / "other" / "rank5.json.gz")  # the same name twice: raw/ numbers the second copy
    shutil.copy(shared / RESNET, files[-1])
    truncated = inp / "rank6.json.gz"  # read in part: the run is partial, its kernels are kept
    truncated.write_bytes((shared / RESNET).read_bytes()[:300_000])
    files.append(truncated)
    damaged = inp / "rank7.json.gz"  # unreadable: recorded as failed, the others kept
    damaged.write_bytes(DAMAGED)
    files.append(damaged)
    gloo = samples / "h200-ranks-gloo/raw"
    files += [gloo / "nsys.rank0.sqlite.xz", gloo / "nsys.rank1.sqlite.xz", gloo / "nsys.rank1.nsys-rep.xz"]
    files += [
        shared / "thirdparty/nsys-ai/mfu_2gpu_before.sqlite",
        shared / "thirdparty/hta/with_gpu_user_annotation__step_based_trace_2543932.json.gz",
        shared / "thirdparty/hta/nccl_parser_config__nccl_data.json.gz",
    ]
    files += [
        samples / "h200-bench-gemm/raw/failures.jsonl",
        samples / "h200-bench-gemm/raw/measurements.jsonl",
    ]
    # the same failures recorded by two passes: kept once across the files
    files.append(inp / "other" / "failures.jsonl")
    shutil.copy(samples / "h200-bench-gemm/raw/failures.jsonl", files[-1])
    ncu = inp / "ncu.rank2.ncu-rep.xz"
    shutil.copy(samples / "h200-capture-gemm/raw/ncu.ncu-rep.xz", ncu)
    files.append(ncu)
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", type=Path, required=True, help="JSON file of the hashes to write")
    ap.add_argument("--outputs", type=Path, help="keep every normalised output in this folder")
    ap.add_argument("--compare", type=Path, help="a recording to compare with: list every difference")
    ap.add_argument("--only", help="only cases whose name matches this regular expression")
    args = ap.parse_args(argv)
    only = re.compile(args.only) if args.only else None
    t0 = time.perf_counter()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="tracekit-fp-") as tmp_s:
        tmp = Path(tmp_s)
        rec = Recorder(tmp, args.outputs)

        def wanted(case: str) -> bool:
            return only is None or bool(only.search(case))

        cases: list[str] = []
        for i, sample in enumerate(sorted(p for p in SAMPLES.iterdir() if (p / "run.json").is_file())):
            for how in ("committed", "rebuilt"):
                case = f"sample:{sample.name}:{how}"
                if not wanted(case):
                    continue
                cases.append(case)
                copy = tmp / f"s{i}-{how}"
                shutil.copytree(sample, copy)
                if how == "rebuilt":
                    code, out, _ = cli("import", "--rebuild", copy, "--json")
                    rec.results.setdefault(case, {})["import"] = {
                        "rc": code,
                        "sha256": rec.keep(case, "import", rec.norm.json(out)),
                    }
                    rec.built(case, copy)
                rec.views(case, copy)
                shutil.rmtree(copy)
        if SHARED.is_dir():
            for i, path in enumerate(shared_files()):
                case = f"shared:{path.relative_to(SHARED).as_posix()}"
                if not wanted(case):
                    continue
                cases.append(case)
                run = tmp / f"f{i}"
                if rec.imported(case, (path, "-o", run), run):
                    rec.views(case, run)
                shutil.rmtree(run, ignore_errors=True)
            multi: list[tuple[str, list[Path], tuple[str, ...], tuple[str, ...]]] = [
                (
                    "multi:h200-probe ncu+sqlite",
                    [SHARED / "h200-probe/probe.ncu-rep", SHARED / "h200-probe/probe.sqlite"],
                    (),
                    (),
                ),
                ("multi:rtx50 csv", sorted((SHARED / RTX50).glob("kernel_*_ncu.*.csv")), (), ()),
                (
                    "multi:rtx50 csv --device rtx-pro-6000",
                    sorted((SHARED / RTX50).glob("kernel_*_ncu.*.csv")),
                    (),
                    ("--device", "rtx-pro-6000"),
                ),
                (
                    "multi:ranks-gloo raw",
                    sorted((SAMPLES / "h200-ranks-gloo/raw").glob("nsys.rank*.xz")),
                    (),
                    (),
                ),
            ]
            job_dir = tmp / "job"
            job_files = rank_job(SHARED, SAMPLES, job_dir)
            multi += [
                ("multi:rank job --workers 1", job_files, ("--workers", "1"), ()),
                ("multi:rank job --workers 2", job_files, ("--workers", "2"), ()),
            ]
            for i, (case, files, opts, view_opts) in enumerate(multi):
                if not wanted(case):
                    continue
                cases.append(case)
                run = tmp / f"m{i}"
                if rec.imported(case, (*files, "-o", run, *opts), run):
                    rec.views(case, run, view_opts)
                shutil.rmtree(run, ignore_errors=True)
        else:
            print(f"note: {SHARED} is absent: samples only", file=sys.stderr)
    payload = {
        "cases": rec.results,
        "seconds": round(time.perf_counter() - t0, 1),
        "load_average_at_start": [round(x, 2) for x in load],
    }
    args.out.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    print(f"{len(cases)} cases in {payload['seconds']} s -> {args.out}")
    if args.compare is None:
        return 0
    old = json.loads(args.compare.read_text())["cases"]
    differ = 0
    for case in sorted(set(old) | set(rec.results)):
        if only is not None and not only.search(case):
            continue
        a, b = old.get(case), rec.results.get(case)
        if a is None or b is None:
            print(f"{case}: only in {'the new' if a is None else 'the old'} recording")
            differ += 1
            continue
        for what in sorted(set(a) | set(b)):
            if what == "frames":
                fa, fb = a.get("frames", {}), b.get("frames", {})
                for rel in sorted(set(fa) | set(fb)):
                    if fa.get(rel) != fb.get(rel):
                        print(f"{case}: frame {rel} differs")
                        differ += 1
            elif a.get(what) != b.get(what):
                print(f"{case}: {what} differs ({a.get(what)} -> {b.get(what)})")
                differ += 1
    print("identical" if not differ else f"{differ} difference(s)")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
