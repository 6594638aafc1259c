"""Closed-loop simulation: a controller drives an accurately integrated plant.

`simulate_closed_loop` runs any `Controller` (``.step(x, t)``, ``dt``,
``model``) against a plant integrated with many substeps of an accurate
method (optionally a different model and with process noise) and returns a
`Trajectory`, which reports solve-time statistics and writes JSON, CSV and
PNG plots. Time-varying references and model parameters are callables of
time, evaluated on each sample's horizon (`sample_horizon`) and handed to the
controller's ``step`` (or an exported controller's ``set_reference``).
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _interrupt, _validate
from shooting.integrate.integrator import build_integrator
from shooting.model import Model
from shooting.mpc.controllers import (
    Controller,
    ControlStep,
    MPCController,
    ParameterFunction,
    ReferenceFunction,
    StageData,
    sample_horizon,
    stage_keywords,
)
from shooting.mpc.feedback import Estimator, Sensors
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.mpc.rti import RTIController
from shooting.mpc.trajectory import Trajectory

__all__ = ["simulate_closed_loop"]

FloatArray = npt.NDArray[np.float64]


class _ProgressBar:
    """``\\r[#####.....] 37/100  solve 2.1 ms`` on a stream, at most ~20 redraws per second.

    The closed loop's default progress reporter: called with one message per
    sample (the bar counts the calls).
    """

    def __init__(self, total: int, enabled: bool, stream: Any = None, width: int = 30) -> None:
        self.total, self.enabled, self.width = total, enabled, width
        self.stream = sys.stderr if stream is None else stream
        self.last = 0.0
        self.done = 0

    def __call__(self, message: str) -> None:
        self.done += 1
        now = time.perf_counter()
        if not self.enabled or (self.done < self.total and now - self.last < 0.05):
            return
        self.last = now
        fill = int(self.width * self.done / max(self.total, 1))
        self.stream.write(f"\r[{'#' * fill}{'.' * (self.width - fill)}] {message}   ")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.done:
            self.stream.write("\n")
            self.stream.flush()


def _constant(value: Any, n: int) -> FloatArray | None:
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


@dataclass(frozen=True)
class _Annotations:
    """What the trajectory records besides the run: bounds, the target, the weights."""

    x_min: FloatArray
    x_max: FloatArray
    x_ref: FloatArray | None
    u_ref: FloatArray | None
    Q: FloatArray | None
    R: FloatArray | None
    path: Callable[[Any, Any, Any], Any] | None = None  # the OCP's path constraints h(x, u, p) <= 0

    @classmethod
    def of(cls, controller: Controller, model: Model) -> _Annotations:
        """From the controller's OCP when it has one (`MPCController`, `RTIController`), else the model."""
        ocp = controller.ocp if isinstance(controller, (MPCController, RTIController)) else None
        if ocp is None:  # (an exported controller knows its target: `HostController.target_state`)
            target = getattr(controller, "target_state", None)
            return cls(model.x_min.copy(), model.x_max.copy(), _constant(target, model.nx), None, None, None)
        x_ref, u_ref = ocp.x_ref, ocp.u_ref
        if isinstance(controller, MPCController):
            x_ref = ocp.x_ref if controller.x_ref is None else controller.x_ref
            u_ref = ocp.u_ref if controller.u_ref is None else controller.u_ref
        return cls(ocp.x_min.copy(), ocp.x_max.copy(), _constant(x_ref, model.nx), _constant(u_ref, model.nu),
                   ocp.Q, ocp.R, ocp.problem.constraints.path_constraints)


def _noise(noise_std: float | Sequence[float] | FloatArray | None, nx: int) -> FloatArray | None:
    if noise_std is None:
        return None
    std = _validate.vector(noise_std, nx, "noise_std")
    if (std < 0).any():
        raise ValueError(f"noise_std must be a non-negative number or {nx} of them, got {noise_std!r}")
    return std


def simulate_closed_loop(
    controller: Controller | MultipleShootingOCP,
    x0: Sequence[float] | FloatArray,
    steps: int,
    *,
    plant: Model | None = None,
    plant_method: str = "dopri5",
    plant_steps: int = 20,
    p: Sequence[float] | FloatArray | None = None,
    reference: ReferenceFunction | None = None,
    parameters: ParameterFunction | None = None,
    noise_std: float | Sequence[float] | FloatArray | None = None,
    seed: int = 0,
    progress: bool | Callable[[str], None] | Literal["always"] | None = True,
    dt: float | None = None,
    estimator: Estimator | None = None,
    measurement_noise: float | Sequence[float] | FloatArray | None = 0.0,
) -> Trajectory:
    """Run a controller against a simulated plant for `steps` sampling intervals.

    At t_k = k dt the controller gets the plant state x_k and returns u_k; u_k
    is clipped to the plant's input bounds and held over [t_k, t_k + dt], and
    the plant is integrated with `plant_steps` substeps of `plant_method`.
    With `noise_std`, Gaussian process noise is added to the state after each
    plant step (seeded: the same seed gives the same run).

    Output feedback: with an `estimator`, the controller gets its estimate,
    not the state. At t_0 that is the estimator's prior (``estimator.x_hat``
    after its ``reset()``); at t_k, k >= 1, the plant is measured through the
    estimator's sensors, y_k = h(x_k, u_{k-1}, p) + v_k with v_k Gaussian of
    standard deviations `measurement_noise` (seeded by `seed`, a stream of its
    own), and the estimator is updated with ``(y_k, u_{k-1}, t_{k-1})``. The
    trajectory records the estimates (`Trajectory.x_hat`).

    Parameters
    ----------
    controller : Controller or MultipleShootingOCP
        Any object with ``step(x, t) -> ControlStep`` and attributes ``dt``
        and ``model`` (`MPCController`, `RTIController`, your own), or an OCP
        (wrapped in `MPCController`, with parameters `p`). Its ``reset()``, if
        any, is called first, so every run starts cold. When its ``step``
        takes a ``u_prev`` keyword, it gets the input applied at the previous
        sample (from the second sample on; the rate penalty's u_{-1}).
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
    reference : callable ``t -> (x_ref, u_ref)``, optional
        A time-varying reference, shapes (nx,) and (nu,) (u_ref may be None:
        the controller's own). At each sample it is evaluated at t_k + j dt,
        j = 0..N for x_ref and j = 0..N-1 for u_ref, and passed to
        ``controller.step(x, t, x_ref=..., u_ref=...)`` (or, for an exported C
        controller, to its ``set_reference(j, x_ref, u_ref)``). The trajectory
        records it per sample.
    parameters : callable ``t -> p``, optional
        Time-varying model parameters, shape (np,): the controller gets them
        at t_k + j dt, j = 0..N-1 (``step(..., p=...)``, shape (N, np)) and
        the plant uses ``parameters(t_k)`` over [t_k, t_k + dt]. Not
        together with `p`.
    noise_std : float or array_like, shape (nx,), optional
        Standard deviation of the additive process noise per state.
    seed : int, default 0
        Seed of the noise generators (process noise; measurement noise).
    progress : bool, callable ``(str) -> None`` or "always", default True
        One message per sample (``"37/100  solve 2.1 ms"``, with
        ``"  (solver failed)"`` after a failed solve): True draws them as a
        progress bar on stderr when it is a terminal, "always" draws the bar
        regardless, a callable is called with each, None or False is silent.
    dt : float, optional
        Sampling time [s] (default ``controller.dt``).
    estimator : Estimator, optional
        A state estimator (`shooting.EKF`, `shooting.MHE`, anything with ``model``, ``measurement_function``,
        ``x_hat`` and ``update(y, u, t)``): output feedback (above). Its ``reset()`` is called first.
    measurement_noise : float or array_like, shape (ny,), default 0.0
        Standard deviations of the measurement noise, one per sensor of the estimator (needs an estimator
        when nonzero).

    Returns
    -------
    Trajectory
        If the plant state becomes non-finite, or the controller returns a
        non-finite input (a failed sample), the run stops there and
        ``Trajectory.stopped`` says so.

    Raises
    ------
    ValueError
        A controller that is neither an OCP nor a `Controller`, mismatched
        plant dimensions, a bad `x0`, `steps`, `dt`, `p` or `noise_std`, a
        controller that returns an input of the wrong size, a `reference` or `parameters` the controller cannot take, or
        one that returns the wrong shape (the message names the callable), an estimator whose model does
        not match the controller's, a bad `measurement_noise` or one without an estimator.
    """
    if p is not None and parameters is not None:
        raise ValueError("give the plant's parameters either as p (constant) or as parameters(t), not both")
    if isinstance(controller, MultipleShootingOCP):
        controller = MPCController(controller, p=None if p is None else _validate.vector(
            p, controller.model.np, "p", broadcast=False))
    if not isinstance(controller, Controller):
        raise ValueError(f"controller must be a MultipleShootingOCP or have a step(x, t) method and dt and "
                         f"model attributes, got {type(controller).__name__}")
    model = controller.model
    plant = model if plant is None else plant
    _check_plant(plant, model, parameters)
    K = _validate.integer(steps, "steps", minimum=0)
    dt = _validate.positive_real(controller.dt if dt is None else dt, "dt")
    x = _validate.vector(x0, plant.nx, "x0", broadcast=False)
    p_plant = plant.p0 if p is None else _validate.vector(p, plant.np, "p", broadcast=False)
    std = _noise(noise_std, plant.nx)
    always = isinstance(progress, str) and progress == "always"
    bar = _ProgressBar(K, always or sys.stderr.isatty())
    report = bar if always else _validate.progress(progress, default=bar)
    rng = np.random.default_rng(_validate.integer(seed, "seed", minimum=0))
    sensors = _sensors(estimator, measurement_noise, model, int(seed))
    feed = _Feed(controller, model, dt, reference, parameters)
    reset = getattr(controller, "reset", None)
    if callable(reset):
        reset()  # a fresh run starts cold, not from the last run's solution
    F = build_integrator(plant, plant_method, plant_steps, "none", name=f"{plant.name}_plant")

    z = plant.consistent_z(x, plant.u0, p_plant) if plant.nz else np.zeros(0)
    x_hat = None if sensors is None else sensors.reset()
    record = _Record([x.copy()], None if x_hat is None else [x_hat])
    u_prev: FloatArray | None = None
    try:
        for k in range(K):
            _interrupt.check()  # a Ctrl-C that an extension swallowed during the last sample stops the loop here
            t = k * dt
            step, data = feed.step((x if x_hat is None else x_hat).copy(), t, u_prev)
            u = _checked_input(step, plant.nu, k)
            if not np.isfinite(u).all():
                record.stopped = (f"controller returned a non-finite input {u} at step {k} (t = {t:g} "
                                  f"{model.time_unit}): a failed sample, the run stops")
                break
            u = np.clip(u, plant.u_min, plant.u_max)
            p_k = p_plant if data.p is None else data.p[0]
            # (a plant with algebraic states carries z from sample to sample as Newton's guess)
            outs = F.call([ca.DM(x), ca.DM(u), ca.DM(p_k), t, dt, *([ca.DM(z)] if plant.nz else [])])
            x_next = np.array(outs[0], dtype=float).reshape(-1)
            z = np.array(outs[-1], dtype=float).reshape(-1) if plant.nz else z
            if std is not None:
                x_next = x_next + std * rng.standard_normal(plant.nx)
            if report is not None:
                report(f"{k + 1}/{K}  solve {float(step.solve_time) * 1e3:.1f} ms"
                       + ("" if step.success else "  (solver failed)"))
            if not np.isfinite(x_next).all():
                record.stopped = f"plant state became non-finite at step {k} (t = {(k + 1) * dt:g} s)"
                break
            if sensors is not None and (x_hat := _estimate(sensors, x_next, u, p_k, t, k, record)) is None:
                break
            record.add(step, u, x_next, data, p_k, x_hat)
            x, u_prev = x_next, u
    finally:
        bar.close()
    notes = _Annotations.of(controller, model)
    if reference is not None:
        notes = record.references(notes, feed.final_reference(len(record.us) * dt))
    return record.trajectory(dt, model, plant, notes)


def _sensors(estimator: Estimator | None, noise: Any, model: Model, seed: int) -> Sensors | None:
    """The closed loop's sensors through `estimator` (None without one; then no measurement noise)."""
    if estimator is None:
        if noise is not None and not (isinstance(noise, (int, float, np.number)) and float(noise) == 0.0):
            raise ValueError("measurement_noise is given but there is no estimator to measure through: pass "
                             "estimator=shooting.EKF(...) (or MHE), or drop measurement_noise")
        return None
    return Sensors(estimator, model, 0.0 if noise is None else noise, seed)


def _estimate(sensors: Sensors, x: FloatArray, u: FloatArray, p: FloatArray, t: float, k: int,
              record: _Record) -> FloatArray | None:
    """The estimator's update after step k; None (and the run stopped, saying why) when it fails."""
    try:
        return sensors.measure_and_update(x, u, p, t)
    except ValueError as err:
        record.stopped = f"the estimator failed after step {k} (t = {t:g}): {_validate.one_line(str(err))}"
        return None


def _check_plant(plant: object, model: object, parameters: ParameterFunction | None) -> None:
    if not isinstance(plant, Model) or not isinstance(model, Model):
        raise ValueError(f"plant and controller.model must be shooting.Model objects, got "
                         f"{type(plant).__name__} and {type(model).__name__}")
    if (plant.nx, plant.nu) != (model.nx, model.nu):
        raise ValueError(f"plant {plant.name} has nx={plant.nx}, nu={plant.nu} but the controller's model "
                         f"{model.name} has nx={model.nx}, nu={model.nu}: they must match")
    if parameters is not None and plant.np != model.np:
        raise ValueError(f"parameters(t) feeds controller and plant, but plant {plant.name} has np={plant.np} "
                         f"and the controller's model {model.name} np={model.np}")


class _Feed:
    """Hands each sample's data to the controller: ``step`` keywords, or ``set_reference`` (exported C)."""

    def __init__(self, controller: Controller, model: Model, dt: float, reference: ReferenceFunction | None,
                 parameters: ParameterFunction | None) -> None:
        self.controller, self.model, self.dt = controller, model, dt
        self.reference, self.parameters = reference, parameters
        self.keys = stage_keywords(controller)
        name = type(controller).__name__
        for what, value in (("reference", reference), ("parameters", parameters)):
            if value is not None and not callable(value):
                raise ValueError(f"{what} must be a function of time t, got {type(value).__name__}")
        self.set_reference = getattr(controller, "set_reference", None)
        if reference is not None and not {"x_ref", "u_ref"} <= self.keys and not callable(self.set_reference):
            raise ValueError(f"controller {name} cannot take a time-varying reference: its step(x, t) has no "
                             f"x_ref/u_ref keywords and it has no set_reference(k, x_ref, u_ref) method")
        if parameters is not None and "p" not in self.keys:
            raise ValueError(f"controller {name} cannot take time-varying parameters: its step(x, t) has no p "
                             f"keyword")
        self.horizon = 0
        if reference is not None or parameters is not None:
            horizon = getattr(controller, "horizon", getattr(getattr(controller, "ocp", None), "horizon", None))
            if not isinstance(horizon, (int, np.integer)) or horizon < 1:
                raise ValueError(f"controller {name} has no horizon (an int attribute): reference(t) and "
                                 f"parameters(t) are evaluated over it")
            self.horizon = int(horizon)

    def step(self, x: FloatArray, t: float, u_prev: FloatArray | None) -> tuple[ControlStep, StageData]:
        """The controller's step at time `t` with this sample's data (and the input applied last)."""
        data = (sample_horizon(self.model, t, self.dt, self.horizon, reference=self.reference,
                               parameters=self.parameters) if self.horizon else StageData())
        kwargs: dict[str, Any] = {k: v for k, v in data.keywords().items() if k in self.keys}
        if data.x_ref is not None and "x_ref" not in self.keys:
            assert self.set_reference is not None
            for j in range(self.horizon + 1):
                u_j = None if data.u_ref is None or j == self.horizon else data.u_ref[j]
                self.set_reference(j, data.x_ref[j], u_j)
        if u_prev is not None and "u_prev" in self.keys:
            kwargs["u_prev"] = u_prev
        return self.controller.step(x, t, **kwargs), data

    def final_reference(self, t: float) -> FloatArray:
        """The state reference at `t` (the last sample's), shape (nx,)."""
        data = sample_horizon(self.model, t, self.dt, 0, reference=self.reference)
        assert data.x_ref is not None
        return data.x_ref[0]


def _checked_input(step: ControlStep, nu: int, k: int) -> FloatArray:
    u = np.asarray(step.u, dtype=float).reshape(-1)
    if u.size != nu:
        raise ValueError(f"controller returned {u.size} inputs at step {k}, the plant takes {nu}")
    return u


class _Record:
    """The closed loop's per-step lists, and the `Trajectory` they make."""

    def __init__(self, xs: list[FloatArray], x_hats: list[FloatArray] | None = None) -> None:
        self.xs = xs
        self.x_hats = x_hats
        self.us: list[FloatArray] = []
        self.x_refs: list[FloatArray] = []
        self.u_refs: list[FloatArray | None] = []
        self.times: list[float] = []
        self.oks: list[bool] = []
        self.iters: list[int] = []
        self.statuses: list[str] = []
        self.ps: list[FloatArray] = []
        self.stopped = ""

    def add(self, step: ControlStep, u: FloatArray, x_next: FloatArray, data: StageData, p: FloatArray,
            x_hat: FloatArray | None = None) -> None:
        self.ps.append(np.asarray(p, dtype=float).reshape(-1))
        if self.x_hats is not None and x_hat is not None:
            self.x_hats.append(x_hat.copy())
        if data.x_ref is not None:
            self.x_refs.append(data.x_ref[0])
            self.u_refs.append(None if data.u_ref is None else data.u_ref[0])
        self.us.append(u)
        self.times.append(float(step.solve_time))
        self.oks.append(bool(step.success))
        self.iters.append(int(step.iterations))
        self.statuses.append(str(step.status))
        self.xs.append(x_next.copy())

    def references(self, notes: _Annotations, final: FloatArray) -> _Annotations:
        """`notes` with the reference of every sample: x_ref (K+1, nx), u_ref (K, nu) when every sample had one."""
        x_ref = np.array([*self.x_refs, final]).reshape(len(self.x_refs) + 1, final.size)
        u_ref = notes.u_ref
        if self.u_refs and all(u is not None for u in self.u_refs):
            u_ref = np.array(self.u_refs)
        return dataclasses.replace(notes, x_ref=x_ref, u_ref=u_ref)

    def trajectory(self, dt: float, model: Model, plant: Model, notes: _Annotations) -> Trajectory:
        n = len(self.us)
        return Trajectory(
            t=np.round(np.arange(n + 1) * dt, 12),
            x=np.array(self.xs).reshape(n + 1, plant.nx),
            u=np.array(self.us).reshape(n, plant.nu),
            solve_time=np.array(self.times),
            success=np.array(self.oks, dtype=bool),
            iterations=np.array(self.iters, dtype=int),
            state_names=tuple(model.state_names),
            input_names=tuple(model.input_names),
            model_name=model.name,
            x_min=notes.x_min,
            x_max=notes.x_max,
            u_min=np.asarray(plant.u_min, dtype=float).copy(),
            u_max=np.asarray(plant.u_max, dtype=float).copy(),
            x_ref=notes.x_ref,
            u_ref=notes.u_ref,
            Q=notes.Q,
            R=notes.R,
            status=tuple(self.statuses),
            stopped=self.stopped,
            time_unit=model.time_unit,
            state_units=tuple(model.state_units),
            input_units=tuple(model.input_units),
            path_values=self.path_values(notes, model, n),
            x_hat=None if self.x_hats is None else np.array(self.x_hats).reshape(n + 1, plant.nx),
        )

    def path_values(self, notes: _Annotations, model: Model, n: int) -> FloatArray | None:
        """h(x_k, u_k, p_k) of each sample (n, nh), or None without path constraints."""
        if notes.path is None or n == 0:
            return None
        x, u, p = ca.SX.sym("x", model.nx), ca.SX.sym("u", model.nu), ca.SX.sym("p", model.np)
        h = ca.Function("h", [x, u, p], [ca.vec(ca.SX(notes.path(x, u, p)))])
        values = h.map(n)(np.array(self.xs[:n]).T, np.array(self.us).T, np.array(self.ps).reshape(n, model.np).T)
        return np.array(values, dtype=float).T.reshape(n, -1)
