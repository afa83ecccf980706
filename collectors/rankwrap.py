"""Run by a launcher once per rank (``tracekit capture --ranks``): find this process's rank, put it in the command's
file names, and become that command.

    python rankwrap.py --rank-env RANK,OMPI_COMM_WORLD_RANK -- nsys profile -o raw/nsys.rank%q{TRACEKIT_RANK} ...

The first of the ``--rank-env`` variables that holds a whole number is the rank. It is exported as
``TRACEKIT_RANK`` (the benchmark inside may read it) and replaces every ``%q{TRACEKIT_RANK}`` in the command (the
token Nsight Systems and Nsight Compute expand themselves in ``-o``; expanding it here gives the same names for
every tool, the PyTorch profiler pass included, and fails loudly instead of letting two ranks overwrite one file
when the variable is missing). Then the process is replaced by the command (``os.execvp``): signals from the
launcher reach the tool directly. Standard library only: this runs wherever the launcher starts it.
"""

from __future__ import annotations

import os
import sys

ENV_RANK = "TRACEKIT_RANK"
RANK_TOKEN = "%q{" + ENV_RANK + "}"
EXIT_BAD_INPUT = 2


def find_rank(names: list[str], environ: dict[str, str] | os._Environ[str]) -> tuple[str, int] | None:
    """The first of ``names`` set to a whole number in ``environ``, with its value."""
    for name in names:
        text = environ.get(name, "").strip()
        if text.isdecimal():
            return name, int(text)
    return None


def expand(argv: list[str], rank: int) -> list[str]:
    return [a.replace(RANK_TOKEN, str(rank)) for a in argv]


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[0] != "--rank-env" or argv[2] != "--":
        print("usage: rankwrap.py --rank-env VAR[,VAR...] -- COMMAND...", file=sys.stderr)
        return EXIT_BAD_INPUT
    names = [n for n in argv[1].split(",") if n]
    command = argv[3:]
    found = find_rank(names, os.environ)
    if found is None:
        print(
            f"tracekit: none of {', '.join(names)} holds a rank in this process; give "
            "`tracekit capture --ranks --rank-env VAR` naming the variable your launcher sets "
            "(torchrun: RANK, Open MPI: OMPI_COMM_WORLD_RANK, Slurm: SLURM_PROCID, MPICH: PMI_RANK)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    _name, rank = found
    os.environ[ENV_RANK] = str(rank)
    command = expand(command, rank)
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"tracekit: rank {rank} could not start {command[0]}: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached: execvp replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
