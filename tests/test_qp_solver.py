"""The embedded QP solver (dual active set, soft rows in the dual) against independent truth.

On thousands of QPs (random, MPC-shaped from real cart-pole linearisations,
degenerate, ill-conditioned, infeasible) the C solver, compiled for this
machine, must:

- satisfy the KKT conditions, checked here in numpy: for a strictly convex
  QP they certify the unique optimum (and a soft row's multiplier must be
  l1 + 2 l2 s while its slack s is positive, at most l1 while it is zero);
- match quadprog (Goldfarb and Idnani's dual method in Fortran, given the
  slacks as explicit variables) in the solution and the optimal value, and
  never be worse than CasADi's qrqp (which, we found, sometimes stops
  early or reports success at a point outside the bounds); on degenerate
  QPs, where quadprog can loop forever and qrqp corrupts the heap (a
  ``free(): invalid next size`` abort a few problems later), match
  Clarabel's interior-point solution instead;
- report infeasibility exactly when scipy's LP solver finds the hard
  constraints infeasible;
- in float, stay within what single precision allows of the double result.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import casadi as ca
import clarabel
import numpy as np
import pytest
import quadprog
import scipy.sparse as sp
from scipy.optimize import linprog

from shooting.codegen import toolchain
from shooting.codegen.qp import QP_STATUS, SOFT_MODE, HostQP, QPResult

# Under CI=true a missing tool fails the tests instead of skipping them.
CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
pytestmark = pytest.mark.skipif(not toolchain.have_host_compiler() and not CI, reason="needs gcc")

INF = np.inf


@dataclass
class QP:
    H: np.ndarray
    h: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    C: np.ndarray = field(default_factory=lambda: np.zeros((0, 1)))
    lo: np.ndarray = field(default_factory=lambda: np.zeros(0))
    hi: np.ndarray = field(default_factory=lambda: np.zeros(0))
    soft: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    l1: float = 0.0
    l2: float = 1.0

    def args(self) -> dict[str, object]:
        return dict(H=self.H, h=self.h, lb=self.lb, ub=self.ub, C=self.C, lo=self.lo, hi=self.hi, soft=self.soft,
                    l1=self.l1, l2=self.l2)

    def slacks(self, u: np.ndarray) -> np.ndarray:
        cu = self.C @ u
        return np.where(self.soft, np.maximum(0.0, np.maximum(cu - self.hi, self.lo - cu)), 0.0)

    def objective(self, u: np.ndarray) -> float:
        s = self.slacks(u)
        return float(0.5 * u @ self.H @ u + self.h @ u + self.l1 * s.sum() + self.l2 * s @ s)


@pytest.fixture(scope="module")
def solvers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, HostQP]:
    d = tmp_path_factory.mktemp("qp")
    return {real: HostQP(d, real, nv=64, nr=96) for real in ("double", "float")}


# ----------------------------------------------------------------------------- truth


def kkt_residuals(qp: QP, r: QPResult, slack_tol: float = 1e-8) -> dict[str, float]:
    """Scaled violations of the KKT conditions at the solver's point and multipliers.

    A soft row's slack below ``slack_tol (1 + |c'u|)`` (the primal accuracy) may belong to either mode.
    """
    u, lb_, lr = r.u, r.lam_bounds, r.lam_rows
    scale = 1.0 + np.abs(qp.H).max() * (1.0 + np.abs(u).max()) + np.abs(qp.h).max() + qp.l1
    cu = qp.C @ u
    s = qp.slacks(u)
    hard = ~qp.soft
    out = {
        "stationarity": float(np.abs(qp.H @ u + qp.h + lb_ + qp.C.T @ lr).max(initial=0.0)) / scale,
        "bounds": float(np.max(np.maximum(qp.lb - u, u - qp.ub), initial=0.0)) / (1 + np.abs(u).max()),
        "rows": float(np.max(np.maximum(qp.lo - cu, cu - qp.hi)[hard], initial=0.0)) / (1 + np.abs(cu).max(initial=0)),
    }
    # Signs and complementarity: a multiplier only on an active side, with the side's sign.
    gap_b = np.where(lb_ > 0, np.abs(u - qp.ub), np.where(lb_ < 0, np.abs(u - qp.lb), 0.0))
    gap_b = np.where(np.isfinite(gap_b), gap_b, np.where(lb_ != 0, np.inf, 0.0))
    # (relative to the sizes of the multipliers and of the constrained values)
    comp_scale = (1.0 + np.abs(np.concatenate([lb_, lr])).max(initial=0.0)) * \
        (1.0 + max(np.abs(u).max(), np.abs(cu).max(initial=0.0)))
    out["complementarity"] = float(np.max(np.abs(lb_) * gap_b, initial=0.0)) / comp_scale
    target = np.where(lr > 0, qp.hi, np.where(lr < 0, qp.lo, cu))
    gap_r = np.where(qp.soft & (s > 0), 0.0, np.abs(cu - target))
    gap_r = np.where(np.isfinite(gap_r), gap_r, np.where(lr != 0, np.inf, 0.0))
    out["complementarity"] = max(out["complementarity"], float(np.max(np.abs(lr) * gap_r, initial=0.0)) / comp_scale)
    # Soft rows: |lam| = l1 + 2 l2 s with the violated side's sign when s > 0, |lam| <= l1 when s = 0
    # (s within the solver's primal tolerance of zero may be either).
    soft_err = 0.0
    for i in np.flatnonzero(qp.soft):
        soft_err = max(soft_err, abs(lr[i]) - (qp.l1 + 2 * qp.l2 * s[i]))
        if s[i] > slack_tol * (1 + abs(cu[i])):
            sign = 1.0 if cu[i] > qp.hi[i] else -1.0
            soft_err = max(soft_err, abs(lr[i] - sign * (qp.l1 + 2 * qp.l2 * s[i])))
    out["soft"] = soft_err / scale
    return out


def qrqp_reference(qp: QP) -> tuple[bool, np.ndarray, float]:
    """CasADi's qrqp on the QP with the slacks of the soft rows as variables: (success, u, objective).

    Success requires qrqp's own flag and a point that satisfies the hard constraints.
    """
    nv, nr = qp.H.shape[0], qp.C.shape[0]
    isoft = np.flatnonzero(qp.soft)
    ns = isoft.size
    Hz = np.zeros((nv + ns, nv + ns))
    Hz[:nv, :nv] = qp.H
    Hz[nv:, nv:] = 2 * qp.l2 * np.eye(ns)
    g = np.concatenate([qp.h, qp.l1 * np.ones(ns)])
    # Row r: lo <= c'u + s (soft lower side), c'u - s <= hi (soft upper side).
    A_lo = np.hstack([qp.C, np.zeros((nr, ns))])
    A_hi = A_lo.copy()
    for k, i in enumerate(isoft):
        A_lo[i, nv + k], A_hi[i, nv + k] = 1.0, -1.0
    A = np.vstack([A_lo, A_hi])
    lba = np.concatenate([qp.lo, np.full(nr, -INF)])
    uba = np.concatenate([np.full(nr, INF), qp.hi])
    lbx = np.concatenate([qp.lb, np.zeros(ns)])
    ubx = np.concatenate([qp.ub, np.full(ns, INF)])
    dense_a = ca.DM(np.ones_like(A) if A.size else A).sparsity()
    solver = ca.conic("ref", "qrqp", {"h": ca.DM(Hz).sparsity(), "a": dense_a},
                      {"print_iter": False, "print_header": False, "print_info": False, "error_on_fail": False,
                       "max_iter": 2000})
    res = solver(h=Hz, g=g, a=A, lba=lba, uba=uba, lbx=lbx, ubx=ubx)
    u = np.array(res["x"]).ravel()[:nv]
    # qrqp occasionally reports success at a point outside the bounds: such an answer is no reference.
    cu = qp.C @ u
    tol = 1e-9 * (1 + np.abs(u).max())
    feasible = bool(np.all(u >= qp.lb - tol) and np.all(u <= qp.ub + tol)
                    and np.all((cu >= qp.lo - tol) | qp.soft) and np.all((cu <= qp.hi + tol) | qp.soft))
    return bool(solver.stats()["success"]) and feasible, u, qp.objective(u)


def quadprog_reference(qp: QP) -> np.ndarray | None:
    """quadprog's optimum (None when it finds the constraints inconsistent); slacks as explicit variables."""
    nv = qp.H.shape[0]
    isoft = np.flatnonzero(qp.soft)
    ns = isoft.size
    G = np.zeros((nv + ns, nv + ns))
    G[:nv, :nv] = qp.H
    G[nv:, nv:] = 2 * qp.l2 * np.eye(ns)
    a = -np.concatenate([qp.h, qp.l1 * np.ones(ns)])
    eq_rows: list[np.ndarray] = []
    eq_rhs: list[float] = []
    rows, rhs = [], []  # each row r: r'z >= rhs

    def add(coef_u: np.ndarray, coef_s: np.ndarray, bound: float) -> None:
        if np.isfinite(bound):
            rows.append(np.concatenate([coef_u, coef_s]))
            rhs.append(bound)

    zs = np.zeros(ns)
    for i in range(nv):
        e = np.eye(nv)[i]
        if qp.lb[i] == qp.ub[i]:  # a fixed variable: one equality (quadprog's meq)
            eq_rows.append(np.concatenate([e, zs]))
            eq_rhs.append(qp.lb[i])
            continue
        add(e, zs, qp.lb[i])
        add(-e, zs, -qp.ub[i])
    for r in range(qp.C.shape[0]):
        es = np.zeros(ns)
        if qp.soft[r]:
            es[list(isoft).index(r)] = 1.0
        add(qp.C[r], es, qp.lo[r])
        add(-qp.C[r], es, -qp.hi[r])
    for k in range(ns):
        add(np.zeros(nv), np.eye(ns)[k], 0.0)
    rows, rhs = eq_rows + rows, eq_rhs + rhs
    Cm = np.array(rows).T if rows else np.zeros((nv + ns, 0))
    try:
        z = quadprog.solve_qp(G, a, Cm, np.array(rhs), len(eq_rows))[0]
    except ValueError:
        return None
    return np.asarray(z[:nv])


