"""A GPU the report does not name: the catalog GPUs of a compute capability, and ``--device NAME`` on explain,
report and view.

The real files: ../shared/data/thirdparty/llm-perf-opt-rtx50/ (Nsight Compute CSV exports of CUTLASS BF16 GEMMs on
an SM120 GPU: ``CC`` 12.0, no GPU name anywhere) and the H200 probe's Nsight Systems export (names the H200).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.devices import candidates_line, devices_for_capability, lookup_device
from tracekit.errors import BadInputError

RTX50 = "thirdparty/llm-perf-opt-rtx50"


def _tracekit(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *map(str, args)], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def rtx_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shared = Path(__file__).resolve().parents[3] / "shared" / "data"
    if not (shared / RTX50).is_dir():
        pytest.skip(f"{shared / RTX50} is absent (it sits beside the checkout on project machines)")
    csvs = sorted((shared / RTX50).glob("kernel_*_ncu.*.csv"))
    out = tmp_path_factory.mktemp("rtx") / "run"
    proc = _tracekit("import", *csvs, "-o", out)
    assert proc.returncode == 0, proc.stderr
    return out


def test_catalog_gpus_per_capability() -> None:
    """SM120 is the RTX PRO 6000 Blackwell and the RTX 50 series, SM100 the B200 and GB200, SM90 the H100s,
    H200s, H800s and H20; each with a bf16 peak in the catalog. 12.1 falls back to its family (12.0); an unknown
    capability has no candidates; an AMD GFXIP version is no NVIDIA capability."""
    sm120 = {"rtx-pro-6000", "rtx-pro-6000-max-q", "rtx-5060", "rtx-5060-ti", "rtx-5070", "rtx-5070-ti"}
    sm120 |= {"rtx-5080", "rtx-5090"}
    assert {d.key for d in devices_for_capability("12.0")} == sm120
    assert {d.key for d in devices_for_capability("12.1")} == sm120
    assert {d.key for d in devices_for_capability("10.0")} == {"b200", "gb200"}
    assert {"h100-sxm", "h100-pcie", "h100-nvl", "h200", "h20"} <= {
        d.key for d in devices_for_capability("9.0")
    }
    assert not {"mi250", "mi210"} & {d.key for d in devices_for_capability("9.0")}
    for cc in ("12.0", "10.0", "9.0"):
        for dev in devices_for_capability(cc):
            assert dev.peak_tflops("bf16") and dev.provenance == "catalog", dev.key
    assert devices_for_capability("3.5") == [] and candidates_line("3.5") is None
    line = candidates_line("12.0")
    assert line is not None and "rtx-pro-6000" in line and "rtx-5090" in line
    assert "--device NAME" in line and "tracekit devices" in line and "\n" not in line


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("rtx-pro-6000", "rtx-pro-6000"),
        ("RTX_PRO_6000", "rtx-pro-6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
        ("GeForce RTX 5090", "rtx-5090"),
        ("H200", "h200"),
        ("b200", "b200"),
        ("RTX-4060-Ti", "rtx-4060-ti"),
        ("NVIDIA GeForce RTX 4060 Ti", "rtx-4060-ti"),
        ("h100-nvl", "h100-nvl"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("mi300x", "mi300x"),
        ("AMD Instinct MI300X", "mi300x"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
    ],
)
def test_lookup_by_key_or_alias(name: str, key: str) -> None:
    assert lookup_device(name).key == key


def test_unknown_name_lists_close_matches() -> None:
    with pytest.raises(BadInputError) as err:
        lookup_device("rtx6000")
    line = err.value.one_line()
    assert "close matches: rtx-6000-ada, rtx-a6000, rtx-pro-6000" in line and "tracekit devices" in line
    with pytest.raises(BadInputError) as err:
        lookup_device("h100")  # ambiguous: SXM, PCIe and NVL are different parts
    assert "close matches: h100-sxm, h100-pcie, h100-nvl" in err.value.one_line()
    with pytest.raises(BadInputError) as err:
        lookup_device("")
    assert "tracekit devices" in err.value.one_line()


def test_csv_run_without_device_names_the_candidates(rtx_run: Path) -> None:
    """No GPU name: no peak, and one line on stderr naming the SM120 GPUs of the catalog and the option."""
    proc = _tracekit("explain", rtx_run, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["cases"] and all(c["peak"] is None for c in data["cases"])
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("sm_12.0:")]
    assert (
        len(lines) == 1 and "rtx-pro-6000" in lines[0] and "rtx-5090" in lines[0] and "--device" in lines[0]
    )
    assert data["run"]["device_notes"] == lines
    assert any(
        "--device" in u["how"] for u in data["summary"]["unknowns"]
    )  # the summary says how to learn it
    text = _tracekit("explain", rtx_run)
    assert text.returncode == 0 and lines[0] in text.stderr and lines[0] not in text.stdout


def test_csv_run_with_device_gets_peaks(rtx_run: Path) -> None:
    proc = _tracekit("explain", rtx_run, "--device", "RTX-PRO-6000", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    want = lookup_device("rtx-pro-6000")
    assert [(d["key"], d["name"], d["source"]) for d in data["devices"]] == [
        ("rtx-pro-6000", want.name, "--device")
    ]
    assert data["run"]["device_override"] == "rtx-pro-6000"
    assert data["cases"]
    for c in data["cases"]:
        assert c["device"]["key"] == "rtx-pro-6000" and c["device"]["name"] == want.name
        assert c["peak"] is not None
        assert c["peak"]["tflops"] == pytest.approx(want.peak_tflops(c["rate"]["dtype_class"] or "bf16"))
    assert "sm_12.0:" not in proc.stderr
    # the same through report
    rep = _tracekit("report", rtx_run, "--device", "rtx-5090", "--format", "json")
    assert rep.returncode == 0, rep.stderr
    peaks = {c["peak"]["tflops"] for c in json.loads(rep.stdout)["cases"]}
    assert peaks == {lookup_device("rtx-5090").peak_tflops("bf16")}


@pytest.mark.parametrize("command", ["explain", "report", "view"])
def test_bad_device_name_exits_2(rtx_run: Path, command: str) -> None:
    proc = _tracekit(command, rtx_run, "--device", "rtx6000")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown device 'rtx6000'" in lines[0] and "rtx-pro-6000" in lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_device_wins_over_the_named_gpu(shared_data: Path, tmp_path: Path) -> None:
    """The probe's export names the H200; --device h100-sxm is used for every GEMM, and stderr says so."""
    run = tmp_path / "probe"
    assert _tracekit("import", shared_data / "h200-probe" / "probe.sqlite", "-o", run).returncode == 0
    plain = json.loads(_tracekit("explain", run, "--json").stdout)
    assert {c["device"]["key"] for c in plain["cases"]} == {"h200"}
    proc = _tracekit("explain", run, "--device", "h100-sxm", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {c["device"]["key"] for c in data["cases"]} == {"h100-sxm"}
    assert "the run names NVIDIA H200; using NVIDIA H100 SXM as asked" in proc.stderr
    same = _tracekit("explain", run, "--device", "h200", "--json")
    assert same.returncode == 0 and "as asked" not in same.stderr


@pytest.mark.parametrize("command", ["explain", "report", "view"])
def test_help_teaches_device(command: str) -> None:
    out = _tracekit(command, "--help").stdout
    assert "--device NAME" in out
    # an example gives a catalog GPU to a run whose files name none (tests/cli/test_help_examples.py runs it)
    assert any(
        "--device h200" in ln and "samples/h200-counter-probe" in ln
        for ln in out.splitlines()
        if ln.strip().startswith("tracekit")
    )


def test_view_analysis_takes_the_device(rtx_run: Path) -> None:
    """What `tracekit view --device` hands the UI: the prefetched analysis of the run, with the device's peaks."""
    from tracekit.tui.data import Prefetch

    plain = Prefetch(rtx_run).analysis.result(timeout=300)
    assert plain.cases and all(c.peak is None for c in plain.cases)
    chosen = Prefetch(rtx_run, lookup_device("rtx-pro-6000")).analysis.result(timeout=300)
    assert {c.device.key for c in chosen.cases} == {"rtx-pro-6000"}
    assert all(c.peak is not None for c in chosen.cases)


def test_two_exports_of_one_report_count_each_launch_once(rtx_run: Path) -> None:
    """The folder holds a details and a metrics export of each of 3 profiled launches: the run has 3 ncu kernels,
    from the richer details exports, and each metrics export carries a warning naming its twin."""
    import polars as pl

    ncu = pl.read_parquet(rtx_run / "frames" / "ncu.parquet")
    assert ncu.height == 3
    assert sorted(ncu["source"].to_list()) == [
        f"kernel_{k}_ncu.details.csv" for k in ("0003", "0005", "0016")
    ]
    assert ncu["ncu_id"].to_list() == [0, 1, 2]
    metrics = pl.read_parquet(rtx_run / "frames" / "ncu_metrics.parquet")
    assert set(metrics["ncu_id"].unique().to_list()) == {0, 1, 2}
    sources = json.loads((rtx_run / "run.json").read_text())["sources"]
    for src in sources:
        if src["path"].endswith("metrics.csv"):
            twin = src["path"].rsplit("/", 1)[-1].replace("metrics", "details")
            assert any("counted once" in w and twin in w for w in src["warnings"]), src


def test_one_export_alone_keeps_its_kernel(tmp_path: Path) -> None:
    """A metrics-only export read without its details twin is not dropped."""
    shared = Path(__file__).resolve().parents[3] / "shared" / "data" / RTX50
    if not shared.is_dir():
        pytest.skip(f"{shared} is absent")
    proc = _tracekit(
        "import",
        shared / "kernel_0003_ncu.metrics.csv",
        shared / "kernel_0005_ncu.details.csv",
        "-o",
        tmp_path / "run",
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 ncu kernels" in proc.stdout


def test_devices_command_lists_and_resolves() -> None:
    """`tracekit devices` is where the names --device takes are found; with a tool's GPU name it says what the
    name resolves to, or why not and what it may be."""
    listing = _tracekit("devices")
    assert listing.returncode == 0, listing.stderr
    keys = [ln.split()[0] for ln in listing.stdout.splitlines()[2:]]
    from tracekit.devices import catalog

    assert keys == list(catalog()[1])
    one = _tracekit("devices", "NVIDIA GeForce RTX 4060 Ti", "--json")
    data = json.loads(one.stdout)
    assert data["resolved"]["key"] == "rtx-4060-ti" and data["devices"][0]["key"] == "rtx-4060-ti"
    assert data["devices"][0]["half_rate"] and data["devices"][0]["peaks_tflops"]["bf16"] == pytest.approx(
        44.1
    )
    two = _tracekit("devices", "AMD Instinct MI250X / MI250")
    assert (
        two.returncode == 0 and "resolves to no catalog GPU" in two.stdout and "mi250, mi250x" in two.stdout
    )
    none = json.loads(_tracekit("devices", "NVIDIA Hopper Next", "--json").stdout)
    assert none["resolved"]["key"] is None and none["devices"] == []


@pytest.mark.parametrize("command", ["explain", "report", "view"])
def test_help_says_where_the_names_are(command: str) -> None:
    out = " ".join(_tracekit(command, "--help").stdout.split())
    assert "`tracekit devices` lists them" in out


def test_devices_md_is_generated_from_the_catalog() -> None:
    """docs/DEVICES.md is `tracekit devices --markdown`: it cannot drift from tracekit/data/devices.json."""
    from tracekit.commands.devices import catalog_markdown

    doc = Path(__file__).resolve().parents[2] / "docs" / "DEVICES.md"
    assert doc.read_text() == catalog_markdown(), "regenerate: tracekit devices --markdown > docs/DEVICES.md"
    assert _tracekit("devices", "--markdown").stdout == catalog_markdown()


def test_an_amd_trace_gets_peak_unknown_then_the_peak_it_is_given(shared_data: Path, tmp_path: Path) -> None:
    """HTA's MI250 trace names its GPU 'AMD Radeon Graphics' (104 CUs, 'compute capability' 9.0, which is gfx90a
    and not Hopper): no peak, a note saying what to do; --device mi250 gives the peaks of one MI250 GCD."""
    run = tmp_path / "amd"
    src = shared_data / "thirdparty" / "hta" / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    assert _tracekit("import", src, "-o", run).returncode == 0
    plain = json.loads(_tracekit("explain", run, "--json").stdout)
    assert plain["cases"]
    for c in plain["cases"]:
        assert c["peak"] is None
        assert any(
            n.startswith("peak unknown: give --device NAME") and "mi210, mi250" in n for n in c["notes"]
        )
    given = json.loads(_tracekit("explain", run, "--device", "mi250", "--json").stdout)
    assert {c["device"]["key"] for c in given["cases"]} == {"mi250"}
    assert {c["peak"]["tflops"] for c in given["cases"]} == {lookup_device("mi250").peak_tflops("fp32")}
