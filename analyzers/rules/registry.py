"""The rules' one table: :data:`RULES`, which the explainer (:func:`tracekit.analyzers.explain.explain_case`)
iterates, and :class:`Rule`, what each rule module registers: its name, the factor it sets, the evidence it reads,
the part of the time it acts on and its function.

A new rule is one module that defines its :class:`Rule` and one line in :data:`RULES`: the explainer runs the
kernel's rules (``acts_on="kernel"``) in table order, each on the ceiling the ones before it leave (their product
times the peak), then the residual rule (the kernel's rate over that ceiling), then the call's rules
(``acts_on="call"``), which nest from the GEMM time out to the call's span (docs/CASES.md, "Rules").
"""

from __future__ import annotations

from . import Rule, aux, clock, gaps, kernel, memory, splitk, waves

__all__ = ["RULES", "rule"]


def rule(name: str) -> Rule:
    """The registered rule called ``name`` (KeyError when there is none)."""
    for r in RULES:
        if r.name == name:
            return r
    raise KeyError(name)


RULES: tuple[Rule, ...] = (clock.RULE, waves.RULE, memory.RULE, kernel.RULE, splitk.RULE, aux.RULE, gaps.RULE)
"""Every rule, in the order the explainer runs them."""
