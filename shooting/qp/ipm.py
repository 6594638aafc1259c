"""The stage-wise QP's interior-point Riccati solver in numpy: the twin of ``templates/ocp_qp.c.in``.

Mehrotra's predictor-corrector interior-point method (Nocedal and Wright,
Numerical Optimization, 2nd ed., algorithm 16.4) on every side of every row,
each with a slack t >= 0 and a multiplier lam >= 0 (a soft row also with one
slack variable s >= 0 for both sides, carrying l1 s + l2 s^2); each Newton system, once the
sides are eliminated, is an equality-constrained LQ problem solved by the
square-root Riccati recursion (Frison and Diehl 2020, HPIPM; Rao, Wright and
Rawlings 1998; the KKT system's pieces in `shooting.qp.kkt`). A warm start
first tries `shooting.qp.shortcut`. Each function carries the C's name in its
docstring so that each reads against the other; the C is the reference of
every formula's comment. This twin works in double precision, vectorised over
the stages where the C loops.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from shooting.qp.kkt import (
    Factors,
    Iterate,
    Problem,
    cost_gradient,
    mean_complementarity,
    newton_blocks,
    residuals,
    riccati,
    row_terms,
    row_values,
    side_residual,
    side_slack,
    to_result,
)
from shooting.qp.shortcut import SHORTCUT_ATTEMPTS, shortcut
from shooting.qp.stage_qp import OCP_QP_TOLERANCES, StageQP, StageQPResult

__all__ = ["WARM_PUSH", "solve_stage_qp"]

FloatArray = npt.NDArray[np.float64]

#: As the C's double build: fraction to the boundary, the complementarity below which a lost pivot or a
#: degrading step ends a solve, the warm start's push inside, the multipliers' growth read as infeasible.
TAU, MU_FLOOR, WARM_PUSH, DIVERGE = 0.995, 1e-12, 1e-4, 1e12


def _side_directions(P: Problem, it: Iterate, dx: FloatArray, du: FloatArray, rc: FloatArray,
                     rcs: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """dt, dlam per side and ds, dlam_s per soft row (C: @{p}_side_directions)."""
    S = P.sides
    T = row_terms(P, it, rc, rcs)
    cdz = row_values(P, dx, du)
    adz = np.einsum("ij,ij->i", T.a_x, dx[S.srow_stage]) + np.einsum("ij,ij->i", T.a_u, du[S.srow_stage])
    with np.errstate(divide="ignore", invalid="ignore"):
        ds = (-T.rho - adz) / T.D
        dlam_s = -(rcs + it.lam_s * ds) / it.s
    dt = cdz + side_slack(P, ds) + T.r
    dlam = -(rc + it.lam * dt) / it.t
    return dt, dlam, ds, dlam_s


def _step_length(P: Problem, it: Iterate, d: tuple[FloatArray, ...], tau: float) -> tuple[float, float]:
    dt, dlam, ds, dlam_s = d

    def limit(v: FloatArray, dv: FloatArray) -> float:
        neg = dv < 0
        with np.errstate(over="ignore"):  # a step of 1e-300 limits nothing: inf, then min with 1
            return float(np.min(-tau * v[neg] / dv[neg], initial=1.0))

    return min(limit(it.t, dt), limit(it.s, ds)), min(limit(it.lam, dlam), limit(it.lam_s, dlam_s))


def _start(P: Problem, x: FloatArray, u: FloatArray, warm: StageQPResult | None = None) -> Iterate:
    """Slacks and multipliers at the start (C: @{p}_start): cold from a primal guess, or `warm`'s pushed inside."""
    S = P.sides
    x = x.copy()
    x[0] = P.x0
    if warm is not None:
        push = lambda v: np.maximum(np.asarray(v, dtype=float), WARM_PUSH)  # noqa: E731
        pi = np.array(warm.pi, dtype=float).reshape(P.N, P.nx)
        return Iterate(x, u, pi, push(warm.t)[S.slot], push(warm.lam)[S.slot], push(warm.s)[S.srow_slot],
                        push(warm.lam_s)[S.srow_slot])
    gap = row_values(P, x, u) - S.beta
    violation = np.zeros(S.n_soft)  # a soft row's slack: 1 beyond its larger violation
    soft = S.srow >= 0
    np.maximum.at(violation, S.srow[soft], -gap[soft])
    s = violation + 1.0
    t = np.where(soft, gap + side_slack(P, s), np.maximum(gap, 1.0))
    # An elastic row's lam_s from its slack's stationarity l1 - lam_l - lam_u - lam_s = 0 (its sides' lam 1), at
    # least 1: its weight may be many orders above the other multipliers (the merit's, 1e4 to 1e8 on a far
    # start), and from lam_s = 1 the interior point's first steps then ran its slack to 1e14 (read as diverged).
    sides = np.zeros(S.n_soft)
    np.add.at(sides, S.srow[soft], 1.0)
    lam_s = np.where(S.elastic, np.maximum(P.l1 - sides, 1.0), 1.0)
    return Iterate(x, u, np.zeros((P.N, P.nx)), t, np.ones(S.stage.size), s, lam_s)


