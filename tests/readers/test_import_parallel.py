"""Parallel import (analyzers/parallel.py): many rank files read by worker processes or Ray tasks make the same run
as the serial import, on real files: per-rank Nsight Systems exports from the H200 (samples/h200-ranks-gloo), a
whole-tree 2-GPU export (nsys-ai), Kineto traces with ``distributedInfo`` (HTA) and copies of one trace renamed
``rank<N>.json.gz``, an Nsight Compute report, tracekit's own JSONL records, and damaged files among them."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracekit.analyzers.importer import import_files
from tracekit.analyzers.parallel import _Local, import_parallel, raw_names
from tracekit.analyzers.store import read_frame
from tracekit.cli import main
from tracekit.errors import EXIT_INCOMPLETE, EXIT_MISSING_TOOL, TracekitError
from tracekit.frames import SPECS
from tracekit.run import Run

BENCHMARKS = next(p / "benchmarks" for p in Path(__file__).resolve().parents if (p / "benchmarks").is_dir())
sys.path.insert(0, str(BENCHMARKS))
from json_fingerprint import DAMAGED, rank_job  # noqa: E402  (the job the fingerprint imports too)


def _damaged(path: Path) -> Path:
    path.write_bytes(DAMAGED)
    return path


def _assert_same_run(serial: Path, parallel: Path, given: str | None = None) -> None:
    """Same sources, ranks, warnings, partial flag, frame files and every frame, row for row. ``given``: the
    parallel run's folder as it was passed, when not ``parallel`` itself."""
    a, b = Run.open(serial), Run.open(parallel)
    for key in ("sources", "partial", "import_warnings", "capture", "status"):
        # a failed file's message names it in its own run's raw/, spelled as the run was given
        said = [
            json.dumps(run.manifest[key]).replace(f'"{spelled}/', '"RUN/').replace(f" {spelled}/", " RUN/")
            for run, spelled in ((a, str(serial)), (b, given or str(parallel)))
        ]
        assert said[0] == said[1], key
    for key in ("rows", "partitioned", "schema_version"):
        assert a.manifest["frames"][key] == b.manifest["frames"][key], key
    assert b.frames_current()
    assert [rel for rel, _ in a.frame_files()] == [rel for rel, _ in b.frame_files()]
    assert sorted(p.name for p in a.raw_dir.iterdir()) == sorted(p.name for p in b.raw_dir.iterdir())
    assert not [p for p in b.frames_dir.iterdir() if p.name.startswith(".")]  # no staging left behind
    for name in SPECS:
        fa, fb = read_frame(a, name), read_frame(b, name)
        assert isinstance(fa, pl.DataFrame) and isinstance(fb, pl.DataFrame)
        key = SPECS[name].columns[0].name
        assert_frame_equal(fa.sort(key, nulls_last=True), fb.sort(key, nulls_last=True))
        assert_frame_equal(fa, fb)  # and in the same order


@pytest.fixture(scope="module")
def job(
    shared_data: Path, samples_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[Path], Path]:
    tmp = tmp_path_factory.mktemp("job")
    files = rank_job(shared_data, samples_dir, tmp)
    run, _ = import_files(files, tmp / "serial")
    return files, run.path


def test_parallel_import_makes_the_same_run(job: tuple[list[Path], Path], tmp_path: Path) -> None:
    files, serial = job
    events: list[str] = []
    run, summary = import_parallel(files, tmp_path / "par", workers=2, on_event=events.append)
    _assert_same_run(serial, run.path)
    a = Run.open(serial)
    assert summary["ranks"] == [0, 1, 2, 4, 5, 6] and summary["partial"]
    assert [f["path"] for f in summary["failed"]] == ["raw/rank7.json.gz"]
    assert summary["rows"] == a.manifest["frames"]["rows"] and summary["rows"]["kernels"] > 30_000
    assert a.manifest["frames"]["partitioned"] == dict.fromkeys(
        ["kernels", "memops", "ranges", "ncu", "devices"], "rank"
    )
    # rank 5 comes from two files: its partition holds both, ids placed as the serial import places them
    assert read_frame(run, "kernels").filter(pl.col("rank") == 5)["source"].unique().sort().to_list() == [
        "rank5-1.json.gz",
        "rank5.json.gz",
    ]
    assert events[0] == f"reading {len(files)} files in 2 worker processes"
    assert sorted(e.split(" (")[0] for e in events[1:-1]) == sorted(
        f"{'failed' if n == 'rank7.json.gz' else 'kept' if n.endswith('nsys-rep.xz') else 'read'} {n}"
        for n in raw_names(files)
    )
    assert events[-1] == "writing frames of 6 ranks"


