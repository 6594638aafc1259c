#!/usr/bin/env python3
"""Benchmark: the generated C controller against the Python RTIController and full IPOPT MPC, in one run.

Three tables, every figure measured in this run:

1. Host, cart-pole (N = 20, dt = 0.05, acados' weights, soft |p| <= 2), regulation
   from theta = 0.3 and the swing-up: time per RTI sample (preparation +
   feedback) and of the feedback alone, median and max, for the generated
   C (double, gcc -O2, called through ctypes), the Python RTIController
   (CasADi + qrqp) and full IPOPT MPC; closed-loop cost and its ratio to
   the generated controller's. acados' figures on this machine are quoted
   from the issue (77 us regulation, 437 us swing-up, median), not run here.
2. Host, one integrator step with A and B (cart-pole RK4): the exported C
   called from Python (`load_step`) against the CasADi Function call.
3. Emulated Cortex-M4 (QEMU mps2-an386, -icount), float: model, N, flash,
   RAM, instructions per RTI sample (median, max), estimated ms at 168 MHz
   (instructions x 1.25 cycles), QP iterations (median, max).

    python scripts/bench_controller.py            # 100 samples, both models on the board
    python scripts/bench_controller.py --quick    # fewer samples (used by the tests)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import casadi as ca
import numpy as np

import shooting
from shooting.codegen import export_controller, export_integrator, load_controller, load_step, qemu_mps2
from shooting.codegen.controller_c import controller_spec, generate_controller
from shooting.codegen.controller_check import CYCLES_PER_INSTRUCTION, M4_HZ, board_loop

ACADOS_US = {"regulation": 77.0, "swing-up": 437.0}


def cartpole_ocp() -> tuple[shooting.Model, shooting.MultipleShootingOCP]:
    model = shooting.load_model("cartpole")
    problem = shooting.default_scenario(model).problem.with_changes(soft_x_bounds=True)
    return model, shooting.MultipleShootingOCP.from_problem(model, problem)


def closed_loop_cost(traj: shooting.Trajectory, ocp: shooting.MultipleShootingOCP) -> float:
    return float(traj.stats(Q=ocp.Q, R=ocp.R)["closed_loop_cost"])


def host_table(steps: int, work: Path) -> None:
    model, ocp = cartpole_ocp()
    print(f"1. Host, cart-pole N = {ocp.horizon}, dt = {ocp.dt:g} s, {steps} samples "
          f"(times in us; the first sample, which includes IPOPT's initial solve, is left out)")
    print(f"{'case':<11} {'controller':<26} {'sample med':>10} {'sample max':>10} {'feedback med':>12} "
          f"{'cost':>12} {'cost/C':>7}")
    for case, x0 in (("regulation", np.array([0.0, 0.3, 0.0, 0.0])), ("swing-up", model.x0)):
        folder = work / case
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
            print(f"{case:<11} {label:<26} {med:>10.1f} {mx:>10.1f} {fb:>12.1f} {cost:>12.2f} {cost / base:>7.4f}")
        print(f"{case:<11} {'acados SQP-RTI (issue)':<26} {ACADOS_US[case]:>10.1f} {'':>10} {'':>12} {'':>12} {'':>7}")
    print()


def step_table(work: Path, repeats: int) -> None:
    model = shooting.load_model("cartpole")
    F = shooting.build_integrator(model, "rk4", 1)
    report = export_integrator(F, work / "step", name="cartpole_rk4", force=True)
    assert report.ok
    step = load_step(work / "step")
    x, u = model.x0.copy(), np.array([1.0])
    step(x, u, None, 0.0, 0.05)
    F(x, u, [], 0.0, 0.05)
    rows = []
    for label, call in (("exported C via load_step", lambda: step(x, u, None, 0.0, 0.05)),
                        ("casadi.Function call", lambda: F(x, u, ca.DM(), 0.0, 0.05))):
        best = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(repeats):
                call()
            best.append((time.perf_counter() - t) / repeats * 1e6)
        rows.append((label, min(best), float(np.median(best))))
    print("2. Host, one cart-pole RK4 step with A and B, called from Python (us per call)")
    print(f"{'call':<28} {'best':>8} {'median':>8} {'ratio':>7}")
    for label, best, med in rows:
        print(f"{label:<28} {best:>8.2f} {med:>8.2f} {best / rows[0][1]:>7.1f}")
    print()


def board_table(steps: int, models: list[str]) -> None:
    if not (qemu_mps2.have_cortex_m4_toolchain() and qemu_mps2.have_qemu()):
        print("3. Cortex-M4: skipped (needs arm-none-eabi-gcc, newlib and qemu-system-arm)")
        return
    print(f"3. Emulated Cortex-M4 (QEMU mps2-an386, -icount), float, {steps} closed-loop samples; "
          f"ms = instructions x {CYCLES_PER_INSTRUCTION} / {M4_HZ / 1e6:.0f} MHz")
    print(f"{'model':<10} {'N':>3} {'flash B':>8} {'RAM B':>7} {'instr med':>10} {'instr max':>10} "
          f"{'ms med':>7} {'ms max':>7} {'QP it med':>9} {'QP it max':>9}")
    for name in models:
        model = shooting.load_model(name)
        problem = shooting.default_scenario(model).problem.with_changes(horizon=20, soft_x_bounds=True)
        ocp = shooting.MultipleShootingOCP.from_problem(model, problem)
        with tempfile.TemporaryDirectory() as tmp:
            report = export_controller(ocp, Path(tmp) / "m4", real="float", target="cortex-m4")
        spec = controller_spec(ocp)
        run = board_loop(generate_controller(spec, name, real="float"), spec, model.x0, steps)
        total = run.sample_instructions
        assert total is not None
        ms = total * CYCLES_PER_INSTRUCTION / M4_HZ * 1e3
        print(f"{name:<10} {ocp.horizon:>3} {report.flash:>8} {report.ram:>7} {np.median(total):>10.0f} "
              f"{np.max(total):>10.0f} {np.median(ms):>7.3f} {np.max(ms):>7.3f} "
              f"{np.median(run.qp_iterations):>9.0f} {np.max(run.qp_iterations):>9d}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (for the tests)")
    args = parser.parse_args(argv)
    print(f"casadi {ca.__version__}, shooting {shooting.__version__}, python {sys.version.split()[0]}\n")
    with tempfile.TemporaryDirectory(prefix="bench_controller_") as tmp:
        host_table(30 if args.quick else 100, Path(tmp))
        step_table(Path(tmp), 200 if args.quick else 5000)
    board_table(10 if args.quick else 100, ["cartpole"] if args.quick else ["cartpole", "quadrotor"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
