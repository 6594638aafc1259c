"""Agreement with a peer tool: CasADi's own integrators on the same methods."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest

import shooting
from conftest import evaluate


def casadi_step(model: shooting.Model, plugin: str, dt: float, opts: dict) -> ca.Function:
    """CasADi's integrator over one interval, with its jacobians, as (x, u, p) -> (x_next, A, B)."""
    dae = {"x": model.x, "u": model.u, "p": model.p, "ode": model.xdot}
    intg = ca.integrator("I", plugin, dae, 0.0, dt, opts)
    x, u, p = ca.MX.sym("x", model.nx), ca.MX.sym("u", model.nu), ca.MX.sym("p", model.np)
    xf = intg(x0=x, u=u, p=p)["xf"]
    return ca.Function("peer", [x, u, p], [xf, ca.jacobian(xf, x), ca.jacobian(xf, u)],
                       ["x", "u", "p"], ["x_next", "A", "B"])


@pytest.mark.parametrize("model_name", ["cartpole", "quadrotor", "two_link_arm", "vanderpol"])
@pytest.mark.parametrize("steps", [1, 5])
def test_rk4_matches_casadi_integrator_rk(model_name, steps):
    model = shooting.load_model(model_name)
    peer = casadi_step(model, "rk", model.dt, {"number_of_finite_elements": steps})
    ours = shooting.build_integrator(model, "rk4", steps)
    rng = np.random.default_rng(4)
    for _ in range(3):
        x, u = model.x0 + 0.2 * rng.normal(size=model.nx), model.u0 + rng.normal(size=model.nu)
        a = evaluate(ours, x=x, u=u, p=model.p0, t0=0.0, dt=model.dt)
        b = {k: np.array(ca.densify(v)) for k, v in peer(x=x, u=u, p=model.p0).items()}
        for key in ("x_next", "A", "B"):
            np.testing.assert_allclose(a[key], b[key], rtol=1e-12, atol=1e-13, err_msg=key)


@pytest.mark.parametrize("model_name", ["cartpole", "vanderpol", "stiff_chain"])
def test_radau_iia_matches_casadi_collocation(model_name):
    """CasADi's collocation integrator with Radau points of degree 2 is Radau IIA with 2 stages."""
    model = shooting.load_model(model_name)
    peer = casadi_step(model, "collocation", model.dt,
                       {"number_of_finite_elements": 1, "interpolation_order": 2, "collocation_scheme": "radau",
                        "rootfinder": "newton", "rootfinder_options": {"abstol": 1e-15}})
    ours = shooting.build_integrator(model, "radau2")
    rng = np.random.default_rng(5)
    for _ in range(3):
        x, u = model.x0 + 0.2 * rng.normal(size=model.nx), model.u0 + 0.5 * rng.normal(size=model.nu)
        a = evaluate(ours, x=x, u=u, p=model.p0, t0=0.0, dt=model.dt)
        b = {k: np.array(ca.densify(v)) for k, v in peer(x=x, u=u, p=model.p0).items()}
        for key in ("x_next", "A", "B"):
            np.testing.assert_allclose(a[key], b[key], rtol=1e-10, atol=1e-12, err_msg=key)
