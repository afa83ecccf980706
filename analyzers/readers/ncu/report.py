"""Nsight Compute reports (.ncu-rep) -> the ``ncu``, ``ncu_metrics``, ``ncu_rules`` and ``devices`` frames.

Reading goes in three steps, each for a reason seen on real files:

1. ``check_structure`` walks the report's block layout (magic ``NVR\\0``, length-prefixed protobuf headers and
   payloads) without decoding it. ``ncu_report.load_report`` does not fail on a truncated, empty or foreign
   file: it returns an empty or partial report silently, so truncation is caught here, with the byte offset.
2. ``ncu_report`` itself runs in a child process (``worker.py``): on some bit-flipped files it aborts the
   interpreter (protobuf ``Check failed: count >= 0`` -> SIGABRT), which in the child becomes a clean error.
   The child costs about 0.08 s (interpreter + ``ncu_report`` import).
3. The kernels that come back are checked against the structure (one per result record, none without
   metrics: a damaged record loads as a kernel with zero metrics).

Columns come from ``columns.py`` (candidate metric names per column, units to ns / Hz / bytes).
"""

from __future__ import annotations

import glob
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import site
import struct
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from tracekit.errors import MissingToolError, UnreadableFileError
from tracekit.frames import DEVICES, NCU, NCU_METRICS, NCU_RULES
from tracekit.installs import newest_first, versioned_dirs
from tracekit.naming import DOMAIN
from tracekit.records import NcuAction, NcuReaderOutput

from ..base import Extract, fit_frame, fit_rows, source_name
from . import columns as cols

MAGIC = b"NVR\x00"
"""First four bytes of every .ncu-rep (Nsight Compute 2019.x to 2025.x)."""

_WORKER = Path(__file__).with_name("worker.py")
_HINT = "re-copy the file, or re-capture it with ncu; check it opens with `ncu -i FILE --page raw`"


