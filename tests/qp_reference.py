"""An independent solution of a `StageQP`: the whole QP as one sparse problem for Clarabel (an interior-point
solver in Rust), soft sides as explicit slack variables. The reference of the stage-wise solver's tests."""

from __future__ import annotations

from dataclasses import dataclass

import clarabel
import numpy as np
import scipy.sparse as sp

from shooting.qp import StageQP


@dataclass
class Reference:
    x: np.ndarray  # (N+1, nx)
    u: np.ndarray  # (N, nu)
    cost: float
    status: str


def _rows(qp: StageQP):
    """Every inequality row as (stage, kind, c_x, c_u, lo, hi, soft) in the order the C numbers them."""
    N, nx, nu = qp.sizes.N, qp.sizes.nx, qp.sizes.nu
    rows = []

    def block(v, k, n, default):
        if v is None:
            return np.full(n, default)
        a = np.asarray(v, dtype=float)
        return a if a.ndim == 1 else a[k]

    for k in range(N):
        lo, hi = block(qp.lbu, k, nu, -np.inf), block(qp.ubu, k, nu, np.inf)
        for j in range(nu):
            cu = np.zeros(nu)
            cu[j] = 1
            rows.append((k, np.zeros(nx), cu, lo[j], hi[j], False))
    for k in range(1, N + 1):
        lo, hi = block(qp.lbx, k - 1, len(qp.idxbx), -np.inf), block(qp.ubx, k - 1, len(qp.idxbx), np.inf)
        for j, i in enumerate(qp.idxbx):
            cx = np.zeros(nx)
            cx[i] = 1
            rows.append((k, cx, np.zeros(nu), lo[j], hi[j], bool(qp.soft_bx[j]) if qp.soft_bx else False))
    if qp.C is not None:
        C, D = np.asarray(qp.C, dtype=float), np.asarray(qp.D, dtype=float)
        for k in range(N):
            for j in range(C.shape[1]):
                rows.append((k, C[k, j], D[k, j], np.asarray(qp.lg)[k, j], np.asarray(qp.ug)[k, j],
                             bool(qp.soft_g[j]) if qp.soft_g else False))
    if qp.CN is not None:
        CN = np.asarray(qp.CN, dtype=float)
        for j in range(CN.shape[0]):
            rows.append((N, CN[j], np.zeros(nu), np.asarray(qp.lgN)[j], np.asarray(qp.ugN)[j],
                         bool(qp.soft_gN[j]) if qp.soft_gN else False))
    return rows


