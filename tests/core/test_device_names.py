"""GPU names as the tools spell them resolve to the right catalog entry, and near misses to none.

The names come from the files themselves: every ``deviceProperties`` name of the Kineto traces, every
TARGET_INFO_GPU name of the Nsight Systems exports, every device of the Nsight Compute reports and CSV exports under
../shared/data, and every GPU the committed samples name (run.json and their devices / ncu frames). A new name in
those files fails :func:`test_every_gpu_name_in_the_shared_files_and_samples_resolves` until it is given its entry
in ``EXPECTED``, after checking by hand which part it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tracekit.device_names import match_alias, memory_fits, normalize_name
from tracekit.devices import DeviceSpec, catalog, devices_for_capability, lookup_device, match_device, resolve

EXPECTED: dict[str, str | frozenset[str]] = {
    "NVIDIA H200": "h200",
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA H800": "h800",
    "NVIDIA B200": "b200",
    "NVIDIA A100-PG509-200": "a100-sxm4-40gb",
    "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb",
    "NVIDIA A100 80GB PCIe": "a100-pcie-80gb",
    "NVIDIA A10G": "a10g",
    "Tesla V100-SXM2-32GB": "v100-sxm2-32gb",
    "Tesla V100-DGXS-32GB": "v100-dgxs",
    "Quadro GP100": "quadro-gp100",
    "NVIDIA GeForce RTX 3080": "rtx-3080",
    "NVIDIA GeForce RTX 2080 Ti": "rtx-2080-ti",
    # HTA's MI250 trace: ROCm gave no product name. 104 CUs and 64 GiB are an MI210 or one MI250 GCD alike (the
    # same peaks, but which part is not said): no entry is taken, both are offered.
    "AMD Radeon Graphics": frozenset({"mi210", "mi250"}),
}
"""Each GPU name found in the shared files and samples -> its catalog key, or the candidates when none fits."""


def _rows(frames: dict[str, Any]) -> list[dict[str, Any]]:
    """(name, compute capability, SM count, memory) of every device row and ncu row of a file's frames."""
    out = []
    devices = frames.get("devices")
    if devices is not None and devices.height:
        out += devices.select("name", "compute_capability", "sm_count", "memory_bytes").to_dicts()
    ncu = frames.get("ncu")
    if ncu is not None and ncu.height and "device_name" in ncu.columns:
        cols = [c for c in ("device_name", "compute_capability", "sm_count") if c in ncu.columns]
        for r in ncu.select(cols).unique().to_dicts():
            out.append(
                {"name": r.get("device_name"), **{k: r.get(k) for k in ("compute_capability", "sm_count")}}
            )
    return out


def _shared_rows(shared: Path) -> dict[str, list[dict[str, Any]]]:
    from tracekit.analyzers.importer import read_file
    from tracekit.errors import TracekitError

    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(shared.rglob("*")):
        if not path.is_file() or not path.name.endswith((".ncu-rep", ".sqlite", ".json.gz", ".csv")):
            continue
        try:
            frames = read_file(path).frames
        except TracekitError:  # summaries and benchmark CSVs that are no profile: nothing to name
            continue
        found[str(path.relative_to(shared))] = _rows(frames)
    return found


def _sample_rows(samples: Path) -> dict[str, list[dict[str, Any]]]:
    from tracekit.analyzers.store import open_run, read_frame
    from tracekit.records import gpu_of

    found: dict[str, list[dict[str, Any]]] = {}
    for folder in sorted(samples.iterdir()):
        if not (folder / "run.json").is_file():
            continue
        run = open_run(folder)
        gpu = gpu_of(run.manifest.get("environment"))
        rows = [{"name": gpu.name, "compute_capability": gpu.compute_capability, "sm_count": gpu.sm_count}]
        frames = {f: read_frame(run, f) for f in ("devices", "ncu") if run.frame_layout(f) is not None}
        found[folder.name] = rows + _rows(frames)
    return found