def is_ncu_report(path: Path) -> bool:
    """True when the file starts with the .ncu-rep magic bytes (content, not extension)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


# --- step 1: structure --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Structure:
    """What the block walk learned: the number of result records (profiled kernels) and the ncu command line."""

    size: int
    blocks: int
    results: int
    command_line: str | None


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return result, i


def _proto_ints(buf: bytes) -> dict[int, int]:
    """The varint fields of a protobuf message (last value wins); other wire types are skipped."""
    out: dict[int, int] = {}
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            out[field], i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            i += n
        elif wire == 5:
            i += 4
        elif wire == 1:
            i += 8
        else:
            raise ValueError(f"wire type {wire}")
        if i > len(buf):
            raise ValueError("field runs past the message")
    return out


_NCU_EXE = re.compile(rb"ncu(?:\.exe)? --?[a-z]")
_CLOCK = re.compile(r"--clock-control[= ]+(\S+)")


def _printable(b: int) -> bool:
    return 0x20 <= b <= 0x7E


def _find_command_line(payload: bytes) -> str | None:
    """The ncu command line the report stores with its process info (a plain protobuf string)."""
    for m in _NCU_EXE.finditer(payload):
        start = m.start()
        while start > 0 and _printable(payload[start - 1]) and payload[start - 1] != 0x20:
            start -= 1
        end = m.end()
        while end < len(payload) and _printable(payload[end]):
            end += 1
        text = payload[start:end].decode("ascii")
        # Protobuf tag and length bytes can be printable ("{Zy/usr/...") and glue onto the path.
        lead = re.match(r"^.{1,3}?(?=/|[A-Za-z]:[\\/])", text)
        return text[lead.end() :] if lead else text
    return None


def clock_control(command_line: str | None) -> str | None:
    """ncu's ``--clock-control`` from the command line stored in the report; ncu's default is ``base``."""
    if not command_line:
        return None
    exe, _, args = command_line.partition(" ")
    if not re.search(r"ncu(\.exe)?$", exe):
        return None
    m = _CLOCK.search(args)
    return m.group(1) if m else "base"


def check_structure(path: Path) -> Structure:
    """Walk the block layout of a .ncu-rep; raise `UnreadableFileError` if it is not one, or is truncated."""
    try:
        size = path.stat().st_size
        f = open(path, "rb")  # noqa: SIM115 - closed below, many early exits
    except OSError as exc:
        raise UnreadableFileError(path, f"cannot open: {exc.strerror or exc}") from None
    with f:
        head = f.read(8)
        if size == 0:
            raise UnreadableFileError(path, "the file is empty", _HINT)
        if head[:4] != MAGIC:
            raise UnreadableFileError(
                path,
                f"not an Nsight Compute report (starts with {head[:8]!r}, expected {MAGIC!r})",
                "give a .ncu-rep written by `ncu -o`",
            )

        def fail(offset: int, what: str) -> UnreadableFileError:
            return UnreadableFileError(
                path, f"damaged or truncated Nsight Compute report: {what} (byte {offset} of {size})", _HINT
            )

        if len(head) < 8:
            raise fail(len(head), "the file ends inside its header")
        (hlen,) = struct.unpack("<I", head[4:8])
        header = f.read(hlen)
        if hlen > 1 << 20 or len(header) != hlen:
            raise fail(8, "the file header is cut off")
        try:
            if 1 not in _proto_ints(header):
                raise ValueError("no version")
        except ValueError:
            raise fail(8, "the file header is unreadable") from None
        offset = 8 + hlen
        blocks = results = 0
        command_line: str | None = None
        while offset < size:
            start = offset
            raw = f.read(4)
            if len(raw) < 4:
                raise fail(start, f"block {blocks} is cut off")
            (blen,) = struct.unpack("<I", raw)
            if blen > min(size, 64 << 20):
                raise fail(start, f"block {blocks} has an impossible header size {blen}")
            bheader = f.read(blen)
            if len(bheader) != blen:
                raise fail(start, f"block {blocks} header is cut off")
            try:
                fields = _proto_ints(bheader)
            except ValueError:
                raise fail(start, f"block {blocks} header is unreadable") from None
            n_sources, n_results, payload = fields.get(1, 0), fields.get(2, 0), fields.get(5)
            if payload is None:
                raise fail(start, f"block {blocks} has no payload size")
            offset = start + 4 + blen
            end = offset + payload
            if end > size:
                raise fail(offset, f"block {blocks} should end at byte {end}, past the end of the file")
            if command_line is None:  # in the session details (field 3) of some block header
                command_line = _find_command_line(bheader)
            # The payload is a run of length-prefixed records that must tile it exactly, one record per source
            # and per result the header announces (true of every report from ncu 2022.3 to 2025.3 we have).
            pos, records = offset, 0
            while pos < end:
                f.seek(pos)
                raw = f.read(4)
                (mlen,) = struct.unpack("<I", raw) if len(raw) == 4 else (None,)
                if mlen is None or pos + 4 + mlen > end:
                    raise fail(pos, f"a record in block {blocks} runs past its block")
                pos += 4 + mlen
                records += 1
            if records != n_sources + n_results:
                raise fail(
                    start, f"block {blocks} announces {n_sources + n_results} records but holds {records}"
                )
            f.seek(end)
            offset = end
            blocks += 1
            results += n_results
    return Structure(size=size, blocks=blocks, results=results, command_line=command_line)


# --- step 2: ncu_report in a child process ------------------------------------------------------------------


def reader_path() -> str | None:
    """Where ``ncu_report`` comes from when it is not installed: the ``extras/python`` folder of an Nsight
    Compute install (the one that holds ``TRACEKIT_NCU`` or ``ncu`` on PATH, else the newest under
    ``/opt/nvidia/nsight-compute`` or ``/usr/local/cuda*/nsight-compute*``). None when it is importable as it is,
    or nowhere to be found. A machine with Nsight Compute but without the PyPI package (a GPU host set up by
    hand, no network) reads reports with the reader of the ncu that wrote them.

    Where this process imports ``ncu_report`` from a folder that a fresh interpreter would not search (a
    program that put an install's extras/python on ``sys.path`` itself), that folder: the reader process is a
    fresh interpreter."""
    spec = importlib.util.find_spec("ncu_report")
    if spec is not None:
        if not spec.origin:
            return None
        origin = Path(spec.origin)
        here = (origin.parent.parent if origin.name == "__init__.py" else origin.parent).resolve()
        searched = [
            *site.getsitepackages(),
            site.getusersitepackages(),
            *os.environ.get("PYTHONPATH", "").split(os.pathsep),
        ]
        return None if any(p and Path(p).resolve() == here for p in searched) else str(here)
    found = []
    for exe in (os.environ.get("TRACEKIT_NCU"), shutil.which("ncu")):
        if exe:
            found.append(Path(exe).resolve().parent / "extras" / "python")
    found += [d / "extras" / "python" for d in versioned_dirs(Path("/opt/nvidia/nsight-compute"))]
    found += [
        Path(p) / "extras" / "python"
        for p in newest_first(map(Path, glob.glob("/usr/local/cuda*/nsight-compute*")))
    ]
    return next(
        (
            str(d)
            for d in found
            if (d / "ncu_report.py").is_file() or (d / "ncu_report" / "__init__.py").is_file()
        ),
        None,
    )


def check_reader(path: Path) -> None:
    """Raises MissingToolError (naming ``path``) when no ``ncu_report`` can be imported or found."""
    if importlib.util.find_spec("ncu_report") is None and reader_path() is None:
        raise _missing_reader(path)


def _missing_reader(path: Path) -> MissingToolError:
    return MissingToolError(
        f"cannot read {path.name}: Nsight Compute's Python report reader (ncu_report) is not installed for "
        f"{sys.executable}, and no Nsight Compute install holds one",
        "pip install ncu-report (no GPU needed), or put Nsight Compute's extras/python folder on PYTHONPATH",
    )


def _load_isolated(path: Path, timeout_s: float) -> list[dict]:
    cmd = [sys.executable, str(_WORKER), str(path)]
    env = None
    extra = reader_path()
    if extra is not None:
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join(p for p in (extra, os.environ.get("PYTHONPATH")) if p)
        )
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout_s, check=False, env=env)
    except subprocess.TimeoutExpired:
        raise UnreadableFileError(
            path, f"Nsight Compute's reader did not finish in {timeout_s:.0f} s", _HINT
        ) from None
    if proc.returncode != 0:
        if proc.returncode < 0:
            try:
                how = f"was killed by {signal.Signals(-proc.returncode).name}"
            except ValueError:
                how = f"was killed by signal {-proc.returncode}"
        else:
            how = f"exited with status {proc.returncode}"
        last = next(
            (ln for ln in reversed(proc.stderr.decode("utf-8", "replace").splitlines()) if ln.strip()), ""
        )
        detail = f" ({last.strip()[:160]})" if last and "stack trace" not in last else ""
        raise UnreadableFileError(
            path, f"Nsight Compute's reader {how} on this file{detail}: it is damaged", _HINT
        )
    return _decode(path, proc.stdout)


def _load_in_process(path: Path) -> list[NcuAction]:
    from . import worker as _ncu_worker

    extra = reader_path()
    if extra is not None and extra not in sys.path:
        sys.path.append(extra)  # the reader stays imported for the process anyway
    try:
        result = _ncu_worker.read(str(path))
        data = json.dumps(result, ensure_ascii=False).encode("utf-8")
    except Exception as exc:
        data = json.dumps(_ncu_worker.failure(exc)).encode("utf-8")
    return _decode(path, data)


def _decode(path: Path, data: bytes) -> list[NcuAction]:
    """The reader process's output as typed actions (tracekit/records.py ``NcuAction``). Decoded by the standard
    library first: the reader writes NaN metric values as ``NaN``, which strict JSON has no word for."""
    try:
        doc = msgspec.convert(json.loads(data), NcuReaderOutput)
    except (ValueError, msgspec.ValidationError):
        raise UnreadableFileError(path, "Nsight Compute's reader gave no usable output", _HINT) from None
    if doc.missing_reader:
        raise _missing_reader(path)
    if doc.error is not None:
        raise UnreadableFileError(
            path, f"Nsight Compute's reader failed on it ({doc.error[:120]}): it is damaged", _HINT
        )
    return doc.actions


# --- step 3: frames -----------------------------------------------------------------------------------------


def _metric_rows(ncu_id: int, metrics: Sequence[Sequence[Any]]) -> tuple[dict[str, cols.Metric], list[tuple]]:
    by_name: dict[str, cols.Metric] = {}
    rows = []
    for name, tag, value, unit in metrics:
        by_name[name] = (value, unit)
        if tag == "f":
            num = None if math.isnan(value) else value
            txt = repr(value)
        elif tag == "i":
            num, txt = float(value), str(value)
        elif tag == "s":
            num, txt = None, value
        else:
            num = txt = None
        rows.append((ncu_id, name, num, txt, unit or None))
    return by_name, rows


def _stack(nvtx: Sequence[tuple[str | None, list[str]]]) -> list[tuple[str | None, str]]:
    out: list[tuple[str | None, str]] = []
    for domain, names in nvtx:
        d = None if domain in cols.DEFAULT_DOMAIN_NAMES else domain
        out.extend((d, n) for n in names)
    return out


def frames_from_actions(
    actions: Sequence[NcuAction | dict[str, Any]],
    source: str,
    command_line: str | None = None,
    lost: list[int] | None = None,
) -> dict[str, pl.DataFrame]:
    """Build the four frames from the reader's kernels (typed actions, or their plain data: tests hand-make it).

    A value that does not fit its column (a damaged report: a grid of 5,460,000,000 blocks) is null; how many
    there were is appended to ``lost``."""
    clock = clock_control(command_line)
    ncu_rows: list[dict] = []
    metric_rows: list[tuple] = []
    rule_rows: list[dict] = []
    devices: dict[tuple, dict] = {}
    for ncu_id, given in enumerate(actions):
        a = given if isinstance(given, NcuAction) else msgspec.convert(given, NcuAction)
        metrics, rows = _metric_rows(ncu_id, a.metrics)
        metric_rows.extend(rows)
        row: dict[str, object] = {
            "ncu_id": ncu_id,
            "source": source,
            "range_index": a.range,
            "action_index": a.action,
            "name": a.name,
            "demangled_name": a.demangled or None,
            "clock_control": clock,
        }
        row.update(cols.nvtx_columns(_stack(a.nvtx), DOMAIN))
        row.update(cols.ncu_columns(metrics))
        ncu_rows.append(row)
        dev = cols.device_row(metrics, cols.device_ordinal(metrics))
        key = tuple(dev[k] for k in ("device", "name", "compute_capability"))
        devices.setdefault(key, {"source": source, **dev})
        for r in a.rules:
            rule_rows.append(
                {
                    "ncu_id": ncu_id,
                    "rule": r.rule,
                    "section": r.section or None,
                    "kind": r.kind,
                    "title": r.title or None,
                    "message": r.message,
                    "speedup_pct": r.speedup_pct,
                    "speedup_type": r.speedup_type if r.speedup_type != "unknown" else None,
                }
            )
    frames, bad = ncu_frames(ncu_rows, metric_rows, rule_rows, list(devices.values()))
    if lost is not None:
        lost.append(bad)
    return frames


def ncu_frames(
    ncu_rows: list[dict[str, Any]],
    metric_rows: list[tuple[Any, ...]],
    rule_rows: list[dict[str, Any]],
    device_rows: list[dict[str, Any]],
) -> tuple[dict[str, pl.DataFrame], int]:
    """The four Nsight Compute frames (ncu, ncu_metrics, ncu_rules, devices) from their rows, and how many values
    did not fit their column (a damaged report: those are null). Shared by the report reader and the CSV reader."""
    metrics_df = pl.DataFrame(
        metric_rows,
        schema=["ncu_id", "metric", "value", "text", "unit"],
        orient="row",
        infer_schema_length=None,
    )
    frames, bad = {}, 0
    for name, spec, rows in (
        ("ncu", NCU, ncu_rows),
        ("ncu_rules", NCU_RULES, rule_rows),
        ("devices", DEVICES, device_rows),
    ):
        df, n = fit_rows(rows, spec)
        frames[name], bad = spec.conform(df), bad + n
    frames["ncu_metrics"], n = fit_frame(metrics_df, NCU_METRICS) if metric_rows else (NCU_METRICS.empty(), 0)
    return frames, bad + n


def read_ncu_report(path: Path, *, isolate: bool = True, timeout_s: float | None = None) -> Extract:
    """Read one .ncu-rep into an `Extract` of kind ``ncu``.

    ``isolate`` (default) runs Nsight Compute's reader in a child process so a damaged file cannot take the
    interpreter down; ``False`` reads in this process (slightly faster, for trusted files). Raises
    `UnreadableFileError` for anything that is not a complete, readable report.
    """
    path = Path(path)
    structure = check_structure(path)
    if structure.results == 0:
        raise UnreadableFileError(
            path, "the report holds no profiled kernels", "check ncu's filters and rerun"
        )
    if isolate:
        limit = timeout_s if timeout_s is not None else 60.0 + structure.size / 2**20
        actions = _load_isolated(path, limit)
    else:
        actions = _load_in_process(path)
    if len(actions) != structure.results:
        raise UnreadableFileError(
            path,
            f"Nsight Compute's reader found {len(actions)} of the {structure.results} profiled kernels "
            "the file holds: it is damaged",
            _HINT,
        )
    empty = [i for i, a in enumerate(actions) if not a.metrics]
    if empty:
        raise UnreadableFileError(
            path, f"kernel {empty[0]} (of {len(actions)}) has no metrics: the report is damaged there", _HINT
        )
    source = source_name(path)
    lost: list[int] = []
    frames = frames_from_actions(actions, source, structure.command_line, lost)
    ex = Extract(kind="ncu", source=source, frames=frames)
    if sum(lost):
        ex.partial = True
        ex.warnings.append(
            f"{source}: {sum(lost)} metric values do not fit their column (damaged?) and are null"
        )
    return ex
