"""Runs on disk, for the picker and for what ``tracekit view [RUN]`` opens: run folders found under a few
folders (newest first), the bundled samples, and the first screen's target. Reads only run manifests (and, for a
run that names no GPU, its small devices frame); imports no Textual."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.analyzers.store import read_frame
from tracekit.errors import RunNotFoundError, TracekitError
from tracekit.records import gpu_of
from tracekit.run import MANIFEST, Run

__all__ = [
    "DEFAULT_SAMPLE",
    "RunEntry",
    "default_run_dirs",
    "default_sample",
    "find_runs",
    "first_target",
    "newest_sample",
    "packaged_sample",
    "samples_dir",
]


# --- runs on disk ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunEntry:
    """A run folder found on disk, for the picker."""

    path: Path
    name: str
    created: str | None
    created_unix: float
    status: str
    where: str  # the folder it was found in (runs, samples, ...)
    gpu: str | None = None


def samples_dir() -> Path:
    """The repository's samples/ (shipped runs), beside the tracekit package."""
    import tracekit

    return Path(tracekit.__file__).resolve().parents[1] / "samples"


def default_run_dirs() -> list[Path]:
    """Where the picker looks when no run is given: ./runs, then the bundled samples."""
    return [Path("runs"), samples_dir()]


def _entry(path: Path, where: str) -> RunEntry | None:
    """The picker's line for the run at ``path``, read through :class:`Run` (None when it is no run it can open)."""
    try:
        run = Run.open(path)
    except TracekitError:  # not a run, damaged or newer than this tracekit: opening it would say why
        return None
    record = run.record
    return RunEntry(
        path=path,
        name=path.name,
        created=record.created,
        created_unix=float(record.created_unix) if record.created_unix is not None else 0.0,
        status=record.status + (" (partial)" if record.partial else ""),
        where=where,
        gpu=gpu_of(record.environment).name or _frame_gpu(run),
    )


def _frame_gpu(run: Run) -> str | None:
    """The GPU an imported run's files name (its devices frame, a few KB), when run.json records none."""
    if run.frame_layout("devices") is None:
        return None
    try:
        frame = read_frame(run, "devices", lazy=True).select("name").collect()
    except Exception:  # a damaged frame: the picker shows "–", opening the run says what is wrong
        return None
    names = frame["name"].drop_nulls().unique(maintain_order=True)
    return " + ".join(str(n) for n in names.to_list()) or None


def find_runs(dirs: list[Path]) -> list[RunEntry]:
    """Run folders directly inside (or two levels inside) ``dirs``, newest first; a dir that is itself a run
    counts as one."""
    found: dict[Path, RunEntry] = {}
    for d in dirs:
        if not d.is_dir():
            continue
        candidates = [d] if (d / MANIFEST).is_file() else []
        if not candidates:
            for child in sorted(d.iterdir()):
                if (child / MANIFEST).is_file():
                    candidates.append(child)
                elif child.is_dir():
                    candidates.extend(g for g in sorted(child.iterdir()) if (g / MANIFEST).is_file())
        for c in candidates:
            e = _entry(c, d.name or str(d))
            if e is not None:
                found.setdefault(c.resolve(), e)
    return sorted(found.values(), key=lambda e: (-e.created_unix, e.name))


DEFAULT_SAMPLE = "h200-gemm-probe"
"""The sample ``tracekit view`` opens when given nothing and ./runs holds no run: the H200 probe (bf16 and fp8
GEMMs under nsys and ncu; the README's first example)."""


def packaged_sample() -> Path:
    """The default sample as a bundle inside the package (tracekit/data), for installs without samples/;
    tests/tui/test_tui_samples.py checks that it holds the committed sample's manifest and frames."""
    import tracekit

    return Path(tracekit.__file__).resolve().parent / "data" / f"{DEFAULT_SAMPLE}.zip"


def newest_sample() -> Path | None:
    runs = find_runs([samples_dir()])
    return runs[0].path if runs else None


def default_sample() -> Path | None:
    """What ``tracekit view`` opens with no argument and no runs: samples/h200-gemm-probe in a checkout, else
    the same run bundled in the package, else the newest run under samples/."""
    folder = samples_dir() / DEFAULT_SAMPLE
    if (folder / MANIFEST).is_file():
        return folder
    bundled = packaged_sample()
    if bundled.is_file():
        return bundled
    return newest_sample()


def first_target(run: Path | None, compare: Path | None = None) -> tuple[str, Any]:
    """What ``tracekit view [RUN]`` opens: ``("run", path)`` or ``("picker", [dirs])``. A run folder or bundle
    opens its overview; a folder of runs the picker over it (a folder holding none raises RunNotFoundError, the
    one-line error of ``explain``, rather than opening an empty picker); no RUN the picker over ./runs and the samples when
    ./runs holds runs, else the bundled sample (:func:`default_sample`; the picker when there is none)."""
    if compare is not None and not compare.exists():
        raise RunNotFoundError(f"{compare} does not exist", "give --compare a run folder or bundle")
    if run is not None:
        if not run.exists():
            raise RunNotFoundError(
                f"{run} does not exist", "give a run folder, a bundle, or a folder of runs"
            )
        if (run / MANIFEST).is_file() or (run.is_file() and run.suffix == ".zip"):
            return "run", run
        if run.is_dir():
            if not find_runs([run]):
                Run.open(run)  # a folder holding no run: the error explain and show give for it
            return "picker", [run]
        raise RunNotFoundError(
            f"{run} is a file, not a run", f"make a run from it first: `tracekit import {run} -o runs/NAME`"
        )
    if find_runs([Path("runs")]):
        return "picker", default_run_dirs()
    sample = default_sample()
    if sample is not None:
        return "run", sample
    return "picker", default_run_dirs()
