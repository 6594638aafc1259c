"""The real-time iteration's QP kept in stages: the `StageQP` of one sample, as the exported C builds it.

Around a guess (xb, ub) the dynamics become x_{k+1} = A_k x_k + B_k u_k + b_k
with the integrator's exact A, B and b_k = F(xb_k, ub_k) - A_k xb_k - B_k ub_k.
The OCP's cost in the QP's form 1/2 z'Hz + g'z per stage (no factor 1/2 in the
OCP: H = 2 Q, g = -2 Q x_ref):

    stage k < N:  Hxx = 2 Q,  Huu = 2 R,  q_k = -2 Q xr_k,  r_k = -2 R ur_k
    stage N:      Hxx = 2 Qf, q_N = -2 Qf xr_N

plus, for ``stage_cost``/``terminal_cost``, their second-order expansion at
the guess (exact Hessian and gradient: q += grad - H zb). The rate penalty
sum_k (u_k - u_{k-1})' Rd (u_k - u_{k-1}) couples stages; the state is
augmented with the previous input, x~_k = [x_k; u_{k-1}], so that it becomes
a stage cost: x~_{k+1} = [A x + B u + b; u], Hxx += blkdiag(0, 2 Rd),
Hux = [0, -2 Rd], Huu += 2 Rd, x~_0 = [x0; u_prev]. State bounds are soft
(one slack per side, l1 s + l2 s^2) or hard; input bounds hard.

Path constraints h(x, u, p) <= 0 become general rows linearised at the guess
with their exact Jacobians, C_k x + D_k u <= C_k xb + D_k ub - h(xb, ub)
(soft with `soft_path_constraints`, one slack per row); terminal constraints
c(x_N, p) = 0 the terminal rows C_N x_N = C_N xb_N - c(xb_N) (hard: both sides).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting.integrate.integrator import HOST_UNROLL_STEPS, build_integrator
from shooting.mpc.costs import convexify, expansion
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.mpc.sqp import SQPStep, qp_tolerances
from shooting.qp import OCP_QP_TOLERANCES, StageQP, StageQPResult, solve_stage_qp, stage_qp_objective

__all__ = ["StageQPBuilder", "constraint_functions", "cost_expansions", "cost_values", "hard_multiplier",
           "nonfinite_where"]

FloatArray = npt.NDArray[np.float64]


@dataclass
class _Data:
    """One sample's QP data except the measured state."""

    qp: StageQP
    rate: bool


