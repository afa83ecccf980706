"""``tracekit capture --ranks`` on the CPU: the exact launcher / per-rank command lines, the rank wrapper, and whole
captures through a stand-in torchrun and nsys (real processes: the launcher starts one process per rank with RANK
set, each nsys writes its rank's report) merged by the import into one run with a rank on every row."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tracekit.analyzers.ranks import analyze_ranks
from tracekit.analyzers.store import load_frames
from tracekit.collectors import tools
from tracekit.collectors.capture import capture
from tracekit.collectors.ranks import (
    DEFAULT_RANK_ENV,
    RANKWRAP_PY,
    RankLaunch,
    launcher_world_size,
    plan_ranks,
    rank_files,
    split_torchrun,
)
from tracekit.collectors.rankwrap import RANK_TOKEN, expand, find_rank
from tracekit.errors import BadInputError

PY = sys.executable
ENV = {"PYTHON_EXEC": "/venv/bin/python3"}


def _exe(path: Path, body: str, shebang: str = "#!/bin/sh") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{shebang}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# --- command lines -------------------------------------------------------------------------------------------------------
def test_torchrun_split_exact() -> None:
    got = split_torchrun(["torchrun", "--nproc-per-node", "2", "bench.py", "--shapes", "a,b"], ENV)
    assert got == RankLaunch(
        launcher=("torchrun", "--nproc-per-node", "2", "--no-python"),
        command=("/venv/bin/python3", "bench.py", "--shapes", "a,b"),
        rank_env=("RANK",),
        world_size=2,
        kind="torchrun",
    )


@pytest.mark.parametrize(
    ("cmd", "launcher", "command", "world"),
    [
        # --opt=value, a flag kept, -m becomes `python -m` in each rank
        (
            ["torchrun", "--nproc_per_node=4", "--standalone", "-m", "pkg.bench", "-x"],
            ("torchrun", "--nproc_per_node=4", "--standalone", "--no-python"),
            ("/venv/bin/python3", "-m", "pkg.bench", "-x"),
            4,
        ),
        # python -m torch.distributed.run: that interpreter runs the ranks
        (
            ["python3.12", "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "8", "t.py"],
            (
                "python3.12",
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "1",
                "--nproc-per-node",
                "8",
                "--no-python",
            ),
            ("python3.12", "t.py"),
            8,
        ),
        # argparse prefixes: --nproc takes a value, --stand is the --standalone flag
        (
            ["torchrun", "--nproc", "2", "--stand", "b.py"],
            ("torchrun", "--nproc", "2", "--stand", "--no-python"),
            ("/venv/bin/python3", "b.py"),
            2,
        ),
        # already --no-python: the program runs as given; nproc 'gpu' is decided at run time
        (
            ["torchrun", "--no-python", "--nproc-per-node", "gpu", "./gemm", "7"],
            ("torchrun", "--nproc-per-node", "gpu", "--no-python"),
            ("./gemm", "7"),
            None,
        ),
        # default one rank; `--` ends torchrun's options; the script's own -- stays the script's
        (
            ["torchrun", "--master-port", "29501", "--", "b.py", "--", "x"],
            ("torchrun", "--master-port", "29501", "--no-python"),
            ("/venv/bin/python3", "b.py", "--", "x"),
            1,
        ),
    ],
)
def test_torchrun_forms(cmd: list[str], launcher: tuple, command: tuple, world: int | None) -> None:
    got = split_torchrun(cmd, ENV)
    assert got is not None
    assert (got.launcher, got.command, got.world_size) == (launcher, command, world)


def test_torchrun_python_from_its_shebang(tmp_path: Path) -> None:
    _exe(tmp_path / "bin/torchrun", "import sys\n", shebang="#!/opt/venv/bin/python3.12")
    env = {"PATH": str(tmp_path / "bin")}
    got = split_torchrun(["torchrun", "b.py"], env)
    assert got is not None and got.command == ("/opt/venv/bin/python3.12", "b.py")
    _exe(tmp_path / "bin2/torchrun", "import sys\n", shebang="#!/usr/bin/env python3")
    got = split_torchrun(["torchrun", "b.py"], {"PATH": str(tmp_path / "bin2")})
    assert got is not None and got.command == ("python3", "b.py")


def test_generic_launcher_and_rank_env() -> None:
    got = plan_ranks(["python", "bench.py"], launcher="mpirun -np 8 --bind-to none")
    assert got.launcher == ("mpirun", "-np", "8", "--bind-to", "none") and got.command == (
        "python",
        "bench.py",
    )
    assert got.rank_env == DEFAULT_RANK_ENV and got.world_size == 8 and got.kind == "launcher"
    got = plan_ranks(["./app"], launcher=["srun", "--ntasks=4"], rank_env="SLURM_PROCID")
    assert got.rank_env == ("SLURM_PROCID",) and got.world_size == 4
    got = plan_ranks(["torchrun", "--nproc-per-node", "2", "b.py"], rank_env="LOCAL_RANK", env=ENV)
    assert got.rank_env == ("LOCAL_RANK",) and got.kind == "torchrun"
    assert launcher_world_size(["mpiexec", "-n", "16"]) == 16 and launcher_world_size(["srun"]) is None


def test_world_size_in_a_digit_int_refuses_is_no_number() -> None:
    """A process count like "²" (a Unicode digit ``int`` refuses) raised ValueError out of the plan: it gives no
    world size, for torchrun's ``--nproc-per-node`` and for a launcher's ``-np`` alike."""
    got = split_torchrun(["torchrun", "--nproc-per-node", "\u00b2", "b.py"], ENV)
    assert got is not None and got.world_size is None
    assert launcher_world_size(["mpirun", "-np", "\u00b2"]) is None
    assert launcher_world_size(["srun", "--ntasks=\u00b9"]) is None


@pytest.mark.parametrize(
    ("cmd", "kwargs", "match"),
    [
        (["python", "bench.py"], {}, "not torchrun"),
        (["torchrun", "--nproc-per-node", "2"], {}, "names no script"),
        (["torchrun", "--nproc-per-node"], {}, "needs a value"),
        (["torchrun", "--standalone=1", "b.py"], {}, "takes no value"),
        (["python", "b.py"], {"launcher": "torchrun --nproc-per-node 2"}, "after --"),
        (["python", "b.py"], {"launcher": "mpirun", "rank_env": "1RANK"}, "variable name"),
        ([], {"launcher": "mpirun"}, "no command"),
    ],
)
def test_plan_refusals(cmd: list[str], kwargs: dict, match: str) -> None:
    with pytest.raises(BadInputError, match=match):
        plan_ranks(cmd, env=ENV, **kwargs)


def test_pass_command_lines_exact() -> None:
    """What each pass runs: the launcher once, then in every rank rankwrap around the tool around the command."""
    plan = plan_ranks(["torchrun", "--nproc-per-node", "2", "bench.py"], env=ENV)
    nsys = tools.nsys_command("/n/nsys", f"/r/raw/nsys.rank{RANK_TOKEN}", plan.command)
    assert plan.wrap(nsys, python="/py") == [
        "torchrun",
        "--nproc-per-node",
        "2",
        "--no-python",
        "/py",
        str(RANKWRAP_PY),
        "--rank-env",
        "RANK",
        "--",
        "/n/nsys",
        "profile",
        "-t",
        "cuda,nvtx",
        "-s",
        "none",
        "--cpuctxsw=none",
        "--cuda-graph-trace=node",
        "--export=sqlite",
        "-o",
        "/r/raw/nsys.rank%q{TRACEKIT_RANK}",
        "--force-overwrite",
        "true",
        "/venv/bin/python3",
        "bench.py",
    ]


def test_rankwrap_finds_the_rank_and_names_files(tmp_path: Path) -> None:
    assert find_rank(["RANK", "OMPI_COMM_WORLD_RANK"], {"OMPI_COMM_WORLD_RANK": "3"}) == (
        "OMPI_COMM_WORLD_RANK",
        3,
    )
    assert find_rank(["RANK"], {"RANK": "x"}) is None
    assert expand(["-o", f"raw/nsys.rank{RANK_TOKEN}", "a"], 5) == ["-o", "raw/nsys.rank5", "a"]
    probe = "import os,sys; print(os.environ['TRACEKIT_RANK'], sys.argv[1:])"
    env = {**os.environ, "SLURM_PROCID": "6"}
    out = subprocess.run(
        [
            PY,
            str(RANKWRAP_PY),
            "--rank-env",
            "RANK,SLURM_PROCID",
            "--",
            PY,
            "-c",
            probe,
            f"f.rank{RANK_TOKEN}",
        ],
        env={k: v for k, v in env.items() if k != "RANK"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "6 ['f.rank6']"
    bad = subprocess.run(
        [PY, str(RANKWRAP_PY), "--rank-env", "NO_SUCH_RANK_VAR", "--", "true"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "NO_SUCH_RANK_VAR" in bad.stderr and "--rank-env" in bad.stderr


def test_rankwrap_takes_a_digit_int_refuses_for_no_rank() -> None:
    """A variable set to "²" (a Unicode digit ``int`` refuses) raised ValueError in the wrapper: it holds no whole
    number, so the next variable named gives the rank."""
    env = {"RANK": "\u00b2", "SLURM_PROCID": "6"}
    assert find_rank(["RANK", "SLURM_PROCID"], env) == ("SLURM_PROCID", 6)
    assert find_rank(["RANK"], env) is None


def test_rank_files(tmp_path: Path) -> None:
    for name in (
        "nsys.rank0.sqlite",
        "nsys.rank10.sqlite",
        "nsys.rank1.nsys-rep",
        "nsys.sqlite",
        "xnsys.rank2.sqlite",
    ):
        (tmp_path / name).write_text("x")
    assert rank_files(tmp_path, "nsys", ".sqlite") == {
        0: tmp_path / "nsys.rank0.sqlite",
        10: tmp_path / "nsys.rank10.sqlite",
    }


# --- whole captures with a stand-in launcher and nsys ---------------------------------------------------------------------
FAKE_TORCHRUN = """import os, subprocess, sys
args = sys.argv[1:]
n = int(args[args.index("--nproc-per-node") + 1])
prog = args[args.index("--no-python") + 1:]
procs = [subprocess.Popen(prog, env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n)})
         for r in range(n)]
