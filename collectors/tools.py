"""Finding Nsight Compute (``ncu``) and Nsight Systems (``nsys``), and the exact command lines tracekit runs.

Discovery order for each tool: an explicit path, the environment (``TRACEKIT_NCU`` / ``TRACEKIT_NSYS``), ``PATH``,
``/usr/local/cuda/bin``, ``/opt/nvidia/nsight-compute/<version>/`` (newest first), then for nsys the copy inside
Nsight Compute (``/opt/nvidia/nsight-compute/<version>/host/target-linux-x64/nsys``) and
``/opt/nvidia/nsight-systems/<version>/bin``. A missing tool raises ``MissingToolError`` (exit 3) that says what
was searched and how to fix it.

The nsys copy shipped inside Nsight Compute cannot turn its ``.qdstrm`` into a report: its ``QdstrmImporter``
needs ``libdw.so.1``/``libelf.so.1`` (DEVICE.md). ``check_nsys_importer`` detects that before a capture starts;
``TRACEKIT_NSYS_LIBS=DIR`` names a folder holding the two libraries (libdw.so.1, libelf.so.1) which the
capture prepends to ``LD_LIBRARY_PATH`` for nsys.

The command builders are pure functions, so tests pin the exact lists. This module imports only the standard
library and tracekit core (it runs on bare GPU machines).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracekit.errors import BadInputError, MissingToolError
from tracekit.installs import versioned_dirs
from tracekit.naming import NCU_FILTER

DEFAULT_SECTIONS: tuple[str, ...] = (
    "SpeedOfLight",
    "Occupancy",
    "LaunchStats",
    "ComputeWorkloadAnalysis",
    "MemoryWorkloadAnalysis",
    "WarpStateStats",
)
"""The sections the explainer reads (about 20 replay passes a kernel on an H200, vs 38 for ``--set full``)."""

TENSOR_OPS_METRIC = r"regex:^sm__ops_path_tensor_src_((fp|bf|tf|int)[0-9]+_?)+(dst_(fp|bf)[0-9]+)?\.sum$"
"""Every tensor-pipe math counter of the GPU at hand, by source type, as one ncu regex: names differ per chip
(``src_fp8`` on Hopper, ``src_fp8_dst_fp32`` and ``src_fp4_fp6_dst_fp32`` on SM120, ``src_fp4_fp6_fp8_dst_fp32`` on
SM100; ../shared/data/ncu-metrics), so no fixed list fits all, and an unknown name makes ncu refuse to profile. The
``_sparsity_on/off`` and ``_realtime`` variants (subsets and duplicates) are left out. Measured on the H200: each
counts FLOPs (a multiply-add is 2), exactly 2*M*N*K for cuBLAS bf16 / fp8 / tf32 GEMMs whose shape fits the tiles,
more with tile padding (samples/h200-counter-probe, docs/NOTES.md)."""

SIMT_FLOP_METRICS: tuple[str, ...] = (
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
)
"""FP32 math outside the tensor pipe (SIMT GEMMs): FLOPs = 2 x FFMA + FADD + FMUL thread instructions; an
sgemm's FFMA count is M*N*K (H200, samples/h200-counter-probe). Present on every chip since Volta."""

DEFAULT_METRICS: tuple[str, ...] = (
    "gpc__cycles_elapsed.avg.per_second",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    TENSOR_OPS_METRIC,
    *SIMT_FLOP_METRICS,
)
"""Metrics added to the sections: the clock a kernel ran at (in SpeedOfLight too, listed so it is never lost),
DRAM bytes moved (the sections give only a rate), and the math a kernel executed (tensor-pipe FLOPs by source
type, SIMT FP32 instructions), from which the analysis takes a kernel's FLOPs and dtype when no shape is known.
The tensor-pipe utilisation metric is architecture-specific (``sm__pipe_tensor_op_hmma_cycles_active`` on Hopper)
and already comes with ComputeWorkloadAnalysis. Cost on the H200 (benchmarks/foreign/ncu_counter_cost.sh, 22 GEMM
kernels): 27 replay passes a kernel instead of 20, the capture 20.6 s instead of 18.1 s; ``--set full`` 54.1 s. On
the GEMM sweep of benchmarks/bench_capture_overhead.py: 12.7 s against 147.2 s for ``ncu --set full`` (1/11.6)."""

CLOCK_CONTROLS = ("none", "base")
"""``none``: the clocks the user's run sees (tracekit's default); ``base``: ncu's default, locked to base clock."""

