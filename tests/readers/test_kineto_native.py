"""The Kineto reader's C scanner (``native.py``, ``_scan.c``) against the general way (msgspec + ``make_part``).

The scanner must give the same ``Part`` as ``make_part`` wherever it reads a document, and decline (None) where
it is not sure: then the general way reads it. Checked on every real trace under ../shared/data (in both forms:
the whole trace object, and its event array as a chunk), on made-up events that vary every field the frames read
(types, escapes, times past three decimals, args before the category, nested values), on documents it must
decline, and end to end: a multi-chunk import with the scanner and without it (msgspec, the fallback), both in worker threads,
gives the same frames.
"""

from __future__ import annotations

import ctypes
import gzip
import json
import mmap
import subprocess
import sys
from pathlib import Path

import msgspec
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from tracekit.analyzers.readers.kineto import decode as kdecode
from tracekit.analyzers.readers.kineto import native
from tracekit.analyzers.readers.kineto.part import Part, make_part

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
PART_FRAMES = ("kernels", "launches", "cpu", "steps", "gpu", "ops", "cpu_ops", "memops")

needs_scanner = pytest.mark.skipif(
    not native.AVAILABLE,
    reason="the C scanner was not built with this install (no C compiler at install time, or TRACEKIT_NO_SCANNER)",
)
pytestmark = needs_scanner


def frames_equal(a: pl.DataFrame, b: pl.DataFrame, name: str) -> None:
    try:
        assert_frame_equal(a, b)
    except AssertionError as e:
        raise AssertionError(f"{name}: {e}") from None


def general(doc: bytes, form: kdecode.Form) -> tuple[Part, int, kdecode.Meta]:
    out = kdecode.decode(doc, form)
    assert out.events is not None
    return make_part(out.events), out.count, out.meta


def assert_same(doc: bytes, form: kdecode.Form) -> bool:
    """The scanner's part equals the general way's; False where the scanner declined."""
    got = native.scan_part(doc, form)
    if got is None:
        return False
    part, count, meta = got
    ref, ref_count, ref_meta = general(doc, form)
    for name in PART_FRAMES:
        frames_equal(getattr(part, name), getattr(ref, name), name)
    assert (count, meta) == (ref_count, ref_meta)
    return True


def _traces() -> list[str]:
    if not SHARED.is_dir():
        return ["h200-probe/torch_trace.json.gz"]
    return sorted(p.relative_to(SHARED).as_posix() for p in SHARED.rglob("*.json.gz"))


@pytest.mark.parametrize("name", _traces())
def test_real_traces_read_the_same_both_ways(shared_data: Path, name: str) -> None:
    text = gzip.decompress((shared_data / name).read_bytes())
    form: kdecode.Form = "object" if kdecode.first_byte(text) == b"{" else "list"
    assert assert_same(text, form), f"the scanner declined {name}"
    if form == "object":  # the event array alone, as a middle chunk is decoded
        events = msgspec.json.decode(text, type=kdecode._LooseTrace).traceEvents
        assert assert_same(bytes(events), "list")


# -- made-up events ----------------------------------------------------------------------------------------------
CATS = [
    *native._CATS,
    "python_function",
    "ac2g",
    "cuda_profiler_range",
]
NAMES = [
    "aten::mm",
    "aten::addmm",
    "aten::linear",
    "aten::relu",
    "ProfilerStep#3",
    "Memcpy HtoD (Pageable -> Device)",
    "Memset (Device)",
    "void gemm<128, 64>(float*)",
    'quote " and \\ backslash',
    "tab\tnewline\n",
    "non-ASCII é 核 😀",
    "",
]
ID_TEXTS = [
    "0",
    "7",
    "123",
    "-1",
    "4611686018427387904",
    '"12"',
    '"stream 7"',
    '"Spans"',
    '"stream x"',
    '"x"',
    "1.5",
    "null",
    "true",
]
TIME_TEXTS = [
    "0",
    "12",
    "-3",
    "1669783687464181",
    "1.5",
    "2.25",
    "3.125",
    "4.0625",
    "5.99951",
    "-0.0005",
    "9223372036854775",
    "9999999999999999",
    "123456789012345678",
    "null",
]
NUMBERS = [
    "0",
    "1",
    "-1",
    "3",
    "49152",
    "65536",
    "2147483648",
    "0.5",
    "-1.0",
    "97.5",
    "1e2",
    '"7"',
    "null",
    "[]",
    "{}",
    "true",
]
DIMS = [
    "[1, 2, 3]",
    "[128, 1, 1]",
    "[1, 2]",
    "[1, 2, 3, 4]",
    "[1.5, 2, 3]",
    '["a", 2, 3]',
    "[]",
    "null",
    '"x"',
    "[[1], 2, 3]",
]
ARG_KEYS = [
    "device",
    "context",
    "stream",
    "correlation",
    "registers per thread",
    "shared memory",
    "blocks per SM",
    "est. achieved occupancy %",
    "External id",
    "bytes",
    "queued",
    "cbid",
]
OP_ARGS = [
    '"Input Dims": [[64, 128], [128, 32]], "Input type": ["float", "float"]',
    '"Input Dims": [[], [64, 128], [128, 32]], "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16"],'
    ' "flops": 524288',
    '"Input Dims": [[8, 64, 128], [8, 128, 32]], "Concrete Inputs": ["", "", "15"], "flops": -1',
    '"Input Dims": "oops"',
]


