"""Stability lint: is the step inside its tableau's stability region at a model's operating point?

Linearised at (x, u), the model is x' = J x with J = df/dx, and one substep of
size h multiplies a mode with eigenvalue lambda of J by R(h lambda), R the
tableau's stability function (`shooting.tableaus.stability`). The step is
stable there when |R(h lambda)| <= 1 for every mode the model itself damps
(Re lambda <= 0), up to a growth of `SLACK` over the whole interval
(|R(h lambda)|^N <= 1 + SLACK: an undamped oscillation under explicit Euler
grows a little every substep, and more substeps do not cure it). Modes with
Re lambda > 0 grow in the model too; no step
size makes them decay, so they are reported but do not count against the
method. A stiff model integrated by an explicit method outside its region
(the polymerisation reactor's RK4 at h lambda = -63) gives garbage that an
OCP solver will happily "solve"; the lint says so and finds the fewest
substeps that would not.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.integrate.integrator import MAX_STEPS, resolve_tableau
from shooting.model import Model
from shooting.tableaus.tableau import ButcherTableau

__all__ = ["StabilityReport", "check_stability"]

#: Growth |R|^N over one interval tolerated (R = 1 on the imaginary axis for Gauss methods, up to rounding).
SLACK = 1e-10
#: Eigenvalues with Re lambda above this (relative to |lambda|) are growing modes of the model.
GROWING = 1e-9


@dataclass(frozen=True)
class StabilityReport:
    """The outcome of `check_stability`.

    Parameters
    ----------
    stable : bool
        Every damped mode's h*lambda lies in the stability region (|R| <= 1).
    worst_h_lambda : complex
        The h*lambda with the largest |R| among the damped modes (0 if there are none).
    min_steps : int
        The fewest substeps per interval that make it stable (1 when one is
        enough); 0 when no number up to `MAX_STEPS` does (an explicit method
        on an undamped oscillation): use an A-stable method.
    message : str
        One line saying the above, with the fix.
    eigenvalues : ndarray of complex, shape (nx,)
        Of df/dx at the operating point.
    amplification : float
        |R(worst_h_lambda)|.
    """

    stable: bool
    worst_h_lambda: complex
    min_steps: int
    message: str
    eigenvalues: npt.NDArray[np.complex128]
    amplification: float


def _amplification(tableau: ButcherTableau, z: npt.NDArray[np.complex128]) -> npt.NDArray[np.float64]:
    with np.errstate(all="ignore"):
        r = np.abs(np.asarray(tableau.stability_function(z), dtype=np.complex128))
    return np.nan_to_num(r, nan=np.inf)


def _stable_with(tableau: ButcherTableau, z: npt.NDArray[np.complex128], n: int) -> bool:
    with np.errstate(over="ignore"):
        return bool(np.all(_amplification(tableau, z / n) ** n <= 1.0 + SLACK))


def _fewest_steps(tableau: ButcherTableau, z: npt.NDArray[np.complex128]) -> int:
    """The smallest N <= MAX_STEPS with every z/N in the region, or 0."""
    for n in range(1, 65):
        if _stable_with(tableau, z, n):
            return n
    hi = 128
    while hi <= MAX_STEPS and not _stable_with(tableau, z, hi):
        hi *= 2
    if hi > MAX_STEPS:
        return 0
    lo = hi // 2  # unstable; bisect assuming the region holds the segment from 0 to z/N near its boundary
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _stable_with(tableau, z, mid) else (mid, hi)
    return hi


def _state_jacobian(model: Model, x: np.ndarray, u: np.ndarray) -> np.ndarray:
    """df/dx at (x, u, p0, t = 0); for a DAE, of the reduced ODE x' = f(x, z(x)) at the consistent z:
    f_x - f_z g_z^-1 g_x (implicit-function theorem)."""
    if not model.nz:
        jac = ca.Function("df_dx", [model.x, model.u, model.p, model.t], [ca.jacobian(model.xdot, model.x)])
        return np.array(jac(x, u, model.p0, 0.0), dtype=float)
    z = model.consistent_z(x, u)
    parts = [ca.jacobian(e, v) for e in (model.xdot, model.alg) for v in (model.x, model.z)]
    fx, fz, gx, gz = (np.array(v, dtype=float) for v in
                      ca.Function("dae_jac", [model.x, model.z, model.u, model.p, model.t], parts)(
                          x, z, u, model.p0, 0.0))
    return fx - fz @ np.linalg.solve(gz, gx)


def check_stability(model: Model, method: str | ButcherTableau, steps: int = 1, dt: float | None = None,
                    x: npt.ArrayLike | None = None, u: npt.ArrayLike | None = None) -> StabilityReport:
    """Whether `steps` substeps of `method` over `dt` are inside the stability region at (x, u).

    Parameters
    ----------
    model : Model
    method : str or ButcherTableau
    steps : int, default 1
        Substeps per shooting interval (h = dt / steps).
    dt : float, optional
        Interval length (default ``model.dt``).
    x : array_like, shape (nx,), optional
        Operating point (default ``model.x0``).
    u : array_like, shape (nu,), optional
        Input there (default ``model.u0``).

    Returns
    -------
    StabilityReport

    Raises
    ------
    ValueError
        A model without ``dt`` and no `dt`, or bad arguments.
    """
    if not isinstance(model, Model):
        raise ValueError(f"model must be a shooting.Model, got {type(model).__name__}")
    tableau = resolve_tableau(method)
    steps = _validate.integer(steps, "steps", minimum=1, maximum=MAX_STEPS)
    if dt is None and model.dt is None:
        raise ValueError(f"model {model.name} has no nominal dt: pass dt")
    dt = _validate.positive_real(model.dt if dt is None else dt, "dt")
    xv = model.x0 if x is None else _validate.vector(x, model.nx, "x", broadcast=False)
    uv = model.u0 if u is None else _validate.vector(u, model.nu, "u", broadcast=False)
    J = _state_jacobian(model, xv, uv)
    eig = np.linalg.eigvals(J).astype(np.complex128)
    growing = eig.real > GROWING * np.maximum(np.abs(eig), 1e-300)
    damped = dt * eig[~growing]  # dt lambda: h lambda for one substep

    name = tableau.name or "the tableau"
    where = f"{name} x {steps} at dt = {dt:g} {model.time_unit}"
    if damped.size == 0:
        return StabilityReport(True, 0j, 1, f"{where}: no damped mode at this point (all modes grow: "
                               f"the model is unstable here, which no step size changes)", eig, 0.0)
    amp = _amplification(tableau, damped / steps)
    k = int(np.argmax(amp))
    worst, worst_amp = complex(damped[k] / steps), float(amp[k])
    stable = _stable_with(tableau, damped, steps)
    fewest = _fewest_steps(tableau, damped)
    extra = f"; {int(growing.sum())} growing mode(s) of the model itself not counted" if growing.any() else ""
    if stable:
        message = (f"{where}: every h*lambda is inside the stability region (worst h*lambda = "
                   f"{worst:.3g}, |R| = {worst_amp:.6g}){extra}")
    else:
        fix = (f"use --steps {fewest} (steps={fewest}) or an A-stable method such as radau2" if fewest else
               "no number of substeps helps (an undamped or nearly undamped mode): use an A-stable method "
               "such as gauss2 or radau2")
        message = (f"{where} is outside its stability region at the operating point: h*lambda = {worst:.3g} "
                   f"gives |R| = {worst_amp:.6g} > 1 per substep: {fix}{extra}")
    return StabilityReport(stable, worst, fewest, message, eig, worst_amp)
