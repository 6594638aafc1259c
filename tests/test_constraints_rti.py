"""Nonlinear path constraints h(x, u, p) <= 0 and terminal constraints c(x_N, p) = 0 in the RTI and the C.

Truth: IPOPT on the same NLP (to 1e-12, no bound relaxation) for the solves
to convergence; for the closed loops, the Python RTI and the C run the same
iteration (the C's inputs equal the RTI's to rounding) and the constraint
values are computed from the trajectories here, with numpy.

The power-limited cart-pole: |F v| <= P (v the cart's velocity), two rows
F v - P <= 0 and -F v - P <= 0, nonlinear in (x, u) and active while the
cart is pushed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting import RTIController, simulate_closed_loop
from shooting.codegen import export_controller, load_controller
from support import needs_gcc

TIGHT = {"ipopt.tol": 1e-12, "ipopt.bound_relax_factor": 0.0, "ipopt.constr_viol_tol": 1e-12}
X0 = np.array([0.0, 0.8, 1.0, 0.0])  # leaning, the cart moving: the power limit binds at once


def _power(P: float):
    return lambda x, u, p: ca.vertcat(u[0] * x[2] - P, -u[0] * x[2] - P)


def _ocp(P: float = 30.0, **kw: object) -> shooting.MultipleShootingOCP:
    model = shooting.load_model("cartpole")
    return shooting.MultipleShootingOCP(model, 20, dt=0.05, Q=[10, 100, 0.1, 0.1], R=[0.01], u_min=[-80],
                                        u_max=[80], soft_x_bounds=True, path_constraints=_power(P),
                                        solver_options=TIGHT, **kw)


def _power_used(x: np.ndarray, u: np.ndarray) -> float:
    return float(np.max(np.abs(u[:, 0] * x[:len(u), 2])))


@pytest.mark.parametrize("soft", [False, True])
def test_rti_sqp_with_an_active_power_limit_reaches_ipopts_optimum(soft: bool) -> None:
    ocp = _ocp(soft_path_constraints=soft)
    truth = ocp.solve(X0)
    assert truth.success and _power_used(truth.x, truth.u) > 30.0 - 1e-6  # active
    res = RTIController(ocp, initialize_with_ipopt=False).solve(X0, max_iter=200)
    assert res.status == 0, res.message
    assert np.abs(res.u - truth.u).max() / (1 + np.abs(truth.u).max()) < 1e-6
    assert _power_used(res.x, res.u) <= 30.0 + 1e-8  # soft: the exact penalty (l1 = 1e3) keeps it exact


def test_rti_sqp_meets_a_terminal_constraint_like_ipopt() -> None:
    model = shooting.load_model("cartpole")
    ocp = shooting.MultipleShootingOCP(model, 30, dt=0.05, Q=[1, 1, 0.1, 0.1], R=[0.01], u_min=[-80], u_max=[80],
                                       terminal_constraints=lambda x, p: x[:2], solver_options=TIGHT)
    x0 = [0.1, 0.35, 0.0, 0.0]
    truth = ocp.solve(x0)
    res = RTIController(ocp, initialize_with_ipopt=False).solve(x0, max_iter=200)
    assert res.status == 0 and truth.success
    assert np.abs(res.x[-1, :2]).max() < 1e-9
    assert np.abs(res.u - truth.u).max() / (1 + np.abs(truth.u).max()) < 1e-6


def test_constraints_need_the_stage_qp() -> None:
    with pytest.raises(ValueError, match="riccati-ipm"):
        RTIController(_ocp(), qp_solver="qrqp")


@needs_gcc
@pytest.mark.parametrize("soft", [False, True])
def test_c_follows_the_rti_under_an_active_power_limit(soft: bool, tmp_path: Path) -> None:
    ocp = _ocp(P=8.0, soft_path_constraints=soft)
    report = export_controller(ocp, tmp_path / "c", x0=X0, check=True, check_steps=20)
    assert report.ok, report.problems
    ctl = load_controller(tmp_path / "c")
    c = simulate_closed_loop(ctl, X0, 30, progress=False)
    py = simulate_closed_loop(RTIController(ocp), X0, 30, progress=False)
    assert c.success.all() and py.success.all()
    np.testing.assert_allclose(c.u, py.u, atol=1e-8 * 160)  # 1e-8 of the input range
    # The same iterations (the first sample's SQP, then each QP from its shifted warm start): the same
    # method to rounding, multipliers of the path rows included.
    assert (c.iterations == py.iterations).all(), np.flatnonzero(c.iterations != py.iterations)
    assert _power_used(c.x, c.u) > 8.0 * 0.99  # the limit binds in the loop
    # The prediction holds the limit (hard), or exceeds it by no more than the exact penalty allows (soft: 0).
    assert ctl.x_pred is not None and ctl.u_pred is not None
    assert _power_used(ctl.x_pred, ctl.u_pred) <= 8.0 + 1e-7


@needs_gcc
def test_c_solve_with_constraints_reaches_ipopts_optimum(tmp_path: Path) -> None:
    ocp = _ocp()
    truth = ocp.solve(X0)
    assert export_controller(ocp, tmp_path / "c", x0=X0).ok
    ctl = load_controller(tmp_path / "c")
    ctl.reset(X0)
    res = ctl.solve(X0, max_iter=200)
    assert res.status == 0, res.message
    assert np.abs(res.u - truth.u).max() / (1 + np.abs(truth.u).max()) < 1e-6
    twin = RTIController(ocp, initialize_with_ipopt=False).solve(X0, max_iter=200)  # the same SQP
    assert abs(res.iterations - twin.iterations) <= 1


def test_cli_refuses_hard_path_constraints_without_any(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "shooting.cli", "controller", "--model", "pendulum",
                          "--hard-path-constraints", "--out", str(tmp_path / "c"), "-q", "--no-lint"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and "--hard-path-constraints has no effect" in run.stderr, run.stderr
