"""Torque-driven rigid pendulum with viscous joint friction.

A point mass ``m`` on a massless rod of length ``l`` turns about a fixed
joint driven by a torque ``tau``. The angle ``theta`` is measured from the
UPRIGHT position (``theta = 0`` up, ``theta = pi`` hanging), as for the
cart-pole. With the Lagrangian ``L = 1/2 m l^2 omega^2 - m g l cos(theta)``
and the generalised force ``tau - b omega``, Euler-Lagrange gives::

    theta' = omega
    omega' = (g / l) sin(theta) + (tau - b omega) / (m l^2)

Total energy ``E = 1/2 m l^2 omega^2 + m g l cos(theta)`` is conserved for
``b = 0, tau = 0``. Source: R. Tedrake, "Underactuated Robotics", ch. 2 (the
simple pendulum, ``m l^2 theta'' + b theta' + m g l sin(theta) = u`` with
``theta = 0`` hanging), shifted by ``pi`` so that 0 is upright.

Default scenario: swing-up from hanging, ``x0 = [pi, 0]``, to the origin with
``|tau| <= 8 N m``, less than the torque ``m g l = 9.81 N m`` needed to hold
the pendulum horizontal, so the controller must swing back once to gain
energy. (Checked with a closed-loop MPC, horizon 2 s at ``dt = 0.05``,
``Q = diag(10, 0.1)``, ``R = 0.01``: upright after about 2 s; with
``tau_max = 5`` that horizon is too short and the swing-up stalls.)
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np

from shooting.model import Model
from shooting.models import check_numbers, parse_params
from shooting.mpc.problem import OCPProblem, QuadraticCost
from shooting.mpc.scenarios import Scenario

__all__ = ["PendulumParams", "make_model", "measurement", "scenario"]


@dataclass(frozen=True)
class PendulumParams:
    """Physical constants of the pendulum."""

    m: float = 1.0  # mass of the bob [kg]
    l: float = 1.0  # length of the rod, joint to bob [m]  # noqa: E741
    g: float = 9.81  # gravitational acceleration [m/s^2]
    b: float = 0.1  # viscous friction in the joint [N m s/rad]
    tau_max: float = 8.0  # torque bound |tau| <= tau_max [N m]
    omega_max: float = 4.0 * np.pi  # generous speed bound |omega| <= omega_max [rad/s] (inf: unbounded)

    def __post_init__(self) -> None:
        check_numbers(
            self,
            "pendulum",
            positive=("m", "l", "g", "tau_max", "omega_max"),
            nonnegative=("b",),
            allow_inf=("omega_max",),
        )


def make_model(**params: float) -> Model:
    """Build the torque-driven pendulum (``theta = 0`` upright).

    Parameters
    ----------
    **params : float
        Fields of `PendulumParams` (``m, l, g, b, tau_max, omega_max``).

    Returns
    -------
    Model
        ``nx = 2`` (``theta, omega``), ``nu = 1`` (``tau``), ``np = 0``,
        ``dt = 0.05``.
    """
    prm = parse_params(PendulumParams, params, "pendulum")
    x = ca.SX.sym("x", 2)
    u = ca.SX.sym("u", 1)
    theta, omega, tau = x[0], x[1], u[0]
    xdot = ca.vertcat(
        omega,
        prm.g / prm.l * ca.sin(theta) + (tau - prm.b * omega) / (prm.m * prm.l**2),
    )
    return Model(
        "pendulum",
        x,
        u,
        xdot,
        state_names=["theta", "omega"],
        input_names=["tau"],
        state_units=["rad", "rad/s"],
        input_units=["N m"],
        x0=[np.pi, 0.0],
        u0=[0.0],
        x_min=[-np.inf, -prm.omega_max],
        x_max=[np.inf, prm.omega_max],
        u_min=[-prm.tau_max],
        u_max=[prm.tau_max],
        dt=0.05,
        description="torque-driven pendulum with joint friction (theta = 0 upright); swing-up from hanging",
    )


def measurement(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
    """Default sensor: the joint angle ``theta`` [rad] (an encoder); omega is estimated.

    Parameters
    ----------
    x : casadi.SX, shape (2, 1)
    u : casadi.SX, shape (1, 1)
    p : casadi.SX, shape (0, 1)

    Returns
    -------
    casadi.SX, shape (1, 1)
    """
    return x[0]


def scenario(model: Model) -> Scenario:
    """Swing-up from hanging (theta = pi) with |tau| <= 8 N m, less than m g l."""
    return Scenario(
        model=model.name,
        problem=OCPProblem(horizon=40, dt=0.05, method="rk4", steps=1,
                           cost=QuadraticCost(Q=[10.0, 0.1], R=[0.01], Q_terminal=[10.0, 0.1],
                                              x_ref=np.zeros(2), u_ref=[0.0])),
        x0=model.x0, sim_steps=100,
        description="swing-up from hanging (theta = pi) with |tau| <= 8 N m, less than m g l",
    )
