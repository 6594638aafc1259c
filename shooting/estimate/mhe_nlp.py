"""The MHE's window as a multiple-shooting NLP for IPOPT (Rawlings, Mayne and Diehl, "Model Predictive Control:
Theory, Computation, and Design", 2nd ed., 2017, ch. 4: full information and moving horizon estimation).

Over a window of M intervals with inputs u_0..u_{M-1} and measurements
y_1..y_M (y_j taken at the end of interval j-1)::

    min   |x_0 - x_bar|^2_{P^-1} + sum_{j<M} |xi_j|^2 + sum_{j=1..M} |y_j - h(x_j, u_{j-1}, p_{j-1})|^2_{W_j}
    s.t.  x_{j+1} = F(x_j, u_j, p_j, t_j, dt) + G xi_j,    j = 0..M-1
          x_min <= x_j <= x_max,                          j = 0..M

with Q = G G' (G from Q's eigenvectors and the square roots of its positive
eigenvalues, so w_j = G xi_j has covariance Q and |xi_j|^2 = |w_j|^2_{Q^-1}
for a definite Q; a semi-definite Q keeps the noise in its range), and W_j
the inverse of R on the rows measured at that sample (zero on missing ones).
(x_bar, P) is the arrival cost's prior of the window's first state. The
decision vector interleaves states and noises as the OCP's does,
[x_0, xi_0, x_1, ..., x_M] (`shooting.mpc.layout.ShootingLayout` with the
noise in the inputs' place), and g stacks the dynamics' defects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _solver_call, _validate
from shooting.estimate.problem import EstimationProblem, Sample
from shooting.integrate.integrator import build_integrator
from shooting.mpc.layout import ShootingLayout
from shooting.mpc.solvers import DEFAULT_IPOPT_OPTIONS, WARM_START_OPTIONS

__all__ = ["MHE_IPOPT_OPTIONS", "WindowNLP", "WindowSolution", "noise_factor"]

FloatArray = npt.NDArray[np.float64]

#: IPOPT's options for the MHE (tight: the estimate is the NLP's minimiser); ``solver_options`` override them.
MHE_IPOPT_OPTIONS: dict[str, object] = {**DEFAULT_IPOPT_OPTIONS, "ipopt.tol": 1e-10, "record_time": False}


def noise_factor(Q: FloatArray) -> FloatArray:
    """G (nx, r) with G G' = Q, r the number of eigenvalues of Q above 1e-14 of its largest."""
    values, vectors = np.linalg.eigh(Q)
    keep = values > 1e-14 * max(float(values.max(initial=0.0)), 1e-300)
    return vectors[:, keep] * np.sqrt(values[keep])


@dataclass(frozen=True, eq=False)
class WindowSolution:
    """One solve of a window: the primal-dual point and how IPOPT ended.

    Parameters
    ----------
    w, lam_x : ndarray, shape (n_w,)
    lam_g : ndarray, shape (M nx,)
    success : bool
    status : str
    iterations : int
    """

    w: FloatArray
    lam_x: FloatArray
    lam_g: FloatArray
    success: bool
    status: str
    iterations: int


