"""The stage-wise QP's interior-point Riccati solver in numpy: the twin of ``templates/ocp_qp.c.in``.

Mehrotra's predictor-corrector interior-point method (Nocedal and Wright,
Numerical Optimization, 2nd ed., algorithm 16.4) on every side of every row,
each with a slack t >= 0 and a multiplier lam >= 0 (a soft row also with one
slack variable s >= 0 for both sides, carrying l1 s + l2 s^2); each Newton system, once the
sides are eliminated, is an equality-constrained LQ problem solved by the
square-root Riccati recursion (Frison and Diehl 2020, HPIPM; Rao, Wright and
Rawlings 1998). The functions carry the C's names (`_stage`, `_riccati`,
`_side_directions`, `_step_length`, `_residuals`) so that each reads against
the other; the C is the reference of every formula's comment. This twin works
in double precision, vectorised over the stages where the C loops.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shooting.qp.stage_qp import OCP_QP_TOLERANCES, StageQP, StageQPResult, blocks

__all__ = ["WARM_PUSH", "solve_stage_qp"]

FloatArray = npt.NDArray[np.float64]

#: As the C's double build: fraction to the boundary, pivot tolerance, the
#: complementarity below which a lost pivot or a degrading step ends a solve.
TAU, TOL_PD, MU_FLOOR, WARM_PUSH, DIVERGE = 0.995, 1e-14, 1e-12, 1e-4, 1e12


@dataclass
class _Sides:
    """Every side with a finite bound: c_hat = sign c (x and u parts), beta = sign bound, its stage, soft or not."""

    stage: npt.NDArray[np.int64]
    cx: FloatArray
    cu: FloatArray
    beta: FloatArray
    soft: npt.NDArray[np.bool_]
    slot: npt.NDArray[np.int64]  # index in the C's side arrays
    srow: npt.NDArray[np.int64]  # a soft side's row slack (index into s, lam_s), else -1
    n_soft: int  # soft rows
    srow_stage: npt.NDArray[np.int64]  # the stage of each soft row
    srow_slot: npt.NDArray[np.int64]  # its slack's index in the C's soft arrays


def _sides(qp: StageQP) -> _Sides:
    """The sides in the C's order (inputs', states', general rows', terminal rows'), infinite ones left out."""
    z = qp.sizes
    N, nx, nu = z.N, z.nx, z.nu
    stage: list[int] = []
    cx: list[FloatArray] = []
    cu: list[FloatArray] = []
    beta: list[float] = []
    soft: list[bool] = []
    slot: list[int] = []
    srow: list[int] = []
    srow_stage: list[int] = []
    srow_slot: list[int] = []

    def add(k: int, c_x: FloatArray, c_u: FloatArray, lo: float, hi: float, is_soft: bool, first: int) -> None:
        row = -1
        if is_soft and (np.isfinite(lo) or np.isfinite(hi)):
            row = len(srow_stage)
            srow_stage.append(k)
            srow_slot.append((first - 2 * N * nu) // 2)
        for side, bound, sign in ((0, lo, 1.0), (1, hi, -1.0)):
            if np.isfinite(bound):
                stage.append(k)
                cx.append(sign * c_x)
                cu.append(sign * c_u)
                beta.append(sign * bound)
                soft.append(is_soft)
                slot.append(first + side)
                srow.append(row)

    lbu, ubu = blocks(-np.inf if qp.lbu is None else qp.lbu, N, (nu,), "lbu"), \
        blocks(np.inf if qp.ubu is None else qp.ubu, N, (nu,), "ubu")
    eye_u, eye_x = np.eye(nu), np.eye(nx)
    for k in range(N):
        for j in range(nu):
            add(k, np.zeros(nx), eye_u[j], lbu[k, j], ubu[k, j], False, 2 * (nu * k + j))
    nbx = z.nbx
    lbx, ubx = blocks(-np.inf if qp.lbx is None else qp.lbx, N, (nbx,), "lbx"), \
        blocks(np.inf if qp.ubx is None else qp.ubx, N, (nbx,), "ubx")
    base = 2 * N * nu
    for k in range(1, N + 1):
        for j, i in enumerate(qp.idxbx):
            add(k, eye_x[i], np.zeros(nu), lbx[k - 1, j], ubx[k - 1, j], bool(qp.soft_bx[j]) if qp.soft_bx else False,
                base + 2 * (nbx * (k - 1) + j))
    base += 2 * N * nbx
    if z.ng:
        C, D = blocks(qp.C, N, (z.ng, nx), "C"), blocks(qp.D, N, (z.ng, nu), "D")
        lg, ug = blocks(qp.lg, N, (z.ng,), "lg"), blocks(qp.ug, N, (z.ng,), "ug")
        for k in range(N):
            for j in range(z.ng):
                add(k, C[k, j], D[k, j], lg[k, j], ug[k, j], bool(qp.soft_g[j]) if qp.soft_g else False,
                    base + 2 * (z.ng * k + j))
    base += 2 * N * z.ng
    if z.ngN:
        CN = np.asarray(qp.CN, dtype=float).reshape(z.ngN, nx)
        for j in range(z.ngN):
            add(N, CN[j], np.zeros(nu), float(np.asarray(qp.lgN)[j]), float(np.asarray(qp.ugN)[j]),
                bool(qp.soft_gN[j]) if qp.soft_gN else False, base + 2 * j)
    n = len(stage)
    return _Sides(np.asarray(stage, dtype=np.int64), np.asarray(cx, dtype=float).reshape(n, nx),
                  np.asarray(cu, dtype=float).reshape(n, nu), np.asarray(beta, dtype=float),
                  np.asarray(soft, dtype=bool), np.asarray(slot, dtype=np.int64), np.asarray(srow, dtype=np.int64),
                  len(srow_stage), np.asarray(srow_stage, dtype=np.int64), np.asarray(srow_slot, dtype=np.int64))


class _Problem:
    """The data as per-stage arrays: cost blocks over k = 0..N (u-blocks zero at N), dynamics over k < N."""

    def __init__(self, qp: StageQP) -> None:
        z = qp.sizes
        N, nx, nu = z.N, z.nx, z.nu
        self.N, self.nx, self.nu = N, nx, nu
        self.A, self.B, self.b = blocks(qp.A, N, (nx, nx), "A"), blocks(qp.B, N, (nx, nu), "B"), \
            blocks(qp.b, N, (nx,), "b")
        self.Hxx = np.concatenate([blocks(qp.Q, N, (nx, nx), "Q"), np.asarray(qp.Q_N, dtype=float)[None]])
        self.Hux = np.concatenate([blocks(qp.S, N, (nu, nx), "S"), np.zeros((1, nu, nx))])
        self.Huu = np.concatenate([blocks(qp.R, N, (nu, nu), "R"), np.zeros((1, nu, nu))])
        self.q, self.r = blocks(qp.q, N + 1, (nx,), "q"), np.concatenate([blocks(qp.r, N, (nu,), "r"),
                                                                         np.zeros((1, nu))])
        self.x0 = np.asarray(qp.x0, dtype=float).reshape(nx)
        self.l1, self.l2 = float(qp.l1), float(qp.l2)
        self.sides = _sides(qp)
        self.nsides, self.nsoft = z.nsides, z.nsoft
        self.bound_sides = 2 * N * (nu + z.nbx)  # the inputs' and states' sides come first (C: @{P}_SIDES_U, _X)


@dataclass
class _Iterate:
    x: FloatArray  # (N+1, nx)
    u: FloatArray  # (N+1, nu): row N is zero (no input at the terminal stage)
    pi: FloatArray  # (N, nx)
    t: FloatArray  # per side
    lam: FloatArray
    s: FloatArray  # per soft row
    lam_s: FloatArray


def _row_values(P: _Problem, x: FloatArray, u: FloatArray) -> FloatArray:
    """c_hat'z of every side."""
    S = P.sides
    return np.einsum("ij,ij->i", S.cx, x[S.stage]) + np.einsum("ij,ij->i", S.cu, u[S.stage])


def _side_slack(P: _Problem, values: FloatArray) -> FloatArray:
    """A soft row's per-row value on each of its sides (zero on hard sides)."""
    S = P.sides
    return np.where(S.soft, values[np.maximum(S.srow, 0)] if values.size else 0.0, 0.0)


def _side_residual(P: _Problem, it: _Iterate) -> FloatArray:
    """c_hat'z + s - beta - t of every side."""
    return _row_values(P, it.x, it.u) - P.sides.beta - it.t + _side_slack(P, it.s)


def _cost_gradient(P: _Problem, it: _Iterate) -> tuple[FloatArray, FloatArray]:
    gx = np.einsum("kij,kj->ki", P.Hxx, it.x) + np.einsum("kji,kj->ki", P.Hux, it.u) + P.q
    gu = np.einsum("kij,kj->ki", P.Hux, it.x) + np.einsum("kij,kj->ki", P.Huu, it.u) + P.r
    return gx, gu


@dataclass
class _RowTerms:
    """The sides' eliminated terms (C: @{p}_row_terms): per side d, g, r; per soft row D, rho and a = sum d c_hat."""

    d: FloatArray
    g: FloatArray
    r: FloatArray
    D: FloatArray
    rho: FloatArray
    a_x: FloatArray
    a_u: FloatArray


def _row_terms(P: _Problem, it: _Iterate, rc: FloatArray, rcs: FloatArray) -> _RowTerms:
    S = P.sides
    r = _side_residual(P, it)
    d = it.lam / it.t
    g = (rc + it.lam * r) / it.t
    n = S.n_soft
    soft = S.srow >= 0
    lam_sum, d_sum, g_sum = np.zeros(n), np.zeros(n), np.zeros(n)
    a_x, a_u = np.zeros((n, P.nx)), np.zeros((n, P.nu))
    np.add.at(lam_sum, S.srow[soft], it.lam[soft])
    np.add.at(d_sum, S.srow[soft], d[soft])
    np.add.at(g_sum, S.srow[soft], g[soft])
    np.add.at(a_x, S.srow[soft], d[soft, None] * S.cx[soft])
    np.add.at(a_u, S.srow[soft], d[soft, None] * S.cu[soft])
    Z = 2 * P.l2
    rs = Z * it.s + P.l1 - lam_sum - it.lam_s
    with np.errstate(divide="ignore", invalid="ignore"):
        D = Z + d_sum + it.lam_s / it.s
        rho = rs + g_sum + rcs / it.s
    return _RowTerms(d, g, r, D, rho, a_x, a_u)


def _stage(P: _Problem, it: _Iterate, rc: FloatArray, rcs: FloatArray
           ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """The Newton system's stage blocks with the sides eliminated (C: @{p}_stage with newton = 1).

    Every side adds d c_hat c_hat' and c_hat g (and the plain - lam c_hat); a soft row, its slack eliminated
    too, subtracts a a' / D and a rho / D with a = sum over its sides of d c_hat (C: @{p}_row_newton).
    """
    S = P.sides
    T = _row_terms(P, it, rc, rcs)
    v = T.g - it.lam
    Hxx, Hux, Huu = P.Hxx.copy(), P.Hux.copy(), P.Huu.copy()
    gx, gu = _cost_gradient(P, it)
    np.add.at(Hxx, S.stage, T.d[:, None, None] * S.cx[:, :, None] * S.cx[:, None, :])
    np.add.at(Hux, S.stage, T.d[:, None, None] * S.cu[:, :, None] * S.cx[:, None, :])
    np.add.at(Huu, S.stage, T.d[:, None, None] * S.cu[:, :, None] * S.cu[:, None, :])
    np.add.at(gx, S.stage, v[:, None] * S.cx)
    np.add.at(gu, S.stage, v[:, None] * S.cu)
    if S.n_soft:
        k, w = S.srow_stage, 1.0 / T.D
        np.add.at(Hxx, k, -w[:, None, None] * T.a_x[:, :, None] * T.a_x[:, None, :])
        np.add.at(Hux, k, -w[:, None, None] * T.a_u[:, :, None] * T.a_x[:, None, :])
        np.add.at(Huu, k, -w[:, None, None] * T.a_u[:, :, None] * T.a_u[:, None, :])
        np.add.at(gx, k, -(T.rho * w)[:, None] * T.a_x)
        np.add.at(gu, k, -(T.rho * w)[:, None] * T.a_u)
    return Hxx, Hux, Huu, gx, gu


def _chol(M: FloatArray, strict: int) -> FloatArray:
    """Lower Cholesky factor with the C's pivot rules (the first `strict` regularised, the others may vanish).

    LAPACK's factor when every pivot keeps more than the tolerance of its diagonal (then the rules change
    nothing), else the rules one pivot at a time.
    """
    try:
        L = np.asarray(np.linalg.cholesky(M), dtype=float)
        if np.all(np.diag(L) ** 2 > TOL_PD * np.diag(M)):
            return L
    except np.linalg.LinAlgError:
        pass
    n = M.shape[0]
    L = np.tril(M).astype(float)
    for j in range(n):
        d, djj = L[j, j] - L[j, :j] @ L[j, :j], M[j, j]
        if j < strict:
            if not djj > 0:
                raise np.linalg.LinAlgError("not positive definite")
            d = d if d > TOL_PD * djj else TOL_PD * djj
        elif not djj >= 0:
            raise np.linalg.LinAlgError("not positive semi-definite")
        elif not (d > TOL_PD * djj and d > 0):
            L[j:, j] = 0.0
            continue
        L[j, j] = np.sqrt(d)
        L[j + 1:, j] = (L[j + 1:, j] - L[j + 1:, :j] @ L[j, :j]) / L[j, j]
    return np.asarray(L, dtype=float)


class _Factors:
    """What the Riccati factorisation keeps for the corrector's second solve."""

    def __init__(self, N: int, nx: int, nu: int) -> None:
        self.Lri = np.zeros((N, nu, nu))  # Lr^{-1}
        self.Ls = np.zeros((N, nx, nu))
        self.K = np.zeros((N, nu, nx))  # -Lr^{-T} Ls'
        self.L = np.zeros((N, nx, nx))  # L_{k+1}: P_{k+1} = L L'
        self.p = np.zeros((N, nx))  # p_{k+1} of the last solve


def _riccati(P: _Problem, it: _Iterate, blocks_: tuple[FloatArray, ...], F: _Factors, factor: bool
             ) -> tuple[FloatArray, FloatArray]:
    """Square-root Riccati solve of the Newton system's LQ problem (C: @{p}_riccati)."""
    Hxx, Hux, Huu, gx, gu = blocks_
    N, nx, nu = P.N, P.nx, P.nu
    e = np.einsum("kij,kj->ki", P.A, it.x[:N]) + np.einsum("kij,kj->ki", P.B, it.u[:N]) + P.b - it.x[1:]
    if factor:
        Lq = _chol(Hxx[N], 0)
        for k in range(N - 1, -1, -1):
            F.L[k] = Lq
            W = np.vstack([P.B[k].T @ Lq, P.A[k].T @ Lq])  # [B'; A'] L_{k+1}
            M = W @ W.T
            M[:nu, :nu] += Huu[k]
            M[:nu, nu:] += Hux[k]
            M[nu:, :nu] += Hux[k].T
            M[nu:, nu:] += Hxx[k]
            Lm = _chol(M, nu)
            F.Lri[k] = np.linalg.inv(Lm[:nu, :nu])
            F.Ls[k], Lq = Lm[nu:, :nu], Lm[nu:, nu:]
        F.K = -np.einsum("kji,klj->kil", F.Lri, F.Ls)  # -Lr^{-T} Ls'
    # vector part: v = P_{k+1} e + p_{k+1}; l_u = Lr^{-1} (gu + B'v); p_k = gx + A'v - Ls l_u
    Pe = np.einsum("kij,kj->ki", F.L, np.einsum("kji,kj->ki", F.L, e))
    p = gx[N].copy()
    lu = np.zeros((N, nu))
    for k in range(N - 1, -1, -1):
        F.p[k] = p
        v = Pe[k] + p
        lu[k] = F.Lri[k] @ (gu[k] + P.B[k].T @ v)
        p = gx[k] + P.A[k].T @ v - F.Ls[k] @ lu[k]
    kff = -np.einsum("kji,kj->ki", F.Lri, lu)  # -Lr^{-T} l_u
    dx, du = np.zeros((N + 1, nx)), np.zeros((N + 1, nu))
    for k in range(N):
        du[k] = F.K[k] @ dx[k] + kff[k]
        dx[k + 1] = P.A[k] @ dx[k] + P.B[k] @ du[k] + e[k]
    return dx, du


def _side_directions(P: _Problem, it: _Iterate, dx: FloatArray, du: FloatArray, rc: FloatArray,
                     rcs: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """dt, dlam per side and ds, dlam_s per soft row (C: @{p}_side_directions)."""
    S = P.sides
    T = _row_terms(P, it, rc, rcs)
    cdz = _row_values(P, dx, du)
    adz = np.einsum("ij,ij->i", T.a_x, dx[S.srow_stage]) + np.einsum("ij,ij->i", T.a_u, du[S.srow_stage])
    with np.errstate(divide="ignore", invalid="ignore"):
        ds = (-T.rho - adz) / T.D
        dlam_s = -(rcs + it.lam_s * ds) / it.s
    dt = cdz + _side_slack(P, ds) + T.r
    dlam = -(rc + it.lam * dt) / it.t
    return dt, dlam, ds, dlam_s


def _step_length(P: _Problem, it: _Iterate, d: tuple[FloatArray, ...], tau: float) -> tuple[float, float]:
    dt, dlam, ds, dlam_s = d

    def limit(v: FloatArray, dv: FloatArray) -> float:
        neg = dv < 0
        with np.errstate(over="ignore"):  # a step of 1e-300 limits nothing: inf, then min with 1
            return float(np.min(-tau * v[neg] / dv[neg], initial=1.0))

    return min(limit(it.t, dt), limit(it.s, ds)), min(limit(it.lam, dlam), limit(it.lam_s, dlam_s))


def _mu(P: _Problem, it: _Iterate, d: tuple[FloatArray, ...] | None = None, a_p: float = 0.0,
        a_d: float = 0.0) -> float:
    n = P.sides.stage.size + P.sides.n_soft
    if n == 0:
        return 0.0
    if d is None:
        d = (np.zeros_like(it.t), np.zeros_like(it.t), np.zeros_like(it.s), np.zeros_like(it.s))
    dt, dlam, ds, dlam_s = d
    total = np.sum((it.t + a_p * dt) * (it.lam + a_d * dlam)) + np.sum((it.s + a_p * ds) * (it.lam_s + a_d * dlam_s))
    return float(total / n)


def _residuals(P: _Problem, it: _Iterate) -> tuple[float, float, float, float]:
    """Relative stationarity, equality, complementarity, and the multipliers' size (C: @{p}_residuals)."""
    S = P.sides
    N = P.N
    gx, gu = _cost_gradient(P, it)
    np.add.at(gx, S.stage, -it.lam[:, None] * S.cx)
    np.add.at(gu, S.stage, -it.lam[:, None] * S.cu)
    ss = max(np.abs(gx).max(initial=0.0), np.abs(gu[:N]).max(initial=0.0), np.abs(it.pi).max(initial=0.0))
    Api = np.einsum("kji,kj->ki", P.A, it.pi)
    Bpi = np.einsum("kji,kj->ki", P.B, it.pi)
    ss = max(ss, np.abs(Bpi).max(initial=0.0))
    gx[:N] += Api
    rs = max(np.abs(gu[:N] + Bpi).max(initial=0.0), np.abs(gx[1:] - it.pi).max(initial=0.0))
    Ax = np.einsum("kij,kj->ki", P.A, it.x[:N])
    Bu = np.einsum("kij,kj->ki", P.B, it.u[:N])
    re = np.abs(Ax + Bu + P.b - it.x[1:]).max(initial=0.0)
    se = max(np.abs(Ax).max(initial=0.0), np.abs(Bu).max(initial=0.0), np.abs(P.b).max(initial=0.0),
             np.abs(it.x[1:]).max(initial=0.0))
    cz = _row_values(P, it.x, it.u)
    re = max(re, np.abs(_side_residual(P, it)).max(initial=0.0))
    se = max(se, np.abs(cz).max(initial=0.0), np.abs(S.beta).max(initial=0.0))
    ss = max(ss, it.lam.max(initial=0.0))
    if S.n_soft:  # the slacks' stationarity 2 l2 s + l1 - lam_l - lam_u - lam_s
        lam_sum = np.zeros(S.n_soft)
        soft = S.srow >= 0
        np.add.at(lam_sum, S.srow[soft], it.lam[soft])
        grad_s = 2 * P.l2 * it.s + P.l1
        rs = max(rs, np.abs(grad_s - lam_sum - it.lam_s).max())
        ss = max(ss, np.abs(grad_s).max(), it.lam_s.max())
    scale = 1 + ss
    return rs / scale, re / (1 + se), _mu(P, it) / scale, scale


def _start(P: _Problem, x: FloatArray, u: FloatArray, warm: StageQPResult | None = None) -> _Iterate:
    """Slacks and multipliers at the start (C: @{p}_start): cold from a primal guess, or `warm`'s pushed inside."""
    S = P.sides
    x = x.copy()
    x[0] = P.x0
    if warm is not None:
        push = lambda v: np.maximum(np.asarray(v, dtype=float), WARM_PUSH)  # noqa: E731
        pi = np.array(warm.pi, dtype=float).reshape(P.N, P.nx)
        return _Iterate(x, u, pi, push(warm.t)[S.slot], push(warm.lam)[S.slot], push(warm.s)[S.srow_slot],
                        push(warm.lam_s)[S.srow_slot])
    gap = _row_values(P, x, u) - S.beta
    violation = np.zeros(S.n_soft)  # a soft row's slack: 1 beyond its larger violation
    soft = S.srow >= 0
    np.maximum.at(violation, S.srow[soft], -gap[soft])
    s = violation + 1.0
    t = np.where(soft, gap + _side_slack(P, s), np.maximum(gap, 1.0))
    return _Iterate(x, u, np.zeros((P.N, P.nx)), t, np.ones(S.stage.size), s, np.ones(S.n_soft))


def _shortcut(P: _Problem, x: FloatArray, u: FloatArray, warm: StageQPResult, tol: dict[str, float]
              ) -> tuple[_Iterate | None, StageQPResult, FloatArray, FloatArray]:
    """The warm start's shortcut (C: @{p}_shortcut): one Newton step on the QP with the active set `warm` predicts.

    Returns the solved iterate (None when the prediction is outside what the shortcut solves or wrong), and the
    warm start, x and u the interior point then starts from (as the C leaves them).
    """
    S = P.sides
    t, lam = np.asarray(warm.t, dtype=float)[S.slot], np.asarray(warm.lam, dtype=float)[S.slot]
    s_warm, lam_s_warm = np.asarray(warm.s, dtype=float)[S.srow_slot], np.asarray(warm.lam_s, dtype=float)[S.srow_slot]
    active = lam > t  # a side's multiplier above its slack
    per_row = np.zeros(S.n_soft, dtype=np.int64)
    np.add.at(per_row, S.srow[active & S.soft], 1)
    violated = s_warm > lam_s_warm  # a soft row's slack above its multiplier (else held at s = 0 exactly)
    if np.any(active & ~S.soft) or np.any(per_row > 1) or np.any(active & S.soft & ~violated[S.srow]):
        return None, warm, x, u
    x = x.copy()
    x[0] = P.x0
    it = _Iterate(x, u.copy(), np.array(warm.pi, dtype=float).reshape(P.N, P.nx), t, lam, s_warm, lam_s_warm)
    # The QP with that active set: an active soft side's penalty l1 s + l2 s^2, s = beta - c_hat'z its
    # violation, as the quadratic it is there (C: @{p}_stage with newton = 3); every other side absent.
    Hxx, Hux, Huu = P.Hxx.copy(), P.Hux.copy(), P.Huu.copy()
    gx, gu = _cost_gradient(P, it)
    on = np.flatnonzero(active)
    viol = P.sides.beta[on] - _row_values(P, it.x, it.u)[on]
    coef = -(P.l1 + 2 * P.l2 * viol)
    np.add.at(Hxx, S.stage[on], 2 * P.l2 * S.cx[on, :, None] * S.cx[on, None, :])
    np.add.at(Hux, S.stage[on], 2 * P.l2 * S.cu[on, :, None] * S.cx[on, None, :])
    np.add.at(Huu, S.stage[on], 2 * P.l2 * S.cu[on, :, None] * S.cu[on, None, :])
    np.add.at(gx, S.stage[on], coef[:, None] * S.cx[on])
    np.add.at(gu, S.stage[on], coef[:, None] * S.cu[on])
    F = _Factors(P.N, P.nx, P.nu)
    try:
        dx, du = _riccati(P, it, (Hxx, Hux, Huu, gx, gu), F, True)
    except np.linalg.LinAlgError:
        return None, warm, it.x, u
    it.pi = np.einsum("kij,kj->ki", F.L, np.einsum("kji,kj->ki", F.L, dx[1:])) + F.p
    it.x[1:] += dx[1:]
    it.u += du
    moved = _result(P, it, 1, 0, (np.inf, np.inf, np.inf))  # (pi moved, the sides not yet)
    cz = _row_values(P, it.x, it.u)
    gap = cz - S.beta  # how far inside each side (negative: beyond)
    s = np.zeros(S.n_soft)
    s[S.srow[on]] = -gap[on]
    if np.any(s[S.srow[on]] <= 0) or np.any(~active & (gap + _side_slack(P, s) < -tol["tol_eq"] * (1 + np.abs(cz)))):
        return None, moved, it.x, it.u
    soft_active = np.zeros(S.n_soft, dtype=bool)
    soft_active[S.srow[on]] = True
    it.s = s
    it.lam_s = np.where(soft_active, 0.0, P.l1)
    it.t = np.where(active, 0.0, np.maximum(gap + _side_slack(P, s), 0.0))
    it.lam = np.where(active, P.l1 + 2 * P.l2 * _side_slack(P, s), 0.0)
    stat, eq, mu, _ = _residuals(P, it)
    if stat <= tol["tol_stat"] and eq <= tol["tol_eq"] and mu <= tol["tol_mu"]:
        return it, moved, it.x, it.u
    return None, _result(P, it, 1, 0, (stat, eq, mu)), it.x, it.u


def solve_stage_qp(qp: StageQP, *, x_guess: npt.ArrayLike | None = None, u_guess: npt.ArrayLike | None = None,
                   max_iter: int = 100, tolerances: dict[str, float] | None = None,
                   warm: StageQPResult | None = None) -> StageQPResult:
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

    Returns
    -------
    StageQPResult
        ``t``, ``lam``, ``s``, ``lam_s`` in the C's side layout (zero where a bound is infinite).
    """
    P = _Problem(qp)
    N, nx, nu = P.N, P.nx, P.nu
    tol = {**OCP_QP_TOLERANCES["double"], **(tolerances or {})}
    x = np.tile(P.x0, (N + 1, 1)) if x_guess is None else np.array(x_guess, dtype=float).reshape(N + 1, nx)
    u = np.zeros((N + 1, nu))
    if u_guess is not None:
        u[:N] = np.asarray(u_guess, dtype=float).reshape(N, nu)
    if warm is None:
        return _ipm(P, x, u, None, tol, max_iter)
    solved, warm, x, u = _shortcut(P, x, u, warm, tol)  # the warm start's active set, tried first
    if solved is not None:
        return _result(P, solved, 0, 1, _residuals(P, solved)[:3])
    res = _ipm(P, x, u, warm, tol, max_iter)
    if res.status not in (1, 2):
        return res
    # A warm start far from this QP's solution misled the interior point (a divergence read as infeasible, or
    # the iteration limit): again, cold, from x0 held over the horizon and zero inputs (as the C).
    again = _ipm(P, np.tile(P.x0, (N + 1, 1)), np.zeros((N + 1, nu)), None, tol, max_iter)
    return dataclasses.replace(again, iterations=again.iterations + res.iterations)


def _ipm(P: _Problem, x: FloatArray, u: FloatArray, warm: StageQPResult | None, tol: dict[str, float],
         max_iter: int) -> StageQPResult:
    """Mehrotra's predictor-corrector from a cold or warm start (C: @{p}_ipm)."""
    N, nx, nu = P.N, P.nx, P.nu
    it = _start(P, x, u, warm)
    F = _Factors(N, nx, nu)
    status, iterations, prev = 1, 0, (0.0, 0.0, 0.0)
    step: tuple[float, float, tuple[FloatArray, ...], FloatArray, FloatArray] | None = None
    scale0 = 0.0
    for i in range(max_iter + 1):
        stat, eq, mu, scale = _residuals(P, it)
        scale0 = scale if i == 0 else scale0
        if i and (not np.isfinite(scale) or (scale > DIVERGE * scale0 and eq > tol["tol_eq"])):
            status = 2  # the multipliers diverge with the equalities violated: infeasible (see the C)
            break
        if i and step is not None and (stat > 10 * prev[0] or eq > 10 * prev[1]) and \
                prev[0] <= 100 * tol["tol_stat"] and prev[1] <= 100 * tol["tol_eq"] and \
                prev[2] <= 100 * tol["tol_mu"] + MU_FLOOR:
            _update(P, it, step, undo=True)  # a step that made a converged point worse (see the C)
            iterations -= 1
            stat, eq, mu, scale = _residuals(P, it)
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
            blocks_ = _stage(P, it, rc, rcs)
            dx, du = _riccati(P, it, blocks_, F, True)
        except np.linalg.LinAlgError:
            ok = stat <= 100 * tol["tol_stat"] and eq <= 100 * tol["tol_eq"] and mu <= MU_FLOOR
            status = 0 if ok else 3
            break
        d = _side_directions(P, it, dx, du, rc, rcs)
        ap, ad = _step_length(P, it, d, 1.0)
        mu_abs = mu * scale
        sigma = (_mu(P, it, d, ap, ad) / mu_abs) ** 3 if mu_abs > 0 else 0.0
        rc = it.lam * it.t + d[0] * d[1] - sigma * mu_abs  # corrector with centring
        rcs = it.lam_s * it.s + d[2] * d[3] - sigma * mu_abs
        blocks_ = _stage(P, it, rc, rcs)
        dx, du = _riccati(P, it, blocks_, F, False)
        d = _side_directions(P, it, dx, du, rc, rcs)
        ap, ad = _step_length(P, it, d, TAU)
        step = (ap, ad, d, dx, du)
        _update(P, it, step, undo=False, factors=F)
        iterations = i + 1
    return _result(P, it, status, iterations, _residuals(P, it)[:3])


def _update(P: _Problem, it: _Iterate, step: tuple, *, undo: bool, factors: _Factors | None = None) -> None:
    ap, ad, (dt, dlam, ds, dlam_s), dx, du = step
    sign = -1.0 if undo else 1.0
    if undo:
        # The C keeps no dt of a bound's side (@{p}_row_dt recomputes it from the point it stands at): undoing
        # reads it after the step, dt - ap r (r the residual before it), and so does this twin; a general
        # row's dt is kept (dtg), so its undo is exact.
        recomputed = _row_values(P, dx, du) + _side_slack(P, ds) + _side_residual(P, it)
        dt = np.where(P.sides.slot < P.bound_sides, recomputed, dt)
    if factors is not None and not undo:  # pi_k = L L' dx_{k+1} + p_{k+1}: the full Newton step (as the C)
        it.pi = np.einsum("kij,kj->ki", factors.L, np.einsum("kji,kj->ki", factors.L, dx[1:])) + factors.p
    it.x[1:] += sign * ap * dx[1:]
    it.u += sign * ap * du
    it.t += sign * ap * dt
    it.lam += sign * ad * dlam
    it.s += sign * ap * ds
    it.lam_s += sign * ad * dlam_s


def _result(P: _Problem, it: _Iterate, status: int, iterations: int, residuals: tuple[float, ...]
            ) -> StageQPResult:
    S = P.sides
    slots = S.slot
    total = P.nsides
    t, lam = np.zeros(total), np.zeros(total)
    t[slots], lam[slots] = it.t, it.lam
    s, lam_s = np.zeros(max(P.nsoft, 1)), np.zeros(max(P.nsoft, 1))
    s[S.srow_slot], lam_s[S.srow_slot] = it.s, it.lam_s
    return StageQPResult(it.x.copy(), it.u[:P.N].copy(), it.pi.copy(), t, lam, s, lam_s, status, iterations,
                         (float(residuals[0]), float(residuals[1]), float(residuals[2])))
