"""Real-time iteration (RTI): one Gauss-Newton SQP step per sample.

Diehl, Bock & Schloeder (2005), "A real-time iteration scheme for nonlinear
optimization in optimal feedback control", SIAM J. Control Optim. 43(5).

Around a guess (xb_k, ub_k) of the trajectory, the dynamics are replaced by
their linearisation with the integrator's exact sensitivities

    x_{k+1} = F(xb_k, ub_k) + A_k (x_k - xb_k) + B_k (u_k - ub_k),

and the quadratic cost is kept exactly (for a least-squares cost the
Gauss-Newton Hessian is the cost's own Hessian), giving one sparse QP per
sample. Everything except the initial state is computed before the state
is measured (preparation phase); the feedback phase only sets x_0 and
solves the QP. The solution, shifted one stage, is the next guess.
"""

from __future__ import annotations

import time

import casadi as ca
import numpy as np

from shooting.integrator import build_integrator
from shooting.ocp import MultipleShootingOCP

__all__ = ["RTIController"]

QP_SOLVERS = ("qrqp", "osqp")


class RTIController:
    """Real-time iteration MPC for the problem of a `MultipleShootingOCP`.

    Parameters
    ----------
    ocp : MultipleShootingOCP
        Model, horizon, dt, integrator, weights, references and bounds are
        taken from it (its extra costs and constraints are not supported).
    qp_solver : {"qrqp", "osqp"}, default "qrqp"
        A sparse QP solver shipped with CasADi.
    initialize_with_ipopt : bool, default True
        Start from a converged IPOPT solution at the first state (a cold
        RTI from a poor guess would need several samples to converge).

    Attributes
    ----------
    dt : float
    model : Model
    feedback_times, preparation_times : list of float
        Seconds per sample of the two phases.
    """

    def __init__(self, ocp: MultipleShootingOCP, *, qp_solver: str = "qrqp",
                 initialize_with_ipopt: bool = True) -> None:
        if not isinstance(ocp, MultipleShootingOCP):
            raise ValueError(f"ocp must be a MultipleShootingOCP, got {type(ocp).__name__}")
        if qp_solver not in QP_SOLVERS:
            raise ValueError(f"qp_solver must be one of {', '.join(QP_SOLVERS)}, got {qp_solver!r}")
        if ocp._nh or ocp._nc:
            raise ValueError("RTIController supports bounds only: drop path_constraints/terminal_constraints")
        self.ocp, self.model, self.dt = ocp, ocp.model, ocp.dt
        self.initialize_with_ipopt = initialize_with_ipopt
        self.feedback_times: list[float] = []
        self.preparation_times: list[float] = []
        self._build(qp_solver)
        self.reset()

    def _build(self, qp_solver: str) -> None:
        ocp = self.ocp
        N, nx, nu = ocp.horizon, ocp.nx, ocp.nu
        L = ocp._layout
        nw = ocp._n_w
        F = build_integrator(ocp.model, ocp.method, ocp.steps, "forward", name=f"{ocp.model.name}_rti_step")
        wb = ca.SX.sym("wb", nw)
        P = ca.SX.sym("P", ocp._nlp["p"].numel())
        xr = ca.reshape(P[nx:nx + nx * (N + 1)], nx, N + 1)
        ur = ca.reshape(P[nx + nx * (N + 1):nx + nx * (N + 1) + nu * N], nu, N)
        p = P[nx + nx * (N + 1) + nu * N: nx + nx * (N + 1) + nu * N + ocp.np]
        t0 = P[-1]
        Xb = ca.horzcat(*[wb[L.x_idx[k]] for k in range(N)])
        Ub = ca.horzcat(*[wb[L.u_idx[k]] for k in range(N)])
        Fn, A, B = F.map(N)(Xb, Ub, ca.repmat(p, 1, N), t0 + ca.DM(np.arange(N) * ocp.dt).T, ocp.dt)

        # Constraint rows: x_0 = x0, then -A_k x_k - B_k u_k + x_{k+1} = F_k - A_k xb_k - B_k ub_k.
        rows = [ca.SX(nx, nw)]
        rows[0][:, L.x_idx[0]] = ca.SX.eye(nx)
        rhs = [ca.SX.zeros(nx)]
        for k in range(N):
            Ak, Bk = A[:, k * nx:(k + 1) * nx], B[:, k * nu:(k + 1) * nu]
            row = ca.SX(nx, nw)
            row[:, L.x_idx[k]] = -Ak
            row[:, L.u_idx[k]] = -Bk
            row[:, L.x_idx[k + 1]] = ca.SX.eye(nx)
            rows.append(row)
            rhs.append(Fn[:, k] - ca.mtimes(Ak, Xb[:, k]) - ca.mtimes(Bk, Ub[:, k]))
        Acon, b = ca.vertcat(*rows), ca.vertcat(*rhs)

        # Quadratic cost 1/2 w' H w + g' w (the contract's cost without constants).
        H = ca.DM(nw, nw)
        g = ca.SX.zeros(nw)
        for k in range(N + 1):
            W = ocp.Q_terminal if k == N else ocp.Q
            H[L.x_idx[k], L.x_idx[k]] = 2 * W
            g[L.x_idx[k]] = -2 * ca.mtimes(ca.DM(W), xr[:, k])
        for k in range(N):
            H[L.u_idx[k], L.u_idx[k]] = 2 * ocp.R
            g[L.u_idx[k]] = -2 * ca.mtimes(ca.DM(ocp.R), ur[:, k])
        self._H = ca.sparsify(H)
        self._data = ca.Function("rti_qp_data", [wb, P], [Acon, b, g], ["wb", "P"], ["A", "b", "g"], {"cse": True})
        opts: dict = {"error_on_fail": False}
        if qp_solver == "qrqp":
            opts.update({"print_iter": False, "print_header": False, "print_info": False})
        else:
            opts.update({"osqp": {"verbose": False, "eps_abs": 1e-9, "eps_rel": 1e-9, "max_iter": 10000,
                                  "polish": True}})
        self._qp = ca.conic("rti_qp", qp_solver, {"h": self._H.sparsity(), "a": Acon.sparsity()}, opts)
        self._x0_rows = np.arange(nx)

    def reset(self) -> None:
        """Forget the trajectory guess; the next `step` initialises again."""
        self._wbar: np.ndarray | None = None
        self._lam_a = None
        self._lam_x = None
        self._prepared = None
        self.feedback_times.clear()
        self.preparation_times.clear()

    def _prepare(self, t: float) -> None:
        t_start = time.perf_counter()
        P = self.ocp.parameters(np.zeros(self.ocp.nx), t0=t)
        A, b, g = self._data(self._wbar, P)
        b = np.array(b).ravel()
        self._prepared = (A, b, np.array(g).ravel())
        self.preparation_times.append(time.perf_counter() - t_start)

    def step(self, x: np.ndarray, t: float):
        """Feedback for the measured state `x` at time `t`; then prepare the next sample.

        Returns
        -------
        shooting.closed_loop.ControlStep
            ``u`` (nu,), ``solve_time`` (feedback + preparation seconds),
            ``success``, ``status`` (the QP solver's), ``iterations``.
        """
        from shooting.closed_loop import ControlStep

        ocp = self.ocp
        x = np.asarray(x, dtype=float).reshape(-1)
        if self._wbar is None:
            if self.initialize_with_ipopt:
                sol = ocp.solve(x, t0=t)
                self._wbar = sol.w.copy()
            else:
                self._wbar = ocp.initial_guess(x)
            self._prepare(t)
        A, b, g = self._prepared
        lba, uba = b.copy(), b.copy()
        lba[self._x0_rows] = x
        uba[self._x0_rows] = x
        t_start = time.perf_counter()
        args = dict(h=self._H, g=g, a=A, lba=lba, uba=uba, lbx=ocp._lbx, ubx=ocp._ubx, x0=self._wbar)
        if self._lam_a is not None:
            args.update(lam_a0=self._lam_a, lam_x0=self._lam_x)
        res = self._qp(**args)
        feedback = time.perf_counter() - t_start
        self.feedback_times.append(feedback)
        stats = self._qp.stats()
        w = np.array(res["x"]).ravel()
        L = ocp._layout
        u = np.clip(w[L.u_idx[0]], ocp.u_min, ocp.u_max)
        # Shift: the solution one stage ahead is the next linearisation point.
        xs, us = w[L.x_idx], w[L.u_idx]
        wn = w.copy()
        wn[L.x_idx] = np.vstack([xs[1:], xs[-1:]])
        wn[L.u_idx] = np.vstack([us[1:], us[-1:]])
        self._wbar = wn
        # Duals shifted like the primal (rows: x_0 block, then one block per interval).
        lam_a, lam_x = np.array(res["lam_a"]).ravel(), np.array(res["lam_x"]).ravel()
        nx, N = ocp.nx, ocp.horizon
        dyn = lam_a[nx:].reshape(N, nx)
        lam_a[nx:] = np.vstack([dyn[1:], dyn[-1:]]).ravel()
        lx, lu = lam_x[L.x_idx], lam_x[L.u_idx]
        lam_x[L.x_idx] = np.vstack([lx[1:], lx[-1:]])
        lam_x[L.u_idx] = np.vstack([lu[1:], lu[-1:]])
        self._lam_a, self._lam_x = lam_a, lam_x
        self._prepare(t + self.dt)
        return ControlStep(u=u, solve_time=feedback + self.preparation_times[-1],
                           success=bool(stats.get("success", True)), status=str(stats.get("return_status", "")),
                           iterations=int(stats.get("iter_count", 0)))
