#!/usr/bin/env python3
"""Benchmark: the generated C controller against the Python RTIController and full IPOPT MPC, in one run.

Three tables, per model (every built-in one by default), every figure measured in this run:

1. Host, each model's default scenario at N = 20 (quick: 10) with soft state bounds
   (the cart-pole: regulation from theta = 0.3 and the swing-up, acados'
   weights, soft |p| <= 2): time per RTI sample (preparation + feedback) and
   of the feedback alone, median and max, for the generated C (double, gcc
   -O2, called through ctypes), the Python RTIController (CasADi + qrqp) and
   full IPOPT MPC; closed-loop cost and its ratio to the generated
   controller's. acados' figures on this machine are quoted from the issue
   for the cart-pole (77 us regulation, 437 us swing-up, median), not run here.
2. Host, one integrator step with A and B (RK4; a DAE's with its z0): the
   exported C called from Python (`load_step`) against the CasADi Function call.
3. Emulated Cortex-M4 (QEMU mps2-an386, -icount), float: model, N, flash,
   RAM, instructions per RTI sample (median, max), estimated ms at 168 MHz
   (instructions x 1.25 cycles), QP iterations (median, max).

A model the C controller does not take (algebraic states, today) gets a row
saying why in tables 1 and 3.

    python scripts/bench_controller.py                        # 100 samples, every built-in model
    python scripts/bench_controller.py --quick                # N = 10, 10 samples (5 on the board), the cart-pole
    python scripts/bench_controller.py --quick --models all   # the same on every built-in model (the tests)
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from pathlib import Path

import casadi as ca
import numpy as np

import shooting
from benchkit import NAME_WIDTH, Skip, add_models_option, model_rows, nominal_args, selected_models
from shooting.codegen import export_controller, export_integrator, load_controller, load_step, qemu_mps2
from shooting.codegen.controller_c import ControllerSpec, controller_spec, generate_controller
from shooting.codegen.controller_check import CYCLES_PER_INSTRUCTION, M4_HZ, board_loop

ACADOS_US = {"regulation": 77.0, "swing-up": 437.0}


@functools.cache
def controller_ocp(model: shooting.Model, horizon: int) -> tuple[shooting.MultipleShootingOCP, ControllerSpec]:
    """The model's default scenario with soft state bounds (the cart-pole's: acados' swing-up), and its C spec.

    Raises `Skip` with the library's reason for a model the C controller does not take.
    """
    problem = shooting.default_scenario(model).problem.with_changes(horizon=horizon, soft_x_bounds=True)
    ocp = shooting.MultipleShootingOCP.from_problem(model, problem)
    try:
        return ocp, controller_spec(ocp)
    except ValueError as err:  # e.g. algebraic states: "... which the C controller does not take yet"
        raise Skip(str(err)) from None


def cases(model: shooting.Model) -> list[tuple[str, np.ndarray]]:
    """(case, initial state): the cart-pole's regulation and swing-up; another model's default scenario."""
    if model.name == "cartpole":
        return [("regulation", np.array([0.0, 0.3, 0.0, 0.0])), ("swing-up", model.x0)]
    return [("scenario", np.asarray(shooting.default_scenario(model).x0, dtype=float))]


def closed_loop_cost(traj: shooting.Trajectory, ocp: shooting.MultipleShootingOCP) -> float:
    """sum_k (x_k - x_ref)' Q (x_k - x_ref) + (u_k - u_ref)' R (u_k - u_ref) over the run, against the OCP's
    first-stage references for every controller (a loaded C controller's trajectory records no reference,
    so `Trajectory.stats` would measure it against zero)."""
    dx, du = traj.x[:-1] - ocp.x_ref[0], traj.u - ocp.u_ref[0]
    return float(np.einsum("ki,ij,kj->", dx, ocp.Q, dx) + np.einsum("ki,ij,kj->", du, ocp.R, du))


def host_rows(model: shooting.Model, horizon: int, steps: int, work: Path) -> None:
    ocp, _ = controller_ocp(model, horizon)
    for case, x0 in cases(model):
        folder = work / f"{model.name}_{case}"
        report = export_controller(ocp, folder, x0=x0, force=True)
        assert report.ok, report.problems
        rows = []
        controllers = [("generated C (double)", load_controller(folder)),
                       ("Python RTIController", shooting.RTIController(ocp)),
                       ("IPOPT MPC (warm)", shooting.MPCController(ocp))]
        for label, controller in controllers:
            traj = shooting.simulate_closed_loop(controller, x0, steps, progress=False)
            sample = np.asarray(traj.solve_time[1:]) * 1e6
            feedback = getattr(controller, "feedback_times", None)
            fb = np.median(feedback[1:]) * 1e6 if feedback else np.nan
            rows.append((label, float(np.median(sample)), float(np.max(sample)), fb, closed_loop_cost(traj, ocp)))
        base = rows[0][4]
        for label, med, mx, fb, cost in rows:
            print(f"{model.name:<{NAME_WIDTH}}{case:<11} {label:<26} {med:>10.1f} {mx:>10.1f} {fb:>12.1f} "
                  f"{cost:>12.4g} {cost / base:>7.4f}", flush=True)
        if case in ACADOS_US and model.name == "cartpole":
            print(f"{model.name:<{NAME_WIDTH}}{case:<11} {'acados SQP-RTI (issue)':<26} {ACADOS_US[case]:>10.1f}")


def host_table(models: list[shooting.Model], horizon: int, steps: int, work: Path) -> None:
    print(f"1. Host, N = {horizon}, each model's default scenario with soft state bounds, {steps} samples "
          f"(times in us; the first sample, which includes IPOPT's initial solve, is left out)")
    print(f"{'model':<{NAME_WIDTH}}{'case':<11} {'controller':<26} {'sample med':>10} {'sample max':>10} "
          f"{'feedback med':>12} {'cost':>12} {'cost/C':>7}")
    for model in models:
        with model_rows(model.name):
            host_rows(model, horizon, steps, work)
    print()


def step_table(models: list[shooting.Model], work: Path, repeats: int) -> None:
    print("2. Host, one RK4 step with A and B, called from Python (us per call; a DAE's step with its z0)")
    print(f"{'model':<{NAME_WIDTH}}{'call':<28} {'best':>8} {'median':>8} {'ratio':>7}")
    for model in models:
        F = shooting.build_integrator(model, "rk4", 1)
        report = export_integrator(F, work / f"step_{model.name}", name=f"{model.name}_rk4", force=True)
        assert report.ok, report.problems
        step = load_step(work / f"step_{model.name}")
        x, u, p, t0, dt, *z0 = nominal_args(model)
        c_args = (x, u, p if model.np else None, t0, dt, *z0)
        py_args = [x, u, ca.DM(p), t0, dt, *z0]
        rows = []
        for label, fn, args in (("exported C via load_step", step, c_args), ("casadi.Function call", F, py_args)):
            fn(*args)
            best = []
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(repeats):
                    fn(*args)
                best.append((time.perf_counter() - t) / repeats * 1e6)
            rows.append((label, min(best), float(np.median(best))))
        for label, best_us, med in rows:
            print(f"{model.name:<{NAME_WIDTH}}{label:<28} {best_us:>8.2f} {med:>8.2f} {best_us / rows[0][1]:>7.1f}",
                  flush=True)
    print()


def board_row(model: shooting.Model, horizon: int, steps: int) -> None:
    ocp, spec = controller_ocp(model, horizon)
    with tempfile.TemporaryDirectory() as tmp:
        report = export_controller(ocp, Path(tmp) / "m4", real="float", target="cortex-m4")
    run = board_loop(generate_controller(spec, model.name, real="float"), spec, model.x0, steps)
    total = run.sample_instructions
    assert total is not None
    ms = total * CYCLES_PER_INSTRUCTION / M4_HZ * 1e3
    print(f"{model.name:<{NAME_WIDTH}}{ocp.horizon:>3} {report.flash:>8} {report.ram:>7} {np.median(total):>10.0f} "
          f"{np.max(total):>10.0f} {np.median(ms):>7.3f} {np.max(ms):>7.3f} "
          f"{np.median(run.qp_iterations):>9.0f} {np.max(run.qp_iterations):>9d}", flush=True)


def board_table(models: list[shooting.Model], horizon: int, steps: int) -> None:
    if not (qemu_mps2.have_cortex_m4_toolchain() and qemu_mps2.have_qemu()):
        print("3. Cortex-M4: skipped (needs arm-none-eabi-gcc, newlib and qemu-system-arm)")
        return
    print(f"3. Emulated Cortex-M4 (QEMU mps2-an386, -icount), float, {steps} closed-loop samples; "
          f"ms = instructions x {CYCLES_PER_INSTRUCTION} / {M4_HZ / 1e6:.0f} MHz")
    print(f"{'model':<{NAME_WIDTH}}{'N':>3} {'flash B':>8} {'RAM B':>7} {'instr med':>10} {'instr max':>10} "
          f"{'ms med':>7} {'ms max':>7} {'QP it med':>9} {'QP it max':>9}")
    for model in models:
        with model_rows(model.name):
            board_row(model, horizon, steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (for the tests)")
    add_models_option(parser)
    args = parser.parse_args(argv)
    models = selected_models(parser, args)
    print(f"casadi {ca.__version__}, shooting {shooting.__version__}, python {sys.version.split()[0]}\n")
    horizon = 10 if args.quick else 20
    with tempfile.TemporaryDirectory(prefix="bench_controller_") as tmp:
        host_table(models, horizon, 10 if args.quick else 100, Path(tmp))
        step_table(models, Path(tmp), 200 if args.quick else 5000)
    board_table(models, horizon, 5 if args.quick else 100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
