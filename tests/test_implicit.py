"""Implicit tableaus: Newton converged to rounding; stiff problems stay stable."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import shooting
from conftest import evaluate
from shooting.integrate.integrator import DEFAULT_NEWTON_ITERATIONS

IMPLICIT = ("implicit_euler", "implicit_midpoint", "gauss2", "gauss3", "radau2", "radau3")


def _samples(model: shooting.Model, n: int, seed: int = 0):
    """States around the nominal x0 and inputs inside the bounds (or around u0)."""
    rng = np.random.default_rng(seed)
    lo = np.where(np.isfinite(model.u_min), model.u_min, model.u0 - 1.0)
    hi = np.where(np.isfinite(model.u_max), model.u_max, model.u0 + 1.0)
    for _ in range(n):
        yield model.x0 + 0.3 * rng.normal(size=model.nx), rng.uniform(lo, hi)


@pytest.mark.parametrize("model_name", shooting.model_names())
@pytest.mark.parametrize("method", IMPLICIT)
def test_default_newton_is_converged_to_rounding(model_name, method):
    """The default number of Newton steps gives what four more steps give, to rounding."""
    model = shooting.load_model(model_name)
    F = shooting.build_integrator(model, method)
    ref = shooting.build_integrator(model, method, newton_iterations=DEFAULT_NEWTON_ITERATIONS + 4)
    for x, u in _samples(model, 8):
        args = dict(x=x, u=u, p=model.p0, t0=0.0, dt=model.dt)
        got, want = evaluate(F, **args), evaluate(ref, **args)
        for key in ("x_next", "A", "B"):
            scale = max(1.0, np.max(np.abs(want[key])))
            assert np.max(np.abs(got[key] - want[key])) <= 1e-13 * scale, (key, x, u)


def test_newton_with_fewer_iterations_is_measurably_worse():
    """The check above can fail: one Newton step is not converged on the cart-pole."""
    model = shooting.load_model("cartpole")
    one = shooting.build_integrator(model, "gauss2", newton_iterations=1)
    ref = shooting.build_integrator(model, "gauss2", newton_iterations=DEFAULT_NEWTON_ITERATIONS + 4)
    x, u = model.x0 + [0.0, 0.5, 1.0, -2.0], [40.0]
    diff = evaluate(one, x=x, u=u, dt=0.1)["x_next"] - evaluate(ref, x=x, u=u, dt=0.1)["x_next"]
    assert np.max(np.abs(diff)) > 1e-10
    assert DEFAULT_NEWTON_ITERATIONS > 1


def test_stiff_chain_needs_implicit_methods():
    """At the nominal dt explicit RK4 diverges on the stiff chain; implicit methods track scipy's Radau."""
    model = shooting.load_model("stiff_chain")
    u = np.array([2.0])
    intervals = 40
    T = intervals * model.dt

    def rhs(t, x):
        return np.array(model.f(x, u, model.p0, t)).ravel()

    ref = solve_ivp(rhs, (0.0, T), model.x0, method="Radau", rtol=1e-12, atol=1e-12).y[:, -1]

    def simulate(method: str) -> np.ndarray:
        F = shooting.build_integrator(model, method, 1, "none")
        x = model.x0
        for k in range(intervals):
            x = evaluate(F, x=x, u=u, p=model.p0, t0=k * model.dt, dt=model.dt)["x_next"].ravel()
        return x

    with np.errstate(over="ignore", invalid="ignore"):
        explicit = simulate("rk4")
    assert not np.all(np.abs(explicit - ref) < 1.0), "rk4 should be unstable at this step"
    for method, tol in (("radau2", 1e-3), ("radau3", 1e-5), ("gauss2", 1e-3)):
        np.testing.assert_allclose(simulate(method), ref, atol=tol, err_msg=method)


@pytest.mark.parametrize("model_name", ["cartpole", "stiff_chain", "vanderpol"])
@pytest.mark.parametrize("method", ["gauss2", "radau2"])
def test_simplified_newton_converges_where_it_should(model_name, method):
    """Simplified Newton (one factorisation) agrees with full Newton to rounding here, with fewer instructions."""
    model = shooting.load_model(model_name)
    full = shooting.build_integrator(model, method)
    simple = shooting.build_integrator(model, method, newton="simplified")
    # The saving grows with the state dimension (the factorisations dominate).
    assert simple.n_instructions() < (0.8 if model.nx >= 4 else 1.0) * full.n_instructions()
    for x, u in _samples(model, 5, seed=3):
        args = dict(x=x, u=u, p=model.p0, t0=0.0, dt=model.dt)
        a, b = evaluate(simple, **args), evaluate(full, **args)
        for key in ("x_next", "A", "B"):
            scale = max(1.0, np.max(np.abs(b[key])))
            assert np.max(np.abs(a[key] - b[key])) <= 1e-12 * scale, key


def test_simplified_newton_is_linear_and_can_fall_short():
    """Where the step is strongly nonlinear, few simplified steps are measurably not converged."""
    model = shooting.load_model("two_link_arm")
    full = shooting.build_integrator(model, "implicit_euler")
    simple = shooting.build_integrator(model, "implicit_euler", newton="simplified", newton_iterations=3)
    x, u = model.x0 + [0.3, -0.4, 1.0, 2.0], [15.0, -8.0]
    diff = evaluate(simple, x=x, u=u, dt=model.dt)["x_next"] - evaluate(full, x=x, u=u, dt=model.dt)["x_next"]
    assert np.max(np.abs(diff)) > 1e-8
    with pytest.raises(ValueError, match="newton"):
        shooting.build_integrator(model, "gauss2", newton="quasi")
