"""Frame schemas: declared once in tracekit/schema.py without polars, built into polars dtypes by tracekit/frames.py,
nested values as List / Struct columns, and runs of the previous schema (tests/data/schema4: four samples and the
packaged probe as schema 4 wrote them, before the samples were rebuilt) migrated on read: their JSON text columns
come back as the nested columns, the files untouched."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_series_equal

from tracekit import schema
from tracekit.analyzers.importer import import_into
from tracekit.analyzers.store import frames_in_memory, load_frames, open_run, read_frame
from tracekit.frames import SPECS, migrate, polars_dtype
from tracekit.run import Run

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
OLD = ROOT / "tests" / "data" / "schema4"
# runs whose frames schema 4 wrote: committed samples as they were before `import --rebuild` (run.json and frames)
RUNS_V4 = sorted(p.parent for p in OLD.glob("*/run.json"))
PACKAGED_V4 = OLD / "h200-gemm-probe.zip"

NESTED = {
    ("ranges", "fields"): pl.List(pl.Struct({"key": pl.String, "value": pl.String})),
    ("ncu", "nvtx_stack"): pl.List(pl.Struct({"domain": pl.String, "name": pl.String})),
    ("failures", "versions"): pl.List(pl.Struct({"package": pl.String, "version": pl.String})),
    ("gemms", "aux_kernels"): pl.List(pl.String),
    ("moe", "counts"): pl.List(pl.Int64),
    ("moe", "expert_time_us"): pl.List(pl.Float64),
    ("moe_routing", "counts"): pl.List(pl.Int64),
}
"""The columns that held JSON text up to schema version 4."""


def _blocked(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where importing polars fails."""
    prelude = "import sys; sys.modules['polars'] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=60)


def test_schema_and_records_import_without_polars() -> None:
    done = _blocked(
        "import tracekit.schema as s, tracekit.records as r\n"
        "print(len(s.SCHEMAS), s.jsonl_keys('failures')[0], r.Failure.__name__)"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(len(SPECS)), "backend", "Failure"]


def test_the_polars_block_catches_an_import() -> None:
    """The check above can fail: the same block stops tracekit.frames, which imports polars."""
    done = _blocked("import tracekit.frames")
    assert done.returncode != 0 and "polars" in done.stderr


def test_collectors_take_their_row_keys_from_the_schema_without_polars() -> None:
    done = _blocked(
        "from tracekit.collectors.worker import MEASUREMENT_KEYS\n"
        "from tracekit.collectors.failures import FAILURE_KEYS\n"
        "from tracekit.collectors.moe.cases import MOE_KEYS\n"
        "import tracekit.schema as s\n"
        "assert MEASUREMENT_KEYS == s.jsonl_keys('measurements'), MEASUREMENT_KEYS\n"
        "assert FAILURE_KEYS == s.jsonl_keys('failures'), FAILURE_KEYS\n"
        "assert MOE_KEYS == s.jsonl_keys('moe'), MOE_KEYS\n"
    )
    assert done.returncode == 0, done.stderr


def test_frames_are_built_from_the_declarations() -> None:
    assert list(SPECS) == list(schema.SCHEMAS)
    for name, spec in SPECS.items():
        declared = schema.SCHEMAS[name]
        assert [c.name for c in spec.columns] == list(declared.names), name
        assert list(spec.schema.values()) == [polars_dtype(c.dtype) for c in declared.columns], name


def test_nested_values_are_list_and_struct_columns_not_json_text() -> None:
    for (frame, column), dtype in NESTED.items():
        assert SPECS[frame].schema[column] == dtype, (frame, column)
    texts = [
        (s.name, c.name)
        for s in schema.SCHEMAS.values()
        for c in s.columns
        if c.dtype == "String" and re.search(r"\bJSON (list|object|text)\b|\bas JSON\b", c.doc)
    ]
    assert texts == []
    assert {(s.name, c.name) for s in schema.SCHEMAS.values() for c in s.nested()} == set(NESTED)


def test_runs_of_the_previous_schema_are_kept_for_these_tests() -> None:
    assert len(RUNS_V4) >= 4, [p.name for p in RUNS_V4]
    for run in RUNS_V4:
        assert json.loads((run / "run.json").read_text())["frames"]["schema_version"] == 4, run.name


