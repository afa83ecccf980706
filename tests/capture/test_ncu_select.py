"""The ncu pass's launches chosen from the nsys pass's timeline (collectors/capture/select.py), on the H100
serving sample's own nsys export: its GEMM kernels by function name, each (kernel, launch configuration, place in
the range instance) profiled once, the persistent prefill kernel's six places per instance included, the other
kernels left out and recorded; and the exact ncu command line a capture builds from it, with stand-in tools."""

from __future__ import annotations

import json
import lzma
import os
import re
import stat
import sys
from pathlib import Path

import pytest

from tests.support.serve_sample import SERVE_GEMMS, SERVE_NSYS
from tracekit.collectors import tools
from tracekit.collectors.capture import NcuSettings, capture, ranges_filter
from tracekit.collectors.capture.budget import describe_bound
from tracekit.collectors.capture.passes import ncu_selection
from tracekit.collectors.capture.select import from_nsys
from tracekit.errors import BadInputError
from tracekit.naming import NCU_FILTER

PY = sys.executable
SAMPLE = SERVE_NSYS
GEMMS = SERVE_GEMMS


@pytest.fixture(scope="module")
def timeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nsys") / "nsys.sqlite"
    out.write_bytes(lzma.decompress(SAMPLE.read_bytes()))
    return out


def test_the_gemms_of_the_ranges_each_place_once(timeline: Path) -> None:
    sel = from_nsys(timeline, "serve", in_ranges=True, per_range=2)
    assert sel is not None
    assert sel.gemm_kernels == GEMMS
    # cuBLAS's split-K reduce goes with its GEMMs; the float8 cast is a vectorized_elementwise_kernel like every
    # fill and add, so naming it would profile all of them: it is left out
    assert sel.aux_kernels == ["splitKreduce_kernel"]
    assert "vectorized_elementwise_kernel" in sel.left_out
    # the prefill's persistent kernel launches six times in each instance (grid 132): every place profiled
    assert sel.per_config == 6
    assert sel.gemm_places == 16
    assert sel.left_out["elementwise_kernel"] > 1000
    rec = sel.record()
    assert rec["left_out_launches"] == sum(sel.left_out.values()) and rec["left_out_kernels"] == len(
        sel.left_out
    )
    said = sel.describe()
    assert "6 GEMM kernel(s)" in said and "6 launch(es) of each configuration" in said and "left out" in said
    # everywhere (--all-kernels): no instances, so the bound's count
    anywhere = from_nsys(timeline, None, in_ranges=False, per_range=2)
    assert anywhere is not None and anywhere.per_config == 2 and anywhere.gemm_kernels == GEMMS


def test_the_kernel_name_filter_selects_exactly_the_chosen_functions(timeline: Path) -> None:
    sel = from_nsys(timeline, "serve", in_ranges=True, per_range=2)
    assert sel is not None
    argv = tools.ncu_command(
        "ncu", "/r/raw/ncu", ["python3", "serve.py"], sections=["SpeedOfLight"], metrics=(),
        nvtx_include=ranges_filter("serve"), per_config=sel.per_config, kernel_filter=sel.args(),
    )  # fmt: skip
    assert argv == [
        "ncu", "--nvtx", "--nvtx-include", "regex:.*(?:serve).*/", "--section", "SpeedOfLight",
        "--clock-control", "none", "--target-processes", "all",
        "--kernel-name-base", "function", "--kernel-name", "regex:^(?:" + "|".join([*GEMMS, "splitKreduce_kernel"]) + ")$",
        "--filter-mode", "per-launch-config", "--launch-count", "6",
        "-o", "/r/raw/ncu", "--force-overwrite", "python3", "serve.py",
    ]  # fmt: skip
    pattern = re.compile(argv[argv.index("--kernel-name") + 1].removeprefix("regex:"))
    assert all(pattern.match(g) for g in GEMMS)
    assert not any(
        pattern.match(n) for n in ("elementwise_kernel", "vectorized_elementwise_kernel", "nvjet_sm90")
    )


