"""The run's manifest is read as its typed record (``Run.record``) and changed through ``Run``'s methods: every
committed run.json decodes and is written back byte for byte, each method keeps the file's own layout (key order,
nulls, keys this tracekit does not know), a value of the wrong type is refused before it reaches the manifest, and
no module but the run's own indexes the manifest as a dict."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import msgspec
import pytest

from tracekit.collectors.capture.common import PassResult
from tracekit.errors import SchemaError
from tracekit.records import Bundle, CapturePass, FramesInfo, RunRecord
from tracekit.run import MANIFEST, Run

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
MANIFESTS = sorted(SAMPLES.glob("**/run.json"))
PACKAGES = ("tracekit", "collectors", "analyzers", "tui")
OWNERS = {"tracekit/run.py", "tracekit/records.py"}
"""The modules that hold the manifest as plain data."""
PASS_THROUGH = {"analyzers/analysis/api.py": 1}
"""The Python API's ``tracekit.Run.manifest`` (README, "Python"): run.json as a dict for users, one access."""


def _copy(manifest: Path, tmp_path: Path) -> Path:
    """A run folder in ``tmp_path`` holding only a copy of ``manifest``."""
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copyfile(manifest, folder / MANIFEST)
    return folder


@pytest.mark.parametrize("path", MANIFESTS, ids=[str(p.parent.relative_to(SAMPLES)) for p in MANIFESTS])
def test_every_committed_manifest_is_a_record_and_saves_byte_for_byte(path: Path, tmp_path: Path) -> None:
    folder = _copy(path, tmp_path)
    before = (folder / MANIFEST).read_bytes()
    plain = json.loads(before)
    run = Run.open(folder)
    record = run.record
    assert isinstance(record, RunRecord)
    assert record.schema_version == plain["schema_version"]
    assert record.status == plain.get("status", "complete")
    assert [s.path for s in record.sources] == [s["path"] for s in plain.get("sources") or []]
    passes = (plain.get("capture") or {}).get("passes")
    assert [p.tool for p in record.capture.passes or []] == [p["tool"] for p in passes or []]
    assert record.environment.gpu_name == (plain.get("environment") or {}).get("gpu_name")
    if plain.get("frames"):
        assert record.frames is not None and record.frames.rows == plain["frames"]["rows"]
    run.save()
    assert (folder / MANIFEST).read_bytes() == before
    assert run.manifest == plain


def _foreign(tmp_path: Path) -> tuple[Path, dict]:
    """The capture sample's run.json with keys this tracekit does not know at every level it types."""
    folder = _copy(SAMPLES / "h200-capture-gemm" / MANIFEST, tmp_path)
    plain = json.loads((folder / MANIFEST).read_text())
    plain["from_the_future"] = {"x": [1, 2]}
    plain["environment"]["gpu_clock_policy"] = "locked"
    plain["capture"]["sweep_id"] = 7
    plain["capture"]["passes"][0]["host_load"] = 0.5
    plain["sources"][0]["checksum_kind"] = "blake3"
    plain["frames"]["writer"] = "other"
    (folder / MANIFEST).write_text(json.dumps(plain, indent=2) + "\n")
    return folder, plain


def test_each_method_changes_its_key_only_and_keeps_unknown_ones(tmp_path: Path) -> None:
    folder, plain = _foreign(tmp_path)
    run = Run.open(folder)
    run.mark_partial(True, ["one file was cut short"])
    run.set_frames(FramesInfo(schema_version=7, built_unix=1.0, rows={"kernels": 3}, partitioned={}))
    run.set_passes([PassResult("nsys", ["nsys", "profile"], exit_code=0, wall_s=1.23456).as_record()])
    run.add_source({"path": "raw/extra.json", "kind": "kineto", "sha256": None})
    run.note_opened_from(tmp_path / "t.zip")  # in memory only
    run.save()
    saved = json.loads((folder / MANIFEST).read_text())
    new = [k for k in ("partial", "import_warnings", "bundle") if k not in plain]
    assert "bundle" in new and list(saved) == [*plain, *new]  # new keys last, the others in place
    assert saved["from_the_future"] == {"x": [1, 2]} and saved["environment"] == plain["environment"]
    assert saved["capture"]["sweep_id"] == 7 and list(saved["capture"]) == list(plain["capture"])
    assert saved["capture"]["passes"] == [
        {
            "tool": "nsys",
            "argv": ["nsys", "profile"],
            "exit_code": 0,
            "wall_s": 1.235,
            "timed_out": False,
            "interrupted": False,
            "signal": None,
            "files": [],
            "status": "ok",
            "reason": None,
        }
    ]
    assert saved["sources"][0] == plain["sources"][0]  # checksum_kind kept
    assert saved["sources"][-1] == {"path": "raw/extra.json", "kind": "kineto", "sha256": None}
    frames = {"schema_version": 7, "built_unix": 1.0, "rows": {"kernels": 3}, "partitioned": {}}
    assert saved["frames"] == frames
    assert saved["partial"] is True and saved["import_warnings"] == ["one file was cut short"]
    assert saved["bundle"] == {"opened_from": str(tmp_path / "t.zip")}
    for key in ("command", "created", "events", "status", "incomplete_reason"):
        assert saved[key] == plain[key]
    record = run.record
    assert record.partial is True and record.frames is not None and record.frames.rows == {"kernels": 3}
    assert record.capture.passes is not None and record.capture.passes[0].wall_s == 1.235
    assert isinstance(record.bundle, Bundle) and record.bundle.opened_from == str(tmp_path / "t.zip")


