"""The stage-wise QP's KKT system in numpy, per stage: what the interior point and its shortcut share.

`Problem` holds the data as per-stage arrays and every finite side of every
row (`Sides`: c_hat = +-c, beta = +-bound); `Iterate` the primal point, the
dynamics' multipliers, each side's slack and multiplier and each soft row's
slack variable; `residuals` the KKT residuals the C's stopping test reads;
`newton_blocks` the Newton system's stage blocks with the sides eliminated,
and `riccati` its square-root Riccati solve (Frison and Diehl 2020, HPIPM;
Rao, Wright and Rawlings 1998). Each carries the C's name in its docstring
(``@{p}_stage``, ``@{p}_riccati``, ``@{p}_residuals``) so that each reads
against the other; the C is the reference of every formula's comment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shooting.qp.stage_qp import StageQP, StageQPResult, blocks

__all__ = ["TOL_PD", "Factors", "Iterate", "Problem", "RowTerms", "Sides", "build_sides", "chol", "cost_gradient",
           "mean_complementarity", "newton_blocks", "residuals", "riccati", "row_terms", "row_values", "side_residual",
           "side_slack", "to_result"]

FloatArray = npt.NDArray[np.float64]

#: As the C's double build: the pivot tolerance of the Cholesky factors.
TOL_PD = 1e-14

@dataclass
class Sides:
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
    w1: FloatArray  # each soft row's slack weights l1, l2 (an elastic QP's hard row: its weight and 0)
    w2: FloatArray
    elastic: npt.NDArray[np.bool_]  # each soft row: an elastic QP's hard row


def build_sides(qp: StageQP) -> Sides:
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
    w1: list[float] = []
    w2: list[float] = []
    el: list[bool] = []

    def add(k: int, c_x: FloatArray, c_u: FloatArray, lo: float, hi: float, soft_row: bool, first: int) -> None:
        row = -1
        # (an elastic QP: a hard row other than an input's is soft at the elastic weight, without l2)
        elastic = not soft_row and qp.elastic > 0 and first >= 2 * N * nu
        is_soft = soft_row or elastic
        if is_soft and (np.isfinite(lo) or np.isfinite(hi)):
            row = len(srow_stage)
            srow_stage.append(k)
            srow_slot.append((first - 2 * N * nu) // 2)
            w1.append(float(qp.elastic) if elastic else float(qp.l1))
            w2.append(0.0 if elastic else float(qp.l2))
            el.append(elastic)
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
    return Sides(np.asarray(stage, dtype=np.int64), np.asarray(cx, dtype=float).reshape(n, nx),
                  np.asarray(cu, dtype=float).reshape(n, nu), np.asarray(beta, dtype=float),
                  np.asarray(soft, dtype=bool), np.asarray(slot, dtype=np.int64), np.asarray(srow, dtype=np.int64),
                  len(srow_stage), np.asarray(srow_stage, dtype=np.int64), np.asarray(srow_slot, dtype=np.int64),
                  np.asarray(w1, dtype=float), np.asarray(w2, dtype=float), np.asarray(el, dtype=bool))


class Problem:
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
        self.sides = build_sides(qp)
        self.l1, self.l2 = self.sides.w1, self.sides.w2  # (per soft row)
        self.nsides, self.nsoft = z.nsides, z.nsoft
        self.bound_sides = 2 * N * (nu + z.nbx)  # the inputs' and states' sides come first (C: @{P}_SIDES_U, _X)
        # a side other than an input's that is hard: only then can the QP be infeasible (C: @{p}_has_hard_rows)
        self.has_hard_rows = bool(np.any(~self.sides.soft & (self.sides.slot >= 2 * N * nu)))


@dataclass
class Iterate:
    x: FloatArray  # (N+1, nx)
    u: FloatArray  # (N+1, nu): row N is zero (no input at the terminal stage)
    pi: FloatArray  # (N, nx)
    t: FloatArray  # per side
    lam: FloatArray
    s: FloatArray  # per soft row
    lam_s: FloatArray


def row_values(P: Problem, x: FloatArray, u: FloatArray) -> FloatArray:
    """c_hat'z of every side."""
    S = P.sides
    return np.einsum("ij,ij->i", S.cx, x[S.stage]) + np.einsum("ij,ij->i", S.cu, u[S.stage])


def side_slack(P: Problem, values: FloatArray) -> FloatArray:
    """A soft row's per-row value on each of its sides (zero on hard sides)."""
    S = P.sides
    return np.where(S.soft, values[np.maximum(S.srow, 0)] if values.size else 0.0, 0.0)


def side_residual(P: Problem, it: Iterate) -> FloatArray:
    """c_hat'z + s - beta - t of every side."""
    return row_values(P, it.x, it.u) - P.sides.beta - it.t + side_slack(P, it.s)


def cost_gradient(P: Problem, it: Iterate) -> tuple[FloatArray, FloatArray]:
    gx = np.einsum("kij,kj->ki", P.Hxx, it.x) + np.einsum("kji,kj->ki", P.Hux, it.u) + P.q
    gu = np.einsum("kij,kj->ki", P.Hux, it.x) + np.einsum("kij,kj->ki", P.Huu, it.u) + P.r
    return gx, gu


@dataclass
class RowTerms:
    """The sides' eliminated terms (C: @{p}row_terms): per side d, g, r; per soft row D, rho and a = sum d c_hat."""

    d: FloatArray
    g: FloatArray
    r: FloatArray
    D: FloatArray
    rho: FloatArray
    a_x: FloatArray
    a_u: FloatArray


