"""Controllers for the closed loop: the `Controller` protocol, `ControlStep`, and nonlinear MPC.

`MPCController` turns a `MultipleShootingOCP` into a controller: at every
sampling instant it solves the OCP from the measured state, warm-started from
the previous solution shifted by one stage, and applies the first input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.model import Model
from shooting.mpc.ocp import MultipleShootingOCP, OCPSolution

__all__ = ["ControlStep", "Controller", "MPCController"]


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
    p : array_like, shape (np,), optional
        Model parameters used by the controller (default: the OCP's, i.e. the
        model's nominal ``p0``).

    Attributes
    ----------
    ocp, model, dt
        The OCP, its model and sampling time [s].
    solution : OCPSolution or None
        The solution behind the last applied input (None before the first step).
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
        self.p = None if p is None else _validate.vector(p, self.model.np, "p", broadcast=False)
        self.solution: OCPSolution | None = None

    def reset(self) -> None:
        """Forget the previous solution: the next `step` solves cold."""
        self.solution = None

    def step(self, x: npt.ArrayLike, t: float = 0.0) -> ControlStep:
        """Solve the OCP from the measured state and return the first input.

        Parameters
        ----------
        x : array_like, shape (nx,)
            Measured state.
        t : float, default 0.0
            Current time [s] (the OCP's ``t0``, for time-varying models).

        Returns
        -------
        ControlStep
        """
        xv = _validate.vector(x, self.model.nx, "x", broadcast=False)
        warm = None if self.solution is None else self.solution.shifted()
        sol = self.ocp.solve(xv, warm_start=warm, x_ref=self.x_ref, u_ref=self.u_ref, p=self.p, t0=float(t))
        u = np.array(sol.u[0], dtype=float).reshape(-1)
        if np.isfinite(sol.u).all() and np.isfinite(sol.x).all():
            self.solution = sol
        elif warm is not None:
            u = np.array(warm.u[0], dtype=float).reshape(-1)
            self.solution = warm
        else:
            u = np.clip(self.model.u0, self.model.u_min, self.model.u_max)
        return ControlStep(u=u, solve_time=float(sol.solve_time), success=bool(sol.success),
                           status=str(sol.status), iterations=int(sol.iterations))