class StageQPBuilder:
    """Builds the `StageQP` of one RTI sample of an OCP (quadratic tracking cost, bounds, extra costs).

    Parameters
    ----------
    ocp : MultipleShootingOCP

    Attributes
    ----------
    linearise : casadi.Function
        ``(xb (nx, N), ub (nu, N), p (np, N), t0) -> (x_next (nx, N), A (nx, N nx), B (nx, N nu))``: every
        stage's discrete step and its sensitivities at the linearisation point, one mapped call.
    """

    def __init__(self, ocp: MultipleShootingOCP) -> None:
        self.ocp = ocp
        N, nx, nu, npar = ocp.horizon, ocp.nx, ocp.nu, ocp.np
        F = build_integrator(ocp.model, ocp.method, ocp.steps, "forward", unroll=HOST_UNROLL_STEPS,
                             name=f"{ocp.model.name}_rti_step")
        Xb, Ub = ca.MX.sym("xb", nx, N), ca.MX.sym("ub", nu, N)
        Pm, t0 = ca.MX.sym("p", npar, N), ca.MX.sym("t0")
        # (algebraic states: Newton on g from the model's z0, as in the OCP)
        z_guess = [ca.repmat(ca.DM(ocp.model.z0), 1, N)] if ocp.model.nz else []
        Fn, A, B = F.map(N).call([Xb, Ub, Pm, t0 + ca.DM(np.arange(N) * ocp.dt).T, ocp.dt, *z_guess])[:3]
        self.linearise = ca.Function("rti_linearise", [Xb, Ub, Pm, t0], [Fn, A, B], ["xb", "ub", "p", "t0"],
                                      ["x_next", "A", "B"])
        self._extra = self._extra_cost_functions()
        self._path, self._terminal = constraint_functions(ocp)
        self.rate = bool(ocp.R_delta.any())
        self.bounded = np.flatnonzero(np.isfinite(ocp.x_min) | np.isfinite(ocp.x_max))

    def _extra_cost_functions(self) -> tuple[ca.Function | None, ca.Function | None]:
        """(stage, terminal): (x, u, p) -> (Hxx, Hux, Huu, gx, gu) and (x, p) -> (Hxx, gx) of the extra costs
        (`shooting.mpc.costs.expansion`: Gauss-Newton for a `LeastSquares`, else the exact Hessian)."""
        return cost_expansions(self.ocp)

    def constraint_rows(self, xb: FloatArray, ub: FloatArray, p: FloatArray) -> dict[str, Any]:
        """The QP's general rows at the guess: ``C``, ``D``, ``lg``, ``ug`` (N stages) and ``CN``, ``lgN``,
        ``ugN``, with their soft flags (empty dict without path and terminal constraints)."""
        ocp = self.ocp
        N, nx, nu = ocp.horizon, ocp.nx, ocp.nu
        kw: dict[str, Any] = {}
        if self._path is not None:
            h, Hx, Hu = (np.array(v, dtype=float) for v in self._path.map(N)(xb[:N].T, ub.T, p.T))
            nh = h.shape[0]
            C = Hx.reshape(nh, N, nx).transpose(1, 0, 2)
            D = Hu.reshape(nh, N, nu).transpose(1, 0, 2)
            ug = -h.T + np.einsum("kij,kj->ki", C, xb[:N]) + np.einsum("kij,kj->ki", D, ub)
            kw.update(C=C, D=D, lg=np.full((N, nh), -np.inf), ug=ug,
                      soft_g=[bool(ocp.soft_path_constraints)] * nh)
        if self._terminal is not None:
            c, Cx = (np.array(v, dtype=float) for v in self._terminal(xb[N], p[N - 1]))
            rhs = -c.ravel() + Cx @ xb[N]
            kw.update(CN=Cx, lgN=rhs, ugN=rhs.copy(), soft_gN=[False] * rhs.size)
        return kw

    def path_violations(self, x: FloatArray, u: FloatArray, p: FloatArray) -> tuple[FloatArray, FloatArray]:
        """max(0, h(x_k, u_k)) per stage and row (N, nh) and |c(x_N)| (nc,) of a trajectory (empty without)."""
        N = self.ocp.horizon
        h = np.zeros((N, 0)) if self._path is None else \
            np.maximum(0.0, np.array(self._path.map(N)(x[:N].T, u.T, p.T)[0], dtype=float).T)
        c = np.zeros(0) if self._terminal is None else \
            np.abs(np.array(self._terminal(x[N], p[N - 1])[0], dtype=float).ravel())
        return h, c

    def build(self, xb: FloatArray, ub: FloatArray, x_ref: FloatArray, u_ref: FloatArray, p: FloatArray,
              t0: float, u_prev: FloatArray) -> StageQP:
        """The QP of one sample around the guess (xb (N+1, nx), ub (N, nu)); its x0 is set by `with_state`.

        Parameters
        ----------
        x_ref : ndarray, shape (N+1, nx)
        u_ref : ndarray, shape (N, nu)
        p : ndarray, shape (N, np)
            Model parameters per interval.
        t0 : float
        u_prev : ndarray, shape (nu,)

        Returns
        -------
        StageQP
        """
        ocp = self.ocp
        N, nx, nu = ocp.horizon, ocp.nx, ocp.nu
        Fn, A, B = (np.array(v, dtype=float) for v in self.linearise(xb[:N].T, ub.T, p.T, t0))
        A = A.reshape(nx, N, nx).transpose(1, 0, 2)
        B = B.reshape(nx, N, nu).transpose(1, 0, 2)
        b = Fn.T - np.einsum("kij,kj->ki", A, xb[:N]) - np.einsum("kij,kj->ki", B, ub)
        Q2, R2, Qf2 = 2 * ocp.Q, 2 * ocp.R, 2 * ocp.Q_terminal
        Hxx = np.concatenate([np.broadcast_to(Q2, (N, nx, nx)), Qf2[None]]).copy()
        Hux = np.zeros((N, nu, nx))
        Huu = np.broadcast_to(R2, (N, nu, nu)).copy()
        q = -np.einsum("kij,kj->ki", Hxx, x_ref)
        r = -np.einsum("ij,kj->ki", R2, u_ref)
        stage, terminal = self._extra
        if stage is not None:
            # Second-order model at the guess, c(z) ~ c(zb) + g'(z - zb) + 1/2 (z - zb)' H (z - zb), the
            # stage's whole block made positive definite (costs.convexify) and the gradient kept exact.
            hxx, hux, huu, gx, gu = (np.array(v, dtype=float) for v in stage.map(N)(xb[:N].T, ub.T, p.T))
            hxx = hxx.reshape(nx, N, nx).transpose(1, 0, 2)
            hux = hux.reshape(nu, N, nx).transpose(1, 0, 2)
            huu = huu.reshape(nu, N, nu).transpose(1, 0, 2)
            for k in range(N):
                M = np.block([[Hxx[k] + hxx[k], (Hux[k] + hux[k]).T], [Hux[k] + hux[k], Huu[k] + huu[k]]])
                M, delta = convexify(M)
                zb = np.concatenate([xb[k], ub[k]])
                dH = M - np.block([[Hxx[k], Hux[k].T], [Hux[k], Huu[k]]])  # the cost's part, shifted
                grad = np.concatenate([gx[:, k], gu[:, k]]) - dH @ zb
                Hxx[k], Hux[k], Huu[k] = M[:nx, :nx], M[nx:, :nx], M[nx:, nx:]
                q[k] += grad[:nx]
                r[k] += grad[nx:]
        if terminal is not None:
            hN, gN = (np.array(v, dtype=float) for v in terminal(xb[N], p[N - 1]))
            M, delta = convexify(Hxx[N] + hN)
            q[N] += gN.ravel() - (M - Hxx[N]) @ xb[N]
            Hxx[N] = M
        soft = bool(ocp.soft_x_bounds)
        slacks = soft or (self._path is not None and bool(ocp.soft_path_constraints))
        kw: dict[str, Any] = dict(lbu=ocp.u_min, ubu=ocp.u_max, idxbx=[int(i) for i in self.bounded],
                  lbx=ocp.x_min[self.bounded], ubx=ocp.x_max[self.bounded], soft_bx=[soft] * self.bounded.size,
                  l1=float(ocp.slack_l1) if slacks else 0.0, l2=float(ocp.slack_l2) if slacks else 1.0)
        kw.update(self.constraint_rows(xb, ub, p))
        if not self.rate:
            return StageQP(A=A, B=B, b=b, Q=Hxx[:N], S=Hux, R=Huu, Q_N=Hxx[N], q=q, r=r, x0=np.zeros(nx), **kw)
        return self._augmented(A, B, b, Hxx, Hux, Huu, q, r, kw)

    def _augmented(self, A: FloatArray, B: FloatArray, b: FloatArray, Hxx: FloatArray, Hux: FloatArray,
                   Huu: FloatArray, q: FloatArray, r: FloatArray, kw: dict[str, Any]) -> StageQP:
        """The rate penalty as a stage cost on x~ = [x; u_prev] (module docstring)."""
        ocp = self.ocp
        N, nx, nu = ocp.horizon, ocp.nx, ocp.nu
        Rd2 = 2 * ocp.R_delta
        n = nx + nu
        Aa = np.zeros((N, n, n))
        Aa[:, :nx, :nx] = A
        Ba = np.concatenate([B, np.broadcast_to(np.eye(nu), (N, nu, nu))], axis=1)
        ba = np.concatenate([b, np.zeros((N, nu))], axis=1)
        Ha = np.zeros((N + 1, n, n))
        Ha[:, :nx, :nx] = Hxx
        Ha[:N, nx:, nx:] = Rd2
        Hua = np.concatenate([Hux, np.broadcast_to(-Rd2, (N, nu, nu))], axis=2)
        qa = np.concatenate([q, np.zeros((N + 1, nu))], axis=1)
        if "C" in kw:
            kw["C"] = np.concatenate([kw["C"], np.zeros((N, kw["C"].shape[1], nu))], axis=2)
        if "CN" in kw:
            kw["CN"] = np.concatenate([kw["CN"], np.zeros((kw["CN"].shape[0], nu))], axis=1)
        return StageQP(A=Aa, B=Ba, b=ba, Q=Ha[:N], S=Hua, R=Huu + Rd2, Q_N=Ha[N], q=qa, r=r, x0=np.zeros(n),
                       **kw)

    def with_state(self, qp: StageQP, x0: FloatArray, u_prev: FloatArray) -> StageQP:
        """`qp` for the measured state (and, with the rate penalty, the previous input)."""
        qp.x0 = np.concatenate([x0, u_prev]) if self.rate else np.asarray(x0, dtype=float).copy()
        return qp

    def guess(self, xb: FloatArray, ub: FloatArray, u_prev: FloatArray) -> FloatArray:
        """The QP's state guess: the trajectory's (augmented with the previous inputs under a rate penalty)."""
        if not self.rate:
            return xb
        prev = np.vstack([u_prev[None], ub])
        return np.hstack([xb, prev])

    def defects(self, x: FloatArray, u: FloatArray, p: FloatArray, t0: float) -> FloatArray:
        """A trajectory's violations: x_{k+1} - F(x_k, u_k) (N nx entries), then by how much it exceeds the
        hard bounds (the inputs', and the states' unless soft), the hard path constraints' max(0, h) and the
        terminal constraints' |c|, flat."""
        ocp = self.ocp
        N = ocp.horizon
        Fn = np.array(self.linearise(x[:N].T, u.T, p.T, t0)[0], dtype=float)
        parts = [np.ravel(x[1:] - Fn.T), np.maximum(0.0, np.maximum(ocp.u_min - u, u - ocp.u_max)).ravel()]
        if not ocp.soft_x_bounds:
            parts.append(np.maximum(0.0, np.maximum(ocp.x_min - x[1:], x[1:] - ocp.x_max)).ravel())
        h, c = self.path_violations(x, u, p)
        if not ocp.soft_path_constraints:
            parts.append(h.ravel())
        parts.append(c)
        return np.concatenate(parts)

    def sqp_step(self, x: FloatArray, u: FloatArray, x_ref: FloatArray, u_ref: FloatArray, p: FloatArray,
                 t0: float, u_prev: FloatArray, last: StageQPResult | None = None,
                 loose: bool = False) -> SQPStep:
        """One SQP iteration's QP: linearise at (x, u) (x[0] the measured state) and solve from there, trying
        the `last` iteration's active set first (`solve_stage_qp`'s shortcut; else a cold start, as the C), to
        the tolerances ``qp_tolerances(loose, ...)`` (False: the QP's own)."""
        nx = self.ocp.nx
        qp = self.with_state(self.build(x, u, x_ref, u_ref, p, t0, u_prev), x[0], u_prev)
        where = nonfinite_where(qp)
        if where is not None:
            return SQPStep(x, u, False, 0.0, 0.0, f"non-finite QP data at {where} (the model's step or its "
                                                 f"sensitivities are not finite at the linearisation point)")
        start = self.guess(x, u, u_prev)
        res = solve_stage_qp(qp, x_guess=start, u_guess=u, warm=last, shortcut_only=True,
                             tolerances=qp_tolerances(loose, OCP_QP_TOLERANCES["double"]))
        if res.status != 0:
            return SQPStep(x, u, False, 0.0, 0.0, res.message)
        decrease = stage_qp_objective(qp, start, u) - stage_qp_objective(qp, res.x, res.u)
        return SQPStep(res.x[:, :nx], res.u, True, decrease, max(float(np.abs(res.pi).max(initial=0.0)),
                                                                 hard_multiplier(res, qp)), qp=res)


