"""The real-time iteration's QP as one sparse problem, for CasADi's conic solvers (qrqp, osqp): its data Function
and its solver (`RTIController`'s ``qp_solver="qrqp"`` and ``"osqp"``; the stage-wise ones:
`shooting.mpc.rti_stage`)."""

from __future__ import annotations

from typing import Any

import casadi as ca
import numpy as np

from shooting.integrate.integrator import HOST_UNROLL_STEPS, build_integrator
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.options import QPSolver

__all__ = ["SparseQP"]


class SparseQP:
    """The sparse QP of `ocp`'s real-time iteration: ``data(wb, P) -> (A, b, g, H)`` (CasADi), ``qp`` (the conic
    solver), the fixed row bounds ``lba``, ``uba`` and which rows are equalities (``equality``; their bounds are
    b at every sample).

    Parameters
    ----------
    ocp : MultipleShootingOCP
    qp_solver : {"qrqp", "osqp"}
    """

    def __init__(self, ocp: MultipleShootingOCP, qp_solver: QPSolver) -> None:
        self.ocp = ocp
        L = ocp.layout
        N, nx, nu, nw = L.horizon, L.nx, L.nu, L.n_w
        F = build_integrator(ocp.model, ocp.method, ocp.steps, "forward", unroll=HOST_UNROLL_STEPS,
                             name=f"{ocp.model.name}_rti_step")
        wb = ca.SX.sym("wb", nw)
        P = ca.SX.sym("P", L.n_p)
        par = L.unpack_parameters(P)
        xr, ur, p, t0 = par["x_ref"], par["u_ref"], par["p"], par["t0"]
        Xb = ca.horzcat(*L.states(wb)[:N])
        Ub = ca.horzcat(*L.inputs(wb))
        # (algebraic states: Newton on g from the model's z0, as in the OCP)
        z_guess = [ca.repmat(ca.DM(ocp.model.z0), 1, N)] if ocp.model.nz else []
        Fn, A, B = F.map(N).call([Xb, Ub, p, t0 + ca.DM(np.arange(N) * ocp.dt).T, ocp.dt, *z_guess])[:3]

        # Constraint rows (the OCP's g: RTI has no path or terminal rows): x_0 = x0,
        # then -A_k x_k - B_k u_k + x_{k+1} = F_k - A_k xb_k - B_k ub_k, then the
        # soft-bound rows x_k[j] + s_k[j] >= x_min[j], x_k[j] - s_k[j] <= x_max[j].
        Acon = ca.SX(L.n_g, nw)
        Acon[L.x0_idx, L.x_idx[0]] = ca.SX.eye(nx)
        b = ca.SX.zeros(L.n_g)
        for k in range(N):
            Ak, Bk = A[:, k * nx:(k + 1) * nx], B[:, k * nu:(k + 1) * nu]
            rows = L.dyn_idx[k]
            Acon[rows, L.x_idx[k]] = -Ak
            Acon[rows, L.u_idx[k]] = -Bk
            Acon[rows, L.x_idx[k + 1]] = ca.SX.eye(nx)
            b[rows] = Fn[:, k] - ca.mtimes(Ak, Xb[:, k]) - ca.mtimes(Bk, Ub[:, k])
        soft = ocp.soft_states
        for k in range(N):
            for i, j in enumerate(soft):
                for rows, sign in ((L.soft_lo_idx, 1.0), (L.soft_hi_idx, -1.0)):
                    Acon[int(rows[k, i]), int(L.x_idx[k + 1, j])] = 1.0
                    Acon[int(rows[k, i]), int(L.s_idx[k, i])] = sign

        # Quadratic cost 1/2 w' H w + g' w (the documented cost without constants;
        # slacks: slack_l2 s^2 + slack_l1 s).
        H = ca.DM(nw, nw)
        g = ca.SX.zeros(nw)
        for k in range(N + 1):
            W = ocp.Q_terminal if k == N else ocp.Q
            H[L.x_idx[k], L.x_idx[k]] = 2 * W
            g[L.x_idx[k]] = -2 * ca.mtimes(ca.DM(W), xr[:, k])
        for k in range(N):
            H[L.u_idx[k], L.u_idx[k]] = 2 * ocp.R
            g[L.u_idx[k]] = -2 * ca.mtimes(ca.DM(ocp.R), ur[:, k])
        self._rate_penalty(H, g, par["u_prev"])
        for slack in L.s_idx.ravel().tolist():
            H[slack, slack] = 2 * ocp.slack_l2
            g[slack] = ocp.slack_l1
        # Fixed row bounds: the soft rows' (the equality rows take b at every sample).
        self.lba, self.uba = np.zeros(L.n_g), np.zeros(L.n_g)
        self.lba[L.soft_lo_idx], self.uba[L.soft_lo_idx] = ocp.x_min[soft], np.inf
        self.lba[L.soft_hi_idx], self.uba[L.soft_hi_idx] = -np.inf, ocp.x_max[soft]
        self.equality = np.ones(L.n_g, dtype=bool)
        self.equality[L.soft_lo_idx] = self.equality[L.soft_hi_idx] = False
        Hq: ca.SX = ca.SX(ca.sparsify(H))
        extra = self._extra_cost(wb, p)
        if extra is not None:
            # The extra costs by their second-order expansion at the linearisation
            # point wb: c(w) ~ c(wb) + dc'(w - wb) + 1/2 (w - wb)' Hc (w - wb), so
            # the QP in w gains Hc and dc - Hc wb (exact Hessian: convex costs keep
            # the QP convex; an indefinite one may make the QP solver fail).
            Hc, dc = ca.hessian(extra, wb)
            Hq = Hq + Hc
            g = g + dc - ca.mtimes(Hc, wb)
        self.data = ca.Function("rti_qp_data", [wb, P], [Acon, b, g, Hq], ["wb", "P"], ["A", "b", "g", "H"],
                                 {"cse": True})
        opts: dict[str, Any] = {"error_on_fail": False}
        if qp_solver == "qrqp":
            opts.update({"print_iter": False, "print_header": False, "print_info": False})
        else:
            opts.update({"osqp": {"verbose": False, "eps_abs": 1e-9, "eps_rel": 1e-9, "max_iter": 10000,
                                  "polish": True}})
        self.qp = ca.conic("rti_qp", qp_solver, {"h": Hq.sparsity(), "a": Acon.sparsity()}, opts)

    def _rate_penalty(self, H: ca.DM, g: ca.SX, u_prev: ca.SX) -> None:
        """Add sum_k (u_k - u_{k-1})' Rd (u_k - u_{k-1}), u_{-1} = u_prev, to 1/2 w' H w + g' w (in place)."""
        ocp, L = self.ocp, self.ocp.layout
        if not ocp.R_delta.any():
            return
        Rd = ocp.R_delta
        # d/du of the sum: u_k appears in the terms k and k+1 (the last input in one only).
        for k in range(L.horizon):
            H[L.u_idx[k], L.u_idx[k]] += 2 * Rd * (2 if k + 1 < L.horizon else 1)
            if k + 1 < L.horizon:
                H[L.u_idx[k], L.u_idx[k + 1]] = -2 * Rd
                H[L.u_idx[k + 1], L.u_idx[k]] = -2 * Rd
        g[L.u_idx[0]] += -2 * ca.mtimes(ca.DM(Rd), u_prev)

    def _extra_cost(self, wb: ca.SX, p: ca.SX) -> ca.SX | None:
        """The OCP's stage_cost and terminal_cost summed over the horizon at wb (p: column k for stage k)."""
        cost = self.ocp.problem.cost
        if cost.stage_cost is None and cost.terminal_cost is None:
            return None
        L = self.ocp.layout
        X, U = L.states(wb), L.inputs(wb)
        total: ca.SX = ca.SX(0)
        if cost.stage_cost is not None:
            for k in range(L.horizon):
                total += cost.stage_cost(X[k], U[k], p[:, k])
        if cost.terminal_cost is not None:
            total += cost.terminal_cost(X[L.horizon], p[:, L.horizon - 1])
        return total

