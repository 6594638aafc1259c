"""The input-rate penalty R_delta on u_k - u_{k-1} (u_{-1} = u_prev) in the OCP, the RTI, the closed loop and the CLI.

Independent truth: on the double integrator (pos' = vel, vel' = u) RK4 is
exact, x+ = [[1, dt], [0, 1]] x + [dt^2/2, dt] u, so the OCP is an
unconstrained linear-quadratic problem whose optimum is one linear system,
condensed and solved here in numpy. On a first-order lag x' = -a x + b u the
RK4 map is written from its stability polynomial, and the closed loop's
steady state follows from the MPC's affine feedback law.
"""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting import MPCController, RTIController, simulate_closed_loop
from shooting.cli import main

N, DT = 10, 0.1
Q, R, RD, QF = np.diag([4.0, 0.5]), 0.1, 2.0, np.diag([20.0, 2.0])
FREE = dict(x_min=-np.inf, x_max=np.inf, u_min=-np.inf, u_max=np.inf, solver_options={"ipopt.tol": 1e-12})


@pytest.fixture(scope="module")
def double_integrator() -> shooting.Model:
    x, u = ca.SX.sym("x", 2), ca.SX.sym("u")
    return shooting.Model("double_integrator", x, u, ca.vertcat(x[1], u), x0=[1.0, 0.0])


def _condensed(rd: float, r: float = R):
    """H U = G x0 + g u_prev: the optimality condition of the condensed LQ problem with rate penalty."""
    Ad, Bd = np.array([[1.0, DT], [0.0, 1.0]]), np.array([DT ** 2 / 2, DT])
    Phi = np.vstack([np.linalg.matrix_power(Ad, k) for k in range(N + 1)])  # x_k = Ad^k x0 + sum Ad^(k-1-j) Bd u_j
    Gam = np.zeros((2 * (N + 1), N))
    for k in range(1, N + 1):
        for j in range(k):
            Gam[2 * k:2 * k + 2, j] = np.linalg.matrix_power(Ad, k - 1 - j) @ Bd
    W = np.zeros((2 * (N + 1), 2 * (N + 1)))
    for k in range(N + 1):
        W[2 * k:2 * k + 2, 2 * k:2 * k + 2] = QF if k == N else Q
    D = np.eye(N) - np.eye(N, k=-1)  # (D U)_k = u_k - u_{k-1}, u_{-1} enters through e_0
    e0 = np.eye(N)[:, 0]
    H = Gam.T @ W @ Gam + r * np.eye(N) + rd * D.T @ D
    return H, -Gam.T @ W @ Phi, rd * D.T @ e0


def _lq(x0, u_prev: float, rd: float = RD, r: float = R) -> np.ndarray:
    H, G, g = _condensed(rd, r)
    return np.linalg.solve(H, G @ np.asarray(x0, dtype=float) + g * u_prev)


def test_ocp_equals_the_lq_solution_with_rate_penalty_and_u_prev_moves_it_as_predicted(double_integrator):
    ocp = shooting.MultipleShootingOCP(double_integrator, N, dt=DT, Q=Q, R=[R], R_delta=[RD], Q_terminal=QF, **FREE)
    x0 = [1.0, -0.5]
    a, b = ocp.solve(x0), ocp.solve(x0, u_prev=[3.0])  # u_prev defaults to zero
    np.testing.assert_allclose(a.u.ravel(), _lq(x0, 0.0), atol=1e-8)
    np.testing.assert_allclose(b.u.ravel(), _lq(x0, 3.0), atol=1e-8)
    # The optimum is affine in u_prev: H dU = g du_prev, here 3 g.
    H, _, g = _condensed(RD)
    np.testing.assert_allclose((b.u - a.u).ravel(), np.linalg.solve(H, 3.0 * g), atol=1e-8)
    assert b.u[0, 0] - a.u[0, 0] > 0.1  # and it matters: u_0 moves towards u_prev
    without = _lq(x0, 0.0, rd=0.0)
    assert np.abs(without - a.u.ravel()).max() > 0.1  # the penalty changes the optimum
    assert ocp.cost(b.x, b.u, u_prev=[3.0]) == pytest.approx(b.cost, rel=1e-12)