def clarabel_reference(qp: QP) -> np.ndarray | None:
    """Clarabel's optimum (interior point, tolerance 1e-10), slacks as explicit variables; None unless solved."""
    nv = qp.H.shape[0]
    isoft = np.flatnonzero(qp.soft)
    ns = isoft.size
    P = np.zeros((nv + ns, nv + ns))
    P[:nv, :nv] = qp.H
    P[nv:, nv:] = 2 * qp.l2 * np.eye(ns)
    q = np.concatenate([qp.h, qp.l1 * np.ones(ns)])
    rows, rhs = [], []  # row'z <= rhs

    def add(coef: np.ndarray, bound: float) -> None:
        if np.isfinite(bound):
            rows.append(coef)
            rhs.append(bound)

    for i in range(nv):
        e = np.zeros(nv + ns)
        e[i] = 1.0
        add(e, qp.ub[i])
        add(-e, -qp.lb[i])
    for r in range(qp.C.shape[0]):
        c = np.concatenate([qp.C[r], np.zeros(ns)])
        if qp.soft[r]:
            c_lo = c.copy()
            c_lo[nv + list(isoft).index(r)] = 1.0
            c[nv + list(isoft).index(r)] = -1.0
            add(-c_lo, -qp.lo[r])
        else:
            add(-c, -qp.lo[r])
        add(c, qp.hi[r])
    for k in range(ns):
        e = np.zeros(nv + ns)
        e[nv + k] = -1.0
        add(e, 0.0)
    A = np.array(rows) if rows else np.zeros((0, nv + ns))
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = settings.tol_feas = 1e-10
    solver = clarabel.DefaultSolver(sp.csc_matrix(np.triu(P)), q, sp.csc_matrix(A), np.array(rhs),
                                    [clarabel.NonnegativeConeT(len(rows))], settings)
    sol = solver.solve()
    if str(sol.status) not in ("Solved", "AlmostSolved"):
        return None
    return np.asarray(sol.x[:nv])


