"""Frames for the explainer tests: the H200 probe's real report, and small timelines built from its numbers."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.frames import SPECS

H200 = {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132, "boost_clock_hz": 1.98e9}


@lru_cache(maxsize=4)
def _probe(path: str) -> dict[str, pl.DataFrame]:
    from tracekit.analyzers.importer import combine
    from tracekit.analyzers.readers.ncu.report import read_ncu_report

    return combine([read_ncu_report(Path(path))])


def probe_frames(shared: Path) -> dict[str, pl.DataFrame]:
    """probe.ncu-rep read by the project's ncu reader, combined into a run's frames."""
    return _probe(str(shared / "h200-probe" / "probe.ncu-rep"))


def ncu_row(shared: Path, range_name: str) -> dict[str, Any]:
    ncu = probe_frames(shared)["ncu"]
    return ncu.filter(pl.col("nvtx_range") == range_name).to_dicts()[0]


def frames(**given: pl.DataFrame | list[dict[str, Any]]) -> dict[str, pl.DataFrame]:
    """A full set of frames: the given ones (rows or frames, conformed) and empty ones for the rest."""
    out = {name: spec.empty() for name, spec in SPECS.items()}
    for name, value in given.items():
        df = value if isinstance(value, pl.DataFrame) else pl.DataFrame(value, infer_schema_length=None)
        out[name] = SPECS[name].conform(df)
    return out


def timeline(
    instances: list[list[dict[str, Any]]],
    name: str,
    *,
    parent: str | None = None,
    aux_child: bool = False,
) -> dict[str, pl.DataFrame]:
    """A timeline: one ``gemm`` range per instance holding its kernels (``name``, ``start_ns``, ``end_ns``,
    launch fields); kernels with ``aux=True`` sit in a child ``aux`` range when ``aux_child``."""
    from tracekit.analyzers.importer import parse_range_names

    ranges: list[dict[str, Any]] = []
    kernels: list[dict[str, Any]] = []
    rid = 0
    parent_id = None
    if parent is not None:
        start = min(k["start_ns"] for inst in instances for k in inst) - 100
        end = max(k["end_ns"] for inst in instances for k in inst) + 100
        ranges.append({"range_id": 0, "name": parent, "start_ns": start, "end_ns": end, "depth": 0})
        parent_id, rid = 0, 1
    for inst in instances:
        gid = rid
        ranges.append(
            {
                "range_id": gid,
                "parent_id": parent_id,
                "name": name,
                "start_ns": inst[0]["start_ns"] - 50,
                "end_ns": inst[-1]["end_ns"] + 10,
                "depth": 1 if parent_id is not None else 0,
            }
        )
        rid += 1
        for k in inst:
            target = gid
            if k.get("aux") and aux_child:
                ranges.append(
                    {
                        "range_id": rid,
                        "parent_id": gid,
                        "name": "aux role=quantize backend=torch-fp8 op=quantize",
                        "start_ns": k["start_ns"] - 5,
                        "end_ns": k["end_ns"] + 5,
                        "depth": 2,
                    }
                )
                target, rid = rid, rid + 1
            row = {c: v for c, v in k.items() if c != "aux"}
            row.update(
                kernel_id=len(kernels),
                device=0,
                stream=7,
                range_id=target,
                duration_ns=k["end_ns"] - k["start_ns"],
            )
            kernels.append(row)
    rng = SPECS["ranges"].conform(pl.DataFrame(ranges, infer_schema_length=None))
    rng = parse_range_names(rng.with_columns(pl.lit("push_pop").alias("kind")))
    return frames(ranges=rng, kernels=kernels, devices=[H200])


def make_case(origin: str = "range", name: str = "g", **kw: Any) -> Any:
    """A case's evidence (:class:`~tracekit.analyzers.gemm.CaseEvidence`) from flat fields, for the rules' unit
    tests: ``m``, ``n``, ``k``, ``dtype_a``, ``dtype_b`` (a shape), ``main_kernel``, ``grid``, ``block``,
    ``registers``, ``smem`` (the kernel), ``main_ns``, ``aux_ns``, ``gap_ns``, ``splitk_ns``, ``calls`` (that many
    calls of those parts), ``aux_kernels`` (names), ``sm_clock_hz``, ``clock_source``, ``power_w``,
    ``power_limit_w``, ``throttle_reasons`` (the clock), ``ncu`` (a row), ``device``; anything else is a field of
    the case."""
    from tracekit.analyzers.analysis.model import AuxKernel, KernelRef, Timing
    from tracekit.analyzers.gemm import CaseEvidence, Clock, NcuPart, Shape, call, timing_from_calls
    from tracekit.analyzers.taxonomy import classify_name

    shape = None
    if kw.get("m"):
        shape = Shape(
            m=kw.pop("m"),
            n=kw.pop("n"),
            k=kw.pop("k"),
            dtype_a=kw.pop("dtype_a", None),
            dtype_b=kw.pop("dtype_b", None),
        )
    kernel = KernelRef(
        name=kw.pop("main_kernel", None),
        grid=kw.pop("grid", None),
        block=kw.pop("block", None),
        registers=kw.pop("registers", None),
        smem_bytes=kw.pop("smem", None),
    )
    main = kw.pop("main_ns", None)
    calls = kw.pop("calls", 1)
    splitk = kw.pop("splitk_ns", 0.0)
    aux_ns, gap_ns = kw.pop("aux_ns", 0.0), kw.pop("gap_ns", 0.0)
    names = kw.pop("aux_kernels", [])
    timing, aux = Timing(), []
    if main:
        timing = timing_from_calls([call(main + splitk, aux_ns, gap_ns)] * calls, splitk * calls)
        for n in names:
            cls = classify_name(n).kernel_class
            role = "splitk-reduce" if cls == "splitk-reduce" else "quantize" if cls == "quantize" else "other"
            share = (splitk if role == "splitk-reduce" else aux_ns) * calls / max(len(names), 1)
            aux.append(AuxKernel(name=n, kernel_class=cls, role=role, time_ns_total=share, count=calls))
    clock = Clock(
        kw.pop("sm_clock_hz", None),
        kw.pop("clock_source", None),
        kw.pop("power_w", None),
        kw.pop("power_limit_w", None),
        kw.pop("throttle_reasons", None),
    )
    row = kw.pop("ncu", None)
    ncu = NcuPart(row=row, metrics=kw.pop("metrics", {})) if row is not None else None
    return CaseEvidence(
        origin=origin,
        name=name,
        shape=shape,
        kernel=kernel,
        timing=timing,
        aux=tuple(aux),
        clock=clock,
        ncu=ncu,
        **kw,
    )
