"""``tracekit capture --ranks``: one profiler per rank, inside the launcher, each writing files named with its rank.

A profiler wrapped around a launcher (``nsys profile torchrun ...``) sees the launcher and every worker as one
process tree: one report for all ranks, and Nsight Compute replaying every rank's kernels in one session. The
profiler belongs inside the launcher, around each rank's process (as NVIDIA documents for MPI:
``mpirun -np 4 nsys profile -o report.%q{OMPI_COMM_WORLD_RANK} ./app``). So the command is split in two:

``launcher``
    what starts the ranks, run once: ``torchrun --nproc-per-node 8 --no-python`` (``torchrun`` and
    ``python -m torch.distributed.run`` are recognised and rewritten: ``--no-python`` lets torchrun start a
    program that is not a Python script), or any launcher given with ``--launcher 'mpirun -np 8'``.
``command``
    what each rank runs: ``python bench.py ARGS`` (torchrun's script with the interpreter torchrun would use), or
    the command after ``--`` when ``--launcher`` is given.

Each pass then runs ``launcher + [python, rankwrap.py, --rank-env VARS, --] + tool argv + command``:
:mod:`tracekit.collectors.rankwrap` reads the rank from the first variable of ``rank_env`` that is set (RANK for
torchrun; Open MPI, MPICH, Slurm and PMIx names otherwise, or ``--rank-env VAR``), and replaces
``%q{TRACEKIT_RANK}`` in the tool's output names: ``raw/nsys.rank3.nsys-rep`` + ``.sqlite``,
``raw/ncu.rank3.ncu-rep``, ``raw/torch_trace.rank3.json.gz``. The importer reads the rank from those names.

Pure functions over argument lists (tests pin them); standard library only.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.errors import BadInputError

from .rankwrap import ENV_RANK, RANK_TOKEN

__all__ = [
    "DEFAULT_RANK_ENV",
    "ENV_RANK",
    "RANKWRAP_PY",
    "RANK_TOKEN",
    "RankLaunch",
    "launcher_world_size",
    "plan_ranks",
    "rank_files",
    "split_torchrun",
]

RANKWRAP_PY = Path(__file__).resolve().parent / "rankwrap.py"
DEFAULT_RANK_ENV = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
"""Where launchers put a process's global rank: torchrun, Open MPI, MPICH / Intel MPI, PMIx, Slurm (srun)."""

# torchrun's options that take no value (torch/distributed/run.py and the older torch.distributed.launch);
# every other option takes one, as ``--opt VALUE`` or ``--opt=VALUE``.
_TORCHRUN_FLAGS = {
    "--standalone",
    "-m",
    "--module",
    "--no-python",
    "--no_python",
    "--run-path",
    "--run_path",
    "--use-env",
    "--use_env",
    "--virtual-local-rank",
    "--virtual_local_rank",
}
_TORCHRUN_VALUES = {
    "--nnodes",
    "--nproc-per-node",
    "--nproc_per_node",
    "--rdzv-backend",
    "--rdzv_backend",
    "--rdzv-endpoint",
    "--rdzv_endpoint",
    "--rdzv-id",
    "--rdzv_id",
    "--rdzv-conf",
    "--rdzv_conf",
    "--max-restarts",
    "--max_restarts",
    "--monitor-interval",
    "--monitor_interval",
    "--start-method",
    "--start_method",
    "--event-log-handler",
    "--event_log_handler",
    "--role",
    "--log-dir",
    "--log_dir",
    "-r",
    "--redirects",
    "-t",
    "--tee",
    "--local-ranks-filter",
    "--local_ranks_filter",
    "--node-rank",
    "--node_rank",
    "--master-addr",
    "--master_addr",
    "--master-port",
    "--master_port",
    "--local-addr",
    "--local_addr",
    "--logs-specs",
    "--logs_specs",
    "--numa-binding",
    "--numa_binding",
    "--signals-to-handle",
    "--signals_to_handle",
}
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_PYTHON = re.compile(r"^python[0-9.]*$")


