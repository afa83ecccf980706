"""Options shared by several commands, spelled the same everywhere, each name meaning one thing.

``-o/--out`` names what a command writes (a run folder, a zip, a report, a profile) in every command; the older
``--output`` of ``bench`` and ``calibrate`` still works as a hidden alias, so scripts written for it keep running.
``--device NAME`` is a GPU of the catalog (``explain``, ``report``, ``view``, ``show``); the CUDA ordinal a GPU
command runs on is ``--gpu N`` (``bench``, ``calibrate``), whose older spelling ``--device N`` is its hidden alias
for one release. ``--timeout`` is a wall-time limit; ``bench``'s limit on seconds without progress is
``--stall-timeout`` (``--timeout`` its hidden alias for one release, as it meant that there before).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from tracekit.errors import BadInputError


def _aliased(
    opts: tuple[str, ...], dest: str, alias: str, help: str, alias_type: Any = None, **option: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The option ``opts`` (the command receives it as ``dest``) with the older spelling ``alias`` accepted as a
    hidden alias: given alone it stands for the option; both given with different values is bad input (exit 2).

    ``option`` goes to :func:`click.option` for both spellings (``type``, ``metavar``; not ``required``, which
    would refuse the alias); ``alias_type``, where given, replaces ``type`` for the alias. A ``default`` applies
    when neither spelling is given."""
    default = option.pop("default", None)
    show_default = option.pop("show_default", False)
    hidden_dest = f"{dest}_alias"
    shown = "/".join(opts)

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def command(*args: Any, **kwargs: Any) -> Any:
            old = kwargs.pop(hidden_dest, None)
            if old is not None and kwargs.get(dest) is not None and kwargs[dest] != old:
                raise BadInputError(
                    f"{shown} {kwargs[dest]} and {alias} {old} disagree",
                    f"give {opts[-1]} once ({alias} is its old name)",
                )
            if old is not None:
                kwargs[dest] = old
            if kwargs.get(dest) is None:
                kwargs[dest] = default
            return f(*args, **kwargs)

        old_option = {**option, "type": alias_type} if alias_type is not None else option
        command = click.option(alias, hidden_dest, hidden=True, default=None, **old_option)(command)
        extra = f"  [default: {default}]" if show_default and default is not None else ""
        return click.option(*opts, dest, default=None, help=help + extra, **option)(command)

    return decorate


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


class _OldOrdinal(click.ParamType):
    """The old ``--device N`` of ``bench`` / ``calibrate``: a CUDA ordinal; a GPU name there says where names go."""

    name = "N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            n = int(value)
        except (TypeError, ValueError):
            n = -1
        if n < 0:
            self.fail(
                f"{value!r} is not a CUDA device ordinal: this command runs on the GPU given by --gpu N "
                "(--device NAME names a catalog GPU in explain, report, show and view)",
                param,
                ctx,
            )
        return n


def gpu_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--gpu N``: the CUDA ordinal a command runs on (default 0; the command receives it as ``gpu``), with the
    older ``--device N`` as a hidden alias (``--device`` names a catalog GPU everywhere else)."""
    return _aliased(
        ("--gpu",),
        "gpu",
        "--device",
        "CUDA device ordinal to run on.",
        alias_type=_OldOrdinal(),
        type=click.IntRange(min=0),
        metavar="N",
        default=0,
        show_default=True,
    )(f)


def stall_timeout_option(help: str, default: float) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--stall-timeout S``: seconds without progress before a worker is stopped (the command receives it as
    ``stall_timeout``), with the older ``--timeout S`` as a hidden alias (``--timeout`` is a wall-time limit
    everywhere else)."""
    return _aliased(
        ("--stall-timeout",),
        "stall_timeout",
        "--timeout",
        help,
        type=float,
        metavar="S",
        default=default,
        show_default=True,
    )


TOP_DEFAULT = 10
"""Cases a view shows without ``--top`` / ``--all``."""


def top_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--top N`` (the N cases with the most time in calls; 0 or a negative count is a usage error, exit 2) and
    ``--all`` (every case). The command receives ``top`` (None when not given) and ``show_all``."""
    f = click.option("--all", "show_all", is_flag=True, help="Every GEMM case (no --top).")(f)
    return click.option(
        "--top",
        "top",
        type=click.IntRange(min=1),
        default=None,
        metavar="N",
        help=f"The N GEMM cases with the most time in calls (default {TOP_DEFAULT}).",
    )(f)


def top_count(top: int | None, show_all: bool, default: int | None = TOP_DEFAULT) -> int | None:
    """How many cases to show: None for every case (``--all``), else ``--top`` or ``default``."""
    if show_all and top is not None:
        raise click.UsageError("--top and --all contradict each other: give one")
    if show_all:
        return None
    return top if top is not None else default
