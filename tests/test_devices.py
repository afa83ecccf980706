"""The device catalog: matching real GPU names, internal consistency, user overrides, unknown GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracekit.devices import arch_for, catalog, load_calibration, match_device, normalize_name
from tracekit.errors import BadInputError


def test_every_device_has_sources_and_dense_peaks() -> None:
    _, devices = catalog()
    for key in (
        "h200",
        "h100-sxm",
        "h100-pcie",
        "a100-sxm",
        "l40s",
        "rtx-4090",
        "rtx-5090",
        "rtx-pro-6000",
        "b200",
    ):
        dev = devices[key]
        assert dev.sources.get("peaks_tflops"), key
        assert dev.arch is not None and dev.sm_count and dev.peak_clock_hz, key
        assert dev.memory_bandwidth_bytes_per_s, key
    # Dense, not sparse: the H200's BF16 peak is 989.4, not 1979.
    assert devices["h200"].peak_tflops("bf16") == pytest.approx(989.4)
    assert devices["h200"].peak_tflops("fp8") == pytest.approx(1978.9)
    assert devices["b200"].peak_tflops("fp4") == pytest.approx(9000)


@pytest.mark.parametrize(
    "key",
    ["h200", "h100-sxm", "h100-pcie", "a100-sxm", "l40s", "rtx-pro-6000", "b200", "rtx-2080-ti", "a10g"],
)
def test_peaks_equal_sms_times_clock_times_per_sm_rate(key: str) -> None:
    """Each datasheet peak is SM count x the clock it is quoted at x the architecture's per-SM rate (within 3%)
    — catching a sparse figure, a wrong SM count or a peak clock off by a bin. GeForce half-rate classes are
    exempt (RTX 4090 / 5090 are not in this list)."""
    dev = catalog()[1][key]
    for cls, peak in dev.peaks_tflops.items():
        rate = dev.arch.flops_per_clock_per_sm.get(cls)
        if rate is None or (key == "rtx-2080-ti" and cls == "fp16"):
            continue
        # Hopper quotes CUDA-core FP32 at the 1980 MHz maximum, tensor peaks at 1830 MHz.
        clock = dev.boost_clock_hz if cls == "fp32" and dev.boost_clock_hz else dev.peak_clock_hz
        assert dev.sm_count * clock * rate / 1e12 == pytest.approx(peak, rel=0.03), (key, cls)


def test_hopper_peak_is_quoted_below_the_max_clock() -> None:
    h200 = match_device("NVIDIA H200", "9.0", 132)
    assert h200 is not None and h200.key == "h200"
    assert h200.peak_clock_hz == pytest.approx(1.83e9)
    assert h200.boost_clock_hz == pytest.approx(1.98e9)


@pytest.mark.parametrize(
    ("name", "sm", "key"),
    [
        ("NVIDIA H100 80GB HBM3", 132, "h100-sxm"),
        ("NVIDIA H100 PCIe", 114, "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", 108, "a100-sxm"),
        ("NVIDIA A100-PG509-200", 108, "a100-sxm"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 188, "rtx-pro-6000"),
        ("NVIDIA GeForce RTX 5090", 170, "rtx-5090"),
        ("NVIDIA B200", 148, "b200"),
        ("NVIDIA L40S", 142, "l40s"),
    ],
)
def test_match_names_as_tools_write_them(name: str, sm: int, key: str) -> None:
    dev = match_device(name, None, sm)
    assert dev is not None and dev.key == key


def test_sm120_limits() -> None:
    pro = match_device("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 188)
    assert pro.smem_per_block_optin_bytes == 101_376
    assert any("tcgen05" in n for n in pro.notes)
    assert any("128x128x" in n for n in pro.notes)


def test_devices_of_real_reports_match_the_catalog(shared_data: Path) -> None:
    """Every GPU named in the third-party and probe ncu reports matches an entry whose SM count and opt-in
    shared memory per block agree with what the report's device attributes say."""
    from tracekit.analyzers.readers.ncu.report import read_ncu_report

    reports = [
        "h200-probe/probe.ncu-rep",
        "thirdparty/panjd123-cutlass/report-s8.ncu-rep",
        "thirdparty/esmm-research/profile_e22c00d.ncu-rep",
        "thirdparty/sglang-fork/profile.ncu-rep",
        "thirdparty/yzwang2000-cudacode/profile.ncu-rep",
    ]
    seen = {}
    for rel in reports:
        dev = read_ncu_report(shared_data / rel).frames["devices"].to_dicts()[0]
        spec = match_device(dev["name"], dev["compute_capability"], dev["sm_count"])
        assert spec is not None, dev["name"]
        assert spec.provenance == "catalog"
        assert spec.sm_count == dev["sm_count"], dev["name"]
        assert spec.smem_per_block_optin_bytes == dev["smem_per_block_optin_bytes"], dev["name"]
        assert spec.regs_per_sm == dev["regs_per_sm"]
        seen[dev["name"]] = spec.key
    assert seen == {
        "NVIDIA H200": "h200",
        "NVIDIA A100 80GB PCIe": "a100-pcie",
        "NVIDIA A10G": "a10g",
        "NVIDIA H800": "h800",
        "NVIDIA GeForce RTX 2080 Ti": "rtx-2080-ti",
    }


