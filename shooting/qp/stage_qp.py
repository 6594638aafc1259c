"""The stage-wise QP of an optimal control problem, as numpy arrays: what the interior-point solver takes.

    minimise   sum_{k<N} 1/2 [x_k; u_k]' [Q_k S_k'; S_k R_k] [x_k; u_k] + q_k'x_k + r_k'u_k
               + 1/2 x_N'Q_N x_N + q_N'x_N + sum over soft sides of l1 s + l2 s^2
    subject to x_0 = x0,  x_{k+1} = A_k x_k + B_k u_k + b_k,
               lbu <= u_k <= ubu,  lbx - s <= x_k[idxbx] <= ubx + s (k >= 1),
               lg - s <= C_k x_k + D_k u_k <= ug + s,  lgN - s <= CN x_N <= ugN + s,  s >= 0

(s = 0 on hard sides; an infinite bound is no side). `shooting.qp.ipm` solves
it in numpy; `templates/` hold the same method as C (`shooting.controller.ocp_qp`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from shooting.options import Real

__all__ = ["OCP_QP_STATUS", "OCP_QP_TOLERANCES", "OCPQPSizes", "StageQP", "StageQPResult", "blocks",
           "hessian_scale", "shifted_result", "stage_qp_gradient_scale", "stage_qp_hard_violation",
           "stage_qp_objective", "stage_qp_stationarity", "with_input_prox", "with_prox"]

FloatArray = npt.NDArray[np.float64]

#: Return codes of the solver, as in the C.
OCP_QP_STATUS = {0: "optimal", 1: "iteration limit", 2: "infeasible", 3: "not convex (Riccati pivot)",
                 4: "non-finite data", 5: "diverged (a numerical failure: without a hard row every QP is feasible)"}

#: Stopping tolerances per real type, each relative to the size of the terms
#: its residual sums (see the C): stationarity, equalities (dynamics and
#: rows), mean complementarity. The first two sit a little above the floor
#: rounding leaves (measured on the cart-pole at N = 200: 1.5e-7 and 1.9e-7 in
#: float, 1e-14 in double). Complementarity has no such floor (it falls by
#: orders of magnitude per iteration near the end) and must go far below the
#: unit roundoff: a slack t = mu / lam of an active bound is an error of the
#: solution itself (float: 2e-3 of the input range left at 1e-11, 1e-6 at 1e-15).
OCP_QP_TOLERANCES: dict[Real, dict[str, float]] = {
    "double": {"tol_stat": 1e-10, "tol_eq": 1e-12, "tol_mu": 1e-14},
    "float": {"tol_stat": 5e-6, "tol_eq": 2e-6, "tol_mu": 1e-15},
}

@dataclass(frozen=True)
class OCPQPSizes:
    """The sizes a solver is generated for.

    Attributes
    ----------
    N, nx, nu : int
        Horizon, states, inputs (nu >= 1).
    nbx : int
        Bounded state components (the same at every stage 1..N).
    ng, ngN : int
        General rows per stage k < N, and at the terminal stage.
    nsoft : int
        Rows that may be soft (state and general rows): one slack each, shared by both sides.
    """

    N: int
    nx: int
    nu: int
    nbx: int = 0
    ng: int = 0
    ngN: int = 0

    @property
    def nsides(self) -> int:
        return 2 * self.N * (self.nu + self.nbx + self.ng) + 2 * self.ngN

    @property
    def nsoft(self) -> int:
        """Rows that may be soft (state and general rows): one slack each."""
        return self.N * (self.nbx + self.ng) + self.ngN


def blocks(value: npt.ArrayLike | None, count: int, shape: tuple[int, ...], what: str) -> FloatArray:
    """`value` as `count` blocks of `shape` (one block is repeated), float."""
    if value is None:
        return np.zeros((count, *shape))
    a = np.asarray(value, dtype=float)
    if a.ndim == 0:
        a = np.full(shape, float(a))
    if a.shape == shape:
        a = np.broadcast_to(a, (count, *shape))
    if a.shape != (count, *shape):
        raise ValueError(f"{what} must have shape {shape} or {(count, *shape)}, got {a.shape}")
    return np.array(a, dtype=float)


@dataclass
class StageQP:
    """One stage-wise QP as numpy arrays (see the module docstring; infinite bounds are absent sides).

    Parameters
    ----------
    A : ndarray, shape (N, nx, nx)
    B : ndarray, shape (N, nx, nu)
    b : ndarray, shape (N, nx)
    Q : ndarray, shape (nx, nx) or (N, nx, nx)
    R : ndarray, shape (nu, nu) or (N, nu, nu)
    Q_N : ndarray, shape (nx, nx)
    x0 : ndarray, shape (nx,)
    S : ndarray, shape (nu, nx) or (N, nu, nx), optional
    q : ndarray, shape (N+1, nx), optional
    r : ndarray, shape (N, nu), optional
    lbu, ubu : ndarray, shape (nu,) or (N, nu), optional
    idxbx : sequence of int, optional
        Bounded state components.
    lbx, ubx : ndarray, shape (nbx,) or (N, nbx), optional
        Bounds of x_1..x_N.
    soft_bx : sequence of bool, optional
    C, D, lg, ug : ndarrays, shapes (N, ng, nx), (N, ng, nu), (N, ng), (N, ng), optional
    soft_g : sequence of bool, optional
    CN, lgN, ugN : ndarrays, shapes (ngN, nx), (ngN,), (ngN,), optional
    soft_gN : sequence of bool, optional
    l1, l2 : float
        Slack weights of every soft side.
    elastic : float
        > 0: the QP is elastic (Fletcher's Sl1QP): every hard state bound, general row and terminal row is
        soft with the slack cost ``elastic * s`` (no quadratic term), so that the QP is feasible whatever its
        data; its solution is the hard QP's where that is feasible and ``elastic`` exceeds the hard rows'
        multipliers (an exact penalty). 0 (the default): they stay hard.
    """

    A: FloatArray
    B: FloatArray
    b: FloatArray
    Q: FloatArray
    R: FloatArray
    Q_N: FloatArray
    x0: FloatArray
    S: FloatArray | None = None
    q: FloatArray | None = None
    r: FloatArray | None = None
    lbu: FloatArray | None = None
    ubu: FloatArray | None = None
    idxbx: list[int] = field(default_factory=list)
    lbx: FloatArray | None = None
    ubx: FloatArray | None = None
    soft_bx: list[bool] = field(default_factory=list)
    C: FloatArray | None = None
    D: FloatArray | None = None
    lg: FloatArray | None = None
    ug: FloatArray | None = None
    soft_g: list[bool] = field(default_factory=list)
    CN: FloatArray | None = None
    lgN: FloatArray | None = None
    ugN: FloatArray | None = None
    soft_gN: list[bool] = field(default_factory=list)
    l1: float = 0.0
    l2: float = 1.0
    elastic: float = 0.0

    @property
    def sizes(self) -> OCPQPSizes:
        A = np.asarray(self.A)
        N, nx = A.shape[0], A.shape[1]
        nu = np.asarray(self.B).shape[2]
        ng = 0 if self.C is None else np.asarray(self.C).shape[1]
        ngN = 0 if self.CN is None else np.asarray(self.CN).shape[0]
        return OCPQPSizes(N, nx, nu, len(self.idxbx), ng, ngN)


@dataclass(frozen=True)
class StageQPResult:
    """One solve of `HostOCPQP`.

    Attributes
    ----------
    x : ndarray, shape (N+1, nx)
    u : ndarray, shape (N, nu)
    pi : ndarray, shape (N, nx)
        Multipliers of the dynamics (of x_{k+1} = A_k x_k + ...).
    t, lam : ndarray, shape (nsides,)
        Slacks and multipliers of every side (inputs', states', general rows').
    s, lam_s : ndarray, shape (nsoft,)
        Slack variables of the soft sides and the multipliers of s >= 0.
    status : int
    iterations : int
    residuals : tuple of float
        Stationarity, equality and complementarity at the end.
    """

    x: FloatArray
    u: FloatArray
    pi: FloatArray
    t: FloatArray
    lam: FloatArray
    s: FloatArray
    lam_s: FloatArray
    status: int
    iterations: int
    residuals: tuple[float, float, float]

    @property
    def message(self) -> str:
        return OCP_QP_STATUS.get(self.status, f"status {self.status}")


def hessian_scale(qp: StageQP) -> float:
    """The QP's largest diagonal Hessian entry: of every Q_k, R_k and Q_N (the C: ``hessian_scale``)."""
    z = qp.sizes
    Q, R = blocks(qp.Q, z.N, (z.nx, z.nx), "Q"), blocks(qp.R, z.N, (z.nu, z.nu), "R")
    diagonals = (np.diagonal(Q, axis1=1, axis2=2), np.diagonal(R, axis1=1, axis2=2), np.diag(qp.Q_N))
    return float(max(d.max(initial=0.0) for d in diagonals))


def with_input_prox(qp: StageQP, weight: float, u: FloatArray) -> StageQP:
    """The QP with weight / 2 |u_k - c_k|^2 added to every stage's cost, c = `u`: R_k + weight I and
    r_k - weight c_k (the C adds the same terms where it reads R and r: its data's ``prox``, ``prox_u``). A copy;
    `qp` is left as it is.

    Parameters
    ----------
    qp : StageQP
    weight : float
        (0: `qp` itself.)
    u : ndarray, shape (N, nu)
        The centre.
    """
    if weight == 0.0:
        return qp
    z = qp.sizes
    R = blocks(qp.R, z.N, (z.nu, z.nu), "R") + weight * np.eye(z.nu)
    r = blocks(qp.r, z.N, (z.nu,), "r") - weight * np.asarray(u, dtype=float).reshape(z.N, z.nu)
    return replace(qp, R=R, r=r)


def with_prox(qp: StageQP, weight: float, x: FloatArray, u: FloatArray) -> StageQP:
    """The QP with weight / 2 (|x_k - a_k|^2 + |u_k - c_k|^2) added: `with_input_prox`'s term on the inputs
    and the same on the free states x_1..x_N, a = `x` (Q_k + weight I, q_k - weight a_k for k >= 1, and Q_N,
    on the states' leading n components). The C adds the same terms where it reads Q and q (its data's
    ``prox_x``, ``prox_nx``). A copy; `qp` is left as it is.

    Parameters
    ----------
    qp : StageQP
    weight : float
        (0: `qp` itself.)
    x : ndarray, shape (N+1, n), n <= nx
        The states' centre (row 0, the fixed initial state, unused). n < nx: a rate penalty's QP, whose
        states are augmented with the previous inputs, which the inputs' term covers already.
    u : ndarray, shape (N, nu)
        The inputs' centre.
    """
    if weight == 0.0:
        return qp
    qp = with_input_prox(qp, weight, u)
    z = qp.sizes
    a = np.asarray(x, dtype=float)
    if a.ndim != 2 or a.shape[0] != z.N + 1 or a.shape[1] > z.nx:
        raise ValueError(f"the proximal term's state centre must have shape (N+1, n) = ({z.N + 1}, <= {z.nx}), "
                         f"got {a.shape}")
    n = a.shape[1]
    eye = np.zeros((z.nx, z.nx))
    eye[:n, :n] = weight * np.eye(n)
    Q = blocks(qp.Q, z.N, (z.nx, z.nx), "Q")
    Q[1:] += eye
    q = blocks(qp.q, z.N + 1, (z.nx,), "q")
    q[1:, :n] -= weight * a[1:]
    return replace(qp, Q=Q, q=q, Q_N=np.asarray(qp.Q_N, dtype=float) + eye)


def stage_qp_stationarity(qp: StageQP, x: FloatArray, u: FloatArray, x_qp: FloatArray, u_qp: FloatArray) -> float:
    """An SQP iterate's stationarity from the QP solved there: max|H dz| / (1 + max(|H z|, |q|)).

    The QP linearised at the iterate z = (x, u) has its solution at z + dz with multipliers lam; its own
    stationarity H (z + dz) + q + (constraint Jacobians)' lam = 0 and q = grad J(z) - H z (the QP's model keeps
    the cost's gradient at z) make grad_z L(z, lam) = -H dz exactly, whatever the Hessian H: the NLP's Lagrangian
    gradient at the iterate, here relative to the cost's gradient there (the C: ``stationarity`` in mpc.c.in).

    Parameters
    ----------
    qp : StageQP
    x, u : ndarray, shapes (N+1, nx), (N, nu)
        The iterate (the QP's states: augmented with the previous inputs under a rate penalty).
    x_qp, u_qp : ndarray, shapes (N+1, nx), (N, nu)
        The QP's solution.

    Returns
    -------
    float
    """
    z = qp.sizes
    N, nx, nu = z.N, z.nx, z.nu
    x, u = np.asarray(x, dtype=float).reshape(N + 1, nx), np.asarray(u, dtype=float).reshape(N, nu)
    dx, du = np.asarray(x_qp, dtype=float).reshape(N + 1, nx) - x, np.asarray(u_qp, dtype=float).reshape(N, nu) - u
    Q, S, R = blocks(qp.Q, N, (nx, nx), "Q"), blocks(qp.S, N, (nu, nx), "S"), blocks(qp.R, N, (nu, nu), "R")
    q, r = blocks(qp.q, N + 1, (nx,), "q"), blocks(qp.r, N, (nu,), "r")
    QN = np.asarray(qp.Q_N, dtype=float).reshape(nx, nx)

    def gradient(xs: FloatArray, us: FloatArray) -> FloatArray:
        gx = np.einsum("kij,kj->ki", Q, xs[:N]) + np.einsum("kji,kj->ki", S, us)
        gu = np.einsum("kij,kj->ki", S, xs[:N]) + np.einsum("kij,kj->ki", R, us)
        return np.concatenate([gx.ravel(), gu.ravel(), QN @ xs[N]])

    step = np.abs(gradient(dx, du)).max(initial=0.0)
    scale = max(np.abs(gradient(x, u)).max(initial=0.0), np.abs(q).max(initial=0.0), np.abs(r).max(initial=0.0))
    return float(step / (1.0 + scale))


def stage_qp_gradient_scale(qp: StageQP, x: FloatArray, u: FloatArray) -> float:
    """The largest entry of the QP objective's gradient at (x (N+1, nx), u (N, nu)): of H z + [q; r] (the cost's
    gradient there, for a QP linearised at that point)."""
    z = qp.sizes
    N, nx, nu = z.N, z.nx, z.nu
    x, u = np.asarray(x, dtype=float).reshape(N + 1, nx), np.asarray(u, dtype=float).reshape(N, nu)
    Q, S, R = blocks(qp.Q, N, (nx, nx), "Q"), blocks(qp.S, N, (nu, nx), "S"), blocks(qp.R, N, (nu, nu), "R")
    q, r = blocks(qp.q, N + 1, (nx,), "q"), blocks(qp.r, N, (nu,), "r")
    gx = np.einsum("kij,kj->ki", Q, x[:N]) + np.einsum("kji,kj->ki", S, u) + q[:N]
    gu = np.einsum("kij,kj->ki", S, x[:N]) + np.einsum("kij,kj->ki", R, u) + r
    gN = np.asarray(qp.Q_N, dtype=float).reshape(nx, nx) @ x[N] + q[N]
    return float(max(np.abs(gx).max(initial=0.0), np.abs(gu).max(initial=0.0), np.abs(gN).max(initial=0.0)))


def stage_qp_hard_violation(qp: StageQP, x: FloatArray, u: FloatArray) -> float:
    """The l1 sum of the hard state bounds', general and terminal rows' violations at (x (N+1, nx), u (N, nu)):
    what an elastic QP prices at its weight (its slacks' sum at its solution)."""
    z = qp.sizes
    N, nx, nu = z.N, z.nx, z.nu
    x, u = np.asarray(x, dtype=float).reshape(N + 1, nx), np.asarray(u, dtype=float).reshape(N, nu)
    return sum(float(excess[..., ~soft].sum()) for excess, soft in _excess(qp, x, u))


def _excess(qp: StageQP, x: FloatArray, u: FloatArray) -> list[tuple[FloatArray, npt.NDArray[np.bool_]]]:
    """Per kind of row (state bounds, general rows, terminal rows): how far (x, u) lies beyond each row's bounds
    (N, n) or (n,), and which rows are soft."""
    z = qp.sizes
    N, nx, nu = z.N, z.nx, z.nu

    def flags(soft: list[bool], n: int) -> npt.NDArray[np.bool_]:
        return np.asarray(list(soft) if soft else [False] * n, dtype=bool)

    out = []
    if z.nbx:
        idx = list(qp.idxbx)
        lbx = blocks(-np.inf if qp.lbx is None else qp.lbx, N, (z.nbx,), "lbx")
        ubx = blocks(np.inf if qp.ubx is None else qp.ubx, N, (z.nbx,), "ubx")
        v = x[1:, idx]
        out.append((np.maximum(0.0, np.maximum(lbx - v, v - ubx)), flags(qp.soft_bx, z.nbx)))
    if z.ng:
        C, D = blocks(qp.C, N, (z.ng, nx), "C"), blocks(qp.D, N, (z.ng, nu), "D")
        g = np.einsum("kij,kj->ki", C, x[:N]) + np.einsum("kij,kj->ki", D, u)
        lg, ug = blocks(qp.lg, N, (z.ng,), "lg"), blocks(qp.ug, N, (z.ng,), "ug")
        out.append((np.maximum(0.0, np.maximum(lg - g, g - ug)), flags(qp.soft_g, z.ng)))
    if z.ngN:
        gN = np.asarray(qp.CN, dtype=float).reshape(z.ngN, nx) @ x[N]
        lgN, ugN = np.asarray(qp.lgN, dtype=float), np.asarray(qp.ugN, dtype=float)
        out.append((np.maximum(0.0, np.maximum(lgN - gN, gN - ugN)), flags(qp.soft_gN, z.ngN)))
    return out


def stage_qp_objective(qp: StageQP, x: FloatArray, u: FloatArray) -> float:
    """The QP's objective at (x (N+1, nx), u (N, nu)), soft rows' penalties l1 s + l2 s^2 at their smallest slacks
    (and an elastic QP's ``elastic * s`` on its hard rows).

    (The objective the solver minimises: a line search compares it between two points.)
    """
    z = qp.sizes
    N, nx, nu = z.N, z.nx, z.nu
    x, u = np.asarray(x, dtype=float).reshape(N + 1, nx), np.asarray(u, dtype=float).reshape(N, nu)
    Q, S, R = blocks(qp.Q, N, (nx, nx), "Q"), blocks(qp.S, N, (nu, nx), "S"), blocks(qp.R, N, (nu, nu), "R")
    q, r = blocks(qp.q, N + 1, (nx,), "q"), blocks(qp.r, N, (nu,), "r")
    total = 0.5 * np.einsum("ki,kij,kj->", x[:N], Q, x[:N]) + np.einsum("ki,kij,kj->", u, S, x[:N])
    total += 0.5 * np.einsum("ki,kij,kj->", u, R, u) + np.einsum("ki,ki->", q[:N], x[:N]) + np.einsum("ki,ki->", r, u)
    QN = np.asarray(qp.Q_N, dtype=float).reshape(nx, nx)
    total += 0.5 * x[N] @ QN @ x[N] + q[N] @ x[N]

    for excess, soft in _excess(qp, x, u):
        held = excess[..., soft]
        total += qp.l1 * held.sum() + qp.l2 * (held ** 2).sum()
        if qp.elastic > 0:
            total += qp.elastic * excess[..., ~soft].sum()
    return float(total)


def shifted_result(result: StageQPResult, sizes: OCPQPSizes) -> StageQPResult:
    """`result` one stage ahead, the next sample's warm start (C: ``NAME_mpc_shift``).

    Every per-stage block of ``pi`` (N, nx), the input, state and general
    rows' slacks and multipliers and the soft rows' ``s``, ``lam_s`` moves
    from stage k+1 to k; the last stage keeps its own, the terminal rows stay.
    """
    z = sizes
    N = z.N

    def shift(v: FloatArray, first: int, width: int) -> None:
        if width:
            block = v[first:first + N * width].reshape(N, width)
            block[:-1] = block[1:].copy()

    t, lam, s_, lam_s = (np.array(v, dtype=float) for v in (result.t, result.lam, result.s, result.lam_s))
    for v in (t, lam):
        shift(v, 0, 2 * z.nu)
        shift(v, 2 * N * z.nu, 2 * z.nbx)
        shift(v, 2 * N * (z.nu + z.nbx), 2 * z.ng)
    for v in (s_, lam_s):
        shift(v, 0, z.nbx)
        shift(v, N * z.nbx, z.ng)
    pi = np.array(result.pi, dtype=float)
    pi[:-1] = pi[1:].copy()
    return StageQPResult(result.x, result.u, pi, t, lam, s_, lam_s, result.status, result.iterations,
                         result.residuals)

