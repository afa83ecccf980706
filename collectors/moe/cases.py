"""MoE cases: the expert MLP (:class:`MoeConfig`, :data:`GLM5`), routing distributions and routing files
turned into tokens per expert, one :class:`MoeCase` per (tokens, routing), the CTA tile rule, and the keys of
the rows the workers write. Imports no torch."""

from __future__ import annotations

import bisect
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tracekit.errors import BadInputError
from tracekit.schema import jsonl_keys

MOE_FILE = "moe.jsonl"
CURVE_FILE = "moe_curve.jsonl"
CASES_FILE = "moe_cases.json"
ROUTING_FORMAT = "tracekit-moe-routing"

MOE_KEYS = jsonl_keys("moe")
"""Keys of a ``raw/moe.jsonl`` line: the columns of the ``moe`` frame (tracekit/schema.py) but ``moe_id``."""


@dataclass(frozen=True)
class MoeConfig:
    """The expert MLP: hidden size, expert intermediate size, experts, experts per token, which projection."""

    hidden: int = 6144
    inter: int = 2048
    experts: int = 256
    topk: int = 8
    proj: str = "gate_up"

    @property
    def n(self) -> int:
        return 2 * self.inter if self.proj == "gate_up" else self.hidden

    @property
    def k(self) -> int:
        return self.hidden if self.proj == "gate_up" else self.inter


GLM5 = MoeConfig()
"""GLM-5's routed experts: hidden 6144, expert intermediate 2048, 256 experts, top-8."""

DEFAULT_TOKENS = (1, 4, 16, 64, 256, 1024, 4096)


# --- routing ------------------------------------------------------------------------------------------------------
def route_counts(tokens: int, experts: int, topk: int, dist: str, seed: int = 0) -> list[int]:
    """Tokens per expert for one step: each of ``tokens`` tokens picks ``topk`` distinct experts.

    ``dist`` is ``uniform`` or ``zipf:S`` (probability of expert ``e`` proportional to ``(e + 1)^-S``). Seeded and
    pure Python, so the sweep, the tests and the worker agree on the same counts.
    """
    if topk > experts:
        raise BadInputError(f"top-k {topk} is larger than the {experts} experts", "lower --topk")
    rng = random.Random(f"{seed}:{tokens}:{experts}:{topk}:{dist}")
    kind, _, param = dist.partition(":")
    if kind == "uniform":
        weights = [1.0] * experts
    elif kind == "zipf":
        s = float(param or 1.2)
        weights = [(e + 1) ** -s for e in range(experts)]
    else:
        raise BadInputError(
            f"routing {dist!r} is not uniform or zipf:S", "use uniform, zipf:1.2 or file:PATH"
        )
    cum, total = [], 0.0
    for w in weights:
        total += w
        cum.append(total)
    counts = [0] * experts
    for _ in range(tokens):
        chosen: set[int] = set()
        draws = 0
        while len(chosen) < topk and draws < 64 * topk:
            chosen.add(min(bisect.bisect_left(cum, rng.random() * total), experts - 1))
            draws += 1
        e = 0
        while len(chosen) < topk:  # extreme skew: fill with the next hottest experts
            chosen.add(e)
            e += 1
        for e in chosen:
            counts[e] += 1
    return counts