def nonfinite_where(qp: StageQP) -> str | None:
    """Where a stage QP's data are not finite: "stage k" (its dynamics), "the cost's expansion", or None."""
    for k in range(qp.sizes.N):
        if not all(np.isfinite(np.asarray(v[k], dtype=float)).all() for v in (qp.A, qp.B, qp.b)):
            return f"stage {k}"
    arrays = (qp.Q, qp.S, qp.R, qp.Q_N, qp.q, qp.r)
    return None if all(np.isfinite(np.asarray(v, dtype=float)).all() for v in arrays if v is not None) \
        else "the cost's expansion"


def hard_multiplier(res: StageQPResult, qp: StageQP) -> float:
    """The largest multiplier of a hard inequality side (input bounds, hard state bounds and general rows,
    terminal rows): with the dynamics' multipliers, what the l1 merit's weight must exceed."""
    z = qp.sizes
    N = z.N
    lam = np.abs(np.asarray(res.lam, dtype=float))
    a = 2 * N * z.nu
    b = a + 2 * N * z.nbx
    c = b + 2 * N * z.ng
    parts = [lam[:a], lam[c:c + 2 * z.ngN]]
    if not any(qp.soft_bx or []):
        parts.append(lam[a:b])
    if not any(qp.soft_g or []):
        parts.append(lam[b:c])
    return float(max((float(v.max(initial=0.0)) for v in parts), default=0.0))


