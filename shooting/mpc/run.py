"""A scenario run end to end, as one library call: solve, closed loop, files.

`run_scenario` is what ``shooting-codegen mpc`` does: build the scenario's
OCP, solve it once from the start state, run the closed loop (full MPC or
RTI) against the accurately integrated plant, and write ``trajectory.json``,
``trajectory.csv``, ``summary.json`` and PNG plots into the output directory
through a temporary directory. A failed first solve writes nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shooting import _files, _validate
from shooting._version import VERSION
from shooting.loading import load_model
from shooting.model import Model
from shooting.mpc.controllers import Controller, MPCController, sample_horizon
from shooting.mpc.ocp import MultipleShootingOCP, OCPSolution
from shooting.mpc.rti import RTIController
from shooting.mpc.scenarios import Scenario, build_ocp, check_scenario
from shooting.mpc.simulate import simulate_closed_loop
from shooting.mpc.trajectory import Trajectory

__all__ = ["PATH_PLOT", "RUN_FILES", "ScenarioRun", "run_scenario"]

#: Files `run_scenario` writes; summary.json lists them (and names the run as ours).
RUN_FILES = ("trajectory.json", "trajectory.csv", "summary.json", "states.png", "inputs.png", "solve_time.png")
#: The plot of the path constraints, beside `RUN_FILES` when the scenario has them.
PATH_PLOT = "path_constraints.png"


@dataclass(frozen=True)
class ScenarioRun:
    """What `run_scenario` did.

    Attributes
    ----------
    ok : bool
        The first solve and every closed-loop solve succeeded, and the files
        were written. (With failed closed-loop solves the files are written
        all the same, to show them; `failed_steps` says which.)
    out_dir : pathlib.Path
    files : list of pathlib.Path
        The files written (empty when not `ok`).
    first_solve : OCPSolution
    trajectory : Trajectory or None
        The closed loop (None when the first solve failed).
    summary : dict
        The content of ``summary.json``.
    lines : tuple of str
        The report, one line each.
    problems : tuple of str
        One line per reason the run is not `ok`, or went wrong on the way.
    failed_steps : tuple of int
        Closed-loop steps whose solver reported failure.
    """

    ok: bool
    out_dir: Path
    files: list[Path]
    first_solve: OCPSolution
    trajectory: Trajectory | None
    summary: dict[str, Any] = field(default_factory=dict)
    lines: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    failed_steps: tuple[int, ...] = ()


def _json_default(obj: object) -> object:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def run_scenario(
    scenario: Scenario,
    out_dir: str | os.PathLike[str],
    *,
    model: Model | None = None,
    rti: bool = False,
    noise_std: float | None = None,
    seed: int = 0,
    force: bool = False,
    progress: bool | Callable[[str], None] | None = None,
    progress_bar: bool = False,
    metadata: dict[str, Any] | None = None,
) -> ScenarioRun:
    """Solve a scenario's OCP, run its closed loop and write the results into `out_dir`.

    Parameters
    ----------
    scenario : Scenario
    out_dir : str or path
        Created if missing; an existing directory may hold only the files of
        an earlier run of ours unless `force` (others are never touched).
    model : Model, optional
        Default ``load_model(scenario.model)``.
    rti : bool
        Real-time iterations (`RTIController`) instead of full solves.
    noise_std : float, optional
        Standard deviation of additive process noise on every state.
    seed : int
    force : bool
    progress : bool or callable ``(str) -> None``, optional
        One line before each stage: None or False silent (the default), True
        on stderr, a callable is called with each line.
    progress_bar : bool
        Show the closed loop's progress bar on stderr (see `simulate_closed_loop`).
    metadata : dict, optional
        Extra entries for ``summary.json`` (e.g. the model spec).

    Returns
    -------
    ScenarioRun
    """
    reporter = _validate.progress(progress)
    bar = _validate.flag(progress_bar, "progress_bar")

    def say(message: str) -> None:
        if reporter is not None:
            reporter(message)

    out = Path(out_dir)
    _files.check_destination(out, (*RUN_FILES, PATH_PLOT), "summary.json", force=force)
    rti = _validate.flag(rti, "rti")
    seed = _validate.integer(seed, "seed", minimum=0)
    noise = None if noise_std is None else _validate.real(noise_std, "noise_std", minimum=0.0)
    problem = scenario.problem
    if model is None:
        model = load_model(scenario.model)
    check_scenario(scenario, model)
    unit = model.time_unit
    say(f"{scenario.model}: {scenario.description}")
    say(f"building the OCP: N = {problem.horizon}, dt = {problem.dt:g} {unit}, {scenario_method(scenario)} x "
        f"{problem.steps}, {problem.solver.hessian} Hessian")
    ocp = build_ocp(scenario, model)
    data = sample_horizon(model, 0.0, problem.dt, problem.horizon, reference=scenario.reference,
                          parameters=scenario.parameters)
    first = ocp.solve(scenario.x0, x_ref=data.x_ref, u_ref=data.u_ref, p=data.p)
    lines = [f"{model.name}: OCP N = {problem.horizon}, dt = {problem.dt:g} {unit}, {scenario_method(scenario)} x "
             f"{problem.steps}: {first.status}, cost {first.cost:.6g}, {first.iterations} iterations, "
             f"{first.solve_time * 1e3:.1f} ms"]
    if not first.success:
        return ScenarioRun(False, out, [], first, None, lines=tuple(lines),
                           problems=(f"the first OCP solve failed ({_validate.one_line(first.status)}): nothing "
                                     f"written to {out}",))

    controller: Controller = RTIController(ocp) if rti else MPCController(ocp)
    kind = "rti" if rti else "mpc"
    say(f"closed loop: {scenario.sim_steps} steps of {problem.dt:g} {unit} ({kind} controller, plant "
        f"{scenario.plant_method} x {scenario.plant_steps}" + (f", noise {noise:g}, seed {seed}" if noise else "")
        + ")")
    traj = simulate_closed_loop(controller, scenario.x0, scenario.sim_steps, plant_method=scenario.plant_method,
                                plant_steps=scenario.plant_steps, noise_std=noise or None, seed=seed,
                                progress=bar, reference=scenario.reference, parameters=scenario.parameters)
    stats = traj.stats(ocp.Q, ocp.R)
    ms = stats["solve_time_ms"]
    lines.append(f"closed loop: {traj.steps} steps ({traj.t[-1]:g} {unit}), solve time mean {ms['mean']:.2f} ms, "
                 f"median {ms['median']:.2f} ms, p95 {ms['p95']:.2f} ms, max {ms['max']:.2f} ms, "
                 f"success {100 * stats['success_rate']:.0f} %")
    lines.append(f"final state [{', '.join(f'{v:.4g}' for v in traj.x[-1])}], "
                 f"error |x_K - x_ref| = {stats['final_error']:.3g}")
    lines += _extra_lines(traj, ocp.R_delta, model) + _violation_lines(stats, ocp)
    files = (*RUN_FILES, PATH_PLOT) if traj.path_values is not None and traj.steps else RUN_FILES
    problems = [f"closed loop stopped early: {traj.stopped}"] if traj.stopped else []
    failed = tuple(int(k) for k in np.flatnonzero(~traj.success))
    if failed:
        k = failed[0]
        problems.append(f"warning: {len(failed)} of {traj.steps} closed-loop solves failed (first at step {k}, "
                        f"t = {traj.t[k]:g} {unit}: {_validate.one_line(traj.status[k])}); their inputs were "
                        f"applied as the solver "
                        f"returned them (see 'failed_steps' in summary.json)")

    summary = {
        "generator": _files.GENERATOR, "command": "mpc", "version": VERSION,
        "model": {"name": model.name, "nx": model.nx, "nu": model.nu, **(metadata or {}).get("model", {})},
        "controller": kind, "scenario": scenario.to_dict(), "noise_std": noise, "seed": seed,
        "first_solve": {"status": first.status, "success": first.success, "cost": first.cost,
                        "iterations": first.iterations, "solve_time": first.solve_time},
        "stats": stats, "failed_steps": list(failed), "files": list(files),
        **{k: v for k, v in (metadata or {}).items() if k != "model"},
    }

    def write(tmp: Path) -> None:
        traj.save_json(tmp / "trajectory.json")
        traj.save_csv(tmp / "trajectory.csv")
        traj.plot(tmp)
        (tmp / "summary.json").write_text(_files.compact_json(json.loads(json.dumps(summary,
                                                                                    default=_json_default))))

    _files.install_directory(out, write, files, "summary.json", force=force)
    say(f"wrote {', '.join(files)} to {out}")
    return ScenarioRun(not failed and not traj.stopped, out, [out / f for f in files], first, traj, summary,
                       tuple(lines), tuple(problems), failed)


def _extra_lines(traj: Trajectory, R_delta: np.ndarray, model: Model) -> list[str]:
    """The tracking error of a time-varying reference and the input changes under a rate penalty."""
    lines = []
    if traj.time_varying:
        err = traj.tracking_error()
        lines.append("tracking error per state (RMS / max over the run): " + ", ".join(
            f"{n} {r:.3g} / {m:.3g}" for n, r, m in zip(model.state_names, err["rms"], err["max"], strict=True)))
    if R_delta.any():
        change = np.abs(np.diff(traj.u, axis=0)).max(axis=0) if traj.steps > 1 else np.zeros(model.nu)
        lines.append(f"rate penalty R_delta diag [{', '.join(f'{v:g}' for v in np.diag(R_delta))}]: largest input "
                     f"change |u_k - u_k-1| [{', '.join(f'{v:.3g}' for v in change)}]")
    return lines


def _violation_lines(stats: dict[str, Any], ocp: MultipleShootingOCP) -> list[str]:
    """How far the closed loop went past the state bounds and the path constraints: a soft row prices its
    violation instead of imposing it, so a broken limit is said, not left to summary.json."""
    lines = []
    for key, what, soft in (("max_state_violation", "state bounds", ocp.soft_x_bounds),
                            ("max_path_violation", "path constraints h(x, u, p) <= 0", ocp.soft_path_constraints)):
        if stats.get(key) is not None and (key == "max_path_violation" or stats[key] > 0):
            value = float(stats[key])
            lines.append(f"{what}: " + (f"the closed loop went past them by up to {value:.3g}" + (
                " (soft: their violation is priced by slack_l1, slack_l2, not forbidden)" if soft else "")
                if value > 0 else "held over the whole run"))
    return lines


def scenario_method(scenario: Scenario) -> str:
    """The scenario's tableau by name (``"custom"`` for an unnamed one)."""
    method = scenario.problem.method
    return method if isinstance(method, str) else (method.name or "custom")