_ANY_CHAR = st.characters(exclude_categories=("Cs",))


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


@st.composite
def events(draw: st.DrawFn) -> str:
    fields: list[tuple[str, str]] = []
    if draw(st.booleans()):
        fields.append(("ph", draw(st.sampled_from(['"X"', '"B"', '"i"', "null", "5"]))))
    if draw(st.integers(0, 9)):
        cat = draw(st.sampled_from(CATS))
        fields.append(
            ("cat", _q(cat) if draw(st.integers(0, 9)) else draw(st.sampled_from(["3", "null", "[1]"])))
        )
    if draw(st.integers(0, 9)):
        # any text too: quotes, backslashes, control and non-ASCII characters at every offset of the scanner's
        # 16- and 8-byte steps
        name = draw(st.one_of(st.sampled_from(NAMES), st.text(_ANY_CHAR, max_size=70)))
        fields.append(("name", _q(name) if draw(st.integers(0, 9)) else "7"))
    for key in ("pid", "tid"):
        if draw(st.integers(0, 5)):
            fields.append((key, draw(st.sampled_from(ID_TEXTS))))
    for key in ("ts", "dur"):
        if draw(st.integers(0, 5)):
            fields.append((key, draw(st.sampled_from(TIME_TEXTS))))
    if draw(st.integers(0, 4)):
        kind = draw(st.integers(0, 5))
        if kind == 0:
            fields.append(("args", draw(st.sampled_from(["null", "5", "[]", "{}"]))))
        else:
            items = [
                (k, draw(st.sampled_from(NUMBERS)))
                for k in draw(st.lists(st.sampled_from(ARG_KEYS), unique=True, max_size=8))
            ]
            items += [(k, draw(st.sampled_from(DIMS))) for k in ("grid", "block") if draw(st.booleans())]
            text = ", ".join(f"{_q(k)}: {v}" for k, v in items)
            if kind == 5:
                text = ", ".join(t for t in (text, draw(st.sampled_from(OP_ARGS))) if t)
            fields.append(("args", "{" + text + "}"))
    if draw(st.booleans()):
        fields.append(("id", '{"nested": [1, {"a": "b"}], "s": "}, {"}'))
    order = draw(st.permutations(fields)) if draw(st.integers(0, 3)) == 0 else fields
    sep = draw(st.sampled_from([", ", ",", ",\n    "]))
    return "{" + sep.join(f"{_q(k)}: {v}" for k, v in order) + "}"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events(), max_size=40), st.booleans())
def test_made_up_events_read_the_same_both_ways(evs: list[str], as_object: bool) -> None:
    array = "[\n  " + ",\n  ".join(evs) + "\n]"
    if as_object:
        doc = '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "numSms": 132}], "traceEvents": ' + array
        doc += ', "baseTimeNanoseconds": 1700000000000000000}'
        assert_same(doc.encode(), "object")
    else:
        assert_same(array.encode(), "list")


def test_plain_events_are_read_not_declined() -> None:
    """What Kineto writes (every field plain) is never left to the general way."""
    doc = (
        '[{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2,'
        ' "args": {"device": 0, "stream": 7, "correlation": 5, "grid": [1, 2, 3], "block": [128, 1, 1],'
        ' "shared memory": 0, "est. achieved occupancy %": 50}},'
        ' {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 1,'
        ' "args": {"correlation": 5, "cbid": 211}},'
        ' {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0.5, "dur": 3,'
        ' "args": {"External id": 9, "Input Dims": [[64, 128], [128, 32]], "Input type": ["float", "float"]}}]'
    )
    assert assert_same(doc.encode(), "list")