@dataclass(frozen=True)
class RankLaunch:
    """How a multi-rank command is run with one profiler per rank (see the module docstring)."""

    launcher: tuple[str, ...]
    command: tuple[str, ...]
    rank_env: tuple[str, ...]
    world_size: int | None
    """Ranks this launcher starts on this machine, when the command line says (None: unknown)."""
    kind: str
    """``torchrun`` or ``launcher``."""

    def wrap(self, per_rank: Sequence[str], python: str | None = None) -> list[str]:
        """The command line of one pass: the launcher starting ``per_rank`` (a tool's argv around ``command``,
        its output names holding RANK_TOKEN) through rankwrap in every rank."""
        return [
            *self.launcher,
            python or sys.executable,
            str(RANKWRAP_PY),
            "--rank-env",
            ",".join(self.rank_env),
            "--",
            *per_rank,
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "launcher": list(self.launcher),
            "command": list(self.command),
            "rank_env": list(self.rank_env),
            "world_size": self.world_size,
        }


def _resolve_long(name: str) -> str | None:
    """argparse accepts any unambiguous prefix of a long option: the full name, or None if unknown/ambiguous."""
    if name in _TORCHRUN_FLAGS or name in _TORCHRUN_VALUES:
        return name
    if not name.startswith("--"):
        return None
    hits = {n for n in _TORCHRUN_FLAGS | _TORCHRUN_VALUES if n.startswith(name)}
    kinds = {n in _TORCHRUN_FLAGS for n in hits}
    return min(hits) if len(kinds) == 1 else None


def _python_of(torchrun: str, env: Mapping[str, str]) -> str:
    """The interpreter torchrun starts workers with: $PYTHON_EXEC, else the one in torchrun's own ``#!`` line."""
    if env.get("PYTHON_EXEC"):
        return env["PYTHON_EXEC"]
    path = shutil.which(torchrun, path=env.get("PATH")) if os.sep not in torchrun else torchrun
    if path:
        try:
            with open(path, "rb") as f:
                first = f.readline(512).decode("utf-8", "replace").strip()
        except OSError:
            first = ""
        if first.startswith("#!"):
            words = first[2:].split()
            if words and Path(words[0]).name == "env" and len(words) > 1:
                words = words[1:]
            if words and _PYTHON.match(Path(words[0]).name):
                return words[0]
    return sys.executable


def _torchrun_start(cmd: Sequence[str]) -> int | None:
    """Index of the first torchrun option in ``cmd`` when it runs torchrun, else None."""
    if not cmd:
        return None
    if Path(cmd[0]).name == "torchrun":
        return 1
    if _PYTHON.match(Path(cmd[0]).name):
        for i in range(1, len(cmd) - 1):
            if cmd[i] == "-m" and cmd[i + 1] in _TORCHRUN_MODULES:
                return i + 2
            if not cmd[i].startswith("-"):
                break
    return None


def _world(nproc: str | None) -> int | None:
    """Ranks on this node: ``--nproc-per-node`` when it is a number (torchrun's default is 1). With several nodes
    each node's capture holds its own ranks (the file names carry the global RANK)."""
    text = (nproc or "1").strip()
    return int(text) if text.isdecimal() and int(text) > 0 else None


