"""Nsight Compute CSV exports -> the same ``ncu`` / ``ncu_metrics`` / ``ncu_rules`` / ``devices`` frames as a .ncu-rep.

Two layouts exist (``sniff_ncu_csv`` tells which):

- ``raw``: ``ncu -i X.ncu-rep --page raw --csv``. One row per kernel, one column per metric, usually followed by a
  units row. Values are display-scaled (``1.69 Ghz``, ``214.244 Kbyte/block``, ``1,980,000``): they are parsed and
  brought back to the base units a .ncu-rep stores, so both readers give the same numbers (to the 6 digits the
  CSV prints).
- ``details``: ``--page details --csv`` (also what ``ncu --csv`` prints while profiling). One row per section
  metric, labelled for people ("SM Frequency"), plus rule rows. Labels are mapped back to metric names with the
  table below, taken from ncu's own section definitions in the reports under shared/data (ncu 2022.3 - 2025.3);
  rows of the "Command line profiler metrics" section carry metric names already. A label the table does not
  know is kept in ``ncu_metrics`` as ``"<section>: <label>"``.

Lines before the header (``==PROF==`` messages, program output captured along with ncu's stdout) are skipped.
"""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

import polars as pl

from tracekit.errors import UnreadableFileError
from tracekit.naming import DOMAIN

from ..base import Extract, source_name
from . import columns as cols
from .report import ncu_frames

_FIXED = frozenset(
    [
        "ID",
        "Process ID",
        "Process Name",
        "Host Name",
        "Kernel Name",
        "Context",
        "Stream",
        "Block Size",
        "Grid Size",
        "Device",
        "CC",
        "Kernel Time",
        "Function Name",
        "Demangled Name",
        "Mangled Name",
    ]
)
"""Per-kernel columns that are not metrics (NVTX columns are recognised by their ``...Range...`` header)."""
_DETAILS = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")
_SNIFF_BYTES = 1 << 20
_HINT = "export with `ncu -i report.ncu-rep --page raw --csv`"

_SOL, _CWA, _LS = "GPU Speed Of Light Throughput", "Compute Workload Analysis", "Launch Statistics"
_MWA, _OCC, _SCH, _WSS = (
    "Memory Workload Analysis",
    "Occupancy",
    "Scheduler Statistics",
    "Warp State Statistics",
)

