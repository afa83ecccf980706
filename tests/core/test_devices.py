"""The device catalog: matching real GPU names, internal consistency, user overrides, unknown GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracekit.devices import arch_for, catalog, load_calibration, match_device, normalize_name, peak_note
from tracekit.errors import BadInputError

ALL = catalog()[1]
FIELDS = {"peaks_tflops", "sm_count", "boost_clock_mhz", "base_clock_mhz", "peak_clock_mhz", "memory_gb"} | {
    "memory_bandwidth_gb_s",
    "l2_bytes",
    "tdp_w",
    "aliases",
}


def test_every_device_names_its_sources_and_dense_peaks() -> None:
    """Every entry: an architecture, a peak per class with the source it came from, a memory bandwidth, names to
    match; its derived / unverified lists name real fields or classes, its half-rate classes are the
    architecture's. Dense, not sparse: the H200's BF16 peak is 989.4, not 1979."""
    for key, dev in ALL.items():
        assert dev.arch is not None and dev.peaks_tflops and dev.sources.get("peaks_tflops"), key
        assert dev.memory_bandwidth_bytes_per_s and dev.memory_gb and dev.aliases, key
        for item in (*dev.derived, *dev.unverified):
            fld, _, cls = item.partition(".")
            assert fld in FIELDS and (not cls or cls in dev.peaks_tflops), (key, item)
        assert set(dev.half_rate) <= set(dev.arch.flops_per_clock_per_sm), key
        assert set(dev.rate_exceptions) <= set(dev.peaks_tflops), key
    assert ALL["h200"].peak_tflops("bf16") == pytest.approx(989.4)
    assert ALL["h200"].peak_tflops("fp8") == pytest.approx(1978.9)
    assert ALL["b200"].peak_tflops("fp4") == pytest.approx(9000)
    assert ALL["rtx-pro-6000"].peak_tflops("fp4") == pytest.approx(2000)
    assert ALL["rtx-pro-6000"].sm_count == 188 and ALL["rtx-pro-6000"].smem_per_block_optin_bytes == 101_376


def test_the_catalog_covers_the_gpus_people_profile_on() -> None:
    """Issue 25 item 7: the parts a run is likely to come from each have an entry with a bf16 (or, before BF16
    math, fp16) peak."""
    want = [
        "v100-sxm2-16gb",
        "v100-sxm2-32gb",
        "v100-pcie",
        "t4",
        "a10",
        "a10g",
        "a30",
        "a40",
        "a100-sxm4-40gb",
        "a100-sxm4-80gb",
        "a100-pcie-40gb",
        "a100-pcie-80gb",
        "l4",
        "l40",
        "l40s",
        "rtx-3060",
        "rtx-3070",
        "rtx-3080",
        "rtx-3090",
        "rtx-3090-ti",
        "rtx-4060",
        "rtx-4060-ti",
        "rtx-4070",
        "rtx-4080",
        "rtx-4090",
        "rtx-5060",
        "rtx-5060-ti",
        "rtx-5070",
        "rtx-5080",
        "rtx-5090",
        "rtx-pro-6000",
        "rtx-a6000",
        "rtx-6000-ada",
        "h20",
        "h100-sxm",
        "h100-pcie",
        "h100-nvl",
        "h200",
        "h200-nvl",
        "gh200-96gb",
        "h800",
        "b200",
        "b300",
        "gb200",
        "gb300",
        "quadro-gp100",
        "p100-sxm2",
        "mi210",
        "mi250",
        "mi250x",
        "mi300x",
        "mi300a",
        "mi325x",
        "mi355x",
    ]
    missing = [k for k in want if k not in ALL]
    assert not missing
    for key in want:
        assert ALL[key].peak_tflops("bf16") or ALL[key].peak_tflops("fp16"), key


def _rate_cases() -> list[tuple[str, str]]:
    return [
        (key, cls)
        for key, dev in ALL.items()
        if dev.sm_count and dev.peak_clock_hz
        for cls in dev.peaks_tflops
        if cls in dev.arch.flops_per_clock_per_sm and cls not in dev.rate_exceptions
    ]


@pytest.mark.parametrize(("key", "cls"), _rate_cases())
def test_peaks_equal_sms_times_clock_times_per_sm_rate(key: str, cls: str) -> None:
    """Each peak is SM (CU) count x the clock it is quoted at x the architecture's per-SM rate, halved where the
    part runs the class at half rate (GeForce FP32 accumulate), within 3%: a sparse figure (2x), a per-GPU figure
    taken from an 8-GPU table, a wrong SM count or a clock off by a bin fails here."""
    dev = ALL[key]
    rate = dev.arch.flops_per_clock_per_sm[cls] * (0.5 if cls in dev.half_rate else 1.0)
    # NVIDIA quotes CUDA-core FP32 (and FP64) at the maximum clock, Hopper's tensor peaks at a lower one.
    clock = dev.boost_clock_hz if cls in ("fp32", "fp64") and dev.boost_clock_hz else dev.peak_clock_hz
    assert dev.sm_count * clock * rate / 1e12 == pytest.approx(dev.peaks_tflops[cls], rel=0.03)


def test_rates_cover_every_class_they_could() -> None:
    """The check above is not vacuous: most peaks of most entries go through it."""
    checked = len(_rate_cases())
    total = sum(len(d.peaks_tflops) for d in ALL.values())
    assert checked >= 0.8 * total, (checked, total)


def test_hopper_peak_is_quoted_below_the_max_clock() -> None:
    h200 = match_device("NVIDIA H200", "9.0", 132)
    assert h200 is not None and h200.key == "h200"
    assert h200.peak_clock_hz == pytest.approx(1.83e9)
    assert h200.boost_clock_hz == pytest.approx(1.98e9)


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
        spec = match_device(
            dev["name"], dev["compute_capability"], dev["sm_count"], memory_bytes=dev["memory_bytes"]
        )
        assert spec is not None, dev["name"]
        assert spec.provenance == "catalog"
        assert spec.sm_count == dev["sm_count"], dev["name"]
        assert spec.smem_per_block_optin_bytes == dev["smem_per_block_optin_bytes"], dev["name"]
        assert spec.regs_per_sm == dev["regs_per_sm"]
        seen[dev["name"]] = spec.key
    assert seen == {
        "NVIDIA H200": "h200",
        "NVIDIA A100 80GB PCIe": "a100-pcie-80gb",
        "NVIDIA A10G": "a10g",
        "NVIDIA H800": "h800",
        "NVIDIA GeForce RTX 2080 Ti": "rtx-2080-ti",
    }


def test_unknown_gpu_gets_no_peak() -> None:
    """A GPU the catalog does not know keeps what its files report and its architecture's limits, never a peak:
    the per-SM rate is not a fact of the architecture (GeForce halves it, the H20 caps it)."""
    dev = match_device("NVIDIA Hopper Next", "9.0", 100, clock_hz=1.5e9)
    assert dev is not None and dev.provenance == "unknown" and dev.peaks_tflops == {}
    assert dev.peak_tflops("bf16") is None and dev.peak_source("bf16") == "unknown"
    assert dev.sm_count == 100 and dev.boost_clock_hz == 1.5e9 and dev.smem_per_block_optin_bytes == 232_448
    blind = match_device("Mystery GPU", "12.1", None)
    assert blind is not None and blind.provenance == "unknown" and blind.peak_tflops("bf16") is None
    assert blind.arch.key == "sm_120"  # 12.1 behaves like 12.0
    assert match_device("Mystery GPU").arch is None
    assert match_device(None) is None
    assert (
        arch_for("8.7").key == "sm_87" and arch_for("10.3").key == "sm_103" and arch_for("7.0").key == "sm_70"
    )
    assert arch_for("7.2").key == "sm_70" and arch_for("6.1").key == "sm_60" and arch_for("5.2") is None


def test_amd_gpu_never_gets_nvidia_limits() -> None:
    """HIP reports gfx90a as compute capability 9.0: that is not Hopper. An AMD name keeps no CUDA architecture;
    a gfx name gives the AMD one."""
    radeon = match_device("AMD Radeon Graphics", "9.0", 104, memory_bytes=68_702_699_520)
    assert radeon.provenance == "unknown" and radeon.arch is None
    assert set(radeon.candidates) == {"mi210", "mi250"}
    gfx = match_device("gfx90a:sramecc+:xnack-", "9.0", 110)
    assert (
        gfx.arch.key == "cdna2" and gfx.candidates == ("mi250x",) and gfx.smem_per_block_optin_bytes == 65_536
    )
    assert match_device("AMD Instinct MI300X", "9.4", 304).smem_per_sm_bytes == 65_536


def test_peak_note_says_what_to_do() -> None:
    radeon = match_device("AMD Radeon Graphics", "9.0", 104)
    note = peak_note(radeon, None, "bf16")
    assert note.startswith("peak unknown: give --device NAME") and "mi210, mi250" in note
    assert "tracekit devices" in note
    assert peak_note(None, "Some GPU", "bf16").startswith("peak unknown: give --device NAME (Some GPU")
    a100 = ALL["a100-sxm4-80gb"]
    assert a100.peak_tflops("fp8") is None
    assert peak_note(a100, None, "fp8").startswith(
        "no fp8 peak known for NVIDIA A100 SXM4 80GB: the catalog lists"
    )
    v100 = ALL["v100-sxm2-32gb"]  # no BF16 math on Volta: fp16 does not stand in for it
    assert v100.peak_tflops("bf16") is None and v100.peak_tflops("fp16") == 125


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
