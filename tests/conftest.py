"""Shared fixtures: where the real profiling files live, and the committed sample runs."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
SAMPLES = ROOT / "samples"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only folder of real profiling files from other GPUs (../shared/data); skipped where absent."""
    if not SHARED.is_dir():
        pytest.skip(f"real-data folder {SHARED} is absent (it sits beside the checkout on project machines)")
    return SHARED


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    return SAMPLES