def feasible_hard(qp: QP) -> bool:
    """Whether the hard constraints admit a point (scipy's HiGHS LP, independent of both QP solvers)."""
    hard = ~qp.soft
    Ch = qp.C[hard]
    A_ub = np.vstack([Ch[np.isfinite(qp.hi[hard])], -Ch[np.isfinite(qp.lo[hard])]])
    b_ub = np.concatenate([qp.hi[hard][np.isfinite(qp.hi[hard])], -qp.lo[hard][np.isfinite(qp.lo[hard])]])
    bounds = [(a if np.isfinite(a) else None, b if np.isfinite(b) else None)
              for a, b in zip(qp.lb, qp.ub, strict=True)]
    res = linprog(np.zeros(qp.H.shape[0]), A_ub=A_ub if A_ub.size else None, b_ub=b_ub if A_ub.size else None,
                  bounds=bounds, method="highs")
    return bool(res.status == 0)


# ----------------------------------------------------------------------------- generators


def spd(rng: np.random.Generator, n: int, cond: float) -> np.ndarray:
    Qm, _ = np.linalg.qr(rng.normal(size=(n, n)))
    return (Qm * np.geomspace(1.0, 1.0 / cond, n)) @ Qm.T * rng.uniform(0.5, 5.0)


def random_qp(rng: np.random.Generator, cond: float = 1e2, soft_share: float = 0.3) -> QP:
    nv, nr = int(rng.integers(1, 13)), int(rng.integers(0, 11))
    H = spd(rng, nv, cond)
    h = rng.normal(size=nv) * rng.choice([0.1, 1.0, 10.0])
    uf = rng.normal(size=nv)  # a point inside every hard constraint
    lb = np.where(rng.random(nv) < 0.7, uf - rng.exponential(1.0, nv), -INF)
    ub = np.where(rng.random(nv) < 0.7, uf + rng.exponential(1.0, nv), INF)
    C = rng.normal(size=(nr, nv))
    cu = C @ uf
    lo = np.where(rng.random(nr) < 0.6, cu - rng.exponential(0.5, nr), -INF)
    hi = np.where(rng.random(nr) < 0.6, cu + rng.exponential(0.5, nr), INF)
    soft = rng.random(nr) < soft_share
    # Soft rows may exclude the point: shift some of them past it.
    shift = np.where(soft & (rng.random(nr) < 0.5), rng.exponential(1.0, nr), 0.0)
    return QP(H, h, lb, ub, C, lo + shift, hi + shift, soft, float(rng.choice([0.0, 0.5, 10.0])),
              float(rng.choice([0.1, 1.0, 100.0])))


