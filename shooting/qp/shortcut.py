"""The warm start's shortcut: the active set an interior point's last iterate predicts, solved in one Newton step.

A side whose multiplier exceeds its slack (lam > t) in the warm start (the
last sample's solve, shifted) is predicted active. When every such side is an
input's (fixed at its bound) or a violated soft side's (its penalty
l1 s + l2 s^2 a quadratic of z there), the QP with that active set is an
equality-constrained QP: one Riccati factorisation and solve, instead of an
interior point's several, gives its solution, and that is the QP's when every
side lies where the prediction put it and every multiplier has its sign
(Nocedal and Wright, Numerical Optimization, 2nd ed., sec. 16.8: active-set
prediction from an interior point's iterate).

When the prediction is wrong (the active set moved: an input reaches or
leaves a bound, a soft bound starts or stops being violated), the point says
how: a free input beyond a bound is fixed there, a fixed one whose multiplier
pulls the wrong way is freed, a soft side beyond its bound is made active and
an active one back within it inactive, all at once, and the equality QP is
solved again: the primal-dual active-set method (Bergounioux, Ito and
Kunisch, SIAM J. Control Optim. 37(4), 1999; a semismooth Newton method,
Hintermueller, Ito and Kunisch, SIAM J. Optim. 13(3), 2002), which on a
box-constrained problem typically settles in a few steps. At most
`SHORTCUT_ATTEMPTS` factorisations; a hard state or general row beyond its
bound, or the attempts spent, leave it to the interior point.

The numpy twin of ``@{p}_shortcut`` in ``templates/ocp_qp.c.in``, which is the
reference of its comments: stationarity and the equalities hold to the
rounding of a backward stable factorisation, so they are not tested; the
point is refused when an input's pivot needed regularising or a value is not
finite.
"""

from __future__ import annotations

import copy

import numpy as np
import numpy.typing as npt

from shooting.qp.kkt import (
    Factors,
    Iterate,
    Problem,
    cost_gradient,
    riccati,
    row_values,
    side_slack,
    to_result,
)
from shooting.qp.stage_qp import StageQPResult

__all__ = ["SHORTCUT_ATTEMPTS", "shortcut"]

FloatArray = npt.NDArray[np.float64]

#: The most factorisations the shortcut spends (its first prediction and its corrections) before the
#: interior point takes over.
SHORTCUT_ATTEMPTS = 5


