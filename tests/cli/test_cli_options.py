"""Options spelled the same in every command: ``-o/--out`` for what a command writes, ``--output`` only as a
hidden alias of it (tracekit/commands/_options.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tracekit.cli import cli

PLUGINS = Path(__file__).resolve().parents[1] / "support" / "bench_plugins.py"


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


def _options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option)]


def test_device_is_a_gpu_name_and_gpu_the_cuda_ordinal_everywhere() -> None:
    """``--device`` takes a catalog name wherever it is shown; the ordinal is ``--gpu N``, and the old ``--device N``
    of bench / calibrate is hidden (neither help names it)."""
    named, ordinal = [], []
    for name, cmd in _commands(cli):
        for p in _options(cmd):
            if "--device" in p.opts and not p.hidden:
                assert p.metavar == "NAME" and p.type is click.STRING, (
                    f"{name}: --device must take a GPU name"
                )
                named.append(name)
            if "--device" in p.opts and p.hidden:
                assert any("--gpu" in q.opts for q in _options(cmd)), (
                    f"{name}: a hidden --device is --gpu's alias"
                )
            if "--gpu" in p.opts:
                assert isinstance(p.type, click.IntRange) and not p.hidden, name
                ordinal.append(name)
        if name in ordinal:
            assert "--device" not in cmd.get_help(click.Context(cmd, info_name=name)), name
    assert {"explain", "report", "view", "show"} <= set(named)
    assert set(ordinal) == {"bench gemm", "bench moe", "calibrate"}


def test_timeout_is_wall_time_and_stall_timeout_is_without_progress() -> None:
    shown = {}
    for name, cmd in _commands(cli):
        for p in _options(cmd):
            for opt in ("--timeout", "--stall-timeout"):
                if opt in p.opts and not p.hidden:
                    shown.setdefault(opt, set()).add(name)
    assert shown == {"--timeout": {"capture"}, "--stall-timeout": {"bench gemm", "bench moe"}}
    for name in ("bench gemm", "bench moe"):
        cmd = dict(_commands(cli))[name]
        text = cmd.get_help(click.Context(cmd, info_name=name))
        assert "--timeout" not in text and "--stall-timeout" in text


@pytest.mark.parametrize(
    ("given", "device", "timeout"),
    [
        ((), 0, 300.0),
        (("--gpu", "2", "--stall-timeout", "8"), 2, 8.0),
        (("--device", "3", "--timeout", "7"), 3, 7.0),  # the old spellings, hidden
        (("--gpu", "1", "--device", "1"), 1, 300.0),  # both, agreeing
    ],
)
def test_gpu_and_stall_timeout_reach_the_run_old_spellings_too(
    given: tuple[str, ...], device: int, timeout: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    res = _bench(tmp_path, monkeypatch, "-o", str(run), *given)
    assert res.exit_code == 0, res.output
    capture = json.loads((run / "run.json").read_text())["capture"]
    assert (capture["device"], capture["timeout"]) == (device, timeout)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (("--gpu", "0", "--device", "1"), "--gpu 0 and --device 1 disagree"),
        (("--stall-timeout", "5", "--timeout", "6"), "--stall-timeout 5.0 and --timeout 6.0 disagree"),
    ],
)
def test_new_and_old_spelling_disagreeing_is_bad_input(
    given: tuple[str, ...], said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from tracekit.cli import main

    monkeypatch.setenv("TRACEKIT_BACKEND_PLUGINS", str(PLUGINS))
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["bench", "gemm", "--backends", "test-ok", "--shapes", "4x8x8", "-o", str(run), *given])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and said in err, err
    assert not run.exists()


def test_a_gpu_name_given_to_the_old_device_ordinal_says_where_names_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = _bench(tmp_path, monkeypatch, "--device", "h200")
    assert res.exit_code == 2
    assert "not a CUDA device ordinal" in res.output and "--gpu N" in res.output and "explain" in res.output


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "gemm", "--shapes", "4x8x8"],
        ["bench", "gemm", "--shapes-from", "samples/h200-bench-gemm", "--dry-run"],
        ["bench", "moe", "--tokens", "4"],
    ],
    ids=["gemm", "shapes-from", "moe"],
)
def test_bench_timing_options_are_one_declaration(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench gemm``, its ``--shapes-from`` and ``bench moe`` take the same timing options (declared once:
    commands/bench.py ``sweep_timing_options``), with the same defaults, and refuse the same bad counts in one
    line before any sweep starts."""
    options = {name: cmd for name, cmd in _commands(cli)}
    timing = ("repeats", "warmup", "stall_timeout", "timing", "gpu")
    for name in ("bench gemm", "bench moe"):
        defaults = {p.name: p.default for p in options[name].params if p.name in timing}
        assert set(defaults) == set(timing), name
        assert (defaults["repeats"], defaults["warmup"], defaults["timing"]) == (25, 10, "auto"), name
    from tracekit.cli import main

    root = Path(__file__).resolve().parents[2]
    with pytest.raises(SystemExit) as exc:
        main([*[str(root / a) if a.startswith("samples/") else a for a in args], "--repeats", "0"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "--repeats must be >= 1" in err