def test_when_the_selection_applies(tmp_path: Path, timeline: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    ranges = NcuSettings(nvtx_include=ranges_filter("serve"), max_per_range=2)
    assert ncu_selection(ranges, "serve", raw, False) is None  # no nsys pass: nothing to choose from
    said = describe_bound(ranges, "serve")
    assert "no nsys timeline to choose them from" in said and "--nsys --ncu" in said
    (raw / "nsys.sqlite").write_bytes(timeline.read_bytes())
    sel = ncu_selection(ranges, "serve", raw, False)
    assert sel is not None and sel.per_config == 6
    assert "the GEMMs only" in describe_bound(ranges, "serve", sel)
    # tracekit's own ranges (one GEMM call each), every kernel asked for, a count in all, ranks: the bound alone
    own = NcuSettings(nvtx_include=NCU_FILTER, max_per_range=2)
    assert ncu_selection(own, None, raw, False) is None
    assert (
        ncu_selection(NcuSettings(nvtx_include=ranges_filter("serve"), kernels="all"), "serve", raw, False)
        is None
    )
    counted = NcuSettings(nvtx_include=ranges_filter("serve"), launch_count=5)
    assert ncu_selection(counted, "serve", raw, False) is None
    assert ncu_selection(ranges, "serve", raw, True) is None
    own_filter = NcuSettings(nvtx_include=ranges_filter("serve"), extra=("--kernel-name=regex:nvjet",))
    assert ncu_selection(own_filter, "serve", raw, False) is None  # the user's own filter wins
    # a range no launch matches: nothing chosen, the bound alone
    assert ncu_selection(ranges, "no-such-range", raw, False) is None


def _exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_a_capture_with_nsys_profiles_the_timelines_gemms(tmp_path: Path, timeline: Path) -> None:
    """Stand-in tools: an nsys that writes the sample's export, an ncu that records its command line. The ncu
    pass runs with the chosen kernels, says so before it starts, and run.json records what was left out."""
    argv_file = tmp_path / "argv"
    out_of = 'out=""; prev=""\nfor a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
    nsys = _exe(
        tmp_path / "bin/nsys",
        'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2025.3.1.90-1"; exit 0; fi\n'
        + out_of
        + f'printf rep > "$out.nsys-rep"\ncp {timeline} "$out.sqlite"\nexit 0\n',
    )
    ncu = _exe(
        tmp_path / "bin/ncu",
        'if [ "$1" = "--version" ]; then echo "Version 2025.3.1.0"; exit 0; fi\n'
        f'printf "%s\\n" "$@" > {argv_file}\n' + out_of + 'printf report > "$out.ncu-rep"\nexit 0\n',
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env["PATH"] = f"{Path(PY).parent}:/usr/bin:/bin"
    events: list[str] = []
    run = capture(
        [PY, "-c", "pass"], nsys=True, ncu=True, nsys_path=nsys, ncu_path=ncu, ranges="serve",
        runs_dir=tmp_path / "runs", env=env, on_output=lambda *a: None,
        on_event=lambda ev: events.append(ev.message),
    )  # fmt: skip
    argv = argv_file.read_text().splitlines()
    assert argv[argv.index("--kernel-name-base") + 1] == "function"
    assert argv[argv.index("--kernel-name") + 1].startswith("regex:^(?:nvjet_sm90_qqtst_128x128")
    assert argv[argv.index("--filter-mode") :][:4] == [
        "--filter-mode",
        "per-launch-config",
        "--launch-count",
        "6",
    ]
    # said before the pass starts, and kept
    said = [m for m in events if "GEMM kernel(s)" in m]
    assert said and events.index(said[0]) < next(i for i, m in enumerate(events) if m.startswith("ncu pass:"))
    ncu_pass = next(p for p in run.manifest["capture"]["passes"] if p["tool"] == "ncu")["ncu"]
    assert ncu_pass["selection"]["gemm_kernels"] == GEMMS and ncu_pass["selection"]["per_config"] == 6
    assert ncu_pass["selection"]["left_out_launches"] > 4000
    assert run.manifest["capture"]["ncu"]["kernels"] == "gemm"
    assert json.dumps(ncu_pass)  # plain JSON


def test_a_bad_ncu_kernels_value_is_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="--ncu-kernels"):
        capture([PY, "-c", "pass"], ncu=True, ncu_kernels="gemms", runs_dir=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()