sys.exit(max(p.wait() for p in procs))
"""

# nsys stand-in: records its argv, runs the command it wraps, and writes its rank's report: a real export cut to one
# process (what an nsys around that rank alone records)
FAKE_NSYS = """import os, shutil, subprocess, sys
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("NVIDIA Nsight Systems version 2025.3.1.90-1"); sys.exit(0)
out = args[args.index("-o") + 1]
cmd = args[args.index("--force-overwrite") + 2:]
rank = os.environ["TRACEKIT_RANK"]
with open(out + ".argv", "w") as f:
    f.write("\\n".join(sys.argv))
rc = subprocess.call(cmd)
if rank == os.environ.get("FAIL_RANK"):
    sys.exit(1)
shutil.copyfile(os.path.join(os.environ["SPLIT_DIR"], f"rank{rank}.sqlite"), out + ".sqlite")
open(out + ".nsys-rep", "w").write("rep")
sys.exit(rc)
"""

BENCH = "import os; open(f'ran.{os.environ[\"RANK\"]}', 'w').write(os.environ['TRACEKIT_RANK'])\n"


def _split(src: Path, out: Path, pid: int) -> None:
    shutil.copyfile(src, out)
    con = sqlite3.connect(out)
    gpid, gtid = "(globalPid >> 24) & 16777215", "(globalTid >> 24) & 16777215"
    con.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE {gpid} != {pid}")
    con.execute(f"DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE {gtid} != {pid}")
    con.execute(f"DELETE FROM NVTX_EVENTS WHERE {gtid} != {pid}")
    con.commit()
    con.close()


@pytest.fixture(scope="module")
def split_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mfu_2gpu_before cut into one export per process: rank0.sqlite (pid 144, device 0), rank1.sqlite (145, 1)."""
    out = tmp_path_factory.mktemp("split")
    src = shared_data / "thirdparty/nsys-ai/mfu_2gpu_before.sqlite"
    for rank, pid in ((0, 144), (1, 145)):
        _split(src, out / f"rank{rank}.sqlite", pid)
    return out


