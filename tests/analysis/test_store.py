"""The frames store's writes: what it does to be quick must leave the files as a plain polars write makes them."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from polars.testing import assert_frame_equal

from tracekit.analyzers.store import PARQUET, read_frame, write_frame
from tracekit.frames import RANGES
from tracekit.run import PART_FILE, Run


def _ranges(n: int) -> pl.DataFrame:
    """Ranges as a foreign NVTX export gives them: the GEMM fields (strings, integers, floats, the list of
    structs) null throughout, two ranks."""
    rows = [
        {
            "range_id": i,
            "source": "t",
            "rank": i % 2,
            "kind": "push_pop",
            "pid": 1,
            "tid": 1,
            "name": f"n{i % 3}",
            "start_ns": i,
            "end_ns": i + 5,
        }
        for i in range(n)
    ]
    return RANGES.conform(pl.DataFrame(rows))


def test_columns_null_throughout_are_written_as_a_plain_write_writes_them(tmp_path: Path) -> None:
    df = _ranges(1000)
    empty = [c for c in df.columns if df[c].null_count() == df.height]
    assert {"fields", "m", "dtype_a", "flops"} <= set(empty)  # every kind of column null throughout
    run = Run.create(tmp_path / "r")
    write_frame(run, "ranges", df)
    plain = tmp_path / "plain.parquet"
    df.write_parquet(plain, **PARQUET)  # type: ignore[arg-type]
    assert run.frame_path("ranges").read_bytes() == plain.read_bytes()
    assert_frame_equal(read_frame(run, "ranges"), df)


def test_a_partitioned_frame_keeps_its_schema_and_rows(tmp_path: Path) -> None:
    df = _ranges(1000)
    run = Run.create(tmp_path / "r")
    write_frame(run, "ranges", df, partition_by="rank")
    for rank in (0, 1):
        part = run.frame_dir("ranges") / f"rank={rank}" / PART_FILE
        assert pl.read_parquet_schema(part) == df.drop("rank").schema
        assert_frame_equal(pl.read_parquet(part), df.filter(pl.col("rank") == rank).drop("rank"))