def test_the_record_follows_every_change(tmp_path: Path) -> None:
    run = Run.create(tmp_path / "run", environment={"gpu_name": "NVIDIA H100"})
    assert run.record.environment.gpu_name == "NVIDIA H100" and run.record.status == "complete"
    run.set_environment({"gpu_name": "NVIDIA H200", "sm_count": 132, "driver": None})
    run.mark("incomplete", "stopped")
    assert run.record.environment.gpu_name == "NVIDIA H200" and run.record.environment.sm_count == 132
    assert run.record.status == "incomplete" and run.record.incomplete_reason == "stopped"
    on_disk = Run.open(run.path)
    assert on_disk.record == run.record
    assert on_disk.manifest["environment"] == {"gpu_name": "NVIDIA H200", "sm_count": 132, "driver": None}


def test_the_record_and_the_manifest_copy_cannot_change_the_run(tmp_path: Path) -> None:
    run = Run.create(tmp_path / "run", environment={"gpu_name": "NVIDIA H200"})
    with pytest.raises(AttributeError):
        run.record.environment.gpu_name = "NVIDIA B200"  # type: ignore[misc]
    copy = run.manifest
    copy["environment"]["gpu_name"] = "NVIDIA B200"
    assert run.manifest["environment"]["gpu_name"] == "NVIDIA H200"
    assert run.record.environment.gpu_name == "NVIDIA H200"


def test_a_value_of_the_wrong_type_is_refused_before_it_is_recorded(tmp_path: Path) -> None:
    run = Run.create(tmp_path / "run", environment={"gpu_name": "NVIDIA H200"})
    before = (run.path / MANIFEST).read_bytes()
    with pytest.raises(SchemaError, match=r"environment.*\$\.sm_count"):
        run.set_environment({"gpu_name": "NVIDIA H200", "sm_count": [132]})
    with pytest.raises(SchemaError, match="source"):
        run.set_sources([{"kind": "kineto"}])  # no path
    run.save()
    assert (run.path / MANIFEST).read_bytes() == before
    assert run.record.environment.sm_count is None


def test_a_pass_record_names_the_ncu_part_only_for_an_ncu_pass() -> None:
    plain = msgspec.to_builtins(PassResult("nsys", ["nsys"]).as_record())
    assert "ncu" not in plain and plain["signal"] is None and plain["reason"] is None
    ncu = PassResult("ncu", ["ncu"], ncu={"bound": "2 per range"}).as_record()
    assert ncu.ncu == {"bound": "2 per range"}
    assert list(msgspec.to_builtins(ncu))[-1] == "ncu"
    assert msgspec.convert(msgspec.to_builtins(ncu), CapturePass) == ncu


def test_a_bundle_manifest_replaces_the_bundle_key_last(tmp_path: Path) -> None:
    folder, plain = _foreign(tmp_path)
    run = Run.open(folder)
    run.note_opened_from("older.zip")
    packed = run.bundled_manifest(Bundle(from_="h200-capture-gemm", raw=False))
    assert list(packed) == [*plain, "bundle"]
    assert packed["bundle"] == {"from": "h200-capture-gemm", "raw": False}
    assert packed["from_the_future"] == {"x": [1, 2]}
    folder.rename(tmp_path / "0123abcd")
    (tmp_path / "0123abcd" / MANIFEST).write_text(json.dumps(packed))
    assert Run.open(tmp_path / "0123abcd").name == "h200-capture-gemm"


def _manifest_uses(text: str) -> list[str]:
    """Each ``.manifest`` attribute read of ``text`` (``plan.manifest()``, a method of another object, is not)."""
    return re.findall(r"\.manifest\b(?!\s*\()", text)


def test_no_module_but_the_runs_own_reads_the_manifest_as_a_dict() -> None:
    found: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            uses = _manifest_uses(path.read_text())
            if uses and rel not in OWNERS:
                found[rel] = len(uses)
    assert found == PASS_THROUGH, "read Run.record and change the manifest through Run's methods"
    assert _manifest_uses('x = run.manifest["status"]; plan.manifest()') == [".manifest"]


def test_torch_and_cuda_errors_round_trip_and_are_typed(tmp_path: Path) -> None:
    """A fingerprint taken where torch or CUDA failed holds ``torch_error`` / ``cuda_error`` after the device
    fields (collectors/env.py ``device_info``): the record types them, and a save writes the file back as it was."""
    folder = _copy(SAMPLES / "h200-capture-gemm" / MANIFEST, tmp_path)
    plain = json.loads((folder / MANIFEST).read_text())
    env = plain["environment"]
    at = list(env).index("device_count") + 1
    items = list(env.items())
    errors = {
        "torch_error": "ModuleNotFoundError: No module named 'torch'",
        "cuda_error": "RuntimeError: CUDA driver initialization failed",
    }
    plain["environment"] = dict(items[:at] + list(errors.items()) + items[at:])
    (folder / MANIFEST).write_text(json.dumps(plain, indent=2) + "\n")
    before = (folder / MANIFEST).read_bytes()
    run = Run.open(folder)
    assert run.record.environment.torch_error == errors["torch_error"]
    assert run.record.environment.cuda_error == errors["cuda_error"]
    run.save()
    assert (folder / MANIFEST).read_bytes() == before
    assert list(run.manifest["environment"]) == list(plain["environment"])
    # absent in a fingerprint where torch and CUDA answered: None, and nothing is added on save
    (tmp_path / "clean").mkdir()
    clean = Run.open(_copy(SAMPLES / "h200-capture-gemm" / MANIFEST, tmp_path / "clean"))
    assert clean.record.environment.torch_error is None and clean.record.environment.cuda_error is None
    with pytest.raises(SchemaError):
        run.set_environment({**plain["environment"], "torch_error": 3})
