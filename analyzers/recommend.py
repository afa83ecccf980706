"""From a profiled run to a backend recommendation: the plan of ``tracekit bench gemm --shapes-from RUN`` and
the recommendation table of the bench run it makes (docs/GEMM_OPS.md, "Benchmarking a run's own shapes").

:func:`plan_from_analysis` reads the source run's :class:`~tracekit.analyzers.analysis.Analysis` (never its raw
files): every GEMM case with a shape and input dtypes, grouped by (M, N, K, dtypes) so that the same GEMM seen in
two ranges is measured once, ordered by the run's GEMM time. Each row carries the run's own kernel time per call
(:data:`PER_CALL`: the cases' GEMM time over all calls / calls, so that Δ per call x calls is the saving over the
run) and the calls. The backends a row is measured with are chosen by the command (it knows the backend
registry; this module imports no collector).

:func:`recommend` joins the plan with the bench run's measurements and failures: per row the fastest working
backend of the run's own dtype, the saving over the run's calls and its share of the run's GPU time, and apart
from it the fastest backend of each lower-precision what-if (``--what-if fp8,fp4``). :func:`recommendation_of`
reads both from a bench run (its run.json's ``capture.shapes_from`` and its frames) for ``report`` and the TUI.

Times in ns; shares in percent of the source run's GPU time (every kernel).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

__all__ = [
    "PER_CALL",
    "WHAT_IF_DTYPES",
    "BackendTime",
    "Plan",
    "PlanRow",
    "Recommendation",
    "RecommendationRow",
    "SourceRun",
    "bench_hint",
    "plan_from_analysis",
    "plan_of",
    "recommend",
    "recommendation_lines",
    "recommendation_of",
]

PER_CALL = "mean per call"
"""The run's kernel time per call the plan compares against: the case's GEMM time (GEMM kernel + split-K reduce,
``timing.gemm_ns_total``) over its calls (``timing.calls``). A mean, not the median call, so that Δ per call x
calls adds up to the run's GEMM time."""

WHAT_IF_DTYPES: dict[str, str] = {"fp8": "e4m3", "fp4": "e2m1"}
"""``--what-if`` names and the backend input dtype each stands for."""

BITS: dict[str, int] = {
    "fp32": 32,
    "tf32": 19,
    "bf16": 16,
    "fp16": 16,
    "e4m3": 8,
    "e5m2": 8,
    "int8": 8,
    "e2m1": 4,
}
"""Bits per input element, to tell a lower-precision what-if from the run's own dtype."""


class _S(msgspec.Struct, kw_only=True, frozen=True):
    """Keyword-only, frozen parts (written into the bench run's run.json and read back)."""


class SourceRun(_S, kw_only=True, frozen=True):
    """The profiled run a bench run measured the shapes of: its path (absolute), name, when it was made, the
    sha256 of its run.json (of the file itself for a raw profiler file) and of its Analysis JSON."""

    path: str
    name: str | None = None
    created: str | None = None
    manifest_sha256: str | None = None
    analysis_sha256: str | None = None


class PlanRow(_S, kw_only=True, frozen=True):
    """One shape to measure: the cases it stands for, the run's calls and GEMM time, and the backends.

    ``per_call_ns`` is :data:`PER_CALL`; ``backends`` the backends of the run's own dtype that run on the GPU,
    ``skipped`` those of that dtype that do not (name -> why); ``what_if`` the lower-precision backends per
    what-if name (``fp8`` -> [...])."""

    m: int
    n: int
    k: int
    dtype: str
    dtype_b: str | None = None
    dtype_out: str | None = None
    scale: str | None = None
    rate_class: str | None = None
    case_ids: list[str]
    names: list[str]
    ranges: list[str] = msgspec.field(default_factory=list)
    calls: int
    gemm_ns_total: float
    per_call_ns: float
    backends: list[str] = msgspec.field(default_factory=list)
    skipped: dict[str, str] = msgspec.field(default_factory=dict)
    what_if: dict[str, list[str]] = msgspec.field(default_factory=dict)

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