def read_routing_file(path: Path, experts: int, topk: int) -> list[tuple[str, list[int]]]:
    """(step label, counts) for every step of a routing file (format in the module docstring)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(
            f"cannot read routing file {path} ({exc})", "give a JSON-lines routing file"
        ) from exc
    steps: list[tuple[str, list[int]]] = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise BadInputError(
                f"{path}:{i} is not JSON ({exc.args[0]})", "one JSON object per line (see docs/MOE.md)"
            ) from None
        if not isinstance(obj, dict):
            raise BadInputError(
                f"{path}:{i} is not a JSON object", "one JSON object per line (see docs/MOE.md)"
            )
        if obj.get("format") == ROUTING_FORMAT:
            if obj.get("experts") not in (None, experts) or obj.get("topk") not in (None, topk):
                raise BadInputError(
                    f"{path} was captured with {obj.get('experts')} experts, top-{obj.get('topk')}; "
                    f"the benchmark is set to {experts} experts, top-{topk}",
                    "pass --experts / --topk to match the file",
                )
            continue
        label = str(obj.get("step", len(steps)))
        if "counts" in obj:
            counts = obj["counts"]
            if (
                not isinstance(counts, list)
                or len(counts) != experts
                or not all(isinstance(c, int) and c >= 0 for c in counts)
            ):
                raise BadInputError(
                    f"{path}:{i}: counts must be {experts} non-negative integers", "one count per expert"
                )
        elif "topk_ids" in obj:
            ids = obj["topk_ids"]
            if not isinstance(ids, list) or not all(isinstance(r, list) and len(r) == topk for r in ids):
                raise BadInputError(
                    f"{path}:{i}: topk_ids must be a list of {topk}-expert lists", "see docs/MOE.md"
                )
            if any(not isinstance(e, int) or not 0 <= e < experts for r in ids for e in r):
                raise BadInputError(
                    f"{path}:{i}: an expert id is outside 0..{experts - 1}", "check --experts"
                )
            counts = [0] * experts
            for r in ids:
                for e in r:
                    counts[e] += 1
        else:
            raise BadInputError(f"{path}:{i} has neither counts nor topk_ids", "see docs/MOE.md")
        if sum(counts) == 0:
            raise BadInputError(f"{path}:{i} routes no tokens", "drop empty steps")
        steps.append((label, counts))
    if not steps:
        raise BadInputError(f"{path} holds no routing steps", "see docs/MOE.md for the format")
    return steps


@dataclass(frozen=True)
class MoeCase:
    """One step to time: its routing label, tokens per step and tokens per expert."""

    case_id: int
    tokens: int
    route: str
    counts: tuple[int, ...]

    @property
    def rows(self) -> int:
        return sum(self.counts)

    @property
    def active(self) -> int:
        return sum(1 for c in self.counts if c)


def parse_tokens(text: str) -> list[int]:
    """``1,16,256`` or ``glm5`` (1..4096) into token counts."""
    text = (text or "").strip().lower()
    if text in ("", "glm5", "default"):
        return list(DEFAULT_TOKENS)
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise BadInputError(
            f"--tokens {text!r} is not a list of integers", "e.g. --tokens 1,16,256,4096"
        ) from None
    if not values or min(values) < 1:
        raise BadInputError("--tokens needs positive integers", "e.g. --tokens 1,16,256,4096")
    return values


def parse_routing(text: str) -> list[str]:
    """``uniform,zipf:1.2,file:PATH`` into routing specs (checked, not yet expanded)."""
    specs = [s.strip() for s in (text or "").split(",") if s.strip()]
    if not specs:
        raise BadInputError("no routing given", "use --routing uniform,zipf:1.2 (or file:PATH)")
    for s in specs:
        kind, _, param = s.partition(":")
        if kind == "zipf":
            try:
                if float(param or 1.2) <= 0:
                    raise ValueError
            except ValueError:
                raise BadInputError(
                    f"routing {s!r}: the Zipf exponent must be a positive number", "e.g. zipf:1.2"
                ) from None
        elif kind == "file":
            if not Path(param).is_file():
                raise BadInputError(
                    f"routing file {param!r} does not exist", "give file:PATH to a JSON-lines file"
                )
        elif kind != "uniform":
            raise BadInputError(
                f"routing {s!r} is not uniform, zipf:S or file:PATH", "see tracekit bench moe --help"
            )
    return specs


def build_cases(
    config: MoeConfig, tokens: Iterable[int], routing: Iterable[str], seed: int = 0
) -> list[MoeCase]:
    """Every (routing, tokens) case; a routing file contributes one case per step."""
    cases: list[MoeCase] = []
    for spec in routing:
        kind, _, param = spec.partition(":")
        if kind == "file":
            path = Path(param)
            for label, counts in read_routing_file(path, config.experts, config.topk):
                t = max(1, round(sum(counts) / config.topk))
                cases.append(MoeCase(len(cases), t, f"file:{path.stem}#{label}", tuple(counts)))
            continue
        route = "uniform" if kind == "uniform" else f"zipf{float(param or 1.2):g}"
        for t in tokens:
            counts = route_counts(
                t, config.experts, config.topk, spec if kind != "zipf" else f"zipf:{param or 1.2}", seed
            )
            cases.append(MoeCase(len(cases), t, route, tuple(counts)))
    return cases


# --- tiles --------------------------------------------------------------------------------------------------------
def tile_rule(
    op: str, rows: int, experts: int, n: int, k: int, fast_accum: bool = True
) -> tuple[int, int] | None:
    """The CTA tile (M, N) PyTorch's SM90 grouped kernels pick, as their dispatch reads (aten GroupMM.cu and
    ScaledGroupMM.cu, torch 2.8-2.11): it looks at the mean rows per group over *all* groups. None for ops whose
    tile tracekit does not know (the kernel name, when a timeline has it, is used instead)."""
    m = rows // max(experts, 1)
    small = m <= 128 or n <= 128
    if op == "grouped_mm":
        return (64, 128) if small else (128, 256)
    if op == "scaled_grouped_mm":
        if small:
            return (64, 128)
        large = (m >= 2048 and k >= 2048) or (m >= 2048 and n >= 2048) or (k >= 2048 and n >= 2048)
        if large:
            return (256, 128) if fast_accum else (128, 128)
        return (128, 256)
    return None
