"""The MHE against a batch full-information NLP written out here (IPOPT at a tight tolerance), against the
Kalman filter on a linear model once its window is full, with active state bounds, missing measurements and bad
input (issue 39)."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest

import shooting

PENDULUM = shooting.load_model("pendulum")


def _tank() -> shooting.Model:
    """A draining tank: level x >= 0 [m], inflow u; the level is measured. Near empty, noise pushes an unbounded
    estimate below zero."""
    x, u = ca.SX.sym("x", 2), ca.SX.sym("u")
    # level and outflow coefficient (slowly drifting, estimated)
    xdot = ca.vertcat(u - x[1] * x[0], 0)
    return shooting.Model("tank", x, u, xdot, x0=[0.05, 1.0], x_min=[0.0, 0.0], x_max=[1.0, 5.0], dt=0.1,
                          state_names=["level", "outflow"])


def _double_integrator() -> shooting.Model:
    x, u = ca.SX.sym("x", 2), ca.SX.sym("u")
    return shooting.Model("cart", x, u, ca.vertcat(x[1], u), x0=[0.0, 0.0], dt=0.1)


def batch_estimate(model, h, samples, x_bar, P0, Q, R, dt):
    """The full-information estimate written out: decisions x_0..x_K and w_0..w_{K-1}, cost
    |x_0 - x_bar|^2_{P0^-1} + sum |w|^2_{Q^-1} + sum |y - h|^2_{R^-1}, x_{k+1} = F(x_k, u_k) + w_k, bounds."""
    F = shooting.build_integrator(model, "rk4", 1, "none")
    K, nx = len(samples), model.nx
    X, W = ca.SX.sym("X", nx, K + 1), ca.SX.sym("W", nx, K)
    Pi, Qi, Ri = (ca.DM(np.linalg.inv(C)) for C in (P0, Q, R))
    d = X[:, 0] - x_bar
    cost, g = ca.bilin(Pi, d, d), []
    for k, (u, y) in enumerate(samples):
        g.append(X[:, k + 1] - F(X[:, k], u, model.p0, k * dt, dt) - W[:, k])
        v = y - ca.vertcat(h(X[:, k + 1], ca.DM(u), ca.DM(model.p0)))
        cost += ca.bilin(Qi, W[:, k], W[:, k]) + ca.bilin(Ri, v, v)
    w = ca.vertcat(ca.vec(X), ca.vec(W))
    solver = ca.nlpsol("batch", "ipopt", {"x": w, "f": cost, "g": ca.vertcat(*g)},
                       {"ipopt.tol": 1e-13, "ipopt.print_level": 0, "print_time": False, "ipopt.sb": "yes"})
    lbx = np.concatenate([np.tile(model.x_min, K + 1), np.full(nx * K, -np.inf)])
    ubx = np.concatenate([np.tile(model.x_max, K + 1), np.full(nx * K, np.inf)])
    guess = np.concatenate([np.tile(np.clip(x_bar, model.x_min, model.x_max), K + 1), np.zeros(nx * K)])
    out = solver(x0=guess, lbx=lbx, ubx=ubx, lbg=0, ubg=0)
    assert solver.stats()["success"]
    return np.array(out["x"], dtype=float)[:nx * (K + 1)].reshape(K + 1, nx)


def _simulate(model, h, samples, seed, r_std, inputs):
    F = shooting.build_integrator(model, "rk4", 1, "none")
    rng = np.random.default_rng(seed)
    x, data, xs = model.x0.copy(), [], []
    for k in range(samples):
        u = inputs(k)
        x = np.clip(np.array(F(x, u, model.p0, k * model.dt, model.dt), dtype=float).ravel(), model.x_min,
                    model.x_max)
        y = np.array(ca.DM(ca.vertcat(h(ca.DM(x), ca.DM(u), ca.DM(model.p0)))), dtype=float).ravel()
        data.append((np.atleast_1d(u), y + r_std * rng.standard_normal(y.size)))
        xs.append(x)
    return data, np.array(xs)


@pytest.mark.parametrize(("model", "Q", "R", "P0", "inputs"), [
    (PENDULUM, np.diag([1e-4, 1e-3]), np.diag([1e-2]), np.diag([0.1, 0.5]), lambda k: [6.0 * np.sin(0.4 * k)]),
    (_tank(), np.diag([1e-4, 1e-3]), np.diag([4e-4]), np.diag([1e-2, 0.3]), lambda k: [0.02]),
])
def test_full_information_mhe_matches_a_batch_nlp(model, Q, R, P0, inputs):
    """Every sample in the window: the MHE's window, at every sample, is the batch NLP's solution (1e-6)."""
    h = (lambda x, u, p: x[0]) if model.name == "tank" else shooting.default_measurement(model)
    K = 12
    data, _ = _simulate(model, h, K, seed=5, r_std=np.sqrt(R[0, 0]), inputs=inputs)
    mhe = shooting.MHE(model, h, K, Q=Q, R=R, P0=P0)
    worst = 0.0
    for k, (u, y) in enumerate(data):
        x_hat, P = mhe.update(y, u, t=k * model.dt)
        assert mhe.last_success and np.array_equal(P, P0)
        if k % 3 == 2 or k == K - 1:
            truth = batch_estimate(model, h, data[:k + 1], model.x0, P0, Q, R, model.dt)
            worst = max(worst, float(np.max(np.abs(mhe.window_states - truth))))
            assert np.allclose(x_hat, truth[-1], rtol=0, atol=1e-6)
    assert worst < 1e-6, worst
    assert (mhe.window_states >= model.x_min - 1e-9).all() and (mhe.window_states <= model.x_max + 1e-9).all()


def test_bounds_hold_where_the_ekf_leaves_them():
    """Near an empty tank the EKF's level goes negative; the MHE's stays in [0, 1] (the bounds are taken)."""
    model = _tank()
    h = lambda x, u, p: x[0]  # noqa: E731
    Q, R, P0 = np.diag([1e-5, 1e-4]), np.diag([4e-4]), np.diag([1e-2, 0.3])
    data, _ = _simulate(model, h, 30, seed=2, r_std=0.02, inputs=lambda k: [0.0])
    ekf = shooting.EKF(model, h, Q=Q, R=R, P0=P0)
    mhe = shooting.MHE(model, h, 6, Q=Q, R=R, P0=P0)
    ekf_low = mhe_low = np.inf
    for k, (u, y) in enumerate(data):
        ekf_low = min(ekf_low, ekf.update(y, u, t=k * 0.1)[0][0])
        mhe_low = min(mhe_low, mhe.update(y, u, t=k * 0.1)[0][0])
    assert ekf_low < -1e-3 and mhe_low >= 0.0, (ekf_low, mhe_low)


def test_moving_window_is_the_kalman_filter_on_a_linear_model():
    """Linear Gaussian, no bound active: the arrival cost's EKF update is exact, so the MHE with a full window
    gives the Kalman filter's estimate at every sample, and its P is the filter's of `horizon` samples ago."""
    model = _double_integrator()
    h = lambda x, u, p: x[0]  # noqa: E731
    Q, R, P0 = np.diag([1e-4, 1e-3]), np.diag([1e-2]), np.diag([0.5, 0.5])
    data, _ = _simulate(model, h, 25, seed=9, r_std=0.1, inputs=lambda k: [np.sin(0.3 * k)])
    N = 5
    ekf, mhe = shooting.EKF(model, h, Q=Q, R=R, P0=P0), shooting.MHE(model, h, N, Q=Q, R=R, P0=P0)
    Ps = [P0]
    iterations = []
    for k, (u, y) in enumerate(data):
        x_ekf, P_ekf = ekf.update(y, u, t=k * 0.1)
        x_mhe, P_mhe = mhe.update(y, u, t=k * 0.1)
        Ps.append(P_ekf)
        assert np.allclose(x_mhe, x_ekf, rtol=0, atol=1e-6), (k, x_mhe, x_ekf)
        assert np.allclose(P_mhe, Ps[max(0, k + 1 - N)], rtol=1e-12, atol=0), k
        iterations.append(mhe.last_iterations)
    assert mhe.window_states.shape == (N + 1, 2)
    assert max(iterations[N + 1:]) <= max(iterations[:N]), iterations  # warm starts from the shifted solution


def test_missing_measurements_leave_their_residual_out():
    model = _double_integrator()
    h = lambda x, u, p: ca.vertcat(x[0], x[0] + x[1])  # noqa: E731
    Q, R, P0 = np.diag([1e-4, 1e-3]), np.diag([1e-2, 2e-2]), np.eye(2)
    full = shooting.MHE(model, h, 4, Q=Q, R=R, P0=P0)
    part = shooting.MHE(model, lambda x, u, p: x[0], 4, Q=Q, R=R[:1, :1], P0=P0)
    for k in range(6):
        y = [0.1 * k, 0.1 * k + 0.05]
        with pytest.warns(shooting.MissingMeasurementWarning, match=r"y\[1\]"):
            a, _ = full.update([y[0], np.nan], [0.5], t=k * 0.1)
        b, _ = part.update([y[0]], [0.5], t=k * 0.1)
        assert np.isfinite(a).all() and np.allclose(a, b, rtol=0, atol=1e-7)
        assert not full.last_corrected and part.last_corrected


def test_reset_and_bad_input():
    mhe = shooting.MHE(PENDULUM, None, 3, Q=np.eye(2) * 1e-4, R=[1e-4], x0=[3.0, 0.0])
    assert np.array_equal(mhe.x_hat, [3.0, 0.0]) and np.array_equal(mhe.P, np.eye(2))
    mhe.update([3.0], [0.0])
    mhe.reset()
    assert np.array_equal(mhe.x_hat, [3.0, 0.0]) and mhe.window_states.shape == (1, 2)
    for horizon, match in ((0, r"horizon must be an integer in 1..1000"), (2.5, r"horizon must be an integer")):
        with pytest.raises(ValueError, match=match):
            shooting.MHE(PENDULUM, None, horizon, Q=np.eye(2) * 1e-4, R=[1e-4])
    with pytest.raises(ValueError, match=r"solver_options must be a dict"):
        shooting.MHE(PENDULUM, None, 3, Q=np.eye(2) * 1e-4, R=[1e-4], solver_options=["tol"])
    with pytest.raises(ValueError, match=r"R must be positive definite"):
        shooting.MHE(PENDULUM, None, 3, Q=np.eye(2) * 1e-4, R=[0.0])
    with pytest.raises(ValueError, match=r"y has 2 entries but the sensors measure 1 \(theta\)"):
        mhe.update([1.0, 2.0], [0.0])