class Plan(_S, kw_only=True, frozen=True):
    """What ``bench gemm --shapes-from`` measures: the source run, the per-call figure's name, the run's GPU
    time (the share's denominator), the rows (most GEMM time first) and the cases left out with why."""

    source: SourceRun
    per_call: str = PER_CALL
    gpu_ns_total: float | None = None
    gpu: str | None = None
    compute_capability: str | None = None
    what_if: list[str] = msgspec.field(default_factory=list)
    rows: list[PlanRow] = msgspec.field(default_factory=list)
    left_out: list[dict[str, str]] = msgspec.field(default_factory=list)

    def shapes(self) -> list[tuple[int, int, int]]:
        """The distinct (M, N, K) of the rows, in order."""
        seen: dict[tuple[int, int, int], None] = {}
        for r in self.rows:
            seen.setdefault((r.m, r.n, r.k), None)
        return list(seen)

    def backends(self) -> list[str]:
        """Every backend the plan runs (own dtype and what-ifs), in first-use order."""
        seen: dict[str, None] = {}
        for r in self.rows:
            for b in [*r.backends, *(b for bs in r.what_if.values() for b in bs)]:
                seen.setdefault(b, None)
        return list(seen)

    def shapes_of(self, backend: str) -> list[tuple[int, int, int]]:
        """The distinct shapes ``backend`` is measured at."""
        seen: dict[tuple[int, int, int], None] = {}
        for r in self.rows:
            if backend in r.backends or any(backend in bs for bs in r.what_if.values()):
                seen.setdefault((r.m, r.n, r.k), None)
        return list(seen)


class BackendTime(_S, kw_only=True, frozen=True):
    """One backend at one shape: its median time (ns) when it ran and was right, else its status (``wrong`` or
    a failure kind) and the first line of its error."""

    backend: str
    time_ns: float | None = None
    status: str = "not run"
    error: str | None = None


class RecommendationRow(_S, kw_only=True, frozen=True):
    """A plan row with its results: the fastest working backend of the run's own dtype (None when none worked),
    Δ per call (run - best, ns; negative: the run is faster), the saving over the run's calls (Δ x calls, never
    below 0) and its share of the run's GPU time; ``what_if`` the same per lower-precision what-if."""

    row: PlanRow
    results: list[BackendTime]
    best: BackendTime | None = None
    delta_ns: float | None = None
    saving_ns: float | None = None
    saving_pct: float | None = None
    what_if: dict[str, RecommendationRow] = msgspec.field(default_factory=dict)


class Recommendation(_S, kw_only=True, frozen=True):
    """The recommendation table of a bench run: per row the best backend and the projected saving; the total
    saving over the run's calls and its share of the run's GPU time."""

    plan: Plan
    rows: list[RecommendationRow]
    saving_ns_total: float = 0.0
    saving_pct_total: float | None = None


# --- the plan -----------------------------------------------------------------------------------------------------
def _sha256(path: Path) -> str | None:
    try:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def source_of(path: Path, analysis: Any) -> SourceRun:
    """The link a bench run keeps to ``path`` (a run folder, a bundle or a raw file) and its Analysis."""
    p = Path(path).resolve()
    manifest = p / "run.json" if p.is_dir() else p
    return SourceRun(
        path=str(p),
        name=analysis.run.name,
        created=analysis.run.created,
        manifest_sha256=_sha256(manifest),
        analysis_sha256=hashlib.sha256(analysis.to_json()).hexdigest(),
    )


def plan_from_analysis(analysis: Any, source: SourceRun, what_if: Sequence[str] = ()) -> Plan:
    """The rows of the plan (no backends yet): the cases with a shape and an input dtype, one row per (M, N, K,
    dtypes, scale), most GEMM time first; cases without a shape, dtype or calls, and batched ones, are listed
    in ``left_out`` with why."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    left_out: list[dict[str, str]] = []
    for case in analysis.cases:
        s, t = case.shape, case.timing
        why = None
        if s is None:
            why = "no shape (capture with --torch-profiler, or name the GEMM's range with its shape)"
        elif not s.dtype_a:
            why = "no input dtype"
        elif s.batch and s.batch > 1:
            why = f"batched x{s.batch}: the backends time one GEMM"
        elif t.calls < 1 or t.gemm_ns_total <= 0:
            why = "no timed call"
        if why is not None:
            left_out.append({"case_id": case.id, "name": case.name, "why": why})
            continue
        key = (s.m, s.n, s.k, s.dtype_a, s.dtype_b, s.dtype_out, s.scale)
        groups.setdefault(key, []).append(case)
    rows = []
    for (m, n, k, da, db, do, scale), cases in groups.items():
        calls = sum(c.timing.calls for c in cases)
        total = sum(c.timing.gemm_ns_total for c in cases)
        rows.append(
            PlanRow(
                m=m,
                n=n,
                k=k,
                dtype=da,
                dtype_b=db,
                dtype_out=do,
                scale=scale,
                rate_class=cases[0].rate.dtype_class,
                case_ids=[c.id for c in cases],
                names=[c.name for c in cases],
                ranges=sorted({c.range for c in cases if c.range}),
                calls=calls,
                gemm_ns_total=total,
                per_call_ns=total / calls,
            )
        )
    rows.sort(key=lambda r: -r.gemm_ns_total)
    device = analysis.devices[0] if analysis.devices else None
    return Plan(
        source=source,
        gpu_ns_total=analysis.summary.gpu_ns_total,
        gpu=device.name if device else None,
        compute_capability=device.compute_capability if device else None,
        what_if=list(what_if),
        rows=rows,
        left_out=left_out,
    )


def lower_precision(dtype: str, what_if_dtype: str) -> bool:
    """Whether ``what_if_dtype`` has fewer bits than the run's ``dtype`` (only those are what-ifs)."""
    return BITS.get(what_if_dtype, 99) < BITS.get(dtype, 0)


