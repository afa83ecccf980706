"""JSON text of a Kineto trace (a whole file, or one chunk of its event array) -> typed events and metadata.

msgspec decodes into small typed structs that name only the fields tracekit uses (``_Event``); other fields, and
the ``args`` of events that are not kept, are skipped without building Python objects for them (``args`` stays
raw text until ``part.py`` decodes it for the events it keeps). The read of df_index_resolver (53 MB of JSON,
216k events) decodes in 0.23 s, where ``orjson.loads`` alone takes 0.93 s and the stdlib ``json.loads`` 1.35 s.

A document is one of two forms: ``"list"`` (``[event, ...]``: a chunk of the event array, or a trace written as a
bare list) or ``"object"`` (``{"traceEvents": [...], "deviceProperties": ..., ...}``). What does not decode:

* not strict JSON (``NaN``, ``Infinity``, integers past 64 bits): the stdlib parser reads it, and it is decoded
  again as strict JSON (those values null);
* bytes that are not UTF-8: decoded with U+FFFD in their place (``Notes.utf8``);
* an event that is not an object: skipped and counted (``Notes.dropped``);
* cut short or damaged: ``Undecodable``, saying whether more text after the end could mend it (a chunk cut in the
  wrong place) or not (``salvage`` then keeps the complete events before the damage).
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

Form = Literal["list", "object"]


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = msgspec.Raw(b"")  # the number's text, parsed exactly in part.times_ns
    dur: msgspec.Raw = msgspec.Raw(b"")
    args: msgspec.Raw = msgspec.Raw(b"")  # decoded only for the events that are kept


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None


class _LooseTrace(msgspec.Struct, gc=False):
    traceEvents: msgspec.Raw = msgspec.Raw(b"")
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None


_TRACE_DECODER = msgspec.json.Decoder(_Trace)
_LOOSE_DECODER = msgspec.json.Decoder(_LooseTrace)
_EVENTS_DECODER = msgspec.json.Decoder(list[_Event])
_ONE_EVENT_DECODER = msgspec.json.Decoder(_Event)
_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_SALVAGE_TRIES = 64
_CLOSINGS = (b"]}", b"]", b"]}]}")


@dataclass
class Meta:
    """The trace's own fields outside ``traceEvents``, as found (checked where they are used)."""

    device_properties: Any = None
    distributed_info: Any = None
    base_time_ns: Any = None

    def merged(self, other: Meta) -> Meta:
        """Fields of ``self`` (the text before the event array), else of ``other`` (the text after it)."""
        return Meta(
            self.device_properties if self.device_properties is not None else other.device_properties,
            self.distributed_info if self.distributed_info is not None else other.distributed_info,
            self.base_time_ns if self.base_time_ns is not None else other.base_time_ns,
        )


@dataclass
class Notes:
    """What decoding had to work around, for the reader's warnings."""

    utf8: bool = False
    dropped: int = 0
    """Events skipped because they are not JSON objects."""
    first_dropped: tuple[int, str] | None = None
    """The first of those: its index among the document's events and why."""


@dataclass
class Decoded:
    events: list[_Event] | None
    """None: an object without ``traceEvents``."""
    meta: Meta
    notes: Notes
    count: int
    """Events in the document, the skipped ones included."""


class Undecodable(Exception):
    """The document is not valid JSON. ``at_end``: it broke at its very end (cut short, or a chunk cut inside a
    string or a nested value), so the text that follows may mend it; ``damage_at``: the byte where it broke."""

    def __init__(self, at_end: bool, damage_at: int | None) -> None:
        super().__init__("undecodable JSON")
        self.at_end = at_end
        self.damage_at = damage_at


class NotATrace(Exception):
    """Valid JSON, but its ``traceEvents`` is not a list: the message says what msgspec found."""


def first_byte(text: bytes) -> bytes:
    """The first non-blank byte (without copying a multi-GB buffer, as ``lstrip`` would)."""
    m = _LEADING_BLANK.match(text)
    return text[m.end() : m.end() + 1] if m else b""


_LEADING_BLANK = re.compile(rb"[ \t\r\n]*")


