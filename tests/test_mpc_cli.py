"""`shooting-codegen mpc`, run as users run it: a subprocess, its exit status, its files."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PNG = b"\x89PNG\r\n\x1a\n"
FILES = ["inputs.png", "solve_time.png", "states.png", "summary.json", "trajectory.csv", "trajectory.json"]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shooting.cli", "mpc", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("mpc")
    return cwd, run("--model", "cartpole", "--out", "d", "--sim-steps", "60", "-q", cwd=cwd)


def test_help(tmp_path):
    proc = run("--help", cwd=tmp_path)
    assert proc.returncode == 0 and "--x0" in proc.stdout and "--rti" in proc.stdout


def test_cartpole_swing_up(cartpole_run):
    cwd, proc = cartpole_run
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # -q: no progress lines, no bar
    assert "Solve_Succeeded" in proc.stdout and "error |x_K - x_ref|" in proc.stdout
    out = cwd / "d"
    assert sorted(p.name for p in out.iterdir()) == FILES
    assert sorted(p.name for p in cwd.iterdir()) == ["d"]  # no temporary directory left behind

    data = json.loads((out / "trajectory.json").read_text())
    K = 60
    assert len(data["t"]) == K + 1 and len(data["solve_time"]) == K
    assert len(data["x"]) == K + 1 and all(len(row) == 4 for row in data["x"])
    assert len(data["u"]) == K and all(len(row) == 1 for row in data["u"])
    x = np.array(data["x"])
    assert x[0, 1] == pytest.approx(np.pi)  # from hanging
    assert np.all(np.abs(x[-1]) < [0.05, 0.05, 0.1, 0.1])  # to upright at the origin
    assert np.all(np.abs(np.array(data["u"])) <= 80.0)

    rows = list(csv.reader((out / "trajectory.csv").open()))
    assert rows[0] == ["t [s]", "p [m]", "theta [rad]", "v [m/s]", "omega [rad/s]", "F [N]", "solve_time"]
    assert len(rows) == K + 2
    for name in ("states.png", "inputs.png", "solve_time.png"):
        assert (out / name).read_bytes()[:8] == PNG
    summary = json.loads((out / "summary.json").read_text())
    assert summary["command"] == "mpc" and summary["first_solve"]["success"] is True
    assert summary["scenario"]["sim_steps"] == K and summary["stats"]["success_rate"] == 1.0


def test_rerun_into_own_directory_and_force(cartpole_run, tmp_path):
    cwd, first = cartpole_run
    assert first.returncode == 0
    proc = run("--model", "vanderpol", "--out", "d", "--sim-steps", "5", "-q", "--rti", cwd=cwd)
    assert proc.returncode == 0, proc.stderr  # our own earlier output: replaced without --force
    assert json.loads((cwd / "d" / "summary.json").read_text())["controller"] == "rti"

    (tmp_path / "notes.txt").write_text("mine")
    proc = run("--model", "vanderpol", "--out", str(tmp_path), "--sim-steps", "3", "-q", "--force",
               "--x0=-1,0.5", "--noise", "0.01", "--seed", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FILES + ["notes.txt"])
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert json.loads((tmp_path / "trajectory.json").read_text())["x"][0] == [-1.0, 0.5]


@pytest.mark.parametrize("args, message", [
    (["--model", "cartpol"], "did you mean 'cartpole'"),
    (["--model", "cartpole", "--x0", "0,1,2"], "--x0 has 3 value(s) but model cartpole needs 4"),
    (["--model", "cartpole", "--x0", "0,pi,x,0"], "--x0 entry 3 is 'x'"),
    (["--model", "cartpole", "--x0", "0,nan,0,0"], "--x0 entry 2"),
    (["--model", "cartpole", "--method", "rk5"], "unknown tableau 'rk5'"),
    (["--model", "cartpole", "--horizon", "0"], "--horizon"),
])
def test_bad_input_is_one_line_exit_2(args, message, tmp_path):
    proc = run(*args, "--out", "d", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_foreign_directory_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "trajectory.json").write_text("someone else's")
    proc = run("--model", "cartpole", "--out", "d", cwd=tmp_path)
    assert proc.returncode == 2 and "not written by shooting" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run("--model", "cartpole", "--out", "d", "--force", cwd=tmp_path)
    assert proc.returncode == 2 and "refusing to overwrite" in proc.stderr
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["trajectory.json"]
    assert (tmp_path / "d" / "trajectory.json").read_text() == "someone else's"


def test_infeasible_first_solve_exits_1(tmp_path):
    # Cart at p = 3 m, outside |p| <= 2 m: the first OCP is infeasible.
    proc = run("--model", "cartpole", "--x0", "3,0,0,0", "--horizon", "5", "--out", "d", "-q", cwd=tmp_path)
    assert proc.returncode == 1 and "first OCP solve failed" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_stops_the_run_writes_nothing_and_exits_130(tmp_path):
    """SIGINT during the closed loop (inside IPOPT most of the time): exit 130, no output directory."""
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "shooting.cli", "mpc", "--model", "cartpole", "--sim-steps",
                             "100000", "--out", "out"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = ""
    while "closed loop:" not in seen:  # the progress line printed as the closed loop starts
        line = proc.stderr.readline()
        assert line, f"the run ended before its closed loop: {seen}"
        seen += line
    time.sleep(2.0)  # well inside the loop (about 40 solves)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, seen + err
    assert "interrupted" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_interrupt_inside_a_c_extension_is_still_an_interrupt(tmp_path, monkeypatch, capsys):
    """A Ctrl-C landing inside CasADi's conversion of a result surfaces as SystemError caused by
    KeyboardInterrupt (seen in CI): exit 130 and "interrupted", no traceback; other errors still raise."""
    from shooting import cli

    def interrupted(_args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as err:
            raise SystemError("<function DM.__array__> returned a result with an exception set") from err

    monkeypatch.setattr(cli, "cmd_list", lambda args: interrupted(args))
    assert cli.main(["list"]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err

    def broken(args):
        raise SystemError("a real bug")

    monkeypatch.setattr(cli, "cmd_list", broken)
    with pytest.raises(SystemError, match="a real bug"):
        cli.main(["list"])