ENV_NCU = "TRACEKIT_NCU"
ENV_NSYS = "TRACEKIT_NSYS"
ENV_NSYS_LIBS = "TRACEKIT_NSYS_LIBS"
ENV_MAX_PER_RANGE = "TRACEKIT_NCU_MAX_PER_RANGE"
"""Environment variable the range code reads under ncu: profile at most this many launches per range name."""
DEFAULT_MAX_PER_RANGE = 2
"""N of ``--max-per-range``: the launches of each launch configuration an ncu pass profiles inside the selected
ranges (tracekit's own: per range name; ``--ranges`` / ``--all-kernels``: per grid, block and shared memory)."""
FILTER_PER_CONFIG = "per-launch-config"
"""Nsight Compute's ``--filter-mode`` under which ``--launch-count N`` counts each launch configuration (grid,
block, shared memory) apart. Measured on the H200 with ``--nvtx --nvtx-include``: a serving step's ncu pass
profiled 12 kernels, 2 of each of 6 configurations, in 32 s, where the unbounded pass had not finished in 200 s."""

NSYS_TRACE = "cuda,nvtx"
NSYS_GRAPH_TRACE = "node"
"""nsys ``--cuda-graph-trace``: ``node`` records every kernel a CUDA-graph replay runs. nsys's default, ``graph``,
records a replay as one graph row and no kernels, so a GEMM launched from a graph (a serving engine's decode step)
would have no kernel in its range."""

_FIX_NCU = (
    "install Nsight Compute (it ships with the CUDA toolkit: /usr/local/cuda/bin/ncu), put it on PATH, "
    "or give --ncu-path PATH / export TRACEKIT_NCU=PATH"
)
_FIX_NSYS = (
    "install Nsight Systems, put nsys on PATH, or give --nsys-path PATH / export TRACEKIT_NSYS=PATH "
    "(Nsight Compute ships a copy at /opt/nvidia/nsight-compute/<version>/host/target-linux-x64/nsys)"
)
_FIX_LIBDW = (
    "install elfutils' libdw1 and libelf1 (apt-get install libdw1 libelf1); without a package manager, fetch them "
    "where one works (apt-get download libdw1 libelf1; dpkg-deb -x each .deb into DIR), copy libdw.so.1 and "
    "libelf.so.1 to this machine and export TRACEKIT_NSYS_LIBS=DIR (or add DIR to LD_LIBRARY_PATH)"
)


@dataclass(frozen=True)
class Tool:
    """A found tool: its name, absolute path, version string (``None`` if it printed none) and where it was found."""

    name: str
    path: Path
    version: str | None
    found_via: str

    def as_dict(self) -> dict[str, str | None]:
        return {"path": str(self.path), "version": self.version, "found_via": self.found_via}


