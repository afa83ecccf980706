"""Options shared by several commands, spelled the same everywhere.

``-o/--out`` names what a command writes (a run folder, a zip, a report, a profile) in every command; the older
``--output`` of ``bench`` and ``calibrate`` still works as a hidden alias, so scripts written for it keep running.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from tracekit.errors import BadInputError


def out_option(help: str, **option: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``-o/--out PATH`` (the command receives it as ``out``), with ``--output`` accepted as a hidden alias.

    ``option`` goes to :func:`click.option` for both spellings (``type``, ``default``; not ``required``, which
    would refuse the alias). Giving both spellings with different paths is bad input (exit 2)."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def command(*args: Any, **kwargs: Any) -> Any:
            alias = kwargs.pop("output_alias", None)
            if alias is not None and kwargs.get("out") is not None and kwargs["out"] != alias:
                raise BadInputError(
                    f"-o/--out {kwargs['out']} and --output {alias} name different paths",
                    "give -o/--out once (--output is its old name)",
                )
            if alias is not None:
                kwargs["out"] = alias
            return f(*args, **kwargs)

        command = click.option("--output", "output_alias", hidden=True, **option)(command)
        return click.option("-o", "--out", "out", help=help, **option)(command)

    return decorate
