"""Compare two runs GEMM by GEMM: what got slower or faster beyond noise, what broke or was fixed, which
waterfall factors moved. Used by ``tracekit compare`` (``--gate`` for CI).

The GEMMs are the cases of each run's Analysis (:mod:`tracekit.analyzers.analysis`), matched on (backend, M, N,
K, dtype); a case without a shape (a bare profiled kernel) is matched on its kernel name. For each pair the time
per call is compared (the median call's span: GEMM + auxiliary kernels + gaps, as explain and show give it) and so
is the achieved TFLOP/s.

Noise: tracekit's benchmark records the 10th and 90th percentile of each GEMM's repeats. A change no larger than
the combined half-spreads ``(p90 - p10) / 2`` of both sides is ``noise``, whatever its size; beyond it, a change
over ``threshold_pct`` is a ``regression`` (slower) or ``improvement`` (faster), else ``within threshold``. With
no spread recorded (ncu, timelines) only the threshold applies. A GEMM that ran in BASE and fails (or gives wrong
results) in NEW is ``broken``: the gate fails on regressions and broken GEMMs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import polars as pl

from tracekit.records import Environment

from .analysis.figures import median_call

__all__ = ["DEFAULT_THRESHOLD_PCT", "FACTOR_MOVE", "GemmPoint", "compare_runs", "gemm_points"]

DEFAULT_THRESHOLD_PCT = 5.0
FACTOR_MOVE = 0.02
"""A waterfall factor that changed by at least this much (absolute, factors are 0-1) has moved."""
_ORIGIN_RANK = {"measurement": 0, "timeline": 1, "ncu": 2, "kernel": 3}

Key = tuple[Any, ...]


@dataclass
class GemmPoint:
    """One GEMM of one run, as compare sees it."""

    key: Key
    label: str
    backend: str | None
    m: int | None
    n: int | None
    k: int | None
    dtype: str | None
    origin: str
    time_us: float | None
    time_us_p10: float | None = None
    time_us_p90: float | None = None
    repeats: int | None = None
    tflops: float | None = None
    status: str | None = None
    factors: dict[str, float] = field(default_factory=dict)
    verdict: str | None = None

    @property
    def half_spread_us(self) -> float | None:
        if self.time_us_p10 is None or self.time_us_p90 is None:
            return None
        return max(0.0, self.time_us_p90 - self.time_us_p10) / 2


def _key(backend: Any, m: Any, n: Any, k: Any, dtype: Any, name: Any) -> Key:
    if m is not None and n is not None and k is not None:
        return (backend, int(m), int(n), int(k), dtype)
    return ("kernel", str(name))


def _label(p: GemmPoint) -> str:
    if p.m is not None:
        return f"{p.backend or '?'} {p.m}x{p.n}x{p.k} {p.dtype or ''}".strip()
    return p.label


def gemm_points(cases: Sequence[Any]) -> dict[Key, GemmPoint]:
    """Every GEMM case of a run (the Analysis' cases, :mod:`tracekit.analyzers.analysis`) keyed for matching,
    with its per-call time (the median call span: GEMM + aux + gap), p10 / p90 where the repeats recorded them,
    achieved TFLOP/s and waterfall factors. When several cases share a key (the same shape in different ranges),
    the best-timed origin is kept first and the rest are numbered ``#2``, ``#3`` in their order."""
    ordered = sorted(
        enumerate(cases),
        key=lambda ic: (
            _ORIGIN_RANK.get(ic[1].origin, 9),
            str(ic[1].parents[-1] if ic[1].parents else None),
            ic[0],
        ),
    )
    out: dict[Key, GemmPoint] = {}
    for _, c in ordered:
        t, s = c.timing, c.shape

        def us(ns: float | None) -> float | None:
            return ns / 1e3 if ns is not None else None

        mid = median_call(t)
        p = GemmPoint(
            key=_key(
                c.backend,
                s.m if s else None,
                s.n if s else None,
                s.k if s else None,
                s.dtype_a if s else None,
                c.kernel.name or c.name,
            ),
            label=c.label,
            backend=c.backend,
            m=s.m if s else None,
            n=s.n if s else None,
            k=s.k if s else None,
            dtype=s.dtype_a if s else None,
            origin=c.origin,
            time_us=us(mid.span_ns if mid else None),  # the median call (analysis/figures.py), as every view
            time_us_p10=us(t.span_ns.p10),
            time_us_p90=us(t.span_ns.p90),
            repeats=None,
            tflops=t.achieved_tflops,
            status="ok" if c.origin == "measurement" else None,
            factors={f.name: f.value for f in c.factors},
            verdict=c.verdict.factor,
        )
        key, i = p.key, 1
        while key in out:
            i += 1
            key = (*p.key, f"#{i}")
        p.key = key
        out[key] = p
    return out


def _point(p: GemmPoint) -> dict[str, Any]:
    """A GEMM found in one run only, as the JSON lists it."""
    return {
        "gemm": _label(p),
        "backend": p.backend,
        "m": p.m,
        "n": p.n,
        "k": p.k,
        "dtype": p.dtype,
        "time_us": p.time_us,
        "tflops": p.tflops,
        "verdict": p.verdict,
    }


def _failure_keys(failures: Iterable[Mapping[str, Any]]) -> dict[Key, dict[str, Any]]:
    """The failures by (backend, op, M, N, K), the first of each key kept."""
    out: dict[Key, dict[str, Any]] = {}
    for r in failures:
        key = (r.get("backend"), r.get("op"), r.get("m"), r.get("n"), r.get("k"))
        first = next((ln.strip() for ln in str(r.get("message") or "").splitlines() if ln.strip()), "")
        out.setdefault(
            key,
            {
                "backend": r.get("backend"),
                "op": r.get("op"),
                "m": r.get("m"),
                "n": r.get("n"),
                "k": r.get("k"),
                "kind": r.get("kind"),
                "error_type": r.get("error_type"),
                "first_line": first,
                "message": r.get("message"),
            },
        )
    return out


def _pct(new: float | None, base: float | None) -> float | None:
    if new is None or base is None or base == 0:
        return None
    return (new / base - 1.0) * 100.0


def _classify(b: GemmPoint, n: GemmPoint, threshold_pct: float) -> tuple[str, float | None]:
    if n.status == "wrong" and b.status != "wrong":
        return "broken", None
    if b.time_us is None or n.time_us is None:
        return "untimed", None
    delta = n.time_us - b.time_us
    spreads = [s for s in (b.half_spread_us, n.half_spread_us) if s is not None]
    band = sum(spreads) if spreads else None
    if delta == 0:
        return "unchanged", band
    if band is not None and abs(delta) <= band:
        return "noise", band
    change = _pct(n.time_us, b.time_us) or 0.0
    if change > threshold_pct:
        return "regression", band
    if change < -threshold_pct:
        return "improvement", band
    return "within threshold", band


def _failures_of(analysis: Any, frames: Mapping[str, pl.DataFrame] | None) -> list[dict[str, Any]]:
    if analysis is not None:
        return [msgspec.structs.asdict(f) for f in analysis.failures]
    assert frames is not None, "compare_runs needs a run's frames or its Analysis"
    return frames["failures"].to_dicts()


def _wrong_of(analysis: Any, frames: Mapping[str, pl.DataFrame] | None) -> list[dict[str, Any]]:
    if analysis is not None:
        return [msgspec.structs.asdict(w) for w in analysis.wrong_results]
    assert frames is not None, "compare_runs needs a run's frames or its Analysis"
    meas = frames["measurements"]
    return meas.filter(pl.col("status") == "wrong").to_dicts() if meas.height else []


def compare_runs(
    base: Mapping[str, pl.DataFrame] | None,
    new: Mapping[str, pl.DataFrame] | None,
    *,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    base_environment: Environment | dict[str, Any] | None = None,
    new_environment: Environment | dict[str, Any] | None = None,
    base_analysis: Any = None,
    new_analysis: Any = None,
) -> dict[str, Any]:
    """The comparison as a JSON-able dict: ``gemms`` (matched pairs with status), ``only_in_base``,
    ``only_in_new`` (labels; ``only_in_base_gemms`` / ``only_in_new_gemms`` the same GEMMs with shape, time and
    TFLOP/s), ``new_failures``, ``fixed_failures``, ``changed_failures``, ``regressions`` (labels) and
    ``passed`` (no regression and nothing broken). ``base_analysis`` / ``new_analysis`` are the runs' Analyses
    (built from the frames and environments when not given), which give the failures and the measurements with
    wrong results too; the frames (None where both Analyses are given) are read only without them."""
    from .analysis import case_list

    base_cases = (
        base_analysis.cases if base_analysis is not None else case_list(base, environment=base_environment)  # type: ignore[arg-type]
    )
    new_cases = (
        new_analysis.cases if new_analysis is not None else case_list(new, environment=new_environment)  # type: ignore[arg-type]
    )
    bp, np_ = gemm_points(base_cases), gemm_points(new_cases)
    # the failures and the wrong results from the Analyses where given (every view renders the Analysis), else
    # from the frames
    bf = _failure_keys(_failures_of(base_analysis, base))
    nf = _failure_keys(_failures_of(new_analysis, new))
    rows: list[dict[str, Any]] = []
    for key, b in bp.items():
        n = np_.get(key)
        if n is None:
            continue
        status, band = _classify(b, n, threshold_pct)
        moved = []
        for name in sorted(set(b.factors) | set(n.factors)):
            bv, nv = b.factors.get(name), n.factors.get(name)
            if bv is None or nv is None or abs(nv - bv) >= FACTOR_MOVE:
                moved.append(
                    {"factor": name, "base": bv, "new": nv, "change": (nv - bv) if bv and nv else None}
                )
        rows.append(
            {
                "gemm": _label(b),
                "key": list(key),
                "backend": b.backend,
                "m": b.m,
                "n": b.n,
                "k": b.k,
                "dtype": b.dtype,
                "origin": [b.origin, n.origin],
                "base_time_us": b.time_us,
                "new_time_us": n.time_us,
                "time_change_pct": _pct(n.time_us, b.time_us),
                "noise_us": band,
                "noise_pct": 100.0 * band / b.time_us if band is not None and b.time_us else None,
                "base_spread_us": [b.time_us_p10, b.time_us_p90],
                "new_spread_us": [n.time_us_p10, n.time_us_p90],
                "base_tflops": b.tflops,
                "new_tflops": n.tflops,
                "tflops_change_pct": _pct(n.tflops, b.tflops),
                "status": status,
                "base_verdict": b.verdict,
                "new_verdict": n.verdict,
                "factors_moved": moved,
            }
        )
    # A GEMM measured in BASE that fails in NEW is broken; failures carry no dtype, so match on the rest.
    measured = {(p.backend, p.m, p.n, p.k) for p in bp.values() if p.time_us is not None}
    new_failures = [f for k, f in nf.items() if k not in bf]
    fixed = [f for k, f in bf.items() if k not in nf]
    changed = [
        {"base": bf[k], "new": nf[k]}
        for k in nf
        if k in bf
        and (bf[k]["error_type"], bf[k]["first_line"]) != (nf[k]["error_type"], nf[k]["first_line"])
    ]
    for f in new_failures:
        f["broke"] = (f["backend"], f["m"], f["n"], f["k"]) in measured
        if f["broke"]:
            rows.append(
                {
                    "gemm": f"{f['backend']} {f['m']}x{f['n']}x{f['k']}",
                    "key": [f["backend"], f["m"], f["n"], f["k"]],
                    "backend": f["backend"],
                    "m": f["m"],
                    "n": f["n"],
                    "k": f["k"],
                    "status": "broken",
                    "error": f"{f['error_type']}: {f['first_line']}",
                }
            )
    # The GEMM analysis leaves out measurements with wrong results; a GEMM right in BASE and wrong in NEW broke.
    for r in _wrong_of(new_analysis, new):
        key = _key(r["backend"], r["m"], r["n"], r["k"], r["dtype"], r["range"])
        if key in bp and key not in np_:
            rows.append(
                {
                    "gemm": _label(bp[key]),
                    "key": list(key),
                    "backend": r["backend"],
                    "m": r["m"],
                    "n": r["n"],
                    "k": r["k"],
                    "status": "broken",
                    "error": f"wrong result (relative error {r['rel_error']})",
                }
            )
    regressions = [r["gemm"] for r in rows if r["status"] in ("regression", "broken")]
    return {
        "threshold_pct": threshold_pct,
        "gemms": rows,
        "counts": {
            s: sum(1 for r in rows if r["status"] == s)
            for s in (
                "regression",
                "broken",
                "improvement",
                "within threshold",
                "noise",
                "unchanged",
                "untimed",
            )
        },
        "only_in_base": [_label(p) for k, p in bp.items() if k not in np_],
        "only_in_new": [_label(p) for k, p in np_.items() if k not in bp],
        "only_in_base_gemms": [_point(p) for k, p in bp.items() if k not in np_],
        "only_in_new_gemms": [_point(p) for k, p in np_.items() if k not in bp],
        "new_failures": new_failures,
        "fixed_failures": fixed,
        "changed_failures": changed,
        "regressions": regressions,
        "passed": not regressions,
    }
