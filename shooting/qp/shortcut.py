"""The warm start's shortcut: the active set an interior point's last iterate predicts, solved in one Newton step.

A side whose multiplier exceeds its slack (lam > t) in the warm start (the
last sample's solve, shifted) is predicted active. When every such side is an
input's (fixed at its bound) or a violated soft side's (its penalty
l1 s + l2 s^2 a quadratic of z there), the QP with that active set is an
equality-constrained QP: one Riccati factorisation and solve, instead of an
interior point's several, gives its solution, and that is the QP's when every
side lies where the prediction put it and every multiplier has its sign
(Nocedal and Wright, Numerical Optimization, 2nd ed., sec. 16.8: active-set
prediction from an interior point's iterate). The numpy twin of
``@{p}_shortcut`` in ``templates/ocp_qp.c.in``, which is the reference of its
comments: stationarity and the equalities hold to the rounding of a backward
stable factorisation, so they are not tested; the point is refused when an
input's pivot needed regularising or a value is not finite.
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

__all__ = ["shortcut"]

FloatArray = npt.NDArray[np.float64]


def shortcut(P: Problem, x: FloatArray, u: FloatArray, warm: StageQPResult, tol: dict[str, float]
              ) -> tuple[Iterate | None, StageQPResult, FloatArray, FloatArray]:
    """The warm start's shortcut (C: @{p}shortcut): one Newton step on the QP with the active set `warm` predicts.

    Returns the solved iterate (None when the prediction is outside what the shortcut solves or wrong), and the
    warm start, x and u the interior point then starts from (as the C leaves them).
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
        return None, warm, x, u
    x = x.copy()
    x[0] = P.x0
    it = Iterate(x, u.copy(), np.array(warm.pi, dtype=float).reshape(N, P.nx), t, lam, s_warm, lam_s_warm)
    # The QP with that active set: an active soft side's penalty l1 s + l2 s^2, s = beta - c_hat'z its
    # violation, as the quadratic it is there (C: @{p}newton_blocks with newton = 3); every other side absent.
    Hxx, Hux, Huu = P.Hxx.copy(), P.Hux.copy(), P.Huu.copy()
    gx, gu = cost_gradient(P, it)
    on, fixed = np.flatnonzero(active & S.soft), np.flatnonzero(active & inputs)
    coef = -(P.l1 + 2 * P.l2 * (S.beta[on] - row_values(P, it.x, it.u)[on]))
    np.add.at(Hxx, S.stage[on], 2 * P.l2 * S.cx[on, :, None] * S.cx[on, None, :])
    np.add.at(Hux, S.stage[on], 2 * P.l2 * S.cu[on, :, None] * S.cx[on, None, :])
    np.add.at(Huu, S.stage[on], 2 * P.l2 * S.cu[on, :, None] * S.cu[on, None, :])
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
        return None, warm, it.x, u
    it.pi = np.einsum("kij,kj->ki", F.L, np.einsum("kji,kj->ki", F.L, dx[1:])) + F.p
    it.x[1:] += dx[1:]
    it.u += du
    moved = to_result(P, it, 1, 0, (np.inf, np.inf, np.inf))  # (pi moved, the sides not yet)
    if not (np.all(np.isfinite(it.x)) and np.all(np.isfinite(it.u)) and np.all(np.isfinite(it.pi))):
        return None, moved, it.x, it.u
    cz = row_values(P, it.x, it.u)
    gap = cz - S.beta  # how far inside each side (negative: beyond)
    s = np.zeros(S.n_soft)
    s[S.srow[on]] = -gap[on]
    # a fixed input's multiplier from stationarity: c_hat_u'(S x + R u + r + B'pi - sum of the violated soft
    # sides' lam c_hat_u, lam = l1 + 2 l2 s)
    g_u = np.einsum("kij,kj->ki", P.Hux, it.x) + np.einsum("kij,kj->ki", P.Huu, it.u) + P.r
    g_u[:N] += np.einsum("kji,kj->ki", P.B, it.pi)
    np.add.at(g_u, S.stage[on], -(P.l1 + 2 * P.l2 * s[S.srow[on]])[:, None] * S.cu[on])
    lam_fixed = np.einsum("ij,ij->i", S.cu[fixed], g_u[S.stage[fixed]])
    if np.any(s[S.srow[on]] <= 0) or np.any(~(lam_fixed >= 0)) or \
            np.any(~active & (gap + side_slack(P, s) < -tol["tol_eq"] * (1 + np.abs(cz)))):
        return None, moved, it.x, it.u
    soft_active = np.zeros(S.n_soft, dtype=bool)
    soft_active[S.srow[on]] = True
    it.s = s
    it.lam_s = np.where(soft_active, 0.0, P.l1)
    it.t = np.where(active, 0.0, np.maximum(gap + side_slack(P, s), 0.0))
    it.lam = np.where(active, P.l1 + 2 * P.l2 * side_slack(P, s), 0.0)
    it.lam[fixed] = lam_fixed
    return it, moved, it.x, it.u