LABELS: dict[tuple[str, str], str] = {
    (_SOL, "Compute (SM) Throughput"): "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    (_SOL, "DRAM Frequency"): "dram__cycles_elapsed.avg.per_second",
    (_SOL, "DRAM Throughput"): "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    (_SOL, "Duration"): "gpu__time_duration.sum",
    (_SOL, "Elapsed Cycles"): "gpc__cycles_elapsed.max",
    (_SOL, "L1/TEX Cache Throughput"): "l1tex__throughput.avg.pct_of_peak_sustained_active",
    (_SOL, "L2 Cache Throughput"): "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    (_SOL, "Memory Throughput"): "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    (_SOL, "SM Active Cycles"): "sm__cycles_active.avg",
    (_SOL, "SM Frequency"): "gpc__cycles_elapsed.avg.per_second",
    (_CWA, "Executed Ipc Active"): "sm__inst_executed.avg.per_cycle_active",
    (_CWA, "Executed Ipc Elapsed"): "sm__inst_executed.avg.per_cycle_elapsed",
    (_CWA, "Issued Ipc Active"): "sm__inst_issued.avg.per_cycle_active",
    (_LS, "# SMs"): "launch__sm_count",
    (_LS, "# TPCs"): "launch__tpc_count",
    (_LS, "Block Size"): "launch__block_size",
    (_LS, "Cluster Scheduling Policy"): "launch__cluster_scheduling_policy",
    (_LS, "Cluster Size"): "launch__cluster_size",
    (_LS, "Driver Shared Memory Per Block"): "launch__shared_mem_per_block_driver",
    (_LS, "Dynamic Shared Memory Per Block"): "launch__shared_mem_per_block_dynamic",
    (_LS, "Function Cache Configuration"): "launch__func_cache_config",
    (_LS, "Grid Size"): "launch__grid_size",
    (_LS, "Registers Per Thread"): "launch__registers_per_thread",
    (_LS, "Shared Memory Configuration Size"): "launch__shared_mem_config_size",
    (_LS, "Stack Size"): "launch__stack_size",
    (_LS, "Static Shared Memory Per Block"): "launch__shared_mem_per_block_static",
    (_LS, "Threads"): "launch__thread_count",
    (_LS, "Uses Green Context"): "launch__uses_green_context",
    (_LS, "Waves Per SM"): "launch__waves_per_multiprocessor",
    (_MWA, "L1/TEX Hit Rate"): "l1tex__t_sector_hit_rate.pct",
    (_MWA, "L2 Hit Rate"): "lts__t_sector_hit_rate.pct",
    (_MWA, "L2 Persisting Size"): "launch__persisting_l2_cache_size",
    (_MWA, "Max Bandwidth"): "gpu__compute_memory_request_throughput.avg.pct_of_peak_sustained_elapsed",
    (_MWA, "Mem Busy"): "gpu__compute_memory_access_throughput.avg.pct_of_peak_sustained_elapsed",
    (_MWA, "Mem Pipes Busy"): "sm__memory_throughput.avg.pct_of_peak_sustained_elapsed",
    (_MWA, "Memory Throughput"): "dram__bytes.sum.per_second",
    (_OCC, "Achieved Active Warps Per SM"): "sm__warps_active.avg.per_cycle_active",
    (_OCC, "Achieved Occupancy"): "sm__warps_active.avg.pct_of_peak_sustained_active",
    (_OCC, "Block Limit Barriers"): "launch__occupancy_limit_barriers",
    (_OCC, "Block Limit Registers"): "launch__occupancy_limit_registers",
    (_OCC, "Block Limit SM"): "launch__occupancy_limit_blocks",
    (_OCC, "Block Limit Shared Mem"): "launch__occupancy_limit_shared_mem",
    (_OCC, "Block Limit Warps"): "launch__occupancy_limit_warps",
    (_OCC, "Cluster Occupancy"): "launch__occupancy_cluster_pct",
    (_OCC, "Max Active Clusters"): "launch__cluster_max_active",
    (_OCC, "Max Cluster Size"): "launch__cluster_max_potential_size",
    (_OCC, "Overall GPU Occupancy"): "launch__occupancy_cluster_gpu_pct",
    (_OCC, "Theoretical Active Warps per SM"): "sm__maximum_warps_avg_per_active_cycle",
    (_OCC, "Theoretical Occupancy"): "sm__maximum_warps_per_active_cycle_pct",
    (_SCH, "Active Warps Per Scheduler"): "smsp__warps_active.avg.per_cycle_active",
    (_SCH, "Eligible Warps Per Scheduler"): "smsp__warps_eligible.avg.per_cycle_active",
    (_SCH, "Issued Warp Per Scheduler"): "smsp__issue_active.avg.per_cycle_active",
    (_SCH, "No Eligible"): "smsp__issue_inst0.avg.pct_of_peak_sustained_active",
    (_SCH, "One or More Eligible"): "smsp__issue_active.avg.pct_of_peak_sustained_active",
    (_WSS, "Warp Cycles Per Executed Instruction"): "smsp__average_warps_active_per_inst_executed.ratio",
    (_WSS, "Warp Cycles Per Issued Instruction"): "smsp__average_warp_latency_per_inst_issued.ratio",
}
"""(section, label) on the details page -> metric name. "Issue Slots Busy" and "SM Busy" are left out: ncu
changed them from ``pct_of_peak_sustained_active`` to ``..._elapsed`` between versions."""

_RULE_KINDS = {"OPT": "OPTIMIZATION", "WRN": "WARNING", "ERR": "ERROR", "INF": "OK"}
"""Rule Type abbreviations on the details page -> ncu_report's MsgType names (INF is MsgType.OK)."""

_EMPTY_VALUES = ("", "n/a", "no data", "N/A", "(!) n/a")
_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)?(\.\d*)?([eE][+-]?\d+)?$")
_TRIPLE = re.compile(r"^\(\s*(\d+),\s*(\d+),\s*(\d+)\s*\)$")


