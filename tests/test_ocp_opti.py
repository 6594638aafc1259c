"""MultipleShootingOCP against an independent casadi.Opti formulation, on cases where a wrong term shows.

Each case has a terminal weight different from Q, state and input references that change from stage to stage,
model parameters and the start time that enter the dynamics, and its own model, method and substeps. The Opti
problem is written here from the documented cost with an explicit Runge-Kutta step coded from its tableau
(or CasADi's own collocation integrator for Radau IIA), so a swapped weight, a dropped reference, a shifted
stage or a lost parameter in the library changes the optimum it is compared with.
"""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest

import shooting

RK = {  # explicit tableaus, written out here (not read from the library)
    "rk4": ([[], [0.5], [0, 0.5], [0, 0, 1]], [1 / 6, 1 / 3, 1 / 3, 1 / 6], [0, 0.5, 0.5, 1]),
    "midpoint": ([[], [0.5]], [0, 1], [0, 0.5]),
    "heun3": ([[], [1 / 3], [0, 2 / 3]], [1 / 4, 0, 3 / 4], [0, 1 / 3, 2 / 3]),
}


def _rk_step(model, method, steps, x, u, p, t0, dt):
    A, b, c = RK[method]
    h = dt / steps
    for n in range(steps):
        t = t0 + n * h
        K = []
        for i, row in enumerate(A):
            xi = x + h * sum((a * k for a, k in zip(row, K, strict=False)), ca.MX.zeros(model.nx))
            K.append(model.f(xi, u, p, t + c[i] * h))
        x = x + h * sum((bi * k for bi, k in zip(b, K, strict=True)), ca.MX.zeros(model.nx))
    return x


def _radau_step(model, steps, p_value, dt):
    """CasADi's collocation integrator (Radau IIA, 2 points): an independent implementation of radau2."""
    x, u = ca.MX.sym("x", model.nx), ca.MX.sym("u", model.nu)
    tau = ca.MX.sym("tau")
    # Autonomous form on tau in [0, 1] so that dt can stay fixed here.
    ode = {"x": x, "u": u, "p": ca.MX(0, 1), "t": tau, "ode": dt * model.f(x, u, ca.DM(p_value), dt * tau)}
    F = ca.integrator("F", "collocation", ode, 0.0, 1.0, {"collocation_scheme": "radau", "interpolation_order": 2,
                                                            "number_of_finite_elements": steps})
    return lambda xk, uk: F(x0=xk, u=uk)["xf"]


CASES = {
    "cartpole-rk4x1": dict(model=("cartpole", {}), method="rk4", steps=1, N=15, dt=0.05, x0=[0.3, 0.6, 0.0, 0.0],
                           Q=[50.0, 80.0, 0.1, 0.2], Q_terminal=[400.0, 900.0, 5.0, 9.0], R=[0.02]),
    "vanderpol-midpoint-x3": dict(model=("vanderpol", {"mu": 1.5}), method="midpoint", steps=3, N=12, dt=0.1,
                                  x0=[1.0, -0.5], Q=[3.0, 1.0], Q_terminal=[30.0, 7.0], R=[0.3]),
    "pendulum-heun3-x2": dict(model=("pendulum", {}), method="heun3", steps=2, N=14, dt=0.05, x0=[0.8, 0.0],
                              Q=[10.0, 0.2], Q_terminal=[60.0, 2.0], R=[0.05]),
    "vanderpol-radau2-x2": dict(model=("vanderpol", {}), method="radau2", steps=2, N=10, dt=0.1, x0=[0.5, 0.5],
                                Q=[2.0, 1.0], Q_terminal=[20.0, 3.0], R=[0.1]),
}


def _references(model: shooting.Model, N: int) -> tuple[np.ndarray, np.ndarray]:
    """Stage-varying references strictly inside the bounds."""
    s = np.linspace(0.0, 1.0, N + 1)
    x_ref = np.outer(0.15 * np.sin(3 * s) + 0.05, np.ones(model.nx)) * np.arange(1, model.nx + 1) / model.nx
    u_ref = np.clip(np.outer(0.4 * np.cos(2 * s[:N]), np.ones(model.nu)), model.u_min, model.u_max)
    return x_ref, u_ref