def degenerate_qp(rng: np.random.Generator) -> QP:
    qp = random_qp(rng, soft_share=0.2)
    nv, nr = qp.H.shape[0], qp.C.shape[0]
    kind = rng.integers(0, 4)
    if kind == 0 and nv:  # fixed variables lb == ub
        fix = rng.random(nv) < 0.4
        mid = np.where(np.isfinite(qp.lb), qp.lb, np.where(np.isfinite(qp.ub), qp.ub, 0.0))
        qp.lb, qp.ub = np.where(fix, mid, qp.lb), np.where(fix, mid, qp.ub)
    elif kind == 1 and nr:  # duplicated and scaled-duplicate rows
        pick = rng.integers(0, nr, size=3)
        scale = rng.choice([1.0, 2.0, -1.0], size=3)[:, None]
        newC = qp.C[pick] * scale
        lo, hi = qp.lo[pick].copy(), qp.hi[pick].copy()
        lo2 = np.where(scale[:, 0] > 0, lo * scale[:, 0], hi * scale[:, 0])
        hi2 = np.where(scale[:, 0] > 0, hi * scale[:, 0], lo * scale[:, 0])
        qp.C = np.vstack([qp.C, newC])
        qp.lo, qp.hi = np.concatenate([qp.lo, lo2]), np.concatenate([qp.hi, hi2])
        qp.soft = np.concatenate([qp.soft, qp.soft[pick]])
    elif kind == 2:  # more rows through one vertex than variables, all pulling the optimum there
        vertex = rng.normal(size=nv)
        C = rng.normal(size=(nv + 3, nv))
        qp = QP(qp.H, -qp.H @ vertex + 5 * C.T @ np.abs(rng.normal(size=nv + 3)) * 0 + 10 * C.sum(axis=0) * 0,
                np.full(nv, -INF), np.full(nv, INF), C, np.full(nv + 3, -INF), C @ vertex,
                np.zeros(nv + 3, dtype=bool))
        qp.h = -qp.H @ (vertex + rng.normal(size=nv))
    else:  # unconstrained optimum exactly on bounds and rows (weakly active, zero multipliers)
        ustar = -np.linalg.solve(qp.H, qp.h)
        on = rng.random(nv) < 0.5
        qp.ub = np.where(on, ustar, qp.ub)
        qp.lb = np.minimum(qp.lb, qp.ub)
        if nr:
            qp.hi[0], qp.lo[0] = qp.C[0] @ ustar, -INF
    return qp