def _number(cell: str) -> float | None:
    """A CSV cell as a number: thousands separators allowed; None if it is not one."""
    s = cell.strip()
    if not s or not _NUMBER.match(s) or s in ("+", "-", "."):
        return None
    try:
        value = float(s.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None  # "1e999" in a damaged file: not a number ncu writes


def _head_lines(path: Path) -> tuple[list[str], int] | None:
    """The first chunk of the file as text lines and the index of the header line, if there is one."""
    try:
        with open(path, "rb") as f:
            chunk = f.read(_SNIFF_BYTES)
    except OSError:
        return None
    return _lines_of(chunk)


def _lines_of(chunk: bytes) -> tuple[list[str], int] | None:
    if b"\x00" in chunk[:4096]:
        return None
    text = chunk.decode("utf-8-sig", errors="replace")
    lines = text.splitlines()
    for i, line in enumerate(lines[:2000]):
        if line.startswith('"ID",'):
            return lines, i
    return None


def sniff_ncu_csv(path: Path) -> str | None:
    """``"raw"`` or ``"details"`` for a Nsight Compute CSV export, None for anything else (content, not name)."""
    return _sniff(_head_lines(Path(path)))


def sniff_csv_head(head: bytes) -> str | None:
    """:func:`sniff_ncu_csv` of a file's first MiB."""
    return _sniff(_lines_of(head[:_SNIFF_BYTES]))


def _sniff(found: tuple[list[str], int] | None) -> str | None:
    if found is None:
        return None
    lines, i = found
    try:
        header = next(csv.reader([lines[i]]))
    except (csv.Error, StopIteration):
        return None
    return _layout(header)


def _layout(header: list[str]) -> str | None:
    names = set(header)
    if not {"ID", "Kernel Name"} <= names:
        return None
    if set(_DETAILS) <= names:
        return "details"
    if any("__" in h for h in header):
        return "raw"
    return None


def _reject(path: Path) -> UnreadableFileError:
    try:
        with open(path, "rb") as f:
            first = f.readline(300).decode("utf-8", "replace").strip()
    except OSError as exc:
        return UnreadableFileError(path, f"cannot open: {exc.strerror or exc}")
    if not first:
        what = "the file is empty"
    else:
        shown = first if len(first) <= 80 else first[:77] + "..."
        what = f'the first line is {shown!r}, an export\'s header starts with "ID","Process ID"'
    return UnreadableFileError(path, f"not an Nsight Compute CSV export ({what})", _HINT)


def _rows(path: Path) -> tuple[str, list[str], list[list[str]]]:
    try:
        with open(path, encoding="utf-8-sig", errors="replace", newline="") as f:
            text = f.read()
    except OSError as exc:
        raise UnreadableFileError(path, f"cannot open: {exc.strerror or exc}") from None
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines[:2000]) if ln.startswith('"ID",')), None)
    if start is None:
        raise _reject(path)
    try:
        rows = list(csv.reader(io.StringIO("".join(lines[start:]))))
    except csv.Error as exc:
        raise UnreadableFileError(path, f"broken CSV: {exc}", _HINT) from None
    header, body = rows[0], [r for r in rows[1:] if r]
    layout = _layout(header)
    if layout is None:
        raise _reject(path)
    return layout, header, body


def _triple(cell: str) -> tuple[int, int, int] | None:
    m = _TRIPLE.match(cell.strip())
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _nvtx_cell(cell: str) -> list[tuple[str | None, str]]:
    """``1218  "<default domain>:gemm/bf16/M=1024,...:none:none:none:none:none:none" `` -> [(None, "gemm/...")].

    Each quoted item is ``Domain:Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg``; the range name may hold
    colons, so the domain is the first field and the last six are attributes.
    """
    out: list[tuple[str | None, str]] = []
    for item in re.findall(r'"([^"]*)"', cell):
        parts = item.split(":")
        if len(parts) < 8:
            continue
        domain = parts[0]
        name = ":".join(parts[1:-6])
        out.append((None if domain in cols.DEFAULT_DOMAIN_NAMES else domain, name))
    return out


class _Kernel:
    """Everything gathered for one kernel (one ``ID``) before it becomes frame rows."""

    def __init__(self, ident: int, fixed: dict[str, str]) -> None:
        self.ident = ident
        self.fixed = fixed
        self.metrics: dict[str, cols.Metric] = {}
        self.long: list[tuple[str, float | None, str | None, str | None]] = []
        self.rules: list[dict[str, object]] = []
        self.stack: list[tuple[str | None, str]] = []

    def add(self, metric: str, cell: str, unit: str) -> None:
        if metric in self.metrics:
            return  # the details page repeats some metrics (SOL "Duration" and the command-line section)
        cell = cell.strip()
        if cell in _EMPTY_VALUES:
            self.metrics[metric] = (None, unit)
            self.long.append((metric, None, None, unit or None))
            return
        num = _number(cell)
        if num is None:
            self.metrics[metric] = (cell, unit)
            self.long.append((metric, None, cell, unit or None))
            return
        value, base = cols.to_base(num, unit)
        self.metrics[metric] = (value, base)
        txt = str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
        self.long.append((metric, None if math.isnan(value) else value, txt, base or None))


def _is_fixed(column: str) -> bool:
    return column in _FIXED or "_Range:" in column


def _fixed(header: list[str], row: list[str]) -> dict[str, str]:
    return {h: (row[i] if i < len(row) else "") for i, h in enumerate(header) if _is_fixed(h)}


