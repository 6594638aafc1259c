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

import csv
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from shooting.integrator import build_integrator
from shooting.model import Model

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


def _vector(value: object, n: int, what: str) -> np.ndarray:
    """`value` as a finite float vector of length `n`, or ValueError naming `what`."""
    try:
        arr = np.asarray(value, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be {n} numbers, got {value!r}") from None
    if arr.size != n:
        raise ValueError(f"{what} has {arr.size} entries but needs {n}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{what} contains NaN or inf: {arr}")
    return arr


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


def _finite_or_none(values: np.ndarray) -> list:
    """A list for JSON: non-finite numbers (unbounded limits, NaN) become null."""
    return [float(v) if np.isfinite(v) else None for v in np.asarray(values, dtype=float).reshape(-1)]


def _rows(a: np.ndarray) -> list[list]:
    return [_finite_or_none(row) for row in np.asarray(a, dtype=float)]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _json_text(data: dict[str, Any]) -> str:
    """JSON with one top-level key per line and each value compact (rows stay on one line)."""
    items = [f" {json.dumps(key)}: {json.dumps(value, allow_nan=False)}" for key, value in data.items()]
    return "{\n" + ",\n".join(items) + "\n}\n"


def _write_atomic(path: Path, data: bytes) -> Path:
    """Write `data` to a temporary file beside `path`, then rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would make the result private
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


@dataclass(eq=False)
class Trajectory:
    """A closed-loop run: K control steps, K+1 states.

    Parameters
    ----------
    t : ndarray, shape (K+1,)
        Sampling instants [s].
    x : ndarray, shape (K+1, nx)
        Plant states at those instants (``x[0]`` the initial state).
    u : ndarray, shape (K, nu)
        Inputs applied over ``[t[k], t[k+1]]`` (after clipping to the bounds).
    solve_time : ndarray, shape (K,)
        Controller solve time per step [s].
    success : ndarray of bool, shape (K,)
        Whether each solve succeeded.
    iterations : ndarray of int, shape (K,)
        Solver iterations per step.
    state_names, input_names : tuple of str
        Labels (length nx and nu).
    model_name : str
        Name of the controller's model.
    x_min, x_max : ndarray, shape (nx,)
        State bounds of the controller's model (+-inf: none).
    u_min, u_max : ndarray, shape (nu,)
        Input bounds applied to the plant.
    x_ref : ndarray, shape (nx,), optional
        Constant state reference, for plots and the final error.
    u_ref : ndarray, shape (nu,), optional
        Constant input reference, for the closed-loop cost.
    Q : ndarray, shape (nx, nx), optional
        State weight for `stats`' closed-loop cost.
    R : ndarray, shape (nu, nu), optional
        Input weight for `stats`' closed-loop cost.
    status : tuple of str, length K
        Solver status per step.
    stopped : str
        Why the run ended before its K steps ("" when it completed).
    """

    t: np.ndarray
    x: np.ndarray
    u: np.ndarray
    solve_time: np.ndarray
    success: np.ndarray
    iterations: np.ndarray
    state_names: tuple[str, ...]
    input_names: tuple[str, ...]
    model_name: str
    x_min: np.ndarray
    x_max: np.ndarray
    u_min: np.ndarray
    u_max: np.ndarray
    x_ref: np.ndarray | None = None
    u_ref: np.ndarray | None = None
    Q: np.ndarray | None = None
    R: np.ndarray | None = None
    status: tuple[str, ...] = ()
    stopped: str = ""

    def __post_init__(self) -> None:
        self.t = np.asarray(self.t, dtype=float).reshape(-1)
        K = self.t.size - 1
        self.x = np.asarray(self.x, dtype=float).reshape(K + 1, -1)
        self.u = np.asarray(self.u, dtype=float).reshape(K, len(self.input_names))
        self.solve_time = np.asarray(self.solve_time, dtype=float).reshape(K)
        self.success = np.asarray(self.success, dtype=bool).reshape(K)
        self.iterations = np.asarray(self.iterations, dtype=int).reshape(K)
        if self.x.shape[1] != len(self.state_names):
            raise ValueError(f"x has {self.x.shape[1]} columns but state_names has {len(self.state_names)} entries")

    @property
    def steps(self) -> int:
        """Number of control steps K."""
        return int(self.u.shape[0])

    def final_error(self) -> float:
        """Euclidean distance of the final state from the reference (from 0 without one)."""
        ref = np.zeros(self.x.shape[1]) if self.x_ref is None else self.x_ref
        return float(np.linalg.norm(self.x[-1] - ref))

    def stats(self, Q: np.ndarray | None = None, R: np.ndarray | None = None) -> dict[str, Any]:
        """Solve-time statistics, success rate, final error and closed-loop cost.

        Parameters
        ----------
        Q : array_like, shape (nx, nx) or (nx,), optional
            State weight (a vector is a diagonal); default the stored `Q`.
        R : array_like, shape (nu, nu) or (nu,), optional
            Input weight; default the stored `R`.

        Returns
        -------
        dict
            ``steps, solve_time_ms: {mean, median, max, p95, min}, success_rate,
            iterations: {mean, max}, final_state, final_error, max_state_violation,
            max_input_violation, stopped`` and, when both weights are known,
            ``closed_loop_cost`` = sum over k < K of (x_k - x_ref)' Q (x_k - x_ref)
            + (u_k - u_ref)' R (u_k - u_ref) (no 1/2, no dt, as the OCP cost).
        """
        ms = self.solve_time * 1e3
        K = self.steps
        timing = ({"mean": float(ms.mean()), "median": float(np.median(ms)), "max": float(ms.max()),
                   "p95": float(np.percentile(ms, 95)), "min": float(ms.min())} if K else
                  {"mean": None, "median": None, "max": None, "p95": None, "min": None})
        viol_x = np.maximum(np.maximum(self.x_min - self.x, self.x - self.x_max), 0.0)
        viol_u = np.maximum(np.maximum(self.u_min - self.u, self.u - self.u_max), 0.0)
        out: dict[str, Any] = {
            "steps": K,
            "solve_time_ms": timing,
            "success_rate": float(self.success.mean()) if K else None,
            "iterations": {"mean": float(self.iterations.mean()) if K else None,
                           "max": int(self.iterations.max()) if K else None},
            "final_state": _finite_or_none(self.x[-1]),
            "final_error": self.final_error(),
            "max_state_violation": float(viol_x.max()) if viol_x.size else 0.0,
            "max_input_violation": float(viol_u.max()) if viol_u.size else 0.0,
            "stopped": self.stopped,
        }
        Q = self.Q if Q is None else Q
        R = self.R if R is None else R
        if Q is not None and R is not None:
            nx, nu = self.x.shape[1], self.u.shape[1]
            Qm = np.diag(_vector(Q, nx, "Q")) if np.ndim(Q) == 1 else np.asarray(Q, dtype=float).reshape(nx, nx)
            Rm = np.diag(_vector(R, nu, "R")) if np.ndim(R) == 1 else np.asarray(R, dtype=float).reshape(nu, nu)
            dx = self.x[:-1] - (0.0 if self.x_ref is None else self.x_ref)
            du = self.u - (0.0 if self.u_ref is None else self.u_ref)
            out["closed_loop_cost"] = float(np.einsum("ki,ij,kj->", dx, Qm, dx) + np.einsum("ki,ij,kj->", du, Rm, du))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: ``t`` (K+1), ``x`` (K+1 rows of nx), ``u`` (K rows of nu),
        ``solve_time`` (K, seconds), plus ``model, state_names, input_names,
        success, iterations, status, bounds, x_ref, u_ref, stats``.

        Returns
        -------
        dict
            Non-finite numbers (unbounded limits, a diverged state) are None.
        """
        return {
            "t": _finite_or_none(self.t),
            "x": _rows(self.x),
            "u": _rows(self.u),
            "solve_time": _finite_or_none(self.solve_time),
            "model": self.model_name,
            "state_names": list(self.state_names),
            "input_names": list(self.input_names),
            "success": [bool(s) for s in self.success],
            "iterations": [int(i) for i in self.iterations],
            "status": list(self.status),
            "bounds": {"x_min": _finite_or_none(self.x_min), "x_max": _finite_or_none(self.x_max),
                       "u_min": _finite_or_none(self.u_min), "u_max": _finite_or_none(self.u_max)},
            "x_ref": None if self.x_ref is None else _finite_or_none(self.x_ref),
            "u_ref": None if self.u_ref is None else _finite_or_none(self.u_ref),
            "stats": self.stats(),
        }

    def save_json(self, path: str | os.PathLike[str]) -> Path:
        """Write `to_dict` as JSON (through a temporary file).

        Parameters
        ----------
        path : str or path-like

        Returns
        -------
        Path
        """
        return _write_atomic(Path(path), _json_text(self.to_dict()).encode())

    def save_csv(self, path: str | os.PathLike[str]) -> Path:
        """Write one row per sampling instant: ``t, <states>, <inputs>, solve_time``.

        The last row (time K) has no input and no solve time: those cells are empty.

        Parameters
        ----------
        path : str or path-like

        Returns
        -------
        Path
        """
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["t", *self.state_names, *self.input_names, "solve_time"])
        for k in range(self.steps + 1):
            row = [repr(float(self.t[k]))] + [repr(float(v)) for v in self.x[k]]
            if k < self.steps:
                row += [repr(float(v)) for v in self.u[k]] + [repr(float(self.solve_time[k]))]
            else:
                row += [""] * (len(self.input_names) + 1)
            writer.writerow(row)
        return _write_atomic(Path(path), buf.getvalue().encode())

    def plot(self, directory: str | os.PathLike[str], *, log_time: bool | None = None) -> list[Path]:
        """Write ``states.png``, ``inputs.png`` and ``solve_time.png`` into `directory`.

        States get one subplot each, with finite bounds dashed and the
        reference dotted; inputs are drawn as stairs with their bounds; solve
        times in ms per step, failed solves marked in red.

        Parameters
        ----------
        directory : str or path-like
            Created if missing.
        log_time : bool, optional
            Logarithmic solve-time axis (default: when max/min exceeds 20).

        Returns
        -------
        list of Path
            The three PNG files.
        """
        # Agg canvas directly: no pyplot, so a user's interactive backend is untouched.
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        directory = Path(directory)
        nx, nu = self.x.shape[1], self.u.shape[1]
        ncol = 2 if nx > 4 else 1
        nrow = -(-nx // ncol)

        def save(fig: Figure, name: str) -> Path:
            FigureCanvasAgg(fig)
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=110)
            return _write_atomic(directory / name, buf.getvalue())

        def bounds(ax, lo: float, hi: float) -> None:
            for b in (lo, hi):
                if np.isfinite(b):
                    ax.axhline(b, color="tab:red", ls="--", lw=0.9)

        fig = Figure(figsize=(6.4 * ncol, 1.7 * nrow + 0.8), layout="constrained")
        axes = fig.subplots(nrow, ncol, sharex=True, squeeze=False).ravel(order="F")
        for i in range(nx):
            ax = axes[i]
            ax.plot(self.t, self.x[:, i], color="tab:blue", lw=1.4)
            bounds(ax, self.x_min[i], self.x_max[i])
            if self.x_ref is not None:
                ax.axhline(self.x_ref[i], color="k", ls=":", lw=1.0)
            ax.set_ylabel(self.state_names[i])
            ax.grid(alpha=0.3)
        for ax in axes[nx:]:
            ax.set_visible(False)
        for c in range(ncol):
            last = axes[min(nx, (c + 1) * nrow) - 1]
            last.set_xlabel("t [s]")
            last.tick_params(labelbottom=True)
        fig.suptitle(f"{self.model_name}: closed-loop states")
        paths = [save(fig, "states.png")]

        fig = Figure(figsize=(6.4, 1.7 * nu + 0.8), layout="constrained")
        axes = fig.subplots(nu, 1, sharex=True, squeeze=False).ravel()
        for j in range(nu):
            ax = axes[j]
            if self.steps:
                ax.stairs(self.u[:, j], self.t, color="tab:green", lw=1.4, baseline=None)
            bounds(ax, self.u_min[j], self.u_max[j])
            if self.u_ref is not None:
                ax.axhline(self.u_ref[j], color="k", ls=":", lw=1.0)
            ax.set_ylabel(self.input_names[j])
            ax.grid(alpha=0.3)
        axes[-1].set_xlabel("t [s]")
        fig.suptitle(f"{self.model_name}: applied inputs")
        paths.append(save(fig, "inputs.png"))

        fig = Figure(figsize=(6.4, 3.0), layout="constrained")
        ax = fig.subplots()
        ms = self.solve_time * 1e3
        k = np.arange(self.steps)
        ax.plot(k, ms, ".-", color="tab:blue", lw=0.8, ms=3, label="solve time")
        if (~self.success).any():
            ax.plot(k[~self.success], ms[~self.success], "x", color="tab:red", label="failed")
        if self.steps:
            ax.axhline(float(ms.mean()), color="k", ls=":", lw=1.0, label=f"mean {ms.mean():.2f} ms")
            positive = ms[ms > 0]
            if log_time is None:
                log_time = positive.size > 0 and positive.max() > 20 * positive.min()
            if log_time and positive.size:
                ax.set_yscale("log")
            ax.legend(loc="upper right", fontsize="small")
        ax.set_xlabel("step")
        ax.set_ylabel("solve time [ms]")
        ax.grid(alpha=0.3, which="both")
        fig.suptitle(f"{self.model_name}: controller solve time per step")
        paths.append(save(fig, "solve_time.png"))
        return paths


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