def infeasible_qp(rng: np.random.Generator) -> QP:
    nv = int(rng.integers(1, 9))
    qp = QP(spd(rng, nv, 10.0), rng.normal(size=nv), np.zeros(nv), np.ones(nv))
    c = np.abs(rng.normal(size=(1, nv))) + 0.1
    extra = rng.normal(size=(2, nv))
    qp.C = np.vstack([c, extra])
    qp.lo = np.array([c.sum() + rng.uniform(0.01, 1.0), -INF, -INF])  # c'u >= more than c'1: impossible in [0,1]^n
    qp.hi = np.array([INF, INF, INF])
    qp.soft = np.zeros(3, dtype=bool)
    return qp


def mpc_qps(rng: np.random.Generator, count: int) -> Iterator[QP]:
    """Condensed QPs of the cart-pole RTI (N = 10, |F| <= 80, soft |p| <= 0.5) at random linearisation points."""
    import shooting

    model = shooting.load_model("cartpole")
    F = shooting.build_integrator(model, "rk4", 1)
    N, nx, nu = 10, 4, 1
    Q, R = np.diag([1e3, 1e3, 1e-2, 1e-2]), np.diag([1e-2])
    for _ in range(count):
        xb = np.array([0.0, np.pi, 0.0, 0.0]) + rng.normal(size=nx) * [0.3, 1.0, 1.0, 2.0]
        ub_ = rng.uniform(-80, 80, size=N)
        As, Bs, cs, x = [], [], [], xb
        for k in range(N):
            xn, A, B = (np.array(v) for v in F(x, ub_[k], [], 0.0, 0.05))
            As.append(A), Bs.append(B), cs.append(xn.ravel() - A @ x - B @ [ub_[k]])
            x = xn.ravel()
        # x_k = Phi_k x0 + sum_j G_kj u_j + e_k (condensing by forward simulation of the linear model)
        G = np.zeros((N + 1, nx, N * nu))
        Phi, e = [np.eye(nx)], [np.zeros(nx)]
        for k in range(N):
            G[k + 1] = As[k] @ G[k]
            G[k + 1][:, k] = Bs[k].ravel()
            Phi.append(As[k] @ Phi[k])
            e.append(As[k] @ e[k] + cs[k])
        x0 = xb + rng.normal(size=nx) * 0.1
        H = 2 * R[0, 0] * np.eye(N)
        h = np.zeros(N)
        for k in range(1, N + 1):
            H += 2 * G[k].T @ Q @ G[k]
            h += 2 * G[k].T @ Q @ (Phi[k] @ x0 + e[k])
        C = np.array([G[k][0] for k in range(1, N + 1)])
        off = np.array([(Phi[k] @ x0 + e[k])[0] for k in range(1, N + 1)])
        yield QP(H, h, np.full(N, -80.0), np.full(N, 80.0), C, -0.5 - off, 0.5 - off, np.ones(N, dtype=bool),
                 1e3, 1e2)


