"""`RealTimeMHE`: the moving-horizon estimator as one Gauss-Newton step per sample on the stage-wise QP.

The numpy twin of the MHE's C (`shooting.estimate.rt_mhe_c`): the same CasADi Functions, the same QP, the same
order of operations; the QP solved by `shooting.qp.solve_stage_qp`, the twin of the C's QP.

Kühl, Diehl, Kraus, Schlöder and Bock, "A real-time algorithm for moving horizon state and parameter
estimation", Computers & Chemical Engineering 35 (2011): each sample relinearises the window's cost (that of
`shooting.estimate.mhe`, the arrival cost updated by the EKF as there) at the last estimate shifted by one
interval, its newest state predicted by the step, and takes one full Gauss-Newton step by a QP that keeps the
state bounds; the last sample's QP, one stage on, predicts the active set (`shooting.qp.shortcut`: one Newton
step where it holds, the interior point from cold where not). On a linear model with linear sensors that step is
the MHE's exact minimiser.

The window's states x_0..x_M and noises xi_0..xi_{M-1} (w_j = G xi_j, G G' = Q) are the stage-wise QP's
(`shooting.qp.stage_qp`) with N = horizon + 1 stages, nx states and nx inputs, x_0 of the QP fixed at 0:

- stage 0: the QP's input is dx_0, the first state's step (x_1 of the QP = u_0), priced by the arrival cost:
  R_0 = P^-1, r_0 = P^-1 (x_0 - x_bar);
- d = horizon - M stages that hold it unchanged while the window fills (A = I, B = 0: the full-information
  estimator's window, at a fixed size);
- interval j at stage d + 1 + j: x_{j+1} = A_j x_j + [G 0] v + (F(x_j) + G xi_j - x_{j+1}), v's cost
  1/2 |xi_j + v|^2 (the padded inputs' |v|^2 keeps them zero);
- the measurement y_j on x_j (j >= 1): Q = H' W H, q = -H' W (y_j - h(x_j)), W the inverse of R on the rows
  measured (zero on missing ones), H = dh/dx at x_j;
- the model's finite state bounds on every state, relative to the linearisation point.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.estimate.kalman import cholesky_solve, ekf_update_function
from shooting.estimate.measurement import MeasurementFunction
from shooting.estimate.mhe_nlp import noise_factor
from shooting.estimate.problem import EstimationProblem, Sample, SensorsView
from shooting.model import Model
from shooting.qp import OCP_QP_STATUS, OCP_QP_TOLERANCES, StageQP, StageQPResult, shifted_result, solve_stage_qp
from shooting.tableaus.tableau import ButcherTableau

__all__ = ["FAILED", "QP_MAX_ITERATIONS", "Evaluator", "QPSolver", "RealTimeMHE", "WindowFunctions", "exact_values",
           "window_functions", "window_qp"]

FloatArray = npt.NDArray[np.float64]

class QPSolver(Protocol):
    """What `RealTimeMHE` calls to solve its QP (`shooting.qp.solve_stage_qp`'s form)."""

    def __call__(self, qp: StageQP, *, max_iter: int, tolerances: dict[str, float],
                 warm: StageQPResult | None, shortcut_only: bool) -> StageQPResult: ...


#: The status of a sample whose arrival cost's update or model functions failed (the C's ``NAME_FAILED``).
FAILED = 6

#: The QP's iteration limit per sample (the C's too). The interior point takes 5-8 iterations on the built-in
#: models' windows; at the limit its last iterate (inside the bounds) is the step: the float build's stationarity
#: can stall above its tolerance on a window whose velocities only the prior sees (cart-pole, first sample).
QP_MAX_ITERATIONS = 30


@dataclass(frozen=True, eq=False)
class WindowFunctions:
    """The named SX Functions of one sample's QP (the C's ``NAME_dyn``, ``NAME_meas``, ``NAME_prior``,
    ``NAME_arrival``).

    Attributes
    ----------
    dyn : casadi.Function
        ``(x, u, p, t, dt[, z0]) -> (x_next (nx), A (nx, nx))``: the step and its exact Jacobian.
    meas : casadi.Function
        ``(x, u, p, y, valid) -> (Qm (nx, nx), qm (nx))``: a measurement's Gauss-Newton blocks.
    prior : casadi.Function
        ``(P (nx, nx), x (nx), x_bar (nx)) -> (P_inv (nx, nx), g (nx))``: the arrival cost's blocks.
    arrival : casadi.Function
        The EKF's update of the arrival cost (`shooting.estimate.kalman.ekf_update_function`).
    G : ndarray, shape (nx, nx)
        The noise's factor, padded with zero columns to nx.
    """

    dyn: ca.Function
    meas: ca.Function
    prior: ca.Function
    arrival: ca.Function
    G: FloatArray


def window_functions(problem: EstimationProblem, name: str) -> WindowFunctions:
    """The Functions of `problem`'s window QP, named ``name_dyn`` etc."""
    model, nx, ny = problem.model, problem.model.nx, problem.ny
    x, u, p = ca.SX.sym("x", nx), ca.SX.sym("u", model.nu), ca.SX.sym("p", model.np)
    t, dt = ca.SX.sym("t"), ca.SX.sym("dt")
    z0 = [ca.SX.sym("z0", model.nz)] if model.nz else []
    step = problem.step.call({"x": x, "u": u, "p": p, "t0": t, "dt": dt, **({"z0": z0[0]} if z0 else {})})
    dyn = ca.Function(f"{name}_dyn", [x, u, p, t, dt, *z0], [step["x_next"], ca.densify(step["A"])],
                      ["x", "u", "p", "t", "dt", *(["z0"] if z0 else [])], ["x_next", "A"])
    y, valid = ca.SX.sym("y", ny), ca.SX.sym("valid", ny)
    h = problem.h(x, u, p)
    H = ca.jacobian(h, x)
    # the weight of the measured rows: the inverse of R's block on them, zero on the missing ones (R's rows and
    # columns of a missing sensor replaced by the identity's, inverted, masked again)
    M = ca.diag(valid)
    W = M @ cholesky_solve(M @ ca.DM(problem.R) @ M + ca.diag(1 - valid), M)
    W = (W + W.T) / 2
    meas = ca.Function(f"{name}_meas", [x, u, p, y, valid], [ca.densify(H.T @ W @ H), ca.densify(-H.T @ W @ (y - h))],
                       ["x", "u", "p", "y", "valid"], ["Qm", "qm"])
    P, x_bar = ca.SX.sym("P", nx, nx), ca.SX.sym("x_bar", nx)
    P_inv = cholesky_solve((P + P.T) / 2, ca.SX.eye(nx))
    P_inv = (P_inv + P_inv.T) / 2
    prior = ca.Function(f"{name}_prior", [P, x, x_bar], [ca.densify(P_inv), ca.densify(P_inv @ (x - x_bar))],
                        ["P", "x", "x_bar"], ["P_inv", "g"])
    G = noise_factor(problem.Q)
    padded = np.zeros((nx, nx))
    padded[:, :G.shape[1]] = G
    return WindowFunctions(dyn, meas, prior, ekf_update_function(problem, f"{name}_arrival"), padded)


#: How the twin evaluates a Function: ``(F, args) -> outputs`` (dense arrays in the outputs' shapes).
Evaluator = Callable[[ca.Function, list[Any]], list[FloatArray]]


def exact_values(F: ca.Function, args: list[Any]) -> list[FloatArray]:
    """`F` at numbers by CasADi (double), its outputs dense in their shapes (the twin's `Evaluator`)."""
    return [np.array(v, dtype=float) for v in F.call([ca.DM(np.asarray(a, dtype=float)) for a in args])]


def window_qp(problem: EstimationProblem, fns: WindowFunctions, horizon: int, states: FloatArray,
              noises: FloatArray, samples: list[Sample], x_bar: FloatArray, P: FloatArray,
              evaluate: Evaluator = exact_values) -> StageQP:
    """The Gauss-Newton QP of a window at (`states` (M+1, nx), `noises` (M, nx)) (module docstring)."""
    model, nx = problem.model, problem.model.nx
    M, N = len(samples), horizon + 1
    d = horizon - M
    A, B, b = np.zeros((N, nx, nx)), np.zeros((N, nx, nx)), np.zeros((N, nx))
    Qs, Rs, q, r = np.zeros((N + 1, nx, nx)), np.tile(np.eye(nx), (N, 1, 1)), np.zeros((N + 1, nx)), np.zeros((N, nx))
    B[0] = np.eye(nx)
    P_inv, g = evaluate(fns.prior, [P, states[0], x_bar])
    Rs[0], r[0] = P_inv, g.reshape(-1)
    A[1:d + 1] = np.eye(nx)
    z0 = [model.z0] if model.nz else []
    for j, s in enumerate(samples):
        k = d + 1 + j
        x_next, A_j = evaluate(fns.dyn, [states[j], s.u, s.p, s.t, problem.dt, *z0])
        A[k], B[k] = A_j, fns.G
        b[k] = x_next.reshape(-1) + fns.G @ noises[j] - states[j + 1]
        r[k] = noises[j]
        Qm, qm = evaluate(fns.meas, [states[j + 1], s.u, s.p, s.y, s.valid])
        Qs[k + 1], q[k + 1] = Qm, qm.reshape(-1)
    idx = [i for i in range(nx) if np.isfinite(model.x_min[i]) or np.isfinite(model.x_max[i])]
    lin = np.vstack([np.repeat(states[:1], d + 1, axis=0), states[1:]])  # (the point of x_1..x_N of the QP)
    return StageQP(A=A, B=B, b=b, Q=Qs[:N], R=Rs, Q_N=Qs[N], x0=np.zeros(nx), S=np.zeros((N, nx, nx)), q=q, r=r,
                   idxbx=idx, lbx=model.x_min[idx] - lin[:, idx], ubx=model.x_max[idx] - lin[:, idx],
                   soft_bx=[False] * len(idx))


class RealTimeMHE(SensorsView):
    """The MHE of `shooting.MHE`'s cost, one Gauss-Newton QP step per sample: the numpy twin of its C.

    Parameters
    ----------
    model, measurement, horizon, Q, R, x0, P0, method, steps, dt, check_observability
        As `shooting.MHE`.

    Attributes
    ----------
    x_hat : ndarray, shape (nx,)
        The newest state's estimate.
    P, x_prior : ndarray
        The arrival cost's covariance (nx, nx) and mean (nx,).
    window_states : ndarray, shape (M+1, nx)
    functions : WindowFunctions
    last_status : int
        The last QP's status (`shooting.qp.OCP_QP_STATUS`): 0 optimal, or 1 the iteration limit, whose last
        iterate is taken; any other keeps the window's prediction. `FAILED` when the arrival cost's update was
        not finite: its prior is kept and the window moves on (the next sample is ordinary again).
    last_iterations : int
    qp_tolerances : dict
        The QP's stopping tolerances (`shooting.qp.OCP_QP_TOLERANCES`; the double build's by default).
    qp_iterations_short : int
        0; k > 0 stops each QP k iterations before it would (the export's check: how far a solve that stops
        an iteration apart from another moves the estimate).
    qp_solver : callable ``(qp, *, max_iter, tolerances) -> StageQPResult`` or None
        The QP solver (None: `shooting.qp.solve_stage_qp`; the export's float check: the QP solver's float
        build, `shooting.qp.host.HostOCPQP`).
    function_evaluator : callable ``(F, args) -> outputs``
        How the window's Functions are evaluated (`exact_values`; the export's check: Monte-Carlo arithmetic at
        the C's precision, `shooting.codegen.rounding.monte_carlo_call`).
    qp_perturbation : callable ``StageQP -> StageQP`` or None
        Applied to each QP before its solve (the export's check: the data perturbed at the unit roundoff stand
        for a backward-stable solver's rounding).
    """

    def __init__(self, model: Model, measurement: MeasurementFunction | None, horizon: int, *, Q: npt.ArrayLike,
                 R: npt.ArrayLike, x0: npt.ArrayLike | None = None, P0: npt.ArrayLike | None = None,
                 method: str | ButcherTableau = "rk4", steps: int = 1, dt: float | None = None,
                 check_observability: bool = True) -> None:
        problem = EstimationProblem("MHE", model, measurement, Q=Q, R=R, x0=x0, P0=P0, method=method, steps=steps,
                                    dt=dt, check_observability=check_observability)
        self._setup(problem, horizon)

    @classmethod
    def of(cls, problem: EstimationProblem, horizon: int,
           functions: WindowFunctions | None = None) -> RealTimeMHE:
        """The real-time MHE of an estimator's validated problem (`shooting.MHE.problem`) and window; `functions`
        (another twin's of the same problem) are shared instead of built again."""
        self = cls.__new__(cls)
        self._setup(problem, horizon, functions)
        return self

    def fresh(self) -> RealTimeMHE:
        """A new twin of the same problem and window, from the prior, its Functions shared (not built again)."""
        return RealTimeMHE.of(self.problem, self.horizon, self.functions)

    def _setup(self, problem: EstimationProblem, horizon: int, functions: WindowFunctions | None = None) -> None:
        from shooting.estimate.mhe import MAX_HORIZON

        self.horizon = _validate.integer(horizon, "horizon", minimum=1, maximum=MAX_HORIZON)
        self.problem, self.model = problem, problem.model
        self.functions = functions or window_functions(
            problem, _validate.sanitized_identifier(f"{problem.model.name}_mhe"))
        self.update_function = self.functions.arrival
        self.qp_tolerances = dict(OCP_QP_TOLERANCES["double"])
        self.qp_iterations_short = 0
        self.qp_perturbation: Callable[[StageQP], StageQP] | None = None
        self.qp_solver: QPSolver | None = None
        self.function_evaluator: Evaluator = exact_values
        self.reset()

    def reset(self, x0: npt.ArrayLike | None = None, P0: npt.ArrayLike | None = None) -> None:
        """Forget every sample; the prior `x0`, `P0` (default the constructor's)."""
        self.x_prior, self.P = self.problem.prior(x0, P0)
        self._z: FloatArray | None = self.model.z0.copy() if self.model.nz else None
        self._samples: list[Sample] = []
        self.window_states = self.x_prior.reshape(1, -1).copy()
        self._noises = np.zeros((0, self.model.nx))
        self._last_qp: StageQPResult | None = None
        self.x_hat = self.x_prior.copy()
        self.last_status, self.last_iterations, self.last_corrected = 0, 0, True

    def update(self, y: npt.ArrayLike, u: npt.ArrayLike, t: float = 0.0,
               p: npt.ArrayLike | None = None) -> tuple[FloatArray, FloatArray]:
        """Add the sample, move the window, take one Gauss-Newton step (as `shooting.MHE.update`).

        Returns
        -------
        x_hat : ndarray, shape (nx,)
        P : ndarray, shape (nx, nx)
            The arrival cost's covariance.
        """
        sample = self.problem.sample(y, u, t, p)
        states, noises = self.window_states, self._noises
        arrival_failed = False
        if len(self._samples) == self.horizon:
            arrival_failed = not self._drop_oldest()
            states, noises = states[1:], noises[1:]
        self._samples.append(sample)
        z0 = [self.model.z0] if self.model.nz else []
        x_next = self.function_evaluator(self.functions.dyn,
                                         [states[-1], sample.u, sample.p, sample.t, self.problem.dt, *z0])[0]
        states = np.vstack([states, x_next.reshape(1, -1)])
        noises = np.vstack([noises, np.zeros((1, self.model.nx))])
        qp = window_qp(self.problem, self.functions, self.horizon, states, noises, self._samples, self.x_prior,
                       self.P, self.function_evaluator)
        if self.qp_perturbation is not None:
            qp = self.qp_perturbation(qp)
        solve = self.qp_solver or solve_stage_qp
        # warm: the last QP's multipliers and slacks one stage on (whether the window filled or moved, the stage
        # of each state is one less than it was) serve the shortcut (`shooting.qp.shortcut`: the active set they
        # predict, one Newton step when it holds); when it does not, the interior point starts cold (a warm one
        # took more iterations than a cold one on the cart-pole held at its bound: 9-11 against 5-9)
        warm = None if self._last_qp is None else shifted_result(self._last_qp, qp.sizes)
        found = solve(qp, max_iter=QP_MAX_ITERATIONS, tolerances=self.qp_tolerances, warm=warm,
                      shortcut_only=True)
        if self.qp_iterations_short and found.iterations > 1:
            found = solve(qp, max_iter=max(found.iterations - self.qp_iterations_short, 1),
                          tolerances=self.qp_tolerances, warm=warm, shortcut_only=True)
        self.last_status, self.last_iterations = found.status, found.iterations
        if arrival_failed and found.status in (0, 1):
            self.last_status = FAILED
        M, d = len(self._samples), self.horizon - len(self._samples)
        taken = found.status in (0, 1) and np.isfinite(found.x).all() and np.isfinite(found.u).all()
        self._last_qp = found if taken else None
        if taken:
            states = states + found.x[d + 1:]
            noises = noises + found.u[d + 1:]
        self.window_states = np.clip(states, self.model.x_min, self.model.x_max)
        self._noises = noises
        assert self.window_states.shape[0] == M + 1
        self.x_hat = self.window_states[-1].copy()
        self.last_corrected = bool((sample.valid > 0).all())
        return self.x_hat.copy(), self.P.copy()

    def _drop_oldest(self) -> bool:
        """The oldest sample leaves the window: the arrival cost's EKF update with it (the C's
        ``NAME_drop_oldest``). False when the update is not finite: the prior is kept (the window moves on)."""
        oldest = self._samples.pop(0)
        z = [self.model.z0 if self._z is None else self._z] if self.model.nz else []
        outs = self.function_evaluator(self.update_function, [
            self.x_prior, self.P, oldest.u, oldest.y, oldest.valid, oldest.p, oldest.t, self.problem.dt, *z])
        out = dict(zip(self.update_function.name_out(), outs, strict=True))
        if not (np.isfinite(out["x_hat"]).all() and np.isfinite(out["P_hat"]).all()):
            return False
        self.x_prior, self.P = np.reshape(out["x_hat"], -1), np.asarray(out["P_hat"], dtype=float)
        self._z = np.reshape(out["z"], -1) if self.model.nz else None
        return True

    @property
    def last_message(self) -> str:
        """The last QP's status in words."""
        return OCP_QP_STATUS.get(self.last_status, f"status {self.last_status}")

    def __repr__(self) -> str:
        return f"RealTimeMHE(model={self.model.name}, horizon={self.horizon}, ny={self.ny}, dt={self.dt:g})"
