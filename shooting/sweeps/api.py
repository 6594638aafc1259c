"""`sweep`: many closed loops of one controller over drawn or given cases, on Dask, as one library call."""

from __future__ import annotations

import collections
import hashlib
import importlib.metadata
import json
import math
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shooting import _files, _validate
from shooting._version import VERSION
from shooting.loading import load_model
from shooting.model import Model
from shooting.mpc.scenarios import Scenario, build_ocp
from shooting.options import SWEEP_CONTROLLERS
from shooting.sweeps.cases import COLUMNS, OUTCOMES, Case, Target, case_columns, draw_cases, target_of
from shooting.sweeps.cluster import open_pool
from shooting.sweeps.controllers import ControllerChoice, choose_controller
from shooting.sweeps.output import FILES, RECORD, Journal, csv_text, plot_png, quantiles
from shooting.sweeps.progress import SweepProgress, bar_or_lines
from shooting.sweeps.worker import SWEEP_ESTIMATORS, SweepSpec, estimator_spec, model_bytes

__all__ = ["WORST_PLOTTED", "SweepResult", "sweep"]

#: How many of the worst cases sweep.png draws over time (recomputed with their trajectories).
WORST_PLOTTED = 3
#: How many of the worst cases summary.json lists.
WORST_LISTED = 10


@dataclass(frozen=True, eq=False)
class SweepResult:
    """What `sweep` did: one row per case and the summary.

    Parameters
    ----------
    columns : tuple of str
        The columns of cases.csv: ``case, seed, success, failed_steps, cost,
        final_error, max_violation, solve_time_median, solve_time_max`` (solve
        times in seconds), then ``x0_<state>`` and ``p_<parameter>``.
    rows : tuple of dict
        One per case, ordered by case number: every column of cases.csv by
        name (``x0_<state>``, ``p_<parameter>`` too), ``"x0"`` (nx,) and ``"p"``
        (np,) as arrays (and ``"error"`` for a case whose closed loop raised).
    summary : dict
        The content of summary.json.
    out_dir : pathlib.Path or None
    files : list of pathlib.Path
        cases.csv, summary.json, sweep.png (empty without `out_dir`).
    """

    columns: tuple[str, ...]
    rows: tuple[dict[str, Any], ...]
    summary: dict[str, Any]
    out_dir: Path | None = None
    files: list[Path] = field(default_factory=list)

    def column(self, name: str) -> np.ndarray:
        """One column over the cases, shape (cases,) (``x0_<state>``, ``p_<parameter>`` too)."""
        if name in COLUMNS:
            return np.array([row[name] for row in self.rows])
        names = self.columns[len(COLUMNS):]
        if name not in names:
            raise ValueError(f"no column {name!r}: the columns are {', '.join(self.columns)}")
        i = names.index(name)
        return np.array([np.concatenate([row["x0"], row["p"]])[i] for row in self.rows], dtype=float)

    @property
    def success_rate(self) -> float:
        """The fraction of cases that succeeded."""
        return float(np.mean([bool(r["success"]) for r in self.rows]))


def _options(controller: object, x0_spread: object, p_spread: object, noise_std: object, seed: object,
             scheduler: object, workers: object, resume: object, out_dir: object) -> dict[str, Any]:
    """The sweep's options checked (spreads are checked with the cases)."""
    if scheduler is not None and (not isinstance(scheduler, str) or not scheduler.strip()):
        raise ValueError(f"scheduler must be the address of a Dask scheduler (e.g. 'tcp://10.0.0.5:8786'), got "
                         f"{scheduler!r:.60}")
    if workers is not None:
        workers = _validate.integer(workers, "workers", minimum=1, maximum=4096)
        if scheduler is not None:
            raise ValueError("give either scheduler (its workers run the cases) or workers (a local cluster), not "
                             "both")
    resume = _validate.flag(resume, "resume")
    if resume and out_dir is None:
        raise ValueError("resume=True needs out_dir: the journal of finished cases is kept there")
    if isinstance(controller, str) and controller not in SWEEP_CONTROLLERS and not os.path.isdir(controller):
        raise ValueError(f"controller must be one of {', '.join(repr(c) for c in SWEEP_CONTROLLERS)} or the directory "
                         f"of a 'shooting-codegen controller' export, got {controller!r:.80}")
    return {"x0_spread": x0_spread, "p_spread": p_spread, "noise_std": noise_std, "seed": seed,
            "scheduler": None if scheduler is None else scheduler.strip(), "workers": workers, "resume": resume}


