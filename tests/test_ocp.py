"""MultipleShootingOCP against an independent casadi.Opti formulation, and its promises."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest

import shooting

Q = np.diag([1e3, 1e3, 1e-2, 1e-2])
R = np.diag([1e-2])
N, DT = 20, 0.05


@pytest.fixture(scope="module")
def cartpole():
    return shooting.load_model("cartpole")


@pytest.fixture(scope="module")
def ocp(cartpole):
    return shooting.MultipleShootingOCP(cartpole, horizon=N, dt=DT, method="rk4", steps=1, Q=Q, R=R, Q_terminal=Q)


@pytest.fixture(scope="module")
def solution(ocp, cartpole):
    return ocp.solve(cartpole.x0)


def opti_reference(model: shooting.Model) -> tuple[float, np.ndarray, np.ndarray]:
    """The same problem written directly with casadi.Opti and an inline RK4 step."""
    opti = ca.Opti()
    X = opti.variable(model.nx, N + 1)
    U = opti.variable(model.nu, N)

    def f(x, u):
        return model.f(x, u, ca.DM(0, 1), 0)

    cost = 0
    for k in range(N):
        x, u = X[:, k], U[:, k]
        k1 = f(x, u)
        k2 = f(x + DT / 2 * k1, u)
        k3 = f(x + DT / 2 * k2, u)
        k4 = f(x + DT * k3, u)
        opti.subject_to(X[:, k + 1] == x + DT / 6 * (k1 + 2 * k2 + 2 * k3 + k4))
        opti.subject_to(opti.bounded(-80, U[:, k], 80))
        opti.subject_to(opti.bounded(-2, X[0, k + 1], 2))
        cost += ca.bilin(ca.DM(Q), x, x) + ca.bilin(ca.DM(R), u, u)
    cost += ca.bilin(ca.DM(Q), X[:, N], X[:, N])
    opti.subject_to(X[:, 0] == model.x0)
    opti.minimize(cost)
    opti.set_initial(X, np.tile(model.x0[:, None], (1, N + 1)))
    opti.solver("ipopt", {"print_time": False}, {"print_level": 0, "sb": "yes", "tol": 1e-10})
    sol = opti.solve()
    return float(sol.value(cost)), np.array(sol.value(X)).T, np.array(sol.value(U)).reshape(N, -1)


def test_optimum_matches_opti(solution, cartpole):
    cost, X, U = opti_reference(cartpole)
    assert solution.success, solution.status
    assert solution.cost == pytest.approx(cost, rel=1e-6)
    np.testing.assert_allclose(solution.x, X, atol=1e-4)
    np.testing.assert_allclose(solution.u, U, atol=1e-3)


def test_solution_satisfies_dynamics_and_bounds(solution, cartpole):
    F = shooting.build_integrator(cartpole, "rk4", 1, "none")
    for k in range(N):
        x_next = np.array(F(x=solution.x[k], u=solution.u[k], dt=DT)["x_next"]).ravel()
        np.testing.assert_allclose(solution.x[k + 1], x_next, atol=1e-8)
    np.testing.assert_allclose(solution.x[0], cartpole.x0, atol=1e-12)
    tol = 1e-6
    assert np.all(solution.u <= cartpole.u_max + tol) and np.all(solution.u >= cartpole.u_min - tol)
    assert np.all(np.abs(solution.x[1:, 0]) <= 2 + tol)
    assert solution.max_violation < 1e-6
    assert solution.x.shape == (N + 1, 4) and solution.u.shape == (N, 1)


def test_swing_up_reaches_upright(solution):
    """From hanging (theta = pi) the optimal plan ends near upright and at rest."""
    assert abs(solution.x[-1, 1]) < 0.1 and abs(solution.x[-1, 3]) < 0.5
    assert np.max(np.abs(solution.u)) == pytest.approx(80, rel=1e-6)  # the force bound is active


def test_warm_start_cuts_iterations(ocp, solution, cartpole):
    again = ocp.solve(cartpole.x0, warm_start=solution)
    assert again.success and again.iterations <= 2 < solution.iterations
    assert again.cost == pytest.approx(solution.cost, rel=1e-8)
    F = shooting.build_integrator(cartpole, "rk4", 10, "none")
    x1 = np.array(F(x=cartpole.x0, u=solution.u[0], dt=DT)["x_next"]).ravel()
    cold = ocp.solve(x1)
    warm = ocp.solve(x1, warm_start=solution.shifted())
    assert warm.success and cold.success
    assert warm.iterations < cold.iterations / 3
    assert warm.cost == pytest.approx(cold.cost, rel=1e-6)


def test_shifted_moves_one_stage(solution):
    s = solution.shifted()
    np.testing.assert_array_equal(s.x[:-1], solution.x[1:])
    np.testing.assert_array_equal(s.u[:-1], solution.u[1:])
    np.testing.assert_array_equal(s.x[-1], solution.x[-1])
    np.testing.assert_array_equal(s.dynamics_multipliers[:-1], solution.dynamics_multipliers[1:])


def test_infeasible_problem_returns_status_not_exception(cartpole):
    """Bounds that contradict the initial state: success False with IPOPT's own status."""
    ocp = shooting.MultipleShootingOCP(cartpole, horizon=10, dt=DT, Q=Q, R=R,
                                       x_min=[-2, -0.1, -1, -1], x_max=[2, 0.1, 1, 1])
    sol = ocp.solve(cartpole.x0)  # theta = pi cannot reach |theta| <= 0.1 in one interval
    assert not sol.success
    assert sol.status in ("Infeasible_Problem_Detected", "Restoration_Failed", "Local_Infeasibility",
                          "Maximum_Iterations_Exceeded", "Error_In_Step_Computation")
    assert sol.max_violation > 1e-3