@pytest.mark.parametrize("kind", ["rti riccati-ipm", "rti riccati-ipm-numpy", "rti qrqp", "rti osqp", "mpc"])
def test_controllers_solve_the_same_problem_and_remember_their_last_input(double_integrator, kind):
    # (every QP solver of the RTI: the sparse ones build the rate penalty's blocks on their own path)
    ocp = shooting.MultipleShootingOCP(double_integrator, N, dt=DT, Q=Q, R=[R], R_delta=[RD], Q_terminal=QF, **FREE)
    # The RTI's QP is exact for a linear-quadratic problem: its inputs are the optimum's from any guess.
    ctrl = RTIController(ocp, initialize_with_ipopt=False, qp_solver=kind.split()[1]) if kind.startswith("rti") \
        else MPCController(ocp)
    tol = 1e-5 if kind.endswith("osqp") else 1e-8  # (OSQP's ADMM stops at its eps_abs/eps_rel, 1e-6 here)
    first = ctrl.step([1.0, -0.5], 0.0)  # after construction (a reset): u_prev = 0, as the OCP's default
    assert first.u[0] == pytest.approx(_lq([1.0, -0.5], 0.0)[0], abs=tol)
    second = ctrl.step([0.9, -0.7], DT)  # u_prev = the input it applied
    assert second.u[0] == pytest.approx(_lq([0.9, -0.7], first.u[0])[0], abs=tol)
    given = ctrl.step([0.8, -0.6], 2 * DT, u_prev=[-4.0])
    assert given.u[0] == pytest.approx(_lq([0.8, -0.6], -4.0)[0], abs=tol)
    ctrl.reset()
    assert ctrl.step([1.0, -0.5], 0.0).u[0] == pytest.approx(first.u[0], abs=tol)


def test_closed_loop_passes_the_applied_input(double_integrator):
    ocp = shooting.MultipleShootingOCP(double_integrator, N, dt=DT, Q=Q, R=[R], R_delta=[RD], Q_terminal=QF, **FREE)
    for controller in (MPCController(ocp), RTIController(ocp)):
        traj = simulate_closed_loop(controller, [1.0, -0.5], 6, plant_method="rk4", plant_steps=1, progress=False)
        for k in range(6):  # each sample: the LQ optimum from its state with u_prev = the input applied before
            assert traj.u[k, 0] == pytest.approx(_lq(traj.x[k], traj.u[k - 1, 0] if k else 0.0)[0], abs=1e-7)


def test_zero_rate_penalty_is_the_problem_without_it(double_integrator):
    kw = dict(dt=DT, Q=Q, R=[R], Q_terminal=QF, **FREE)
    plain = shooting.MultipleShootingOCP(double_integrator, N, **kw)
    zero = shooting.MultipleShootingOCP(double_integrator, N, R_delta=np.zeros((1, 1)), **kw)
    assert not plain.R_delta.any()
    a, b, c = plain.solve([1.0, -0.5]), zero.solve([1.0, -0.5]), zero.solve([1.0, -0.5], u_prev=[5.0])
    np.testing.assert_array_equal(a.w, b.w)
    np.testing.assert_array_equal(b.w, c.w)  # u_prev means nothing without the penalty
    np.testing.assert_allclose(a.u.ravel(), _lq([1.0, -0.5], 0.0, rd=0.0), atol=1e-8)


def test_rti_fixed_point_is_the_nonlinear_optimum_with_rate_penalty():
    model = shooting.load_model("pendulum")
    ocp = shooting.MultipleShootingOCP(model, 15, dt=0.05, Q=[10.0, 0.1], R=[0.01], R_delta=[0.2],
                                       solver_options={"ipopt.tol": 1e-12})
    x0, u_prev = [0.6, -0.4], [3.0]
    sol = ocp.solve(x0, u_prev=u_prev)
    # Started at IPOPT's optimum of the same data, the Gauss-Newton QP's solution is that optimum.
    step = RTIController(ocp).step(x0, 0.0, u_prev=u_prev)
    assert step.u[0] == pytest.approx(sol.u[0, 0], abs=1e-7)
    assert abs(sol.u[0, 0] - ocp.solve(x0).u[0, 0]) > 0.1  # u_prev matters here


def _lag_rk4(a: float, b: float):
    """The RK4 map of x' = -a x + b u over DT: x+ = R(z) x + DT b P(z) u, z = -a DT, R(z) = 1 + z P(z)."""
    z = -a * DT
    P = 1 + z / 2 + z ** 2 / 6 + z ** 3 / 24
    return 1 + z * P, DT * b * P


