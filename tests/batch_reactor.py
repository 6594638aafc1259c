"""do-mpc's batch bioreactor (its examples/batch_reactor), re-typed from the published equations: biomass X,
substrate S, product P, volume V fed at the rate u; an economic objective (maximise the product: stage and terminal
cost -P, linear in the states) with do-mpc's rate penalty on u and its hard bounds. Its yield Y_x and feed
concentration S_in are parameters (do-mpc's uncertain ones), at their nominal values."""

from __future__ import annotations

import casadi as ca
import numpy as np

import shooting

MU_M, K_M, K_I, V_PAR, Y_P = 0.02, 0.05, 5.0, 0.004, 1.2


def make_model() -> shooting.Model:
    x = ca.SX.sym("x", 4)
    u = ca.SX.sym("u", 1)
    p = ca.SX.sym("p", 2)
    X, S, P, V = x[0], x[1], x[2], x[3]
    Y_x, S_in = p[0], p[1]
    mu = MU_M * S / (K_M + S + S**2 / K_I)  # Haldane's substrate inhibition
    xdot = ca.vertcat(mu * X - u[0] / V * X,
                      -mu * X / Y_x - V_PAR * X / Y_P + u[0] / V * (S_in - S),
                      V_PAR * X - u[0] / V * P,
                      u[0])
    return shooting.Model("batch_reactor", x, u, xdot, p, state_names=["X", "S", "P", "V"], input_names=["inflow"],
                          param_names=["Y_x", "S_in"], p0=[0.5, 200.0], x0=[1.0, 0.5, 0.0, 120.0], u0=[0.0],
                          u_min=[0.0], u_max=[0.2], dt=1.0,
                          state_units=["mol/l", "mol/l", "mol/l", "m^3"], input_units=["m^3/min"])


def make_ocp(model: shooting.Model, solver_options: dict | None = None) -> shooting.MultipleShootingOCP:
    """do-mpc's template_mpc: 20 steps of 1, cost -P at every stage and the end, rate penalty 1 on u, hard bounds
    0 <= X <= 3.7, S >= -0.01, 0 <= P <= 3, V >= 0."""
    return shooting.MultipleShootingOCP(
        model, 20, dt=1.0, Q=np.zeros((4, 4)), R=[0.0], R_delta=[1.0],
        x_min=[0.0, -0.01, 0.0, 0.0], x_max=[3.7, np.inf, 3.0, np.inf], u_min=[0.0], u_max=[0.2],
        stage_cost=lambda x, u, p: -x[2], terminal_cost=lambda x, p: -x[2], solver_options=solver_options)
