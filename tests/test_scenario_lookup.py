"""A model file named like a built-in gets its own scenario or the generic one, never the built-in's (issue 14.6)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import shooting

USER_MODEL = textwrap.dedent("""
    import casadi as ca
    import shooting

    def make_model():
        x = ca.SX.sym("x", 2)
        u = ca.SX.sym("u")
        return shooting.Model("{name}", x, u, ca.vertcat(x[1], -ca.sin(x[0]) - 0.1 * x[1] + u),
                              state_names=["angle", "rate"], input_names=["torque"], x0=[0.5, 0.0],
                              u_min=[-2.0], u_max=[2.0], dt=0.1)
""")

OWN_SCENARIO = textwrap.dedent("""

    def scenario(model):
        from shooting.mpc.scenarios import regulation
        return regulation(model).with_changes(horizon=7, sim_steps=3, description="the file's own scenario")
""")


@pytest.mark.parametrize("name", shooting.model_names())
def test_a_user_model_named_like_a_builtin_gets_the_generic_scenario(name, tmp_path):
    path = tmp_path / f"{name}.py"
    path.write_text(USER_MODEL.format(name=name))
    model = shooting.load_model(str(path))
    scenario = shooting.default_scenario(model)
    builtin = shooting.default_scenario(shooting.load_model(name))
    assert scenario.description.startswith(f"regulation of {name}"), scenario.description
    assert scenario.description != builtin.description
    assert shooting.scenario_names(model) == ["default"]
    for other in shooting.scenario_names(name)[1:]:
        with pytest.raises(ValueError, match=f"has no scenario '{other}'"):
            shooting.named_scenario(model, other)


def test_a_user_model_file_keeps_its_own_scenario(tmp_path):
    path = tmp_path / "cartpole.py"
    path.write_text(USER_MODEL.format(name="cartpole") + OWN_SCENARIO)
    scenario = shooting.default_scenario(shooting.load_model(str(path)))
    assert scenario.description == "the file's own scenario" and scenario.problem.horizon == 7


def test_builtins_keep_their_scenarios_however_they_are_made():
    import shooting.models.cartpole as cartpole

    swing_up = shooting.default_scenario("cartpole").description
    assert shooting.default_scenario(cartpole.make_model()).description == swing_up
    assert shooting.default_scenario(cartpole.make_model(M=2.0)).description == swing_up  # other parameters
    assert shooting.default_scenario(shooting.load_model("cartpole", M=2.0)).description == swing_up
    assert shooting.scenario_names(cartpole.make_model()) == ["default", "tracking"]
    assert shooting.named_scenario(cartpole.make_model(), "tracking").reference is not None


def test_cli_mpc_with_a_file_named_like_a_builtin_runs_the_files_problem(tmp_path):
    (tmp_path / "dip.py").write_text(USER_MODEL.format(name="dip"))
    proc = subprocess.run([sys.executable, "-m", "shooting.cli", "mpc", "--model", "dip.py", "--sim-steps", "3",
                           "--out", "out", "-q"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    scenario = json.loads((tmp_path / "out" / "summary.json").read_text())["scenario"]
    # The built-in dip's scenario: N = 50, dt = 0.02, 200 samples; the generic one uses the file's dt.
    assert (scenario["dt"], scenario["horizon"], scenario["sim_steps"]) == (0.1, 20, 3), scenario
    assert scenario["description"].startswith("regulation of dip"), scenario["description"]
