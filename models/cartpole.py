"""Pendulum on a cart, exactly as in acados' getting-started example.

State ``x = [p, theta, v, omega]`` (cart position [m], pole angle [rad] with
``theta = 0`` upright, cart velocity [m/s], pole angular velocity [rad/s]),
input ``u = [F]`` (horizontal force on the cart [N]). With
``D = M + m - m cos^2(theta)``::

    p'     = v
    theta' = omega
    v'     = (-m l sin(theta) omega^2 + m g cos(theta) sin(theta) + F) / D
    omega' = (-m l cos(theta) sin(theta) omega^2 + F cos(theta) + (M + m) g sin(theta)) / (l D)

Source: acados, ``examples/acados_python/getting_started/common/pendulum_model.py``
(``export_pendulum_ode_model``; note that acados' comments swap the labels of
``g`` and ``l``, the values 9.81 and 0.8 are what it uses) and
``minimal_example_ocp.py`` (``Fmax = 80``, ``x0 = [0, pi, 0, 0]``, ``Tf = 1``,
``N = 20``, hence ``dt = 0.05``). acados bounds only ``F``; the generous cart
position bound ``|p| <= 2 m`` here is inactive in that example's swing-up.

Default scenario: swing-up from hanging, ``x0 = [0, pi, 0, 0]``, to the origin.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np

from shooting.model import Model
from shooting.models import check_numbers, parse_params
from shooting.mpc.problem import OCPProblem, QuadraticCost
from shooting.mpc.scenarios import Scenario

__all__ = ["CartPoleParams", "make_model", "measurement", "scenario"]


@dataclass(frozen=True)
class CartPoleParams:
    """Physical constants of the cart-pole (acados' values as defaults)."""

    M: float = 1.0  # mass of the cart [kg]
    m: float = 0.1  # mass of the pole (ball at its tip) [kg]
    l: float = 0.8  # length of the pole [m]  # noqa: E741 - acados' name
    g: float = 9.81  # gravitational acceleration [m/s^2]
    F_max: float = 80.0  # force bound |F| <= F_max [N]
    p_max: float = 2.0  # cart position bound |p| <= p_max [m] (inf: unbounded)

    def __post_init__(self) -> None:
        check_numbers(self, "cartpole", positive=("M", "m", "l", "g", "F_max", "p_max"), allow_inf=("p_max",))


def make_model(**params: float) -> Model:
    """Build acados' pendulum on a cart.

    Parameters
    ----------
    **params : float
        Fields of `CartPoleParams` (``M, m, l, g, F_max, p_max``); others are
        a ValueError.

    Returns
    -------
    Model
        ``nx = 4`` (``p, theta, v, omega``), ``nu = 1`` (``F``), ``np = 0``,
        ``dt = 0.05``.
    """
    prm = parse_params(CartPoleParams, params, "cartpole")
    M, m, l, g = prm.M, prm.m, prm.l, prm.g  # noqa: E741

    x = ca.SX.sym("x", 4)
    u = ca.SX.sym("u", 1)
    theta, v, omega, F = x[1], x[2], x[3], u[0]
    s, c = ca.sin(theta), ca.cos(theta)
    D = M + m - m * c * c
    xdot = ca.vertcat(
        v,
        omega,
        (-m * l * s * omega**2 + m * g * c * s + F) / D,
        (-m * l * c * s * omega**2 + F * c + (M + m) * g * s) / (l * D),
    )
    inf = np.inf
    return Model(
        "cartpole",
        x,
        u,
        xdot,
        state_names=["p", "theta", "v", "omega"],
        input_names=["F"],
        state_units=["m", "rad", "m/s", "rad/s"],
        input_units=["N"],
        x0=[0.0, np.pi, 0.0, 0.0],
        u0=[0.0],
        x_min=[-prm.p_max, -inf, -inf, -inf],
        x_max=[prm.p_max, inf, inf, inf],
        u_min=[-prm.F_max],
        u_max=[prm.F_max],
        dt=0.05,
        description="acados' pendulum on a cart (theta = 0 upright); swing-up from hanging",
    )


def measurement(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
    """Default sensors: the cart position ``p`` [m] and the pole angle ``theta`` [rad] (two encoders); the
    velocities are estimated.

    Parameters
    ----------
    x : casadi.SX, shape (4, 1)
    u : casadi.SX, shape (1, 1)
    p : casadi.SX, shape (0, 1)

    Returns
    -------
    casadi.SX, shape (2, 1)
    """
    return ca.vertcat(x[0], x[1])


def scenario(model: Model) -> Scenario:
    """Swing-up from hanging (theta = pi) to upright at the origin, |F| <= 80 N.

    acados' minimal example (Tf = 1 s, N = 20, Fmax = 80) with its weights
    W = 2 diag(1e3, 1e3, 1e-2, 1e-2, 1e-2) under acados' factor 1/2, i.e.
    these exact weights in our cost without 1/2.
    """
    q = [1e3, 1e3, 1e-2, 1e-2]
    return Scenario(
        model=model.name,
        problem=OCPProblem(horizon=20, dt=0.05, method="rk4", steps=1,
                           cost=QuadraticCost(Q=q, R=[1e-2], Q_terminal=q, x_ref=np.zeros(4), u_ref=[0.0])),
        x0=model.x0, sim_steps=100,
        description="swing-up from hanging (theta = pi) to upright at the origin, |F| <= 80 N",
    )