# ----------------------------------------------------------------------------- tests

# The solver stops when no row is violated by more than 1e-9 (1 + |bound|) (double): KKT residuals,
# scaled by the problem's size, are then below ~1e-9; 1e-8 leaves a factor ten.
KKT_TOL = 1e-8


def _check_against_truth(solver: HostQP, qp: QP, tol: float, degenerate: bool = False) -> QPResult:
    r = solver.solve(**qp.args())  # type: ignore[arg-type]
    assert r.status == 0, f"{r.message} after {r.iterations} iterations"
    worst = kkt_residuals(qp, r)
    assert max(worst.values()) <= tol, worst
    f = qp.objective(r.u)
    if degenerate:
        u_cl = clarabel_reference(qp)
        assert u_cl is not None
        f_cl = qp.objective(u_cl)
        # An interior point's optimum is feasible and optimal to ~1e-10 relative: ours may only be better.
        assert f <= f_cl + 1e-8 * (1 + abs(f_cl)), (f, f_cl)
        np.testing.assert_allclose(r.u, u_cl, atol=1e-4 * (1 + np.abs(u_cl).max()))
        return r
    ok, _, f_qrqp = qrqp_reference(qp)
    if ok:
        assert f <= f_qrqp + tol * (1 + abs(f_qrqp)), (f, f_qrqp)
    u_ref = quadprog_reference(qp)
    assert u_ref is not None
    # Strictly convex: the optimum is unique. Two backward-stable solvers differ by ~cond(H) u |u|.
    cond = np.linalg.cond(qp.H)
    np.testing.assert_allclose(r.u, u_ref, atol=1e-14 * cond * 100 * (1 + np.abs(u_ref).max()) + 1e-9)
    f_ref = qp.objective(u_ref)
    assert f <= f_ref + tol * (1 + abs(f_ref)), (f, f_ref)
    return r


def test_random_qps_satisfy_kkt_and_match_the_references(solvers: dict[str, HostQP]) -> None:
    rng = np.random.default_rng(1)
    iterations = []
    for _ in range(1500):
        iterations.append(_check_against_truth(solvers["double"], random_qp(rng), KKT_TOL).iterations)
    assert max(iterations) < 60


def test_mpc_shaped_qps_match_the_references(solvers: dict[str, HostQP]) -> None:
    rng = np.random.default_rng(2)
    for qp in mpc_qps(rng, 300):
        _check_against_truth(solvers["double"], qp, KKT_TOL)


def test_degenerate_qps(solvers: dict[str, HostQP]) -> None:
    rng = np.random.default_rng(3)
    for _ in range(800):
        qp = degenerate_qp(rng)
        if not feasible_hard(qp):
            continue
        _check_against_truth(solvers["double"], qp, KKT_TOL, degenerate=True)


@pytest.mark.parametrize("cond", [1e5, 1e8])
def test_ill_conditioned_qps(solvers: dict[str, HostQP], cond: float) -> None:
    rng = np.random.default_rng(4)
    for _ in range(200):
        qp = random_qp(rng, cond=cond)
        r = solvers["double"].solve(**qp.args())  # type: ignore[arg-type]
        assert r.status == 0, r.message
        # The primal error of a backward-stable solve grows like cond * eps * |u|; the residuals feel it
        # through H (stationarity) and through 2 l2 (a soft row's multiplier l1 + 2 l2 s).
        accuracy = 1e-16 * cond * 100
        assert max(kkt_residuals(qp, r, slack_tol=accuracy).values()) <= accuracy * (1 + 2 * qp.l2)


