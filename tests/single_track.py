"""A dynamic single-track (bicycle) vehicle with Pacejka's magic-formula lateral tyre forces, as TUM's and many
racing MPCs write it (our own parameters: a 1160 kg car, front steering and a longitudinal force in newtons):
states X, Y, psi, vx, vy, r; inputs delta [rad], Fx [N]. A lane change of 3.5 m at 20 m/s, the force weighted
1e-8 (a direction of almost no curvature, where a step stays at rounding's size)."""

from __future__ import annotations

import casadi as ca
import numpy as np

import shooting

MASS, IZ, LF, LR, G = 1160.0, 1260.0, 1.6, 1.4, 9.81
B, C, E, MU = 10.0, 1.9, 0.97, 1.0


def _magic(alpha: ca.SX, Fz: float) -> ca.SX:
    return MU * Fz * ca.sin(C * ca.atan(B * alpha - E * (B * alpha - ca.atan(B * alpha))))


def make_model() -> shooting.Model:
    x = ca.SX.sym("x", 6)
    u = ca.SX.sym("u", 2)
    psi, vx, vy, r = x[2], x[3], x[4], x[5]
    delta, Fx = u[0], u[1]
    Fyf = _magic(delta - ca.atan2(vy + LF * r, vx), MASS * G * LR / (LF + LR))
    Fyr = _magic(-ca.atan2(vy - LR * r, vx), MASS * G * LF / (LF + LR))
    xdot = ca.vertcat(vx * ca.cos(psi) - vy * ca.sin(psi), vx * ca.sin(psi) + vy * ca.cos(psi), r,
                      (Fx - Fyf * ca.sin(delta)) / MASS + vy * r, (Fyr + Fyf * ca.cos(delta)) / MASS - vx * r,
                      (LF * Fyf * ca.cos(delta) - LR * Fyr) / IZ)
    return shooting.Model("single_track", x, u, xdot, state_names=["X", "Y", "psi", "vx", "vy", "r"],
                          input_names=["delta", "Fx"], x0=[0.0, 0, 0, 20.0, 0, 0], u0=[0.0, 0.0],
                          u_min=[-0.4, -8000.0], u_max=[0.4, 4000.0], dt=0.05,
                          state_units=["m", "m", "rad", "m/s", "m/s", "rad/s"], input_units=["rad", "N"])


def _lane(X: ca.SX) -> ca.SX:
    return 1.75 * (1 + ca.tanh((X - 40.0) / 8.0))


def make_ocp(model: shooting.Model, solver_options: dict | None = None) -> shooting.MultipleShootingOCP:
    """40 steps of 0.05 s: the lateral offset from the lane's centre line and the speed's from 20 m/s."""
    def stage(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
        return 10 * (x[1] - _lane(x[0])) ** 2 + (x[3] - 20.0) ** 2 + 1e-8 * u[1] ** 2 + 10 * u[0] ** 2

    def terminal(x: ca.SX, p: ca.SX) -> ca.SX:
        return 10 * (x[1] - _lane(x[0])) ** 2 + (x[3] - 20.0) ** 2

    return shooting.MultipleShootingOCP(model, 40, dt=0.05, Q=np.zeros((6, 6)), R=np.diag([1e-6, 1e-10]),
                                        u_min=model.u_min, u_max=model.u_max, stage_cost=stage,
                                        terminal_cost=terminal, solver_options=solver_options)
