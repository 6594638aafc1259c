"""Double inverted pendulum on a cart, written as do-mpc writes it: accelerations as algebraic states.

Generalised coordinates ``q = [s, theta1, theta2]`` (cart position [m], angles
of the two rods from upright [rad]), velocities ``dq = [v, omega1, omega2]``;
state ``x = [q; dq]``, input ``u = [F]`` (horizontal force on the cart [N]),
algebraic states ``z = ddq`` (the three accelerations). The rods are uniform
(centre of mass at half length, inertia m L^2 / 12 about it), rod 2 hinged at
the tip of rod 1, no friction.

The equations are Lagrange's, not solved for the accelerations:

    x' = [dq; z],
    0  = M(q) z + (d/dq dL/d(dq)) dq - dL/dq - [F, 0, 0]',

with L = T - V built symbolically below (so nothing is eliminated by hand).
The algebraic equations are linear in z with the mass matrix M(q), which is
positive definite: the DAE has index 1 everywhere.

Source: the double inverted pendulum of do-mpc's examples
(``examples/DIP``: cart 0.6 kg, rods 0.2 kg and 0.5 m each, accelerations as
algebraic states of the model); the bounds and the scenario here are ours.

Default scenario: catch the pendulum from ``theta1 = 0.2, theta2 = -0.15`` rad
and bring the cart back to the origin, |F| <= 20 N.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np

from shooting.model import Model
from shooting.models import check_numbers, parse_params
from shooting.mpc.problem import OCPProblem, QuadraticCost
from shooting.mpc.scenarios import Scenario

__all__ = ["DIPParams", "make_model", "measurement", "scenario"]


@dataclass(frozen=True)
class DIPParams:
    """Physical constants of the double inverted pendulum on a cart (do-mpc's values)."""

    m0: float = 0.6  # mass of the cart [kg]
    m1: float = 0.2  # mass of rod 1 [kg]
    m2: float = 0.2  # mass of rod 2 [kg]
    L1: float = 0.5  # length of rod 1 [m]
    L2: float = 0.5  # length of rod 2 [m]
    g: float = 9.80665  # gravitational acceleration [m/s^2]
    F_max: float = 20.0  # force bound |F| <= F_max [N]
    s_max: float = 2.0  # cart position bound |s| <= s_max [m] (inf: unbounded)

    def __post_init__(self) -> None:
        check_numbers(self, "dip", positive=("m0", "m1", "m2", "L1", "L2", "g", "F_max", "s_max"),
                      allow_inf=("s_max",))


def lagrangian(prm: DIPParams, q: ca.SX, dq: ca.SX) -> ca.SX:
    """L = T - V of the cart and the two uniform rods (angles from upright).

    Parameters
    ----------
    prm : DIPParams
    q, dq : casadi.SX, shape (3, 1)

    Returns
    -------
    casadi.SX, scalar
    """
    s, th1, th2 = q[0], q[1], q[2]
    l1, l2 = prm.L1 / 2, prm.L2 / 2
    J1, J2 = prm.m1 * prm.L1**2 / 12, prm.m2 * prm.L2**2 / 12
    # Centres of mass (horizontal, vertical) of rod 1 and rod 2.
    p1 = ca.vertcat(s + l1 * ca.sin(th1), l1 * ca.cos(th1))
    p2 = ca.vertcat(s + prm.L1 * ca.sin(th1) + l2 * ca.sin(th2), prm.L1 * ca.cos(th1) + l2 * ca.cos(th2))
    v1, v2 = ca.jtimes(p1, q, dq), ca.jtimes(p2, q, dq)
    T = 0.5 * (prm.m0 * dq[0] ** 2 + prm.m1 * ca.sumsqr(v1) + J1 * dq[1] ** 2 + prm.m2 * ca.sumsqr(v2)
               + J2 * dq[2] ** 2)
    V = prm.g * (prm.m1 * p1[1] + prm.m2 * p2[1])
    return T - V


def make_model(**params: float) -> Model:
    """Build the double inverted pendulum on a cart with the accelerations as algebraic states.

    Parameters
    ----------
    **params : float
        Fields of `DIPParams` (``m0, m1, m2, L1, L2, g, F_max, s_max``).

    Returns
    -------
    Model
        ``nx = 6`` (``s, theta1, theta2, v, omega1, omega2``), ``nz = 3``
        (``dds, ddtheta1, ddtheta2``), ``nu = 1`` (``F``), ``dt = 0.02``.
    """
    prm = parse_params(DIPParams, params, "dip")
    x = ca.SX.sym("x", 6)
    z = ca.SX.sym("z", 3)
    u = ca.SX.sym("u", 1)
    q, dq = x[:3], x[3:]
    L = lagrangian(prm, q, dq)
    dL_ddq = ca.gradient(L, dq)
    # Lagrange's equations d/dt(dL/d(dq)) - dL/dq = Q with
    # d/dt(dL/d(dq)) = (d^2 L / d(dq)^2) ddq + (d^2 L / d(dq) dq) dq.
    M = ca.jacobian(dL_ddq, dq)
    alg = ca.mtimes(M, z) + ca.mtimes(ca.jacobian(dL_ddq, q), dq) - ca.gradient(L, q) - ca.vertcat(u[0], 0, 0)
    inf = np.inf
    return Model(
        "dip", x, u, ca.vertcat(dq, z), z=z, alg=ca.simplify(alg),
        state_names=["s", "theta1", "theta2", "v", "omega1", "omega2"],
        input_names=["F"],
        state_units=["m", "rad", "rad", "m/s", "rad/s", "rad/s"],
        input_units=["N"],
        algebraic_names=["dds", "ddtheta1", "ddtheta2"],
        x0=[0.0, 0.2, -0.15, 0.0, 0.0, 0.0],
        z0=[0.0, 0.0, 0.0],
        u0=[0.0],
        x_min=[-prm.s_max, -inf, -inf, -inf, -inf, -inf],
        x_max=[prm.s_max, inf, inf, inf, inf, inf],
        u_min=[-prm.F_max],
        u_max=[prm.F_max],
        dt=0.02,
        description="do-mpc's double inverted pendulum on a cart, accelerations as algebraic states (index-1 DAE)",
    )


def measurement(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
    """Default sensors: the cart position ``s`` [m] and the two rod angles ``theta1, theta2`` [rad] (encoders);
    the velocities are estimated.

    Parameters
    ----------
    x : casadi.SX, shape (6, 1)
    u : casadi.SX, shape (1, 1)
    p : casadi.SX, shape (0, 1)

    Returns
    -------
    casadi.SX, shape (3, 1)
    """
    return x[0:3]


def scenario(model: Model) -> Scenario:
    """Catch the double pendulum from theta = (0.2, -0.15) rad and return the cart to the origin, |F| <= 20 N.

    A one-second horizon (N = 50 at dt = 0.02) with a tenfold terminal weight:
    shorter horizons (N = 30 tried) let the cart run into its 2 m bound
    while catching, and the pendulum falls.
    """
    q = [10.0, 100.0, 100.0, 1.0, 1.0, 1.0]
    return Scenario(
        model=model.name,
        problem=OCPProblem(horizon=50, dt=0.02, method="rk4", steps=1,
                           cost=QuadraticCost(Q=q, R=[1e-2], Q_terminal=[10 * v for v in q], x_ref=np.zeros(6),
                                              u_ref=[0.0])),
        x0=model.x0, sim_steps=200,
        description="catch the double pendulum from theta = (0.2, -0.15) rad and bring the cart to the origin",
    )
