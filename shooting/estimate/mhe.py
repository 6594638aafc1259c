"""`MHE`: moving-horizon estimation, the full-information NLP over a window with the EKF's arrival cost.

Rawlings, Mayne and Diehl, "Model Predictive Control: Theory, Computation,
and Design", 2nd ed., 2017, ch. 4. While the window holds every sample since
the prior (x0, P0), the estimate is the full-information one. Once the
window holds `horizon` samples, each new sample drops the oldest: the prior
of the window's new first state is the EKF's update of the old prior
(x_bar, P) with the dropped input and measurement (the filtering update of
the arrival cost, Rawlings et al. sec. 4.3), the same Function as `EKF`'s.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.estimate.kalman import ekf_update, ekf_update_function, evaluate
from shooting.estimate.measurement import MeasurementFunction
from shooting.estimate.mhe_nlp import WindowNLP, WindowSolution
from shooting.estimate.problem import EstimationProblem, Sample, SensorsView
from shooting.model import Model
from shooting.tableaus.tableau import ButcherTableau

__all__ = ["MAX_HORIZON", "MHE"]

FloatArray = npt.NDArray[np.float64]

#: The longest window: an NLP per window length is built while the window fills.
MAX_HORIZON = 1000


class MHE(SensorsView):
    """Moving-horizon estimator: the full-information cost over the last `horizon` samples, solved by IPOPT.

    Over the window's states x_0..x_M (M <= horizon intervals, x_M the newest) it minimises ::

        |x_0 - x_bar|^2_{P^-1} + sum_j |w_j|^2_{Q^-1} + sum_j |y_{j+1} - h(x_{j+1}, u_j, p)|^2_{R^-1}

    subject to x_{j+1} = F(x_j, u_j, p, t_j, dt) + w_j (multiple shooting; F the chosen tableau's step) and the
    model's state bounds x_min <= x_j <= x_max, taken as hard bounds (`shooting.estimate.mhe_nlp`). While the
    window holds every sample it is the full-information estimator from the prior (x0, P0); once full, the prior
    (x_bar, P) of its first state is the EKF's update of the arrival cost. IPOPT is warm-started from the last
    solution shifted by one interval (primal and dual).

    Parameters
    ----------
    model : Model
    measurement : callable ``(x, u, p) -> casadi.SX`` or None
        The sensors (as for `EKF`); None: the model's default sensors.
    horizon : int
        The window's length N in samples (intervals), 1..`MAX_HORIZON`.
    Q : array_like, shape (nx, nx) or (nx,)
        Covariance of the process noise (positive semi-definite; a singular Q keeps the noise in its range).
    R : array_like, shape (ny, ny) or (ny,)
        Covariance of the measurement noise (positive definite).
    x0 : array_like, shape (nx,), optional
        The prior's mean at the first sample's start (default ``model.x0``).
    P0 : array_like, shape (nx, nx) or (nx,), optional
        The prior's covariance (positive definite; default the identity).
    method : str or ButcherTableau, default "rk4"
    steps : int, default 1
    dt : float, optional
        Sampling time (default ``model.dt``).
    check_observability : bool, default True
        As for `EKF`.
    solver_options : mapping, optional
        IPOPT options over `shooting.estimate.mhe_nlp.MHE_IPOPT_OPTIONS` (``"ipopt.tol"``: 1e-10).

    Attributes
    ----------
    x_hat : ndarray, shape (nx,)
        The newest state's estimate (the prior's mean before the first update).
    P : ndarray, shape (nx, nx)
        The arrival cost's covariance (of the window's first state).
    x_prior : ndarray, shape (nx,)
        The arrival cost's mean.
    window_states : ndarray, shape (M+1, nx)
        The last solution's states over the window, oldest first.
    update_function : casadi.Function
        The EKF update of the arrival cost (`EKF.update_function`'s form).
    measurement_function : casadi.Function
        ``h(x, u, p) -> y``.
    last_success : bool
    last_status : str
        IPOPT's return status of the last update.
    last_iterations : int
    last_corrected : bool
        Whether the last sample measured every sensor.

    Raises
    ------
    ValueError
        As `EKF`, and a horizon that is not an integer in 1..`MAX_HORIZON`.
    """

    def __init__(self, model: Model, measurement: MeasurementFunction | None, horizon: int, *, Q: npt.ArrayLike,
                 R: npt.ArrayLike, x0: npt.ArrayLike | None = None, P0: npt.ArrayLike | None = None,
                 method: str | ButcherTableau = "rk4", steps: int = 1, dt: float | None = None,
                 check_observability: bool = True, solver_options: Mapping[str, Any] | None = None) -> None:
        self.horizon = _validate.integer(horizon, "horizon", minimum=1, maximum=MAX_HORIZON)
        if solver_options is not None and not isinstance(solver_options, Mapping):
            raise ValueError(f"solver_options must be a dict of IPOPT options, got {type(solver_options).__name__}")
        self.problem = EstimationProblem("MHE", model, measurement, Q=Q, R=R, x0=x0, P0=P0, method=method,
                                         steps=steps, dt=dt, check_observability=check_observability)
        self.model, self.solver_options = model, dict(solver_options or {})
        self.update_function = ekf_update_function(self.problem,
                                                   _validate.sanitized_identifier(f"{model.name}_mhe_arrival"))
        self._nlps: dict[int, WindowNLP] = {}
        self.reset()

    def reset(self, x0: npt.ArrayLike | None = None, P0: npt.ArrayLike | None = None) -> None:
        """Forget every sample and start again from a prior: `x0`, `P0`, or the constructor's where not given.

        Parameters
        ----------
        x0 : array_like, shape (nx,), optional
        P0 : array_like, shape (nx, nx) or (nx,), optional
        """
        self.x_prior, self.P = self.problem.prior(x0, P0)
        self._z: FloatArray | None = self.model.z0.copy() if self.model.nz else None
        self._samples: list[Sample] = []
        self._solution: WindowSolution | None = None
        self.x_hat = self.x_prior.copy()
        self.window_states = self.x_prior.reshape(1, -1).copy()
        self.last_success, self.last_status, self.last_iterations = True, "", 0
        self.last_corrected = True

    def update(self, y: npt.ArrayLike, u: npt.ArrayLike, t: float = 0.0,
               p: npt.ArrayLike | None = None) -> tuple[FloatArray, FloatArray]:
        """Add the sample (u held over [t, t + dt], y at its end), move the window, solve it.

        Parameters
        ----------
        y : array_like, shape (ny,)
            NaN entries are not measured (left out of the cost, with a `MissingMeasurementWarning`).
        u : array_like, shape (nu,)
        t : float, default 0.0
            The interval's start.
        p : array_like, shape (np,), optional
            Model parameters over the interval (default ``model.p0``).

        Returns
        -------
        x_hat : ndarray, shape (nx,)
            The newest state's estimate.
        P : ndarray, shape (nx, nx)
            The arrival cost's covariance.

        Raises
        ------
        ValueError
            y, u or p of the wrong size, an infinite y, a non-finite u.
        """
        sample = self.problem.sample(y, u, t, p)
        guess, lam_x, lam_g = self._advance(sample)
        nlp = self._nlp(len(self._samples))
        found = nlp.solve(nlp.parameters(self.x_prior, self.P, self._samples), guess, lam_x, lam_g)
        if not np.isfinite(found.w).all():
            found = WindowSolution(guess, np.zeros_like(guess), np.zeros(nlp.length * self.model.nx), False,
                                   found.status, found.iterations)
        if not found.success:
            warnings.warn(f"MHE at t = {sample.t:g}: IPOPT ended with {found.status} after {found.iterations} "
                          f"iterations; the estimate is its last iterate", RuntimeWarning, stacklevel=2)
        self._solution = found
        # (IPOPT relaxes bounds by ~1e-8: the estimates are put back inside them)
        self.window_states = np.clip(nlp.layout.unpack_w(found.w)[0], self.model.x_min, self.model.x_max)
        self.x_hat = self.window_states[-1].copy()
        self.last_success, self.last_status, self.last_iterations = found.success, found.status, found.iterations
        self.last_corrected = bool((sample.valid > 0).all())
        return self.x_hat.copy(), self.P.copy()

    def _advance(self, sample: Sample) -> tuple[FloatArray, FloatArray | None, FloatArray | None]:
        """Append `sample`, the oldest dropped into the arrival cost when the window is full; the next solve's
        guess (the last solution, shifted when the window moved, and the newest state predicted) and, when the
        window moved, the shifted multipliers."""
        previous, lam_x, lam_g = self._solution, None, None
        r = self._nlp(1).G.shape[1]
        if previous is None:
            states, noises = self.x_prior.reshape(1, -1), np.zeros((0, r))
        elif len(self._samples) < self.horizon:
            states, noises = self._nlp(len(self._samples)).layout.unpack_w(previous.w)
        else:
            oldest = self._samples.pop(0)
            out = ekf_update(self.update_function, self.problem, self.x_prior, self.P, self._z, oldest)
            self.x_prior, self.P = out["x_hat"], out["P_hat"]
            self._z = out["z"] if self.model.nz else None
            w, lam_x, lam_g = self._nlp(self.horizon).shift(previous)
            states, noises = self._nlp(self.horizon).layout.unpack_w(w)
            states, noises = states[:-1], noises[:-1]  # (the repeated last stage: replaced below)
        self._samples.append(sample)
        x_next = self._predict(states[-1], sample)
        guess = self._nlp(len(self._samples)).layout.pack_w(np.vstack([states, x_next]),
                                                            np.vstack([noises, np.zeros((1, r))]))
        return guess, lam_x, lam_g

    def _predict(self, x: FloatArray, sample: Sample) -> FloatArray:
        """The step from `x` over the sample's interval (the guess of the newest state)."""
        args: dict[str, Any] = {"x": x, "u": sample.u, "p": sample.p, "t0": sample.t, "dt": self.problem.dt}
        if self.model.nz:
            args["z0"] = self.model.z0
        x_next = evaluate(self.problem.step, **args)["x_next"].reshape(-1)
        return x_next if np.isfinite(x_next).all() else x.copy()

    def _nlp(self, length: int) -> WindowNLP:
        """The NLP of a window of `length` intervals, built on first use."""
        if length not in self._nlps:
            self._nlps[length] = WindowNLP(self.problem, length, self.solver_options, warm=length == self.horizon)
        return self._nlps[length]

    def __repr__(self) -> str:
        return f"MHE(model={self.model.name}, horizon={self.horizon}, ny={self.ny}, dt={self.dt:g})"