def solve_stage_qp(qp: StageQP, *, x_guess: npt.ArrayLike | None = None, u_guess: npt.ArrayLike | None = None,
                   max_iter: int = 100, tolerances: dict[str, float] | None = None,
                   warm: StageQPResult | None = None, shortcut_only: bool = False) -> StageQPResult:
    """Solve a `StageQP` by the interior-point Riccati method, in numpy (double precision).

    Parameters
    ----------
    qp : StageQP
    x_guess : array_like, shape (N+1, nx), optional
        Primal guess (default: x0 at every stage); x_0 is replaced by ``qp.x0``.
    u_guess : array_like, shape (N, nu), optional
        Default zeros.
    max_iter : int
    tolerances : dict, optional
        ``tol_stat``, ``tol_eq``, ``tol_mu`` (relative; default `OCP_QP_TOLERANCES["double"]`).
    warm : StageQPResult, optional
        A warm start: its slacks and multipliers (each at least `WARM_PUSH`) and
        ``pi``, e.g. the last sample's solve moved one stage ahead by
        `shifted_result`; the primal guess still comes from `x_guess`, `u_guess`.
        First the active set it predicts is tried (one Newton step, exact when
        right: ``iterations == 1``); a warm interior point that reads as
        infeasible or reaches `max_iter` starts again cold (the C does the same).
    shortcut_only : bool
        `warm` serves the shortcut only: when it fails, the interior point
        starts cold from the guess (an SQP iteration's QP after the last
        one's: C ``@{p}_solve`` with warm = 2, then a cold solve).

    Returns
    -------
    StageQPResult
        ``t``, ``lam``, ``s``, ``lam_s`` in the C's side layout (zero where a bound is infinite).
    """
    P = Problem(qp)
    N, nx, nu = P.N, P.nx, P.nu
    tol = {**OCP_QP_TOLERANCES["double"], **(tolerances or {})}
    x = np.tile(P.x0, (N + 1, 1)) if x_guess is None else np.array(x_guess, dtype=float).reshape(N + 1, nx)
    u = np.zeros((N + 1, nu))
    if u_guess is not None:
        u[:N] = np.asarray(u_guess, dtype=float).reshape(N, nu)
    if warm is None:
        return _ipm(P, x, u, None, tol, max_iter)
    # max_iter bounds the whole solve, the shortcut's factorisations counted (as the C's budget)
    solved, warm, _, _, spent = shortcut(P, x, u, warm, tol, min(SHORTCUT_ATTEMPTS, max_iter))
    if solved is not None:
        return to_result(P, solved, 0, spent, residuals(P, solved)[:3])
    if shortcut_only:
        return _ipm(P, x, u, None, tol, max_iter)
    if spent >= max_iter:
        return dataclasses.replace(to_result(P, _start(P, x, u, warm), 1, 0, (np.inf,) * 3), iterations=spent)
    # After corrections that did not settle, the warm start's multipliers are known wrong: the interior point
    # starts cold (centred slacks and multipliers) from the guess (see the C's @{p}_solve); a prediction the
    # shortcut could not take at all (a hard row predicted active) keeps the warm start.
    res = _ipm(P, x, u, warm if spent == 0 else None, tol, max_iter - spent)
    spent += res.iterations
    if res.status not in (2, 5) or spent >= max_iter:
        return dataclasses.replace(res, iterations=spent)
    # A warm start far from this QP's solution misled the interior point into a divergence (read as
    # infeasible): again, cold, from x0 held over the horizon and zero inputs, with the iterations left (as the C).
    again = _ipm(P, np.tile(P.x0, (N + 1, 1)), np.zeros((N + 1, nu)), None, tol, max_iter - spent)
    return dataclasses.replace(again, iterations=again.iterations + spent)


