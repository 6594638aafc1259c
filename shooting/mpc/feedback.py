"""Output feedback in the closed loop: the `Estimator` protocol and the simulated sensors.

With an estimator, `simulate_closed_loop` measures the plant at every sample
through the estimator's own sensors, ``y_k = h(x_k, u_{k-1}, p) + v_k`` with
Gaussian noise of the given standard deviations, updates the estimator with
``(y_k, u_{k-1})`` and hands the controller the estimate instead of the
state. mpc never imports `shooting.estimate`: any object with the protocol's
attributes serves (`shooting.EKF`, `shooting.MHE`, an exported estimator).
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol, runtime_checkable

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.model import Model

__all__ = ["Estimator", "Sensors", "measurement_noise_stream"]

FloatArray = npt.NDArray[np.float64]

#: The measurement noise's stream is the run's seed's child of this number (the process noise keeps the seed's
#: own stream, so adding sensors does not change a seeded run's plant).
_NOISE_STREAM = 1


def measurement_noise_stream(seed: int) -> np.random.Generator:
    """The generator of a seeded run's measurement noise: each sample after a plant step draws
    ``standard_normal(ny)``, scaled by the sensors' standard deviations (the firmware's tables draw the same)."""
    return np.random.default_rng([seed, _NOISE_STREAM])


@runtime_checkable
class Estimator(Protocol):
    """What `simulate_closed_loop` needs from a state estimator (`shooting.EKF`, `shooting.MHE`, your own).

    Attributes
    ----------
    model : Model
        The model it estimates (the controller's nx and nu).
    measurement_function : casadi.Function
        Its sensors ``h(x, u, p) -> y (ny)``: the closed loop measures the plant through them.
    x_hat : ndarray, shape (nx,)
        The current estimate (the prior before the first update): the controller's state at the first sample.

    ``update(y, u, t)`` (and ``p=`` when it takes it) returns ``(x_hat, P)``; a ``reset()`` method, if present,
    is called before every closed-loop run.
    """

    model: Model
    measurement_function: ca.Function
    x_hat: FloatArray

    def update(self, y: FloatArray, u: FloatArray, t: float = 0.0) -> tuple[FloatArray, FloatArray]:
        """Predict over [t, t + dt] with the input u, correct with the measurement y at its end."""
        ...  # pragma: no cover - protocol


class Sensors:
    """The plant's measurements through an estimator's sensors, with seeded Gaussian noise.

    Parameters
    ----------
    estimator : Estimator
    model : Model
        The controller's model (nx and nu must match the estimator's).
    noise : float or array_like, shape (ny,)
        Standard deviations of the measurement noise (>= 0).
    seed : int
        The run's seed.

    Raises
    ------
    ValueError
        Not an estimator, mismatched sizes, a bad noise.
    """

    def __init__(self, estimator: object, model: Model, noise: Any, seed: int) -> None:
        if not isinstance(estimator, Estimator) or not callable(getattr(estimator, "update", None)):
            raise ValueError(f"estimator must have update(y, u, t), a model, a measurement_function and x_hat "
                             f"(shooting.EKF, shooting.MHE), got {type(estimator).__name__}")
        own = estimator.model
        if not isinstance(own, Model) or (own.nx, own.nu) != (model.nx, model.nu):
            raise ValueError(f"the estimator's model has nx={getattr(own, 'nx', '?')}, nu={getattr(own, 'nu', '?')} "
                             f"but the controller's model {model.name} nx={model.nx}, nu={model.nu}: they must match")
        self.estimator, self.h = estimator, estimator.measurement_function
        self.ny = int(self.h.size1_out(0))
        self.std = _validate.vector(noise, self.ny, "measurement_noise")
        if (self.std < 0).any():
            raise ValueError(f"measurement_noise must be a standard deviation >= 0 or {self.ny} of them (one per "
                             f"sensor), got {noise!r}")
        self.rng = measurement_noise_stream(seed)
        self.takes_p = _takes(estimator.update, "p")

    def reset(self) -> FloatArray:
        """Reset the estimator (when it can be) and return its estimate: the controller's first state."""
        reset = getattr(self.estimator, "reset", None)
        if callable(reset):
            reset()
        return self._checked(self.estimator.x_hat, "x_hat")

    def measure_and_update(self, x: FloatArray, u: FloatArray, p: FloatArray, t: float) -> FloatArray:
        """y = h(x, u, p) + noise at the end of [t, t + dt]; the estimator's update with it; the new estimate."""
        y = np.array(self.h(x, u, p), dtype=float).reshape(-1) + self.std * self.rng.standard_normal(self.ny)
        kwargs = {"p": p} if self.takes_p else {}
        x_hat, _ = self.estimator.update(y, u, t, **kwargs)
        return self._checked(x_hat, "estimate")

    def _checked(self, x_hat: Any, what: str) -> FloatArray:
        value = np.asarray(x_hat, dtype=float).reshape(-1)
        nx = self.estimator.model.nx
        if value.size != nx or not np.isfinite(value).all():
            raise ValueError(f"the estimator's {what} is not {nx} finite numbers: {value!r}")
        return value.copy()


def _takes(method: Any, keyword: str) -> bool:
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False
    return keyword in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