def _read_raw(header: list[str], body: list[list[str]]) -> list[_Kernel]:
    units: list[str] = [""] * len(header)
    if body and not body[0][0].strip():
        units = body[0] + [""] * (len(header) - len(body[0]))
        body = body[1:]
    nvtx_col = next((i for i, h in enumerate(header) if "Push/Pop_Range" in h), None)
    kernels = []
    for row in body:
        ident = _number(row[0])
        if ident is None:
            continue
        k = _Kernel(int(ident), _fixed(header, row))
        for i, h in enumerate(header):
            if not _is_fixed(h) and i < len(row):
                k.add(h, row[i], units[i])
        if nvtx_col is not None and nvtx_col < len(row):
            k.stack = _nvtx_cell(row[nvtx_col])
        kernels.append(k)
    return kernels


def _read_details(header: list[str], body: list[list[str]]) -> list[_Kernel]:
    col = {h: i for i, h in enumerate(header)}

    def get(row: list[str], name: str) -> str:
        i = col.get(name)
        return row[i] if i is not None and i < len(row) else ""

    kernels: dict[int, _Kernel] = {}
    for row in body:
        ident = _number(get(row, "ID"))
        if ident is None:
            continue
        k = kernels.get(int(ident))
        if k is None:
            k = kernels[int(ident)] = _Kernel(int(ident), _fixed(header[: col["Section Name"]], row))
            nvtx = next((i for i, h in enumerate(header) if "Push/Pop_Range" in h), None)
            if nvtx is not None and nvtx < len(row):
                k.stack = _nvtx_cell(row[nvtx])
        section, label = get(row, "Section Name"), get(row, "Metric Name")
        if label:
            if section == "Command line profiler metrics" or "__" in label:
                metric = label
            else:
                metric = LABELS.get((section, label), f"{section}: {label}")
            k.add(metric, get(row, "Metric Value"), get(row, "Metric Unit"))
        rule = get(row, "Rule Name")
        if rule:
            speedup = _number(get(row, "Estimated Speedup"))
            stype = get(row, "Estimated Speedup Type").strip().lower() or None
            k.rules.append(
                {
                    "rule": rule,
                    "section": section or None,
                    "kind": _RULE_KINDS.get(
                        get(row, "Rule Type").strip(), get(row, "Rule Type").strip() or None
                    ),
                    "title": None,
                    "message": get(row, "Rule Description"),
                    "speedup_pct": speedup,
                    "speedup_type": stype,
                }
            )
    return list(kernels.values())


def _frames(kernels: list[_Kernel], source: str) -> tuple[dict[str, pl.DataFrame], int]:
    """The four frames, and how many values did not fit their column (a damaged file: they are null)."""
    ncu_rows, metric_rows, rule_rows = [], [], []
    devices: dict[tuple, dict] = {}
    for ncu_id, k in enumerate(kernels):
        fx = k.fixed
        kernel_name = fx.get("Kernel Name", "").strip()
        grid, block = _triple(fx.get("Grid Size", "")), _triple(fx.get("Block Size", ""))
        ordinal = _number(fx.get("Device", ""))
        row: dict[str, object] = {
            "ncu_id": ncu_id,
            "source": source,
            "action_index": k.ident,
            "name": cols.function_name(kernel_name) if "(" in kernel_name else kernel_name,
            "demangled_name": kernel_name or None,
        }
        row.update(cols.nvtx_columns(k.stack, DOMAIN))
        row.update(cols.ncu_columns(k.metrics))
        for axis, triple, prefix in (("grid", grid, "grid_"), ("block", block, "block_")):
            if triple is not None:
                for j, xyz in enumerate("xyz"):
                    if row.get(prefix + xyz) is None:
                        row[prefix + xyz] = triple[j]
                size_col = f"{axis}_size"
                if row.get(size_col) is None:
                    row[size_col] = triple[0] * triple[1] * triple[2]
        if row.get("compute_capability") is None and fx.get("CC", "").strip():
            row["compute_capability"] = fx["CC"].strip()
        ncu_rows.append(row)
        metric_rows.extend((ncu_id, *m) for m in k.long)
        rule_rows.extend({"ncu_id": ncu_id, **r} for r in k.rules)
        dev = cols.device_row(
            k.metrics, int(ordinal) if ordinal is not None else cols.device_ordinal(k.metrics)
        )
        if dev["compute_capability"] is None:
            dev["compute_capability"] = row["compute_capability"]
        key = tuple(dev[c] for c in ("device", "name", "compute_capability"))
        if any(v is not None for v in key):
            devices.setdefault(key, {"source": source, **dev})
    return ncu_frames(ncu_rows, metric_rows, rule_rows, list(devices.values()))