@pytest.fixture(scope="module")
def named_rows(shared_data: Path, samples_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    files = {**_shared_rows(shared_data), **{f"samples/{k}": v for k, v in _sample_rows(samples_dir).items()}}
    return [(src, row) for src, rows in files.items() for row in rows]


def _agrees(dev: DeviceSpec, row: dict[str, Any]) -> None:
    """What the file reports agrees with the entry it resolved to."""
    if row.get("sm_count"):
        assert dev.sm_count in (None, row["sm_count"])
    if row.get("compute_capability"):
        assert dev.compute_capability == row["compute_capability"]
    if row.get("memory_bytes"):
        assert memory_fits(dev.memory_gb, row["memory_bytes"] / 2**30)


def test_every_gpu_name_in_the_shared_files_and_samples_resolves(
    named_rows: list[tuple[str, dict[str, Any]]],
) -> None:
    names = {row["name"] for _, row in named_rows if row["name"]}
    assert names >= {"NVIDIA H200", "Tesla V100-SXM2-32GB", "AMD Radeon Graphics"}  # the files were read
    assert names == set(EXPECTED), f"names without an expected entry: {sorted(names - set(EXPECTED))}"
    checked = 0
    for src, row in named_rows:
        if not row["name"]:
            continue
        want = EXPECTED[row["name"]]
        got = resolve(
            row["name"], row.get("compute_capability"), row.get("sm_count"), row.get("memory_bytes")
        )
        if isinstance(want, str):
            assert got.device is not None and got.device.key == want, (src, row, got.reason)
            _agrees(got.device, row)
            spec = match_device(row["name"], row.get("compute_capability"), row.get("sm_count"))
            assert spec.provenance == "catalog" and spec.peak_tflops("fp32"), src
        else:
            assert got.device is None and {d.key for d in got.candidates} == want, (src, row)
            spec = match_device(row["name"], row.get("compute_capability"), row.get("sm_count"))
            assert spec.provenance == "unknown" and not spec.peaks_tflops, src
        checked += 1
    assert checked >= 60, checked


def test_files_that_name_no_gpu_get_the_catalog_gpus_of_their_capability(
    named_rows: list[tuple[str, dict[str, Any]]],
) -> None:
    """Nsight Compute CSV exports (the RTX 50 files, the H200 counter probe) give only the compute capability."""
    unnamed = {
        row["compute_capability"] for _, row in named_rows if not row["name"] and row["compute_capability"]
    }
    assert {"12.0", "9.0"} <= unnamed
    for cc in unnamed:
        keys = {d.key for d in devices_for_capability(cc)}
        spec = match_device(None, cc)
        assert spec.provenance == "unknown" and set(spec.candidates) == keys and keys, cc
    assert {"rtx-5090", "rtx-pro-6000", "rtx-5060-ti"} <= {d.key for d in devices_for_capability("12.0")}


@pytest.mark.parametrize(
    ("name", "cc", "sm", "key"),
    [
        ("NVIDIA GeForce RTX 4060 Ti", "8.9", 34, "rtx-4060-ti"),
        ("NVIDIA GeForce RTX 4060", None, None, "rtx-4060"),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", None, None, "rtx-4070-ti-super"),
        ("NVIDIA GeForce RTX 4070 SUPER", None, None, "rtx-4070-super"),
        ("NVIDIA GeForce RTX 3090", "8.6", 82, "rtx-3090"),
        ("NVIDIA GeForce RTX 3090 Ti", None, None, "rtx-3090-ti"),
        ("NVIDIA GeForce RTX 3080", "8.6", 70, "rtx-3080-12gb"),
        ("NVIDIA GeForce RTX 5060 Ti", None, None, "rtx-5060-ti"),
        ("NVIDIA GeForce RTX 5090", "12.0", 170, "rtx-5090"),
        ("Tesla V100-SXM2-16GB", None, None, "v100-sxm2-16gb"),
        ("Tesla V100-SXM2-32GB", "7.0", 80, "v100-sxm2-32gb"),
        ("Tesla V100-DGXS-32GB", None, None, "v100-dgxs"),
        ("Tesla V100-PCIE-32GB", None, None, "v100-pcie"),
        ("Tesla V100S-PCIE-32GB", None, None, "v100s-pcie"),
        ("Tesla P100-PCIE-16GB", None, None, "p100-pcie-16gb"),
        ("Tesla T4", "7.5", 40, "t4"),
        ("NVIDIA A10", None, None, "a10"),
        ("NVIDIA A30", None, None, "a30"),
        ("NVIDIA A40", None, None, "a40"),
        ("NVIDIA L4", None, None, "l4"),
        ("NVIDIA L40", None, None, "l40"),
        ("NVIDIA L40S", "8.9", 142, "l40s"),
        ("NVIDIA RTX A6000", None, None, "rtx-a6000"),
        ("NVIDIA RTX 6000 Ada Generation", None, None, "rtx-6000-ada"),
        ("NVIDIA A100-SXM4-40GB", None, None, "a100-sxm4-40gb"),
        ("NVIDIA A100-PCIE-40GB", None, None, "a100-pcie-40gb"),
        ("NVIDIA A100-PG509-200", "8.0", 108, "a100-sxm4-40gb"),
        ("NVIDIA H100 80GB HBM3", "9.0", 132, "h100-sxm"),
        ("NVIDIA H100 PCIe", "9.0", 114, "h100-pcie"),
        ("NVIDIA H100 NVL", "9.0", 132, "h100-nvl"),
        ("NVIDIA H200 NVL", None, None, "h200-nvl"),
        ("NVIDIA GH200 480GB", None, None, "gh200-96gb"),
        ("NVIDIA GH200 144G HBM3e", None, None, "gh200-144gb"),
        ("NVIDIA H800", "9.0", 132, "h800"),
        ("NVIDIA H800 PCIe", None, None, "h800-pcie"),
        ("NVIDIA H20", None, None, "h20"),
        ("NVIDIA B200", "10.0", 148, "b200"),
        ("NVIDIA B300 SXM6 AC", None, None, "b300"),
        ("NVIDIA GB200", None, None, "gb200"),
        ("NVIDIA GB300", None, None, "gb300"),
        ("Quadro GP100", "6.0", 56, "quadro-gp100"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", 188, "rtx-pro-6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", 188, "rtx-pro-6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "12.0", 188, "rtx-pro-6000-max-q"),
        ("AMD Instinct MI300X", "9.4", 304, "mi300x"),
        ("AMD Instinct MI300X VF", None, None, "mi300x"),
        ("AMD Instinct MI300A", None, None, "mi300a"),
        ("AMD Instinct MI325X", "9.4", 304, "mi325x"),
        ("AMD Instinct MI355X", None, None, "mi355x"),
        ("AMD Instinct MI210", "9.0", 104, "mi210"),
        ("AMD Instinct MI250X / MI250", "9.0", 110, "mi250x"),
        ("AMD Instinct MI250X / MI250", "9.0", 104, "mi250"),
    ],
)
def test_names_as_the_tools_spell_them(name: str, cc: str | None, sm: int | None, key: str) -> None:
    dev = match_device(name, cc, sm)
    assert dev is not None and dev.key == key and dev.provenance == "catalog"
    if resolve(name).device is not None:  # --device takes the tools' spelling too, where the name alone says
        assert lookup_device(name).key == key


@pytest.mark.parametrize(
    ("name", "cc", "sm", "memory_bytes", "candidates"),
    [
        # the same name, the file does not tell which: no entry, both offered
        ("AMD Instinct MI250X / MI250", None, None, None, {"mi250", "mi250x"}),
        ("NVIDIA GeForce RTX 3080", None, None, None, {"rtx-3080", "rtx-3080-12gb"}),
        # the file contradicts the entry the name fits: the parts its SM count and memory fit are offered
        ("NVIDIA H100 80GB HBM3", "9.0", 114, None, {"h100-pcie", "h800-pcie"}),
        ("NVIDIA A100-SXM4-80GB", "8.0", 108, 42_297_524_224, {"a100-sxm4-40gb", "a100-pcie-40gb"}),
        # a name the catalog lacks, or a part that is not the listed one (MIG slice, suffix, a bare family name)
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "8.0", 14, None, set()),
        ("NVIDIA H100 94GB HBM2e", None, None, None, set()),
        ("NVIDIA GeForce RTX 5090 D", None, None, None, set()),
        ("NVIDIA A100", None, None, None, set()),
        ("gfx942:sramecc+:xnack-", "9.4", 304, None, {"mi300x", "mi325x"}),
    ],
)
def test_near_misses_resolve_to_no_entry(
    name: str, cc: str | None, sm: int | None, memory_bytes: int | None, candidates: set[str]
) -> None:
    got = resolve(name, cc, sm, memory_bytes)
    assert got.device is None and got.reason
    assert {d.key for d in got.candidates} == candidates
    dev = match_device(name, cc, sm, memory_bytes=memory_bytes)
    assert dev.provenance == "unknown" and dev.peak_tflops("bf16") is None


