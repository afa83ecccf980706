"""``--device`` names the GPU everywhere it is shown, and a verdict never asks for the option already given.

On the committed sample samples/h200-counter-probe: Nsight Compute CSV exports that name no GPU (compute
capability 9.0 only), so without ``--device`` every view says the GPU is unknown. Expected names come from the
device catalog (tracekit.devices), never written here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.analyzers.analysis import analyze_run
from tracekit.analyzers.store import open_run
from tracekit.devices import lookup_device
from tracekit.tui.data import analysis_devices_label, load_run

PROBE = "h200-counter-probe"


def _tracekit(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *map(str, args)], capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_report_names_the_gpu_device_named(samples_dir: Path, tmp_path: Path) -> None:
    h200 = lookup_device("h200")
    plain = _tracekit("report", samples_dir / PROBE, "-o", tmp_path / "plain.md")
    assert plain.returncode == 0, plain.stderr
    assert "unknown GPU" in (tmp_path / "plain.md").read_text()  # the files name none
    p = _tracekit("report", samples_dir / PROBE, "--device", "h200", "-o", tmp_path / "ticket.md")
    assert p.returncode == 0, p.stderr
    text = (tmp_path / "ticket.md").read_text()
    assert "unknown GPU" not in text
    assert f"on {h200.name}." in text
    assert f"| GPU | {h200.name} (CC {h200.compute_capability}" in text and "named by --device h200" in text


def test_view_header_names_the_gpu_device_named(samples_dir: Path) -> None:
    data = load_run(samples_dir / PROBE)
    assert "GPU ?" in data.device_label
    h200 = lookup_device("h200")
    analysis = analyze_run(open_run(samples_dir / PROBE), device=h200, breakdown="none")
    label = analysis_devices_label(data, analysis)
    assert label.startswith(h200.name) and "GPU ?" not in label
    assert analysis_devices_label(data, None) == data.device_label  # before the Analysis is built


def test_a_verdict_never_asks_for_the_device_given(samples_dir: Path) -> None:
    run = open_run(samples_dir / PROBE)
    without = analyze_run(run, breakdown="none")
    asked = [c for c in without.cases if c.verdict.capture_hint and "--device" in c.verdict.capture_hint]
    assert asked  # no GPU named: the hint to name it is right
    small = lookup_device("rtx-5070")  # its peaks sit far below the H200's rates
    given = analyze_run(run, device=small, breakdown="none")
    # no rate to hold against a peak: nothing measured (cannot-explain), or what was measured loses nothing
    unexplained = [c for c in given.cases if c.verdict.kind in ("cannot-explain", "no-measured-loss")]
    assert unexplained
    for c in given.cases:
        assert "--device" not in (c.verdict.capture_hint or "") and "for this GPU" not in c.verdict.sentence
    assert any(small.name in c.verdict.sentence for c in unexplained)