def sweep(
    scenario: Scenario,
    *,
    controller: str | os.PathLike[str] = "rti",
    cases: int | Sequence[Mapping[str, Any]] = 100,
    x0_spread: float = 0.0,
    p_spread: float = 0.0,
    noise_std: float = 0.0,
    seed: int = 0,
    scheduler: str | None = None,
    workers: int | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    resume: bool = False,
    progress: bool | Callable[[str], None] | None = True,
    model: Model | None = None,
    estimator: str | None = None,
    measurement_noise: float = 0.0,
) -> SweepResult:
    """Run a scenario's closed loop for many cases (start states, plant parameters, noise) on Dask.

    Each case is one `shooting.simulate_closed_loop` of ``scenario.sim_steps``
    samples against the scenario's plant integrator, with the plant's
    parameters drawn while the controller keeps the nominal ``p0``. Case i is
    drawn from its own child seed of `seed` (see `shooting.sweeps.cases`), so
    the rows are the same serially, on the local cluster and on a scheduler.

    Parameters
    ----------
    scenario : Scenario
        The closed-loop experiment (see `shooting.named_scenario`).
    controller : {"rti", "ipopt", "c"} or path, default "rti"
        `RTIController`, `MPCController` (IPOPT to convergence), the
        scenario's controller exported to C (`export_controller`, compiled
        once per worker process), or the directory of a controller export of
        the same model and sampling time.
    cases : int or sequence of dict, default 100
        How many cases to draw, or explicit cases: dicts with keys ``x0``,
        ``p``, ``noise_std``, ``seed`` (each optional).
    x0_spread : float, default 0
        x0 uniformly within +- x0_spread times each state's bound range
        (absolute where a bound is infinite), cut to the bounds.
    p_spread : float, default 0
        Each plant parameter within +- p_spread relative to p0.
    noise_std : float, default 0
        Standard deviation of process noise on every state.
    seed : int, default 0
    scheduler : str, optional
        The address of a running Dask scheduler (``dask scheduler``), whose
        workers (``dask worker ADDRESS --nthreads 1``) run the cases.
    workers : int, optional
        Local worker processes (default one per core); 1 runs in this process.
    out_dir : str or path, optional
        Write cases.csv, summary.json and sweep.png there (all or nothing),
        keeping a journal of finished cases while the sweep runs.
    resume : bool, default False
        Complete the sweep whose journal is in `out_dir`: only the missing
        cases run.
    progress : bool or callable ``(str) -> None``, default True
        None or False silent; True a bar on stderr when it is a terminal, else
        a line per 10 % of the cases; a callable gets one message per case.
    model : Model, optional
        The scenario's model (default ``load_model(scenario.model)``).
    estimator : {"ekf"}, optional
        Output feedback: every case's controller sees an EKF's estimate (the model's default sensors, its step
        the scenario's; Q from `noise_std`, R from `measurement_noise`, its prior the scenario's start with
        the spread's uncertainty: `shooting.sweeps.worker.estimator_spec`) instead of the state.
    measurement_noise : float, default 0
        Standard deviation of the sensors' noise (with `estimator`).

    Returns
    -------
    SweepResult

    Raises
    ------
    ValueError
        An unknown controller or a directory that is not a controller export
        of this model, negative or non-finite spreads, zero cases, both
        `scheduler` and `workers`, an unreachable scheduler (within a few
        seconds) or one without workers, an `out_dir` of other files or
        holding another sweep's journal (or an interrupted one without
        `resume`). Nothing is written then.
    RuntimeError
        A case could not be run (its worker died repeatedly).
    """
    started = time.perf_counter()
    if not isinstance(scenario, Scenario):
        raise ValueError(f"scenario must be a shooting.Scenario, got {type(scenario).__name__}")
    reporter = _validate.progress(progress, default=bar_or_lines)
    opts = _options(controller, x0_spread, p_spread, noise_std, seed, scheduler, workers, resume, out_dir)
    model = load_model(scenario.model) if model is None else model
    if not isinstance(model, Model):
        raise ValueError(f"model must be a shooting.Model, got {type(model).__name__}")
    ocp = build_ocp(scenario, model)
    drawn = draw_cases(scenario, model, ocp.x_min, ocp.x_max, cases, x0_spread=opts["x0_spread"],
                       p_spread=opts["p_spread"], noise_std=opts["noise_std"], seed=opts["seed"])
    if scenario.parameters is not None and (opts["p_spread"] or not isinstance(cases, (int, np.integer))
                                            and any("p" in c for c in cases)):
        raise ValueError("the scenario's parameters vary in time (its parameters(t) feeds controller and plant): "
                         "p_spread and explicit p do not apply to it")
    choice = choose_controller(controller, scenario, model, ocp)
    opts.update(_feedback_options(estimator, measurement_noise))
    est_spec = None if opts["estimator"] is None else estimator_spec(
        model, np.asarray(scenario.x0, dtype=float), ocp.x_min, ocp.x_max, float(opts["noise_std"]),
        float(opts["x0_spread"]), opts["measurement_noise"])
    fingerprint = _fingerprint(scenario, model, choice, opts, cases)
    out = None if out_dir is None else Path(out_dir)
    journal = None if out is None else Journal(out, fingerprint)
    done = _resumed(journal, out, opts["resume"], drawn)
    todo = [case for case in drawn if case.index not in done]
    spec = SweepSpec(uuid.uuid4().hex, model_bytes(model), scenario, choice.kind, target_of(scenario, ocp),
                     choice.files, est_spec)
    meter = SweepProgress(reporter, len(drawn), len(done))
    rows = dict(done)
    rerun: list[dict[str, Any]] = []
    where: dict[str, Any] = {"where": "in process", "workers": 1}
    try:
        with open_pool(opts["scheduler"], opts["workers"], max(len(todo), 1)) as pool:
            where = {"where": pool.where, "workers": pool.workers}
            for row in pool.run(todo, spec):
                rows[row["case"]] = row
                if journal is not None:
                    journal.add(row)
                meter.finished()
            if out is not None:
                worst = _worst(list(rows.values()), spec.target)[:WORST_PLOTTED]
                by_index = {case.index: case for case in drawn}
                rerun = sorted(pool.run([by_index[r["case"]] for r in worst], spec, trajectory=True),
                               key=lambda r: [w["case"] for w in worst].index(r["case"]))
    finally:
        meter.close()
        if journal is not None:
            journal.close()
    ordered = tuple(rows[case.index] for case in drawn)
    wall = time.perf_counter() - started
    summary = _summary(ordered, rerun, model, scenario, choice, opts, fingerprint, spec, wall, len(todo), where)
    columns = case_columns(model)
    files: list[Path] = []
    if out is not None and journal is not None:
        _install(out, ordered, rerun, columns, summary, model, spec)
        journal.remove()
        files = [out / name for name in FILES]
    named = tuple({**row, **dict(zip(columns[len(COLUMNS):], (float(v) for v in np.concatenate([row["x0"], row["p"]])),
                                     strict=True))} for row in ordered)  # (cases.csv's names too)
    return SweepResult(columns, named, summary, out, files)


