"""Importing a many-rank job: the same rank files read one after another, by local workers, and by Ray tasks.

Makes ``--ranks`` rank files, copies of one real trace named ``rank<R>.json.gz`` (default: the Kineto resnet50
trace in ../shared/data, 8,772 kernels and no ``distributedInfo``, so each copy takes its rank from its name; where
../shared is absent, the H200 sample's ``nsys.rank0.sqlite.xz`` copied as ``nsys.rank<R>.sqlite.xz``). Imports
them with ``--workers 1`` (the serial path), with each ``--workers`` count, and with ``--executor ray`` where ray
is installed (a local Ray of that many CPUs), each in a fresh process, and prints a table: wall time, the peak RSS
of the importing process and of its largest worker, and the ratio to the serial wall time. Then it times one fleet
query over every run's hive partitions (polars ``scan_parquet(..., hive_partitioning=True)``, and DuckDB where
installed): GEMM-named and NCCL kernel time per run and rank.

    python benchmarks/bench_import_parallel.py [--ranks 64] [--workers 2] [--trace FILE] [--no-ray]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACE = (
    ROOT.parent
    / "shared/data/thirdparty/kineto-tbplugin/resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
)
SAMPLE_TRACE = ROOT / "samples/h200-ranks-gloo/raw/nsys.rank0.sqlite.xz"


def make_job(trace: Path, ranks: int, folder: Path) -> list[Path]:
    """``ranks`` copies of ``trace`` named by rank, as a job's per-rank files arrive."""
    folder.mkdir(parents=True, exist_ok=True)
    if trace.name.endswith(".json.gz"):
        names = [f"rank{r}.json.gz" for r in range(ranks)]
    else:
        suffix = "".join(trace.suffixes[-2:]) if trace.suffix in (".xz", ".gz") else trace.suffix
        names = [f"nsys.rank{r}{suffix}" for r in range(ranks)]
    out = []
    for name in names:
        shutil.copyfile(trace, folder / name)
        out.append(folder / name)
    return out


class _RayRss:
    """Polls /proc for Ray's task workers (``ray::read_task`` / ``ray::write_task``) and keeps the largest RSS:
    they are the raylet's children, not ours, so getrusage does not see them."""

    def __init__(self) -> None:
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                    if not cmd.startswith(b"ray::") or b"_task" not in cmd:
                        continue
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            self.peak_kib = max(self.peak_kib, int(line.split()[1]))
                except OSError:
                    continue

    def __enter__(self) -> _RayRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def one(files: list[Path], out: Path, workers: int, executor: str) -> dict[str, float]:
    """One import in this process (run by the parent in a fresh interpreter): wall s and peak RSS in MiB."""
    from tracekit.analyzers.importer import import_files
    from tracekit.analyzers.parallel import import_parallel

    t0 = time.perf_counter()
    ray_rss = None
    if executor == "ray":
        import ray

        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        t0 = time.perf_counter()  # the cluster's start is not the import's
        with _RayRss() as ray_rss:
            _, summary = import_parallel(files, out, executor="ray")
        wall = time.perf_counter() - t0
        ray.shutdown()
    elif workers == 1:
        _, summary = import_files(files, out)
        wall = time.perf_counter() - t0
    else:
        _, summary = import_parallel(files, out, workers=workers)
        wall = time.perf_counter() - t0
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    worker_kib = ray_rss.peak_kib if ray_rss else kids.ru_maxrss
    return {
        "wall_s": wall,
        # CPU of this process and its workers (Ray's workers are not ours: their CPU is not counted)
        "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
        "parent_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_mib": worker_kib / 1024,
        "kernels": summary["rows"]["kernels"],
        "ranks": len(summary["ranks"]),
    }