def test_cli_workers_and_serial_agree(job: tuple[list[Path], Path], tmp_path: Path) -> None:
    """`tracekit import --workers 2` and `--workers 1` (today's path): same run, both exit 4 for the damaged file,
    progress on stderr as files complete."""
    files, serial = job
    for workers in ("2", "1"):
        out = tmp_path / f"w{workers}"
        with pytest.raises(SystemExit) as exited:
            main(["import", *map(str, files), "-o", str(out), "--workers", workers])
        assert exited.value.code == EXIT_INCOMPLETE
        _assert_same_run(serial, out)


def test_single_rank_and_unranked_files_stay_one_file_per_frame(
    shared_data: Path, samples_dir: Path, tmp_path: Path
) -> None:
    """Files of one rank or none: the frames are not partitioned, both ways."""
    files = [
        shared_data / "thirdparty/hta/with_gpu_user_annotation__step_based_trace_2543932.json.gz",
        shared_data
        / "thirdparty/hta/critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
        samples_dir / "h200-bench-gemm/raw/failures.jsonl",
        samples_dir / "h200-capture-gemm/raw/nsys.sqlite.xz",
    ]
    serial, _ = import_files(files, tmp_path / "serial")
    run, summary = import_parallel(files, tmp_path / "par", workers=2)
    _assert_same_run(serial.path, run.path)
    assert summary["ranks"] == [0] and run.manifest["frames"]["partitioned"] == {}


def test_no_readable_file_writes_nothing_both_ways(tmp_path: Path) -> None:
    files = [_damaged(tmp_path / "rank0.json.gz"), _damaged(tmp_path / "rank1.json.gz")]
    with pytest.raises(TracekitError) as serial:
        import_files(files, tmp_path / "serial")
    with pytest.raises(TracekitError) as parallel:
        import_parallel(files, tmp_path / "par", workers=2)
    assert type(parallel.value) is type(serial.value)
    assert parallel.value.one_line() == serial.value.one_line()
    assert "none of the 2 files could be read" in serial.value.message
    assert not (tmp_path / "serial").exists() and not (tmp_path / "par").exists()


def _exit_on_second(job: int) -> int:
    if job == 2:
        os._exit(9)  # a worker killed mid-file (out of memory)
    return job * 10


def test_a_dying_worker_is_named_and_the_other_files_are_kept() -> None:
    local = _Local(2)
    with local.session():
        got = {job: (result, why) for job, result, why in local.run(_exit_on_second, [0, 1, 2, 3, 4])}
    assert {j: r for j, (r, why) in got.items() if why is None} == {0: 0, 1: 10, 3: 30, 4: 40}
    assert got[2][0] is None and got[2][1] is not None


def test_executor_ray_without_ray_is_a_missing_tool(
    job: tuple[list[Path], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    # `import ray` raises ImportError, as where it is not installed
    monkeypatch.setitem(sys.modules, "ray", None)
    files, _ = job
    with pytest.raises(SystemExit) as exited:
        main(["import", *map(str, files[:2]), "-o", str(tmp_path / "r"), "--executor", "ray"])
    assert exited.value.code == EXIT_MISSING_TOOL
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tracekit[ray]" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_ray_import_makes_the_same_run(
    job: tuple[list[Path], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One task per file on a local Ray; the run folder given relative to the importing process's folder, which
    the Ray workers do not share."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'tracekit[ray]')")
    files, serial = job
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # its workers start in this folder ...
    monkeypatch.chdir(tmp_path)  # ... and the import runs in another, like a driver on a cluster
    try:
        run, summary = import_parallel(files, Path("ray"), executor="ray")
    finally:
        ray.shutdown()
    assert run.path == Path("ray")
    _assert_same_run(serial, tmp_path / "ray", given="ray")
    assert summary["partial"] and [f["path"] for f in summary["failed"]] == ["raw/rank7.json.gz"]


def test_ctrl_c_keeps_what_was_copied_and_marks_the_run(job: tuple[list[Path], Path], tmp_path: Path) -> None:
    files, _ = job

    def interrupt(event: str) -> None:
        if event.startswith("read "):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_parallel(files, tmp_path / "cut", workers=2, on_event=interrupt)
    run = Run.open(tmp_path / "cut")
    assert run.status == "incomplete" and "interrupted" in str(run.manifest["incomplete_reason"])
    assert not run.frames_current() and any(run.raw_dir.iterdir())
    assert not [p for p in run.frames_dir.iterdir() if p.name.startswith(".")]