@pytest.mark.parametrize(
    "doc",
    [
        b'[{"ph": "X", "cat": "kernel", "ts": "12", "dur": 1}]',  # a time as a string
        b'[{"ph": "X", "cat": "kernel", "ts": 1e3, "dur": 1}]',  # exponent notation
        b'[{"c\\u0061t": "kernel", "ts": 1}]',  # a key with an escape
        b'[{"cat": "kernel", "cat": "cpu_op"}]',  # a repeated field
        b'[{"cat": "kernel", "args": {"device": 1, "device": 2}}]',  # a repeated args key
        b'[{"cat": "kernel", "pid": 18446744073709551616}]',  # an integer past 64 bits
        b'[{"cat": "kernel", "args": {"device": 9223372036854775808}}]',
        b'[1, {"cat": "kernel"}]',  # an event that is not an object
        b'[{"cat": "kernel",}]',  # not JSON
        b'[{"cat": "kernel", "name": "\xff"}]',  # not UTF-8
        b'[{"cat": "kernel", "name": "\\ud800"}]',  # a lone surrogate
        b'[{"cat": "kernel"}] x',  # text after the document
        b'[{"cat": "kernel", "ts": 1234567890123456789.5}]',  # more than 18 whole digits
    ],
)
def test_declines_what_it_is_not_sure_of(doc: bytes) -> None:
    assert native.scan_part(doc, "list") is None


def test_digits_that_int_refuses_are_no_ids() -> None:
    """A tid or name like "¹" (a Unicode digit ``int`` does not read) stopped the read with a ValueError (found
    by the made-up events): it is no id, both ways."""
    doc = (
        '[{"cat": "cuda_runtime", "name": "\u00b9", "tid": "\u00b2", "pid": "12",'
        ' "args": {"device": 0, "context": 0, "stream": 0, "correlation": 0}}]'
    )
    assert assert_same(doc.encode(), "list")
    part, _, _ = general(doc.encode(), "list")
    assert part.launches["tid"].to_list() == [None] and part.launches["pid"].to_list() == [12]


def test_records_stay_valid_while_later_scans_reuse_memory() -> None:
    """The scanner hands its record arrays out without a copy and reuses memory between scans (a pool): an
    array still referenced must never be handed to a later scan, and ``release`` must not free it either."""
    one, two = (_real_chunk(n) for n in (300, 500))
    kept = native._scan.scan(one, native._CAT_BYTES, native._KEYS, False)
    before = {k: bytes(kept[k]) for k in ("rec", "arg")}
    for _ in range(4):  # later scans, some of whose records go back to the pool at once
        native._scan.scan(two, native._CAT_BYTES, native._KEYS, False)
    native.release()
    native._scan.scan(two, native._CAT_BYTES, native._KEYS, False)
    assert {k: bytes(kept[k]) for k in ("rec", "arg")} == before
    assert memoryview(kept["rec"]).readonly
    fresh = native._scan.scan(one, native._CAT_BYTES, native._KEYS, False)
    assert {k: bytes(fresh[k]) for k in ("rec", "arg")} == before


def _real_chunk(n: int) -> bytes:
    """``n`` kernel / launch / op events in Kineto's form, as a middle chunk's ``[event, ...]``."""
    evs = []
    for i in range(n):
        evs.append(
            f'{{"ph": "X", "cat": "kernel", "name": "gemm_{i % 7}", "pid": 0, "tid": 7, "ts": {i}.5, "dur": 2,'
            f' "args": {{"device": 0, "stream": 7, "correlation": {i}, "grid": [{i}, 2, 3], "block": [128, 1, 1]}}}}'
        )
        evs.append(
            f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": {i},'
            f' "dur": 1, "args": {{"correlation": {i}, "cbid": 211}}}}'
        )
    return ("[" + ", ".join(evs) + "]").encode()


def test_object_without_events_is_declined() -> None:
    for doc in (
        b'{"deviceProperties": []}',
        b'{"traceEvents": null}',
        b'{"traceEvents": [], "traceEvents": []}',
    ):
        assert native.scan_part(doc, "object") is None


# -- end to end ------------------------------------------------------------------------------------------------------
_READ = """
import json, sys
from pathlib import Path
from tracekit.analyzers.readers.kineto import native
from tracekit.analyzers.readers.kineto.reader import read_kineto
native.MIN_BYTES = 0  # every chunk through the scanner (the reader leaves small ones to msgspec)
ex = read_kineto(Path(sys.argv[1]), workers=2, chunk_bytes=1 << 20)
for name, df in ex.frames.items():
    df.write_parquet(Path(sys.argv[2]) / f"{name}.parquet")
print(json.dumps(ex.warnings))
"""


