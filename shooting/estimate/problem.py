"""What an estimator is built from, validated once: model, sensors, noise covariances, prior, step.

The process model is the chosen tableau's step over dt with additive noise,

    x_{k+1} = F(x_k, u_k, p, t_k, dt) + w_k,   w_k ~ N(0, Q),
    y_{k+1} = h(x_{k+1}, u_k, p) + v_{k+1},    v_{k+1} ~ N(0, R),

and the prior at the first sample's start is x_0 ~ N(x0, P0). Both the EKF
and the MHE hold one `EstimationProblem`; it also turns each sample's
``(y, u, p, t)`` into checked arrays, a NaN in y marking that sensor as
missing for this sample (`Sample`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.estimate.measurement import MeasurementFunction, measurement_function, sensor_names
from shooting.estimate.observability import observability
from shooting.integrate.integrator import build_integrator
from shooting.model import Model
from shooting.tableaus.tableau import ButcherTableau

__all__ = ["EstimationProblem", "MissingMeasurementWarning", "Sample", "SensorsView"]

FloatArray = npt.NDArray[np.float64]


class MissingMeasurementWarning(UserWarning):
    """A measurement held NaN: those sensors' correction was skipped for that sample (predicted only).

    Filter it with ``warnings.filterwarnings("ignore", category=MissingMeasurementWarning)``.

    Parameters
    ----------
    message : str
        Names the estimator, the time and the sensors.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)


@dataclass(frozen=True, eq=False)
class Sample:
    """One sample's checked data: the input held over [t, t + dt] and the measurement at its end.

    Parameters
    ----------
    y : ndarray, shape (ny,)
        The measurement, a missing entry (NaN) replaced by 0.
    valid : ndarray, shape (ny,)
        1.0 where the entry was measured, 0.0 where it was NaN.
    u : ndarray, shape (nu,)
    p : ndarray, shape (np,)
    t : float
        Start of the interval.
    """

    y: FloatArray
    valid: FloatArray
    u: FloatArray
    p: FloatArray
    t: float


