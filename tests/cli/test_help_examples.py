"""The examples in the CLI's ``--help`` name runs that exist: every ``tracekit ...`` example that names a run or a
file under ``samples/`` names a bundled sample, and runs as written (on the CPU, against a copy of the samples in a
temporary folder, so what it writes lands there) with exit 0, or with the exit code its own comment gives
(``# exit 5: ...`` on ``compare --gate``). ``view`` examples run in a pseudo-terminal and are quit with ``q``.

Examples that need a GPU or the user's own files (``capture``, ``bench``, ``calibrate``, ``import trace.sqlite``)
name no sample and are only checked not to name a run that does not exist."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from tracekit.cli import cli

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
PY = sys.executable
# a shell function, so that the examples run this checkout's tracekit whatever is on PATH
PRELUDE = f'tracekit() {{ {shlex.quote(PY)} -m tracekit "$@"; }}\n'
EXIT = re.compile(r"#\s*exit (\d+)")


def _helps(group: click.Group = cli, prefix: str = "") -> list[tuple[str, str]]:
    """(command, its --help text) for the group and every command under it."""
    out = [
        (prefix.strip() or "tracekit", group.get_help(click.Context(group, info_name=prefix or "tracekit")))
    ]
    for name in group.list_commands(click.Context(group)):
        cmd = group.get_command(click.Context(group), name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            out += _helps(cmd, f"{prefix}{name} ")
        else:
            out.append((prefix + name, cmd.get_help(click.Context(cmd, info_name=prefix + name))))
    return out


def _examples(text: str) -> list[str]:
    """The ``tracekit ...`` lines of a help text's "Examples:" / "Typical flow:" blocks."""
    out, inside = [], False
    for line in text.splitlines():
        s = line.strip()
        if s in ("Examples:", "Typical flow:"):
            inside = True
        elif not s:
            inside = False
        elif inside and s.startswith("tracekit "):
            out.append(s)
    return out


EXAMPLES = [(name, line) for name, text in _helps() for line in _examples(text)]


def _words(line: str) -> list[str]:
    return shlex.split(line, comments=True)


def _written(words: list[str]) -> set[str]:
    return {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-o", "--out")}


def _names_sample(line: str) -> bool:
    return any(w.startswith("samples/") for w in _words(line))


def test_help_has_examples_and_those_naming_runs_name_bundled_samples() -> None:
    assert len(EXAMPLES) > 30
    for name, line in EXAMPLES:
        words = _words(line)
        made = _written(words)
        for w in words:
            if w.startswith("samples/"):
                assert (ROOT / w).exists(), f"{name} --help: {line!r} names {w}, which is not in samples/"
                assert re.match(r"samples/h[12]00-", w), (
                    f"{name} --help: {line!r}: not a bundled H100/H200 run"
                )
            if w.startswith("runs/") and "<" not in w:
                assert w in made, f"{name} --help: {line!r} names {w}, a run that does not exist"
    naming = {name for name, line in EXAMPLES if _names_sample(line)}
    assert {"show", "explain", "report", "bundle", "compare", "view", "import"} <= naming


def _shell_runnable(command: str) -> list[str]:
    """The examples of ``command`` to run in order: those naming a sample, and those reading what one wrote."""
    made: set[str] = set()
    out = []
    for name, line in EXAMPLES:
        if name != command:
            continue
        words = _words(line)
        if _names_sample(line) or made & set(words):
            out.append(line)
            made |= _written(words)
    return out


def _copy_samples(lines: list[str], into: Path) -> None:
    for line in lines:
        for w in _words(line):
            if w.startswith("samples/"):
                top = "/".join(w.split("/")[:2])
                if not (into / top).exists():
                    shutil.copytree(ROOT / top, into / top)


def _without_jq(line: str) -> str:
    """Where jq is not installed, the JSON a piped example prints is checked by Python instead."""
    if " | jq " not in line or shutil.which("jq"):
        return line
    head = line.split(" | jq ")[0]
    return f"{head} | {shlex.quote(PY)} -c 'import json, sys; json.load(sys.stdin)'"


SHELL_COMMANDS = ["show", "explain", "report", "bundle", "compare", "import", "bench gemm", "export"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="the examples are shell lines: needs bash")
@pytest.mark.parametrize("command", SHELL_COMMANDS)
def test_help_examples_naming_samples_run(command: str, tmp_path: Path) -> None:
    lines = _shell_runnable(command)
    assert lines, f"{command} --help has no example that names a sample"
    _copy_samples(lines, tmp_path)
    for line in lines:
        m = EXIT.search(line)
        want = int(m.group(1)) if m else 0
        proc = subprocess.run(
            ["bash", "-o", "pipefail", "-c", PRELUDE + _without_jq(line)],
            cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == want, f"{line!r} exited {proc.returncode}:\n{proc.stderr[-2000:]}"
        assert proc.stdout.strip() or proc.stderr.strip(), f"{line!r} printed nothing"


VIEW = [line for name, line in EXAMPLES if name == "view" and _names_sample(line)]


@pytest.mark.slow
@pytest.mark.parametrize("line", VIEW)
def test_view_examples_naming_samples_open_and_quit(line: str, tmp_path: Path, terminal) -> None:
    _copy_samples([line], tmp_path)
    ui = terminal([PY, "-m", "tracekit", *_words(line)[1:]], cwd=tmp_path)
    painted = ui.painted(lambda out: len(out) > 2000)  # the first screen is drawn and the UI has gone quiet
    assert ui.proc.poll() is None, (
        f"{line!r} exited {ui.proc.returncode} before drawing:\n{painted[-2000:]!r}"
    )
    # q quits from any screen; once the UI has let go of the terminal, wait for the exit
    assert ui.quit() == 0, f"{line!r}: {ui.proc.returncode}\n{painted[-2000:]!r}"
