"""Limits a user can reach: long names, SHOOTING_TOOL_TIMEOUT, a failed solve of the controller's guess.

Each is bad input (a one-line message, exit 2, nothing written) or a failed
solve (exit 1, nothing written), never a traceback.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import casadi as ca
import pytest

import shooting
from shooting._validate import MAX_NAME_LENGTH, MAX_PREFIX_LENGTH
from shooting.codegen import export_controller, export_integrator, toolchain
from support import needs_gcc


def _cli(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os
    return subprocess.run([sys.executable, "-m", "shooting.cli", *args], cwd=tmp, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def _one_line_error(proc: subprocess.CompletedProcess[str], status: int = 2) -> str:
    assert proc.returncode == status, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["integrator", "controller"])
@pytest.mark.parametrize("length", [MAX_NAME_LENGTH + 1, 260, 300])
def test_a_name_too_long_for_a_file_is_refused_before_any_work(tmp_path, command, length):
    # (was: OSError "File name too long", a traceback)
    proc = _cli(tmp_path, command, "--model", "vanderpol", "--name", "a" * length, "--out", "out", "-q")
    assert f"has {length} characters" in _one_line_error(proc)
    assert not (tmp_path / "out").exists()


@needs_gcc
def test_the_longest_names_are_written_and_compiled(tmp_path):
    # a model named with the longest identifier: its controller's files (NAME_mpc.c, libNAME_mpc.so in the
    # check) and its integrator's default name (cut to fit) all fit the file system
    x, u = ca.SX.sym("x"), ca.SX.sym("u")
    name = "m" * MAX_PREFIX_LENGTH
    model = shooting.Model(name, x, u, -x + u, x0=[1.0], dt=0.1)
    with pytest.raises(ValueError, match=rf"has {MAX_PREFIX_LENGTH + 1} characters"):
        shooting.Model(name + "m", x, u, -x + u)
    F = shooting.build_integrator(model, "rk4")
    assert len(F.name()) <= MAX_NAME_LENGTH
    assert export_integrator(F, tmp_path / "i", check=True).ok
    longest = shooting.build_integrator(model, "rk4", name="i" * MAX_NAME_LENGTH)
    assert export_integrator(longest, tmp_path / "j", check=True).ok
    assert (tmp_path / "j" / f"{'i' * MAX_NAME_LENGTH}.c").is_file()
    ocp = shooting.MultipleShootingOCP(model, 5, dt=0.1)
    with pytest.raises(ValueError, match=rf"has {MAX_PREFIX_LENGTH + 1} characters"):
        export_controller(ocp, tmp_path / "c", name="c" * (MAX_PREFIX_LENGTH + 1))
    report = export_controller(ocp, tmp_path / "c", name="c" * MAX_PREFIX_LENGTH, check=True, check_steps=5)
    assert report.ok and (tmp_path / "c" / f"{'c' * MAX_PREFIX_LENGTH}_mpc.c").is_file()


@pytest.mark.parametrize("value", ["nan", "-5", "0", "abc", "-inf"])
def test_a_bad_tool_timeout_is_one_line_and_exit_2(tmp_path, value):
    proc = _cli(tmp_path, "integrator", "--model", "vanderpol", "--check", "--out", "out", "-q",
                env={"SHOOTING_TOOL_TIMEOUT": value})
    assert "SHOOTING_TOOL_TIMEOUT" in _one_line_error(proc)
    assert not (tmp_path / "out").exists()


def test_tool_timeout_is_clamped_to_a_day(monkeypatch):
    for value in ("inf", "1e308", "1e309", "86401"):
        monkeypatch.setenv("SHOOTING_TOOL_TIMEOUT", value)
        assert toolchain.tool_timeout(600.0) == toolchain.MAX_TOOL_TIMEOUT == 86_400.0
    monkeypatch.setenv("SHOOTING_TOOL_TIMEOUT", "2.5")
    assert toolchain.tool_timeout(600.0) == 2.5
    monkeypatch.delenv("SHOOTING_TOOL_TIMEOUT")
    assert toolchain.tool_timeout(600.0) == 600.0


@needs_gcc
def test_an_infinite_tool_timeout_runs_the_check(tmp_path):
    # was: OverflowError from subprocess (exit 1 with a traceback)
    proc = _cli(tmp_path, "integrator", "--model", "vanderpol", "--check", "--out", "out", "-q",
                env={"SHOOTING_TOOL_TIMEOUT": "inf"})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out" / "vanderpol_rk4.c").is_file()


INFEASIBLE = '''
import casadi as ca
import shooting

def make_model():
    # x' = u with |u| <= 0.1 from x0 = 1 cannot reach x <= 0.5 within one interval: IPOPT fails
    x, u = ca.SX.sym("x"), ca.SX.sym("u")
    return shooting.Model("infeas", x, u, u, x0=[1.0], x_max=[0.5], u_min=[-0.1], u_max=[0.1], dt=0.1)
'''


def test_a_failed_solve_of_the_controllers_guess_is_exit_1_not_bad_input(tmp_path):
    (tmp_path / "infeas.py").write_text(INFEASIBLE)
    proc = _cli(tmp_path, "controller", "--model", "infeas.py", "--hard-x-bounds", "--out", "out", "-q")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "IPOPT did not solve the OCP" in proc.stderr and "nothing written" in proc.stderr
    assert not (tmp_path / "out").exists()
    model = shooting.load_model(str(tmp_path / "infeas.py"))
    report = export_controller(shooting.MultipleShootingOCP(model, 5, dt=0.1), tmp_path / "lib")
    assert not report.ok and not report.files and "IPOPT did not solve" in report.problems[0]
    assert not (tmp_path / "lib").exists()


def test_the_horizon_is_bounded_where_every_built_in_model_fits_in_2_gb(tmp_path):
    from shooting.mpc.problem import MAX_HORIZON
    assert shooting.OCPProblem(horizon=MAX_HORIZON, dt=0.1).horizon == MAX_HORIZON
    with pytest.raises(ValueError, match=r"horizon must be an integer in 1\.\.1000"):
        shooting.OCPProblem(horizon=MAX_HORIZON + 1, dt=0.1)
    for command in ("mpc", "controller"):
        proc = _cli(tmp_path, command, "--model", "cartpole", "--horizon", "1001", "--out", "out")
        assert "--horizon: expected an integer in 1..1000" in _one_line_error(proc)