@pytest.mark.parametrize(
    ("name", "wrong"),
    [
        ("NVIDIA H100 NVL", "h100-sxm"),
        ("NVIDIA GeForce RTX 4060 Ti", "rtx-4060"),
        ("NVIDIA A10", "a100-sxm4-80gb"),
        ("NVIDIA H20", "h200"),
        ("NVIDIA GeForce RTX 4070 Ti", "rtx-4070"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "rtx-pro-6000"),
        ("NVIDIA GH200 480GB", "h200"),
        ("Tesla V100S-PCIE-32GB", "v100-pcie"),
    ],
)
def test_a_near_miss_is_never_the_wrong_part(name: str, wrong: str) -> None:
    assert resolve(name).device.key != wrong


def test_words_match_whole_and_leftovers_must_be_neutral() -> None:
    words = normalize_name("NVIDIA GeForce RTX 4060 Ti").split()
    assert words == ["geforce", "rtx", "4060", "ti"]
    assert match_alias(["rtx", "4060"], words) is None  # "ti" left over: another part
    assert match_alias(["rtx", "4060", "ti"], words).memory_gb == ()
    assert match_alias(["a10"], ["a100"]) is None
    m = match_alias(["h100"], normalize_name("NVIDIA H100 80GB HBM3").split())
    assert m is not None and m.memory_gb == (80.0,)
    assert match_alias(["h100"], ["h100", "nvl"]) is None
    assert memory_fits((80.0,), 79.2) and not memory_fits((40.0,), 79.2)


def test_every_alias_resolves_to_its_own_entry() -> None:
    """No alias of one entry is claimed by another (a shared spelling must be told apart by SM count)."""
    _, devices = catalog()
    for dev in devices.values():
        for alias in dev.aliases:
            got = resolve(alias, dev.compute_capability, dev.sm_count, None)
            assert got.device is not None and got.device.key == dev.key, (dev.key, alias, got.reason)