def plan_of(record: Any) -> Plan | None:
    """The plan a bench run's run.json carries (``capture.shapes_from`` of its :class:`~tracekit.records.RunRecord`),
    None for any other run."""
    data = record.capture.shapes_from
    if not data:
        return None
    try:
        return msgspec.convert(data, Plan)
    except msgspec.ValidationError:
        return None


# --- the recommendation -------------------------------------------------------------------------------------------
def _first_line(text: Any) -> str | None:
    lines = str(text or "").strip().splitlines()
    return lines[0][:200] if lines else None


def _results(
    backends: Iterable[str],
    shape: tuple[int, int, int],
    measured: Mapping[tuple[str, int, int, int], Mapping[str, Any]],
    failed: Mapping[tuple[str, int, int, int], Mapping[str, Any]],
) -> list[BackendTime]:
    out = []
    for b in backends:
        key = (b, *shape)
        row, fail = measured.get(key), failed.get(key)
        if row is not None and row.get("status") == "ok" and row.get("time_us") is not None:
            out.append(BackendTime(backend=b, time_ns=float(row["time_us"]) * 1e3, status="ok"))
        elif row is not None:
            out.append(BackendTime(backend=b, status=str(row.get("status") or "wrong")))
        elif fail is not None:
            message = _first_line(fail.get("message"))
            error = f"{fail.get('error_type')}: {message}" if fail.get("error_type") else message
            out.append(BackendTime(backend=b, status=str(fail.get("kind") or "failed"), error=error))
        else:
            out.append(BackendTime(backend=b))
    return out


def _best(
    row: PlanRow, results: list[BackendTime], gpu_ns: float | None
) -> tuple[BackendTime | None, float | None, float | None, float | None]:
    ok = [r for r in results if r.time_ns is not None]
    if not ok:
        return None, None, None, None
    best = min(ok, key=lambda r: r.time_ns or 0.0)
    delta = row.per_call_ns - (best.time_ns or 0.0)
    saving = max(delta, 0.0) * row.calls
    share = saving / gpu_ns * 100.0 if gpu_ns else None
    return best, delta, saving, share


def recommend(
    plan: Plan, measurements: Iterable[Mapping[str, Any]], failures: Iterable[Mapping[str, Any]]
) -> Recommendation:
    """The recommendation table from the plan and the bench run's measurement and failure rows (dicts with
    backend, m, n, k and time_us / status, or kind / error_type / message)."""
    measured = {(r["backend"], r["m"], r["n"], r["k"]): r for r in measurements}
    failed = {(r["backend"], r["m"], r["n"], r["k"]): r for r in failures}
    rows = []
    for pr in plan.rows:
        shape = (pr.m, pr.n, pr.k)
        results = _results(pr.backends, shape, measured, failed)
        best, delta, saving, share = _best(pr, results, plan.gpu_ns_total)
        what_if = {}
        for name, backends in pr.what_if.items():
            wr = _results(backends, shape, measured, failed)
            wb, wd, ws, wp = _best(pr, wr, plan.gpu_ns_total)
            what_if[name] = RecommendationRow(
                row=pr, results=wr, best=wb, delta_ns=wd, saving_ns=ws, saving_pct=wp
            )
        rows.append(
            RecommendationRow(
                row=pr,
                results=results,
                best=best,
                delta_ns=delta,
                saving_ns=saving,
                saving_pct=share,
                what_if=what_if,
            )
        )
    total = sum(r.saving_ns or 0.0 for r in rows)
    return Recommendation(
        plan=plan,
        rows=rows,
        saving_ns_total=total,
        saving_pct_total=total / plan.gpu_ns_total * 100.0 if plan.gpu_ns_total else None,
    )


