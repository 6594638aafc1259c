"""Silent numerics: weights that overflow are refused, a non-finite step or input is a failure, never a success.

Independent truths: the RTI with a huge but admissible slack weight on slacks
that stay zero equals the RTI with the default weight (the slack term is
inactive); a DAE whose dg/dz is singular at x = 2 (g = (x - 2) z - 1) has no
finite step there, so every controller must report failure there and recover
elsewhere; the model equations at the nominal point are evaluated by hand.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.codegen import export_controller


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shooting.cli", *args], cwd=tmp, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("option, value", [("slack_l2", 1e300), ("slack_l1", 1e160), ("R_delta", [1e300]),
                                           ("Q", [1e155, 1.0]), ("R", [np.inf]), ("Q_terminal", [1.0, 2e150])])
def test_weights_that_overflow_double_are_refused_naming_the_option(option, value):
    model = shooting.load_model("pendulum")
    scenario = shooting.default_scenario(model)
    with pytest.raises(ValueError, match=rf"^{option} "):
        shooting.build_ocp(scenario.with_changes(**{option: value}, soft_x_bounds=True), model)


def test_the_largest_admissible_weight_gives_the_same_inputs_as_the_default():
    # Pendulum swing-up: |omega| <= 12.6 never binds, so the soft bounds' slacks stay zero and their weight,
    # 1e2 or 1e150, cannot change the inputs (before the bound, 1e160 gave u = NaN with success = True).
    model = shooting.load_model("pendulum")
    base = shooting.default_scenario(model).with_changes(soft_x_bounds=True)
    runs = []
    for weight in (1e2, 1e150):
        ocp = shooting.build_ocp(base.with_changes(slack_l2=weight), model)
        traj = shooting.simulate_closed_loop(shooting.RTIController(ocp), model.x0, 15, progress=False)
        assert traj.success.all() and np.isfinite(traj.u).all()
        runs.append(traj.u)
    np.testing.assert_allclose(runs[1], runs[0], atol=1e-8)


def test_float_exports_have_the_tighter_single_precision_bound(tmp_path):
    model = shooting.load_model("pendulum")
    ocp = shooting.build_ocp(shooting.default_scenario(model).with_changes(soft_x_bounds=True, slack_l2=1e20), model)
    with pytest.raises(ValueError, match=r"^slack_l2 has a weight of 1e\+20: a float controller takes weights within"):
        export_controller(ocp, tmp_path / "f", real="float")
    assert not (tmp_path / "f").exists()


@pytest.mark.parametrize("args, option", [(["--slack-l2", "1e300", "--check"], "slack_l2"),
                                          (["--R-delta", "1e300"], "R_delta"),
                                          (["--slack-l2", "1e20", "--real", "float"], "slack_l2")])
def test_cli_refuses_overflowing_weights_in_one_line(tmp_path, args, option):
    proc = _cli(tmp_path, "controller", "--model", "pendulum", "--out", "out", "-q", *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"shooting-codegen: error: {option} ")
    assert not (tmp_path / "out").exists()


def singular_dae() -> shooting.Model:
    """x' = -x + z + u, 0 = (x - 2) z - 1: dg/dz = x - 2 vanishes at x = 2 (nominal x0 = 0 is fine)."""
    x, z, u = ca.SX.sym("x"), ca.SX.sym("z"), ca.SX.sym("u")
    return shooting.Model("sing", x, u, -x + z + u, z=z, alg=(x - 2) * z - 1, x0=[0.0], z0=[-0.5],
                          u_min=[-1.0], u_max=[1.0], dt=0.1)


def test_a_non_finite_step_is_a_failure_for_the_ocp_the_rti_and_the_mpc_controller():
    model = singular_dae()
    F = shooting.build_integrator(model, "rk4", 1)
    assert not np.isfinite(np.array(F(2.0, 0.0, [], 0.0, 0.1, -0.5)[0])).all()  # the step itself cannot raise
    ocp = shooting.MultipleShootingOCP(model, 5, dt=0.1)
    assert not ocp.solve([2.0]).success
    mpc = shooting.MPCController(ocp).step([2.0], 0.0)
    assert not mpc.success and np.isfinite(mpc.u).all()
    rti = shooting.RTIController(ocp)
    first = rti.step([2.0], 0.0)  # linearised at x = 2: the QP's data are NaN (was: RuntimeError from qrqp)
    assert not first.success and np.isfinite(first.u).all() and "non-finite QP data" in first.status
    again = rti.step([0.1], 0.1)  # it starts afresh from a regular state
    assert again.success and np.isfinite(again.u).all()


class _NaNController:
    """A controller of one's own that breaks at its third sample."""

    def __init__(self, model: shooting.Model) -> None:
        self.model, self.dt, self.k = model, 0.1, 0

    def step(self, x, t):
        self.k += 1
        u = np.array([np.nan if self.k == 3 else 0.0])
        return shooting.ControlStep(u=u, solve_time=0.0, success=True, status="ok", iterations=1)


def test_a_non_finite_input_stops_the_closed_loop_as_a_failure():
    model = shooting.load_model("vanderpol")
    traj = shooting.simulate_closed_loop(_NaNController(model), model.x0, 10, progress=False)
    assert traj.steps == 2 and "non-finite input" in traj.stopped and np.isfinite(traj.x).all()


def test_model_equations_not_finite_at_the_nominal_point_are_refused_by_name():
    x, z, u = ca.SX.sym("x"), ca.SX.sym("z"), ca.SX.sym("u")
    with pytest.raises(ValueError, match=r"alg\[0\] \(b\) = nan at the nominal point \(x0, z0, u0, p0, t = 0\)"):
        shooting.Model("d", x, u, -x + z, z=z, alg=z - ca.sqrt(x - 2), x0=[1.0], state_names=["a"],
                       algebraic_names=["b"])
    with pytest.raises(ValueError, match=r"xdot\[1\] \(w\) = inf at the nominal point \(x0, u0, p0, t = 0\)"):
        y = ca.SX.sym("y", 2)
        shooting.Model("o", y, u, ca.vertcat(y[1], 1 / y[0]), state_names=["v", "w"])
    # finite at x0 = 3: accepted, and the same expression is evaluated right
    m = shooting.Model("d", x, u, -x + z, z=z, alg=z - ca.sqrt(x - 2), x0=[3.0], z0=[1.0])
    assert float(m.g(m.x0, m.u0, m.p0, 0.0, m.z0)) == 0.0


@pytest.mark.parametrize("names, clash", [
    (dict(state_names=["a"], algebraic_names=["a"]), "state_names[0] and algebraic_names[0]"),
    (dict(state_names=["a"], input_names=["a"]), "state_names[0] and input_names[0]"),
    (dict(input_names=["k"], param_names=["k"]), "input_names[0] and param_names[0]"),
    (dict(param_names=["k"], algebraic_names=["k"]), "param_names[0] and algebraic_names[0]"),
])
def test_one_name_for_two_quantities_is_refused(names, clash):
    x, z, u, p = ca.SX.sym("x"), ca.SX.sym("z"), ca.SX.sym("u"), ca.SX.sym("p")
    with pytest.raises(ValueError, match="is given to both " + re.escape(clash)):
        shooting.Model("d", x, u, -p * x + z + u, p, z=z, alg=z - x, x0=[1.0], z0=[1.0], p0=[1.0], **names)
