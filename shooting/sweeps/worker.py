"""What runs where a case runs: the controller built once per process, one closed loop, one row.

A `SweepSpec` travels to every worker once (a Dask future the cases depend
on): the model as CasADi's own serialisation (workers need not have the
user's model file), the scenario, the controller's kind and, for a C
controller, the text of its sources (workers need not share a filesystem).
`run_case` builds the controller on the first case a process runs (the C
compiled into that process's private folder by `load_controller`) and keeps
it for the next ones; `simulate_closed_loop` resets it before every run, so
a case's row does not depend on what ran before it in the same process.

Cases in one process run one at a time (a lock): CasADi's solvers and the
C controller's static memory are not shared between threads. Start Dask
workers with ``--nthreads 1`` and as many processes as cores.

This module is also a Dask preload (``dask_setup``): the local cluster's
worker processes ignore SIGINT, so that Ctrl-C in a terminal (sent to the
whole process group) reaches only the sweep, which shuts them down.
"""

from __future__ import annotations

import pickle
import shutil
import signal
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import casadi as ca
import numpy as np

from shooting.model import Model
from shooting.mpc.controllers import Controller, MPCController
from shooting.mpc.rti import RTIController
from shooting.mpc.scenarios import Scenario, build_ocp
from shooting.mpc.simulate import simulate_closed_loop
from shooting.sweeps.cases import Case, Target, measure

__all__ = ["SweepSpec", "dask_setup", "forget", "model_bytes", "run_case"]


def model_bytes(model: Model) -> bytes:
    """`model` pickled with CasADi's serialisation of its symbols (a plain pickle refuses SX)."""
    with ca.global_pickle_context():
        return pickle.dumps(model)


#: The estimators a sweep can close its loops through (output feedback).
SWEEP_ESTIMATORS = ("ekf",)


@dataclass(frozen=True, eq=False)
class EstimatorSpec:
    """An output-feedback sweep's estimator, as workers rebuild it: an EKF on the model's default sensors.

    Parameters
    ----------
    sensors : bytes
        The sensors ``h(x, u, p)`` as a pickled CasADi Function (workers need not have the model's file).
    Q, R, P0 : ndarray
        The EKF's covariances: process noise (the sweep's ``noise_std`` squared, at least 1e-8), measurement
        noise (``measurement_noise`` squared, at least 1e-8), prior (each state's ``x0_spread`` share of its bound
        range squared, at least 1e-4: the start the estimator does not know).
    x0 : ndarray
        The prior's mean: the scenario's nominal start.
    measurement_noise : float
        The standard deviation of the simulated sensors' noise.
    """

    sensors: bytes
    Q: np.ndarray
    R: np.ndarray
    P0: np.ndarray
    x0: np.ndarray
    measurement_noise: float


def estimator_spec(model: Model, x0: np.ndarray, x_min: np.ndarray, x_max: np.ndarray, noise_std: float,
                   x0_spread: float, measurement_noise: float) -> EstimatorSpec:
    """The EKF of an output-feedback sweep (`EstimatorSpec`), its sensors the model's default ones."""
    from shooting.estimate import default_measurement

    h = default_measurement(model)
    xs, us, ps = ca.SX.sym("x", model.nx), ca.SX.sym("u", model.nu), ca.SX.sym("p", model.np)
    H = ca.Function("sensors", [xs, us, ps], [ca.SX(h(xs, us, ps))], ["x", "u", "p"], ["y"])
    with ca.global_pickle_context():
        sensors = pickle.dumps(H)
    width = np.where(np.isfinite(x_max - x_min), x_max - x_min, 1.0)
    return EstimatorSpec(sensors, max(noise_std**2, 1e-8) * np.eye(model.nx),
                         max(measurement_noise**2, 1e-8) * np.eye(H.size1_out(0)),
                         np.diag(np.maximum((x0_spread * width) ** 2, 1e-4)), np.asarray(x0, dtype=float),
                         measurement_noise)


@dataclass(frozen=True, eq=False)
class SweepSpec:
    """Everything a worker needs to run the cases of one sweep.

    Parameters
    ----------
    token : str
        Identifies the sweep (and its built controller in each process).
    model : bytes
        `model_bytes` of the controller's (and the plant's) model.
    scenario : Scenario
    controller : str
        "rti", "ipopt" or "c" (C sources in `c_files`).
    target : Target
    c_files : dict of str to str
        File name -> text of the C controller's export (empty otherwise).
    estimator : EstimatorSpec, optional
        Output feedback: the controller sees this estimator's estimate from noisy measurements.
    """

    token: str
    model: bytes
    scenario: Scenario
    controller: str
    target: Target
    c_files: dict[str, str] = field(default_factory=dict)
    estimator: EstimatorSpec | None = None


