"""Planar two-link arm in a vertical plane, equations derived from the Lagrangian.

Generalised coordinates ``q = (q1, q2)``: ``q1`` is the angle of link 1 from
the UPWARD vertical (counter-clockwise positive), ``q2`` the angle of link 2
relative to link 1. ``q = 0`` is the arm pointing straight up (an unstable
equilibrium with zero torque), ``q = (pi, 0)`` hanging. Inputs are the joint
torques ``tau = (tau1, tau2)`` [N m]; state ``x = [q1, q2, dq1, dq2]``.

Each link ``i`` has mass ``m_i`` at its centre of mass, a distance ``lc_i``
from its proximal joint, and inertia ``I_i`` about that centre. With the
centre positions (y up, gravity -y)::

    c1 = lc1 (-sin q1, cos q1)
    c2 = l1 (-sin q1, cos q1) + lc2 (-sin(q1 + q2), cos(q1 + q2))

the kinetic and potential energies are::

    T = 1/2 m1 |c1'|^2 + 1/2 I1 dq1^2 + 1/2 m2 |c2'|^2 + 1/2 I2 (dq1 + dq2)^2
    U = m1 g c1_y + m2 g c2_y

and ``L = T - U``. The code builds ``T`` and ``U`` as CasADi SX expressions
and derives everything else symbolically: ``M(q) = d^2 T / d dq^2`` (a
hessian) and Euler-Lagrange ``d/dt(dL/d dq) - dL/dq = tau - b dq``, i.e.::

    M(q) ddq = tau - b dq + dL/dq - (d (dL/d dq) / dq) dq

solved for ``ddq`` with ``casadi.solve``. Source: cheat sheet TTK4130
(H. Bårsaune, 2023), sec. 8.2; the result agrees with the closed form of
M. Spong, S. Hutchinson, M. Vidyasagar, "Robot Modeling and Control",
sec. 7.4.1 (checked in the tests, with their ``q1`` measured from the
horizontal).

`energy` returns ``T + U`` for a state, `mass_matrix` the matrix ``M(q)``.

Default scenario: swing-up from hanging, ``x0 = [pi, 0, 0, 0]``, to upright
with ``|tau1| <= 20 N m``, ``|tau2| <= 10 N m``.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np

from shooting.model import Model
from shooting.models import check_numbers, parse_params
from shooting.mpc.problem import OCPProblem, QuadraticCost
from shooting.mpc.scenarios import Scenario

__all__ = ["TwoLinkArmParams", "energy", "make_model", "mass_matrix", "measurement", "scenario"]


@dataclass(frozen=True)
class TwoLinkArmParams:
    """Physical constants of the arm (uniform rods by default)."""

    m1: float = 1.0  # mass of link 1 [kg]
    m2: float = 1.0  # mass of link 2 [kg]
    l1: float = 1.0  # length of link 1, joint 1 to joint 2 [m]
    l2: float = 1.0  # length of link 2 [m]
    lc1: float | None = None  # joint 1 to the centre of mass of link 1 [m]; None: l1 / 2
    lc2: float | None = None  # joint 2 to the centre of mass of link 2 [m]; None: l2 / 2
    I1: float | None = None  # inertia of link 1 about its centre of mass [kg m^2]; None: m1 l1^2 / 12
    I2: float | None = None  # inertia of link 2 about its centre of mass [kg m^2]; None: m2 l2^2 / 12
    g: float = 9.81  # gravitational acceleration [m/s^2]
    b1: float = 0.05  # viscous damping in joint 1 [N m s/rad]
    b2: float = 0.05  # viscous damping in joint 2 [N m s/rad]
    tau1_max: float = 20.0  # torque bound |tau1| <= tau1_max [N m]
    tau2_max: float = 10.0  # torque bound |tau2| <= tau2_max [N m]

    def __post_init__(self) -> None:
        check_numbers(self, "two_link_arm", positive=("m1", "m2", "l1", "l2"))
        # None means "uniform rod": centre of mass at mid-length, I = m l^2 / 12.
        derived = {
            "lc1": self.l1 / 2,
            "lc2": self.l2 / 2,
            "I1": self.m1 * self.l1**2 / 12,
            "I2": self.m2 * self.l2**2 / 12,
        }
        for name, value in derived.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        check_numbers(
            self,
            "two_link_arm",
            positive=("g", "tau1_max", "tau2_max"),
            nonnegative=("lc1", "lc2", "I1", "I2", "b1", "b2"),
        )
        _, lc2, _, I2 = self.filled()
        if self.m2 * lc2**2 + I2 == 0:
            raise ValueError(
                "two_link_arm: lc2 = 0 and I2 = 0 leave link 2 without inertia about joint 2 (M(q) singular)"
            )

    def filled(self) -> tuple[float, float, float, float]:
        """``(lc1, lc2, I1, I2)`` with the uniform rods' values where None was given (as ``__post_init__`` set)."""
        lc1, lc2, I1, I2 = self.lc1, self.lc2, self.I1, self.I2
        if lc1 is None or lc2 is None or I1 is None or I2 is None:  # (unreachable after __post_init__)
            raise ValueError("two_link_arm: lc1, lc2, I1, I2 not filled in")
        return float(lc1), float(lc2), float(I1), float(I2)


