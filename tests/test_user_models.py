"""User models from the CLI: factory parameters, their own scenario, generic regulation, time units."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shooting

HEATER = '''
import casadi as ca
import numpy as np
import shooting
from shooting.mpc import OCPProblem, QuadraticCost, Scenario


def make_model(k=0.2, T_amb=290.0):
    """A room heated by a heater: T' = -k (T - T_amb) + u / 10, T in K, t in minutes."""
    T, u = ca.SX.sym("T"), ca.SX.sym("u")
    return shooting.Model("heater", T, u, -k * (T - T_amb) + u / 10, x0=[295.0], x_min=[280.0], x_max=[330.0],
                          u_min=[0.0], u_max=[100.0], dt=0.5, time_unit="min", state_names=["T"],
                          input_names=["power"])
'''

SCENARIO = '''

def scenario(model):
    return Scenario(model=model.name,
                    problem=OCPProblem(horizon=12, dt=0.5, cost=QuadraticCost(Q=[1.0], R=[1e-4], x_ref=[310.0],
                                                                              u_ref=[0.0])),
                    x0=model.x0, sim_steps=30, description="heat up to 310 K (from the model file)")
'''


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shooting.cli", *args], cwd=tmp, capture_output=True, text=True,
                          timeout=300)


def test_model_file_scenario_and_factory_parameters(tmp_path):
    (tmp_path / "heater.py").write_text(HEATER + SCENARIO)
    proc = _cli(tmp_path, "mpc", "--model", "heater.py", "--model-arg", "k=0.3", "--model-arg", "T_amb=285",
                "--out", "run", "-q", "--no-lint")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["scenario"]["description"] == "heat up to 310 K (from the model file)"
    assert summary["scenario"]["x_ref"] == [310.0] and summary["scenario"]["horizon"] == 12
    assert "dt = 0.5 min" in proc.stdout and "(15 min)" in proc.stdout  # the model's unit of time
    x = np.array(json.loads((tmp_path / "run" / "trajectory.json").read_text())["x"])
    assert abs(x[-1, 0] - 310.0) < 1.0
    # k reached the factory: with k = 0.3 and T_amb = 285, holding 310 K takes 75 W.
    u = np.array(json.loads((tmp_path / "run" / "trajectory.json").read_text())["u"])
    assert abs(u[-1, 0] - 10 * 0.3 * (310.0 - 285.0)) < 3.0


def test_generic_scenario_regulates_inside_the_bounds(tmp_path):
    (tmp_path / "heater.py").write_text(HEATER)  # no scenario function
    model = shooting.load_model(str(tmp_path / "heater.py"))
    scenario = shooting.default_scenario(model)
    assert scenario.problem.cost.x_ref.tolist() == [280.0]  # zero clipped into [280, 330] K, not 0 K
    proc = _cli(tmp_path, "mpc", "--model", "heater.py", "--out", "run", "-q", "--sim-steps", "40")
    assert proc.returncode == 0, proc.stderr
    x = np.array(json.loads((tmp_path / "run" / "trajectory.json").read_text())["x"])
    assert x.min() >= 280.0 - 1e-6 and abs(x[-1, 0] - 290.0) < 1.0  # unheated, the room cools to T_amb


@pytest.mark.parametrize("args, message", [
    (["--x-ref", "300,1"], "--x-ref has 2 value(s) but model heater needs 1"),
    (["--model-arg", "k"], "--model-arg 'k' is not NAME=VALUE"),
    (["--model-arg", "kk=1"], "unknown parameter 'kk'"),
])
def test_bad_references_and_model_args_are_one_line_errors(tmp_path, args, message):
    (tmp_path / "heater.py").write_text(HEATER)
    proc = _cli(tmp_path, "mpc", "--model", "heater.py", "--out", "run", *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
