"""Closed-loop simulation: an MPC controller drives an accurately integrated plant.

`MPCController` turns a `MultipleShootingOCP` into a controller: at every
sampling instant it solves the OCP from the measured state, warm-started from
the previous solution shifted by one stage, and applies the first input.
`simulate_closed_loop` runs any controller with ``.step(x, t)`` against a
plant integrated with many substeps of an accurate method (optionally a
different model and with process noise) and returns a `Trajectory`, which
reports solve-time statistics and writes JSON, CSV and PNG plots.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from shooting.integrator import build_integrator
from shooting.model import Model

from shooting.trajectory import Trajectory, _vector

__all__ = ["ControlStep", "Controller", "MPCController", "Trajectory", "simulate_closed_loop"]


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


class Controller(Protocol):
    """What `simulate_closed_loop` needs from a controller (e.g. `MPCController`, `RTIController`)."""

    dt: float
    model: Model

    def step(self, x: np.ndarray, t: float) -> ControlStep:  # pragma: no cover - protocol
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

    def __init__(self, ocp: Any, *, x_ref: np.ndarray | None = None, u_ref: np.ndarray | None = None,
                 p: np.ndarray | None = None) -> None:
        for attr in ("solve", "model", "dt", "horizon"):
            if not hasattr(ocp, attr):
                raise ValueError(f"ocp must be a shooting.MultipleShootingOCP, got {type(ocp).__name__} "
                                 f"(no attribute {attr!r})")
        self.ocp = ocp
        self.model: Model = ocp.model
        self.dt = float(ocp.dt)
        self.x_ref = None if x_ref is None else np.asarray(x_ref, dtype=float)
        self.u_ref = None if u_ref is None else np.asarray(u_ref, dtype=float)
        self.p = None if p is None else _vector(p, self.model.np, "p")
        self.solution: Any = None

    def reset(self) -> None:
        """Forget the previous solution: the next `step` solves cold."""
        self.solution = None

    def step(self, x: np.ndarray, t: float = 0.0) -> ControlStep:
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
        x = _vector(x, self.model.nx, "x")
        warm = None if self.solution is None else self.solution.shifted()
        sol = self.ocp.solve(x, warm_start=warm, x_ref=self.x_ref, u_ref=self.u_ref, p=self.p, t0=float(t))
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


class _ProgressBar:
    """``\\r[#####.....] 37/100  solve 2.1 ms`` on a stream, at most ~20 redraws per second."""

    def __init__(self, total: int, enabled: bool, stream: Any = None, width: int = 30) -> None:
        self.total, self.enabled, self.width = total, enabled, width
        self.stream = sys.stderr if stream is None else stream
        self.last = 0.0

    def update(self, done: int, solve_s: float, ok: bool) -> None:
        now = time.perf_counter()
        if not self.enabled or (done < self.total and now - self.last < 0.05):
            return
        self.last = now
        fill = int(self.width * done / max(self.total, 1))
        flag = "" if ok else "  (solver failed)"
        self.stream.write(f"\r[{'#' * fill}{'.' * (self.width - fill)}] {done}/{self.total}  "
                          f"solve {solve_s * 1e3:.1f} ms{flag}   ")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _lookup(controller: Any, name: str) -> Any:
    """An attribute of the controller or of its OCP (``controller.ocp``), else None."""
    for obj in (controller, getattr(controller, "ocp", None)):
        value = getattr(obj, name, None) if obj is not None else None
        if value is not None:
            return value
    return None


def _constant(value: Any, n: int) -> np.ndarray | None:
    """A constant reference of length `n`: a vector, or a per-stage array whose rows are all equal
    (a time-varying reference is not one target: None)."""
    if value is None:
        return None
    arr = np.asarray(value, dtype=float)
    if arr.size == n:
        return arr.reshape(n).copy()
    if arr.ndim == 2 and arr.shape[1] == n and arr.shape[0] > 0 and np.all(arr == arr[0]):
        return arr[0].copy()
    return None


def _bound(value: Any, default: np.ndarray) -> np.ndarray:
    """The controller's (OCP's) bound vector when it has one of the right size, else the model's."""
    arr = None if value is None else np.asarray(value, dtype=float).reshape(-1)
    return arr.copy() if arr is not None and arr.size == np.size(default) else np.array(default, dtype=float)


def simulate_closed_loop(
    controller: Any,
    x0: Sequence[float] | np.ndarray,
    steps: int,
    *,
    plant: Model | None = None,
    plant_method: str = "dopri5",
    plant_steps: int = 20,
    p: Sequence[float] | np.ndarray | None = None,
    noise_std: float | Sequence[float] | np.ndarray | None = None,
    seed: int = 0,
    progress: bool | Literal["always"] = True,
    dt: float | None = None,
) -> Trajectory:
    """Run a controller against a simulated plant for `steps` sampling intervals.

    At t_k = k dt the controller gets the plant state x_k and returns u_k; u_k
    is clipped to the plant's input bounds and held over [t_k, t_k + dt], and
    the plant is integrated with `plant_steps` substeps of `plant_method`.
    With `noise_std`, Gaussian process noise is added to the state after each
    plant step (seeded: the same seed gives the same run).

    Parameters
    ----------
    controller : MultipleShootingOCP or controller
        An OCP (wrapped in `MPCController`, with parameters `p`) or any object
        with ``step(x, t) -> ControlStep`` and attributes ``dt`` and ``model``
        (`MPCController`, `RTIController`). Its ``reset()``, if any, is called
        first, so every run starts cold.
    x0 : array_like, shape (nx,)
        Initial plant state.
    steps : int
        Number of control steps K (the trajectory has K+1 states).
    plant : Model, optional
        The simulated system (default: the controller's model). A different
        model (e.g. ``load_model("cartpole", M=1.2)``) simulates model mismatch;
        it must have the same nx and nu.
    plant_method : str, default "dopri5"
        Tableau of the plant integrator (see `shooting.tableau_names`).
    plant_steps : int, default 20
        Substeps per sampling interval of the plant integrator.
    p : array_like, shape (np,), optional
        Plant parameters (default the plant's ``p0``); also the controller's
        when `controller` is an OCP wrapped here.
    noise_std : float or array_like, shape (nx,), optional
        Standard deviation of the additive process noise per state.
    seed : int, default 0
        Seed of the noise generator.
    progress : bool or "always", default True
        Progress bar on stderr: True shows it when stderr is a terminal,
        "always" shows it regardless, False never.
    dt : float, optional
        Sampling time [s] (default ``controller.dt``).

    Returns
    -------
    Trajectory
        If the plant state becomes non-finite the run stops there and
        ``Trajectory.stopped`` says so.

    Raises
    ------
    ValueError
        A controller without ``step``/``solve``, mismatched plant dimensions,
        a bad `x0`, `steps`, `dt`, `p` or `noise_std`, or a controller that
        returns an input of the wrong size or a non-finite one.
    """
    if not hasattr(controller, "step"):
        if hasattr(controller, "solve") and hasattr(controller, "horizon"):
            controller = MPCController(controller, p=p)
        else:
            raise ValueError(f"controller must be a MultipleShootingOCP or have a step(x, t) method, "
                             f"got {type(controller).__name__}")
    model = getattr(controller, "model", None)
    if plant is None:
        plant = model
    if not isinstance(plant, Model):
        raise ValueError(f"plant must be a shooting.Model (the controller has no model), got {type(plant).__name__}")
    if model is None:
        model = plant
    if (plant.nx, plant.nu) != (model.nx, model.nu):
        raise ValueError(f"plant {plant.name} has nx={plant.nx}, nu={plant.nu} but the controller's model "
                         f"{model.name} has nx={model.nx}, nu={model.nu}: they must match")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    dt = getattr(controller, "dt", None) if dt is None else dt
    if dt is None or not np.isfinite(dt) or dt <= 0:
        raise ValueError(f"dt must be a positive sampling time [s], got {dt!r}")
    dt = float(dt)
    x = _vector(x0, plant.nx, "x0")
    p_plant = plant.p0 if p is None else _vector(p, plant.np, "p")
    std = None
    if noise_std is not None:
        std = np.asarray(noise_std, dtype=float).reshape(-1)
        if std.size == 1:
            std = np.full(plant.nx, float(std[0]))
        if std.size != plant.nx or not np.isfinite(std).all() or (std < 0).any():
            raise ValueError(f"noise_std must be a non-negative number or {plant.nx} of them, got {noise_std!r}")
    if progress not in (True, False, "always"):
        raise ValueError(f"progress must be True, False or 'always', got {progress!r}")
    rng = np.random.default_rng(seed)
    if callable(getattr(controller, "reset", None)):
        controller.reset()  # a fresh run starts cold, not from the last run's solution
    F = build_integrator(plant, plant_method, plant_steps, "none", name=f"{plant.name}_plant")

    K = int(steps)
    xs, us, times, oks, iters, statuses = [x.copy()], [], [], [], [], []
    stopped = ""
    enabled = progress == "always" or (progress is True and sys.stderr.isatty())
    bar = _ProgressBar(K, enabled)
    try:
        for k in range(K):
            t = k * dt
            step = controller.step(x.copy(), t)
            u = np.asarray(step.u, dtype=float).reshape(-1)
            if u.size != plant.nu:
                raise ValueError(f"controller returned {u.size} inputs at step {k}, the plant takes {plant.nu}")
            if not np.isfinite(u).all():
                raise ValueError(f"controller returned a non-finite input {u} at step {k} (t = {t:g} s)")
            u = np.clip(u, plant.u_min, plant.u_max)
            x_next = np.array(F.call([x, u, p_plant, t, dt])[0], dtype=float).reshape(-1)
            if std is not None:
                x_next = x_next + std * rng.standard_normal(plant.nx)
            us.append(u)
            times.append(float(step.solve_time))
            oks.append(bool(step.success))
            iters.append(int(step.iterations))
            statuses.append(str(step.status))
            bar.update(k + 1, float(step.solve_time), bool(step.success))
            if not np.isfinite(x_next).all():
                stopped = f"plant state became non-finite at step {k} (t = {(k + 1) * dt:g} s)"
                us.pop(), times.pop(), oks.pop(), iters.pop(), statuses.pop()
                break
            x = x_next
            xs.append(x.copy())
    finally:
        bar.close()

    n = len(us)
    x_ref = _constant(_lookup(controller, "x_ref"), model.nx)
    u_ref = _constant(_lookup(controller, "u_ref"), model.nu)
    Q, R = _lookup(controller, "Q"), _lookup(controller, "R")
    return Trajectory(
        t=np.round(np.arange(n + 1) * dt, 12),
        x=np.array(xs).reshape(n + 1, plant.nx),
        u=np.array(us).reshape(n, plant.nu),
        solve_time=np.array(times),
        success=np.array(oks, dtype=bool),
        iterations=np.array(iters, dtype=int),
        state_names=tuple(model.state_names),
        input_names=tuple(model.input_names),
        model_name=model.name,
        x_min=_bound(_lookup(controller, "x_min"), model.x_min),
        x_max=_bound(_lookup(controller, "x_max"), model.x_max),
        u_min=np.asarray(plant.u_min, dtype=float).copy(),
        u_max=np.asarray(plant.u_max, dtype=float).copy(),
        x_ref=x_ref,
        u_ref=u_ref,
        Q=None if Q is None else np.asarray(Q, dtype=float),
        R=None if R is None else np.asarray(R, dtype=float),
        status=tuple(statuses),
        stopped=stopped,
    )