def _resumed(journal: Journal | None, out: Path | None, resume: bool, drawn: Sequence[Case]) -> dict[int, dict]:
    """The rows of finished cases from `out`'s journal (with `resume`), each checked against its case."""
    if journal is None or out is None:
        return {}
    _files.check_destination(out, FILES, RECORD)
    if not journal.path.exists():
        return {}
    if not resume:
        raise ValueError(f"{out} holds the journal of an interrupted sweep ({journal.path.name}): pass --resume "
                         f"(resume=True) to complete it, or choose another --out")
    by_index = {case.index: case for case in drawn}
    done = {}
    for row in journal.read():
        case = by_index.get(int(row["case"]))
        if case is None:
            continue  # beyond this sweep's number of cases
        if row["seed"] != case.seed or not (np.array_equal(row["x0"], case.x0) and np.array_equal(row["p"], case.p)):
            raise ValueError(f"case {case.index} of the journal in {out} was drawn differently (seed, x0 or p): it "
                             f"is another sweep's; choose another --out")
        done[case.index] = row
    return done


def _feedback_options(estimator: object, measurement_noise: object) -> dict[str, Any]:
    """`sweep`'s output-feedback options checked."""
    if estimator is not None and estimator not in SWEEP_ESTIMATORS:
        raise ValueError(f"estimator must be None or one of {', '.join(repr(e) for e in SWEEP_ESTIMATORS)}, got "
                         f"{estimator!r:.60}")
    noise = _validate.real(measurement_noise, "measurement_noise", minimum=0.0)
    if noise and estimator is None:
        raise ValueError("measurement_noise needs an estimator to measure through: give estimator='ekf', or drop "
                         "measurement_noise")
    return {"estimator": estimator, "measurement_noise": noise}


def _fingerprint(scenario: Scenario, model: Model, choice: ControllerChoice, opts: dict[str, Any],
                 cases: object) -> dict[str, Any]:
    """What makes two runs the same sweep (for --resume); the number of drawn cases may grow."""
    text = json.dumps(scenario.to_dict(), sort_keys=True, default=str)
    explicit = None if isinstance(cases, (int, np.integer)) else "explicit"
    return {"version": VERSION, "model": model.name, "scenario": hashlib.sha256(text.encode()).hexdigest()[:16],
            "controller": choice.identity, "x0_spread": float(opts["x0_spread"]),
            "p_spread": float(opts["p_spread"]), "noise_std": float(opts["noise_std"]), "seed": int(opts["seed"]),
            "cases": explicit, **({} if opts.get("estimator") is None else
                                 {"estimator": opts["estimator"], "measurement_noise": opts["measurement_noise"]})}