def solve_reference(qp: StageQP) -> Reference:
    """Solve `qp` with Clarabel at tolerances near double rounding (an elastic QP: its hard rows' slacks explicit,
    each side's priced at ``qp.elastic``)."""
    N, nx, nu = qp.sizes.N, qp.sizes.nx, qp.sizes.nu
    rows = _rows(qp)
    # (an elastic QP: every hard row but the inputs' soft at the weight qp.elastic, without a quadratic term)
    elastic = [qp.elastic > 0 and not row[5] and r >= N * nu for r, row in enumerate(rows)]
    soft_sides = [(r, side) for r, row in enumerate(rows) if row[5] or elastic[r] for side in (0, 1)
                  if np.isfinite(row[3 + side])]
    nX, nU, nS = (N + 1) * nx, N * nu, len(soft_sides)
    n = nX + nU + nS

    def ix(k):
        return k * nx

    def iu(k):
        return nX + k * nu

    P = np.zeros((n, n))
    c = np.zeros(n)

    def blocks(v, k, shape):
        a = np.asarray(v, dtype=float)
        return a if a.shape == shape else a[k]

    S = np.zeros((nu, nx)) if qp.S is None else qp.S
    for k in range(N):
        Q, R, Sk = blocks(qp.Q, k, (nx, nx)), blocks(qp.R, k, (nu, nu)), blocks(S, k, (nu, nx))
        P[ix(k):ix(k) + nx, ix(k):ix(k) + nx] = Q
        P[iu(k):iu(k) + nu, iu(k):iu(k) + nu] = R
        P[iu(k):iu(k) + nu, ix(k):ix(k) + nx] = Sk
        P[ix(k):ix(k) + nx, iu(k):iu(k) + nu] = Sk.T
        if qp.q is not None:
            c[ix(k):ix(k) + nx] = qp.q[k]
        if qp.r is not None:
            c[iu(k):iu(k) + nu] = qp.r[k]
    P[ix(N):ix(N) + nx, ix(N):ix(N) + nx] = qp.Q_N
    if qp.q is not None:
        c[ix(N):ix(N) + nx] = qp.q[N]
    for m, (r, _side) in enumerate(soft_sides):
        P[nX + nU + m, nX + nU + m] = 0.0 if elastic[r] else 2 * qp.l2
        c[nX + nU + m] = qp.elastic if elastic[r] else qp.l1
    Aeq, beq = [], []
    row = np.zeros((nx, n))
    row[:, ix(0):ix(0) + nx] = np.eye(nx)
    Aeq.append(row)
    beq.append(np.asarray(qp.x0, dtype=float))
    for k in range(N):
        row = np.zeros((nx, n))
        row[:, ix(k + 1):ix(k + 1) + nx] = np.eye(nx)
        row[:, ix(k):ix(k) + nx] = -qp.A[k]
        row[:, iu(k):iu(k) + nu] = -qp.B[k]
        Aeq.append(row)
        beq.append(qp.b[k])
    G, h = [], []
    slack_of = {key: m for m, key in enumerate(soft_sides)}
    for r, (k, cx, cu, lo, hi, _soft) in enumerate(rows):
        for side, bound in ((0, lo), (1, hi)):
            if not np.isfinite(bound):
                continue
            g = np.zeros(n)
            g[ix(k):ix(k) + nx] = cx
            if k < N:
                g[iu(k):iu(k) + nu] = cu
            sign = -1.0 if side == 0 else 1.0  # lower: -c'z <= -lo ; upper: c'z <= hi
            g *= sign
            if (r, side) in slack_of:
                g[nX + nU + slack_of[(r, side)]] = -1.0
            G.append(g)
            h.append(sign * bound)
    for m in range(nS):
        g = np.zeros(n)
        g[nX + nU + m] = -1.0
        G.append(g)
        h.append(0.0)
    A_all = sp.csc_matrix(np.vstack([*Aeq, *(np.array(G).reshape(-1, n),)]))
    b_all = np.concatenate([*beq, np.array(h)])
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = settings.tol_feas = 1e-12
    settings.tol_ktratio = 1e-10
    settings.max_iter = 500
    cones = [clarabel.ZeroConeT(sum(len(v) for v in beq)), clarabel.NonnegativeConeT(len(h))]
    solution = clarabel.DefaultSolver(sp.csc_matrix(np.triu(P)), c, A_all, b_all, cones, settings).solve()
    w = np.array(solution.x)
    return Reference(w[:nX].reshape(N + 1, nx), w[nX:nX + nU].reshape(N, nu), float(solution.obj_val),
                     str(solution.status))


def random_qp(rng: np.random.Generator, N: int = 10, nx: int = 3, nu: int = 2, *, general: bool = False,
              unstable: float = 0.1) -> StageQP:
    """A random feasible stage-wise QP with bounds on every input, soft and hard state bounds, general rows."""
    A = np.stack([np.eye(nx) * (1 + unstable) + 0.1 * rng.standard_normal((nx, nx)) for _ in range(N)])
    B = 0.2 * rng.standard_normal((N, nx, nu))
    b = 0.01 * rng.standard_normal((N, nx))
    L = rng.standard_normal((nx + nu, nx + nu))
    H = L @ L.T / (nx + nu) + 0.1 * np.eye(nx + nu)
    x0 = rng.uniform(-0.5, 0.5, nx)
    kw: dict = dict(lbu=-0.5 * np.ones(nu), ubu=0.5 * np.ones(nu), idxbx=[0, nx - 1], lbx=[-0.6, -1.5],
                    ubx=[0.6, 1.5], soft_bx=[True, False], l1=5.0, l2=2.0)
    if general:
        ng = 2
        kw.update(C=0.5 * rng.standard_normal((N, ng, nx)), D=0.5 * rng.standard_normal((N, ng, nu)),
                  lg=np.full((N, ng), -0.4), ug=np.full((N, ng), 0.4), soft_g=[True, False],
                  CN=rng.standard_normal((1, nx)), lgN=[-0.3], ugN=[0.3], soft_gN=[True])
    return StageQP(A=A, B=B, b=b, Q=H[:nx, :nx], S=H[nx:, :nx], R=H[nx:, nx:], Q_N=3 * H[:nx, :nx], x0=x0,
                   q=rng.standard_normal((N + 1, nx)), r=rng.standard_normal((N, nu)), **kw)
