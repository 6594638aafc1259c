"""Algebraic states in the multiple-shooting OCP: bounds on z as path rows, and the convergence check.

Each interval's step (`shooting.integrate.dae`) starts its Newton steps on the
algebraic equations from the model's z0, a fixed number of them, so that the
NLP stays one code-generable graph. Two things follow here: finite bounds on
z become path rows on the z that ends each interval, and a solution is
checked afterwards by stepping every interval again from the z consistent
with its x_k (CasADi's Newton rootfinder); a difference means the fixed steps
did not converge and the solution must not be trusted.
"""

from __future__ import annotations

from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting.model import Model

__all__ = ["ALGEBRAIC_TOLERANCE", "algebraic_bound_rows", "algebraic_residual"]

FloatArray = npt.NDArray[np.float64]

#: Largest relative change of x_{k+1} when the steps at a solution start from
#: the consistent z instead of z0, before the solution is reported as failed.
ALGEBRAIC_TOLERANCE = 1e-8


def algebraic_bound_rows(model: Model, z: ca.SX) -> list[ca.SX]:
    """Rows ``z - z_max <= 0`` and ``z_min - z <= 0`` for the finite bounds of the model's algebraic states.

    Parameters
    ----------
    model : Model
    z : casadi.SX, shape (nz, 1)
        The algebraic state at the end of one interval.

    Returns
    -------
    list of casadi.SX columns (empty when z is unbounded)
    """
    hi, lo = np.flatnonzero(np.isfinite(model.z_max)), np.flatnonzero(np.isfinite(model.z_min))
    rows = []
    if hi.size:
        rows.append(z[hi.tolist()] - ca.DM(model.z_max[hi]))
    if lo.size:
        rows.append(ca.DM(model.z_min[lo]) - z[lo.tolist()])
    return rows


def algebraic_residual(model: Model, step_map: ca.Function, parameters: dict[str, Any], x: FloatArray,
                       u: FloatArray, dt: float) -> float:
    """How far the steps at a solution are from the steps with converged algebraic states.

    Parameters
    ----------
    model : Model
    step_map : casadi.Function
        The OCP's step ``(x, u, p, t0, dt, z0) -> (x_next, ..., z)`` mapped over
        the N intervals (built once with the NLP).
    parameters : dict
        The unpacked NLP parameters (`ShootingLayout.unpack_parameters`): ``p``
        (np, N) and ``t0``.
    x : ndarray, shape (N+1, nx)
    u : ndarray, shape (N, nu)
    dt : float

    Returns
    -------
    float
        ``max |x_{k+1}(z0) - x_{k+1}(z consistent at x_k)| / (1 + max |x_{k+1}|)``;
        0 for a model without algebraic states, inf when no consistent z is found.
    """
    N = u.shape[0]
    if not model.nz:
        return 0.0
    pk = np.asarray(parameters["p"], dtype=float).reshape(model.np, N)
    times = float(parameters["t0"]) + np.arange(N) * dt
    try:
        z = np.column_stack([model.consistent_z(x[k], u[k], pk[:, k], times[k]) for k in range(N)])
    except ValueError:
        return float("inf")
    F = step_map
    args = [x[:-1].T, u.T, pk, times[None, :], dt]
    ours = np.array(F.call([*args, np.tile(model.z0[:, None], (1, N))])[0], dtype=float)
    true = np.array(F.call([*args, z])[0], dtype=float)
    return float(np.max(np.abs(ours - true)) / (1.0 + np.max(np.abs(true))))