def _worst(rows: list[dict[str, Any]], target: Target) -> list[dict[str, Any]]:
    """Failures first, then by the final error the tolerance applies to and cost, largest first."""
    def key(row: dict[str, Any]) -> tuple[bool, float, float, int]:
        fe = target.arrival_error(float(row["final_error"]), float(row["final_error_scaled"]))
        cost = float(row["cost"])
        return (bool(row["success"]), -(fe if not math.isnan(fe) else math.inf),
                -(cost if not math.isnan(cost) else math.inf), int(row["case"]))
    return sorted(rows, key=key)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two rows agree to 1e-12 (relative) in every column but the solve times."""
    for key in ("success", "failed_steps", "cost", "final_error", "max_violation"):
        x, y = float(a[key]), float(b[key])
        if not (x == y or abs(x - y) <= 1e-12 * max(abs(x), abs(y), 1.0)):
            return False
    return True


def _version_of(distribution: str) -> str | None:
    """An installed distribution's version, None where it is not installed (Dask is the extra shooting[sweep])."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(float(value)) else None


def _summary(rows: Sequence[dict[str, Any]], rerun: Sequence[dict[str, Any]], model: Model, scenario: Scenario,
             choice: ControllerChoice, opts: dict[str, Any], fingerprint: dict[str, Any], spec: SweepSpec,
             wall: float, ran: int, where: dict[str, Any]) -> dict[str, Any]:
    import casadi as ca

    ok = sum(bool(r["success"]) for r in rows)
    columns = case_columns(model)
    by_case = {r["case"]: r for r in rows}
    errors = {str(r["case"]): r["error"] for r in rows if r.get("error")}
    return {
        "generator": _files.GENERATOR, "command": "sweep", "files": list(FILES),
        "model": {"name": model.name, "nx": model.nx, "nu": model.nu, "np": model.np},
        "controller": choice.describe, "scenario": json.loads(json.dumps(scenario.to_dict(), default=str)),
        "options": {k: opts[k] for k in ("x0_spread", "p_spread", "noise_std", "seed", "scheduler", "workers",
                                         "estimator", "measurement_noise")},
        "cases": len(rows), "succeeded": ok, "failed": len(rows) - ok, "success_rate": ok / len(rows),
        "outcomes": {o: sum(r.get("outcome") == o for r in rows) for o in OUTCOMES},
        "solver_failures": {"cases": sum(int(r["failed_steps"]) > 0 for r in rows if r.get("outcome") != "error"),
                            "reasons": dict(collections.Counter(str(r.get("failure_reason", "")) for r in rows
                                                                if int(r["failed_steps"]) > 0 and
                                                                r.get("failure_reason")).most_common())},
        "failed_steps_total": int(sum(int(r["failed_steps"]) for r in rows)),
        "tolerance": spec.target.tolerance,
        "tolerance_applies_to": "final_error_scaled" if spec.target.scaled else "final_error",
        "state_scale": dict(zip(model.state_names, (float(v) for v in (
            np.ones(model.nx) if spec.target.scale is None else spec.target.scale)), strict=True)),
        "cost": quantiles([float(r["cost"]) for r in rows]),
        "final_error": quantiles([float(r["final_error"]) for r in rows]),
        "final_error_scaled": quantiles([float(r["final_error_scaled"]) for r in rows]),
        "max_violation": quantiles([float(r["max_violation"]) for r in rows]),
        "worst_cases": [{c: (_finite(r[c]) if isinstance(r[c], float) else r[c]) for c in COLUMNS[:7]}
                        for r in _worst(list(rows), spec.target)[:WORST_LISTED]],
        "case_errors": dict(list(errors.items())[:WORST_LISTED]),
        "worst_recomputed_match": all(_same(r, by_case[r["case"]]) for r in rerun) if rerun else None,
        "columns": list(columns), "fingerprint": fingerprint, "run_on": where,
        "cases_run": ran, "cases_resumed": len(rows) - ran, "wall_time": wall,
        "cases_per_second": ran / wall if wall > 0 else None,
        "versions": {"shooting": VERSION, "casadi": str(ca.CasadiMeta.version()), "numpy": np.__version__,
                     "dask": _version_of("dask"), "python": sys.version.split()[0]},
    }


def _install(out: Path, rows: Sequence[dict[str, Any]], rerun: Sequence[dict[str, Any]], columns: Sequence[str],
             summary: dict[str, Any], model: Model, spec: SweepSpec) -> None:
    png = plot_png(rows, rerun, model.state_names, spec.target, f"{model.name} sweep", param_names=model.param_names,
                   time_unit=model.time_unit)

    def write(stage: Path) -> None:
        (stage / "cases.csv").write_text(csv_text(rows, columns))
        (stage / "summary.json").write_text(_files.compact_json(summary))
        (stage / "sweep.png").write_bytes(png)

    _files.install_directory(out, write, FILES, RECORD)
