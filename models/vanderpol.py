"""Forced Van der Pol oscillator with the damping ``mu`` as a model parameter.

State ``x = [x1, x2]``, input ``u``, parameter ``p = [mu]``::

    x1' = x2
    x2' = mu (1 - x1^2) x2 - x1 + u

For ``u = 0`` and ``mu > 0`` the origin is unstable and every other solution
tends to a limit cycle (amplitude about 2 in ``x1`` for ``mu = 1``). Because
``mu`` is a parameter ``p`` (not a constant), one generated integrator serves
every ``mu`` and its value can be changed at run time. Source: B. van der Pol,
"On relaxation-oscillations", Phil. Mag. 2 (1926); the controlled form with
``|u| <= 1`` is the classic CasADi / ACADO optimal-control example.

Default scenario: regulation from ``x0 = [0.5, 0.5]`` to the origin with
``|u| <= 1``, ``mu = 1`` (``p0``), ``dt = 0.1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np

from shooting.model import Model
from shooting.models import check_numbers, parse_params
from shooting.mpc.problem import OCPProblem, QuadraticCost
from shooting.mpc.scenarios import Scenario

__all__ = ["VanDerPolParams", "make_model", "measurement", "scenario"]


@dataclass(frozen=True)
class VanDerPolParams:
    """Nominal values and bounds of the Van der Pol oscillator."""

    mu: float = 1.0  # nominal damping parameter p0 = [mu] [-] (a model parameter, changeable at run time)
    u_max: float = 1.0  # input bound |u| <= u_max [-]

    def __post_init__(self) -> None:
        check_numbers(self, "vanderpol", positive=("u_max",), nonnegative=("mu",))


def make_model(**params: float) -> Model:
    """Build the forced Van der Pol oscillator.

    Parameters
    ----------
    **params : float
        Fields of `VanDerPolParams` (``mu`` sets ``p0``, ``u_max`` the bound).

    Returns
    -------
    Model
        ``nx = 2`` (``x1, x2``), ``nu = 1`` (``u``), ``np = 1`` (``mu``),
        ``dt = 0.1``.
    """
    prm = parse_params(VanDerPolParams, params, "vanderpol")
    x = ca.SX.sym("x", 2)
    u = ca.SX.sym("u", 1)
    p = ca.SX.sym("p", 1)
    x1, x2, mu = x[0], x[1], p[0]
    xdot = ca.vertcat(x2, mu * (1 - x1**2) * x2 - x1 + u[0])
    return Model(
        "vanderpol",
        x,
        u,
        xdot,
        p,
        state_names=["x1", "x2"],
        input_names=["u"],
        param_names=["mu"],
        x0=[0.5, 0.5],
        u0=[0.0],
        p0=[prm.mu],
        u_min=[-prm.u_max],
        u_max=[prm.u_max],
        dt=0.1,
        description="forced Van der Pol oscillator, damping mu as parameter; regulation to the origin",
    )


def measurement(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
    """Default sensor: the position ``x1``; ``x2`` is estimated.

    Parameters
    ----------
    x : casadi.SX, shape (2, 1)
    u : casadi.SX, shape (1, 1)
    p : casadi.SX, shape (1, 1)
        ``[mu]``.

    Returns
    -------
    casadi.SX, shape (1, 1)
    """
    return x[0]


def scenario(model: Model) -> Scenario:
    """Regulation to the origin (unstable for u = 0), |u| <= 1."""
    return Scenario(
        model=model.name,
        problem=OCPProblem(horizon=20, dt=model.dt or 0.1, method="rk4", steps=1,
                           cost=QuadraticCost(Q=[1.0, 1.0], R=[0.1], Q_terminal=[10.0, 10.0],
                                              x_ref=np.zeros(2), u_ref=[0.0])),
        x0=model.x0, sim_steps=80,
        description="regulation to the origin (unstable for u = 0), |u| <= 1",
    )
