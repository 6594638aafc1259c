"""Controllers for the closed loop: the `Controller` protocol, `ControlStep`, and nonlinear MPC.

`MPCController` turns a `MultipleShootingOCP` into a controller: at every
sampling instant it solves the OCP from the measured state, warm-started from
the previous solution shifted by one stage, and applies the first input.

Time-varying data reach a controller through keywords of its ``step``:
``step(x, t, *, x_ref=None, u_ref=None, p=None, u_prev=None)`` with the
references and model parameters of this sample over the horizon (shapes
(N+1, nx), (N, nu), (N, np)) and the input applied last. `stage_keywords`
tells which of them a controller's ``step`` takes; `sample_horizon`
evaluates the callables ``reference(t) -> (x_ref, u_ref)`` and
``parameters(t) -> p`` on the horizon's time grid.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.loading import user_call
from shooting.model import Model
from shooting.mpc.ocp import MultipleShootingOCP, OCPSolution

__all__ = ["STAGE_KEYWORDS", "ControlStep", "Controller", "MPCController", "ParameterFunction",
           "ReferenceFunction", "StageData", "sample_horizon", "stage_keywords"]

FloatArray = npt.NDArray[np.float64]

#: ``t -> (x_ref, u_ref)``: the reference at time t, shapes (nx,) and (nu,) (u_ref may be None).
ReferenceFunction = Callable[[float], Any]
#: ``t -> p``: the model parameters at time t, shape (np,).
ParameterFunction = Callable[[float], Any]

#: The keywords of ``step`` that carry one sample's data (see `stage_keywords`).
STAGE_KEYWORDS = ("x_ref", "u_ref", "p", "u_prev")


@dataclass(frozen=True, eq=False)
class ControlStep:
    """One control decision: the input to apply now and how it was obtained.

    Parameters
    ----------
    u : ndarray, shape (nu,)
        Input to apply over the next sampling interval.
    solve_time : float
        Wall-clock time of the solve [s].
    success : bool
        Whether the solver reported success.
    status : str
        The solver's own status string.
    iterations : int
        Solver iterations (1 for a real-time iteration).
    """

    u: np.ndarray
    solve_time: float
    success: bool
    status: str
    iterations: int


@runtime_checkable
class Controller(Protocol):
    """What `simulate_closed_loop` needs from a controller (`MPCController`, `RTIController`, your own).

    Attributes
    ----------
    dt : float
        Sampling time [s].
    model : Model
        The model the controller was designed for.

    A ``reset()`` method, if present, is called before every closed-loop run.
    """

    dt: float
    model: Model

    def step(self, x: npt.NDArray[np.float64], t: float) -> ControlStep:  # pragma: no cover - protocol
        """The input to apply at time `t` for the measured state `x`."""
        ...


def stage_keywords(controller: object) -> frozenset[str]:
    """Which of `STAGE_KEYWORDS` the ``step`` method of `controller` accepts (all of them with ``**kwargs``).

    Parameters
    ----------
    controller : object
        Anything with a ``step`` method.

    Returns
    -------
    frozenset of str
    """
    try:
        params = inspect.signature(controller.step).parameters  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return frozenset()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return frozenset(STAGE_KEYWORDS)
    return frozenset(name for name in STAGE_KEYWORDS if name in params and params[name].kind in
                     (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD))


@dataclass(frozen=True, eq=False)
class StageData:
    """One sample's data over the horizon (None: the controller's own).

    Parameters
    ----------
    x_ref : ndarray, shape (N+1, nx), or None
        Row j: the state reference at t + j dt.
    u_ref : ndarray, shape (N, nu), or None
    p : ndarray, shape (N, np), or None
        Row j: the model parameters of the interval [t + j dt, t + (j+1) dt].
    """

    x_ref: FloatArray | None = None
    u_ref: FloatArray | None = None
    p: FloatArray | None = None

    def keywords(self) -> dict[str, FloatArray]:
        """The given entries as keywords for ``step`` or ``ocp.solve``."""
        return {k: v for k, v in (("x_ref", self.x_ref), ("u_ref", self.u_ref), ("p", self.p)) if v is not None}


def sample_horizon(model: Model, t: float, dt: float, horizon: int, *,
                   reference: ReferenceFunction | None = None,
                   parameters: ParameterFunction | None = None) -> StageData:
    """Evaluate ``reference`` and ``parameters`` at the horizon's times t_j = t + j dt.

    x_ref at j = 0..N (the nodes), u_ref and p at j = 0..N-1 (the intervals).

    Parameters
    ----------
    model : Model
        Gives nx, nu, np.
    t, dt : float
    horizon : int
        N.
    reference : callable ``t -> (x_ref, u_ref)``, optional
        Shapes (nx,) and (nu,); u_ref may be None (the controller's own).
    parameters : callable ``t -> p``, optional
        Shape (np,).

    Returns
    -------
    StageData

    Raises
    ------
    ValueError
        A callable that raises (any exception, or exits), returns something
        that is not a pair (reference), or arrays of the wrong shape or
        non-finite; the message names the callable and the time.
    """
    times = t + dt * np.arange(horizon + 1)
    x_ref = u_ref = p = None
    if reference is not None:
        xs, us = [], []
        for j, tj in enumerate(times):
            out = user_call(f"reference(t) at t = {tj:g}", reference, float(tj))
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise ValueError(f"reference(t) must return a pair (x_ref, u_ref) of shapes ({model.nx},) and "
                                 f"({model.nu},) (u_ref may be None); at t = {tj:g} it returned {type(out).__name__}")
            xs.append(_validate.vector(out[0], model.nx, f"reference(t) x_ref at t = {tj:g}", broadcast=False))
            if j < horizon and out[1] is not None:
                us.append(_validate.vector(out[1], model.nu, f"reference(t) u_ref at t = {tj:g}", broadcast=False))
        x_ref = np.array(xs)
        u_ref = np.array(us) if len(us) == horizon else None
    if parameters is not None:
        rows = []
        for tj in times[:horizon]:
            where = f"parameters(t) at t = {tj:g}"
            rows.append(_validate.vector(user_call(where, parameters, float(tj)), model.np, where, broadcast=False))
        p = np.array(rows).reshape(horizon, model.np)
    return StageData(x_ref, u_ref, p)


class MPCController:
    """Nonlinear MPC: solve the OCP at every sample, apply the first input.

    The first call solves cold (the OCP's own initial guess); every later call
    is warm-started from the previous solution shifted one stage ahead
    (``previous.shifted()``). A failed solve still returns its first input,
    flagged ``success=False``; if that input or the predicted trajectory is not
    finite, the first input of the shifted previous solution is applied instead
    (the model's nominal input ``u0`` clipped to its bounds when there is none).

    Parameters
    ----------
    ocp : MultipleShootingOCP
        The optimal control problem solved at every step.
    x_ref : array_like, shape (nx,) or (N+1, nx), optional
        State reference passed to every ``ocp.solve`` (default: the OCP's own).
    u_ref : array_like, shape (nu,) or (N, nu), optional
        Input reference passed to every ``ocp.solve`` (default: the OCP's own).
    p : array_like, shape (np,) or (N, np), optional
        Model parameters used by the controller (default: the OCP's, i.e. the
        model's nominal ``p0``).

    Attributes
    ----------
    ocp, model, dt
        The OCP, its model and sampling time [s].
    solution : OCPSolution or None
        The solution behind the last applied input (None before the first step).
    u_last : ndarray, shape (nu,)
        The input applied last: the next solve's ``u_prev`` (rate penalty)
        unless `step` is given one; zero after `reset` (the OCP's default).
    """

    def __init__(self, ocp: MultipleShootingOCP, *, x_ref: npt.ArrayLike | None = None,
                 u_ref: npt.ArrayLike | None = None, p: npt.ArrayLike | None = None) -> None:
        if not isinstance(ocp, MultipleShootingOCP):
            raise ValueError(f"ocp must be a shooting.MultipleShootingOCP, got {type(ocp).__name__}")
        self.ocp = ocp
        self.model: Model = ocp.model
        self.dt = float(ocp.dt)
        N = ocp.horizon
        self.x_ref = None if x_ref is None else _validate.stage_rows(x_ref, N + 1, ocp.nx, "x_ref")
        self.u_ref = None if u_ref is None else _validate.stage_rows(u_ref, N, ocp.nu, "u_ref")
        self.p = None if p is None else _validate.stage_rows(p, N, self.model.np, "p")
        self.solution: OCPSolution | None = None
        self.u_last = np.zeros(self.model.nu)

    @property
    def horizon(self) -> int:
        """The OCP's number of intervals N."""
        return int(self.ocp.horizon)

    def reset(self) -> None:
        """Forget the previous solution and the last input: the next `step` solves cold, with u_prev = 0."""
        self.solution = None
        self.u_last = np.zeros(self.model.nu)

    def step(self, x: npt.ArrayLike, t: float = 0.0, *, x_ref: npt.ArrayLike | None = None,
             u_ref: npt.ArrayLike | None = None, p: npt.ArrayLike | None = None,
             u_prev: npt.ArrayLike | None = None) -> ControlStep:
        """Solve the OCP from the measured state and return the first input.

        Parameters
        ----------
        x : array_like, shape (nx,)
            Measured state.
        t : float, default 0.0
            Current time [s] (the OCP's ``t0``, for time-varying models).
        x_ref : array_like, shape (nx,) or (N+1, nx), optional
            This sample's state reference (default: the controller's, else the OCP's).
        u_ref : array_like, shape (nu,) or (N, nu), optional
            This sample's input reference (default likewise).
        p : array_like, shape (np,) or (N, np), optional
            This sample's model parameters per interval (default likewise).
        u_prev : array_like, shape (nu,), optional
            u_{-1} of the rate penalty (default `u_last`).

        Returns
        -------
        ControlStep
        """
        xv = _validate.vector(x, self.model.nx, "x", broadcast=False)
        warm = None if self.solution is None else self.solution.shifted()
        sol = self.ocp.solve(xv, warm_start=warm, x_ref=self.x_ref if x_ref is None else x_ref,
                             u_ref=self.u_ref if u_ref is None else u_ref, p=self.p if p is None else p,
                             t0=float(t), u_prev=self.u_last if u_prev is None else u_prev)
        u = np.array(sol.u[0], dtype=float).reshape(-1)
        finite = bool(np.isfinite(sol.u).all() and np.isfinite(sol.x).all())
        if finite:
            self.solution = sol
        elif warm is not None:
            u = np.array(warm.u[0], dtype=float).reshape(-1)
            self.solution = warm
        else:
            u = np.clip(self.model.u0, self.model.u_min, self.model.u_max)
        self.u_last = np.asarray(u, dtype=float).copy()
        return ControlStep(u=u, solve_time=float(sol.solve_time), success=bool(sol.success) and finite,
                           status=str(sol.status) if finite else f"{sol.status}: non-finite solution",
                           iterations=int(sol.iterations))