def decode(doc: bytes | bytearray | memoryview, form: Form) -> Decoded:
    """Decode ``doc``; raises ``Undecodable`` when it is not JSON even for the stdlib, ``NotATrace`` when its
    ``traceEvents`` is no list."""
    try:
        return _strict(doc, form)
    except msgspec.ValidationError as exc:
        return _loose(doc, form, exc)
    except msgspec.DecodeError as exc:
        damage_at = _error_byte(exc)
        if "truncated" in str(exc) or (damage_at is not None and damage_at >= len(doc) - 2):
            raise Undecodable(True, damage_at) from None
    # Not strict JSON (NaN, huge integers), bytes that are not UTF-8, or damaged: ask the stdlib parser.
    if isinstance(doc, memoryview):
        doc = doc.tobytes()
    try:
        obj = json.loads(doc)
    except UnicodeDecodeError:  # before ValueError, its base class
        out = decode(doc.decode("utf-8", "replace").encode(), form)
        out.notes.utf8 = True
        return out
    except json.JSONDecodeError as exc:
        raise Undecodable(exc.pos >= len(doc) - 2, damage_at) from None
    except (ValueError, RecursionError):
        raise Undecodable(False, damage_at) from None
    strict = msgspec.json.encode(_finite(obj))  # NaN -> null, integers past 64 bits -> null
    try:
        return _strict(strict, form)
    except msgspec.ValidationError as exc:
        return _loose(strict, form, exc)


def _strict(doc: bytes | bytearray | memoryview, form: Form) -> Decoded:
    if form == "list":
        events = _EVENTS_DECODER.decode(doc)
        return Decoded(events, Meta(), Notes(), len(events))
    t = _TRACE_DECODER.decode(doc)
    meta = Meta(t.deviceProperties, t.distributedInfo, t.baseTimeNanoseconds)
    return Decoded(t.traceEvents, meta, Notes(), len(t.traceEvents or ()))


def _loose(doc: bytes | bytearray | memoryview, form: Form, exc: msgspec.ValidationError) -> Decoded:
    """Valid JSON with events that are not objects: keep every event that is one, count the others."""
    try:
        if form == "list":
            meta, raw_events = Meta(), _RAW_LIST_DECODER.decode(doc)
        else:
            t = _LOOSE_DECODER.decode(doc)
            meta = Meta(t.deviceProperties, t.distributedInfo, t.baseTimeNanoseconds)
            raw_events = _RAW_LIST_DECODER.decode(t.traceEvents) if t.traceEvents else None
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise NotATrace(str(exc)) from exc
    events: list[_Event] = []
    notes = Notes()
    for i, raw in enumerate(raw_events or ()):
        try:
            events.append(_ONE_EVENT_DECODER.decode(raw))
        except msgspec.ValidationError as e:
            notes.dropped += 1
            if notes.first_dropped is None:
                notes.first_dropped = (i, str(e).split(" - at ")[0])
    return Decoded(events if raw_events is not None else None, meta, notes, len(raw_events or ()))


def _finite(obj: Any) -> Any:
    """``obj`` with non-finite floats and integers outside 64 bits replaced by None (stdlib-parsed input only)."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if type(obj) is int and not -(1 << 63) <= obj < (1 << 64):
        return None
    return obj


def _error_byte(exc: Exception) -> int | None:
    """Where msgspec stopped reading (``... (byte 1234)``), if it says."""
    m = _AT_BYTE.search(str(exc))
    return int(m[1]) if m else None


_AT_BYTE = re.compile(r"\(byte (\d+)\)")


def salvage(
    doc: bytes | bytearray | memoryview, form: Form, damage_at: int | None = None
) -> tuple[list[_Event], Meta, int] | None:
    """The complete events of a document cut short or damaged: cut it after an event's closing brace and close
    the JSON. Returns (events, metadata, bytes of ``doc`` kept) or None if no event could be recovered.

    ``damage_at``: the byte where the decoder first failed. Each try starts before the point the last one failed
    at, so damage in the middle of a 50 MB text costs a few decodes, not one per event after it."""
    if isinstance(doc, memoryview):
        doc = doc.tobytes()
    end = len(doc) if damage_at is None else min(len(doc), damage_at)
    for _ in range(_SALVAGE_TRIES):
        cut = doc.rfind(b"}", 0, end)
        if cut < 0:
            return None
        end = cut
        for closing in _CLOSINGS:
            try:
                out = _strict(doc[: cut + 1] + closing, form)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                at = _error_byte(exc)
                if at is not None and at < cut:  # the candidate breaks before the cut: retry before that
                    end = min(end, at)
                continue
            if out.events:
                return out.events, out.meta, cut + 1
    return None


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the duration. Decoding builds millions of small objects (the
    ``grid`` / ``block`` lists of every kernel's args); each automatic collection walks every live object, so on
    a 1M-kernel trace (11M events) the collector took 35 of 56 s when the whole file was decoded at once.
    Nothing here makes reference cycles, so nothing waits for the collector."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