def recommendation_of(record: Any, frames: Mapping[str, Any]) -> Recommendation | None:
    """The recommendation of a bench run made with ``--shapes-from`` (its run.json's record and its frames:
    ``measurements`` and ``failures``), None for any other run."""
    plan = plan_of(record)
    if plan is None:
        return None

    def rows(name: str) -> list[dict[str, Any]]:
        frame = frames.get(name)
        return [] if frame is None or frame.height == 0 else frame.to_dicts()

    return recommend(plan, rows("measurements"), rows("failures"))


def to_builtins(obj: msgspec.Struct) -> Any:
    """A plan or recommendation as JSON-able data (``--json``, run.json, the report's JSON)."""
    return msgspec.to_builtins(obj)


def _us(ns: float | None) -> str:
    return "" if ns is None else f"{ns / 1e3:,.1f}"


def _ms(ns: float | None) -> str:
    return "" if ns is None else f"{ns / 1e6:,.3f}"


def _pct(p: float | None) -> str:
    return "" if p is None else f"{p:.2f}%"


def _what_if_text(name: str, w: RecommendationRow) -> str:
    if w.best is None:
        failed = [r.status for r in w.results]
        return f"{name}: none worked ({', '.join(sorted(set(failed))) or 'no backend'})"
    return f"{name}: {w.best.backend} {_us(w.best.time_ns)} µs, saves {_ms(w.saving_ns)} ms ({_pct(w.saving_pct)})"


def recommendation_lines(rec: Recommendation) -> tuple[str, list[str], list[list[str]], list[str]]:
    """The recommendation table as plain text cells, the one layout the CLI, the report and the TUI render:
    (title, header, rows, footnotes)."""
    plan = rec.plan
    title = f"Backends at the shapes of {plan.source.name or plan.source.path}"
    header = [
        "#",
        "shape MxNxK",
        "dtype",
        "calls",
        "run µs",
        "fastest backend",
        "µs",
        "Δ µs/call",
        "saving ms",
        "% run GPU",
        "failed",
        "what-if",
    ]
    rows = []
    for i, r in enumerate(rec.rows, 1):
        p = r.row
        failed = [f"{b.backend} ({b.status})" for b in r.results if b.time_ns is None]
        rows.append(
            [
                str(i),
                p.shape,
                p.dtype,
                f"{p.calls:,}",
                _us(p.per_call_ns),
                r.best.backend if r.best else ("none worked" if p.backends else f"no {p.dtype} backend"),
                _us(r.best.time_ns) if r.best else "",
                _us(r.delta_ns),
                _ms(r.saving_ns) if r.best else "",
                _pct(r.saving_pct) if r.best else "",
                ", ".join(failed),
                "; ".join(_what_if_text(k, w) for k, w in r.what_if.items()),
            ]
        )
    foot = [
        f"run µs: the run's GEMM kernel time, {plan.per_call} (GEMM time over all calls / calls); backend µs: "
        "median of the timed repeats; saving = max(Δ, 0) x calls; % run GPU: the saving's share of the run's "
        f"GPU time ({_ms(plan.gpu_ns_total)} ms, every kernel).",
        f"projected saving with the fastest backend of each row's own dtype: {_ms(rec.saving_ns_total)} ms "
        f"({_pct(rec.saving_pct_total)} of the run's GPU time); what-ifs change the precision and are not in it.",
        f"source run: {plan.source.path} (run.json sha256 {(plan.source.manifest_sha256 or '?')[:12]})",
    ]
    return title, header, rows, foot


def bench_hint(case: Any) -> str | None:
    """The explain card's pointer to ``bench gemm --shapes-from`` where the kernel itself is the largest loss
    (the verdict's factor is ``in-kernel``, or Nsight Compute's finding inside it) and the case has a shape and dtype a backend can be timed at. One
    line that fits an 80-column card's border: RUN is the run the card belongs to."""
    s = case.shape
    if (
        case.verdict.factor not in ("in-kernel", "ncu finding")
        or s is None
        or not s.dtype_a
        or (s.batch or 1) > 1
    ):
        return None
    return "other backends at this shape: tracekit bench gemm --shapes-from RUN"