def constraint_functions(ocp: MultipleShootingOCP) -> tuple[ca.Function | None, ca.Function | None]:
    """The OCP's path and terminal constraints with their exact Jacobians (SX, for the RTI and the C).

    Returns
    -------
    path : casadi.Function or None
        ``(x (nx), u (nu), p (np)) -> (h (nh), Hx (nh, nx), Hu (nh, nu))``.
    terminal : casadi.Function or None
        ``(x (nx), p (np)) -> (c (nc), Cx (nc, nx))``.
    """
    con = ocp.problem.constraints
    nx, nu, npar = ocp.nx, ocp.nu, ocp.np
    x, u, p = ca.SX.sym("x", nx), ca.SX.sym("u", nu), ca.SX.sym("p", npar)
    path = terminal = None
    if con.path_constraints is not None:
        h = ca.SX(con.path_constraints(x, u, p))
        path = ca.Function(f"{ocp.model.name}_path", [x, u, p],
                           [ca.densify(h), ca.densify(ca.jacobian(h, x)), ca.densify(ca.jacobian(h, u))],
                           ["x", "u", "p"], ["h", "Hx", "Hu"])
    if con.terminal_constraints is not None:
        c = ca.SX(con.terminal_constraints(x, p))
        terminal = ca.Function(f"{ocp.model.name}_terminal", [x, p], [ca.densify(c), ca.densify(ca.jacobian(c, x))],
                               ["x", "p"],
                               ["c", "Cx"])
    return path, terminal