def _energies(q: ca.SX, dq: ca.SX, prm: TwoLinkArmParams) -> tuple[ca.SX, ca.SX]:
    """Kinetic and potential energy ``(T, U)`` [J] as SX expressions in ``q, dq``."""
    q1, q2 = q[0], q[1]
    lc1, lc2, I1, I2 = prm.filled()
    c1 = lc1 * ca.vertcat(-ca.sin(q1), ca.cos(q1))
    c2 = prm.l1 * ca.vertcat(-ca.sin(q1), ca.cos(q1)) + lc2 * ca.vertcat(-ca.sin(q1 + q2), ca.cos(q1 + q2))
    # Velocities of the centres of mass by the chain rule: c' = (dc/dq) dq.
    v1 = ca.jacobian(c1, q) @ dq
    v2 = ca.jacobian(c2, q) @ dq
    T = (
        0.5 * prm.m1 * ca.dot(v1, v1)
        + 0.5 * I1 * dq[0] ** 2
        + 0.5 * prm.m2 * ca.dot(v2, v2)
        + 0.5 * I2 * (dq[0] + dq[1]) ** 2
    )
    U = prm.m1 * prm.g * c1[1] + prm.m2 * prm.g * c2[1]
    return T, U


def make_model(**params: float) -> Model:
    """Build the two-link arm from its Lagrangian.

    Parameters
    ----------
    **params : float
        Fields of `TwoLinkArmParams` (``m1, m2, l1, l2, lc1, lc2, I1, I2, g,
        b1, b2, tau1_max, tau2_max``).

    Returns
    -------
    Model
        ``nx = 4`` (``q1, q2, dq1, dq2``), ``nu = 2`` (``tau1, tau2``),
        ``np = 0``, ``dt = 0.05``.
    """
    prm = parse_params(TwoLinkArmParams, params, "two_link_arm")
    x = ca.SX.sym("x", 4)
    u = ca.SX.sym("u", 2)
    q, dq = x[0:2], x[2:4]
    T, U = _energies(q, dq, prm)
    L = T - U
    M = ca.hessian(T, dq)[0]
    dL_dq = ca.gradient(L, q)
    dL_ddq = ca.gradient(L, dq)
    # Euler-Lagrange (cheat sheet 8.2) with d/dt(dL/d dq) expanded by the chain
    # rule: M ddq + (d(dL/d dq)/dq) dq - dL/dq = tau - b dq.
    rhs = u - ca.vertcat(prm.b1 * dq[0], prm.b2 * dq[1]) + dL_dq - ca.jacobian(dL_ddq, q) @ dq
    ddq = ca.solve(M, rhs)
    xdot = ca.vertcat(dq, ddq)
    return Model(
        "two_link_arm",
        x,
        u,
        xdot,
        state_names=["q1", "q2", "dq1", "dq2"],
        input_names=["tau1", "tau2"],
        state_units=["rad", "rad", "rad/s", "rad/s"],
        input_units=["N m", "N m"],
        x0=[np.pi, 0.0, 0.0, 0.0],
        u0=[0.0, 0.0],
        u_min=[-prm.tau1_max, -prm.tau2_max],
        u_max=[prm.tau1_max, prm.tau2_max],
        dt=0.05,
        description="planar two-link arm from its Lagrangian (q = 0 upright); swing-up from hanging",
    )


def _numeric(expr_of: str, x: np.ndarray, params: dict[str, float]) -> np.ndarray:
    prm = parse_params(TwoLinkArmParams, params, "two_link_arm")
    q, dq = ca.SX.sym("q", 2), ca.SX.sym("dq", 2)
    T, U = _energies(q, dq, prm)
    out = T + U if expr_of == "energy" else ca.hessian(T, dq)[0]
    return np.array(ca.Function(expr_of, [q, dq], [out], ["q", "dq"], [expr_of])(x[:2], x[2:]))


def energy(x: np.ndarray, **params: float) -> float:
    """Total mechanical energy ``T + U`` [J] of the arm at state `x`.

    Parameters
    ----------
    x : array_like, shape (4,)
        ``[q1, q2, dq1, dq2]``.
    **params : float
        As for `make_model`.

    Returns
    -------
    float
        Conserved along solutions when ``b1 = b2 = 0`` and ``tau = 0``.
    """
    x = np.asarray(x, dtype=float).reshape(4)
    return float(_numeric("energy", x, params)[0, 0])


def mass_matrix(q: np.ndarray, **params: float) -> np.ndarray:
    """Mass matrix ``M(q)``, the hessian of the kinetic energy in ``dq``.

    Parameters
    ----------
    q : array_like, shape (2,)
        Joint angles ``[q1, q2]``.
    **params : float
        As for `make_model`.

    Returns
    -------
    numpy.ndarray, shape (2, 2)
    """
    q = np.asarray(q, dtype=float).reshape(2)
    return _numeric("mass_matrix", np.concatenate([q, np.zeros(2)]), params)


def measurement(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
    """Default sensors: the joint angles ``q1, q2`` [rad] (two encoders); the joint rates are estimated.

    Parameters
    ----------
    x : casadi.SX, shape (4, 1)
    u : casadi.SX, shape (2, 1)
    p : casadi.SX, shape (0, 1)

    Returns
    -------
    casadi.SX, shape (2, 1)
    """
    return ca.vertcat(x[0], x[1])


def scenario(model: Model) -> Scenario:
    """Swing-up from hanging (q1 = pi) to upright, |tau1| <= 20, |tau2| <= 10 N m."""
    q = [100.0, 100.0, 0.1, 0.1]
    return Scenario(
        model=model.name,
        problem=OCPProblem(horizon=40, dt=0.05, method="rk4", steps=1,
                           cost=QuadraticCost(Q=q, R=[0.01, 0.01], Q_terminal=q, x_ref=np.zeros(4),
                                              u_ref=[0.0, 0.0])),
        x0=model.x0, sim_steps=100,
        description="swing-up from hanging (q1 = pi) to upright, |tau1| <= 20, |tau2| <= 10 N m",
    )
