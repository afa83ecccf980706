"""Typed records: the run manifest (run.json), the JSONL rows the collectors write, and Nsight Compute actions.

Each record is a msgspec Struct, decoded and encoded through msgspec, so a field of the wrong type is caught where
the file is read (one clear line, :class:`RecordError`), not three modules later. Files written by older or other
tracekit versions keep loading: unknown keys are ignored on decode (msgspec's default,
``forbid_unknown_fields=False``) and kept when the manifest is saved (:func:`encode_manifest` checks the plain data
through the record and writes that data, not the record), missing ones take their defaults.
Imports only the standard library and msgspec (a dependency of the core), never polars: the collectors, which run
in bare GPU environments, build their rows here.

- :class:`RunRecord` with :class:`Environment` (and its :class:`Gpu`), :class:`Capture` (and its
  :class:`CapturePass`, :class:`NcuCapture`, :class:`NsysCapture`, :class:`TorchCapture`), :class:`Source`, :class:`FramesInfo`, :class:`Event`, :class:`Bundle`: ``run.json``
  (tracekit/run.py). Frozen: code reads them from ``Run.record`` and changes the manifest through ``Run``'s
  methods, which keep the file's own layout (key order, nulls, unknown keys).
- :class:`Measurement`: one line of ``raw/measurements.jsonl`` (and ``raw/moe_curve.jsonl``), the columns of the
  ``measurements`` frame (tracekit/schema.py) but its id.
- :class:`Failure`: one line of ``raw/failures.jsonl``, the columns of the ``failures`` frame but its id.
- :class:`MoeRow`: one line of ``raw/moe.jsonl``, the columns of the ``moe`` frame but its id.
- :class:`NcuAction` (with :class:`NcuRule`): one profiled kernel as Nsight Compute's reader process hands it over
  (analyzers/readers/ncu/worker.py -> analyzers/readers/ncu/report.py).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

__all__ = [
    "ROWS",
    "Bundle",
    "Capture",
    "CapturePass",
    "Environment",
    "Event",
    "Failure",
    "FramesInfo",
    "Gpu",
    "Measurement",
    "MoeRow",
    "NcuAction",
    "NcuCapture",
    "NcuReaderOutput",
    "NcuRule",
    "NsysCapture",
    "RecordError",
    "RunRecord",
    "Source",
    "SourceRank",
    "TorchCapture",
    "check_manifest",
    "decode_json",
    "encode_manifest",
    "environment_of",
    "gpu_of",
    "jsonl_line",
    "record_for",
    "row",
]


class RecordError(ValueError):
    """A file's record does not fit its declared type; the message names the field (``$.environment.sm_count``)."""