def fleet_query(runs: Path) -> dict[str, float]:
    """Seconds for one query over every run's kernels partitions: GEMM and NCCL kernel time per run and rank."""
    import polars as pl

    t0 = time.perf_counter()
    kernels = pl.scan_parquet(
        f"{runs}/*/frames/kernels/*/*.parquet", hive_partitioning=True, include_file_paths="path"
    ).with_columns(pl.col("path").str.extract(r"([^/]+)/frames/kernels/").alias("run"))
    per_rank = (
        kernels.group_by("run", "rank")
        .agg(
            pl.col("duration_ns")
            .filter(pl.col("name").str.contains("(?i)gemm|nvjet|cutlass"))
            .sum()
            .alias("gemm"),
            pl.col("duration_ns").filter(pl.col("name").str.contains("(?i)nccl")).sum().alias("comm"),
            pl.len().alias("kernels"),
        )
        .collect()
    )
    out = {
        "polars_s": time.perf_counter() - t0,
        "rows": float(per_rank["kernels"].sum()),
        "groups": per_rank.height,
    }
    try:
        import duckdb
    except ImportError:
        return out
    t0 = time.perf_counter()
    con = duckdb.connect()
    con.execute(
        "SELECT regexp_extract(filename, '([^/]+)/frames/kernels/', 1) AS run, rank, "
        "sum(duration_ns) FILTER (WHERE regexp_matches(name, '(?i)gemm|nvjet|cutlass')) AS gemm, count(*) AS n "
        f"FROM read_parquet('{runs}/*/frames/kernels/*/*.parquet', hive_partitioning = true, filename = true) "
        "GROUP BY ALL"
    ).fetchall()
    out["duckdb_s"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument(
        "--workers", type=int, nargs="+", default=[2], help="worker counts to compare with serial"
    )
    ap.add_argument("--trace", type=Path, help="the trace copied once per rank")
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--repeat", type=int, default=2, help="imports per row; the fastest is shown")
    ap.add_argument(
        "--one", nargs=4, metavar=("FILES_JSON", "OUT", "WORKERS", "EXECUTOR"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    if args.one:
        files_json, out, workers, executor = args.one
        files = [Path(p) for p in json.loads(Path(files_json).read_text())]
        print(json.dumps(one(files, Path(out), int(workers), executor)))
        return
    trace = args.trace or (SHARED_TRACE if SHARED_TRACE.is_file() else SAMPLE_TRACE)
    configs = [("local", 1), *(("local", w) for w in args.workers if w > 1)]
    if not args.no_ray:
        try:
            import ray  # noqa: F401
        except ImportError:
            print("ray is not installed: its row is skipped (pip install 'tracekit[ray]')", file=sys.stderr)
        else:
            configs.append(("ray", max(args.workers)))
    with tempfile.TemporaryDirectory(prefix="tk-bench-import-") as tmp:
        root = Path(tmp)
        files = make_job(trace, args.ranks, root / "job")
        listing = root / "files.json"
        listing.write_text(json.dumps([str(p) for p in files]))
        mib = sum(p.stat().st_size for p in files) / (1 << 20)
        print(
            f"{args.ranks} rank files, copies of {trace.name} ({mib:.1f} MiB in all); {os.cpu_count()} cores, "
            f"load {os.getloadavg()[0]:.1f}"
        )
        print(
            "| files | executor | workers | wall s | CPU s | parent peak RSS MiB | largest worker peak RSS MiB | vs serial |"
        )
        print("|---:|---|---:|---:|---:|---:|---:|---:|")
        serial = None
        for executor, workers in configs:
            best = None
            for i in range(args.repeat):
                out = root / "runs" / f"{executor}-{workers}-{i}"
                proc = subprocess.run(
                    [sys.executable, __file__, "--one", str(listing), str(out), str(workers), executor],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if proc.returncode != 0:
                    print(f"{executor} x{workers}: {proc.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                    continue
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                if i:  # one run per row stays for the fleet query
                    shutil.rmtree(out)
                if best is None or r["wall_s"] < best["wall_s"]:
                    best = r
            if best is None:
                continue
            r = best
            serial = serial or r["wall_s"]
            worker = f"{r['worker_mib']:.0f}" if workers > 1 or executor == "ray" else "–"
            cpu = f"{r['cpu_s']:.1f}" if executor == "local" else f"{r['cpu_s']:.1f} + Ray's"
            print(
                f"| {args.ranks} | {executor} | {workers} | {r['wall_s']:.1f} | {cpu} | {r['parent_mib']:.0f} "
                f"| {worker} | {serial / r['wall_s']:.2f}x |",
                flush=True,
            )
        print(f"load average at the end: {os.getloadavg()[0]:.1f}")
        q = fleet_query(root / "runs")
        line = (
            f"fleet query over {len(configs)} runs ({q['rows']:.0f} kernels, {q['groups']} run x rank groups): "
            f"polars {q['polars_s']:.2f} s"
        )
        if "duckdb_s" in q:
            line += f", DuckDB {q['duckdb_s']:.2f} s"
        print(line)


if __name__ == "__main__":
    main()