def shortcut(P: Problem, x: FloatArray, u: FloatArray, warm: StageQPResult, tol: dict[str, float],
             attempts: int = SHORTCUT_ATTEMPTS) -> tuple[Iterate | None, StageQPResult, FloatArray, FloatArray, int]:
    """The warm start's shortcut (C: @{p}_shortcut): Newton steps on the QP with the active set `warm` predicts,
    corrected by the primal-dual active-set rule, at most `attempts` of them.

    Returns the solved iterate (None when the prediction is outside what the shortcut solves, or still wrong
    after the attempts), the warm start, x and u the interior point then starts from (as the C leaves them), and
    the factorisations spent.
    """
    S, N, nu = P.sides, P.N, P.nu
    t, lam = np.asarray(warm.t, dtype=float)[S.slot], np.asarray(warm.lam, dtype=float)[S.slot]
    s_warm, lam_s_warm = np.asarray(warm.s, dtype=float)[S.srow_slot], np.asarray(warm.lam_s, dtype=float)[S.srow_slot]
    active = lam > t  # a side's multiplier above its slack
    row = np.where(S.soft, S.srow, -1 - S.slot // 2)  # (a row's two sides share it)
    violated = np.append(s_warm > lam_s_warm, False)[np.where(S.soft, S.srow, -1)]  # (else s = 0 held exactly)
    inputs = S.slot < 2 * N * nu  # an input's active side fixes it at its bound
    if np.unique(row[active]).size < row[active].size or np.any(active & ~S.soft & ~inputs) or \
            np.any(active & S.soft & ~violated):
        return None, warm, x, u, 0
    x = x.copy()
    x[0] = P.x0
    it = Iterate(x, u.copy(), np.array(warm.pi, dtype=float).reshape(N, P.nx), t, lam, s_warm, lam_s_warm)
    moved = warm
    for used in range(1, attempts + 1):
        if not _newton(P, it, active):
            return None, moved, it.x, it.u, used
        moved = to_result(P, it, 1, 0, (np.inf, np.inf, np.inf))  # (pi moved, the sides not yet)
        if not (np.all(np.isfinite(it.x)) and np.all(np.isfinite(it.u)) and np.all(np.isfinite(it.pi))):
            return None, moved, it.x, it.u, used
        cz = row_values(P, it.x, it.u)
        gap = cz - S.beta  # how far inside each side (negative: beyond)
        on, fixed = active & S.soft, active & inputs
        within = on & ~(-gap > 0)  # an active soft side within its bound: its violation 0, made inactive
        s = np.zeros(S.n_soft)
        s[S.srow[on]] = np.where(within[on], 0.0, -gap[on])
        lam_fixed = np.zeros(S.stage.size)
        lam_fixed[fixed] = _input_multipliers(P, it, on, s, np.flatnonzero(fixed))
        beyond = ~active & (gap + side_slack(P, s) < -tol["tol_eq"] * (1 + np.abs(cz)))
        if np.any(beyond & ~S.soft & ~inputs):
            return None, moved, it.x, it.u, used  # a hard state or general row beyond its bound
        wrong = within | (fixed & ~(lam_fixed >= 0)) | beyond
        if not wrong.any():
            _sides(P, it, active, s, lam_fixed)
            return it, moved, it.x, it.u, used
        active = active ^ wrong  # (the primal-dual active-set step: every wrong side at once)
        if np.unique(row[active]).size < row[active].size:
            return None, moved, it.x, it.u, used
    return None, moved, it.x, it.u, attempts


def _newton(P: Problem, it: Iterate, active: npt.NDArray[np.bool_]) -> bool:
    """One Newton step on the equality QP of the active set (C: @{p}_riccati with newton = 3); False when an input's
    pivot needed regularising."""
    S, N, nu = P.sides, P.N, P.nu
    # The QP with that active set: an active soft side's penalty l1 s + l2 s^2, s = beta - c_hat'z its
    # violation, as the quadratic it is there (C: @{p}_stage with newton = 3); every other side absent.
    Hxx, Hux, Huu = P.Hxx.copy(), P.Hux.copy(), P.Huu.copy()
    gx, gu = cost_gradient(P, it)
    on, fixed = np.flatnonzero(active & S.soft), np.flatnonzero(active & (S.slot < 2 * N * nu))
    l1, l2 = P.l1[S.srow[on]], P.l2[S.srow[on]]
    coef = -(l1 + 2 * l2 * (S.beta[on] - row_values(P, it.x, it.u)[on]))
    np.add.at(Hxx, S.stage[on], 2 * l2[:, None, None] * S.cx[on, :, None] * S.cx[on, None, :])
    np.add.at(Hux, S.stage[on], 2 * l2[:, None, None] * S.cu[on, :, None] * S.cx[on, None, :])
    np.add.at(Huu, S.stage[on], 2 * l2[:, None, None] * S.cu[on, :, None] * S.cu[on, None, :])
    np.add.at(gx, S.stage[on], coef[:, None] * S.cx[on])
    np.add.at(gu, S.stage[on], coef[:, None] * S.cu[on])
    # A fixed input (du_j = delta = bound - u_j) leaves the problem: its coupling times delta moves into the
    # gradients and the dynamics' offset (the C moves M's column instead: the same equality-constrained QP).
    Pf = copy.copy(P)
    Pf.B, Pf.b = P.B.copy(), P.b.copy()
    for i in fixed:
        k, j = int(S.stage[i]), int(np.argmax(np.abs(S.cu[i])))
        delta = S.beta[i] / S.cu[i, j] - it.u[k, j]
        gx[k] += Hux[k, j] * delta
        gu[k] += Huu[k, :, j] * delta
        Pf.b[k] += P.B[k][:, j] * (it.u[k, j] + delta)
        Pf.B[k][:, j], Hux[k, j], Huu[k, j], Huu[k, :, j] = 0.0, 0.0, 0.0, 0.0
        Huu[k, j, j], gu[k, j] = 1.0, -delta
    F = Factors(N, P.nx, nu)
    try:
        dx, du = riccati(Pf, it, (Hxx, Hux, Huu, gx, gu), F, True, exact=True)
    except np.linalg.LinAlgError:
        return False
    it.pi = np.einsum("kij,kj->ki", F.L, np.einsum("kji,kj->ki", F.L, dx[1:])) + F.p
    it.x[1:] += dx[1:]
    it.u += du
    return True


def _input_multipliers(P: Problem, it: Iterate, on: npt.NDArray[np.bool_], s: FloatArray,
                       fixed: npt.NDArray[np.int64]) -> FloatArray:
    """The fixed inputs' multipliers from stationarity (C: @{p}_input_multiplier): c_hat_u'(S x + R u + r + B'pi -
    sum of the active soft sides' lam c_hat_u, lam = l1 + 2 l2 s)."""
    S, N = P.sides, P.N
    g_u = np.einsum("kij,kj->ki", P.Hux, it.x) + np.einsum("kij,kj->ki", P.Huu, it.u) + P.r
    g_u[:N] += np.einsum("kji,kj->ki", P.B, it.pi)
    act = np.flatnonzero(on)
    rows = S.srow[act]
    np.add.at(g_u, S.stage[act], -(P.l1[rows] + 2 * P.l2[rows] * s[rows])[:, None] * S.cu[act])
    return np.einsum("ij,ij->i", S.cu[fixed], g_u[S.stage[fixed]])


def _sides(P: Problem, it: Iterate, active: npt.NDArray[np.bool_], s: FloatArray, lam_fixed: FloatArray) -> None:
    """Each side's slack and multiplier at the solved point (C: @{p}_shortcut's pass 1)."""
    S = P.sides
    soft_active = np.zeros(S.n_soft, dtype=bool)
    soft_active[S.srow[active & S.soft]] = True
    gap = row_values(P, it.x, it.u) - S.beta
    it.s = s
    it.lam_s = np.where(soft_active, 0.0, P.l1)
    it.t = np.where(active, 0.0, np.maximum(gap + side_slack(P, s), 0.0))
    it.lam = np.where(active, side_slack(P, P.l1) + 2 * side_slack(P, P.l2) * side_slack(P, s), 0.0)
    fixed = active & (S.slot < 2 * P.N * P.nu)
    it.lam[fixed] = lam_fixed[fixed]