# --- run.json ----------------------------------------------------------------------------------------------------
class Gpu(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The GPU a run was captured on. ``run.json`` holds it flat in ``environment`` (``gpu_name``, ...) or, in
    some runs, nested as ``environment.gpu``: :func:`gpu_of` reads either."""

    name: str | None = None
    compute_capability: str | None = None
    sm_count: int | None = None
    memory_bytes: int | None = None
    l2_bytes: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None


class Environment(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True):
    """The environment fingerprint (collectors/env.py): GPU, driver, CUDA, library versions, host."""

    gpu_name: str | None = None
    compute_capability: str | None = None
    sm_count: int | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None
    gpu: dict[str, Any] | str | None = None
    """The nested form of the GPU fields (``{"gpu_name": ...}``), where a run holds them so (:func:`gpu_of`)."""
    cuda_runtime: str | None = None
    cuda: str | None = None
    """The CUDA version where an environment recorded by hand or by another tool names it so (read when
    ``cuda_runtime`` is absent)."""
    cuda_available: bool | None = None
    device_count: int | None = None
    torch_error: str | None = None
    """Why ``import torch`` failed where the fingerprint was taken (``ModuleNotFoundError: ...``): the GPU fields
    are then None because torch could not be asked, not because there is no GPU. Absent when torch imported."""
    cuda_error: str | None = None
    """Why torch could not read the device (``torch.cuda`` raised) where it reported CUDA available. Absent
    otherwise."""
    driver: str | None = None
    max_sm_clock_hz: float | None = None
    default_power_limit_w: float | None = None
    nvml: str | None = None
    versions: dict[str, str | None] | None = None
    hostname: str | None = None
    platform: str | None = None
    python: str | None = None
    executable: str | None = None
    cuda_visible_devices: str | None = None
    fingerprint_error: str | None = None
    """What went wrong taking the fingerprint: a step that raised, or a worker that never answered (its
    fields then None)."""


class CapturePass(msgspec.Struct, kw_only=True, frozen=True):
    """One profiler pass of ``tracekit capture``: the command it ran and how it ended. Every field is written,
    null included, as the capture records a pass; ``ncu`` only for an ncu pass."""

    tool: str | None = None
    argv: list[str] | None = None
    exit_code: int | None = None
    wall_s: float | None = None
    timed_out: bool | None = None
    interrupted: bool | None = None
    signal: str | None = None  # what interrupted it: SIGINT (Ctrl-C), SIGTERM, SIGHUP
    files: list[str] | None = None
    status: str | None = None
    reason: str | None = None
    ncu: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    """An ncu pass: bound, kernels profiled, --ncu-budget (collectors/capture/budget.py); unset for the others."""
    role: str | msgspec.UnsetType = msgspec.UNSET
    """``plan``: a planning pass (nsys, run before an ncu pass without ``--nsys`` so that its timeline chooses
    the ncu pass's GEMM launches); unset for a pass that was asked for."""


class NcuCapture(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True):
    """The ncu pass a capture was asked for (``capture.ncu``, collectors/capture/driver.py): the ncu found, what
    it collects and which launches it profiles."""

    path: str | None = None
    version: str | None = None
    found_via: str | None = None
    clock_control: str | None = None
    sections: list[str] | None = None
    metrics: list[str] | None = None
    nvtx_include: str | None = None
    ranges: str | None = None
    max_per_range: int | None = None
    per_launch_config: int | None = None
    bound_mode: str | None = None
    kernels: str | None = None
    """--ncu-kernels: gemm (the GEMMs of the nsys or planning pass's timeline, each place once) or all."""
    launch_count: int | None = None
    budget_s: float | None = None
    extra: list[str] | None = None
    plan_pass: bool | None = None
    """Whether a planning pass may run before the ncu pass (False: ``--no-plan-pass``)."""


class NsysCapture(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True):
    """The nsys pass a capture ran (``capture.nsys``): the nsys found and its options."""

    path: str | None = None
    version: str | None = None
    found_via: str | None = None
    trace: str | None = None
    cuda_graph_trace: str | None = None
    libs: str | None = None
    extra: list[str] | None = None
    crash_flush: str | None = None
    role: str | None = None
    """``plan``: not asked for, the planning pass of an ncu pass (its timeline chose the GEMMs ncu profiled)."""


class TorchCapture(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True):
    """The PyTorch-profiler pass a capture was asked for (``capture.torch_profiler``)."""

    python: str | None = None
    activities: list[str] | None = None
    cpu_events: str | None = None
    trace_repeats: int | str | None = None
    """Repeats traced per measurement, or ``all``."""


class Capture(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True):
    """How the run was made: the capture's tools and passes, or the files an import read. Settings of the tool
    that made it (a benchmark's shapes, ncu's sections) ride along as their own keys."""

    tools: list[str] | None = None
    instrument: bool | None = None
    timeout_s: float | None = None
    cwd: str | None = None
    ncu: NcuCapture | None = None
    nsys: NsysCapture | None = None
    torch_profiler: TorchCapture | None = None
    passes: list[CapturePass] | None = None
    imported_from: list[str] | None = None
    ranks: dict[str, Any] | None = None
    shapes_from: dict[str, Any] | None = None
    """``bench gemm --shapes-from RUN``: the plan and the source run's link (tracekit.analyzers.recommend.Plan)."""


class SourceRank(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True):
    """A rank a raw file holds, with the process and device behind it where the file tells."""

    rank: int | None = None
    pid: int | None = None
    device: int | None = None


class Source(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True):
    """One raw file of the run: where it is, its hash, the kind read from its content and how its import went."""

    path: str
    bytes: int | None = None
    sha256: str | None = None
    kind: str | None = None
    status: str | None = None
    message: str | None = None
    warnings: list[str] | None = None
    tool: str | None = None
    rank_source: str | None = None
    ranks: list[SourceRank] | None = None


class FramesInfo(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True):
    """The frames the run holds: their schema version, when they were built, rows per frame, which are
    partitioned (and by which key), and whether they were rebuilt in memory only (a read of a stale run)."""

    schema_version: int | None = None
    built_unix: float | None = None
    rows: dict[str, int] | None = None
    partitioned: dict[str, str] | None = None
    in_memory: bool | None = None


class Event(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True):
    """One timestamped step of a capture (``Run.log``), so an interrupted capture says how far it got."""

    time_unix: float | None = None
    phase: str | None = None
    message: str | None = None
    level: str | None = None


class Bundle(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True):
    """Where a run came from as a bundle (tracekit/bundle.py): the run it was packed from and whether its raw
    files came along (written into the bundle's run.json); the zip it was opened from (in memory only)."""

    from_: str | None = msgspec.field(default=None, name="from")
    raw: bool | None = None
    opened_from: str | None = None


class RunRecord(msgspec.Struct, kw_only=True, frozen=True):
    """``run.json``: the run's manifest. The fields ``Run.create`` writes are always present; ``partial``,
    ``import_warnings`` and ``bundle`` only once an import or a bundle set them."""

    format: str
    schema_version: int
    tracekit_version: str | None = None
    created_unix: float | None = None
    created: str | None = None
    command: list[str] | None = None
    status: str = "complete"
    incomplete_reason: str | None = None
    environment: Environment = msgspec.field(default_factory=Environment)
    capture: Capture = msgspec.field(default_factory=Capture)
    sources: list[Source] = msgspec.field(default_factory=list)
    frames: FramesInfo | None = None
    events: list[Event] = msgspec.field(default_factory=list)
    partial: bool | msgspec.UnsetType = msgspec.UNSET
    import_warnings: list[str] | msgspec.UnsetType = msgspec.UNSET
    bundle: Bundle | msgspec.UnsetType = msgspec.UNSET


def gpu_of(environment: Environment | dict[str, Any] | None) -> Gpu:
    """The run's GPU from its environment, flat (``gpu_name``, ``sm_count`` ... as the fingerprint writes them)
    or nested (``environment.gpu``, with ``gpu_name`` or ``name``): the one place that knows both layouts."""
    if isinstance(environment, Environment):
        environment = msgspec.to_builtins(environment)
    if not isinstance(environment, dict):
        return Gpu()
    nested = environment.get("gpu")
    src: dict[str, Any] = nested if isinstance(nested, dict) else environment
    try:
        return msgspec.convert(
            {
                "name": src.get("gpu_name") or src.get("name"),
                "compute_capability": src.get("compute_capability"),
                "sm_count": src.get("sm_count"),
                "memory_bytes": src.get("memory_bytes"),
                "l2_bytes": src.get("l2_bytes"),
                "uuid": src.get("gpu_uuid") or src.get("uuid"),
                "pci_bus_id": src.get("pci_bus_id"),
            },
            Gpu,
            strict=False,
        )
    except msgspec.ValidationError:  # a viewer carries on with what it can name
        name = src.get("gpu_name") or src.get("name")
        return Gpu(name=name if isinstance(name, str) else None)


def _validation_error(what: str, exc: msgspec.MsgspecError) -> RecordError:
    return RecordError(f"{what}: {exc}")


def decode_json(data: bytes | str) -> Any:
    """JSON text (UTF-8) as plain data; :class:`RecordError` (``not valid JSON (...)``, with the standard
    library's words for where) when it is not."""
    try:
        return json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordError(f"not valid JSON ({exc})") from exc


def check_manifest(manifest: dict[str, Any]) -> RunRecord:
    """The typed record of a manifest read as plain data (every key kept there; unknown ones ignored here).
    Raises :class:`RecordError` naming the first field of the wrong type."""
    plain = msgspec.to_builtins(manifest, enc_hook=str)  # paths and the like as text, as they are written
    try:
        return msgspec.convert(plain, RunRecord, strict=False)
    except msgspec.ValidationError as exc:
        raise _validation_error("a field has the wrong type", exc) from exc


def environment_of(fingerprint: dict[str, Any]) -> Environment:
    """The typed record of an environment fingerprint as collectors/env.py hands it over (before it is in a
    run.json), so its reader uses the same fields as one reading ``Run.record.environment``. Raises
    :class:`RecordError` naming a field of the wrong type."""
    try:
        return msgspec.convert(msgspec.to_builtins(fingerprint, enc_hook=str), Environment, strict=False)
    except msgspec.ValidationError as exc:
        raise _validation_error("a field of the environment has the wrong type", exc) from exc


def encode_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest as it is written: checked through :class:`RunRecord` (every key kept, also those this
    tracekit does not know), as plain JSON data (paths and the like as text). Raises :class:`RecordError` on a
    field of the wrong type."""
    plain = msgspec.to_builtins(manifest, enc_hook=str)
    check_manifest(plain)
    return plain


# --- JSONL rows --------------------------------------------------------------------------------------------------
class Measurement(msgspec.Struct, kw_only=True):
    """One GEMM timed by tracekit's benchmark (``raw/measurements.jsonl``); the columns of the ``measurements``
    frame but ``measurement_id``, in order (tests/core/test_records.py keeps the two in step)."""

    range: str | None = None
    backend: str | None = None
    op: str | None = None
    m: int | None = None
    n: int | None = None
    k: int | None = None
    dtype: str | None = None
    dtype_out: str | None = None
    scale: str | None = None
    time_us: float | None = None
    time_us_p10: float | None = None
    time_us_p90: float | None = None
    repeats: int | None = None
    tflops: float | None = None
    aux_time_us: float | None = None
    rel_error: float | None = None
    status: str | None = None
    sm_clock_hz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    throttle_reasons: int | None = None
    timing: str | None = None


class Failure(msgspec.Struct, kw_only=True):
    """One backend x shape (or program) that failed (``raw/failures.jsonl``); the columns of the ``failures``
    frame but ``failure_id``, in order. ``versions`` is an object of package -> version (older rows: its JSON
    text, still read)."""

    backend: str | None = None
    op: str | None = None
    m: int | None = None
    n: int | None = None
    k: int | None = None
    kind: str | None = None
    error_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    device_name: str | None = None
    compute_capability: str | None = None
    versions: dict[str, str | None] | str | None = None
    time_unix: float | None = None
    dtype_a: str | None = None
    dtype_b: str | None = None
    dtype_out: str | None = None
    range: str | None = None
    caller: str | None = None
    signal: str | None = None
    python_stack: str | None = None
    stderr_tail: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.versions, str):  # JSON text (what older collectors wrote) -> the object
            try:
                found = json.loads(self.versions)
            except ValueError:
                found = None
            self.versions = (
                {str(k): None if v is None else str(v) for k, v in found.items()}
                if isinstance(found, dict)
                else None
            )


class MoeRow(msgspec.Struct, kw_only=True):
    """One grouped (MoE) launch timed by ``tracekit bench moe`` (``raw/moe.jsonl``); the columns of the ``moe``
    frame but ``moe_id``, in order, with the per-expert ``counts`` and ``expert_time_us`` as lists."""

    range: str | None = None
    backend: str | None = None
    op: str | None = None
    proj: str | None = None
    route: str | None = None
    tokens: int | None = None
    topk: int | None = None
    experts: int | None = None
    active: int | None = None
    rows: int | None = None
    n: int | None = None
    k: int | None = None
    inter: int | None = None
    dtype: str | None = None
    dtype_b: str | None = None
    dtype_out: str | None = None
    scale: str | None = None
    time_us: float | None = None
    time_us_p10: float | None = None
    time_us_p90: float | None = None
    repeats: int | None = None
    tflops: float | None = None
    rel_error: float | None = None
    status: str | None = None
    sm_clock_hz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    throttle_reasons: int | None = None
    timing: str | None = None
    counts: list[int] | None = None
    expert_time_us: list[float | None] | None = None
    expert_time_source: str | None = None
    tile_m: int | None = None
    tile_n: int | None = None
    tile_source: str | None = None


ROWS: dict[str, type[Measurement] | type[Failure] | type[MoeRow]] = {
    "measurements": Measurement,
    "failures": Failure,
    "moe": MoeRow,
    "moe_curve": Measurement,
}
"""The record of each frame that the collectors write as JSONL rows, by frame name."""


def record_for(keys: tuple[str, ...]) -> type[Measurement] | type[Failure] | type[MoeRow] | None:
    """The row record whose fields are exactly ``keys`` (in order), None when there is none."""
    return next((r for r in ROWS.values() if tuple(r.__struct_fields__) == tuple(keys)), None)


def row(record: Measurement | Failure | MoeRow) -> dict[str, Any]:
    """A row record as the plain dict a JSONL line holds (keys in the frame's column order)."""
    return msgspec.to_builtins(record)


def jsonl_line(
    record: type[Measurement] | type[Failure] | type[MoeRow] | None, values: dict[str, Any]
) -> str:
    """One JSONL line of ``record``'s kind from ``values`` (keys it does not declare are dropped, missing ones
    null, numbers given as text converted): how the collectors write ``raw/measurements.jsonl``,
    ``raw/failures.jsonl`` and ``raw/moe.jsonl``. With ``record`` None the values are written as they are. NaN
    and infinities are written as null; values JSON has no type for, as text. Raises :class:`RecordError` on a
    value of the wrong type."""
    plain = msgspec.to_builtins(values, enc_hook=str)
    if record is None:
        return msgspec.json.encode(plain).decode("utf-8") + "\n"
    try:
        typed = msgspec.convert(plain, record, strict=False)
    except msgspec.ValidationError as exc:
        raise _validation_error(f"a {record.__name__} row has a field of the wrong type", exc) from exc
    return msgspec.json.encode(typed).decode("utf-8") + "\n"


# --- Nsight Compute actions -----------------------------------------------------------------------------------
class NcuRule(msgspec.Struct, kw_only=True):
    """One of Nsight Compute's guided-analysis findings on a kernel."""

    rule: str | None = None
    name: str | None = None
    section: str | None = None
    kind: str | None = None
    title: str | None = None
    message: str | None = None
    speedup_pct: float | None = None
    speedup_type: str | None = None


class NcuAction(msgspec.Struct, kw_only=True):
    """One profiled kernel as the reader process hands it over: its report range and index, names, NVTX stack
    (``[domain, [range names, outermost first]]`` per domain), metrics (``[name, tag, value, unit]``, tag ``f``
    float, ``i`` integer, ``s`` string, null unknown) and rules."""

    range: int | None = None
    action: int | None = None
    name: str | None = None
    """None in a damaged report (the kernel is then refused for its missing metrics, not for its name)."""
    demangled: str | None = None
    nvtx: list[tuple[str | None, list[str]]] = msgspec.field(default_factory=list)
    metrics: list[tuple[str, str | None, Any, str | None]] = msgspec.field(default_factory=list)
    rules: list[NcuRule] = msgspec.field(default_factory=list)


class NcuReaderOutput(msgspec.Struct, kw_only=True):
    """What the reader process writes: the actions, or the error that stopped it."""

    actions: list[NcuAction] = msgspec.field(default_factory=list)
    error: str | None = None
    missing_reader: bool = False
    """The error is that ``ncu_report`` could not be imported (nothing is wrong with the file)."""
