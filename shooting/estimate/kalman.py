"""The EKF's update as one CasADi SX Function: prediction by the step and its A, correction in Joseph form.

With the step x+ = F(x, u, p, t, dt) of `shooting.integrate` and its exact
A = dF/dx, and the sensors y = h(x, u, p) with H = dh/dx (Simon, "Optimal
State Estimation", 2006, sec. 13.2, the discrete-time extended Kalman filter):

    x-  = F(x, u, p, t, dt),                    P-  = A P A' + Q,
    e   = y - h(x-, u, p),                      S   = H P- H' + R,
    K   = P- H' S^-1,                           x+  = x- + K e,
    P+  = (I - K H) P- (I - K H)' + K R K'      (the Joseph stabilized form, Simon sec. 5.1),

with A at the prior x and H at the prediction x-. The Joseph form keeps P+
symmetric positive semi-definite for any gain, and the result is symmetrised,
so rounding in float does not drive P indefinite as the short form
(I - K H) P- does. S^-1 is applied through its Cholesky factor, written out
(square roots and divisions only: the C emitter takes it as it is).

Missing sensors: the input ``valid`` (ny, 1.0 measured, 0.0 not) masks rows
exactly: with M = diag(valid), H is replaced by M H, e by M e and R by
M R M + (I - M), so S is block diagonal with an identity block for the
missing rows, their gain columns are zero, and K R K' keeps only the
measured block. With every sensor missing, the update is the prediction.
"""

from __future__ import annotations

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting._text import vector_text
from shooting.estimate.problem import EstimationProblem, Sample

__all__ = ["EKF_INPUTS", "EKF_OUTPUTS", "cholesky_solve", "ekf_update", "ekf_update_function", "evaluate"]

FloatArray = npt.NDArray[np.float64]

#: Inputs of the update Function, in order (``z0``, the algebraic guess, last for a model with algebraic states).
EKF_INPUTS = ("x", "P", "u", "y", "valid", "p", "t", "dt")
#: Outputs of the update Function, in order (``z``, the algebraic state at x_hat's prediction, last for a DAE).
EKF_OUTPUTS = ("x_hat", "P_hat", "e", "S")


def cholesky_solve(S: ca.SX, B: ca.SX) -> ca.SX:
    """``S^-1 B`` for a symmetric positive definite S by its Cholesky factor S = L L', unrolled in SX.

    Parameters
    ----------
    S : casadi.SX, shape (n, n)
    B : casadi.SX, shape (n, m)

    Returns
    -------
    casadi.SX, shape (n, m)
    """
    n = S.size1()
    L = [[ca.SX(0.0)] * n for _ in range(n)]
    for j in range(n):
        diagonal = S[j, j] - sum((L[j][k] * L[j][k] for k in range(j)), ca.SX(0.0))
        L[j][j] = ca.sqrt(diagonal)
        for i in range(j + 1, n):
            L[i][j] = (S[i, j] - sum((L[i][k] * L[j][k] for k in range(j)), ca.SX(0.0))) / L[j][j]
    # forward substitution L Z = B, then back substitution L' X = Z, a column of B at a time
    X = ca.SX(n, B.size2())
    for c in range(B.size2()):
        z: list[ca.SX] = []
        for i in range(n):
            z.append((B[i, c] - sum((L[i][k] * z[k] for k in range(i)), ca.SX(0.0))) / L[i][i])
        x: list[ca.SX] = [ca.SX(0.0)] * n
        for i in reversed(range(n)):
            x[i] = (z[i] - sum((L[k][i] * x[k] for k in range(i + 1, n)), ca.SX(0.0))) / L[i][i]
        X[:, c] = ca.vertcat(*x)
    return X


def _symmetric(P: ca.SX) -> ca.SX:
    return (P + P.T) / 2