@dataclass
class _Built:
    model: Model
    controller: Controller
    folder: Path | None = None
    estimator: Any = None


_LOCK = threading.Lock()
_BUILT: dict[str, _Built] = {}


def _build(spec: SweepSpec) -> _Built:
    with ca.global_unpickle_context():
        model = pickle.loads(spec.model)  # noqa: S301 - our own bytes, from the sweep that submitted the case
    built = _build_controller(spec, model)
    if spec.estimator is not None:
        from shooting.estimate import EKF

        est = spec.estimator
        with ca.global_unpickle_context():
            H = pickle.loads(est.sensors)  # noqa: S301 - our own bytes, as the model's
        built.estimator = EKF(model, lambda x, u, p: H(x, u, p), Q=est.Q, R=est.R, x0=est.x0, P0=est.P0,
                              method=spec.scenario.problem.method, steps=spec.scenario.problem.steps,
                              dt=spec.scenario.problem.dt)
    return built


def _build_controller(spec: SweepSpec, model: Model) -> _Built:
    if spec.controller == "c":
        from shooting.controller import load_controller  # (the C toolchain only where a C controller runs)

        folder = Path(tempfile.mkdtemp(prefix="shooting_sweep_c_"))
        for name, text in spec.c_files.items():
            (folder / name).write_text(text)
        return _Built(model, load_controller(folder, model=model), folder)
    ocp = build_ocp(spec.scenario, model)
    controller: Controller = RTIController(ocp) if spec.controller == "rti" else MPCController(ocp)
    return _Built(model, controller)


def forget(token: str) -> None:
    """Drop the controller built for the sweep `token` in this process (the in-process run's cleanup)."""
    with _LOCK:
        built = _BUILT.pop(token, None)
    if built is not None and built.folder is not None:
        shutil.rmtree(built.folder, ignore_errors=True)


def run_case(case: Case, spec: SweepSpec, trajectory: bool = False) -> dict[str, Any]:
    """Run one case's closed loop and return its row (see `shooting.sweeps.cases.measure`).

    Parameters
    ----------
    case : Case
    spec : SweepSpec
    trajectory : bool
        Also return the times and states (``"t"``, ``"x"``) and the state
        reference (``"x_ref"``): for the plot of the worst cases.

    Returns
    -------
    dict
        The row; ``"error"`` holds the message when the closed loop raised
        ValueError (a controller that returned a non-finite input): such a
        case is a failed row (every step failed), not a failed sweep.
    """
    with _LOCK:
        built = _BUILT.get(spec.token)
        if built is None:
            built = _BUILT[spec.token] = _build(spec)
            for token in [t for t in _BUILT if t != spec.token]:  # one sweep at a time per process
                stale = _BUILT.pop(token)
                if stale.folder is not None:
                    shutil.rmtree(stale.folder, ignore_errors=True)
        scenario = spec.scenario
        p = case.p if built.model.np and scenario.parameters is None else None
        try:
            traj = simulate_closed_loop(built.controller, case.x0, scenario.sim_steps,
                                        plant_method=scenario.plant_method, plant_steps=scenario.plant_steps, p=p,
                                        reference=scenario.reference, parameters=scenario.parameters,
                                        noise_std=case.noise_std or None, seed=case.seed, progress=False,
                                        estimator=built.estimator,
                                        measurement_noise=None if spec.estimator is None else
                                        spec.estimator.measurement_noise)
        except ValueError as err:
            return _failed(case, spec, str(err))
    row = measure(case, traj, spec.target, scenario.sim_steps)
    if trajectory:
        row.update(t=traj.t, x=traj.x, x_ref=spec.target.references(traj.t)[0])
    return row


def _failed(case: Case, spec: SweepSpec, message: str) -> dict[str, Any]:
    inf = float("inf")
    return {"case": case.index, "seed": case.seed, "success": False, "outcome": "error",
            "failure_reason": message.splitlines()[0][:120] if message else "error",
            "failed_steps": spec.scenario.sim_steps, "final_error_scaled": float("inf"),
            "cost": inf, "final_error": inf, "max_violation": 0.0, "solve_time_median": float("nan"),
            "solve_time_max": float("nan"), "x0": case.x0.copy(), "p": case.p.copy(), "error": message}


def dask_setup(worker: object) -> None:
    """Dask preload of the local cluster's workers: ignore SIGINT (the sweep stops them itself)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
