#!/usr/bin/env python3
"""Benchmark: the Python RTIController, compiled (the default) and numpy, against IPOPT's MPC and the loaded C.

Per model (every built-in one by default), each case in closed loop with the
same plant, every figure measured in this run, exactly as table 1 of
``bench_controller.py`` measures: the model's default scenario at N = 20
(quick: 10) with soft state bounds, the cart-pole's regulation from
theta = 0.3 and its swing-up. Per controller: time per sample (feedback +
preparation, `ControlStep.solve_time`) median and max after the first sample
(the first includes IPOPT's initial solve and the cold SQP), the feedback's
median, the ratio of the median to IPOPT's warm MPC (`MPCController`), and
the largest input difference to the exported C controller (double, loaded
with `load_controller`) on each input's bound range. Then the targets: the
default RTIController at most 0.1x IPOPT's sample (median) on every case, and
equal to the C's inputs to 1e-10 over the closed loop.

    python scripts/bench_rti_compiled.py                        # N = 20, 100 samples, every built-in model
    python scripts/bench_rti_compiled.py --quick                # N = 10, 10 samples, the cart-pole
    python scripts/bench_rti_compiled.py --quick --models all   # the same on every built-in model (the tests)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import casadi as ca
import numpy as np

import shooting
from benchkit import NAME_WIDTH, Skip, add_models_option, model_rows, selected_models  # scripts/ is on sys.path
from shooting.codegen import export_controller, load_controller
from shooting.controller.c_source import controller_spec
from shooting.controller.check import compare_inputs, input_scale

#: The targets: the compiled RTI's sample against IPOPT's, its inputs against the C's.
SPEED_TARGET, EQUALITY_TARGET = 0.1, 1e-10


def problem(model: shooting.Model, horizon: int) -> shooting.MultipleShootingOCP:
    """The model's default scenario with soft state bounds (as ``bench_controller.py``'s table 1)."""
    scenario = shooting.default_scenario(model).problem.with_changes(horizon=horizon, soft_x_bounds=True)
    return shooting.MultipleShootingOCP.from_problem(model, scenario)


def cases(model: shooting.Model) -> list[tuple[str, np.ndarray]]:
    """(case, initial state): the cart-pole's regulation and swing-up; another model's default scenario."""
    if model.name == "cartpole":
        return [("regulation", np.array([0.0, 0.3, 0.0, 0.0])), ("swing-up", np.asarray(model.x0, dtype=float))]
    return [("scenario", np.asarray(shooting.default_scenario(model).x0, dtype=float))]


def loaded_c(ocp: shooting.MultipleShootingOCP, x0: np.ndarray, folder: Path) -> tuple[object | None, str]:
    """The exported C controller (double) loaded for this machine, or None with the library's reason."""
    try:
        spec = controller_spec(ocp, x0=x0)
    except ValueError as err:
        return None, " ".join(str(err).split())
    report = export_controller(ocp, folder, x0=x0, force=True)
    if not report.ok or spec is None:
        return None, f"export failed: {report.problems}"
    return load_controller(folder), ""


def rows(model: shooting.Model, horizon: int, steps: int, work: Path, verdicts: list[tuple[str, float, float]]) -> None:
    ocp = problem(model, horizon)
    for case, x0 in cases(model):
        c_controller, why = loaded_c(ocp, x0, work / f"{model.name}_{case}")
        try:
            compiled = shooting.RTIController(ocp)
        except ValueError as err:
            raise Skip(f"RTIController: {err}") from None
        controllers = [("RTI compiled (default)", compiled),
                       ("RTI numpy", shooting.RTIController(ocp, qp_solver="riccati-ipm-numpy")),
                       ("IPOPT MPC (warm)", shooting.MPCController(ocp))]
        if c_controller is not None:
            controllers.append(("C (loaded, double)", c_controller))
        runs = {}
        for label, controller in controllers:
            traj = shooting.simulate_closed_loop(controller, x0, steps, progress=False)
            sample = np.asarray(traj.solve_time[1:]) * 1e6
            feedback = getattr(controller, "feedback_times", None)
            runs[label] = (traj, float(np.median(sample)), float(np.max(sample)),
                           float(np.median(feedback[1:]) * 1e6) if feedback else np.nan)
        ipopt = runs["IPOPT MPC (warm)"][1]
        c_run = runs.get("C (loaded, double)")
        scale = input_scale(controller_spec(ocp, x0=x0)) if c_run is not None else None
        for label, (traj, med, mx, fb) in runs.items():
            diff = compare_inputs(traj.u, c_run[0].u, steps, scale) if c_run is not None and scale is not None \
                else np.nan
            print(f"{model.name:<{NAME_WIDTH}}{case:<11} {label:<24} {med:>10.1f} {mx:>10.1f} {fb:>10.1f} "
                  f"{med / ipopt:>8.4f} {diff:>11.1e}", flush=True)
        if c_run is None:
            print(f"{model.name:<{NAME_WIDTH}}{case:<11} {'C (loaded, double)':<24} skipped: {why}")
        equal = compare_inputs(runs["RTI compiled (default)"][0].u, c_run[0].u, steps, scale) \
            if c_run is not None and scale is not None else np.nan
        verdicts.append((f"{model.name} {case}", runs["RTI compiled (default)"][1] / ipopt, equal))
        library = compiled.qp_library
        if library is not None:
            print(f"{model.name:<{NAME_WIDTH}}{case:<11} compiled QP: {library.status} ({library.seconds:.2f} s"
                  f"{'; ' + library.reason if library.reason else ''})", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10 and 10 samples (for the tests)")
    add_models_option(parser)
    args = parser.parse_args(argv)
    models = selected_models(parser, args)
    horizon, steps = (10, 10) if args.quick else (20, 100)
    print(f"casadi {ca.__version__}, shooting {shooting.__version__}, python {sys.version.split()[0]}\n")
    print(f"Host, N = {horizon}, each model's default scenario with soft state bounds, {steps} samples (us per "
          f"sample, the first left out; ratio: median / IPOPT's; u - C: largest input difference to the C's on "
          f"each input's range)")
    print(f"{'model':<{NAME_WIDTH}}{'case':<11} {'controller':<24} {'sample med':>10} {'sample max':>10} "
          f"{'fb med':>10} {'/ IPOPT':>8} {'u - C':>11}")
    verdicts: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench_rti_compiled_") as tmp:
        for model in models:
            with model_rows(model.name):
                rows(model, horizon, steps, Path(tmp), verdicts)
    print()
    for name, ratio, equal in verdicts:
        speed = "PASS" if ratio <= SPEED_TARGET else "FAIL"
        same = "n/a (no C controller)" if np.isnan(equal) else ("PASS" if equal <= EQUALITY_TARGET else "FAIL")
        print(f"target {name}: compiled RTI at most {SPEED_TARGET}x IPOPT's sample: {speed} ({ratio:.4f}x); "
              f"inputs equal to the C's to {EQUALITY_TARGET:g}: {same} ({equal:.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
