"""GPU tests: marked ``gpu`` and skipped where there is no CUDA device (run them with ``pytest -m gpu tests/gpu``)."""

from __future__ import annotations

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


requires_gpu = pytest.mark.skipif(not _cuda_available(), reason="needs torch with a CUDA GPU")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test here needs a GPU: skip them all, with the reason, where there is none."""
    if _cuda_available():
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(requires_gpu)
