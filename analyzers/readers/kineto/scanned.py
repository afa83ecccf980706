"""The C scanner's arrays for one chunk (``native.py``) -> the ``Part`` that ``part.make_part`` builds.

Rule for rule as ``part.py`` (``_stream``, ``as_int``, ``_estimates`` ... each applied once per distinct string
or as an array operation), so the two give equal frames: tests/readers/test_kineto_native.py checks them
against each other. A module of its own because it needs numpy (0.09 s to import), which only a read that
uses the scanner pays for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import polars as pl

from ..torch_ops import is_gemm_op
from .decode import _Event
from .native import _CATS, _DIMS, _KEY_AT, _KEYS
from .part import (
    _BUCKET,
    _COPY_KIND,
    _STREAM_TID,
    LAUNCH_CATS,
    MEMOP_CATS,
    OCCUPANCY_SMEM_LIMIT,
    Part,
    _cpu_ranges,
    as_int,
    op_frame,
)

_BUCKET_OF = np.array([_BUCKET[c] for c in _CATS], dtype=np.uint8)
_PREF_OF = np.array([LAUNCH_CATS.get(c, 0) for c in _CATS], dtype=np.int8)
_MEMOP_OF = [MEMOP_CATS.get(c) for c in _CATS]
_T_INT, _T_FLOAT, _T_STR = 1, 2, 5
_REC = np.dtype(
    [
        ("pid", "<i8"),
        ("tid", "<i8"),
        ("ts", "<i8"),
        ("dur", "<i8"),
        ("args_off", "<i8"),
        ("args_len", "<i8"),
        ("name", "<i4"),
        ("arg_at", "<i4"),
        ("cat", "u1"),
        ("ph", "u1"),
        ("pid_t", "u1"),
        ("tid_t", "u1"),
        ("ts_ok", "u1"),
        ("dur_ok", "u1"),
        ("pad", "u1", (2,)),
    ],
    align=True,
)
"""``Rec`` in ``_scan.c``: one per kept event."""
_NK, _ND = len(_KEYS), len(_DIMS)
_ARG = np.dtype(
    {
        "names": ["i", "f", "d", "t", "dt"],
        "formats": [
            ("<i8", (_NK,)),
            ("<f8", (_NK,)),
            ("<i8", (_ND * 3,)),
            ("u1", (_NK,)),
            ("u1", (_ND * 3,)),
        ],
        "offsets": [0, 8 * _NK, 16 * _NK, 16 * _NK + 24 * _ND, 17 * _NK + 24 * _ND],
        "itemsize": (17 * _NK + 27 * _ND + 7) // 8 * 8,
    }
)
"""The args record of ``_scan.c`` (``arg_layout``): each key's int, float and type, and [x, y, z] of ``_DIMS``."""
_I64 = (-(2**63), 2**63 - 1)


def build(got: dict[str, Any], doc: bytes | bytearray | memoryview) -> Part:
    """The part of one scanned document (``got``: what ``_scan.scan`` returned for ``doc``)."""
    return _Columns(got, doc).part()