def _setup(tmp_path: Path, split_dir: Path) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "bin"
    _exe(bin_dir / "torchrun", FAKE_TORCHRUN, shebang=f"#!{PY}")
    nsys = _exe(bin_dir / "nsys", FAKE_NSYS, shebang=f"#!{PY}")
    work = tmp_path / "work"
    work.mkdir()
    (work / "bench.py").write_text(BENCH)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TRACEKIT_") and k not in ("RANK", "LOCAL_RANK")
    }
    env |= {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON_EXEC": PY, "SPLIT_DIR": str(split_dir)}
    env["TRACEKIT_NSYS"] = str(nsys)
    return env, work


def test_torchrun_capture_one_report_per_rank_merged(tmp_path: Path, split_dir: Path) -> None:
    env, work = _setup(tmp_path, split_dir)
    cmd = ["torchrun", "--nproc-per-node", "2", "bench.py"]
    ranks = plan_ranks(cmd, env=env)
    run = capture(
        cmd, nsys=True, ranks=ranks, env=env, cwd=work, out=tmp_path / "run", on_output=lambda s, b: None
    )
    assert run.status == "complete", run.manifest["incomplete_reason"]
    raw = run.raw_dir
    # each rank ran the command inside its own nsys, with its rank in the file names
    assert sorted(p.name for p in work.glob("ran.*")) == ["ran.0", "ran.1"]
    assert [(work / f"ran.{r}").read_text() for r in (0, 1)] == ["0", "1"]
    for r in (0, 1):
        recorded = (raw / f"nsys.rank{r}.argv").read_text().split("\n")
        assert recorded == tools.nsys_command(
            env["TRACEKIT_NSYS"], raw.absolute() / f"nsys.rank{r}", [PY, "bench.py"]
        )
    (p,) = run.manifest["capture"]["passes"]
    assert p["argv"][:4] == ["torchrun", "--nproc-per-node", "2", "--no-python"]
    assert run.manifest["capture"]["ranks"]["world_size"] == 2
    # the import merged them: every row has a rank and a device, frames partitioned by rank
    from tracekit.analyzers.importer import import_into

    summary = import_into(run)
    assert summary["ranks"] == [0, 1]
    frames = load_frames(run)
    k = frames["kernels"]
    assert k["rank"].null_count() == 0 and k["device"].null_count() == 0
    assert dict(k.group_by("rank").agg(pl.col("device").first()).iter_rows()) == {0: 0, 1: 1}
    assert run.frame_layout("kernels") == "partitioned"
    assert [s["rank_source"] for s in run.manifest["sources"] if s["kind"] == "nsys"] == ["file name"] * 2
    ra = analyze_ranks(frames)
    assert ra is not None and ra.ranks.height == 2


def test_a_rank_without_report_marks_the_run_incomplete(tmp_path: Path, split_dir: Path) -> None:
    env, work = _setup(tmp_path, split_dir)
    env["FAIL_RANK"] = "1"
    cmd = ["torchrun", "--nproc-per-node", "2", "bench.py"]
    run = capture(cmd, nsys=True, ranks=plan_ranks(cmd, env=env), env=env, cwd=work, out=tmp_path / "run",
                  on_output=lambda s, b: None)  # fmt: skip
    assert run.status == "incomplete"
    reason = run.manifest["incomplete_reason"]
    assert "1 of 2 ranks wrote a report (missing ranks 1" in reason
    assert (run.raw_dir / "nsys.rank0.sqlite").is_file() and not (run.raw_dir / "nsys.rank1.sqlite").exists()


def test_launcher_without_rank_variable_fails_clearly(tmp_path: Path, split_dir: Path) -> None:
    env, work = _setup(tmp_path, split_dir)
    # a launcher that starts two processes and tells them nothing about their rank
    launcher = _exe(
        tmp_path / "bin/norank",
        "import subprocess, sys\nsys.exit(max(subprocess.call(sys.argv[1:]) for _ in range(2)))\n",
        shebang=f"#!{PY}",
    )
    ranks = plan_ranks([PY, "bench.py"], launcher=str(launcher))
    run = capture([PY, "bench.py"], nsys=True, ranks=ranks, env=env, cwd=work, out=tmp_path / "run",
                  on_output=lambda s, b: None)  # fmt: skip
    assert run.status == "incomplete"
    assert "exit status 2" in run.manifest["incomplete_reason"]
    assert "none of RANK, OMPI_COMM_WORLD_RANK" in (run.raw_dir / "nsys.log").read_text()


def test_cli_ranks_needs_a_launcher(tmp_path: Path) -> None:
    proc = subprocess.run(
        [PY, "-m", "tracekit", "capture", "--ranks", "--nsys", "--", PY, "bench.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) <= 2 and "not torchrun" in proc.stderr and "Traceback" not in proc.stderr


def test_real_torchrun_on_cpu(tmp_path: Path) -> None:
    """The real torchrun accepts the rewritten command: two CPU ranks of samples/scripts/tp_gemm_gloo.py (gloo)
    under the PyTorch profiler, one trace per rank, merged with a rank on every range. Needs torch (CPU is
    enough); skipped where it is not installed."""
    pytest.importorskip("torch.distributed.run", reason="needs torch (a CPU build is enough)")
    from tracekit.analyzers.importer import import_into

    script = Path(__file__).resolve().parents[2] / "samples/scripts/tp_gemm_gloo.py"
    steps, warmup = 3, 2
    cmd = [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(29400 + os.getpid() % 500),
           str(script), "--device", "cpu", "--steps", str(steps), "--warmup", str(warmup), "--m", "64",
           "--hidden", "256", "--ffn", "512"]  # fmt: skip
    run = capture(cmd, torch_profiler=True, ranks=plan_ranks(cmd), out=tmp_path / "run", timeout=240,
                  on_output=lambda s, b: None)  # fmt: skip
    assert run.status == "complete", run.manifest["incomplete_reason"]
    assert sorted(rank_files(run.raw_dir, "torch_trace", ".json.gz")) == [0, 1]
    assert import_into(run)["ranks"] == [0, 1]
    gemm = load_frames(run)["ranges"].filter(pl.col("range_kind") == "gemm")
    assert dict(gemm.group_by("rank").len().iter_rows()) == {0: 2 * (steps + warmup), 1: 2 * (steps + warmup)}