def ekf_update_function(problem: EstimationProblem, name: str = "ekf_update") -> ca.Function:
    """The EKF's whole update (prediction, masked Joseph correction) as one named SX Function.

    Parameters
    ----------
    problem : EstimationProblem
        Its step, sensors, Q and R (constants of the Function).
    name : str
        The Function's name (an identifier).

    Returns
    -------
    casadi.Function
        Inputs `EKF_INPUTS`: ``x (nx)`` the last estimate, ``P (nx, nx)`` its covariance, ``u (nu)`` the input
        held over the interval, ``y (ny)`` the measurement at its end, ``valid (ny)`` 1.0 where y was measured
        and 0.0 where not (y's entry is then ignored), ``p (np)``, ``t`` the interval's start, ``dt``; and
        ``z0 (nz)`` for a DAE. Outputs `EKF_OUTPUTS`: ``x_hat (nx)``, ``P_hat (nx, nx)`` (symmetric),
        ``e (ny)`` the masked innovation, ``S (ny, ny)`` its covariance; and ``z (nz)`` for a DAE.
    """
    model, nx, ny = problem.model, problem.model.nx, problem.ny
    x, P = ca.SX.sym("x", nx), ca.SX.sym("P", nx, nx)
    u, y, valid = ca.SX.sym("u", model.nu), ca.SX.sym("y", ny), ca.SX.sym("valid", ny)
    p, t, dt = ca.SX.sym("p", model.np), ca.SX.sym("t"), ca.SX.sym("dt")
    z0 = [ca.SX.sym("z0", model.nz)] if model.nz else []
    args = {"x": x, "u": u, "p": p, "t0": t, "dt": dt, **({"z0": z0[0]} if z0 else {})}
    step = problem.step.call(args)
    x_pred, A = step["x_next"], step["A"]
    P_pred = _symmetric(A @ P @ A.T + ca.DM(problem.Q))
    h = problem.h(x_pred, u, p)
    H = ca.jacobian(problem.h(problem.h.sx_in(0), problem.h.sx_in(1), problem.h.sx_in(2)), problem.h.sx_in(0))
    H = ca.substitute(H, ca.vertcat(*problem.h.sx_in()), ca.vertcat(x_pred, u, p))
    # the missing sensors' rows masked out exactly (module docstring)
    M = ca.diag(valid)
    Hm = M @ H
    e = valid * (y - h)
    Rm = M @ ca.DM(problem.R) @ M + ca.diag(1 - valid)
    S = _symmetric(Hm @ P_pred @ Hm.T + Rm)
    K = cholesky_solve(S, Hm @ P_pred).T  # K = P- H' S^-1 (S and P- symmetric)
    x_hat = x_pred + K @ e
    I_KH = ca.DM.eye(nx) - K @ Hm
    P_hat = _symmetric(I_KH @ P_pred @ I_KH.T + K @ Rm @ K.T)
    outs = [x_hat, P_hat, e, S, *([step["z"]] if z0 else [])]
    F = ca.Function(name, [x, P, u, y, valid, p, t, dt, *z0], outs,
                    [*EKF_INPUTS, *(["z0"] if z0 else [])], [*EKF_OUTPUTS, *(["z"] if z0 else [])])
    assert not F.has_free(), "the EKF update has free symbols"
    return F


def evaluate(F: ca.Function, **args: object) -> dict[str, FloatArray]:
    """`F` at numbers by name, its outputs as float arrays (shapes as the Function's)."""
    return {k: np.array(v, dtype=float) for k, v in F.call({k: ca.DM(np.asarray(a, dtype=float))
                                                               for k, a in args.items()}).items()}


def ekf_update(F: ca.Function, problem: EstimationProblem, x: FloatArray, P: FloatArray, z: FloatArray | None,
               sample: Sample) -> dict[str, FloatArray]:
    """One evaluation of the update Function `F` on a checked sample; refuses a non-finite result.

    Returns
    -------
    dict
        ``x_hat (nx,)``, ``P_hat (nx, nx)``, ``e (ny,)``, ``S (ny, ny)`` and, for a DAE, ``z (nz,)``.

    Raises
    ------
    ValueError
        The prediction or the correction is not finite (the step diverged: the input, dt or the estimate).
    """
    args = {"x": x, "P": P, "u": sample.u, "y": sample.y, "valid": sample.valid, "p": sample.p, "t": sample.t,
            "dt": problem.dt}
    if problem.model.nz:
        args["z0"] = problem.model.z0 if z is None else z
    out = evaluate(F, **args)
    out = {k: v.reshape(-1) if k != "P_hat" and k != "S" else v for k, v in out.items()}
    if not (np.isfinite(out["x_hat"]).all() and np.isfinite(out["P_hat"]).all()):
        raise ValueError(f"{problem.who} update at t = {sample.t:g}: the estimate became non-finite from "
                         f"x_hat = {vector_text(x)} with u = {vector_text(sample.u)} over dt = {problem.dt:g} (the "
                         f"step diverges there): check the input and dt, or reset the estimator")
    return out