@pytest.mark.parametrize("sample", RUNS_V4, ids=[p.name for p in RUNS_V4])
def test_a_sample_of_the_previous_schema_opens_migrated(sample: Path) -> None:
    """Each of these runs was written by schema 4: its frames are read from disk (no rebuild from raw/) and
    every JSON text column comes back nested, holding what the text held."""
    run = open_run(sample)
    assert run.manifest["frames"]["schema_version"] == 4 and run.frames_migratable()
    frames = load_frames(run)
    assert not frames_in_memory(run)
    for (frame, column), dtype in NESTED.items():
        got = frames[frame][column]
        assert got.dtype == dtype, (frame, column)
        path = run.frame_path(frame)
        if not path.is_file():  # partitioned: the rank frames hold no JSON text column
            continue
        stored = pl.read_parquet(path)[column]
        assert stored.dtype in (pl.String, pl.Null) or stored.dtype == dtype
        assert got.null_count() == stored.null_count(), (frame, column)
        for text, value in zip(stored.to_list()[:50], got.to_list()[:50], strict=True):
            if text is None:
                continue
            obj = json.loads(text)
            if isinstance(obj, dict):
                key, val = dtype.inner.fields  # type: ignore[attr-defined]
                obj = [{key.name: k, val.name: v} for k, v in sorted(obj.items())]
            assert value == obj, (frame, column)


def test_migration_equals_a_fresh_import(tmp_path: Path) -> None:
    """The migrated frames of a committed capture hold what an import by this schema writes."""
    sample = OLD / "h200-capture-gemm"
    fresh = tmp_path / "fresh"
    shutil.copytree(sample, fresh)
    shutil.copytree(SAMPLES / "h200-capture-gemm" / "raw", fresh / "raw")  # what schema 4 imported it from
    import_into(Run.open(fresh))
    new = Run.open(fresh)
    assert new.frames_current() and not new.frames_migratable()
    old = load_frames(open_run(sample))
    for frame, column in (("ncu", "nvtx_stack"), ("ranges", "fields"), ("failures", "versions")):
        assert pl.read_parquet(new.frame_path(frame)).schema[column] == NESTED[(frame, column)]
        assert_series_equal(old[frame][column], read_frame(new, frame)[column])  # type: ignore[index]
    assert old["ncu"]["nvtx_stack"].drop_nulls().len() == 30


def test_failure_versions_from_an_older_worker_read_as_nested(tmp_path: Path) -> None:
    """A failure row whose versions are JSON text (as benchmark workers wrote them) and one whose versions are an
    object (as they write them now) import into the same nested value."""
    from tracekit.analyzers.readers.jsonl import read_jsonl_records

    rows = [
        {"backend": "b", "kind": "crashed", "error_type": "E", "message": "m", "versions": text}
        for text in ('{"triton": "3.6.0", "torch": "2.11.0"}', {"torch": "2.11.0", "triton": "3.6.0"})
    ]
    path = tmp_path / "failures.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    versions = read_jsonl_records(path, "failures").frames["failures"]["versions"].to_list()
    want = [{"package": "torch", "version": "2.11.0"}, {"package": "triton", "version": "3.6.0"}]
    assert versions == [want, want]


def test_migrate_leaves_nested_frames_alone_and_unreadable_text_null() -> None:
    df = pl.DataFrame({"moe_id": [0, 1, 2], "counts": ["[1, 2]", "not json", None]})
    out = migrate("moe", df)
    assert out["counts"].to_list() == [[1, 2], None, None]
    assert migrate("moe", out).equals(out)


def test_the_packaged_probe_opens_migrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    with zipfile.ZipFile(PACKAGED_V4) as z:
        assert json.loads(z.read("run.json"))["frames"]["schema_version"] == 4
    run = open_run(PACKAGED_V4)
    frames = load_frames(run)
    assert not frames_in_memory(run)
    assert frames["ncu"]["nvtx_stack"].dtype == NESTED[("ncu", "nvtx_stack")]
    assert frames["ncu"]["nvtx_stack"].drop_nulls().len() == frames["ncu"].height > 0
