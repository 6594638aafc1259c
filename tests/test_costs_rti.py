"""General costs in the RTI and the C: nonlinear least squares (Gauss-Newton) and exact Hessians made convex.

Truth: IPOPT on the same NLP (exact Hessian, to 1e-12); the convexification
rule against numpy's eigenvalues; the C against its Python twin (the same
SQP: the same iterates to rounding).

The problem: the pendulum's tip (sin th, -cos th) tracked to the upright
position, an output rather than a state, as least squares; the same target
as an economic-looking cost 20 (1 - cos th) whose Hessian is indefinite for
|th| > pi/2 (convexified there).
"""

from __future__ import annotations

from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting import RTIController, least_squares, simulate_closed_loop
from shooting.codegen import export_controller, load_controller
from shooting.mpc.costs import CONVEXIFY_TAU, convexify
from support import needs_gcc

TIGHT = {"ipopt.tol": 1e-12, "ipopt.bound_relax_factor": 0.0}
UP = ca.DM([0.0, -1.0])


def _tip(x, u, p):
    return ca.vertcat(ca.sin(x[0]), -ca.cos(x[0])) - UP


def _tip_n(x, p):
    return ca.vertcat(ca.sin(x[0]), -ca.cos(x[0])) - UP


def _ocp(kind: str) -> shooting.MultipleShootingOCP:
    model = shooting.load_model("pendulum")
    if kind == "least squares":
        stage, terminal = least_squares(_tip, [10.0, 10.0]), least_squares(_tip_n, [10.0, 10.0])
    else:
        stage, terminal = (lambda x, u, p: 20 * (1 - ca.cos(x[0]))), (lambda x, p: 30 * (1 - ca.cos(x[0])))
    return shooting.MultipleShootingOCP(model, 40, dt=0.05, Q=[0.0, 0.1], R=[0.01], stage_cost=stage,
                                        terminal_cost=terminal, solver_options=TIGHT)


def test_least_squares_is_the_weighted_square_and_checks_its_input() -> None:
    x, u, p = ca.SX.sym("x", 2), ca.SX.sym("u"), ca.SX.sym("p", 0)
    cost = least_squares(_tip, [[2.0, 0.5], [0.5, 1.0]])
    f = ca.Function("f", [x, u], [cost(x, u, p)])
    r = np.array([np.sin(0.3), -np.cos(0.3) + 1.0])
    assert float(f([0.3, 0.0], 0.0)) == pytest.approx(r @ np.array([[2.0, 0.5], [0.5, 1.0]]) @ r, rel=1e-14)
    for weight, match in (([[1.0, 2.0], [0.0, 1.0]], "symmetric"), ([1.0, -1.0], "semidefinite"),
                          (np.ones((2, 3)), r"\(ny, ny\)")):
        with pytest.raises(ValueError, match=match):
            least_squares(_tip, weight)
    with pytest.raises(ValueError, match="column of 3"):
        least_squares(_tip, [1.0, 1.0, 1.0])(x, u, p)


def test_convexify_keeps_a_positive_definite_block_and_projects_an_indefinite_one() -> None:
    rng = np.random.default_rng(4)
    A = rng.standard_normal((5, 5))
    pd = A @ A.T + np.eye(5)
    kept, changed = convexify(pd)
    assert not changed and np.array_equal(kept, pd)
    # an indefinite block with known eigenvectors: only the negative eigenvalues move, to tau
    V, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    lam = np.array([-3.0, -1e-3, 0.5, 2.0, 7.0])
    indefinite = (V * lam) @ V.T
    projected, changed = convexify(indefinite)
    tau = CONVEXIFY_TAU["double"] * (1 + np.abs(indefinite).max())
    assert changed
    expected = (V * np.maximum(lam, tau)) @ V.T
    assert np.abs(projected - expected).max() <= 1e-14 * np.abs(expected).max()
    assert np.linalg.eigvalsh(projected).min() >= tau * (1 - 1e-6)
    # the change lives in the negative directions only: the positive eigenvectors' Rayleigh quotients stay
    for j in (2, 3, 4):
        assert V[:, j] @ projected @ V[:, j] == pytest.approx(lam[j], rel=1e-13)


@pytest.mark.parametrize("kind", ["least squares", "exact Hessian"])
@pytest.mark.parametrize("x0", [[0.5, 0.0], [2.0, 1.0]])
def test_rti_sqp_with_a_general_cost_reaches_ipopts_optimum(kind: str, x0: list[float]) -> None:
    ocp = _ocp(kind)
    truth = ocp.solve(x0)
    res = RTIController(ocp, initialize_with_ipopt=False).solve(x0, max_iter=300)
    assert truth.success and res.status == 0, res.message
    assert np.abs(res.u - truth.u).max() / (1 + np.abs(truth.u).max()) < 1e-6
    assert ocp.cost(res.x, res.u) == pytest.approx(truth.cost, rel=1e-10)


@needs_gcc
@pytest.mark.parametrize("kind", ["least squares", "exact Hessian"])
def test_c_with_a_general_cost_equals_ipopt_and_follows_the_rti(kind: str, tmp_path: Path) -> None:
    ocp = _ocp(kind)
    x0 = np.array([0.5, 0.0])
    assert export_controller(ocp, tmp_path / "c", x0=x0, check=True).ok
    ctl = load_controller(tmp_path / "c")
    start = [2.0, 1.0]  # far: the exact Hessian is indefinite there and is shifted
    ctl.reset(start)
    res = ctl.solve(start, max_iter=300)
    truth = ocp.solve(start)
    twin = RTIController(ocp, initialize_with_ipopt=False).solve(start, max_iter=300)
    assert res.status == 0 and abs(res.iterations - twin.iterations) <= 1
    assert np.abs(res.u - truth.u).max() / (1 + np.abs(truth.u).max()) < 1e-6
    ctl.reset()
    c = simulate_closed_loop(ctl, x0, 40, progress=False)
    py = simulate_closed_loop(RTIController(ocp), x0, 40, progress=False)
    assert c.success.all() and py.success.all()
    np.testing.assert_allclose(c.u, py.u, atol=1e-8 * 16)  # 1e-8 of the torque's range
    assert np.abs(c.iterations - py.iterations).max() <= 1


@needs_gcc
def test_c_least_squares_in_float(tmp_path: Path) -> None:
    ocp = _ocp("least squares")
    x0 = np.array([0.5, 0.0])
    assert export_controller(ocp, tmp_path / "c", x0=x0, real="float", check=True).ok
    ctl = load_controller(tmp_path / "c")
    ctl.reset(x0)
    res = ctl.solve(x0, max_iter=300)
    truth = ocp.solve(x0)
    assert res.status == 0
    # float stops at steps of 2e-5 of the trajectory's size (about 3 here): measured 7e-7
    assert np.abs(res.u - truth.u).max() / (1 + np.abs(truth.u).max()) < 1e-4
