"""Options spelled the same in every command: ``-o/--out`` for what a command writes, ``--output`` only as a
hidden alias of it (tracekit/commands/_options.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tracekit.cli import cli

PLUGINS = Path(__file__).with_name("bench_plugins.py")


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    for name in group.list_commands(click.Context(group)):
        cmd = group.get_command(click.Context(group), name)
        assert cmd is not None
        out += _commands(cmd, f"{prefix}{name} ") if isinstance(cmd, click.Group) else [(prefix + name, cmd)]
    return out


def test_every_output_path_is_dash_o_out() -> None:
    writers = []
    for name, cmd in _commands(cli):
        for p in cmd.params:
            if not isinstance(p, click.Option):
                continue
            if "--output" in p.opts:
                assert p.hidden and p.opts == ["--output"], (
                    f"{name}: --output must be a hidden alias of -o/--out"
                )
            if "--out" in p.opts:
                assert p.opts == ["-o", "--out"] and not p.hidden, name
                writers.append(name)
            assert "-o" not in p.opts or "--out" in p.opts, f"{name}: -o is --out"
    assert {"bench gemm", "bench moe", "bundle", "calibrate", "capture", "import", "report"} <= set(writers)


def _bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *out: str) -> click.testing.Result:
    monkeypatch.setenv("TRACEKIT_BACKEND_PLUGINS", str(PLUGINS))
    args = ["bench", "gemm", "--backends", "test-ok", "--shapes", "4x8x8", "--repeats", "1", "--warmup", "0"]
    return CliRunner().invoke(cli, [*args, *out, "--json"])


@pytest.mark.parametrize("spelling", ["-o", "--out", "--output"])
def test_bench_writes_where_out_says(spelling: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    res = _bench(tmp_path, monkeypatch, spelling, str(run))
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["run"] == str(run) and (run / "run.json").is_file()


def test_out_and_output_disagreeing_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tracekit.cli import main

    monkeypatch.setenv("TRACEKIT_BACKEND_PLUGINS", str(PLUGINS))
    a, b = tmp_path / "a", tmp_path / "b"
    with pytest.raises(SystemExit) as exc:
        main(
            ["bench", "gemm", "--backends", "test-ok", "--shapes", "4x8x8", "-o", str(a), "--output", str(b)]
        )
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "name different paths" in err
    assert not a.exists() and not b.exists()