# --- discovery --------------------------------------------------------------------------------------------------
def _is_exe(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def candidate_paths(name: str, *, env: Mapping[str, str], root: Path = Path("/")) -> list[tuple[Path, str]]:
    """Every place ``name`` (``ncu`` or ``nsys``) is looked for after the explicit option and the environment
    variable, in order, each with a label saying where it came from."""
    out: list[tuple[Path, str]] = []
    for entry in env.get("PATH", "").split(os.pathsep):
        if entry:
            out.append((Path(entry) / name, "PATH"))
    out.append((root / "usr/local/cuda/bin" / name, "/usr/local/cuda/bin"))
    ncu_dirs = versioned_dirs(root / "opt/nvidia/nsight-compute")
    if name == "ncu":
        out.extend((d / "ncu", "/opt/nvidia/nsight-compute") for d in ncu_dirs)
    else:
        out.extend((d / "host/target-linux-x64/nsys", "Nsight Compute's copy of nsys") for d in ncu_dirs)
        out.extend(
            (d / "bin/nsys", "/opt/nvidia/nsight-systems")
            for d in versioned_dirs(root / "opt/nvidia/nsight-systems")
        )
    return out


def parse_version(text: str) -> str | None:
    """The version in ``ncu --version`` / ``nsys --version`` output (``2025.3.1.0``), or ``None``."""
    match = re.search(r"[Vv]ersion\s+(\d{4}\.\d+(?:\.\d+)*)", text) or re.search(
        r"\b(\d{4}\.\d+(?:\.\d+)+)", text
    )
    return match.group(1) if match else None


def tool_version(path: Path, *, env: Mapping[str, str] | None = None, timeout: float = 30.0) -> str | None:
    """Run ``PATH --version`` and parse the version; ``None`` if it printed none. A tool that cannot run at all
    raises ``MissingToolError`` with its output."""
    try:
        proc = subprocess.run(
            [str(path), "--version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MissingToolError(
            f"{path} could not be run ({type(exc).__name__}: {exc})", "check the file is a working executable"
        ) from exc
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 and "error while loading shared libraries" in text:
        raise MissingToolError(f"{path} does not start: {text.strip().splitlines()[-1]}", _FIX_LIBDW)
    return parse_version(text)


def find_tool(
    name: str,
    explicit: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    root: Path = Path("/"),
) -> Tool:
    """Find ``ncu`` or ``nsys`` and read its version. ``explicit`` and the environment variable are taken as given
    (a wrong one is an error, not a reason to look elsewhere); ``root`` re-bases the fixed folders (for tests)."""
    if name not in ("ncu", "nsys"):
        raise ValueError(f"unknown tool {name!r}")
    env = os.environ if env is None else env
    var = ENV_NCU if name == "ncu" else ENV_NSYS
    fix = _FIX_NCU if name == "ncu" else _FIX_NSYS
    given: list[tuple[str, str]] = []
    if explicit:
        given.append((str(explicit), f"--{name}-path"))
    elif env.get(var):
        given.append((env[var], f"${var}"))
    for text, via in given:
        path = Path(text).expanduser()
        if path.is_dir():
            path = path / name
        if not path.is_absolute() and not path.exists():
            which = shutil.which(text, path=env.get("PATH", ""))
            path = Path(which) if which else path
        if not _is_exe(path):
            raise MissingToolError(f"{via} names {text}, which is not an executable {name}", fix)
        path = path.absolute()
        return Tool(name, path, tool_version(path, env=env), via)
    tried = candidate_paths(name, env=env, root=root)
    for path, via in tried:
        if _is_exe(path):
            path = path.absolute()
            return Tool(name, path, tool_version(path, env=env), via)
    places = [f"${var}", "PATH", "/usr/local/cuda/bin", "/opt/nvidia/nsight-compute/*/"]
    if name == "nsys":
        places[-1] = "/opt/nvidia/nsight-compute/*/host/target-linux-x64"
        places.append("/opt/nvidia/nsight-systems/*/bin")
    raise MissingToolError(f"{name} not found (looked in {', '.join(places)})", fix)


def find_ncu(
    explicit: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    root: Path = Path("/"),
) -> Tool:
    return find_tool("ncu", explicit, env=env, root=root)


def find_nsys(
    explicit: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    root: Path = Path("/"),
) -> Tool:
    return find_tool("nsys", explicit, env=env, root=root)


# --- the nsys importer (libdw) ----------------------------------------------------------------------------------
def nsys_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment to run nsys in: ``TRACEKIT_NSYS_LIBS`` (if set) first on ``LD_LIBRARY_PATH``."""
    out = dict(os.environ if env is None else env)
    libs = out.get(ENV_NSYS_LIBS)
    if libs:
        old = out.get("LD_LIBRARY_PATH")
        out["LD_LIBRARY_PATH"] = str(Path(libs).expanduser().absolute()) + (f":{old}" if old else "")
    return out


def find_qdstrm_importer(nsys: Path) -> Path | None:
    """The ``QdstrmImporter`` that turns nsys's raw stream into a report: beside nsys, or in the install's
    ``host-linux-x64`` folder. ``None`` if there is none to check."""
    real = Path(os.path.realpath(nsys)).parent
    for folder in (real, real.parent / "host-linux-x64", real.parent.parent / "host-linux-x64"):
        cand = folder / "QdstrmImporter"
        if _is_exe(cand):
            return cand
    return None


def check_nsys_importer(
    nsys: Path, *, env: Mapping[str, str] | None = None, timeout: float = 30.0
) -> str | None:
    """Start nsys's ``QdstrmImporter`` once (``--help``) in the environment nsys will get; return ``None`` if it
    loads (or there is none to check), else the loader's complaint, e.g. ``libdw.so.1: cannot open shared object
    file``. This is the Nsight Compute copy's known flaw: without the library only a .qdstrm is written."""
    importer = find_qdstrm_importer(nsys)
    if importer is None:
        return None
    try:
        proc = subprocess.run(
            [str(importer), "--help"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=nsys_env(env),
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    except OSError as exc:
        return f"{importer} cannot be run ({exc})"
    text = proc.stdout + proc.stderr
    match = re.search(r"error while loading shared libraries: (.*)", text)
    if match:
        return f"{importer}: {match.group(1).strip()}"
    return None


def require_nsys_importer(nsys: Tool, *, env: Mapping[str, str] | None = None) -> None:
    """Raise ``MissingToolError`` (exit 3) if nsys could only write a .qdstrm on this machine."""
    problem = check_nsys_importer(nsys.path, env=env)
    if problem:
        raise MissingToolError(
            f"nsys at {nsys.path} cannot build reports here ({problem}); it would leave only a .qdstrm",
            _FIX_LIBDW,
        )


LIBDW_FIX = _FIX_LIBDW


# --- command lines ----------------------------------------------------------------------------------------------
def max_per_range(env: Mapping[str, str] | None = None) -> int:
    """``TRACEKIT_NCU_MAX_PER_RANGE`` (default 2): launches the range code lets ncu profile per range name."""
    env = os.environ if env is None else env
    text = env.get(ENV_MAX_PER_RANGE, "").strip()
    if not text:
        return DEFAULT_MAX_PER_RANGE
    try:
        value = int(text)
    except ValueError:
        raise BadInputError(
            f"{ENV_MAX_PER_RANGE}={text!r} is not a whole number", "set it to a count such as 2, or unset it"
        ) from None
    if value < 1:
        raise BadInputError(f"{ENV_MAX_PER_RANGE}={value} must be at least 1", "set it to 1 or more")
    return value


def ncu_command(
    ncu: str | os.PathLike[str],
    out_base: str | os.PathLike[str],
    cmd: Sequence[str],
    *,
    sections: Iterable[str] = DEFAULT_SECTIONS,
    metrics: Iterable[str] = DEFAULT_METRICS,
    nvtx_include: str | None = NCU_FILTER,
    clock_control: str = "none",
    launch_count: int | None = None,
    per_config: int | None = None,
    kernel_filter: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``ncu`` command line that profiles ``cmd``: kernels inside tracekit's NVTX ranges (``nvtx_include``;
    ``None`` profiles every kernel), the explainer's sections plus ``metrics``, writing ``out_base.ncu-rep``.
    ``per_config`` profiles at most that many launches of each launch configuration (``--filter-mode
    per-launch-config --launch-count N``); else ``launch_count`` is the number of kernels profiled in all.
    ``kernel_filter``: ncu's kernel-name options choosing which kernels count at all (collectors/capture/select.py:
    the GEMMs of the nsys pass's timeline)."""
    if clock_control not in CLOCK_CONTROLS:
        raise BadInputError(
            f"clock control {clock_control!r} is not one of {', '.join(CLOCK_CONTROLS)}",
            "use none (the clocks your run sees) or base (ncu's locked base clock)",
        )
    if not cmd:
        raise BadInputError("no command to profile", "give it after --, e.g. -- python bench.py")
    args = [str(ncu)]
    if nvtx_include:
        args += ["--nvtx", "--nvtx-include", nvtx_include]
    for section in sections:
        args += ["--section", section]
    metrics = list(metrics)
    if metrics:
        args += ["--metrics", ",".join(metrics)]
    args += ["--clock-control", clock_control, "--target-processes", "all", *kernel_filter]
    if per_config is not None:
        if launch_count is not None:
            raise BadInputError(
                "ncu counts launches per configuration or in all, not both",
                "give --max-per-range N (each launch configuration) or --launch-count N (in all)",
            )
        args += ["--filter-mode", FILTER_PER_CONFIG, "--launch-count", str(int(per_config))]
    elif launch_count is not None:
        args += ["--launch-count", str(int(launch_count))]
    args += ["-o", str(out_base), "--force-overwrite", *extra, *cmd]
    return args


def nsys_graph_trace(extra: Sequence[str] = ()) -> str:
    """The ``--cuda-graph-trace`` value a capture runs with: the last one in ``extra``, else tracekit's."""
    given = [str(e).split("=", 1)[1] for e in extra if str(e).startswith("--cuda-graph-trace=")]
    return given[-1] if given else NSYS_GRAPH_TRACE


def nsys_command(
    nsys: str | os.PathLike[str],
    out_base: str | os.PathLike[str],
    cmd: Sequence[str],
    *,
    trace: str = NSYS_TRACE,
    extra: Sequence[str] = (),
) -> list[str]:
    """The ``nsys profile`` command line (as measured on the H200, DEVICE.md): CUDA + NVTX, no CPU sampling or
    context switches, every kernel of a CUDA-graph replay (:data:`NSYS_GRAPH_TRACE`), exporting
    ``out_base.sqlite`` beside ``out_base.nsys-rep``. ``extra`` goes after these, before ``cmd``; a
    ``--cuda-graph-trace`` in it replaces tracekit's (e.g. ``graph`` where node tracing costs too much)."""
    if not cmd:
        raise BadInputError("no command to profile", "give it after --, e.g. -- python bench.py")
    graph = [] if nsys_graph_trace(extra) != NSYS_GRAPH_TRACE else [f"--cuda-graph-trace={NSYS_GRAPH_TRACE}"]
    return [
        str(nsys),
        "profile",
        "-t",
        trace,
        "-s",
        "none",
        "--cpuctxsw=none",
        *graph,
        "--export=sqlite",
        "-o",
        str(out_base),
        "--force-overwrite",
        "true",
        *extra,
        *cmd,
    ]


def nsys_export_command(nsys: str | os.PathLike[str], report: str | os.PathLike[str]) -> list[str]:
    """``nsys export`` of a finished ``.nsys-rep`` into the ``.sqlite`` beside it (when the profile's own export
    did not finish)."""
    report = Path(report)
    return [
        str(nsys),
        "export",
        "--type",
        "sqlite",
        "--force-overwrite",
        "true",
        "-o",
        str(report.with_suffix(".sqlite")),
        str(report),
    ]
