"""Multiple-shooting optimal control with IPOPT, built once and re-solved fast.

The NLP is formed once in SX with every value that changes between solves
(the initial state, the references, the model parameters and the start
time) as an NLP parameter, so a re-solve never rebuilds anything. Decision
variables are interleaved ``w = [x_0, u_0, x_1, u_1, ..., u_{N-1}, x_N]`` and
constraints are ordered stage by stage, which keeps the KKT matrix banded.

Cost, exactly (no 1/2, no dt weighting):

    sum_{k<N} (x_k - xr_k)' Q (x_k - xr_k) + (u_k - ur_k)' R (u_k - ur_k)
        + (x_N - xr_N)' Q_terminal (x_N - xr_N)   [+ extra stage/terminal costs]

subject to x_0 = x0, x_{k+1} = F(x_k, u_k, p, t0 + k dt, dt) with the
`build_integrator` step, bounds on every u_k and on x_1..x_N, optional path
constraints h(x_k, u_k, p) <= 0 and terminal constraints c(x_N, p) = 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import casadi as ca
import numpy as np

from shooting.integrator import build_integrator
from shooting.model import Model
from shooting.tableau import ButcherTableau

__all__ = ["MultipleShootingOCP", "OCPSolution", "DEFAULT_IPOPT_OPTIONS", "DEFAULT_FATROP_OPTIONS",
           "WARM_START_OPTIONS", "SOLVERS"]

SOLVERS = ("ipopt", "fatrop")

#: Quiet IPOPT defaults; anything passed as ``solver_options`` overrides them.
DEFAULT_IPOPT_OPTIONS: dict[str, object] = {
    "ipopt.print_level": 0,
    "ipopt.sb": "yes",
    "print_time": False,
    "ipopt.tol": 1e-8,
    "ipopt.max_iter": 500,
    "record_time": True,
}

#: Defaults for CasADi's fatrop (a structure-exploiting interior-point solver
#: for optimal control); the interleaved variables and stage-wise constraints
#: are the structure it detects.
DEFAULT_FATROP_OPTIONS: dict[str, object] = {
    "print_time": False,
    "record_time": True,
    "structure_detection": "auto",
    "fatrop": {"print_level": 0, "tol": 1e-8, "max_iter": 500},
}

#: Used on re-solves with a warm start (primal and dual): start close to the
#: central path instead of being pushed back into the interior.
WARM_START_OPTIONS: dict[str, object] = {
    "ipopt.warm_start_init_point": "yes",
    "ipopt.mu_init": 1e-6,
    "ipopt.warm_start_bound_push": 1e-9,
    "ipopt.warm_start_bound_frac": 1e-9,
    "ipopt.warm_start_slack_bound_push": 1e-9,
    "ipopt.warm_start_slack_bound_frac": 1e-9,
    "ipopt.warm_start_mult_bound_push": 1e-9,
}

StageCost = Callable[[ca.SX, ca.SX, ca.SX], ca.SX]
TerminalCost = Callable[[ca.SX, ca.SX], ca.SX]


@dataclass(frozen=True)
class OCPSolution:
    """The result of `MultipleShootingOCP.solve` (fields are also the constructor's).

    Parameters
    ----------
    x : ndarray, shape (N+1, nx)
    u : ndarray, shape (N, nu)
    cost : float
    success : bool
    status : str
        IPOPT's return status (e.g. ``"Solve_Succeeded"``, ``"Infeasible_Problem_Detected"``).
    iterations : int
    solve_time : float
        Wall-clock seconds of the solver call.
    max_violation : float
        Largest violation of the constraints and bounds at the returned point.
    w : ndarray, shape (n_w,)
        The decision vector (interleaved states and inputs).
    lam_x : ndarray, shape (n_w,)
        Multipliers of the variable bounds.
    lam_g : ndarray, shape (n_g,)
        Multipliers of the constraints (initial state, dynamics, path, terminal).
    """

    x: np.ndarray
    u: np.ndarray
    cost: float
    success: bool
    status: str
    iterations: int
    solve_time: float
    max_violation: float
    w: np.ndarray
    lam_x: np.ndarray
    lam_g: np.ndarray
    _layout: "_Layout" = field(repr=False, compare=False, default=None)

    @property
    def dynamics_multipliers(self) -> np.ndarray:
        """Multipliers of x_{k+1} = F(x_k, u_k), shape (N, nx)."""
        return self.lam_g[self._layout.dyn_idx]

    def shifted(self) -> "OCPSolution":
        """This solution one stage ahead, for the next MPC solve.

        States, inputs and their multipliers move one stage forward; the last
        stage is repeated. Use as ``ocp.solve(x_next, warm_start=sol.shifted())``.
        """
        L = self._layout
        w, lx, lg = self.w.copy(), self.lam_x.copy(), self.lam_g.copy()
        for arr in (w, lx):
            xs, us = arr[L.x_idx].copy(), arr[L.u_idx].copy()
            arr[L.x_idx] = np.vstack([xs[1:], xs[-1:]])
            arr[L.u_idx] = np.vstack([us[1:], us[-1:]])
        dyn = lg[L.dyn_idx].copy()
        lg[L.dyn_idx] = np.vstack([dyn[1:], dyn[-1:]])
        if L.path_idx.size:
            path = lg[L.path_idx].copy()
            lg[L.path_idx] = np.vstack([path[1:], path[-1:]])
        return replace(self, x=w[L.x_idx], u=w[L.u_idx], w=w, lam_x=lx, lam_g=lg)


def _status(stats: Mapping[str, object]) -> str:
    """The solver's own status string (fatrop reports a number: 0 is success)."""
    status = stats.get("return_status", stats.get("unified_return_status", "unknown"))
    if not isinstance(status, str):
        status = "Solve_Succeeded" if status == 0 else f"fatrop_return_code_{status}"
    return status


@dataclass(frozen=True)
class _Layout:
    x_idx: np.ndarray  # (N+1, nx) positions of the states in w
    u_idx: np.ndarray  # (N, nu)
    x0_idx: np.ndarray  # (nx,) positions of x_0 - x0 in g
    dyn_idx: np.ndarray  # (N, nx)
    path_idx: np.ndarray  # (N, nh)
    term_idx: np.ndarray  # (nc,)


def _weight(value: object, n: int, what: str, default: float) -> np.ndarray:
    if value is None:
        return np.eye(n) * default
    W = np.asarray(value, dtype=float)
    if W.ndim == 1 and W.size == n:
        W = np.diag(W)
    if W.shape != (n, n) or not np.all(np.isfinite(W)):
        raise ValueError(f"{what} must be a finite ({n}, {n}) matrix or {n} diagonal entries, got shape {W.shape}")
    if not np.allclose(W, W.T, atol=1e-12 * max(1.0, np.abs(W).max())):
        raise ValueError(f"{what} must be symmetric")
    return W


def _reference(value: object, rows: int, n: int, what: str) -> np.ndarray:
    if value is None:
        return np.zeros((rows, n))
    r = np.asarray(value, dtype=float)
    if r.shape == (n,) or r.shape == (1, n):
        r = np.tile(r.reshape(1, n), (rows, 1))
    if r.shape != (rows, n) or not np.all(np.isfinite(r)):
        raise ValueError(f"{what} must have shape ({n},) or ({rows}, {n}), got {np.shape(value)}")
    return r


def _bound(value: object, default: np.ndarray, what: str) -> np.ndarray:
    if value is None:
        return default.copy()
    b = np.asarray(value, dtype=float).reshape(-1)
    if b.size == 1:
        b = np.full(default.size, float(b[0]))
    if b.size != default.size or np.isnan(b).any():
        raise ValueError(f"{what} must have {default.size} entries (use +-inf for none), got {np.size(value)}")
    return b


class MultipleShootingOCP:
    """A multiple-shooting OCP over `horizon` intervals of length `dt`, solved by IPOPT.

    Parameters
    ----------
    model : Model
    horizon : int
        Number of shooting intervals N.
    dt : float
        Interval length [s].
    method : str or ButcherTableau, default "rk4"
    steps : int, default 1
        Integrator substeps per interval.
    Q, R, Q_terminal : array_like, shapes (nx, nx), (nu, nu), (nx, nx), or diagonals
        Weights (defaults: I, 0.01 I and Q).
    x_ref, u_ref : array_like, shapes (nx,) or (N+1, nx), and (nu,) or (N, nu)
        Default references (zeros); each solve may override them.
    x_min, x_max, u_min, u_max : array_like, optional
        Bounds (default: the model's). State bounds apply to x_1..x_N.
    stage_cost : callable ``(x, u, p) -> SX scalar``, optional
        Added to every stage k < N.
    terminal_cost : callable ``(x, p) -> SX scalar``, optional
    path_constraints : callable ``(x, u, p) -> SX vector``, optional
        Imposed as h(x_k, u_k, p) <= 0 for k < N.
    terminal_constraints : callable ``(x, p) -> SX vector``, optional
        Imposed as c(x_N, p) = 0.
    hessian : {"exact", "gauss-newton"}, default "exact"
        "gauss-newton" uses the Hessian of the cost only (constant for the
        quadratic part), dropping the curvature of the constraints.
    solver : {"ipopt", "fatrop"}, default "ipopt"
        IPOPT, or CasADi's fatrop, which exploits the stage structure (about
        2x faster cold solves here; ~6x with ``jit``).
    solver_options : mapping, optional
        Passed to ``casadi.nlpsol`` over `DEFAULT_IPOPT_OPTIONS` (or
        `DEFAULT_FATROP_OPTIONS`), e.g. ``{"ipopt.tol": 1e-10}``; unknown
        options are the solver's error.
    jit : bool, default False
        Compile the NLP functions with the system C compiler at build time
        (tens of seconds of gcc; faster function evaluations).

    Raises
    ------
    ValueError
        Bad dimensions, non-positive horizon or dt, non-symmetric weights,
        bounds with the wrong length, a callable returning the wrong shape.
    """

    def __init__(
        self,
        model: Model,
        horizon: int,
        dt: float,
        method: str | ButcherTableau = "rk4",
        steps: int = 1,
        Q: object = None,
        R: object = None,
        Q_terminal: object = None,
        x_ref: object = None,
        u_ref: object = None,
        x_min: object = None,
        x_max: object = None,
        u_min: object = None,
        u_max: object = None,
        *,
        stage_cost: StageCost | None = None,
        terminal_cost: TerminalCost | None = None,
        path_constraints: StageCost | None = None,
        terminal_constraints: TerminalCost | None = None,
        hessian: str = "exact",
        solver: str = "ipopt",
        solver_options: Mapping[str, object] | None = None,
        jit: bool = False,
    ) -> None:
        if not isinstance(model, Model):
            raise ValueError(f"model must be a shooting.Model, got {type(model).__name__}")
        if isinstance(horizon, bool) or not isinstance(horizon, (int, np.integer)) or horizon < 1:
            raise ValueError(f"horizon must be an integer >= 1, got {horizon!r}")
        if not (isinstance(dt, (int, float, np.floating)) and np.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be a positive number of seconds, got {dt!r}")
        if hessian not in ("exact", "gauss-newton"):
            raise ValueError(f"hessian must be 'exact' or 'gauss-newton', got {hessian!r}")
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {solver!r}")
        self.solver = solver
        self.model = model
        self.horizon = N = int(horizon)
        self.dt = float(dt)
        self.nx, self.nu, self.np = model.nx, model.nu, model.np
        self.method, self.steps, self.hessian = method, steps, hessian
        self.Q = _weight(Q, self.nx, "Q", 1.0)
        self.R = _weight(R, self.nu, "R", 0.01)
        self.Q_terminal = _weight(Q_terminal, self.nx, "Q_terminal", 1.0) if Q_terminal is not None else self.Q
        self.x_ref = _reference(x_ref, N + 1, self.nx, "x_ref")
        self.u_ref = _reference(u_ref, N, self.nu, "u_ref")
        self.x_min = _bound(x_min, model.x_min, "x_min")
        self.x_max = _bound(x_max, model.x_max, "x_max")
        self.u_min = _bound(u_min, model.u_min, "u_min")
        self.u_max = _bound(u_max, model.u_max, "u_max")
        for lo, hi, what in ((self.x_min, self.x_max, "x"), (self.u_min, self.u_max, "u")):
            bad = np.nonzero(lo > hi)[0]
            if bad.size:
                i = int(bad[0])
                raise ValueError(f"{what}_min[{i}] = {lo[i]} exceeds {what}_max[{i}] = {hi[i]}: no value satisfies both")
        self.step_function = build_integrator(model, method, steps, "none", name=f"{model.name}_ocp_step")

        t = time.perf_counter()
        self._build(stage_cost, terminal_cost, path_constraints, terminal_constraints)
        user = dict(solver_options or {})
        if solver == "ipopt":
            opts = {**DEFAULT_IPOPT_OPTIONS, **user}
            warm = {**opts, **WARM_START_OPTIONS, **user}
        else:
            opts = {**DEFAULT_FATROP_OPTIONS, "equality": [bool(e) for e in self._lbg == self._ubg], **user}
            warm = opts
        extra: dict[str, object] = {}
        if hessian == "gauss-newton":
            extra["hess_lag"] = self._gauss_newton_hessian()
        if jit:
            extra.update({"jit": True, "compiler": "shell", "jit_options": {"flags": ["-O1"], "verbose": False}})
        self._solver = ca.nlpsol("ocp", solver, self._nlp, {**opts, **extra})
        if warm is opts:
            self._warm_solver = self._solver
        else:
            # The warm-start solver differs only in options: reuse the first
            # solver's derivative Functions instead of generating them again.
            shared = {"grad_f": self._solver.get_function("nlp_grad_f"),
                      "jac_g": self._solver.get_function("nlp_jac_g"),
                      "hess_lag": self._solver.get_function("nlp_hess_l")}
            self._warm_solver = ca.nlpsol("ocp_warm", solver, self._nlp, {**warm, **extra, **shared})
        self.build_time = time.perf_counter() - t

    # ----------------------------------------------------------------- build
    def _build(self, stage_cost, terminal_cost, path_constraints, terminal_constraints) -> None:
        N, nx, nu, npar = self.horizon, self.nx, self.nu, self.np
        nw = (N + 1) * nx + N * nu
        w = ca.SX.sym("w", nw)
        order = np.arange(nw)
        x_idx = np.array([[k * (nx + nu) + i for i in range(nx)] for k in range(N + 1)], dtype=int)
        u_idx = np.array([[k * (nx + nu) + nx + i for i in range(nu)] for k in range(N)], dtype=int)
        assert np.array_equal(np.sort(np.concatenate([x_idx.ravel(), u_idx.ravel()])), order)
        x0 = ca.SX.sym("x0", nx)
        xr = ca.SX.sym("x_ref", nx, N + 1)
        ur = ca.SX.sym("u_ref", nu, max(N, 1))
        p = ca.SX.sym("p", npar)
        t0 = ca.SX.sym("t0")
        X = [w[x_idx[k]] for k in range(N + 1)]
        U = [w[u_idx[k]] for k in range(N)]

        # Dynamics of all intervals in one mapped call of the step Function.
        Fmap = self.step_function.map(N)
        times = ca.DM(np.arange(N) * self.dt).T
        Xn = Fmap(ca.horzcat(*X[:-1]), ca.horzcat(*U), ca.repmat(p, 1, N), t0 + times, self.dt)

        Q, R, Qf = (ca.DM(M) for M in (self.Q, self.R, self.Q_terminal))
        cost = 0
        g, x0_pos, dyn_pos, path_pos, term_pos = [X[0] - x0], list(range(nx)), [], [], []
        n_g = nx
        nh = 0
        for k in range(N):
            ex, eu = X[k] - xr[:, k], U[k] - ur[:, k]
            cost += ca.bilin(Q, ex, ex) + ca.bilin(R, eu, eu)
            if stage_cost is not None:
                cost += self._scalar(stage_cost(X[k], U[k], p), "stage_cost")
            g.append(X[k + 1] - Xn[:, k])  # x_{k+1} - F(x_k, u_k): the sign fatrop expects
            dyn_pos.append(list(range(n_g, n_g + nx)))
            n_g += nx
            if path_constraints is not None:
                h = self._vector(path_constraints(X[k], U[k], p), "path_constraints")
                nh = h.numel()
                g.append(h)
                path_pos.append(list(range(n_g, n_g + nh)))
                n_g += nh
        eN = X[N] - xr[:, N]
        cost += ca.bilin(Qf, eN, eN)
        if terminal_cost is not None:
            cost += self._scalar(terminal_cost(X[N], p), "terminal_cost")
        nc = 0
        if terminal_constraints is not None:
            c = self._vector(terminal_constraints(X[N], p), "terminal_constraints")
            nc = c.numel()
            g.append(c)
            term_pos = list(range(n_g, n_g + nc))
            n_g += nc

        self._layout = _Layout(x_idx, u_idx, np.array(x0_pos), np.array(dyn_pos, dtype=int).reshape(N, nx),
                               np.array(path_pos, dtype=int).reshape(N, nh) if nh else np.zeros((N, 0), int),
                               np.array(term_pos, dtype=int))
        P = ca.vertcat(x0, ca.vec(xr), ca.vec(ur), p, t0)
        self._nlp = {"x": w, "p": P, "f": cost, "g": ca.vertcat(*g)}
        self._cost_expr = cost
        self._n_w, self._n_g = nw, n_g
        self._nh, self._nc = nh, nc
        lbg = np.zeros(n_g)
        ubg = np.zeros(n_g)
        if nh:
            lbg[self._layout.path_idx.ravel()] = -np.inf
        self._lbg, self._ubg = lbg, ubg
        lbx, ubx = np.full(nw, -np.inf), np.full(nw, np.inf)
        lbx[x_idx[1:]] = self.x_min
        ubx[x_idx[1:]] = self.x_max
        lbx[u_idx] = self.u_min
        ubx[u_idx] = self.u_max
        self._lbx, self._ubx = lbx, ubx
        self._cost_fn = ca.Function("cost", [w, P], [cost], ["w", "P"], ["cost"])

    @staticmethod
    def _scalar(expr: object, what: str) -> ca.SX:
        e = ca.SX(expr) if not isinstance(expr, ca.SX) else expr
        if e.shape != (1, 1):
            raise ValueError(f"{what} must return a scalar expression, got shape {e.shape}")
        return e

    @staticmethod
    def _vector(expr: object, what: str) -> ca.SX:
        e = ca.SX(expr) if not isinstance(expr, ca.SX) else expr
        if e.size2() != 1:
            raise ValueError(f"{what} must return a column vector, got shape {e.shape}")
        return e

    def _gauss_newton_hessian(self) -> ca.Function:
        # Gauss-Newton: the Hessian of the cost alone (exact for the quadratic
        # part), without the second derivatives of the constraints.
        w, P = self._nlp["x"], self._nlp["p"]
        lam_f = ca.SX.sym("lam_f")
        lam_g = ca.SX.sym("lam_g", self._n_g)
        H = lam_f * ca.hessian(self._cost_expr, w)[0]
        return ca.Function("nlp_hess_l", [w, P, lam_f, lam_g], [ca.triu(H)],
                           ["x", "p", "lam_f", "lam_g"], ["triu_hess_gamma_x_x"])

    # ----------------------------------------------------------------- solve
    def parameters(self, x0: object, x_ref: object = None, u_ref: object = None, p: object = None,
                   t0: float = 0.0) -> np.ndarray:
        """The NLP parameter vector for one solve (validated).

        Returns
        -------
        ndarray, shape (nx + nx (N+1) + nu N + np + 1,)
        """
        N = self.horizon
        x0 = np.asarray(x0, dtype=float).reshape(-1)
        if x0.size != self.nx or not np.all(np.isfinite(x0)):
            raise ValueError(f"x0 must be {self.nx} finite numbers, got {np.size(x0)}")
        xr = self.x_ref if x_ref is None else _reference(x_ref, N + 1, self.nx, "x_ref")
        ur = self.u_ref if u_ref is None else _reference(u_ref, N, self.nu, "u_ref")
        pv = self.model.p0 if p is None else np.asarray(p, dtype=float).reshape(-1)
        if pv.size != self.np or not np.all(np.isfinite(pv)):
            raise ValueError(f"p must be {self.np} finite numbers, got {pv.tolist()}")
        return np.concatenate([x0, xr.ravel(), ur.ravel(), pv, [float(t0)]])

    def initial_guess(self, x0: np.ndarray, u_ref: np.ndarray | None = None) -> np.ndarray:
        """Cold-start guess: every state at x0, every input at its reference clipped to the bounds."""
        w = np.zeros(self._n_w)
        w[self._layout.x_idx] = np.asarray(x0, dtype=float)
        ur = self.u_ref if u_ref is None else _reference(u_ref, self.horizon, self.nu, "u_ref")
        w[self._layout.u_idx] = np.clip(ur, self.u_min, self.u_max)
        return w

    def solve(
        self,
        x0: object,
        *,
        warm_start: OCPSolution | None = None,
        x_ref: object = None,
        u_ref: object = None,
        p: object = None,
        t0: float = 0.0,
    ) -> OCPSolution:
        """Solve from the initial state `x0`.

        Parameters
        ----------
        x0 : array_like, shape (nx,)
        warm_start : OCPSolution, optional
            Primal and dual start, e.g. a previous solution or ``sol.shifted()``.
        x_ref, u_ref, p, t0 : optional
            Override the references, model parameters and start time for this solve.

        Returns
        -------
        OCPSolution
            A failed or infeasible solve returns ``success == False`` with
            IPOPT's status; it does not raise.
        """
        P = self.parameters(x0, x_ref, u_ref, p, t0)
        args = dict(p=P, lbx=self._lbx, ubx=self._ubx, lbg=self._lbg, ubg=self._ubg)
        if warm_start is not None:
            if not isinstance(warm_start, OCPSolution) or warm_start.w.size != self._n_w:
                raise ValueError("warm_start must be an OCPSolution of this OCP (same horizon and model)")
            solver = self._warm_solver
            args.update(x0=warm_start.w, lam_x0=warm_start.lam_x, lam_g0=warm_start.lam_g)
        else:
            solver = self._solver
            args.update(x0=self.initial_guess(np.asarray(x0, dtype=float).reshape(-1), u_ref))
        t = time.perf_counter()
        res = solver(**args)
        elapsed = time.perf_counter() - t
        stats = solver.stats()
        w = np.array(res["x"]).ravel()
        g = np.array(res["g"]).ravel()
        viol = max(
            float(np.max(np.maximum(self._lbx - w, 0.0), initial=0.0)),
            float(np.max(np.maximum(w - self._ubx, 0.0), initial=0.0)),
            float(np.max(np.maximum(self._lbg - g, 0.0), initial=0.0)),
            float(np.max(np.maximum(g - self._ubg, 0.0), initial=0.0)),
        )
        L = self._layout
        return OCPSolution(
            x=w[L.x_idx], u=w[L.u_idx], cost=float(res["f"]), success=bool(stats.get("success", False)),
            status=_status(stats), iterations=int(stats.get("iter_count", -1)),
            solve_time=elapsed, max_violation=viol, w=w, lam_x=np.array(res["lam_x"]).ravel(),
            lam_g=np.array(res["lam_g"]).ravel(), _layout=L,
        )

    def cost(self, x: np.ndarray, u: np.ndarray, *, x_ref: object = None, u_ref: object = None,
             p: object = None, t0: float = 0.0) -> float:
        """The objective of a given trajectory under this OCP's weights and references.

        Parameters
        ----------
        x : ndarray, shape (N+1, nx)
        u : ndarray, shape (N, nu)
        """
        w = np.zeros(self._n_w)
        w[self._layout.x_idx] = x
        w[self._layout.u_idx] = u
        P = self.parameters(x[0], x_ref, u_ref, p, t0)
        return float(self._cost_fn(w, P))