class WindowNLP:
    """The NLP of a window of `length` intervals, its bounds, parameters and IPOPT (cold and warm instances).

    Parameters
    ----------
    problem : EstimationProblem
    length : int
        M, the number of intervals (and of measurements) in the window.
    options : mapping, optional
        IPOPT options over `MHE_IPOPT_OPTIONS`.
    warm : bool, default True
        Build the warm-start instance too (only a full window is warm-started).
    """

    def __init__(self, problem: EstimationProblem, length: int, options: Mapping[str, Any] | None = None, *,
                 warm: bool = True) -> None:
        model = problem.model
        self.problem, self.length = problem, length
        self.G = noise_factor(problem.Q)
        self.layout = ShootingLayout(horizon=length, nx=model.nx, nu=self.G.shape[1], np=0)
        w = ca.SX.sym("w", self.layout.n_w)
        params = ca.SX.sym("params", self.n_parameters)
        cost, defects = self._graph(w, params)
        nlp = {"x": w, "p": params, "f": cost, "g": defects}
        opts: dict[str, Any] = {**MHE_IPOPT_OPTIONS, **dict(options or {})}
        self.cold = ca.nlpsol(f"mhe_{length}", "ipopt", nlp, opts)
        self.warm: ca.Function | None = None
        if warm:
            shared = {"grad_f": self.cold.get_function("nlp_grad_f"), "jac_g": self.cold.get_function("nlp_jac_g"),
                      "hess_lag": self.cold.get_function("nlp_hess_l")}
            warm_opts: dict[str, Any] = {**opts, **WARM_START_OPTIONS, **dict(options or {}), **shared}
            self.warm = ca.nlpsol(f"mhe_{length}_warm", "ipopt", nlp, warm_opts)
        lo, hi = np.full(self.layout.n_w, -np.inf), np.full(self.layout.n_w, np.inf)
        lo[self.layout.x_idx], hi[self.layout.x_idx] = model.x_min, model.x_max
        self.lbx, self.ubx = lo, hi

    @property
    def n_parameters(self) -> int:
        """Length of the parameter vector: x_bar, P^-1, and per interval u, y, W, p, t; then dt."""
        nx, nu, ny, n_p = self.problem.model.nx, self.problem.model.nu, self.problem.ny, self.problem.model.np
        return nx + nx * nx + self.length * (nu + ny + ny * ny + n_p + 1) + 1

    def _graph(self, w: ca.SX, params: ca.SX) -> tuple[ca.SX, ca.SX]:
        """The cost and the dynamics' defects of the window (module docstring)."""
        problem, model, M = self.problem, self.problem.model, self.length
        nx, nu, ny, n_p = model.nx, model.nu, problem.ny, model.np
        parts = ca.vertsplit(params, np.cumsum([0, nx, nx * nx, *([nu + ny + ny * ny + n_p + 1] * M), 1]).tolist())
        x_bar, P_inv, stages, dt = parts[0], ca.reshape(parts[1], nx, nx), parts[2:2 + M], parts[-1]
        step = build_integrator(model, problem.method, problem.steps, "none",
                                name=_validate.sanitized_identifier(f"{model.name}_mhe_step"))
        xs, xis = self.layout.states(w), self.layout.inputs(w)
        G = ca.DM(self.G)
        d0 = xs[0] - x_bar
        cost = ca.dot(d0, P_inv @ d0)
        defects = []
        for j in range(M):
            u, y, W, p, t = ca.vertsplit(stages[j], np.cumsum([0, nu, ny, ny * ny, n_p, 1]).tolist())
            args: dict[str, Any] = {"x": xs[j], "u": u, "p": p, "t0": t, "dt": dt,
                                    **({"z0": model.z0} if model.nz else {})}
            x_next = step.call(args)["x_next"]
            defects.append(xs[j + 1] - x_next - G @ xis[j])
            r = y - problem.h(xs[j + 1], u, p)
            cost += ca.dot(xis[j], xis[j]) + ca.dot(r, ca.reshape(W, ny, ny) @ r)
        return cost, ca.vertcat(*defects)

    def parameters(self, x_bar: FloatArray, P: FloatArray, samples: list[Sample]) -> FloatArray:
        """The parameter vector of a window: the prior (x_bar, P) and its `length` samples, oldest first."""
        assert len(samples) == self.length
        R = self.problem.R
        rows: list[Any] = [np.ravel(x_bar), np.ravel(_inverse(P, "the arrival cost's covariance"))]
        for s in samples:
            W = np.zeros_like(R)
            seen = np.flatnonzero(s.valid > 0)
            if seen.size:
                W[np.ix_(seen, seen)] = _inverse(R[np.ix_(seen, seen)], "R")
            rows += [s.u, s.y, W.ravel(order="F"), s.p, [s.t]]
        rows.append([self.problem.dt])
        return np.concatenate([np.asarray(r, dtype=float).reshape(-1) for r in rows])

    def solve(self, params: FloatArray, guess: FloatArray, lam_x: FloatArray | None = None,
              lam_g: FloatArray | None = None) -> WindowSolution:
        """IPOPT from `guess` (warm, with IPOPT's warm-start options, when multipliers are given; a failed warm
        solve is repeated cold from the same guess)."""
        if lam_x is not None and lam_g is not None and self.warm is not None:
            found = self._call(self.warm, params, guess, lam_x, lam_g)
            if found.success:
                return found
        return self._call(self.cold, params, guess, None, None)

    def _call(self, solver: ca.Function, params: FloatArray, guess: FloatArray, lam_x: FloatArray | None,
              lam_g: FloatArray | None) -> WindowSolution:
        args: dict[str, Any] = {"x0": np.clip(guess, self.lbx, self.ubx), "p": params, "lbx": self.lbx,
                                "ubx": self.ubx, "lbg": 0.0, "ubg": 0.0}
        if lam_x is not None and lam_g is not None:
            args.update(lam_x0=lam_x, lam_g0=lam_g)
        with _solver_call.solver_call():
            out = solver(**args)
        stats = solver.stats()
        return WindowSolution(np.array(out["x"], dtype=float).reshape(-1),
                              np.array(out["lam_x"], dtype=float).reshape(-1),
                              np.array(out["lam_g"], dtype=float).reshape(-1), bool(stats.get("success", False)),
                              str(stats.get("return_status", "unknown")), int(stats.get("iter_count", 0)))

    def shift(self, solution: WindowSolution) -> tuple[FloatArray, FloatArray, FloatArray]:
        """A solution of this window moved one interval on (the first dropped, the last repeated): w, lam_x, lam_g.

        The caller replaces the last state by its prediction.
        """
        rows = solution.lam_g.reshape(self.length, -1)
        lam_g = np.vstack([rows[1:], np.zeros_like(rows[:1])]).reshape(-1)
        return self.layout.shift_w(solution.w), self.layout.shift_w(solution.lam_x), lam_g


def _inverse(C: FloatArray, what: str) -> FloatArray:
    """The inverse of a symmetric positive definite matrix by its Cholesky factor, symmetrised."""
    try:
        L = np.linalg.cholesky((C + C.T) / 2)
    except np.linalg.LinAlgError:
        raise ValueError(f"MHE: {what} is not positive definite (it lost definiteness in rounding): reset the "
                         f"estimator with a better-conditioned P0 or larger Q") from None
    L_inv = np.linalg.inv(L)
    inverse = L_inv.T @ L_inv
    return (inverse + inverse.T) / 2
