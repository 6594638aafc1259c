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
    """

    token: str
    model: bytes
    scenario: Scenario
    controller: str
    target: Target
    c_files: dict[str, str] = field(default_factory=dict)


@dataclass
class _Built:
    model: Model
    controller: Controller
    folder: Path | None = None


_LOCK = threading.Lock()
_BUILT: dict[str, _Built] = {}


def _build(spec: SweepSpec) -> _Built:
    with ca.global_unpickle_context():
        model = pickle.loads(spec.model)  # noqa: S301 - our own bytes, from the sweep that submitted the case
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
                                        noise_std=case.noise_std or None, seed=case.seed, progress=False)
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
