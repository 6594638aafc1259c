"""Quadrotor as a rigid body with a unit-quaternion attitude (Newton-Euler).

State (13): position ``p`` [m] and velocity ``v`` [m/s] in the world frame
(z up), the unit quaternion ``q = (qw, qx, qy, qz)`` rotating body to world,
and the body angular rates ``w`` [rad/s]::

    x = [px, py, pz, qw, qx, qy, qz, vx, vy, vz, wx, wy, wz]

Inputs (4): rotor thrusts ``T1..T4`` [N], ``0 <= Ti <= T_max``.

Equations (Newton-Euler about the centre of mass; quaternion kinematics)::

    p' = v
    q' = 1/2 q (x) (0, w)
    v' = R(q) [0, 0, T1 + T2 + T3 + T4] / m - [0, 0, g]
    w' = J^{-1} (tau - w x (J w))

with the Hamilton product ``(a1, b1) (x) (a2, b2) = (a1 a2 - b1.b2,
a1 b2 + a2 b1 + b1 x b2)`` and ``R(q) = I + 2 qw S(e) + 2 S(e)^2``,
``e = (qx, qy, qz)``, ``S`` the skew (cross-product) matrix. ``J`` is the full
3x3 inertia matrix about the centre of mass in body axes (symmetric positive
definite, products of inertia included); ``J^{-1}`` is evaluated numerically.

Layout: X configuration, body axes x forward, y left, z up; rotor ``i`` sits
at ``d (cx_i, cy_i)`` with ``d = arm / sqrt(2)``::

    rotor 1  front-right  (+d, -d)  spins CCW (seen from above)  yaw torque -kappa T1
    rotor 2  rear-right   (-d, -d)  spins CW                     yaw torque +kappa T2
    rotor 3  rear-left    (-d, +d)  spins CCW                    yaw torque -kappa T3
    rotor 4  front-left   (+d, +d)  spins CW                     yaw torque +kappa T4

    tau_x = d (-T1 - T2 + T3 + T4)
    tau_y = d (-T1 + T2 + T3 - T4)
    tau_z = kappa (-T1 + T2 - T3 + T4)

so ``T = T_hover + delta (-1, 1, -1, 1)`` is a pure yaw torque ``4 kappa delta``
at unchanged total thrust. The drag torque of a rotor opposes its spin, with
``kappa`` the torque-to-thrust ratio.

Sources: cheat sheet TTK4130 (H. Bårsaune, 2023), sec. 6.7.1 (``R`` from Euler
parameters), 6.7.3 (quaternion product) and 7.3 (Newton-Euler; its second
compact form writes ``alpha`` dot where ``omega`` dot is meant: Erratum E19 in
the README); R. Mahony,
V. Kumar, P. Corke, "Multirotor aerial vehicles", IEEE RAM 19(3), 2012, for the
rotor model. Constants: a 0.5 kg quad of about 330 mm motor-to-motor
(F330/F450 class).

The flow keeps ``|q| = 1``; a Runge-Kutta step does so only to its accuracy,
so long simulations should renormalise ``q`` (no stabilising term is added, so
the right-hand side is exactly the physics above).

Default scenario: point-to-point from ``p = (1, 1, 1)`` at rest, level, to the
origin; ``u0`` is the hover thrust ``m g / 4`` per rotor. A reference for this
model must use the identity quaternion ``(1, 0, 0, 0)``, not zeros.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import casadi as ca
import numpy as np

from shooting.model import Model
from shooting.models import check_numbers, parse_params
from shooting.mpc.problem import OCPProblem, QuadraticCost
from shooting.mpc.scenarios import Scenario

__all__ = ["QuadrotorParams", "make_model", "measurement", "quaternion_product", "rotation_matrix", "scenario"]

# Inertia about the centre of mass in body axes [kg m^2]: principal moments of
# a 0.5 kg quad with small products of inertia (battery slightly off-centre).
_J_DEFAULT = (
    (2.32e-3, -1.0e-5, 2.0e-5),
    (-1.0e-5, 2.41e-3, -1.5e-5),
    (2.0e-5, -1.5e-5, 4.30e-3),
)


@dataclass(frozen=True)
class QuadrotorParams:
    """Physical constants of the quadrotor."""

    m: float = 0.5  # total mass [kg]
    arm: float = 0.165  # distance from the centre of mass to each rotor axis [m]
    kappa: float = 0.016  # rotor drag torque / thrust ratio [m] (yaw torque = kappa T)
    g: float = 9.81  # gravitational acceleration [m/s^2]
    T_max: float = 2.5  # maximum thrust of one rotor [N] (thrust-to-weight 2.04)
    J: Sequence[Sequence[float]] = _J_DEFAULT  # inertia matrix about the CoM, body axes [kg m^2]

    def __post_init__(self) -> None:
        check_numbers(self, "quadrotor", positive=("m", "arm", "kappa", "g", "T_max"))
        try:
            J = np.asarray(self.J, dtype=float)
        except (TypeError, ValueError):
            raise ValueError("quadrotor: parameter J must be a 3x3 matrix of numbers [kg m^2]") from None
        if J.shape == (3,):
            J = np.diag(J)
        if J.shape != (3, 3) or not np.isfinite(J).all():
            raise ValueError(
                f"quadrotor: parameter J must be a finite 3x3 matrix (or 3 principal moments), got shape {J.shape}"
            )
        if not np.allclose(J, J.T, rtol=0.0, atol=1e-12 * np.abs(J).max()):
            raise ValueError("quadrotor: parameter J must be symmetric (J[i][j] == J[j][i])")
        if np.linalg.eigvalsh(J).min() <= 0:
            raise ValueError("quadrotor: parameter J must be positive definite (all principal moments > 0)")
        if 4 * self.T_max <= self.m * self.g:
            raise ValueError(
                f"quadrotor: 4 T_max = {4 * self.T_max} N cannot lift m g = {self.m * self.g:.4g} N: raise T_max"
            )

    @property
    def inertia(self) -> np.ndarray:
        """The inertia matrix as a (3, 3) array [kg m^2]."""
        J = np.asarray(self.J, dtype=float)
        return np.diag(J) if J.shape == (3,) else J


def quaternion_product(a: ca.SX, b: ca.SX) -> ca.SX:
    """Hamilton product ``a (x) b`` of quaternions stored scalar first.

    Parameters
    ----------
    a, b : casadi.SX or casadi.DM, shape (4, 1)
        ``(eta, eps)`` with ``eta`` the scalar part.

    Returns
    -------
    casadi.SX, shape (4, 1)
        ``(a0 b0 - a_v . b_v, a0 b_v + b0 a_v + a_v x b_v)`` (cheat sheet 6.7.3).
    """
    a0, av = a[0], a[1:4]
    b0, bv = b[0], b[1:4]
    return ca.vertcat(a0 * b0 - ca.dot(av, bv), a0 * bv + b0 * av + ca.cross(av, bv))


def rotation_matrix(q: ca.SX) -> ca.SX:
    """Rotation matrix of a unit quaternion, ``R = I + 2 eta S(eps) + 2 S(eps)^2``.

    Parameters
    ----------
    q : casadi.SX or casadi.DM, shape (4, 1)
        Unit quaternion ``(eta, eps)``, scalar first.

    Returns
    -------
    casadi.SX, shape (3, 3)
        Maps body coordinates to world coordinates (cheat sheet 6.7.1).
    """
    S = ca.skew(q[1:4])
    return ca.SX.eye(3) + 2 * q[0] * S + 2 * (S @ S)


def make_model(**params: object) -> Model:
    """Build the quaternion quadrotor (X layout, thrusts as inputs).

    Parameters
    ----------
    **params
        Fields of `QuadrotorParams` (``m, arm, kappa, g, T_max, J``).

    Returns
    -------
    Model
        ``nx = 13``, ``nu = 4`` (``T1..T4``), ``np = 0``, ``dt = 0.05``.
    """
    prm = parse_params(QuadrotorParams, params, "quadrotor")
    J = prm.inertia
    J_inv = np.linalg.inv(J)
    d = prm.arm / np.sqrt(2.0)

    x = ca.SX.sym("x", 13)
    u = ca.SX.sym("u", 4)
    q, v, w = x[3:7], x[7:10], x[10:13]  # x[0:3] is the position, which no derivative depends on
    T1, T2, T3, T4 = u[0], u[1], u[2], u[3]

    thrust = T1 + T2 + T3 + T4
    tau = ca.vertcat(
        d * (-T1 - T2 + T3 + T4),
        d * (-T1 + T2 + T3 - T4),
        prm.kappa * (-T1 + T2 - T3 + T4),
    )
    q_dot = 0.5 * quaternion_product(q, ca.vertcat(0, w))
    v_dot = rotation_matrix(q) @ ca.vertcat(0, 0, thrust) / prm.m - ca.vertcat(0, 0, prm.g)
    # Euler's equation about the centre of mass in body axes (cheat sheet 7.3).
    w_dot = ca.DM(J_inv) @ (tau - ca.cross(w, ca.DM(J) @ w))
    xdot = ca.vertcat(v, q_dot, v_dot, w_dot)

    hover = prm.m * prm.g / 4
    return Model(
        "quadrotor",
        x,
        u,
        xdot,
        state_names=["px", "py", "pz", "qw", "qx", "qy", "qz", "vx", "vy", "vz", "wx", "wy", "wz"],
        input_names=["T1", "T2", "T3", "T4"],
        state_units=["m", "m", "m", "", "", "", "", "m/s", "m/s", "m/s", "rad/s", "rad/s", "rad/s"],
        input_units=["N", "N", "N", "N"],
        x0=[1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        u0=[hover] * 4,
        u_min=[0.0] * 4,
        u_max=[prm.T_max] * 4,
        dt=0.05,
        description="quadrotor, unit quaternion attitude, X layout, rotor thrusts; point-to-point to the origin",
    )


def measurement(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
    """Default sensors: the position ``px, py, pz`` [m] and the attitude quaternion ``qw, qx, qy, qz`` (a
    motion-capture system); the velocities and body rates are estimated.

    Parameters
    ----------
    x : casadi.SX, shape (13, 1)
    u : casadi.SX, shape (4, 1)
    p : casadi.SX, shape (0, 1)

    Returns
    -------
    casadi.SX, shape (7, 1)
    """
    return x[0:7]


def scenario(model: Model) -> Scenario:
    """Point-to-point flight from (1, 1, 1) at rest to hover at the origin.

    The target is level hover: the identity quaternion (not zeros) at the
    hover thrust ``u0``.
    """
    x_ref = np.zeros(13)
    x_ref[3] = 1.0
    q = [10.0] * 3 + [1.0] * 4 + [1.0] * 3 + [0.1] * 3
    return Scenario(
        model=model.name,
        problem=OCPProblem(horizon=30, dt=0.05, method="rk4", steps=1,
                           cost=QuadraticCost(Q=q, R=[1.0] * 4, Q_terminal=q, x_ref=x_ref, u_ref=model.u0)),
        x0=model.x0, sim_steps=80,
        description="point-to-point from (1, 1, 1) at rest to hover at the origin",
    )