def _opti(model, case, x_ref, u_ref, t0):
    N, dt = case["N"], case["dt"]
    Q, R, Qf = (np.diag(case[k]) for k in ("Q", "R", "Q_terminal"))
    opti = ca.Opti()
    X, U = opti.variable(model.nx, N + 1), opti.variable(model.nu, N)
    radau = _radau_step(model, case["steps"], model.p0, dt) if case["method"] == "radau2" else None
    cost = 0
    for k in range(N):
        if radau is not None:
            assert t0 == 0.0  # the autonomous test models only
            nxt = radau(X[:, k], U[:, k])
        else:
            nxt = _rk_step(model, case["method"], case["steps"], X[:, k], U[:, k], ca.DM(model.p0), t0 + k * dt, dt)
        opti.subject_to(X[:, k + 1] == nxt)
        opti.subject_to(opti.bounded(model.u_min, U[:, k], model.u_max))
        opti.subject_to(opti.bounded(model.x_min, X[:, k + 1], model.x_max))
        ex, eu = X[:, k] - x_ref[k], U[:, k] - u_ref[k]
        cost += ca.bilin(ca.DM(Q), ex, ex) + ca.bilin(ca.DM(R), eu, eu)
    eN = X[:, N] - x_ref[N]
    cost += ca.bilin(ca.DM(Qf), eN, eN)
    opti.subject_to(X[:, 0] == case["x0"])
    opti.minimize(cost)
    opti.set_initial(X, np.tile(np.array(case["x0"])[:, None], (1, N + 1)))
    opti.solver("ipopt", {"print_time": False}, {"print_level": 0, "sb": "yes", "tol": 1e-12})
    sol = opti.solve()
    return float(sol.value(cost)), np.array(sol.value(X)).reshape(model.nx, N + 1).T


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimum_matches_independent_opti(name):
    case = CASES[name]
    spec, params = case["model"]
    model = shooting.load_model(spec, **params)
    x_ref, u_ref = _references(model, case["N"])
    t0 = 0.0
    ocp = shooting.MultipleShootingOCP(model, case["N"], dt=case["dt"], method=case["method"], steps=case["steps"],
                                       Q=case["Q"], R=case["R"], Q_terminal=case["Q_terminal"],
                                       solver_options={"ipopt.tol": 1e-12})
    sol = ocp.solve(case["x0"], x_ref=x_ref, u_ref=u_ref, t0=t0)
    assert sol.success, sol.status
    cost, X = _opti(model, case, x_ref, u_ref, t0)
    assert sol.cost == pytest.approx(cost, rel=1e-7)
    np.testing.assert_allclose(sol.x, X, atol=1e-5)
    # The cost the OCP reports is the documented one at its own solution.
    assert ocp.cost(sol.x, sol.u, x_ref=x_ref, u_ref=u_ref) == pytest.approx(sol.cost, rel=1e-12)


def test_time_varying_model_sees_t0_and_parameters(forced):
    """The forced pendulum's forcing u cos(w t) and parameters (a, d, w) reach every stage at t0 + k dt."""
    N, dt, t0 = 12, 0.1, 0.7
    case = dict(N=N, dt=dt, method="rk4", steps=2, x0=[0.5, 0.0], Q=[4.0, 1.0], R=[0.1], Q_terminal=[40.0, 4.0])
    model = forced
    x_ref, u_ref = _references(model, N)
    ocp = shooting.MultipleShootingOCP(model, N, dt=dt, method="rk4", steps=2, Q=case["Q"], R=case["R"],
                                       Q_terminal=case["Q_terminal"], solver_options={"ipopt.tol": 1e-12})
    p = np.array([2.5, 0.2, 2.0])
    sol = ocp.solve(case["x0"], x_ref=x_ref, u_ref=u_ref, p=p, t0=t0)
    shifted = shooting.Model("forced2", model.x, model.u, model.xdot, model.p, model.t, p0=p, x0=model.x0)
    cost, X = _opti(shifted, case, x_ref, u_ref, t0)
    assert sol.success and sol.cost == pytest.approx(cost, rel=1e-7)
    np.testing.assert_allclose(sol.x, X, atol=1e-6)
    other = ocp.solve(case["x0"], x_ref=x_ref, u_ref=u_ref, p=p, t0=0.0)  # t0 matters
    assert abs(other.cost - sol.cost) > 1e-4 * sol.cost