def test_infeasible_qps_are_reported_exactly_when_the_lp_says_so(solvers: dict[str, HostQP]) -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        qp = infeasible_qp(rng)
        assert not feasible_hard(qp)
        r = solvers["double"].solve(**qp.args())  # type: ignore[arg-type]
        assert QP_STATUS[r.status] == "infeasible"
        # The same rows made soft: always solvable, and optimal.
        qp.soft[:] = True
        qp.l1, qp.l2 = 1.0, 1.0
        _check_against_truth(solvers["double"], qp, KKT_TOL)


def test_warm_start_gives_the_same_optimum_in_fewer_iterations(solvers: dict[str, HostQP]) -> None:
    rng = np.random.default_rng(6)
    saved = total = 0
    for qp in mpc_qps(rng, 100):
        cold = solvers["double"].solve(**qp.args())  # type: ignore[arg-type]
        # A slightly different QP (the next sample) started from this working set.
        qp.h = qp.h * (1 + 0.01 * rng.normal(size=qp.h.size))
        ref = solvers["double"].solve(**qp.args())  # type: ignore[arg-type]
        warm = solvers["double"].solve(**qp.args(), warm=cold.working_set)  # type: ignore[arg-type]
        assert warm.status == 0
        np.testing.assert_allclose(warm.u, ref.u, atol=1e-9 * (1 + np.abs(ref.u).max()))
        saved += ref.iterations - warm.iterations
        total += ref.iterations
    assert saved > 0.3 * total


def active_kkt_condition(qp: QP, r: QPResult) -> float:
    """Condition number of the KKT matrix [[H, A_W'], [A_W, -D_W]] of the final working set."""
    nv = qp.H.shape[0]
    rows, diag = [], []
    for entry in r.working_set:
        a = entry & ~SOFT_MODE
        i = a >> 1
        normal = np.eye(nv)[i] if i < nv else qp.C[i - nv]
        rows.append(-normal if a & 1 else normal)
        diag.append(1 / (2 * qp.l2) if entry & SOFT_MODE else 0.0)
    A = np.array(rows).reshape(-1, nv)
    K = np.block([[qp.H, A.T], [A, -np.diag(diag)]])
    return float(np.linalg.cond(K))


def test_float_build_is_single_precision_accurate(solvers: dict[str, HostQP]) -> None:
    rng = np.random.default_rng(7)
    for _ in range(500):
        qp = random_qp(rng, cond=10.0)
        ref = solvers["double"].solve(**qp.args())  # type: ignore[arg-type]
        got = solvers["float"].solve(**qp.args())  # type: ignore[arg-type]
        assert got.status == 0, got.message
        # A backward-stable solve in float errs by ~cond(active KKT) * 6e-8 relative to the sizes it
        # handles, which in the least-distance form include the unconstrained minimiser -H^{-1}h; allow 10x.
        u_unc = np.linalg.solve(qp.H, qp.h)
        scale = 1 + np.abs(ref.u).max() + np.abs(u_unc).max() + np.abs(ref.lam_bounds).max() + \
            np.abs(ref.lam_rows).max(initial=0)
        assert np.abs(got.u - ref.u).max() <= 10 * active_kkt_condition(qp, ref) * 6e-8 * scale


def test_iteration_limit_and_non_convex_are_reported(solvers: dict[str, HostQP]) -> None:
    rng = np.random.default_rng(8)
    qp = next(mpc_qps(rng, 1))
    r = solvers["double"].solve(**qp.args(), max_iter=1)  # type: ignore[arg-type]
    assert QP_STATUS[r.status] == "iteration limit"
    bad = QP(np.diag([1.0, -1.0]), np.zeros(2), -np.ones(2), np.ones(2))
    assert QP_STATUS[solvers["double"].solve(**bad.args()).status] == "Hessian not positive definite"  # type: ignore[arg-type]
    nan = QP(np.eye(2), np.array([np.nan, 0.0]), -np.ones(2), np.ones(2))
    assert QP_STATUS[solvers["double"].solve(**nan.args()).status] == "non-finite data"  # type: ignore[arg-type]
