"""`EKF`: the extended Kalman filter on the chosen tableau's step and its exact A.

The maths is one CasADi SX Function (`shooting.estimate.kalman`), exposed as
``EKF.update_function`` with named inputs and outputs so that it can be
turned into C as it is; this class only holds the estimate between samples
and checks each sample's data.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.estimate.kalman import ekf_update, ekf_update_function
from shooting.estimate.measurement import MeasurementFunction
from shooting.estimate.problem import EstimationProblem, SensorsView
from shooting.model import Model
from shooting.tableaus.tableau import ButcherTableau

__all__ = ["EKF"]

FloatArray = npt.NDArray[np.float64]


class EKF(SensorsView):
    """Extended Kalman filter: predict with the model's step over dt, correct with the sensors (Joseph form).

    Process and sensors (`shooting.estimate.problem`)::

        x_{k+1} = F(x_k, u_k, p, t_k, dt) + w_k,   w_k ~ N(0, Q)
        y_{k+1} = h(x_{k+1}, u_k, p) + v_{k+1},    v_{k+1} ~ N(0, R)

    with F the chosen tableau's step (any tableau, implicit ones and models
    with algebraic states included) and its exact A = dF/dx from
    `shooting.build_integrator`; the prior at the first sample's start is
    x_0 ~ N(x0, P0). Each `update` predicts from the last estimate with the
    input held over the interval, then corrects with the measurement at its
    end; the covariance update is Joseph's, symmetrised (stays symmetric
    positive definite in float). A NaN in y skips those sensors' correction
    (a `MissingMeasurementWarning`, ``last_corrected = False``); an estimate
    is never NaN.

    Parameters
    ----------
    model : Model
    measurement : callable ``(x, u, p) -> casadi.SX`` or None
        The sensors: an SX column of ny rows in x (nx, 1), u (nu, 1), p (np, 1) only, written as
        ``path_constraints`` are; None: the model's default sensors (the ``measurement`` of its file,
        `shooting.estimate.default_measurement`).
    Q : array_like, shape (nx, nx) or (nx,)
        Covariance of the additive process noise w_k (symmetric positive semi-definite).
    R : array_like, shape (ny, ny) or (ny,)
        Covariance of the measurement noise v_k (symmetric positive definite).
    x0 : array_like, shape (nx,), optional
        The prior's mean at the first sample's start (default ``model.x0``).
    P0 : array_like, shape (nx, nx) or (nx,), optional
        The prior's covariance (symmetric positive definite; default the identity).
    method : str or ButcherTableau, default "rk4"
        The step's tableau (`shooting.tableau_names`).
    steps : int, default 1
        Substeps per sampling interval.
    dt : float, optional
        Sampling time (default ``model.dt``).
    check_observability : bool, default True
        Refuse sensors whose linearisation at (x0, model.u0, model.p0) is not observable (the rank of
        [H; H A; ...; H A^(nx-1)]), naming the states they cannot see.

    Attributes
    ----------
    update_function : casadi.Function
        The whole update, ``(x, P, u, y, valid, p, t, dt[, z0]) -> (x_hat, P_hat, e, S[, z])``
        (`shooting.estimate.kalman.ekf_update_function`): what `update` evaluates, and what a C export emits.
    measurement_function : casadi.Function
        ``h(x, u, p) -> y``.
    x_hat : ndarray, shape (nx,)
        The current estimate (the prior before the first update).
    P : ndarray, shape (nx, nx)
        Its covariance.
    last_corrected : bool
        Whether the last update used every sensor (False: some were NaN and only predicted).
    last_valid : ndarray of bool, shape (ny,)
        Which sensors the last update used.
    innovation : ndarray, shape (ny,)
        The last update's y - h(x-) (0 for missing sensors).
    innovation_covariance : ndarray, shape (ny, ny)
        Its covariance S.
    ny : int
    dt : float
    sensors : tuple of str
        A label per measured row.

    Raises
    ------
    ValueError
        A model that is not a `Model`, a bad measurement, Q, R, x0 or P0 (wrong size, not symmetric, not
        positive (semi-)definite, not finite), no dt, or unobservable sensors.
    """

    def __init__(self, model: Model, measurement: MeasurementFunction | None, *, Q: npt.ArrayLike,
                 R: npt.ArrayLike, x0: npt.ArrayLike | None = None, P0: npt.ArrayLike | None = None,
                 method: str | ButcherTableau = "rk4", steps: int = 1, dt: float | None = None,
                 check_observability: bool = True) -> None:
        self.problem = EstimationProblem("EKF", model, measurement, Q=Q, R=R, x0=x0, P0=P0, method=method,
                                         steps=steps, dt=dt, check_observability=check_observability)
        self.model = model
        self.update_function = ekf_update_function(self.problem,
                                                   _validate.sanitized_identifier(f"{model.name}_ekf_update"))
        self.x_hat, self.P = self.problem.x0.copy(), self.problem.P0.copy()
        self.z: FloatArray | None = model.z0.copy() if model.nz else None
        self.last_corrected = True
        self.last_valid = np.ones(self.ny, dtype=bool)
        self.innovation = np.zeros(self.ny)
        self.innovation_covariance = np.zeros((self.ny, self.ny))

    def update(self, y: npt.ArrayLike, u: npt.ArrayLike, t: float = 0.0,
               p: npt.ArrayLike | None = None) -> tuple[FloatArray, FloatArray]:
        """Predict from the last estimate with input `u` over [t, t + dt], then correct with `y` at its end.

        Parameters
        ----------
        y : array_like, shape (ny,)
            The measurement at t + dt; NaN entries are not measured (their correction is skipped, with a
            `MissingMeasurementWarning`).
        u : array_like, shape (nu,)
            The input held over the interval.
        t : float, default 0.0
            The interval's start (for time-varying models).
        p : array_like, shape (np,), optional
            Model parameters (default ``model.p0``).

        Returns
        -------
        x_hat : ndarray, shape (nx,)
        P : ndarray, shape (nx, nx)
            Symmetric positive definite.

        Raises
        ------
        ValueError
            y, u or p of the wrong size, an infinite y, a non-finite u, or a non-finite prediction (the
            estimate is then left as it was).
        """
        sample = self.problem.sample(y, u, t, p)
        out = ekf_update(self.update_function, self.problem, self.x_hat, self.P, self.z, sample)
        self.x_hat, self.P = out["x_hat"], out["P_hat"]
        self.z = out["z"] if self.model.nz else None
        self.last_valid = sample.valid > 0
        self.last_corrected = bool(self.last_valid.all())
        self.innovation, self.innovation_covariance = out["e"], out["S"]
        return self.x_hat.copy(), self.P.copy()

    def reset(self, x0: npt.ArrayLike | None = None, P0: npt.ArrayLike | None = None) -> None:
        """Start again from a prior: `x0`, `P0`, or the constructor's where not given.

        Parameters
        ----------
        x0 : array_like, shape (nx,), optional
        P0 : array_like, shape (nx, nx) or (nx,), optional
        """
        self.x_hat, self.P = self.problem.prior(x0, P0)
        self.z = self.model.z0.copy() if self.model.nz else None
        self.last_corrected, self.last_valid = True, np.ones(self.ny, dtype=bool)

    def __repr__(self) -> str:
        return f"EKF(model={self.model.name}, ny={self.ny}, dt={self.dt:g})"
