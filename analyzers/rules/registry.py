"""The rules' one table: :data:`RULES`, which the explainer (:func:`tracekit.analyzers.explain.explain_case`)
iterates, and :class:`Rule`, what each rule module registers: its name, the factor it sets, the evidence it reads,
the part of the time it acts on and its function.

A new rule is one module that defines its :class:`Rule` and one line in :data:`RULES`: the explainer runs the
kernel's rules (``acts_on="kernel"``) in table order, each on the ceiling the ones before it leave (their product
times the peak), then the residual rule (the kernel's rate over that ceiling), then the call's rules
(``acts_on="call"``), which nest from the GEMM time out to the call's span (docs/CASES.md, "Rules").
"""

from __future__ import annotations

from collections.abc import Sequence

from . import (
    NO_LOSS,
    Factor,
    Rule,
    aux,
    clock,
    gaps,
    kernel,
    memory,
    ncu_estimate,
    ncu_findings,
    splitk,
    waves,
)

__all__ = ["RULES", "kernel_limit", "rule"]


def rule(name: str) -> Rule:
    """The registered rule called ``name`` (KeyError when there is none)."""
    for r in RULES:
        if r.name == name:
            return r
    raise KeyError(name)


RULES: tuple[Rule, ...] = (
    clock.RULE,
    waves.RULE,
    memory.RULE,
    ncu_findings.RULE,
    ncu_estimate.RULE,
    kernel.RULE,
    splitk.RULE,
    aux.RULE,
    gaps.RULE,
)
"""Every rule, in the order the explainer runs them."""


def kernel_limit(factors: Sequence[Factor]) -> Factor | None:
    """The largest loss among the kernel's own factors (those of the rules that act on the kernel, the residual
    included): they all act on the kernel's time, so the smallest of them loses the most. None when none loses
    more than 0.5%."""
    inside = {r.factor for r in RULES if r.acts_on != "call"}
    losing = [f for f in factors if f.name in inside and f.value < NO_LOSS]
    return min(losing, key=lambda f: f.value) if losing else None