def split_torchrun(cmd: Sequence[str], env: Mapping[str, str] | None = None) -> RankLaunch | None:
    """A torchrun command split into a launcher (``--no-python`` added) and each rank's command; None when
    ``cmd`` does not run torchrun."""
    env = os.environ if env is None else env
    start = _torchrun_start(cmd)
    if start is None:
        return None
    python = cmd[0] if start > 1 else _python_of(cmd[0], env)
    opts: list[str] = []
    values: dict[str, str] = {}
    module = no_python = False
    i = start
    while i < len(cmd):
        arg = cmd[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        name, eq, value = arg.partition("=")
        full = _resolve_long(name) or name
        if full in _TORCHRUN_FLAGS:
            if eq:
                raise BadInputError(
                    f"torchrun option {name} takes no value ({arg})", "check the command after --"
                )
            module |= full in ("-m", "--module")
            no_python |= full in ("--no-python", "--no_python")
            if full in (
                "--standalone",
                "--use-env",
                "--use_env",
                "--virtual-local-rank",
                "--virtual_local_rank",
            ):
                opts.append(arg)  # kept; -m / --no-python / --run-path are replaced by tracekit's --no-python
            i += 1
            continue
        if not eq:
            if i + 1 >= len(cmd):
                raise BadInputError(f"torchrun option {arg} needs a value", "check the command after --")
            value = cmd[i + 1]
            opts += [arg, value]
            i += 2
        else:
            opts.append(arg)
            i += 1
        values[full.replace("_", "-")] = value
    if i >= len(cmd):
        raise BadInputError(
            "the torchrun command names no script to run", "e.g. -- torchrun --nproc-per-node 2 bench.py"
        )
    script, args = cmd[i], list(cmd[i + 1 :])
    if no_python:
        command = [script, *args]
    elif module:
        command = [python, "-m", script, *args]
    else:
        command = [python, script, *args]
    launcher = [*cmd[:start], *opts, "--no-python"]
    return RankLaunch(
        launcher=tuple(launcher),
        command=tuple(command),
        rank_env=("RANK",),
        world_size=_world(values.get("--nproc-per-node")),
        kind="torchrun",
    )


_WORLD_OPTIONS = {"-np", "-n", "--np", "--n", "-c", "--ntasks", "--nprocs"}


def launcher_world_size(launcher: Sequence[str]) -> int | None:
    """Process count given on a launcher's command line (``mpirun -np 8``, ``srun -n 8``, ``--ntasks=8``)."""
    for i, arg in enumerate(launcher):
        name, eq, value = arg.partition("=")
        if name in _WORLD_OPTIONS:
            text = value if eq else (launcher[i + 1] if i + 1 < len(launcher) else "")
            if text.isdecimal() and int(text) > 0:
                return int(text)
    return None


def plan_ranks(
    cmd: Sequence[str],
    *,
    launcher: str | Sequence[str] | None = None,
    rank_env: str | Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> RankLaunch:
    """How ``tracekit capture --ranks [--launcher L] [--rank-env VAR] -- CMD`` runs: a torchrun CMD is split
    (:func:`split_torchrun`); with ``launcher``, CMD is what each rank runs. Raises BadInputError otherwise."""
    cmd = [str(c) for c in cmd]
    names: tuple[str, ...] | None = None
    if rank_env:
        parts = rank_env.split(",") if isinstance(rank_env, str) else list(rank_env)
        names = tuple(p.strip() for p in parts if p.strip())
        bad = [n for n in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)]
        if bad or not names:
            raise BadInputError(
                f"--rank-env {rank_env!r} is not a variable name", "e.g. --rank-env SLURM_PROCID"
            )
    if not cmd:
        raise BadInputError("no command to capture", "e.g. tracekit capture --ranks --nsys -- torchrun ...")
    if launcher:
        words = shlex.split(launcher) if isinstance(launcher, str) else [str(w) for w in launcher]
        if not words:
            raise BadInputError("--launcher is empty", "e.g. --launcher 'mpirun -np 8'")
        if _torchrun_start(words) is not None:
            raise BadInputError(
                "give torchrun after -- rather than as --launcher (tracekit rewrites it with --no-python)",
                "tracekit capture --ranks --nsys -- torchrun --nproc-per-node 2 bench.py",
            )
        return RankLaunch(
            launcher=tuple(words),
            command=tuple(cmd),
            rank_env=names or DEFAULT_RANK_ENV,
            world_size=launcher_world_size(words),
            kind="launcher",
        )
    split = split_torchrun(cmd, env)
    if split is None:
        raise BadInputError(
            f"--ranks needs a launcher: {cmd[0]!r} is not torchrun",
            "put torchrun after -- (tracekit capture --ranks --nsys -- torchrun --nproc-per-node 8 bench.py), "
            "or name another launcher: --launcher 'mpirun -np 8' [--rank-env OMPI_COMM_WORLD_RANK] -- python bench.py",
        )
    if names:
        split = RankLaunch(split.launcher, split.command, names, split.world_size, split.kind)
    return split


_RANK_FILE = re.compile(r"\.rank(\d+)\.")


def rank_files(raw: Path, stem: str, suffix: str) -> dict[int, Path]:
    """The per-rank files a pass wrote: ``raw/<stem>.rank<R><suffix>``, by rank."""
    out: dict[int, Path] = {}
    for p in raw.glob(f"{stem}.rank*{suffix}"):
        m = _RANK_FILE.search(p.name[len(stem) :] if p.name.startswith(stem) else "")
        if m and p.name == f"{stem}.rank{m.group(1)}{suffix}":
            out[int(m.group(1))] = p
    return dict(sorted(out.items()))
