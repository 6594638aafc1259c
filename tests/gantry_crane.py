"""A gantry crane (cart position p, rope angle theta, their rates; the cart's force F; the cart's mass M, the
load's mass m and the rope's length l as parameters) whose load is moved 1 m and back along a time-varying
reference, its sway held by a soft nonlinear path constraint: our own tracking model for the checks (issue 36).

The load hangs at theta = 0. With the Lagrangian of cart and point load (Fantoni and Lozano, "Non-linear Control
for Underactuated Mechanical Systems", ch. 4, the cart-pole with the pendulum hanging):

    (M + m) p'' + m l (theta'' cos theta - theta'^2 sin theta) = F
    p'' cos theta + l theta'' + g sin theta = 0

solved for p'' and theta''. The sway limit is the load's horizontal offset, |l sin theta| <= SWAY.
"""

from __future__ import annotations

import casadi as ca
import numpy as np

import shooting

G, SWAY, MOVE, HOLD = 9.81, 0.05, 1.0, 3.0  # m/s^2, m, m, s (the load held at MOVE for HOLD s, then back)


def make_model() -> shooting.Model:
    x = ca.SX.sym("x", 4)
    u = ca.SX.sym("u", 1)
    p = ca.SX.sym("p", 3)
    th, om = x[1], x[3]
    M, m, l = p[0], p[1], p[2]  # noqa: E741
    s, c = ca.sin(th), ca.cos(th)
    acc = (u[0] + m * l * om**2 * s + m * G * s * c) / (M + m * s**2)
    xdot = ca.vertcat(x[2], om, acc, -(acc * c + G * s) / l)
    return shooting.Model("gantry_crane", x, u, xdot, p, state_names=["p", "theta", "v", "omega"],
                          input_names=["F"], param_names=["M", "m", "l"], p0=[10.0, 5.0, 1.0],
                          x0=[0.0, 0.0, 0.0, 0.0], u0=[0.0], u_min=[-40.0], u_max=[40.0], dt=0.05,
                          state_units=["m", "rad", "m/s", "rad/s"], input_units=["N"])


def sway(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
    """The load's horizontal offset squared over the limit's: (l sin theta)^2 - SWAY^2 <= 0."""
    return (p[2] * ca.sin(x[1])) ** 2 - SWAY**2


def reference(t: float) -> tuple[np.ndarray, np.ndarray]:
    """The load to MOVE m at t = 0, back to 0 at t = HOLD."""
    return np.array([MOVE if t < HOLD else 0.0, 0.0, 0.0, 0.0]), np.zeros(1)


def scenario(model: shooting.Model) -> shooting.Scenario:
    problem = shooting.OCPProblem(
        horizon=30, dt=0.05, method="rk4", steps=1,
        cost=shooting.QuadraticCost(Q=[10.0, 1.0, 0.1, 0.1], R=[1e-3], Q_terminal=[100.0, 10.0, 1.0, 1.0]),
        constraints=shooting.Constraints(path_constraints=sway, soft_path_constraints=True))
    return shooting.Scenario(model=model.name, problem=problem, x0=model.x0, sim_steps=120, reference=reference,
                             description="move the load 1 m and back, its sway within 5 cm")