def cost_expansions(ocp: MultipleShootingOCP) -> tuple[ca.Function | None, ca.Function | None]:
    """The QP models of the OCP's ``stage_cost`` and ``terminal_cost`` (`shooting.mpc.costs.expansion`).

    Returns
    -------
    stage : casadi.Function or None
        ``(x, u, p) -> (Hxx (nx, nx), Hux (nu, nx), Huu (nu, nu), gx (nx), gu (nu))``.
    terminal : casadi.Function or None
        ``(x, p) -> (Hxx (nx, nx), gx (nx))``.
    """
    cost = ocp.problem.cost
    nx, nu, npar = ocp.nx, ocp.nu, ocp.np
    x, u, p = ca.SX.sym("x", nx), ca.SX.sym("u", nu), ca.SX.sym("p", npar)
    stage = terminal = None
    if cost.stage_cost is not None:
        H, g = expansion(cost.stage_cost, ca.vertcat(x, u), x, u, p)
        stage = ca.Function(f"{ocp.model.name}_stage_cost_model", [x, u, p],
                            [ca.densify(v) for v in (H[:nx, :nx], H[nx:, :nx], H[nx:, nx:], g[:nx], g[nx:])],
                            ["x", "u", "p"], ["Hxx", "Hux", "Huu", "gx", "gu"])
    if cost.terminal_cost is not None:
        H, g = expansion(cost.terminal_cost, x, x, p)
        terminal = ca.Function(f"{ocp.model.name}_terminal_cost_model", [x, p], [ca.densify(H), ca.densify(g)],
                               ["x", "p"], ["Hxx", "gx"])
    return stage, terminal


def cost_values(ocp: MultipleShootingOCP) -> tuple[ca.Function | None, ca.Function | None]:
    """The OCP's ``stage_cost`` ``(x, u, p) -> c`` and ``terminal_cost`` ``(x, p) -> c`` as Functions, or None."""
    cost = ocp.problem.cost
    x, u, p = ca.SX.sym("x", ocp.nx), ca.SX.sym("u", ocp.nu), ca.SX.sym("p", ocp.np)
    stage = None if cost.stage_cost is None else ca.Function(
        f"{ocp.model.name}_stage_cost", [x, u, p], [ca.densify(ca.SX(cost.stage_cost(x, u, p)))], ["x", "u", "p"],
        ["c"])
    terminal = None if cost.terminal_cost is None else ca.Function(
        f"{ocp.model.name}_terminal_cost", [x, p], [ca.densify(ca.SX(cost.terminal_cost(x, p)))], ["x", "p"], ["c"])
    return stage, terminal