def test_unknown_gpu_gets_derived_or_unknown_peaks() -> None:
    dev = match_device("NVIDIA Hopper Next", "9.0", 100, clock_hz=1.5e9)
    assert dev is not None and dev.provenance == "derived"
    assert dev.peak_tflops("bf16") == pytest.approx(100 * 1.5e9 * 4096 / 1e12)
    assert dev.smem_per_block_optin_bytes == 232_448
    blind = match_device("Mystery GPU", "12.1", None)
    assert blind is not None and blind.provenance == "unknown" and blind.peak_tflops("bf16") is None
    assert blind.arch.key == "sm_120"  # 12.1 behaves like 12.0
    assert match_device("Tesla V100-SXM2-32GB", "7.0", 80) is None  # 7.0 is not 7.5: no guess upwards
    assert match_device("Mystery GPU") is None
    assert arch_for("8.7").key == "sm_86"


def test_user_file_overrides_and_extends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "devices.json"
    user.write_text(
        json.dumps(
            {
                "devices": {
                    "h200": {"peaks_tflops": {"bf16": 900.0}},
                    "lab-gpu": {
                        "name": "Lab GPU X",
                        "aliases": ["lab gpu x"],
                        "arch": "sm_90",
                        "sm_count": 66,
                        "peak_clock_mhz": 1500,
                        "peaks_tflops": {"bf16": 405.5},
                    },
                }
            }
        )
    )
    monkeypatch.setenv("TRACEKIT_DEVICES", str(user))
    h200 = match_device("NVIDIA H200")
    assert h200.peak_tflops("bf16") == 900.0
    assert h200.peak_tflops("fp8") == pytest.approx(1978.9)  # untouched fields stay
    lab = match_device("NVIDIA Lab GPU X")
    assert lab.key == "lab-gpu" and lab.provenance == "user" and lab.peak_tflops("bf16") == 405.5
    monkeypatch.setenv("TRACEKIT_DEVICES", str(tmp_path / "missing.json"))
    with pytest.raises(BadInputError, match="TRACEKIT_DEVICES"):
        match_device("NVIDIA H200")


def test_normalize_and_calibration_file(tmp_path: Path) -> None:
    assert normalize_name("NVIDIA A100-SXM4-80GB") == "a100 sxm4 80gb"
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(BadInputError, match="not a tracekit calibration"):
        load_calibration(bad)


def _profile(path: Path, gpu: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": "tracekit-calibration", "device": gpu, "gemm": {}}))
    return path


def test_find_calibration_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--calibration, else the run's raw/calibration.json, else the cached profile of the GPU the frames or
    run.json (flat from an import, nested under ``gpu`` from a capture) name; (None, None) when none exists."""
    import polars as pl

    from tracekit.devices import calibration_path, find_calibration
    from tracekit.run import Run

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    run = Run.create(tmp_path / "run", environment={"gpu": {"gpu_name": "NVIDIA H200"}})
    assert find_calibration(run, {}) == (None, None)
    cached = _profile(calibration_path("NVIDIA H200"), "cached")
    assert find_calibration(run, {}) == (json.loads(cached.read_text()), str(cached))
    flat = Run.create(tmp_path / "flat", environment={"gpu_name": "NVIDIA H200"})
    assert find_calibration(flat, {})[1] == str(cached)
    # the devices frame names the GPU first
    other = _profile(calibration_path("NVIDIA B200"), "b200")
    frames = {"devices": pl.DataFrame({"name": ["NVIDIA B200"]})}
    assert find_calibration(run, frames)[1] == str(other)
    carried = _profile(run.raw_dir / "calibration.json", "carried")
    assert find_calibration(run, frames) == (json.loads(carried.read_text()), "raw/calibration.json")
    explicit = _profile(tmp_path / "mine.json", "mine")
    assert find_calibration(run, frames, explicit)[0]["device"] == "mine"
    # a broken profile is an error here; the TUI carries on without it
    carried.write_text("{broken")
    with pytest.raises(BadInputError, match="cannot be read"):
        find_calibration(run, frames)