def _ipm(P: Problem, x: FloatArray, u: FloatArray, warm: StageQPResult | None, tol: dict[str, float],
         max_iter: int) -> StageQPResult:
    """Mehrotra's predictor-corrector from a cold or warm start (C: @{p}_ipm)."""
    N, nx, nu = P.N, P.nx, P.nu
    it = _start(P, x, u, warm)
    F = Factors(N, nx, nu)
    status, iterations, prev = 1, 0, (0.0, 0.0, 0.0)
    step: tuple[float, float, tuple[FloatArray, ...], FloatArray, FloatArray] | None = None
    scale0 = 0.0
    for i in range(max_iter + 1):
        stat, eq, mu, scale = residuals(P, it)
        scale0 = scale if i == 0 else scale0
        if i and (not np.isfinite(scale) or (scale > DIVERGE * scale0 and eq > tol["tol_eq"])):
            # the multipliers diverge with the equalities violated: infeasible where a hard row makes that
            # possible, else a numerical failure (see the C)
            status = 2 if P.has_hard_rows else 5
            break
        if i and step is not None and (stat > 10 * prev[0] or eq > 10 * prev[1]) and \
                prev[0] <= 100 * tol["tol_stat"] and prev[1] <= 100 * tol["tol_eq"] and \
                prev[2] <= 100 * tol["tol_mu"] + MU_FLOOR:
            _update(P, it, step, undo=True)  # a step that made a converged point worse (see the C)
            it.pi = stationary_pi(P, it)  # (the step set pi afresh, the rejected Newton step's: see the C)
            iterations -= 1
            stat, eq, mu, scale = residuals(P, it)
            status = 0
            break
        if not np.isfinite([stat, eq, mu]).all():
            status = 4
            break
        if stat <= tol["tol_stat"] and eq <= tol["tol_eq"] and mu <= tol["tol_mu"]:
            status = 0
            break
        if i == max_iter:
            break
        prev = (stat, eq, mu)
        rc, rcs = it.lam * it.t, it.lam_s * it.s  # predictor: sigma = 0
        try:
            blocks_ = newton_blocks(P, it, rc, rcs)
            dx, du = riccati(P, it, blocks_, F, True)
        except np.linalg.LinAlgError:
            ok = stat <= 100 * tol["tol_stat"] and eq <= 100 * tol["tol_eq"] and mu <= MU_FLOOR
            status = 0 if ok else 3
            break
        d = _side_directions(P, it, dx, du, rc, rcs)
        ap, ad = _step_length(P, it, d, 1.0)
        mu_abs = mu * scale
        sigma = (mean_complementarity(P, it, d, ap, ad) / mu_abs) ** 3 if mu_abs > 0 else 0.0
        rc = it.lam * it.t + d[0] * d[1] - sigma * mu_abs  # corrector with centring
        rcs = it.lam_s * it.s + d[2] * d[3] - sigma * mu_abs
        blocks_ = newton_blocks(P, it, rc, rcs)
        dx, du = riccati(P, it, blocks_, F, False)
        d = _side_directions(P, it, dx, du, rc, rcs)
        ap, ad = _step_length(P, it, d, TAU)
        step = (ap, ad, d, dx, du)
        _update(P, it, step, undo=False, factors=F)
        iterations = i + 1
    return to_result(P, it, status, iterations, residuals(P, it)[:3])


def stationary_pi(P: Problem, it: Iterate) -> FloatArray:
    """The dynamics' multipliers that make the states' stationarity hold exactly at `it` (C: @{p}_stationary_pi):
    pi_{k-1} = g_x,k + A_k' pi_k backwards from the last stage, g_x the cost's gradient with the rows' terms."""
    gx, _ = cost_gradient(P, it)
    np.add.at(gx, P.sides.stage, -it.lam[:, None] * P.sides.cx)
    pi = np.zeros_like(it.pi)
    pi[P.N - 1] = gx[P.N]
    for k in range(P.N - 1, 0, -1):
        pi[k - 1] = gx[k] + P.A[k].T @ pi[k]
    return pi


def _update(P: Problem, it: Iterate, step: tuple, *, undo: bool, factors: Factors | None = None) -> None:
    ap, ad, (dt, dlam, ds, dlam_s), dx, du = step
    sign = -1.0 if undo else 1.0
    if undo:
        # The C keeps no dt of a bound's side (@{p}_row_dt recomputes it from the point it stands at): undoing
        # reads it after the step, dt - ap r (r the residual before it), and so does this twin; a general
        # row's dt is kept (dtg), so its undo is exact.
        recomputed = row_values(P, dx, du) + side_slack(P, ds) + side_residual(P, it)
        dt = np.where(P.sides.slot < P.bound_sides, recomputed, dt)
    if factors is not None and not undo:  # pi_k = L L' dx_{k+1} + p_{k+1}: the full Newton step (as the C)
        it.pi = np.einsum("kij,kj->ki", factors.L, np.einsum("kji,kj->ki", factors.L, dx[1:])) + factors.p
    it.x[1:] += sign * ap * dx[1:]
    it.u += sign * ap * du
    it.t += sign * ap * dt
    it.lam += sign * ad * dlam
    it.s += sign * ap * ds
    it.lam_s += sign * ad * dlam_s
