"""The rules' one table (analyzers/rules/registry.py) and the verdict kinds' enum, against docs/CASES.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tracekit.analyzers.analysis.model import VerdictKind
from tracekit.analyzers.rules.registry import RULES, rule

CASES_MD = Path(__file__).resolve().parents[2] / "docs" / "CASES.md"


def _table(heading: str) -> list[list[str]]:
    """The rows of the first table under ``## heading`` in docs/CASES.md, cells stripped of backquotes."""
    text = CASES_MD.read_text()
    part = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = part.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    rows = lines[start:end][2:]
    return [[c.strip().strip("`") for c in row.strip("|").split("|")] for row in rows]


def test_the_docs_list_every_registered_rule_in_order() -> None:
    documented = [
        (name, factor, acts_on, needs_rate == "yes", tuple(x.strip() for x in reads.split(",")), cause)
        for name, factor, acts_on, needs_rate, reads, cause in _table("Rules")
    ]
    registered = [(r.name, r.factor, r.acts_on, r.needs_rate, r.reads, r.cause) for r in RULES]
    assert documented == registered


def test_every_rule_module_registers_one_rule() -> None:
    """A module of analyzers/rules that defines a RULE is in the table (a rule written but not registered fails)."""
    import importlib
    import pkgutil

    import tracekit.analyzers.rules as pkg

    defined = set()
    for info in pkgutil.iter_modules(pkg.__path__):
        module = importlib.import_module(f"{pkg.__name__}.{info.name}")
        if hasattr(module, "RULE"):
            defined.add(module.RULE.name)
    assert defined == {r.name for r in RULES}
    assert len({r.name for r in RULES}) == len(RULES)
    # one factor per rule but the in-kernel loss, set by the residual (with a rate) or ncu's estimate (without)
    factors = [r.factor for r in RULES]
    assert len(set(factors)) == len(RULES) - 1 and factors.count("in-kernel") == 2
    assert [r.acts_on for r in RULES if r.acts_on == "residual"] == ["residual"]


def test_rule_lookup() -> None:
    assert rule("waves").factor == "waves"
    with pytest.raises(KeyError):
        rule("no such rule")


def test_the_docs_verdict_kinds_are_the_enum() -> None:
    kinds = {re.sub(r"\s", "", row[0]) for row in _table("Verdicts that need their evidence")}
    assert kinds == {k.value for k in VerdictKind}
