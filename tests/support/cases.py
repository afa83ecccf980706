"""The Analysis's cases of frames, for the tests that read what the explainer says (every view renders these)."""

from __future__ import annotations

from typing import Any

from tracekit.analyzers.analysis import Case, Factor, case_list


def cases(frames: dict[str, Any], **kw: Any) -> list[Case]:
    """Every case of ``frames``, explained, as the Analysis holds them (``kw``: environment, device,
    calibration)."""
    return case_list(frames, **kw)


def factor(case: Case, name: str) -> Factor | None:
    """The case's factor called ``name``, None when it has none."""
    return next((f for f in case.factors if f.name == name), None)


def blamed(case: Case) -> Factor | None:
    """The factor the case's verdict blames, None when it blames none."""
    return factor(case, case.verdict.factor) if case.verdict.factor else None
