"""collectors/torchprof.py started by path with an interpreter that has no tracekit (``tracekit capture`` may run
it so): its failure rows still come from tracekit.collectors.failures, the one place they are built."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tracekit.collectors import failures as F
from tracekit.collectors.capture import TORCHPROF_PY


def test_torchprof_by_path_without_tracekit_builds_the_failures_frame_row(tmp_path: Path) -> None:
    code = (
        "import json, runpy, sys\n"
        f"ns = runpy.run_path({str(TORCHPROF_PY)!r})\n"
        "row = ns['failure_record'](kind='crashed', error_type='KeyboardInterrupt', message='interrupted', versions={'torch': None})\n"
        "print(json.dumps({'row': row, 'tracekit': any(m.startswith('tracekit') for m in sys.modules)}))\n"
    )
    # -S and another folder: no site-packages, no checkout on the path, so neither tracekit nor torch imports
    cmd = [sys.executable, "-S", "-c", code]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["tracekit"] is False
    row = out["row"]
    assert tuple(row) == F.FAILURE_KEYS
    assert (row["kind"], row["error_type"], row["message"], row["m"]) == (
        "crashed",
        "KeyboardInterrupt",
        "interrupted",
        None,
    )
    assert row["versions"] == {"torch": None} and row["time_unix"] > 0
    assert Path(TORCHPROF_PY).with_name("failures.py").is_file()