def test_references_and_parameters_change_without_rebuild(cartpole):
    ocp = shooting.MultipleShootingOCP(cartpole, horizon=N, dt=DT, Q=Q, R=R)
    solver = ocp.nlp_solver
    a = ocp.solve(np.zeros(4))
    b = ocp.solve(np.zeros(4), x_ref=[1.0, 0, 0, 0])
    assert ocp.nlp_solver is solver
    assert abs(a.x[-1, 0]) < 1e-6 and b.x[-1, 0] > 0.5
    vdp = shooting.load_model("vanderpol")
    ocp2 = shooting.MultipleShootingOCP(vdp, horizon=10, dt=0.1)
    s1, s2 = ocp2.solve([1.0, 0.0], p=[0.5]), ocp2.solve([1.0, 0.0], p=[2.0])
    assert s1.success and s2.success and not np.allclose(s1.x, s2.x)


def test_extra_costs_and_constraints(cartpole):
    ocp = shooting.MultipleShootingOCP(
        cartpole, horizon=N, dt=DT, Q=Q, R=R,
        stage_cost=lambda x, u, p: 10 * x[2] ** 2,
        path_constraints=lambda x, u, p: ca.vertcat(x[2] - 3.0, -x[2] - 3.0),
        terminal_constraints=lambda x, p: x[:2],
    )
    sol = ocp.solve([0.0, 0.5, 0.0, 0.0])
    assert sol.success, sol.status
    assert np.all(np.abs(sol.x[:-1, 2]) <= 3.0 + 1e-6)
    assert np.max(np.abs(sol.x[:-1, 2])) > 2.9  # the constraint is active
    np.testing.assert_allclose(sol.x[-1, :2], 0, atol=1e-7)


def test_gauss_newton_reaches_the_same_optimum(cartpole, solution):
    gn = shooting.MultipleShootingOCP(cartpole, horizon=N, dt=DT, Q=Q, R=R, hessian="gauss-newton")
    sol = gn.solve(cartpole.x0)
    assert sol.success and sol.cost == pytest.approx(solution.cost, rel=1e-7)


def test_rti_swings_up_and_compares_with_ipopt(cartpole, ocp):
    """RTI (one GN-SQP step per sample) stabilises the swing-up like full IPOPT MPC."""
    plant = shooting.build_integrator(cartpole, "rk4", 20, "none")
    rti = shooting.RTIController(ocp)
    x = cartpole.x0.copy()
    for k in range(60):
        step = rti.step(x, k * DT)
        assert step.success
        x = np.array(plant(x=x, u=step.u, dt=DT)["x_next"]).ravel()
        assert abs(x[0]) <= 2 + 1e-6
    assert np.max(np.abs(x)) < 1e-2


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(horizon=0), "horizon"),
        (dict(dt=-1.0), "dt"),
        (dict(Q=np.ones((3, 3))), "Q"),
        (dict(R=[[1.0, 2.0]]), "R"),
        (dict(Q=[[1, 2, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]), "symmetric"),
        (dict(x_ref=np.zeros(3)), "x_ref"),
        (dict(u_min=[5.0], u_max=[-5.0]), "u_min"),
        (dict(hessian="bfgs"), "hessian"),
    ],
)
def test_bad_input(cartpole, kwargs, match):
    args = dict(horizon=5, dt=DT)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        shooting.MultipleShootingOCP(cartpole, **args)


def test_bad_solve_input(ocp):
    with pytest.raises(ValueError, match="x0"):
        ocp.solve([1.0, 2.0])
    with pytest.raises(ValueError, match="warm_start"):
        ocp.solve(np.zeros(4), warm_start="previous")


def test_fatrop_reaches_the_same_optimum(cartpole, solution):
    """CasADi's structure-exploiting fatrop on the same NLP (interleaved stages)."""
    ocp = shooting.MultipleShootingOCP(cartpole, horizon=N, dt=DT, Q=Q, R=R, solver="fatrop")
    sol = ocp.solve(cartpole.x0)
    assert sol.success, sol.status
    assert sol.cost == pytest.approx(solution.cost, rel=1e-7)
    warm = ocp.solve(cartpole.x0, warm_start=sol)
    assert warm.success and warm.cost == pytest.approx(solution.cost, rel=1e-7)
    with pytest.raises(ValueError, match="solver"):
        shooting.MultipleShootingOCP(cartpole, horizon=N, dt=DT, solver="snopt")


def test_solve_from_a_primal_guess(cartpole):
    # (issue 35's corpus: IPOPT from the same guess as the controller's) a guess at the solution takes fewer
    # iterations to the same optimum than the OCP's own cold guess; the held guess is that cold guess itself
    ocp = shooting.MultipleShootingOCP(cartpole, 20, dt=0.05, Q=[10, 50, 1, 0.1], R=[0.01])
    x0 = np.array([0.3, 2.0, 0.0, 0.0])
    cold = ocp.solve(x0)
    again = ocp.solve(x0, guess=(cold.x, cold.u))
    held = ocp.solve(x0, guess=(np.tile(x0, (21, 1)), np.zeros((20, 1))))
    assert cold.success and again.success and held.success
    assert again.iterations < cold.iterations and held.iterations == cold.iterations
    np.testing.assert_allclose(again.u, cold.u, atol=1e-6)
    with pytest.raises(ValueError, match="guess x"):
        ocp.solve(x0, guess=(np.zeros((3, 4)), np.zeros((20, 1))))
