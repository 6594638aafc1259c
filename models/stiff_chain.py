"""A stiff chain of masses, springs and dampers: the test case for implicit methods.

``n`` masses (default 3) on a line. Element ``i`` (spring ``k_i`` in parallel
with damper ``c_i``) joins mass ``i`` to mass ``i - 1``; element 1 joins mass 1
to a fixed wall. A force ``F`` pushes the last mass. Positions ``s_i`` are
deviations from rest [m], ``v_i`` velocities [m/s]; state
``x = [s_1 .. s_n, v_1 .. v_n]``. With the element extensions
``e_1 = s_1``, ``e_i = s_i - s_{i-1}`` and tensions
``f_i = k_i e_i + c_i e_i'`` (the wall spring hardens:
``f_1 = k_1 (e_1 + h e_1^3) + c_1 e_1'``)::

    s_i' = v_i
    m_i v_i' = -f_i + f_{i+1}           (f_{n+1} = F)

Defaults: masses (1, 1, 0.01) kg, springs (10, 10, 10) N/m, dampers
(5, 5, 10) N s/m, hardening h = 1 1/m^2. The last mass is light (10 g, a
sensor or end effector) attached by a strong damper: its motion relative to
mass 2 relaxes with rate ``-c_3 / m_3 = -1000 1/s``, while the chain itself
moves on a scale of seconds. The eigenvalues of the Jacobian at the origin
(only the wall spring is nonlinear, and not to first order) are, in 1/s::

    -1009.05,  -10.59,  -2.466,  -1.001,  -0.948 +- 1.701j

three decades apart. Explicit RK4 is stable for ``h |lambda| < 2.785`` on the
real axis, i.e. ``h < 2.76 ms``: at the nominal ``dt = 0.05 s`` it needs at
least 19 substeps, or it diverges (``h lambda = -50``), while A-stable implicit
methods (implicit Euler, Gauss, Radau IIA) are stable with one step; the
L-stable ones (implicit Euler, Radau IIA) also damp the fast mode.

Source: the standard linear mass-spring-damper chain (e.g. Hairer & Wanner,
"Solving ODEs II", sec. IV.1, on stiffness), with the parameters chosen here to
make the stiffness ratio about 1000.

Default scenario: regulation to the origin from rest with every mass displaced
by 0.5 m (only the wall spring stretched, where its hardening adds 25 %), with
``|F| <= 10 N``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import casadi as ca
import numpy as np

from shooting.model import Model
from shooting.models import check_numbers, parse_params
from shooting.mpc.problem import OCPProblem, QuadraticCost, SolverSettings
from shooting.mpc.scenarios import Scenario

__all__ = ["StiffChainParams", "make_model", "measurement", "scenario"]


@dataclass(frozen=True)
class StiffChainParams:
    """Physical constants of the chain; the three sequences have one entry per mass."""

    masses: Sequence[float] = (1.0, 1.0, 0.01)  # masses m_1..m_n [kg]
    springs: Sequence[float] = (10.0, 10.0, 10.0)  # stiffnesses k_1..k_n (k_1 to the wall) [N/m]
    dampers: Sequence[float] = (5.0, 5.0, 10.0)  # damping c_1..c_n (c_1 to the wall) [N s/m]
    hardening: float = 1.0  # cubic hardening h of the wall spring, f_1 = k_1 (e + h e^3) [1/m^2]
    F_max: float = 10.0  # force bound |F| <= F_max [N]

    def __post_init__(self) -> None:
        check_numbers(self, "stiff_chain", positive=("F_max",), nonnegative=("hardening",))
        lengths = set()
        for name, positive in (("masses", True), ("springs", False), ("dampers", False)):
            try:
                values = np.asarray(getattr(self, name), dtype=float).reshape(-1)
            except (TypeError, ValueError):
                raise ValueError(f"stiff_chain: parameter {name} must be a sequence of numbers") from None
            bad = ~np.isfinite(values) | ((values <= 0) if positive else (values < 0))
            if values.size == 0 or bad.any():
                what = "positive" if positive else "non-negative"
                raise ValueError(
                    f"stiff_chain: parameter {name} = {getattr(self, name)!r} must be a non-empty sequence of "
                    f"{what} numbers"
                )
            lengths.add(values.size)
        if len(lengths) != 1:
            raise ValueError(
                f"stiff_chain: masses, springs and dampers must have one entry per mass, got lengths "
                f"{len(self.masses)}, {len(self.springs)}, {len(self.dampers)}"
            )


def make_model(**params: object) -> Model:
    """Build the stiff mass-spring-damper chain.

    Parameters
    ----------
    **params
        Fields of `StiffChainParams` (``masses, springs, dampers, hardening,
        F_max``).

    Returns
    -------
    Model
        ``nx = 2 n`` (``s1..sn, v1..vn``), ``nu = 1`` (``F``), ``np = 0``,
        ``dt = 0.05``.
    """
    prm = parse_params(StiffChainParams, params, "stiff_chain")
    m = [float(v) for v in prm.masses]
    k = [float(v) for v in prm.springs]
    c = [float(v) for v in prm.dampers]
    n = len(m)

    x = ca.SX.sym("x", 2 * n)
    u = ca.SX.sym("u", 1)
    s, v = x[:n], x[n:]
    # Tension of element i (positive when stretched), f[n] is the applied force.
    f = []
    for i in range(n):
        e = s[i] if i == 0 else s[i] - s[i - 1]
        de = v[i] if i == 0 else v[i] - v[i - 1]
        spring = k[i] * (e + prm.hardening * e**3) if i == 0 else k[i] * e
        f.append(spring + c[i] * de)
    f.append(u[0])
    acc = [(-f[i] + f[i + 1]) / m[i] for i in range(n)]
    xdot = ca.vertcat(v, *acc)

    inf = np.inf
    return Model(
        "stiff_chain",
        x,
        u,
        xdot,
        state_names=[f"s{i + 1}" for i in range(n)] + [f"v{i + 1}" for i in range(n)],
        input_names=["F"],
        state_units=["m"] * n + ["m/s"] * n,
        input_units=["N"],
        x0=[0.5] * n + [0.0] * n,
        u0=[0.0],
        x_min=[-inf] * (2 * n),
        x_max=[inf] * (2 * n),
        u_min=[-prm.F_max],
        u_max=[prm.F_max],
        dt=0.05,
        description="stiff mass-spring-damper chain (eigenvalues -1009 .. -0.95 1/s); regulation to rest",
    )


def measurement(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
    """Default sensors: the positions ``s1..sn`` [m] of the masses; the velocities are estimated.

    Parameters
    ----------
    x : casadi.SX, shape (2 n, 1)
    u : casadi.SX, shape (1, 1)
    p : casadi.SX, shape (0, 1)

    Returns
    -------
    casadi.SX, shape (n, 1)
    """
    return x[: x.numel() // 2]


def scenario(model: Model) -> Scenario:
    """Regulation to rest from every mass displaced by 0.5 m, |F| <= 10 N, with the implicit radau2.

    rk4 diverges at dt = 0.05 (h lambda = -50); the L-stable radau2 takes one
    step. Gauss-Newton: the dynamics are linear but for the wall spring's
    cubic term, and the exact Hessian of the implicit step is costly to build.
    The plant uses radau3 (dopri5's 20 substeps would sit near its stability
    limit).
    """
    n = model.nx // 2
    q = [10.0] * n + [1.0] * n
    return Scenario(
        model=model.name,
        problem=OCPProblem(horizon=20, dt=0.05, method="radau2", steps=1,
                           cost=QuadraticCost(Q=q, R=[0.01], Q_terminal=q, x_ref=np.zeros(2 * n), u_ref=[0.0]),
                           solver=SolverSettings(hessian="gauss-newton")),
        x0=model.x0, sim_steps=60,
        description="regulation to rest from every mass displaced by 0.5 m, |F| <= 10 N "
                    "(implicit radau2: rk4 is unstable at dt = 0.05)",
        plant_method="radau3", plant_steps=10,
    )
