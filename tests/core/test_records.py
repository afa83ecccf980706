"""Typed records (tracekit/records.py): every committed run.json and JSONL row decodes through them, unknown keys
survive a save, a field of the wrong type is one clear line, and the row records match the frame schemas."""

from __future__ import annotations

import json
import shutil
import typing
import zipfile
from pathlib import Path

import msgspec
import pytest

from tracekit import records, schema
from tracekit.analyzers.importer import detect_kind
from tracekit.cli import main
from tracekit.collectors.failures import failure_record
from tracekit.run import Run

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
MANIFESTS = sorted(SAMPLES.glob("**/run.json"))
ROW_FILES = sorted(p for p in SAMPLES.glob("*/raw/*.jsonl"))
PACKAGED_V4 = ROOT / "tests" / "data" / "schema4" / "h200-gemm-probe.zip"
"""The packaged probe as schema 4 wrote it (the package now holds a bundle of the rebuilt sample)."""
SCALARS = {"Int64": int, "Int32": int, "Float64": float, "String": str, "Boolean": bool}


@pytest.mark.parametrize("path", MANIFESTS, ids=[str(p.relative_to(SAMPLES)) for p in MANIFESTS])
def test_every_committed_manifest_decodes_and_round_trips(path: Path) -> None:
    plain = records.decode_json(path.read_bytes())
    record = records.check_manifest(plain)
    assert record.format == "tracekit-run" and record.sources is not None
    assert records.encode_manifest(plain) == plain  # re-saving changes nothing, unknown keys included


def test_the_packaged_probe_manifest_decodes() -> None:
    with zipfile.ZipFile(PACKAGED_V4) as z:
        plain = json.loads(z.read("run.json"))
    assert records.check_manifest(plain).frames.schema_version == 4  # type: ignore[union-attr]
    assert records.encode_manifest(plain) == plain


def test_unknown_keys_survive_a_save(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(SAMPLES / "h200-bench-gemm", run_dir)
    manifest = json.loads((run_dir / "run.json").read_text())
    manifest["from_the_future"] = {"x": [1, 2]}
    manifest["environment"]["gpu_clock_policy"] = "locked"
    manifest["sources"][0]["checksum_kind"] = "blake3"
    (run_dir / "run.json").write_text(json.dumps(manifest))
    run = Run.open(run_dir)
    run.log("test", "a save")
    saved = json.loads((run_dir / "run.json").read_text())
    assert saved["from_the_future"] == {"x": [1, 2]}
    assert saved["environment"]["gpu_clock_policy"] == "locked"
    assert saved["sources"][0]["checksum_kind"] == "blake3"
    assert saved["events"][-1]["message"] == "a save"
    assert run.record.environment.gpu_name == "NVIDIA H200"


def test_a_field_of_the_wrong_type_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(SAMPLES / "h200-bench-gemm", run_dir)
    manifest = json.loads((run_dir / "run.json").read_text())
    manifest["environment"]["sm_count"] = [132]
    (run_dir / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(SystemExit) as exc:
        main(["show", str(run_dir)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) <= 2 and "Traceback" not in err
    assert "$.environment.sm_count" in err and "run.json" in err


def test_missing_fields_take_defaults() -> None:
    record = records.check_manifest({"format": "tracekit-run", "schema_version": 1})
    assert record.sources == [] and record.environment == records.Environment() and record.frames is None


@pytest.mark.parametrize("path", ROW_FILES, ids=[str(p.relative_to(SAMPLES)) for p in ROW_FILES])
def test_every_committed_jsonl_row_decodes_through_its_record(path: Path) -> None:
    kind = detect_kind(path).replace("-", "_")
    if kind not in records.ROWS:
        pytest.skip(f"{kind} rows have no record")
    record = records.ROWS[kind]
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert lines
    for obj in lines:
        again = json.loads(records.jsonl_line(record, obj))
        assert list(again) == list(schema.jsonl_keys(kind))
        for key, value in obj.items():
            if key == "versions" and isinstance(value, str):  # older rows: JSON text, written as the object
                value = json.loads(value)
            if key in again:
                assert again[key] == value, (path.name, key)


def test_row_records_match_the_frame_schemas() -> None:
    """Same keys in the same order as the frame's columns (its id aside), and the same value types."""
    for frame, record in records.ROWS.items():
        assert tuple(record.__struct_fields__) == schema.jsonl_keys(frame), frame
        hints = typing.get_type_hints(record)
        for column in schema.SCHEMAS[frame].columns[1:]:
            allowed = typing.get_args(hints[column.name])
            if isinstance(column.dtype, str):
                assert SCALARS[column.dtype] in allowed, (frame, column.name, allowed)
            else:
                assert any(typing.get_origin(a) in (list, dict) for a in allowed), (frame, column.name)


def test_a_row_of_the_wrong_type_is_refused_with_its_field() -> None:
    with pytest.raises(records.RecordError, match=r"\$\.m"):
        records.jsonl_line(records.Measurement, {"m": "sixteen"})
    line = json.loads(records.jsonl_line(records.Measurement, {"m": "16", "time_us": float("nan")}))
    assert line["m"] == 16 and line["time_us"] is None


def test_failure_rows_carry_versions_as_an_object() -> None:
    row = failure_record(
        backend="torch-bf16",
        op="mm",
        m=1,
        n=2,
        k=3,
        kind="crashed",
        error_type="RuntimeError",
        message="boom",
        versions='{"torch": "2.11.0"}',
        signal="SIGSEGV",
    )
    assert list(row) == list(schema.jsonl_keys("failures"))
    assert row["versions"] == {"torch": "2.11.0"} and row["signal"] == "SIGSEGV"


def test_gpu_of_reads_the_flat_and_the_nested_layout() -> None:
    flat = records.check_manifest(
        json.loads((SAMPLES / "h200-bench-gemm" / "run.json").read_text())
    ).environment
    nested = {"gpu": {"gpu_name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}}
    for env in (flat, nested, msgspec.to_builtins(flat)):
        gpu = records.gpu_of(env)
        assert (gpu.name, gpu.compute_capability, gpu.sm_count) == ("NVIDIA H200", "9.0", 132)
    assert records.gpu_of(None) == records.Gpu() == records.gpu_of({"sm_count": "many"})
    assert records.gpu_of({"gpu": "H200", "gpu_name": "NVIDIA H200"}).name == "NVIDIA H200"