def read_ncu_csv(path: Path) -> Extract:
    """Read a Nsight Compute CSV export (raw or details page) into an `Extract` of kind ``ncu-csv``."""
    path = Path(path)
    layout, header, body = _rows(path)
    kernels = _read_raw(header, body) if layout == "raw" else _read_details(header, body)
    if not kernels:
        raise UnreadableFileError(
            path, f"the Nsight Compute CSV export ({layout} page) holds no kernels", _HINT
        )
    source = source_name(path)
    frames, bad = _frames(kernels, source)
    ex = Extract(kind="ncu-csv", source=source, frames=frames)
    if bad:
        ex.partial = True
        ex.warnings.append(
            f"{source}: {bad} values do not fit their column (damaged cells?) and are left null"
        )
    return ex


def _launches(ex: Extract) -> dict[int, tuple[tuple, dict[str, float | None]]]:
    """ncu_id -> (identity of the launch, its numeric metrics) for one CSV extract."""
    ncu = ex.frame("ncu").select("ncu_id", "action_index", "demangled_name", "grid_size", "block_size")
    metrics: dict[int, dict[str, float | None]] = {}
    for ncu_id, metric, value in ex.frame("ncu_metrics").select("ncu_id", "metric", "value").iter_rows():
        metrics.setdefault(ncu_id, {})[metric] = value
    return {row[0]: (tuple(row[1:]), metrics.get(row[0], {})) for row in ncu.iter_rows()}


def _same_launch(a: dict[str, float | None], b: dict[str, float | None]) -> bool:
    common = a.keys() & b.keys()
    return bool(common) and all(a[m] == b[m] for m in common)


def _keep_only(ex: Extract, keep: list[int]) -> None:
    """Keep the kernels ``keep`` of a CSV extract, renumbered 0.. in order (the importer offsets ids by height)."""
    renumber = pl.DataFrame(
        {"ncu_id": keep, "_new": list(range(len(keep)))}, schema={"ncu_id": pl.Int64, "_new": pl.Int64}
    )
    for name in ("ncu", "ncu_metrics", "ncu_rules"):
        if name in ex.frames:
            df = ex.frames[name].join(renumber, on="ncu_id", how="inner", maintain_order="left")
            ex.frames[name] = df.with_columns(pl.col("_new").alias("ncu_id")).drop("_new")


def drop_repeated_exports(extracts: list[Extract]) -> list[Extract]:
    """Count each profiled launch once when several CSV exports of one report are read together.

    ``ncu --csv --page details`` and ``--page raw`` (or a metrics-only export) of the same report describe the same
    launches; a folder holding both (../shared/data/thirdparty/llm-perf-opt-rtx50 does) would otherwise double every
    kernel. Two CSV kernels are one launch when their ncu ID, name, grid and block match and every metric both hold
    has the same value; the export holding more metrics is kept, and the other file gets a warning naming it. Binary
    reports are never merged: their launches are distinct by construction."""
    csv_extracts = [ex for ex in extracts if ex.kind == "ncu-csv"]
    if len(csv_extracts) < 2:
        return extracts
    seen: dict[tuple, list[tuple[int, int, dict[str, float | None]]]] = {}
    dropped: dict[int, set[int]] = {i: set() for i in range(len(csv_extracts))}
    twin: dict[int, set[str]] = {i: set() for i in range(len(csv_extracts))}
    for i, ex in enumerate(csv_extracts):
        for ncu_id, (key, metrics) in _launches(ex).items():
            match = next((m for m in seen.get(key, []) if _same_launch(m[2], metrics)), None)
            if match is None:
                seen.setdefault(key, []).append((i, ncu_id, metrics))
                continue
            j, other_id, other_metrics = match
            if len(metrics) > len(other_metrics):  # keep the richer export
                dropped[j].add(other_id)
                twin[j].add(ex.source)
                seen[key][seen[key].index(match)] = (i, ncu_id, metrics)
            else:
                dropped[i].add(ncu_id)
                twin[i].add(csv_extracts[j].source)
    for i, ex in enumerate(csv_extracts):
        if not dropped[i]:
            continue
        ids = ex.frame("ncu")["ncu_id"].to_list()
        _keep_only(ex, [n for n in ids if n not in dropped[i]])
        ex.warnings.append(
            f"{ex.source}: {len(dropped[i])} kernel(s) are also in {', '.join(sorted(twin[i]))} (another export of "
            "the same report) and are counted once"
        )
    return [ex for ex in extracts if ex.kind != "ncu-csv" or ex.frame("ncu").height]
