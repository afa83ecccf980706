"""The typed result of the step breakdown: :class:`Breakdown` holds one :class:`Slice` per device (the whole
run) and per (range name, device), each a list of :class:`ClassShare` that sums to the slice's span with idle.

The types are the Analysis' own (analyzers/analysis/sections.py: ``StepBreakdown``, ``Slice``, ``ClassShare``):
the breakdown the analyzers build is the one the Analysis holds and every view renders."""

from __future__ import annotations

from ..analysis.sections import IDLE, ClassShare, Slice
from ..analysis.sections import StepBreakdown as Breakdown

__all__ = ["IDLE", "Breakdown", "ClassShare", "Slice"]
