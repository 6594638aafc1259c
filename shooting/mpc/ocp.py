"""Multiple-shooting optimal control with IPOPT (or fatrop), built once and re-solved fast.

The NLP is formed once in SX with every value that changes between solves
(the initial state, the references, the model parameters and the start
time) as an NLP parameter, so a re-solve never rebuilds anything. Vectors
are laid out by `ShootingLayout` (interleaved states and inputs, constraints
stage by stage: a banded KKT matrix).

Cost, exactly (no 1/2, no dt weighting):

    sum_{k<N} (x_k - xr_k)' Q (x_k - xr_k) + (u_k - ur_k)' R (u_k - ur_k)
              + (u_k - u_{k-1})' R_delta (u_k - u_{k-1})
        + (x_N - xr_N)' Q_terminal (x_N - xr_N)   [+ extra stage/terminal costs]

with u_{-1} = u_prev (the input applied last; zero unless given), subject to
x_0 = x0, x_{k+1} = F(x_k, u_k, p_k, t0 + k dt, dt) with the
`build_integrator` step, bounds on every u_k and on x_1..x_N, optional path
constraints h(x_k, u_k, p_k) <= 0 and terminal constraints c(x_N, p_{N-1}) = 0.
The model parameters p_k may differ from interval to interval (one row per
interval) or be one vector for all.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting._solver_call import solver_call
from shooting.integrate.integrator import HOST_UNROLL_STEPS, build_integrator
from shooting.model import Model
from shooting.mpc.algebraic import ALGEBRAIC_TOLERANCE, algebraic_bound_rows, algebraic_residual
from shooting.mpc.layout import ShootingLayout
from shooting.mpc.nlp_cache import NLPCacheReport
from shooting.mpc.ocp_vector import ScaledVector
from shooting.mpc.problem import (
    Constraints,
    OCPProblem,
    QuadraticCost,
    SolverSettings,
    StageFunction,
    TerminalFunction,
    column_expression,
    scalar_expression,
)
from shooting.mpc.scaling import auto_scale, is_unscaled, resolve_scale, scaled_twin
from shooting.mpc.solution import OCPSolution
from shooting.mpc.solvers import NLPSolvers
from shooting.options import Hessian, NLPSolver
from shooting.tableaus.tableau import ButcherTableau

__all__ = ["MultipleShootingOCP", "OCPSolution"]

FloatArray = npt.NDArray[np.float64]


class MultipleShootingOCP(ScaledVector):
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
        Weights (defaults: I, 0.01 I and Q); symmetric positive semi-definite.
    R_delta : array_like, shape (nu, nu) or (nu,), optional
        Weight of the input changes: ``(u_k - u_{k-1})' R_delta (u_k - u_{k-1})``
        for k = 0..N-1, with u_{-1} the ``u_prev`` of `solve` (zero by
        default). Symmetric positive semi-definite; default none.
    x_ref, u_ref : array_like, shapes (nx,) or (N+1, nx), and (nu,) or (N, nu)
        Default references (zeros); each solve may override them. A
        reference beyond a bound is accepted: the optimum stops at the
        bound, and a `ReferenceBeyondBoundsWarning` says so (once per entry)
        where the entry's weight (its row of Q, Q_terminal or R) is nonzero.
    x_min, x_max, u_min, u_max : array_like, optional
        Bounds (default: the model's). State bounds apply to x_1..x_N.
    stage_cost : callable ``(x, u, p) -> SX scalar``, optional
        Added to every stage k < N (with that interval's parameters p_k).
    terminal_cost : callable ``(x, p) -> SX scalar``, optional
        Added at x_N, with p_{N-1}.
    path_constraints : callable ``(x, u, p) -> SX vector``, optional
        Imposed as h(x_k, u_k, p_k) <= 0 for k < N.
    terminal_constraints : callable ``(x, p) -> SX vector``, optional
        Imposed as c(x_N, p_{N-1}) = 0.
    soft_x_bounds : bool, default False
        Soft state bounds: ``x_min - s <= x_k <= x_max + s``, ``s >= 0`` for
        k = 1..N, one slack per bounded state and stage, with
        ``slack_l1 * sum(s) + slack_l2 * sum(s^2)`` added to the cost. Input
        bounds stay hard. A state outside its bounds then never makes the
        problem infeasible. The bounds of a model's algebraic states (on z at
        x_1..x_N) are softened the same way.
    soft_path_constraints : bool, default False
        Soft path constraints: ``h(x_k, u_k, p_k) <= s_k``, ``s_k >= 0``, one
        slack per row and stage k < N, penalised as the state bounds' slacks
        (terminal constraints stay hard).
    slack_l1, slack_l2 : float, default 1e3 and 1e2
        Weights of the slacks (non-negative, not both zero).
    hessian : {"exact", "gauss-newton"}, default "exact"
        "gauss-newton" uses the Hessian of the cost only (constant for the
        quadratic part), dropping the curvature of the constraints.
    solver : {"ipopt", "fatrop"}, default "ipopt"
        IPOPT, or CasADi's fatrop, which exploits the stage structure (about
        2x faster cold solves here; ~6x with ``jit``).
    solver_options : mapping, optional
        Passed to ``casadi.nlpsol`` over the defaults of
        `shooting.mpc.solvers`, e.g. ``{"ipopt.tol": 1e-10}``; unknown
        options are the solver's error.
    jit : bool, default False
        Compile the NLP functions with the system C compiler at build time
        (tens of seconds of gcc; faster function evaluations).
    compile_nlp : bool or None, default None
        Compile the NLP functions once per problem (seconds of gcc), keep the
        library in the per-user cache and reuse it in later processes, which
        then skip the symbolic derivatives too (`shooting.mpc.nlp_cache`).
        None: as ``$SHOOTING_COMPILE_NLP`` says (off when unset).
    x_scale, u_scale : "auto", None or array_like, shapes (nx,) and (nu,)
        The NLP and its controllers work in x / x_scale, u / u_scale, every
        interface in the model's units (`shooting.mpc.scaling`: "auto", the
        default, or positive numbers per variable).

    Attributes
    ----------
    problem : OCPProblem
        Everything above but the model, grouped (`from_problem` builds from it).
    layout : ShootingLayout
        The vector layout of the NLP.
    Q, R, Q_terminal, R_delta, x_ref, u_ref, x_min, x_max, u_min, u_max : ndarray
        The validated weights (`R_delta` zero when not given), references
        (one row per stage) and bounds.
    soft_states : ndarray of int
        The states whose bounds are soft (those with a finite bound, when
        `soft_x_bounds`; else empty).
    soft_algebraic : ndarray of int
        The algebraic states whose bounds are soft (likewise); their slacks
        follow the states' in each stage's row of `OCPSolution.slacks`.
    soft_x_bounds : bool
    slack_l1, slack_l2 : float
    x_scale, u_scale : ndarray, shapes (nx,) and (nu,)
        The resolved scales.

    Raises
    ------
    ValueError
        Bad dimensions, non-positive horizon or dt, weights that are not
        symmetric positive semi-definite, bounds with the wrong length or
        contradicting each other, a callable returning the wrong shape.
    """

    def __init__(
        self,
        model: Model,
        horizon: int,
        *,
        dt: float,
        method: str | ButcherTableau = "rk4",
        steps: int = 1,
        Q: object = None,
        R: object = None,
        Q_terminal: object = None,
        R_delta: object = None,
        x_ref: object = None,
        u_ref: object = None,
        x_min: object = None,
        x_max: object = None,
        u_min: object = None,
        u_max: object = None,
        stage_cost: StageFunction | None = None,
        terminal_cost: TerminalFunction | None = None,
        path_constraints: StageFunction | None = None,
        terminal_constraints: TerminalFunction | None = None,
        soft_x_bounds: bool = False,
        soft_path_constraints: bool = False,
        slack_l1: float = 1e3,
        slack_l2: float = 1e2,
        hessian: Hessian = "exact",
        solver: NLPSolver = "ipopt",
        solver_options: Mapping[str, object] | None = None,
        jit: bool = False,
        compile_nlp: bool | None = None,
        x_scale: object = None,
        u_scale: object = None,
    ) -> None:
        problem = OCPProblem(
            horizon=horizon, dt=dt, method=method, steps=steps,
            cost=QuadraticCost(Q=Q, R=R, Q_terminal=Q_terminal, R_delta=R_delta, x_ref=x_ref, u_ref=u_ref,
                               stage_cost=stage_cost, terminal_cost=terminal_cost),
            constraints=Constraints(x_min=x_min, x_max=x_max, u_min=u_min, u_max=u_max,
                                    path_constraints=path_constraints, terminal_constraints=terminal_constraints,
                                    soft_x_bounds=soft_x_bounds, soft_path_constraints=soft_path_constraints,
                                    slack_l1=slack_l1, slack_l2=slack_l2),
            solver=SolverSettings(solver=solver, hessian=hessian, solver_options=solver_options, jit=jit,
                                  compile_nlp=compile_nlp),
            x_scale=x_scale, u_scale=u_scale,
        )
        self._setup(model, problem)

    @classmethod
    def from_problem(cls, model: Model, problem: OCPProblem) -> MultipleShootingOCP:
        """The OCP of `model` described by `problem` (e.g. a `Scenario`'s).

        Parameters
        ----------
        model : Model
        problem : OCPProblem

        Returns
        -------
        MultipleShootingOCP
        """
        if not isinstance(problem, OCPProblem):
            raise ValueError(f"problem must be a shooting.OCPProblem, got {type(problem).__name__}")
        ocp = cls.__new__(cls)
        ocp._setup(model, problem)
        return ocp

    # ----------------------------------------------------------------- build
    def _setup(self, model: Model, problem: OCPProblem) -> None:
        if not isinstance(model, Model):
            raise ValueError(f"model must be a shooting.Model, got {type(model).__name__}")
        self.model, self.problem = model, problem
        self.horizon = N = problem.horizon
        self.dt = problem.dt
        self.nx, self.nu, self.np = model.nx, model.nu, model.np
        self.method, self.steps = problem.method, problem.steps
        self.solver, self.hessian = problem.solver.solver, problem.solver.hessian
        cost, con = problem.cost, problem.constraints
        self.Q = _validate.weight(cost.Q, self.nx, "Q", default=1.0)
        self.R = _validate.weight(cost.R, self.nu, "R", default=0.01)
        self.Q_terminal = self.Q if cost.Q_terminal is None else _validate.weight(cost.Q_terminal, self.nx,
                                                                                  "Q_terminal")
        self.R_delta = _validate.weight(cost.R_delta, self.nu, "R_delta", default=0.0)
        self.x_ref = _validate.stage_rows(cost.x_ref, N + 1, self.nx, "x_ref")
        self.u_ref = _validate.stage_rows(cost.u_ref, N, self.nu, "u_ref")
        bound = {}
        for name, n, default in (("x_min", self.nx, model.x_min), ("x_max", self.nx, model.x_max),
                                 ("u_min", self.nu, model.u_min), ("u_max", self.nu, model.u_max)):
            value = getattr(con, name)
            bound[name] = default.copy() if value is None else _validate.vector(value, n, name, allow_inf=True)
        self.x_min, self.x_max, self.u_min, self.u_max = (bound[k] for k in ("x_min", "x_max", "u_min", "u_max"))
        _validate.bounds(self.x_min, self.x_max, "x")
        _validate.bounds(self.u_min, self.u_max, "u")
        self.soft_x_bounds, self.slack_l1, self.slack_l2 = con.soft_x_bounds, con.slack_l1, con.slack_l2
        self.soft_path_constraints = con.soft_path_constraints
        bounded = np.isfinite(self.x_min) | np.isfinite(self.x_max)
        self.soft_states = np.flatnonzero(bounded) if self.soft_x_bounds else np.zeros(0, dtype=int)
        z_bounded = np.isfinite(model.z_min) | np.isfinite(model.z_max)
        self.soft_algebraic = np.flatnonzero(z_bounded) if self.soft_x_bounds else np.zeros(0, dtype=int)
        if self.soft_x_bounds and problem.solver.solver == "fatrop":
            raise ValueError("soft_x_bounds is not available with solver='fatrop' (its stage structure has no "
                             "place for the slacks): use solver='ipopt'")
        self._warned_references: set[tuple[str, int]] = set()
        self._check_references(self.x_ref, self.u_ref)
        self.x_scale = resolve_scale(problem.x_scale, self.nx, "x_scale",
                                     lambda: auto_scale(self.x_min, self.x_max, model.x0, self.x_ref))
        self.u_scale = resolve_scale(problem.u_scale, self.nu, "u_scale",
                                     lambda: auto_scale(self.u_min, self.u_max, model.u0, self.u_ref))
        self.step_function = build_integrator(model, problem.method, problem.steps, "none", unroll=HOST_UNROLL_STEPS,
                                              name=f"{model.name}_ocp_step")
        t = time.perf_counter()
        self._build_nlp()
        self._solvers = NLPSolvers(self._nlp, problem.solver, self._lbg == self._ubg,
                                   self._gauss_newton_hessian if self.hessian == "gauss-newton" else None)
        self.build_time = time.perf_counter() - t

    def _build_nlp(self) -> None:
        N, nx = self.horizon, self.nx
        cost_spec, con = self.problem.cost, self.problem.constraints
        # (the layout without path/terminal rows, sized once the user's functions are called, splits w and P)
        base = ShootingLayout(N, nx, self.nu, self.np)
        w, P = ca.SX.sym("w", base.n_w), ca.SX.sym("P", base.n_p)
        X, U = base.states(w), base.inputs(w)
        # w holds x / x_scale, u / u_scale (shooting.mpc.scaling): below, all in the model's units, the equality rows
        # divided by x_scale (their multipliers scaled alike), so that IPOPT sees a problem of order one.
        scaled, Dx, Du = not is_unscaled(self.x_scale, self.u_scale), ca.DM(self.x_scale), ca.DM(self.u_scale)
        X, U = ([Dx * xk for xk in X], [Du * uk for uk in U]) if scaled else (X, U)
        par = base.unpack_parameters(P)
        xr, ur, p, t0 = par["x_ref"], par["u_ref"], par["p"], par["t0"]  # p: column k for interval k
        # Dynamics of all intervals in one mapped call of the step Function.
        self._step_map = Fmap = self.step_function.map(N)
        times = ca.DM(np.arange(N) * self.dt).T
        # (the first output: embedded pairs also return their error estimate; with algebraic states every
        # interval's Newton on g starts from the model's z0, and the last output is z at the interval's end)
        z_guess = [ca.repmat(ca.DM(self.model.z0), 1, N)] if self.model.nz else []
        outs = Fmap.call([ca.horzcat(*X[:-1]), ca.horzcat(*U), p, t0 + times, self.dt, *z_guess])
        Xn = outs[0]
        Zn = outs[-1] if self.model.nz else ca.SX(0, N)

        Q, R, Qf = (ca.DM(M) for M in (self.Q, self.R, self.Q_terminal))
        cost: ca.SX = ca.SX(0)
        g = [(X[0] - par["x0"]) / Dx if scaled else X[0] - par["x0"]]
        nh = nh_user = 0
        H_user: list[ca.SX] = []  # the user's path rows per stage, before their slacks
        Sh = ca.SX(0, N)  # their slacks (soft path constraints)
        for k in range(N):
            ex, eu = X[k] - xr[:, k], U[k] - ur[:, k]
            cost += ca.bilin(Q, ex, ex) + ca.bilin(R, eu, eu)
            if self.R_delta.any():  # rate penalty, u_{-1} = u_prev
                du = U[k] - (par["u_prev"] if k == 0 else U[k - 1])
                cost += ca.bilin(ca.DM(self.R_delta), du, du)
            if cost_spec.stage_cost is not None:
                cost += scalar_expression(cost_spec.stage_cost(X[k], U[k], p[:, k]), "stage_cost")
            defect = X[k + 1] - Xn[:, k]  # x_{k+1} - F(x_k, u_k): the sign fatrop expects
            g.append(defect / Dx if scaled else defect)
            rows = [] if self.soft_algebraic.size else algebraic_bound_rows(self.model, Zn[:, k])
            if con.path_constraints is not None:
                h_user = column_expression(con.path_constraints(X[k], U[k], p[:, k]), "path_constraints")
                nh_user = h_user.numel()
                H_user.append(h_user)
                if self.soft_path_constraints:
                    # Soft: h_i(x_k, u_k) - sh_k,i <= 0, sh >= 0, the slacks penalised as the state bounds'.
                    Sh = ca.SX.sym("sh", nh_user, N) if k == 0 else Sh
                    h_user = h_user - Sh[:, k]
                rows.insert(0, h_user)
            if rows:
                h = ca.vertcat(*rows)
                nh = h.numel()
                g.append(h)
        eN = X[N] - xr[:, N]
        cost += ca.bilin(Qf, eN, eN)
        if cost_spec.terminal_cost is not None:
            cost += scalar_expression(cost_spec.terminal_cost(X[N], p[:, N - 1]), "terminal_cost")
        nc = 0
        if con.terminal_constraints is not None:
            c = column_expression(con.terminal_constraints(X[N], p[:, N - 1]), "terminal_constraints")
            nc = c.numel()
            g.append(c)

        nsh = nh_user if self.soft_path_constraints else 0
        self.layout = L = ShootingLayout(N, nx, self.nu, self.np, nh, nc,
                                         self.soft_states.size + self.soft_algebraic.size, nsh)
        H = ca.horzcat(*H_user) if H_user else ca.SX(0, N)
        if L.ns:
            # Soft state bounds (exact L1 plus L2 penalty on slacks s_k >= 0):
            # rows x_k[j] + s_k[j] >= x_min[j] and x_k[j] - s_k[j] <= x_max[j],
            # then the same for the bounded algebraic states at the interval's end.
            S = ca.SX.sym("s", L.ns, N)
            w = ca.vertcat(w, ca.vec(S))
            for k in range(N):
                xs = ca.vertcat(X[k + 1][self.soft_states.tolist()], Zn[self.soft_algebraic.tolist(), k])
                g += [xs + S[:, k], xs - S[:, k]]
            cost += self.slack_l1 * ca.sum1(ca.vec(S)) + self.slack_l2 * ca.sumsqr(S)
        if nsh:
            w = ca.vertcat(w, ca.vec(Sh))
            cost += self.slack_l1 * ca.sum1(ca.vec(Sh)) + self.slack_l2 * ca.sumsqr(Sh)
        self._store_nlp(w, P, cost, ca.vertcat(*g), H, Zn)

    def _store_nlp(self, w: ca.SX, P: ca.SX, cost: ca.SX, g: ca.SX, H: ca.SX, Zn: ca.SX) -> None:
        """The NLP, its row bounds and the helper Functions (path values, z, cost) of `_build_nlp`."""
        L = self.layout
        self._nlp = {"x": w, "p": P, "f": cost, "g": g}
        self._path_fn = ca.Function("path", [w, P], [H], ["w", "P"], ["h"])
        self._z_fn = ca.Function("z", [w, P], [Zn.T], ["w", "P"], ["z"])
        self._lbg, self._ubg = np.zeros(L.n_g), np.zeros(L.n_g)
        self._g_scale = np.ones(L.n_g)  # what the rows are multiplied by to give the model's units
        self._g_scale[L.x0_idx] = self.x_scale
        self._g_scale[L.dyn_idx] = self.x_scale
        self._lbg[L.path_idx.ravel()] = -np.inf
        lo, hi = self._soft_bounds()
        self._lbg[L.soft_lo_idx], self._ubg[L.soft_lo_idx] = lo, np.inf
        self._lbg[L.soft_hi_idx], self._ubg[L.soft_hi_idx] = -np.inf, hi
        self.lbx, self.ubx = self.variable_bounds()
        self._cost_fn = ca.Function("cost", [w, P], [cost], ["w", "P"], ["cost"])

    def _check_references(self, x_ref: FloatArray, u_ref: FloatArray) -> None:
        """Warn, once per entry and OCP, where a weighted reference lies beyond a bound.

        Such a reference is accepted (as acados and do-mpc accept it): the
        optimum stops at the bound. With zero weight it changes nothing.
        """
        N = self.horizon
        found = [(("x", i), text) for i, text in _validate.references_beyond_bounds(
            x_ref, self.x_min, self.x_max, [("Q", self.Q, range(N)), ("Q_terminal", self.Q_terminal, [N])],
            self.model.state_names, "x_ref")]
        found += [(("u", i), text) for i, text in _validate.references_beyond_bounds(
            u_ref, self.u_min, self.u_max, [("R", self.R, range(N))], self.model.input_names, "u_ref")]
        for key, text in found:
            if key not in self._warned_references:
                self._warned_references.add(key)
                warnings.warn(text, _validate.ReferenceBeyondBoundsWarning, stacklevel=4)

    def scaled_twin(self) -> tuple[MultipleShootingOCP, FloatArray, FloatArray]:
        """The OCP the controllers solve, in x / dx, u / du (scales 1), and dx (nx,), du (nu,): `x_scale`,
        `u_scale` but 1 on the soft-bounded states (`shooting.mpc.scaling.scaled_twin`). Built once, then kept;
        without scaling the twin is this OCP itself."""
        if getattr(self, "_twin", None) is None:
            self._twin = scaled_twin(self)
        return self._twin

    def _gauss_newton_hessian(self) -> ca.Function:
        # Gauss-Newton: the Hessian of the cost alone (exact for the quadratic
        # part), without the second derivatives of the constraints.
        w, P = self._nlp["x"], self._nlp["p"]
        lam_f = ca.SX.sym("lam_f")
        lam_g = ca.SX.sym("lam_g", self.layout.n_g)
        H = lam_f * ca.hessian(self._nlp["f"], w)[0]
        return ca.Function("nlp_hess_l", [w, P, lam_f, lam_g], [ca.triu(H)],
                           ["x", "p", "lam_f", "lam_g"], ["triu_hess_gamma_x_x"])

    @property
    def nlp_solver(self) -> ca.Function:
        """The CasADi ``nlpsol`` used for cold solves."""
        return self._solvers.cold

    @property
    def nlp_cache(self) -> NLPCacheReport | None:
        """How the compiled NLP functions were obtained (`NLPCacheReport`); None without ``compile_nlp``."""
        return self._solvers.cache

    @property
    def warm_nlp_solver(self) -> ca.Function:
        """The CasADi ``nlpsol`` used for warm-started solves (shares the cold one's derivatives)."""
        return self._solvers.warm

    # ----------------------------------------------------------------- solve
    def parameters(self, x0: object, x_ref: object = None, u_ref: object = None, p: object = None,
                   t0: float = 0.0, u_prev: object = None) -> FloatArray:
        """The NLP parameter vector for one solve (validated; see `ShootingLayout`).

        Parameters
        ----------
        x0 : array_like, shape (nx,)
        x_ref : array_like, shape (nx,) or (N+1, nx), optional
            Default: the OCP's.
        u_ref : array_like, shape (nu,) or (N, nu), optional
            Default: the OCP's.
        p : array_like, shape (np,) or (N, np), optional
            One vector for every interval, or row k for interval k; default
            the model's nominal ``p0``.
        t0 : float, default 0
        u_prev : array_like, shape (nu,), optional
            u_{-1} of the rate penalty; default zeros.

        Returns
        -------
        ndarray, shape (n_p,)
        """
        N = self.horizon
        x0v = _validate.vector(x0, self.nx, "x0", broadcast=False)
        xr = self.x_ref if x_ref is None else _validate.stage_rows(x_ref, N + 1, self.nx, "x_ref")
        ur = self.u_ref if u_ref is None else _validate.stage_rows(u_ref, N, self.nu, "u_ref")
        if x_ref is not None or u_ref is not None:
            self._check_references(xr, ur)
        pv = self.model.p0 if p is None else _validate.stage_rows(p, N, self.np, "p")
        prev = None if u_prev is None else _validate.vector(u_prev, self.nu, "u_prev", broadcast=False)
        return self.layout.pack_parameters(x0v, xr, ur, pv, _validate.real(t0, "t0"), prev)

    def initial_guess(self, x0: object, u_ref: object = None) -> FloatArray:
        """Cold-start guess: every state at x0, every input at its reference clipped to the bounds.

        Returns
        -------
        ndarray, shape (n_w,)
            The NLP's decision vector (scaled variables: `unpack` gives x and u).
        """
        N = self.horizon
        x0v = _validate.vector(x0, self.nx, "x0", broadcast=False)
        ur = self.u_ref if u_ref is None else _validate.stage_rows(u_ref, N, self.nu, "u_ref")
        return self.pack(np.tile(x0v, (N + 1, 1)), np.clip(ur, self.u_min, self.u_max))

    def solve(
        self,
        x0: object,
        *,
        warm_start: OCPSolution | None = None,
        x_ref: object = None,
        u_ref: object = None,
        p: object = None,
        t0: float = 0.0,
        u_prev: object = None,
        guess: tuple[object, object] | None = None,
    ) -> OCPSolution:
        """Solve from the initial state `x0`.

        Parameters
        ----------
        x0 : array_like, shape (nx,)
        warm_start : OCPSolution, optional
            Primal and dual start, e.g. a previous solution or ``sol.shifted()``.
        x_ref : array_like, shape (nx,) or (N+1, nx), optional
            State reference for this solve: one vector, or row k for x_k.
        u_ref : array_like, shape (nu,) or (N, nu), optional
            Input reference: one vector, or row k for u_k.
        p : array_like, shape (np,) or (N, np), optional
            Model parameters: one vector, or row k for interval k (the
            terminal cost and constraints use row N-1); default ``model.p0``.
        t0 : float, default 0
            Start time (for models that depend on t).
        u_prev : array_like, shape (nu,), optional
            The input applied before u_0, for the rate penalty `R_delta`;
            default zeros.
        guess : (x, u), optional
            A primal initial guess, shapes (N+1, nx) and (N, nu), instead of
            `initial_guess` (a cold start from it; `warm_start` takes precedence).

        Returns
        -------
        OCPSolution
            A failed or infeasible solve returns ``success == False`` with
            the solver's status; it does not raise.
        """
        P = self.parameters(x0, x_ref, u_ref, p, t0, u_prev)
        args: dict[str, Any] = dict(p=P, lbx=self.lbx, ubx=self.ubx, lbg=self._lbg, ubg=self._ubg)
        if warm_start is not None:
            if not isinstance(warm_start, OCPSolution):
                raise ValueError(f"warm_start must be an OCPSolution of this OCP, got {type(warm_start).__name__}")
            if warm_start.layout != self.layout or warm_start.lam_g.size != self.layout.n_g:
                raise ValueError(f"warm_start is a solution of another OCP ({warm_start.layout}); this one is "
                                 f"{self.layout}: warm-start only from a solution of the same OCP")
            solver = self._solvers.warm
            args.update(x0=warm_start.w, lam_x0=warm_start.lam_x, lam_g0=warm_start.lam_g)
        else:
            solver = self._solvers.cold
            args.update(x0=self.initial_guess(P[:self.nx], u_ref) if guess is None else self._primal(guess))
        t = time.perf_counter()
        with solver_call() as printed:  # Ctrl-C re-raised, not swallowed; CasADi's warnings kept
            res = solver(**args)
        elapsed = time.perf_counter() - t
        stats = solver.stats()
        w = np.array(res["x"]).ravel()
        g = np.array(res["g"]).ravel()
        ws, gs = self.w_scale, self._g_scale  # (violations in the model's units)
        viol = max(
            float(np.max(np.maximum(self.lbx - w, 0.0) * ws, initial=0.0)),
            float(np.max(np.maximum(w - self.ubx, 0.0) * ws, initial=0.0)),
            float(np.max(np.maximum(self._lbg - g, 0.0) * gs, initial=0.0)),
            float(np.max(np.maximum(g - self._ubg, 0.0) * gs, initial=0.0)),
        )
        x, u = self.unpack(w)
        success, status = bool(stats.get("success", False)), NLPSolvers.status(stats)
        residual = algebraic_residual(self.model, self._step_map, self.layout.unpack_parameters(P), x, u, self.dt)
        if residual > ALGEBRAIC_TOLERANCE:
            # The dynamics were evaluated with unconverged algebraic states.
            success, status = False, f"{status}; algebraic equations unsolved (residual {residual:.1e})"
        viol = max(viol, residual)
        if not (np.isfinite(w).all() and np.isfinite(float(res["f"]))):
            # (e.g. a step that is NaN where dg/dz is singular): never a success
            success, status = False, f"{status}; non-finite solution"
        return OCPSolution(
            x=x, u=u, cost=float(res["f"]), success=success,
            status=status, iterations=int(stats.get("iter_count", -1)),
            solve_time=elapsed, max_violation=viol, w=w, lam_x=np.array(res["lam_x"]).ravel(),
            lam_g=np.array(res["lam_g"]).ravel(), layout=self.layout, stats=dict(stats),
            messages=printed.text.strip(), z=np.array(self._z_fn(w, P), dtype=float).reshape(self.horizon, -1),
            w_scale=None if is_unscaled(self.x_scale, self.u_scale) else ws,
        )

    def _primal(self, guess: tuple[object, object]) -> FloatArray:
        """The decision vector of a guess (x (N+1, nx), u (N, nu)), each soft bound's slack its smallest."""
        x = _validate.stage_rows(guess[0], self.horizon + 1, self.nx, "guess x")
        return self.pack(x, _validate.stage_rows(guess[1], self.horizon, self.nu, "guess u"),
                         self.minimal_slacks(x) if not self.soft_algebraic.size else None)

    def cost(self, x: FloatArray, u: FloatArray, *, x_ref: object = None, u_ref: object = None,
             p: object = None, t0: float = 0.0, u_prev: object = None) -> float:
        """The objective of a given trajectory under this OCP's weights and references.

        With soft state bounds the slacks are the smallest that the states need.

        Parameters
        ----------
        x : ndarray, shape (N+1, nx)
        u : ndarray, shape (N, nu)
        x_ref, u_ref, p, t0, u_prev : optional
            As for `solve` (shapes (nx,) or (N+1, nx), (nu,) or (N, nu),
            (np,) or (N, np), scalar, (nu,)).
        """
        x, u = np.asarray(x, dtype=float), np.asarray(u, dtype=float)
        P = self.parameters(np.asarray(x, dtype=float)[0], x_ref, u_ref, p, t0, u_prev)
        z = np.array(self._z_fn(self.pack(x, u), P), dtype=float) if self.soft_algebraic.size else None
        w = self.pack(x, u, self.minimal_slacks(x, z))
        if self.layout.nsh:  # the soft path constraints' smallest slacks
            w[self.layout.sh_idx] = np.maximum(0.0, np.array(self._path_fn(w, P), dtype=float).T)
        return float(self._cost_fn(w, P))

    def path_values(self, x: FloatArray, u: FloatArray, *, p: object = None) -> FloatArray:
        """The path constraints h(x_k, u_k, p_k) (K, nh; feasible: <= 0) of states x (K or K+1, nx) and inputs u
        (K, nu): a prediction (K = N) or a closed loop (any K); p (np,) or (K, np), default the model's p0."""
        u = _validate.array(u, "u").reshape(-1, self.nu) if self.nu else np.zeros((0, 0))
        K = u.shape[0]
        x = _validate.stage_rows(_validate.array(x, "x")[:K], K, self.nx, "x (its first K rows)")
        pk = _validate.stage_rows(self.model.p0 if p is None else p, K, self.np, "p") if self.np else np.zeros((K, 0))
        h = self.problem.constraints.path_constraints
        if h is None or K == 0:
            return np.zeros((K, 0))
        xs, us, ps = ca.SX.sym("x", self.nx), ca.SX.sym("u", self.nu), ca.SX.sym("p", self.np)
        f = ca.Function("h", [xs, us, ps], [ca.vec(ca.SX(h(xs, us, ps)))], ["x", "u", "p"], ["h"])
        return np.array(f.map(K)(x.T, u.T, pk.T), dtype=float).T.reshape(K, -1)