def row_terms(P: Problem, it: Iterate, rc: FloatArray, rcs: FloatArray) -> RowTerms:
    S = P.sides
    r = side_residual(P, it)
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
    return RowTerms(d, g, r, D, rho, a_x, a_u)


def newton_blocks(P: Problem, it: Iterate, rc: FloatArray, rcs: FloatArray
           ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """The Newton system's stage blocks with the sides eliminated (C: @{p}newton_blocks with newton = 1).

    Every side adds d c_hat c_hat' and c_hat g (and the plain - lam c_hat); a soft row, its slack eliminated
    too, subtracts a a' / D and a rho / D with a = sum over its sides of d c_hat (C: @{p}_row_newton).
    """
    S = P.sides
    T = row_terms(P, it, rc, rcs)
    v = T.g - it.lam
    Hxx, Hux, Huu = P.Hxx.copy(), P.Hux.copy(), P.Huu.copy()
    gx, gu = cost_gradient(P, it)
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


def chol(M: FloatArray, strict: int, exact: bool = False) -> FloatArray:
    """Lower Cholesky factor with the C's pivot rules (the first `strict` regularised, the others may vanish).

    LAPACK's factor when every pivot keeps more than the tolerance of its diagonal (then the rules change
    nothing), else the rules one pivot at a time. ``exact``: a strict pivot that needs regularising raises
    `numpy.linalg.LinAlgError` instead (the C's chol returns 2 there).
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
            if not d > TOL_PD * djj and exact:
                raise np.linalg.LinAlgError("a pivot needs regularising")
            d = d if d > TOL_PD * djj else TOL_PD * djj
        elif not djj >= 0 and not djj >= -TOL_PD * _diagonal_bound(L, j):
            raise np.linalg.LinAlgError("not positive semi-definite")
        elif not (d > TOL_PD * djj and d > 0):
            L[j:, j] = 0.0
            continue
        L[j, j] = np.sqrt(d)
        L[j + 1:, j] = (L[j + 1:, j] - L[j + 1:, :j] @ L[j, :j]) / L[j, j]
    return np.asarray(L, dtype=float)


def _diagonal_bound(L: FloatArray, j: int) -> float:
    """As the C: a lower bound of the largest diagonal of the matrix `chol` factors, at column j (the squares of
    the pivots before it, each at most its diagonal, and the diagonal entries not yet factored)."""
    diag = np.diag(L)
    return float(max(np.max(diag[:j] ** 2, initial=0.0), np.max(diag[j:], initial=0.0)))


class Factors:
    """What the Riccati factorisation keeps for the corrector's second solve."""

    def __init__(self, N: int, nx: int, nu: int) -> None:
        self.Lri = np.zeros((N, nu, nu))  # Lr^{-1}
        self.Ls = np.zeros((N, nx, nu))
        self.K = np.zeros((N, nu, nx))  # -Lr^{-T} Ls'
        self.L = np.zeros((N, nx, nx))  # L_{k+1}: P_{k+1} = L L'
        self.p = np.zeros((N, nx))  # p_{k+1} of the last solve


def riccati(P: Problem, it: Iterate, blocks_: tuple[FloatArray, ...], F: Factors, factor: bool,
            exact: bool = False) -> tuple[FloatArray, FloatArray]:
    """Square-root Riccati solve of the Newton system's LQ problem (C: @{p}riccati).

    ``exact`` (the shortcut's system): an input pivot that needs regularising raises
    `numpy.linalg.LinAlgError` (see `chol`).
    """
    Hxx, Hux, Huu, gx, gu = blocks_
    N, nx, nu = P.N, P.nx, P.nu
    e = np.einsum("kij,kj->ki", P.A, it.x[:N]) + np.einsum("kij,kj->ki", P.B, it.u[:N]) + P.b - it.x[1:]
    if factor:
        Lq = chol(Hxx[N], 0)
        for k in range(N - 1, -1, -1):
            F.L[k] = Lq
            W = np.vstack([P.B[k].T @ Lq, P.A[k].T @ Lq])  # [B'; A'] L_{k+1}
            M = W @ W.T
            M[:nu, :nu] += Huu[k]
            M[:nu, nu:] += Hux[k]
            M[nu:, :nu] += Hux[k].T
            M[nu:, nu:] += Hxx[k]
            Lm = chol(M, nu, exact)
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


def mean_complementarity(P: Problem, it: Iterate, d: tuple[FloatArray, ...] | None = None, a_p: float = 0.0,
        a_d: float = 0.0) -> float:
    n = P.sides.stage.size + P.sides.n_soft
    if n == 0:
        return 0.0
    if d is None:
        d = (np.zeros_like(it.t), np.zeros_like(it.t), np.zeros_like(it.s), np.zeros_like(it.s))
    dt, dlam, ds, dlam_s = d
    total = np.sum((it.t + a_p * dt) * (it.lam + a_d * dlam)) + np.sum((it.s + a_p * ds) * (it.lam_s + a_d * dlam_s))
    return float(total / n)


def residuals(P: Problem, it: Iterate) -> tuple[float, float, float, float]:
    """Relative stationarity, equality, complementarity, and the multipliers' size (C: @{p}residuals)."""
    S = P.sides
    N = P.N
    gx, gu = cost_gradient(P, it)
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
    cz = row_values(P, it.x, it.u)
    re = max(re, np.abs(side_residual(P, it)).max(initial=0.0))
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
    return rs / scale, re / (1 + se), mean_complementarity(P, it) / scale, scale


def to_result(P: Problem, it: Iterate, status: int, iterations: int, residuals: tuple[float, ...]
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
