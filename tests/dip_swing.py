"""do-mpc's double inverted pendulum swing-up (examples/DIP), re-typed: the cart with two rods of
`shooting.models.dip` (do-mpc's masses and lengths, the accelerations as algebraic states), an energy cost
E_kin - E_pot at every stage and -E_pot at the end (do-mpc's lterm and mterm: swing up and stay up), a small
input weight 1e-3 in place of do-mpc's rate penalty, |F| <= 4 N, N = 100 steps of 0.04 s, from hanging
(both rods at 0.99 pi from upright)."""

from __future__ import annotations

import casadi as ca
import numpy as np

import shooting
from shooting.models.dip import DIPParams, lagrangian

N, DT = 100, 0.04
X0 = np.array([0.0, 0.99 * np.pi, 0.99 * np.pi, 0.0, 0.0, 0.0])


def energies(x: ca.SX, prm: DIPParams) -> tuple[ca.SX, ca.SX]:
    """(E_kin, E_pot) of the state x = [s, theta1, theta2, v, omega1, omega2] (angles from upright)."""
    q, dq = x[:3], x[3:]
    V = prm.g * (prm.m1 * prm.L1 / 2 * ca.cos(q[1]) + prm.m2 * (prm.L1 * ca.cos(q[1]) + prm.L2 / 2 * ca.cos(q[2])))
    return lagrangian(prm, q, dq) + V, V


def make_ocp(solver_options: dict | None = None) -> shooting.MultipleShootingOCP:
    prm = DIPParams()
    model = shooting.load_model("dip")

    def stage(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
        kinetic, potential = energies(x, prm)
        return kinetic - potential

    return shooting.MultipleShootingOCP(
        model, N, dt=DT, Q=np.zeros((6, 6)), R=[1e-3], u_min=[-4.0], u_max=[4.0], x_min=[-np.inf] * 6,
        x_max=[np.inf] * 6, stage_cost=stage, terminal_cost=lambda x, p: -energies(x, prm)[1],
        solver_options=solver_options)
