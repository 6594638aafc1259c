"""A closed-loop run: times, states, inputs, solve statistics; JSON, CSV and PNG.

`simulate_closed_loop` (in `shooting.closed_loop`) produces a `Trajectory`;
this module only records, summarises, saves and plots it.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shooting import _validate
from shooting._files import compact_json, write_atomic

__all__ = ["Trajectory"]


def _finite_or_none(values: np.ndarray) -> list:
    """A list for JSON: non-finite numbers (unbounded limits, NaN) become null."""
    return [float(v) if np.isfinite(v) else None for v in np.asarray(values, dtype=float).reshape(-1)]


def _rows(a: np.ndarray) -> list[list]:
    return [_finite_or_none(row) for row in np.asarray(a, dtype=float)]


def _reference(value: np.ndarray | None) -> list | None:
    """A reference for JSON: None, one vector, or one row per sample."""
    if value is None:
        return None
    return _rows(value) if value.ndim == 2 else _finite_or_none(value)


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
    x_ref : ndarray, shape (nx,) or (K+1, nx), optional
        State reference: constant, or one row per sampling instant (a
        time-varying reference); for plots, the tracking and final errors.
    u_ref : ndarray, shape (nu,) or (K, nu), optional
        Input reference: constant or one row per step; for the closed-loop cost.
    Q : ndarray, shape (nx, nx), optional
        State weight for `stats`' closed-loop cost.
    R : ndarray, shape (nu, nu), optional
        Input weight for `stats`' closed-loop cost.
    status : tuple of str, length K
        Solver status per step.
    stopped : str
        Why the run ended before its K steps ("" when it completed).
    time_unit : str, default "s"
        The model's unit of time, for the plots.
    x_hat : ndarray, shape (K+1, nx), optional
        The state estimates the controller was given (output feedback:
        `simulate_closed_loop` with an estimator); None when it saw the state.
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
    path_values: np.ndarray | None = None
    stopped: str = ""
    time_unit: str = "s"
    state_units: tuple[str, ...] = ()
    input_units: tuple[str, ...] = ()
    x_hat: np.ndarray | None = None

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
        nx, nu = self.x.shape[1], self.u.shape[1]
        if self.x_hat is not None:
            self.x_hat = np.asarray(self.x_hat, dtype=float)
            if self.x_hat.shape != self.x.shape:
                raise ValueError(f"x_hat must be of shape {self.x.shape} (one estimate per state), got "
                                 f"{self.x_hat.shape}")
        for name, n, rows in (("x_ref", nx, K + 1), ("u_ref", nu, K)):
            value = getattr(self, name)
            if value is not None:
                arr = np.asarray(value, dtype=float)
                if arr.shape not in ((n,), (rows, n)):
                    raise ValueError(f"{name} must be of shape ({n},) or ({rows}, {n}), got {arr.shape}")
                setattr(self, name, arr)

    @property
    def time_varying(self) -> bool:
        """Whether the state reference is recorded per sample (shape (K+1, nx))."""
        return self.x_ref is not None and self.x_ref.ndim == 2

    def reference_states(self) -> np.ndarray | None:
        """The state reference at every sampling instant, shape (K+1, nx) (None without one)."""
        if self.x_ref is None:
            return None
        return np.broadcast_to(self.x_ref, self.x.shape).copy()

    def reference_inputs(self) -> np.ndarray | None:
        """The input reference of every step, shape (K, nu) (None without one)."""
        if self.u_ref is None:
            return None
        return np.broadcast_to(self.u_ref, self.u.shape).copy()

    def tracking_error(self, skip: int = 0) -> dict[str, np.ndarray]:
        """RMS and largest absolute deviation of each state from its reference over the run.

        Parameters
        ----------
        skip : int, default 0
            Leave out the first `skip` sampling instants (a transient).

        Returns
        -------
        dict
            ``"rms"`` and ``"max"``, each shape (nx,): over k = skip..K of
            |x_k - x_ref_k| (the reference at t_k; zero without one).
        """
        skip = _validate.integer(skip, "skip", minimum=0, maximum=self.steps)
        ref = self.reference_states()
        err = self.x[skip:] - (0.0 if ref is None else ref[skip:])
        return {"rms": np.sqrt(np.mean(err ** 2, axis=0)), "max": np.max(np.abs(err), axis=0)}

    @property
    def steps(self) -> int:
        """Number of control steps K."""
        return int(self.u.shape[0])

    def final_error(self) -> float:
        """Euclidean distance of the final state from the (final) reference (from 0 without one)."""
        ref = self.reference_states()
        return float(np.linalg.norm(self.x[-1] - (0.0 if ref is None else ref[-1])))

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
            max_input_violation, max_input_change, stopped``, ``tracking_error``
            (`tracking_error` as lists) when there is a reference,
            ``estimation_error`` (with estimates: ``{"rms", "max"}`` of
            x_hat - x per state, lists; None without),
            ``max_path_violation`` (the largest h(x_k, u_k, p_k) above 0; None
            where the path constraints are not known: none, or a controller
            that does not say, as a loaded C controller) and
            ``closed_loop_cost`` = sum over k < K of
            (x_k - x_ref_k)' Q (x_k - x_ref_k) + (u_k - u_ref_k)' R (u_k - u_ref_k)
            (no 1/2, no dt, as the OCP cost; None unless both weights are known:
            give them to `stats` for a loaded controller). ``max_input_change``:
            the largest |u_k - u_{k-1}| per input (zeros for fewer than two
            steps). Every key is always present.
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
            "max_input_change": _finite_or_none(np.abs(np.diff(self.u, axis=0)).max(axis=0) if K > 1
                                                else np.zeros(self.u.shape[1])),
            "stopped": self.stopped,
            "max_path_violation": None if self.path_values is None else
            float(np.maximum(self.path_values, 0.0).max(initial=0.0)),
            "closed_loop_cost": None,
            "estimation_error": None if self.x_hat is None else {
                "rms": _finite_or_none(np.sqrt(np.mean((self.x_hat - self.x) ** 2, axis=0))),
                "max": _finite_or_none(np.max(np.abs(self.x_hat - self.x), axis=0))},
        }
        if self.x_ref is not None:
            out["tracking_error"] = {key: _finite_or_none(v) for key, v in self.tracking_error().items()}
        Q = self.Q if Q is None else Q
        R = self.R if R is None else R
        if Q is not None and R is not None:
            nx, nu = self.x.shape[1], self.u.shape[1]
            Qm = _validate.weight(Q, nx, "Q")
            Rm = _validate.weight(R, nu, "R")
            xr, ur = self.reference_states(), self.reference_inputs()
            dx = self.x[:-1] - (0.0 if xr is None else xr[:-1])
            du = self.u - (0.0 if ur is None else ur)
            out["closed_loop_cost"] = float(np.einsum("ki,ij,kj->", dx, Qm, dx) + np.einsum("ki,ij,kj->", du, Rm, du))
        return out

    def _path_figure(self) -> Any:
        """The path constraints' values h (<= 0) over the run, one line per row (for `plot`): a Figure."""
        from matplotlib.figure import Figure

        assert self.path_values is not None
        fig = Figure(figsize=(6.4, 3.0), layout="constrained")
        ax = fig.subplots()
        for j in range(self.path_values.shape[1]):
            ax.stairs(self.path_values[:, j], self.t[:self.path_values.shape[0] + 1], lw=1.2, baseline=None,
                      label=f"h{j}")
        ax.axhline(0.0, color="tab:red", ls="--", lw=0.9)
        ax.set_xlabel(f"t [{self.time_unit}]")
        ax.set_ylabel("h(x, u, p)  (<= 0)")
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
        fig.suptitle(f"{self.model_name}: path constraints")
        return fig

    def _estimate_line(self, ax: Any, i: int) -> None:
        """With output feedback, state i's estimate beside it (dotted orange) and a legend; nothing without."""
        if self.x_hat is not None:
            ax.plot(self.t, self.x_hat[:, i], color="tab:orange", ls=":", lw=1.4, label="estimate")
            ax.legend(fontsize="x-small", loc="best")

    @staticmethod
    def label(name: str, units: tuple[str, ...], i: int) -> str:
        """``"name [unit]"`` for a plot axis or a CSV column, or the name alone without a unit."""
        unit = units[i] if i < len(units) else ""
        return f"{name} [{unit}]" if unit else name

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: ``t`` (K+1), ``x`` (K+1 rows of nx), ``u`` (K rows of nu),
        ``solve_time`` (K, seconds), plus ``model, state_names, input_names,
        success, iterations, status, bounds, x_ref, u_ref, stats``; ``x_ref``
        and ``u_ref`` are one vector (constant) or one row per sample (K+1
        and K rows) for a time-varying reference; ``x_hat`` (K+1 rows of nx)
        with output feedback.

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
            "state_units": list(self.state_units),
            "input_units": list(self.input_units),
            **({} if self.path_values is None else {"path_values": _rows(self.path_values)}),
            **({} if self.x_hat is None else {"x_hat": _rows(self.x_hat)}),
            "success": [bool(s) for s in self.success],
            "iterations": [int(i) for i in self.iterations],
            "status": list(self.status),
            "bounds": {"x_min": _finite_or_none(self.x_min), "x_max": _finite_or_none(self.x_max),
                       "u_min": _finite_or_none(self.u_min), "u_max": _finite_or_none(self.u_max)},
            "x_ref": _reference(self.x_ref),
            "u_ref": _reference(self.u_ref),
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
        return write_atomic(Path(path), compact_json(self.to_dict()).encode())

    def save_csv(self, path: str | os.PathLike[str]) -> Path:
        """Write one row per sampling instant: ``t, <states>, <inputs>, solve_time``.

        The last row (time K) has no input and no solve time: those cells are
        empty. A time-varying reference adds the columns ``<state>_ref`` (and
        ``<input>_ref`` when the input reference is per step too); output
        feedback the estimates' columns ``<state>_hat``.

        Parameters
        ----------
        path : str or path-like

        Returns
        -------
        Path
        """
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        xr = self.x_ref if self.time_varying else None
        ur = self.u_ref if xr is not None and self.u_ref is not None and self.u_ref.ndim == 2 else None
        xs = [self.label(n, self.state_units, i) for i, n in enumerate(self.state_names)]
        us = [self.label(n, self.input_units, j) for j, n in enumerate(self.input_names)]
        writer.writerow([self.label("t", (self.time_unit,), 0) if any(self.state_units) or any(self.input_units)
                         else "t",
                         *xs, *us, "solve_time"]
                        + ([self.label(f"{n}_ref", self.state_units, i) for i, n in enumerate(self.state_names)]
                           if xr is not None else [])
                        + ([self.label(f"{n}_ref", self.input_units, j) for j, n in enumerate(self.input_names)]
                           if ur is not None else [])
                        + ([self.label(f"{n}_hat", self.state_units, i) for i, n in enumerate(self.state_names)]
                           if self.x_hat is not None else []))
        for k in range(self.steps + 1):
            row = [repr(float(self.t[k]))] + [repr(float(v)) for v in self.x[k]]
            if k < self.steps:
                row += [repr(float(v)) for v in self.u[k]] + [repr(float(self.solve_time[k]))]
            else:
                row += [""] * (len(self.input_names) + 1)
            if xr is not None:
                row += [repr(float(v)) for v in xr[k]]
            if ur is not None:
                row += [repr(float(v)) for v in ur[k]] if k < self.steps else [""] * len(self.input_names)
            if self.x_hat is not None:
                row += [repr(float(v)) for v in self.x_hat[k]]
            writer.writerow(row)
        return write_atomic(Path(path), buf.getvalue().encode())

    def plot(self, directory: str | os.PathLike[str], *, log_time: bool | None = None) -> list[Path]:
        """Write ``states.png``, ``inputs.png``, ``solve_time.png`` and, with path constraints,
        ``path_constraints.png`` into `directory`.

        States get one subplot each, with finite bounds dashed red, the
        reference dashed black beside the state (a time-varying one sample by
        sample) and, with output feedback, the estimate dotted orange; inputs
        are drawn as stairs with their bounds and reference; solve times in ms
        per step, failed solves marked in red.

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
        xr, ur = self.reference_states(), self.reference_inputs()
        ncol = 2 if nx > 4 else 1
        nrow = -(-nx // ncol)

        def save(fig: Figure, name: str) -> Path:
            FigureCanvasAgg(fig)
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=110)
            return write_atomic(directory / name, buf.getvalue())

        def bounds(ax: Any, lo: float, hi: float) -> None:
            for b in (lo, hi):
                if np.isfinite(b):
                    ax.axhline(b, color="tab:red", ls="--", lw=0.9)

        fig = Figure(figsize=(6.4 * ncol, 1.7 * nrow + 0.8), layout="constrained")
        axes = fig.subplots(nrow, ncol, sharex=True, squeeze=False).ravel(order="F")
        for i in range(nx):
            ax = axes[i]
            ax.plot(self.t, self.x[:, i], color="tab:blue", lw=1.4, label="state")
            self._estimate_line(ax, i)
            bounds(ax, self.x_min[i], self.x_max[i])
            if xr is not None:
                ax.plot(self.t, xr[:, i], color="k", ls="--", lw=1.0, label="reference")
            ax.set_ylabel(self.label(self.state_names[i], self.state_units, i))
            ax.grid(alpha=0.3)
        for ax in axes[nx:]:
            ax.set_visible(False)
        for c in range(ncol):
            last = axes[min(nx, (c + 1) * nrow) - 1]
            last.set_xlabel(f"t [{self.time_unit}]")
            last.tick_params(labelbottom=True)
        fig.suptitle(f"{self.model_name}: closed-loop states" + ("" if self.x_hat is None else " and estimates"))
        paths = [save(fig, "states.png")]

        fig = Figure(figsize=(6.4, 1.7 * nu + 0.8), layout="constrained")
        axes = fig.subplots(nu, 1, sharex=True, squeeze=False).ravel()
        for j in range(nu):
            ax = axes[j]
            if self.steps:
                ax.stairs(self.u[:, j], self.t, color="tab:green", lw=1.4, baseline=None)
            bounds(ax, self.u_min[j], self.u_max[j])
            if ur is not None and self.steps:
                ax.stairs(ur[:, j], self.t, color="k", ls="--", lw=1.0, baseline=None, label="reference")
            ax.set_ylabel(self.label(self.input_names[j], self.input_units, j))
            ax.grid(alpha=0.3)
        axes[-1].set_xlabel(f"t [{self.time_unit}]")
        fig.suptitle(f"{self.model_name}: applied inputs")
        paths.append(save(fig, "inputs.png"))

        if self.path_values is not None and self.steps:
            paths.append(save(self._path_figure(), "path_constraints.png"))

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