def test_rate_penalty_removes_the_offset_an_input_weight_causes():
    """Holding x at 1 takes u = a/b: an input weight R (u_ref = 0) settles where the MPC law predicts, short of
    the target; with R = 0 and R_delta > 0 a constant input costs nothing and the loop settles on the target."""
    a, b, q, r = 1.0, 2.0, 1.0, 0.5
    x, u = ca.SX.sym("x"), ca.SX.sym("u")
    lag = shooting.Model("lag", x, u, -a * x + b * u, x0=[0.0])
    Ad, Bd = _lag_rk4(a, b)
    # MPC with R: U = argmin sum_{k<N} q (x_k - 1)^2 + r u_k^2 + q (x_N - 1)^2, u_0 = K x0 + k0.
    Gam = np.array([[Bd * Ad ** (k - 1 - j) if j < k else 0.0 for j in range(N)] for k in range(N + 1)])
    Phi = Ad ** np.arange(N + 1)
    H = q * Gam.T @ Gam + r * np.eye(N)
    K = -np.linalg.solve(H, q * Gam.T @ Phi)[0]
    k0 = np.linalg.solve(H, q * Gam.T @ np.ones(N + 1))[0]
    x_inf = Bd * k0 / (1 - Ad - Bd * K)  # the closed loop's fixed point x = Ad x + Bd (K x + k0)
    assert 1 - x_inf > 0.05  # a visible offset
    common = dict(dt=DT, Q=[q], Q_terminal=[q], x_ref=[1.0], u_ref=[0.0], **FREE)
    weighted = shooting.MultipleShootingOCP(lag, N, R=[r], **common)
    rated = shooting.MultipleShootingOCP(lag, N, R=[0.0], R_delta=[r], **common)
    for ocp, target in ((weighted, x_inf), (rated, 1.0)):
        traj = simulate_closed_loop(RTIController(ocp), [0.0], 80, plant_method="rk4", plant_steps=1,
                                    progress=False)
        assert traj.x[-1, 0] == pytest.approx(target, abs=1e-6)
    assert traj.u[-1, 0] == pytest.approx((1 - Ad) / Bd, rel=1e-6)  # the input that holds x = 1 (~ a / b)


def test_pendulum_hold_scenario_settles_without_offset():
    scenario = shooting.named_scenario("pendulum", "hold")
    assert scenario.problem.cost.R_delta[0, 0] > 0 and scenario.problem.cost.R[0, 0] == 0
    assert scenario.to_dict()["R_delta"] == [[0.05]]
    run = simulate_closed_loop(RTIController(shooting.build_ocp(scenario)), scenario.x0, scenario.sim_steps,
                               progress=False)
    assert run.final_error() < 1e-4
    with_r = scenario.with_changes(R=[0.05], R_delta=None)
    offset = simulate_closed_loop(RTIController(shooting.build_ocp(with_r)), scenario.x0, scenario.sim_steps,
                                  progress=False)
    assert offset.final_error() > 0.1  # measured 0.19 rad


def test_bad_rate_penalties_are_refused(double_integrator, capsys, tmp_path):
    with pytest.raises(ValueError, match="R_delta must be positive semi-definite"):
        shooting.QuadraticCost(R_delta=[[1.0, 2.0], [2.0, 1.0]])
    with pytest.raises(ValueError, match=r"R_delta must be a finite \(1, 1\) matrix or 1 diagonal entries"):
        shooting.MultipleShootingOCP(double_integrator, N, dt=DT, R_delta=[1.0, 2.0])
    ocp = shooting.MultipleShootingOCP(double_integrator, N, dt=DT, R_delta=[1.0])
    with pytest.raises(ValueError, match="u_prev has 2 entries but needs 1"):
        ocp.solve([0.0, 0.0], u_prev=[1.0, 2.0])
    for bad, message in (("abc", "--R-delta entry 1 is 'abc', not a number"),
                         ("-1", "--R-delta entries are the diagonal of a positive semi-definite weight"),
                         ("1,2", "--R-delta has 2 value(s) but model cartpole needs 1")):
        assert main(["mpc", "--model", "cartpole", "--R-delta", bad, "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert main(["controller", "--model", "cartpole", "--R-delta", "-0.1", "--out", str(tmp_path / "c")]) == 2
    assert "--R-delta entries are the diagonal" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "c").exists()