class _Columns:
    """The scanner's arrays for one chunk, and the frames built from them."""

    def __init__(self, got: dict[str, Any], doc: bytes | bytearray | memoryview) -> None:
        self.doc = doc
        self.strings: list[str] = got["strings"]
        if got["sizes"] != (_REC.itemsize, _ARG.itemsize):  # the C and this module disagree: a build error
            raise RuntimeError(
                f"Kineto scanner records of {got['sizes']} bytes, expected "
                f"{(_REC.itemsize, _ARG.itemsize)}: rebuild tracekit"
            )
        rec = np.frombuffer(got["rec"], dtype=_REC)
        self.cat, self.ph, self.name = rec["cat"], rec["ph"], rec["name"]
        self.pid_t, self.tid_t, self.pid, self.tid = rec["pid_t"], rec["tid_t"], rec["pid"], rec["tid"]
        self.ts, self.ts_ok, self.dur, self.dur_ok = (
            rec["ts"],
            rec["ts_ok"] == 1,
            rec["dur"],
            rec["dur_ok"] == 1,
        )
        self.args_off, self.args_len = rec["args_off"], rec["args_len"]
        self.arg_at = rec["arg_at"]
        args = np.frombuffer(got["arg"], dtype=_ARG)
        # one contiguous row per key (the records hold one row per event): a key's values gather fast
        self.arg_i, self.arg_f, self.arg_t = (np.ascontiguousarray(args[f].T) for f in ("i", "f", "t"))
        self.arg_d, self.arg_dt = (np.ascontiguousarray(args[f].T) for f in ("d", "dt"))
        self.bucket = _BUCKET_OF[self.cat]
        self._names: pl.Series | None = None
        self._maps: dict[Callable[[str], int | None], tuple[np.ndarray, np.ndarray]] = {}

    # -- columns of a subset of the kept events (``idx``: their positions) ---------------------------------------
    def names(self, idx: np.ndarray) -> pl.Series:
        """Names; "" where the name is not a string (as ``make_part`` writes it)."""
        if self._names is None:
            self._names = pl.Series([*self.strings, ""], dtype=pl.String)
        return self.by_name(idx, self._names)

    def by_name(self, idx: np.ndarray, table: pl.Series) -> pl.Series:
        """``table`` (a value per distinct string, then one for a name that is not a string) at each event's name."""
        codes = self.name[idx]
        return table.gather(np.where(codes < 0, len(self.strings), codes))

    def arg_int(self, idx: np.ndarray, field: str) -> tuple[np.ndarray, np.ndarray]:
        k, at = _KEY_AT[field], self.arg_at[idx]
        return self.arg_i[k][at], self.arg_t[k][at] == _T_INT

    def arg_dims(self, idx: np.ndarray, field: str) -> list[tuple[np.ndarray, np.ndarray]]:
        d0, at = _DIMS.index(field) * 3, self.arg_at[idx]
        return [(self.arg_d[d0 + d][at], self.arg_dt[d0 + d][at] == 1) for d in range(3)]

    def arg_estimate(self, idx: np.ndarray, field: str) -> tuple[np.ndarray, np.ndarray]:
        """``part._estimates``: an int or float >= 0 as a float, anything else null."""
        k, at = _KEY_AT[field], self.arg_at[idx]
        t = self.arg_t[k][at]
        v = np.where(t == _T_INT, self.arg_i[k][at].astype(np.float64), self.arg_f[k][at])
        return v, ((t == _T_INT) | (t == _T_FLOAT)) & (v >= 0)

    def ids(
        self, idx: np.ndarray, which: str, of_string: Callable[[str], int | None]
    ) -> tuple[np.ndarray, np.ndarray]:
        """``pid`` or ``tid``: the integer where it is one; a string as ``of_string`` reads it."""
        t, v = (self.pid_t, self.pid) if which == "pid" else (self.tid_t, self.tid)
        t, v = t[idx], v[idx]
        vals, ok = v.copy(), t == _T_INT
        strs = t == _T_STR
        if strs.any():
            sv, sok = self.string_map(of_string)
            codes = v[strs]
            vals[strs], ok[strs] = sv[codes], sok[codes]
        return vals, ok

    def string_map(self, fn: Callable[[str], int | None]) -> tuple[np.ndarray, np.ndarray]:
        """``fn`` over the chunk's distinct strings, as values and a validity mask (an int past Int64 is null,
        as ``part.int_series`` makes it)."""
        if fn not in self._maps:  # once per chunk and function: the strings are the names too (thousands)
            out = [fn(s) for s in self.strings]
            ok = np.array([v is not None and _I64[0] <= v <= _I64[1] for v in out], dtype=bool)
            vals = np.array([v if k else 0 for v, k in zip(out, ok, strict=True)], dtype=np.int64)
            self._maps[fn] = (vals, ok)
        return self._maps[fn]

    def times(self, idx: np.ndarray, which: str) -> pl.Series:
        v, ok = (self.ts, self.ts_ok) if which == "ts" else (self.dur, self.dur_ok)
        return _masked(v[idx], ok[idx], pl.Int64)

    # -- the frames -------------------------------------------------------------------------------------------
    def part(self) -> Part:
        b, ph, named = self.bucket, self.ph, self.name >= 0
        x = ph == 1
        kernels = np.flatnonzero((b == 0) & (x | (ph == 0)))
        launch_all = np.flatnonzero(b == 1)
        corr, corr_ok = self.arg_int(launch_all, "correlation")
        launch = launch_all[corr_ok]
        cpu = np.flatnonzero((b == 2) & x)
        gpu = np.flatnonzero((b == 3) & x)
        mem = np.flatnonzero((b == 5) & x)
        other = np.flatnonzero((b == 4) & x & named)
        is_step = np.array([s.startswith("ProfilerStep#") for s in self.strings] or [False], dtype=bool)
        is_gemm = np.array([is_gemm_op(s) for s in self.strings] or [False], dtype=bool)
        step = is_step[self.name[other]]
        steps, cpu_ops = other[step], other[~step]
        ops = cpu_ops[is_gemm[self.name[cpu_ops]]]
        frames = (
            (self._kernels(kernels), kernels, True),
            (self._launches(launch, corr[corr_ok]), launch, False),
            (self._cpu_ranges(cpu), cpu, True),
            (_cpu_ranges(self.events(steps)), steps, True),
            (self._gpu_ranges(gpu), gpu, True),
            (self._op_ranges(ops), ops, True),
            (self._cpu_ops(cpu_ops), cpu_ops, True),
            (self._memops(mem), mem, True),
        )
        timed = []
        for df, idx, with_dur in frames:
            cols = [self.times(idx, "ts").alias("start_rel")]
            if with_dur:
                cols.append(self.times(idx, "dur").alias("dur"))
            timed.append(df.with_columns(cols))
        return Part(*timed)

    def _device(self, idx: np.ndarray, pid_of_string: Callable[[str], int | None] | None) -> pl.Series:
        """``args.device`` if an int, else the pid (an int; a numeric string too where ``pid_of_string``)."""
        dev, dev_ok = self.arg_int(idx, "device")
        if pid_of_string is None:
            pid, pid_ok = self.pid[idx], self.pid_t[idx] == _T_INT
        else:
            pid, pid_ok = self.ids(idx, "pid", pid_of_string)
        return _masked(np.where(dev_ok, dev, pid), dev_ok | pid_ok, pl.Int32)

    def _stream(self, idx: np.ndarray) -> pl.Series:
        """``part._stream``: ``args.stream``, else the number in a ``"stream 7"`` tid, else an integer tid."""
        st, st_ok = self.arg_int(idx, "stream")
        tid, tid_ok = self.ids(idx, "tid", _stream_of)
        return _masked(np.where(st_ok, st, tid), st_ok | tid_ok, pl.Int64)

    def _int(self, idx: np.ndarray, field: str, dtype: Any = pl.Int64) -> pl.Series:
        return _masked(*self.arg_int(idx, field), dtype)

    def _kernels(self, idx: np.ndarray) -> pl.DataFrame:
        grid, block = self.arg_dims(idx, "grid"), self.arg_dims(idx, "block")
        smem, smem_ok = self.arg_int(idx, "smem")
        occ, occ_ok = self.arg_estimate(idx, "occupancy")
        occ_ok &= ~(smem_ok & (smem > OCCUPANCY_SMEM_LIMIT))
        return pl.DataFrame(
            {
                "name": self.names(idx),
                "device": self._device(idx, None),
                "context": self._int(idx, "context"),
                "stream": self._stream(idx),
                "correlation_id": self._int(idx, "correlation"),
                "grid_x": _masked(*grid[0], pl.Int32),
                "grid_y": _masked(*grid[1], pl.Int32),
                "grid_z": _masked(*grid[2], pl.Int32),
                "block_x": _masked(*block[0], pl.Int32),
                "block_y": _masked(*block[1], pl.Int32),
                "block_z": _masked(*block[2], pl.Int32),
                "registers_per_thread": self._int(idx, "registers", pl.Int32),
                "smem_bytes": _masked(smem, smem_ok, pl.Int64),
                "blocks_per_sm": _masked(*self.arg_estimate(idx, "blocks_per_sm"), pl.Float64),
                "est_occupancy_pct": _masked(occ, occ_ok, pl.Float64),
            }
        )

    def _memops(self, idx: np.ndarray) -> pl.DataFrame:
        names = self.names(idx)
        copy = pl.Series(
            [m.group(1) if (m := _COPY_KIND.match(s)) else None for s in [*self.strings, ""]], dtype=pl.String
        )
        return pl.DataFrame(
            {
                "kind": pl.Series([_MEMOP_OF[c] for c in self.cat[idx]], dtype=pl.String),
                "name": names,
                "copy_kind": self.by_name(idx, copy),
                "bytes": self._int(idx, "bytes"),
                "device": self._device(idx, None),
                "context": self._int(idx, "context"),
                "stream": self._stream(idx),
                "correlation_id": self._int(idx, "correlation"),
            }
        )

    def _launches(self, idx: np.ndarray, corr: np.ndarray) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "corr": pl.Series(corr, dtype=pl.Int64),
                "pref": pl.Series(_PREF_OF[self.cat[idx]], dtype=pl.Int8),
                "pid": _masked(*self.ids(idx, "pid", as_int), pl.Int64),
                "tid": _masked(*self.ids(idx, "tid", as_int), pl.Int64),
            }
        )

    def _cpu_ranges(self, idx: np.ndarray) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "name": self.names(idx),
                "pid": _masked(*self.ids(idx, "pid", as_int), pl.Int64),
                "tid": _masked(*self.ids(idx, "tid", as_int), pl.Int64),
                "ext": self._int(idx, "external_id"),
            }
        )

    def _cpu_ops(self, idx: np.ndarray) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "name": self.names(idx),
                "pid": _masked(*self.ids(idx, "pid", as_int), pl.Int64),
                "tid": _masked(*self.ids(idx, "tid", as_int), pl.Int64),
            }
        )

    def _gpu_ranges(self, idx: np.ndarray) -> pl.DataFrame:
        tid, tid_ok = self.ids(idx, "tid", _gpu_tid_of)
        return pl.DataFrame(
            {
                "name": self.names(idx),
                "device": self._device(idx, as_int),
                "tid": _masked(tid, tid_ok, pl.Int64),
                "ext": self._int(idx, "external_id"),
            }
        )

    def events(self, idx: np.ndarray) -> list[_Event]:
        """The events at ``idx`` as ``make_part`` sees them, as far as its frames read them (for the few events
        whose ``args`` the scanner does not read and ``part._cpu_ranges`` decodes itself: the steps)."""
        names = [self.strings[c] for c in self.name[idx].tolist()]
        pid_t, pid, tid_t, tid = (a[idx].tolist() for a in (self.pid_t, self.pid, self.tid_t, self.tid))
        doc = self.doc
        events = [
            _Event(
                ph="X",
                name=name,
                pid=self._id_value(pt, p),
                tid=self._id_value(tt, t),
                args=msgspec.Raw(bytes(doc[off : off + n]) if off >= 0 else b""),
            )
            for name, pt, p, tt, t, off, n in zip(
                names,
                pid_t,
                pid,
                tid_t,
                tid,
                self.args_off[idx].tolist(),
                self.args_len[idx].tolist(),
                strict=True,
            )
        ]
        return events

    def _op_ranges(self, idx: np.ndarray) -> pl.DataFrame:
        """The GEMM ops: their args' text goes to ``part.op_frame`` (the shapes are decoded there)."""
        names = [self.strings[c] for c in self.name[idx].tolist()]
        doc = self.doc
        args = [
            bytes(doc[o : o + n]) if o >= 0 else b""
            for o, n in zip(self.args_off[idx].tolist(), self.args_len[idx].tolist(), strict=True)
        ]
        pid = _masked(*self.ids(idx, "pid", as_int), pl.Int64)
        tid = _masked(*self.ids(idx, "tid", as_int), pl.Int64)
        return op_frame(names, pid, tid, args)

    def _id_value(self, t: int, v: int) -> int | str | None:
        """A pid / tid as msgspec decodes it, as far as ``as_int`` can tell (other values read as None)."""
        return v if t == _T_INT else self.strings[v] if t == _T_STR else None


def _stream_of(tid: str) -> int | None:
    m = _STREAM_TID.search(tid)
    return int(m.group(1)) if m else None


def _gpu_tid_of(tid: str) -> int | None:
    """``part._gpu_ranges``' tid: a numeric string, else the number in ``"stream 7"``."""
    t = as_int(tid)
    return t if t is not None else _stream_of(tid)


def _masked(values: np.ndarray, ok: np.ndarray, dtype: Any) -> pl.Series:
    """``values`` with nulls where not ``ok``, cast to ``dtype`` (null where a value does not fit, as
    ``part.int_series`` casts)."""
    s = pl.Series(values)
    if not ok.all():
        s = s.set(pl.Series(~ok), None)  # type: ignore[arg-type]
    return s.cast(dtype, strict=False)