def _read_in_process(path: Path, out: Path, *, scanner: bool) -> list[str]:
    out.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", _READ, str(path), str(out)],
        env=native.environ(scanner),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.mark.slow
def test_multi_chunk_import_is_the_same_with_and_without_the_scanner(
    shared_data: Path, tmp_path: Path
) -> None:
    """A 53 MB trace in 1 MB chunks: worker threads reading with the scanner, and decoding with msgspec (the
    scanner turned off), give the same frames and warnings."""
    src = shared_data / "thirdparty/hta/df_index_resolver__df_index_resolver.json.gz"
    with_scanner = _read_in_process(src, tmp_path / "scanner", scanner=True)
    without = _read_in_process(src, tmp_path / "general", scanner=False)
    assert with_scanner == without
    names = sorted(p.name for p in (tmp_path / "scanner").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "general").iterdir()) and "kernels.parquet" in names
    for name in names:
        a, b = pl.read_parquet(tmp_path / "scanner" / name), pl.read_parquet(tmp_path / "general" / name)
        frames_equal(a, b, name)
    assert pl.read_parquet(tmp_path / "scanner" / "kernels.parquet").height > 10_000


# -- damaged and mutated text ------------------------------------------------------------------------------------
def _guarded(doc: bytes) -> tuple[mmap.mmap, memoryview]:
    """``doc`` ending exactly where an unreadable page starts: a read past its end is a crash, not a quiet
    wrong byte."""
    page = mmap.PAGESIZE
    size = (len(doc) + page - 1) // page * page + page
    m = mmap.mmap(-1, size)
    start = size - page - len(doc)
    m[start : start + len(doc)] = doc
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    assert ctypes.CDLL(None).mprotect(ctypes.c_void_p(addr + size - page), page, 0) == 0
    return m, memoryview(m)[start : start + len(doc)]


_SPECIAL = [
    b'"',
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\x00",
    b"\xff",
    b"\xc3",
    b"\\u",
    b"1e5",
    b"-",
    b".",
    b" ",
    b"null",
    b'"cat"',
    b"\\ud800",
    b'"ts": "1"',
]
_BASE = (
    b'[{"ph": "X", "cat": "kernel", "name": "gemm\\u00e9", "pid": 0, "tid": "stream 7", "ts": 12.5, "dur": 3,'
    b' "args": {"device": 0, "correlation": 5, "grid": [1, 2, 3], "block": [128, 1, 1], "shared memory": 0}},'
    b' {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 11, "dur": 2,'
    b' "args": {"correlation": 5}},'
    b' {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.25, "dur": 5,'
    b' "args": {"External id": 9, "Input Dims": [[64, 128], [128, 32]], "Input type": ["float", "float"]}},'
    b' {"ph": "f", "cat": "ac2g", "id": 5, "ts": 11, "bp": "e"}]'
)


@pytest.mark.skipif(sys.platform != "linux", reason="the guard page is made with Linux's mprotect")
@settings(max_examples=1500, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(_BASE) - 1), st.integers(0, 2), st.sampled_from(_SPECIAL), st.integers(0, 255)
        ),
        max_size=4,
    ),
    st.integers(1, len(_BASE)),
    st.booleans(),
)
def test_damaged_text_never_crashes_and_never_disagrees(
    edits: list[tuple[int, int, bytes, int]], length: int, as_object: bool
) -> None:
    """Bytes deleted, inserted, replaced and the text cut short anywhere: the scanner reads no byte past the end,
    and a document it reads is one the general way reads the same (it may decline more than msgspec does)."""
    doc = bytearray(_BASE[:length])
    for at, how, special, byte in edits:
        at = min(at, max(len(doc) - 1, 0))
        if how == 0:
            doc[at : at + 1] = b""
        elif how == 1:
            doc[at:at] = special
        elif doc:
            doc[at] = byte
    text = bytes(doc) if not as_object else b'{"traceEvents": ' + bytes(doc) + b', "deviceProperties": [1]}'
    form: kdecode.Form = "object" if as_object else "list"
    keep, view = _guarded(text)
    got = native.scan_part(view, form)
    view.release()
    keep.close()
    if got is not None:
        assert assert_same(text, form)
