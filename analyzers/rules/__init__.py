"""Rules: one small module per cause of a GEMM's gap to peak, each returning a
:class:`~tracekit.analyzers.analysis.model.Factor` (or None when it has nothing to say). Rules read the parts of a
case (its shape, kernel, timing, Nsight Compute evidence, clock and device) and never print or plot;
:mod:`tracekit.analyzers.explain` multiplies their factors into the waterfall.

Each rule module defines its :class:`Rule` (name, factor, the evidence it reads, what it acts on), registered in
one table, :data:`tracekit.analyzers.rules.registry.RULES`, which the explainer iterates; docs/CASES.md ("Rules")
lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..analysis.model import Factor

if TYPE_CHECKING:
    from tracekit.analyzers.gemm import CaseEvidence

__all__ = ["NO_LOSS", "Ceiling", "Factor", "Rule", "factor"]


NO_LOSS = 0.995
"""A factor at or above this value costs nothing worth naming: it gets no remedy and is never the verdict."""


def factor(
    name: str,
    value: float,
    sentence: str,
    evidence: dict[str, Any] | None = None,
    remedy: str | None = None,
    cause: str | None = None,
) -> Factor:
    """A rule's :class:`Factor`: ``value`` in (0, 1] (1 = no loss), ``evidence`` the numbers the rule used,
    ``sentence`` what happened in plain words, ``remedy`` what to try (dropped when the factor loses nothing
    worth naming: a factor of x1.000 has nothing to remedy), ``cause`` a short sub-cause. Its time lost and
    speed-up are the explainer's (:meth:`tracekit.analyzers.explain.Waterfall.losses`)."""
    return Factor(
        name=name,
        value=value,
        sentence=sentence,
        evidence=evidence if evidence is not None else {},
        remedy=remedy if value < NO_LOSS else None,
        cause=cause,
    )


@dataclass(frozen=True)
class Ceiling:
    """What a kernel rule may read of the waterfall so far: the datasheet ``peak`` (TFLOP/s), the ceiling
    (``tflops``: the peak times the factors of the rules before it), the kernel's own rate (``kernel_rate``), and
    whether the kernel is memory-bound (the bandwidth roof, not the clock or the waves, sets its ceiling)."""

    peak: float
    tflops: float
    kernel_rate: float
    memory_bound: bool = False
    residual: float | None = None
    """For the residual rule: the kernel's rate over the ceiling, as the explainer settled it (the kernel's
    factors raised where the kernel ran faster than they allow)."""


RuleFunction = Callable[["CaseEvidence", Ceiling | None], Factor | None]
"""A rule's function: its factor for a case (None when it has nothing to say), given the ceiling so far (None
where the case has no rate or no peak: only rules with ``needs_rate=False`` run then)."""


@dataclass(frozen=True)
class Rule:
    """One rule: ``name`` (as docs/CASES.md lists it), the ``factor`` it sets, the parts of the case it
    ``reads`` (shape, kernel, timing, ncu, clock, device, flops), what it ``acts_on`` (``kernel``: a factor of
    the kernel's ceiling; ``residual``: the kernel's rate over the ceiling the kernel's rules leave; ``call``: a
    part of the call beside the GEMM kernel), whether it ``needs_rate`` (a FLOP count and a peak), its function
    and its ``cause`` in one line."""

    name: str
    factor: str
    reads: tuple[str, ...]
    acts_on: Literal["kernel", "residual", "call"]
    needs_rate: bool
    run: RuleFunction
    cause: str