class EstimationProblem:
    """The validated data of an estimator (EKF or MHE): see the module docstring for the model.

    Parameters
    ----------
    who : str
        ``"EKF"`` or ``"MHE"``, for messages.
    model : Model
    measurement : callable ``(x, u, p) -> SX column`` or None
        None: the model's default sensors (`shooting.estimate.default_measurement`).
    Q : array_like, shape (nx, nx) or (nx,)
        Covariance of the process noise w_k (positive semi-definite).
    R : array_like, shape (ny, ny) or (ny,)
        Covariance of the measurement noise v_k (positive definite).
    x0 : array_like, shape (nx,), optional
        Prior mean at the first sample's start (default ``model.x0``).
    P0 : array_like, shape (nx, nx) or (nx,), optional
        Prior covariance (positive definite; default the identity).
    method : str or ButcherTableau
    steps : int
    dt : float, optional
        Sampling time (default ``model.dt``).
    check_observability : bool
        Refuse sensors whose linearisation at (x0, model.u0, model.p0) is not observable.

    Attributes
    ----------
    h : casadi.Function
        ``(x, u, p) -> y``.
    ny : int
    sensors : tuple of str
        A label per measured row.
    step : casadi.Function
        `build_integrator`'s step with forward sensitivities: ``(x, u, p, t0, dt[, z0]) -> (x_next, A, B[, ...])``.
    """

    def __init__(self, who: str, model: Model, measurement: MeasurementFunction | None, *, Q: Any, R: Any,
                 x0: Any, P0: Any, method: str | ButcherTableau, steps: int, dt: float | None,
                 check_observability: bool) -> None:
        if not isinstance(model, Model):
            raise ValueError(f"model must be a shooting.Model (see shooting.load_model), got {type(model).__name__}")
        self.who, self.model = who, model
        self.h = measurement_function(model, measurement)
        self.ny = int(self.h.size1_out(0))
        self.sensors = sensor_names(model, self.h)
        nx = model.nx
        self.Q = _validate.covariance(Q, nx, "Q", definite=False, meaning=f"the process noise's covariance, "
                                                                          f"{nx} states")
        self.R = _validate.covariance(R, self.ny, "R", meaning=f"the measurement noise's covariance, {self.ny} "
                                                               f"sensors")
        self.x0 = model.x0.copy() if x0 is None else _validate.vector(x0, nx, "x0", broadcast=False)
        self.P0 = np.eye(nx) if P0 is None else _validate.covariance(P0, nx, "P0", meaning="the prior's covariance")
        if dt is None and model.dt is None:
            raise ValueError(f"dt is required: model {model.name} has no dt; give the sampling time, e.g. dt=0.05")
        self.dt = _validate.positive_real(model.dt if dt is None else dt, "dt")
        self.method = method
        self.steps = steps
        self.step = build_integrator(model, method, steps, "forward",
                                     name=_validate.sanitized_identifier(f"{model.name}_{who.lower()}_step"))
        if _validate.flag(check_observability, "check_observability"):
            self._check_observability()

    def prior(self, x0: Any = None, P0: Any = None) -> tuple[FloatArray, FloatArray]:
        """A prior (mean (nx,), covariance (nx, nx)), validated: `x0`, `P0`, or the constructor's where None."""
        nx = self.model.nx
        x = self.x0.copy() if x0 is None else _validate.vector(x0, nx, "x0", broadcast=False)
        P = self.P0.copy() if P0 is None else _validate.covariance(P0, nx, "P0", meaning="the prior's covariance")
        return x, P

    def advance(self, x: Any, u: Any, p: Any, t: Any, z: Any = None) -> dict[str, Any]:
        """The step's outputs by name at numbers or symbols (``z`` the algebraic guess; default ``model.z0``)."""
        args = {"x": x, "u": u, "p": p, "t0": t, "dt": self.dt}
        if self.model.nz:
            args["z0"] = self.model.z0 if z is None else z
        return dict(self.step.call(args))

    def _check_observability(self) -> None:
        model = self.model
        out = self.advance(self.x0, model.u0, model.p0, 0.0)
        H = ca.Function("H", [self.h.sx_in(0), self.h.sx_in(1), self.h.sx_in(2)],
                        [ca.jacobian(self.h(*self.h.sx_in()), self.h.sx_in(0))])
        test = observability(np.array(out["A"], dtype=float), np.array(H(self.x0, model.u0, model.p0), dtype=float))
        if not test.observable:
            point = f"x0 = {_validate.vector_text(self.x0)}, u0 = {_validate.vector_text(model.u0)}"
            raise ValueError(test.message(f"{self.who} of model {model.name}", model.state_names, point))

    def simulated_run(self, count: int, seed: int = 0, *, in_bounds: bool = False) -> list[Sample]:
        """`count` samples of the plant this problem's step simulates from its prior, for the exports' checks:
        inputs around ``model.u0`` within the bounds, process and sensor noise drawn from Q and R (the state kept
        within the model's bounds when `in_bounds`), one sensor missing every seventh sample (y 0 there); fewer
        when the plant's state or its measurement stops being finite."""
        model = self.model
        rng = np.random.default_rng(seed)
        lo = np.where(np.isfinite(model.u_min), model.u_min, model.u0 - 1.0)
        hi = np.where(np.isfinite(model.u_max), model.u_max, model.u0 + 1.0)
        mid, half = (lo + hi) / 2, (hi - lo) / 2
        root_Q, root_R = _root(self.Q), _root(self.R)
        x, samples = self.x0.copy(), []
        for k in range(count):
            u = np.clip(model.u0 + 0.3 * half * rng.standard_normal(model.nu), mid - half, mid + half)
            t = k * self.dt
            x = np.array(self.advance(x, u, model.p0, t)["x_next"], dtype=float).reshape(-1)
            x = x + root_Q @ rng.standard_normal(model.nx)
            if in_bounds:
                x = np.clip(x, model.x_min, model.x_max)
            y = np.array(self.h(x, u, model.p0), dtype=float).reshape(-1) + root_R @ rng.standard_normal(self.ny)
            if not (np.isfinite(x).all() and np.isfinite(y).all()):
                break
            valid = np.ones(self.ny)
            if k % 7 == 6 and self.ny > 1:
                valid[k % self.ny], y[k % self.ny] = 0.0, 0.0
            samples.append(Sample(y, valid, u, model.p0.copy(), t))
        return samples

    def unstable_run(self, what: str) -> ValueError:
        """The error of a `simulated_run` that diverged before `what` (its step unstable there)."""
        method = self.method if isinstance(self.method, str) else (self.method.name or "custom")
        return ValueError(f"the simulated run of model {self.model.name}'s {self.who} diverged before {what}: its "
                          f"step ({method} x {self.steps} over dt = {self.dt:g}) is unstable from the model's x0 "
                          f"and u0; choose an implicit method or more substeps (shooting.check_stability says which)")

    def sample(self, y: Any, u: Any, t: Any, p: Any) -> Sample:
        """Check one sample's data; a NaN in y marks that sensor missing (a `MissingMeasurementWarning`).

        Raises
        ------
        ValueError
            y, u or p of the wrong size, an infinite y, a non-finite u, p or t.
        """
        model = self.model
        try:
            yv = np.array(y, dtype=float).reshape(-1) if not isinstance(y, (str, bytes)) else None
        except (TypeError, ValueError):
            yv = None
        if yv is None or yv.size != self.ny:
            size = "not numbers" if yv is None else f"{yv.size} entries"
            raise ValueError(f"{self.who}.update: y has {size} but the sensors measure {self.ny} "
                             f"({', '.join(self.sensors)}): give one value per sensor (NaN: not measured)")
        if np.isinf(yv).any():
            raise ValueError(f"{self.who}.update: y contains inf: give finite numbers (NaN for a missing sensor)")
        uv = _validate.vector(u, model.nu, f"{self.who}.update: u", broadcast=False)
        pv = model.p0 if p is None else _validate.vector(p, model.np, f"{self.who}.update: p", broadcast=False)
        tv = _validate.real(t, f"{self.who}.update: t")
        missing = np.isnan(yv)
        if missing.any():
            names = ", ".join(f"y[{i}] ({self.sensors[i]})" for i in np.flatnonzero(missing))
            what = "every sensor" if missing.all() else names
            warnings.warn(f"{self.who} at t = {tv:g}: the measurement of {what} is NaN: its correction is skipped, "
                          f"the estimate is predicted only", MissingMeasurementWarning, stacklevel=3)
        return Sample(np.where(missing, 0.0, yv), (~missing).astype(float), uv, pv, tv)


class SensorsView:
    """What an estimator (`EKF`, `MHE`) tells about its sensors and sampling, read from its `EstimationProblem`
    (``self.problem``)."""

    problem: EstimationProblem

    @property
    def measurement_function(self) -> ca.Function:
        """``h(x, u, p) -> y``, the sensors as a CasADi Function."""
        return self.problem.h

    @property
    def ny(self) -> int:
        """Number of measured quantities."""
        return self.problem.ny

    @property
    def dt(self) -> float:
        """Sampling time."""
        return self.problem.dt

    @property
    def sensors(self) -> tuple[str, ...]:
        """A label per measured row (the state's name where the row is a state)."""
        return self.problem.sensors

    @property
    def Q(self) -> FloatArray:
        """Process noise covariance (nx, nx)."""
        return self.problem.Q.copy()

    @property
    def R(self) -> FloatArray:
        """Measurement noise covariance (ny, ny)."""
        return self.problem.R.copy()


def _root(C: FloatArray) -> FloatArray:
    """A square root of a positive semi-definite covariance (its eigen-decomposition; zero modes kept zero)."""
    w, V = np.linalg.eigh(C)
    return np.asarray(V * np.sqrt(np.maximum(w, 0.0)), dtype=float)
