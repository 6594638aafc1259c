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
3. Emulated Cortex-M4 (QEMU mps2-an386), float: model, N, flash, RAM,
   instructions and cycles per sample (median, and the worst after the
   first: the first is a cold start), ms at 168 MHz from the cycles (the
   Cortex-M4 cycle model of `shooting.codegen.cycles`: QEMU's executed
   instructions costed with the TRM's timings, an STM32F4's flash with 5 wait
   states), QP iterations (median, max), and what to budget: the worst case
   the export's default budget and a real-time one (5 QP, 1 SQP iteration per
   sample) give from each phase's measured cost.

4. Cold solves (issue 16): SQP to convergence from the state held over the
   horizon (``NAME_mpc_reset(mem, x0)`` then ``NAME_mpc_solve``), the C
   (double, host) against its Python twin (`RTIController.solve`) and IPOPT
   from the same guess: iterations, milliseconds, microseconds per iteration,
   the distance of the C's inputs to IPOPT's. Target: the cart-pole swing-up
   at N = 20 within 2 ms (acados' full SQP cold: 2.16 ms, quoted from the issue).
8. Issue 23's targets (a controller with a deadline): the cart-pole swing-up
   on the board (median, every sample after the first, also under process
   noise 0.03 over 3 seeds x 1000 samples, with and without a budget), the
   quadrotor at N = 30 (every sample within 1.2x its median) and N = 15 (2 ms),
   process noise 0.3 (host, double) and 0.1 (board, float) on the soft
   swing-up (no run of more than 5 failed samples, inputs finite and within
   the bounds), a budget of 3 QP and 2 SQP iterations (still upright, no
   sample over it), and the Python RTIController against IPOPT's warm MPC.
9. Cold starts from 22 far cart-pole states (issue 24): the SQP with
   Gauss-Newton and with exact Hessians side by side, against IPOPT from the
   same state; then the float C's on the emulated board (instructions and
   cycles per cold solve, 100 SQP iterations at most) against the issue's
   main, 5781ddd, measured on the same starts (`--cold-starts-only`).
5. The price of a nonlinear path constraint (issue 16): the cart-pole
   swing-up at N = 20 with and without a soft power limit |F v| <= P (two
   rows, nonlinear in x and u), time per RTI sample on the host and
   instructions per sample on the emulated Cortex-M4 (float). Target: at most 1.5x.

A model the C controller does not take gets a row saying why.

    python scripts/bench_controller.py                        # 100 samples, every built-in model
    python scripts/bench_controller.py --quick                # N = 10, 10 samples (5 on the board), the cart-pole
    python scripts/bench_controller.py --quick --models all   # the tests' smoke run (exports: two models)
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import casadi as ca
import numpy as np

import shooting
from benchkit import NAME_WIDTH, Skip, add_models_option, model_rows, nominal_args, selected_models
from board_cold import board_cold_starts
from chain_mass import chain_model, chain_ocp
from shooting.codegen import export_controller, export_integrator, load_controller, load_step, qemu_mps2
from shooting.controller.board import board_loop
from shooting.controller.c_source import ControllerSpec, controller_spec, generate_controller
from shooting.mpc.sqp import SQP_STATUS

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
    except ValueError as err:  # a model file whose problem the C does not take (e.g. bounds on z)
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


def per_model_table(title: str, header: str, models: list[shooting.Model],
                    rows: Callable[[shooting.Model], None]) -> None:
    """Print a table's title and header, then each model's rows (a skip row where the model is refused)."""
    print(title)
    print(f"{'model':<{NAME_WIDTH}}{header}")
    for model in models:
        with model_rows(model.name):
            rows(model)
    print()


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def have_board() -> bool:
    return qemu_mps2.have_cortex_m4_toolchain() and qemu_mps2.have_qemu()


def host_table(models: list[shooting.Model], horizon: int, steps: int, work: Path) -> None:
    per_model_table(
        f"1. Host, N = {horizon}, each model's default scenario with soft state bounds, {steps} samples "
        f"(times in us; the first sample, which includes IPOPT's initial solve, is left out)",
        f"{'case':<11} {'controller':<26} {'sample med':>10} {'sample max':>10} {'feedback med':>12} "
        f"{'cost':>12} {'cost/C':>7}", models, lambda model: host_rows(model, horizon, steps, work))


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


def board_check(ocp: shooting.MultipleShootingOCP, folder: Path, steps: int) -> dict[str, float]:
    """The controller exported in float for the Cortex-M4 and checked there (its closed loop against the double
    Python RTI): flash, RAM, instructions and cycles per sample (median, worst after the first), ms at the cycle
    model's clock, QP iterations (median, max), the first inputs' error and its allowance, whether the check
    passed, and the worst case of the default budget and of a real-time one (`REAL_TIME_BUDGET`)."""
    report = export_controller(ocp, folder, real="float", target="cortex-m4", check=True, check_steps=steps,
                               force=True)
    board = report.manifest.get("check_cortex_m4", {})
    get = board.get
    worst = get("worst_case", {}).get("ms", np.nan)
    phases = {k: (v["instructions"], v["cycles"]) for k, v in get("phases", {}).items()}
    rt = np.nan
    if phases:
        from shooting.controller.loop_run import LoopRun
        run = LoopRun("cortex-m4", np.zeros((1, 1)), np.zeros((0, 1)), [], np.zeros(0, int), phases=phases,
                      cycle_model=get("cycle_model", {}))
        rt = float(run.worst_case(*REAL_TIME_BUDGET)["ms"])  # type: ignore[arg-type]
    return {"flash": float(report.flash or np.nan), "ram": float(report.ram or np.nan),
            "instr_med": get("instructions_per_sample_median", np.nan),
            "instr_max": get("instructions_per_sample_max_after_start", np.nan),
            "cyc_med": get("cycles_per_sample_median", np.nan), "cyc_max": get("cycles_per_sample_max_after_start",
                                                                             np.nan),
            "ms": get("ms_median", np.nan), "ms_max": get("ms_max_after_start", np.nan),
            "ms_first": get("ms_max", np.nan),
            "qp_med": get("qp_iterations_median", np.nan), "qp_max": get("qp_iterations_max", -1),
            "error": get("input_error", np.nan), "allowed": get("input_tolerance", np.nan),
            "ok": float(report.ok), "worst_default": worst, "worst_rt": rt}


def board_row(model: shooting.Model, horizon: int, steps: int) -> None:
    """One model's float controller checked on the board (its closed loop against the double Python RTI)."""
    ocp, _ = controller_ocp(model, horizon)
    with tempfile.TemporaryDirectory() as tmp:
        r = board_check(ocp, Path(tmp) / "m4", steps)
    print(f"{model.name:<{NAME_WIDTH}}{ocp.horizon:>3} {r['flash']:>8.0f} {r['ram']:>7.0f} {r['instr_med']:>9.0f} "
          f"{r['cyc_med']:>9.0f} {r['cyc_max']:>9.0f} {r['ms']:>7.3f} {r['ms_max']:>7.3f} {r['ms_first']:>8.2f} "
          f"{r['qp_med']:>5.0f} {r['qp_max']:>5.0f} {r['worst_rt']:>8.2f} {r['worst_default']:>9.0f} "
          f"{r['error']:>9.1e} {r['allowed']:>9.1e}", flush=True)


#: A real-time budget for table 3's worst case: 5 QP iterations (the shortcut's corrections, or the interior
#: point's) and 1 SQP iteration per sample (a cold start goes on over the next samples).
REAL_TIME_BUDGET = (5, 1)


def board_table(models: list[shooting.Model], horizon: int, steps: int) -> None:
    if not have_board():
        print("3. Cortex-M4: skipped (needs arm-none-eabi-gcc, newlib and qemu-system-arm)")
        return
    per_model_table(
        f"3. Emulated Cortex-M4 (QEMU mps2-an386), float, {steps} closed-loop samples; cycles by the Cortex-M4 "
        f"cycle model (the TRM's timings, an STM32F4 at 168 MHz with 5 flash wait states), max: the worst after "
        f"the first (the first, a cold start: 'first ms'); what to budget: the worst case of a real-time budget "
        f"({REAL_TIME_BUDGET[0]} QP, {REAL_TIME_BUDGET[1]} SQP iteration) and of the default (50, 100), from each "
        f"phase's measured cost; the first inputs' error against the double Python RTI, and its allowance",
        f"{'N':>3} {'flash B':>8} {'RAM B':>7} {'instr med':>9} {'cyc med':>9} {'cyc max':>9} {'ms med':>7} "
        f"{'ms max':>7} {'first ms':>8} {'QP md':>5} {'QP mx':>5} {'bound ms':>8} {'default ms':>9} "
        f"{'u error':>9} {'allowed':>9}", models, lambda model: board_row(model, horizon, steps))


#: The power limit of table 5 [W]: active during the swing-up's pushes.
POWER_LIMIT = 150.0


def cold_rows(model: shooting.Model, horizon: int, repeats: int, work: Path) -> None:
    ocp, _ = controller_ocp(model, horizon)
    ipopt_ocp = shooting.MultipleShootingOCP.from_problem(model, ocp.problem.with_changes(
        solver_options={"ipopt.tol": 1e-12, "ipopt.bound_relax_factor": 0.0, "ipopt.print_level": 0}))
    for case, x0 in cases(model):
        folder = work / f"cold_{model.name}_{case}"
        report = export_controller(ocp, folder, x0=x0, force=True)
        assert report.ok, report.problems
        ctl = load_controller(folder)
        times, res = [], None
        for _ in range(repeats):
            ctl.reset(x0)
            t = time.perf_counter()
            res = ctl.solve(x0, max_iter=500)
            times.append(time.perf_counter() - t)
        assert res is not None
        t = time.perf_counter()
        twin = shooting.RTIController(ocp, initialize_with_ipopt=False).solve(x0, max_iter=500)
        t_twin = time.perf_counter() - t
        t = time.perf_counter()
        truth = ipopt_ocp.solve(x0)
        t_ipopt = time.perf_counter() - t
        ms = float(np.median(times)) * 1e3
        err = float(np.abs(res.u - truth.u).max() / (1 + np.abs(truth.u).max()))
        print(f"{model.name:<{NAME_WIDTH}}{case:<11} {res.status:>6} {res.iterations:>5} {ms:>9.3f} "
              f"{ms * 1e3 / max(res.iterations, 1):>9.1f} {t_twin * 1e3:>10.1f} {twin.iterations:>5} "
              f"{t_ipopt * 1e3:>9.1f} {truth.iterations:>6} {err:>9.1e}", flush=True)
        if model.name == "cartpole" and case == "swing-up" and horizon == 20:
            print(f"{'':<{NAME_WIDTH}}target: cold swing-up at N = 20 within 2 ms (acados 2.16 ms): "
                  f"{verdict(ms <= 2.0)} ({ms:.2f} ms)")


def cold_table(models: list[shooting.Model], horizon: int, repeats: int, work: Path) -> None:
    per_model_table(
        f"4. Cold solves: SQP from the state held over the horizon, N = {horizon}, host; C (double, median of "
        f"{repeats}) against its Python twin and IPOPT (tol 1e-12) from the same guess",
        f"{'case':<11} {'status':>6} {'its':>5} {'C ms':>9} {'us/it':>9} {'Python ms':>10} {'its':>5} "
        f"{'IPOPT ms':>9} {'its':>6} {'u vs IPOPT':>9}", models, lambda model: cold_rows(model, horizon, repeats, work))


def _power(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
    return ca.vertcat(u[0] * x[2] - POWER_LIMIT, -u[0] * x[2] - POWER_LIMIT)


def host_loop_us(ocp: shooting.MultipleShootingOCP, folder: Path, steps: int,
                 x0: np.ndarray | None = None) -> tuple[shooting.Trajectory, float]:
    """The C (double) exported to `folder` (its guess solved from `x0`, default the model's) in closed loop from
    `x0`: the run and its median sample time in us (the first, cold sample left out)."""
    x0 = ocp.model.x0 if x0 is None else x0
    assert export_controller(ocp, folder, x0=x0, force=True).ok
    traj = shooting.simulate_closed_loop(load_controller(folder), x0, steps, progress=False)
    return traj, float(np.median(traj.solve_time[1:])) * 1e6


def board_instructions(ocp: shooting.MultipleShootingOCP, steps: int) -> tuple[float, float]:
    """Median instructions and cycles per RTI sample of the float C on the emulated board (the cold first sample
    left out), NaN without the board's tools."""
    if not have_board():
        return np.nan, np.nan
    spec = controller_spec(ocp)
    run = board_loop(generate_controller(spec, ocp.model.name, real="float"), spec, ocp.model.x0, steps)
    assert run.sample_instructions is not None and run.sample_cycles is not None
    return float(np.median(run.sample_instructions[1:])), float(np.median(run.sample_cycles[1:]))


def constraint_table(horizon: int, steps: int, board_steps: int, work: Path) -> None:
    """Table 5: the cart-pole swing-up with and without the power limit."""
    model = shooting.load_model("cartpole")
    print(f"5. The cart-pole swing-up, N = {horizon}, with and without a soft power limit |F v| <= "
          f"{POWER_LIMIT:g} W: RTI per sample, host (C double, {steps} samples) and Cortex-M4 (float, "
          f"{board_steps} samples)")
    print(f"{'problem':<28} {'host us med':>11} {'ratio':>6} {'M4 cyc med':>12} {'ratio':>6} {'|Fv| max':>9}")
    base = shooting.default_scenario(model).problem.with_changes(horizon=horizon, soft_x_bounds=True)
    rows = []
    for label, problem in (("bounds only", base), ("with the power limit", base.with_changes(
            path_constraints=_power, soft_path_constraints=True))):
        ocp = shooting.MultipleShootingOCP.from_problem(model, problem)
        traj, host = host_loop_us(ocp, work / f"power_{len(rows)}", steps)
        instr = board_instructions(ocp, board_steps)[1]
        power = float(np.max(np.abs(traj.u[:, 0] * traj.x[:-1, 2])))
        rows.append((label, host, instr, power))
    for label, host, instr, power in rows:
        print(f"{label:<28} {host:>11.1f} {host / rows[0][1]:>6.2f} {instr:>12.0f} {instr / rows[0][2]:>6.2f} "
              f"{power:>9.1f}", flush=True)
    ratio = max(rows[1][1] / rows[0][1], rows[1][2] / rows[0][2] if np.isfinite(rows[1][2]) else 0.0)
    print(f"target: the constraint costs at most 1.5x: {'PASS' if ratio <= 1.5 else 'FAIL'} ({ratio:.2f}x)")
    print()


def growth_table(horizons: tuple[int, ...], steps: int, board_steps: int, work: Path) -> None:
    """Table 6: the cart-pole swing-up's memory and time as the horizon grows (linear in N)."""
    model = shooting.load_model("cartpole")
    board = have_board()
    print(f"6. The cart-pole swing-up as N grows: Cortex-M4 float flash and RAM (mem + stack), RAM over RAM at "
          f"N = {horizons[1]}, host C double ({steps} samples) and M4 float ({board_steps} samples) per RTI sample")
    print(f"{'N':>4} {'flash B':>8} {'RAM B':>8} {'RAM ratio':>9} {'host us med':>11} {'M4 instr med':>12} "
          f"{'M4 ms med':>9}")
    hz = 168e6
    rows = []
    for horizon in horizons:
        ocp, _ = controller_ocp(model, horizon)
        folder = work / f"growth_{horizon}"
        report = export_controller(ocp, folder / "m4", real="float", target="cortex-m4" if board else "host",
                                   force=True)
        _, host = host_loop_us(ocp, folder / "host", steps)
        instr, cyc = board_instructions(ocp, board_steps)
        rows.append((horizon, report.flash, report.ram, host, instr, cyc))
    for horizon, flash, ram, host, instr, cyc in rows:
        flash, ram = (flash, ram) if board else (np.nan, np.nan)
        print(f"{horizon:>4} {flash:>8} {ram:>8} {ram / (rows[1][2] if board else np.nan):>9.2f} "
              f"{host:>11.1f} {instr:>12.0f} {cyc / hz * 1e3:>9.3f}", flush=True)
    if board and len(rows) == 4:  # the full run: N = 20, 50, 100, 200
        ratio, ram_200 = rows[3][2] / rows[1][2], rows[3][2]
        passed = verdict(ratio <= 4.5 and ram_200 <= 64 * 1024)
        print(f"target: RAM at N = {rows[3][0]} at most 4.5x that at N = {rows[1][0]} and at most 64 KiB "
              f"(65536 B): {passed} ({ratio:.2f}x, {ram_200} B)")
    print()


def target_row(label: str, ocp: shooting.MultipleShootingOCP, steps: int, work: Path) -> dict[str, float]:
    """`board_check` of one target's problem, printed as a row of table 7 and returned."""
    r = board_check(ocp, work / label.replace(" ", "_"), steps)
    print(f"{label:<22} {ocp.horizon:>3} {r['flash']:>8.0f} {r['ram']:>8.0f} {r['instr_med']:>10.0f} "
          f"{r['instr_max']:>10.0f} {r['ms']:>7.3f} {r['ms_max']:>7.3f} {r['qp_med']:>6.0f} {r['qp_max']:>6.0f} "
          f"{r['error']:>9.1e} {r['allowed']:>9.1e} {'ok' if r['ok'] else 'FAIL':>5}", flush=True)
    return r


def targets_table(steps: int, host_steps: int, work: Path) -> None:
    """Table 7: issue 15's speed and memory targets, each measured on its own problem (float on the board)."""
    if not have_board():
        print("7. Targets on the Cortex-M4: skipped (needs arm-none-eabi-gcc, newlib and qemu-system-arm)")
        return
    print(f"7. Targets: float on the emulated Cortex-M4, checked in closed loop ({steps} samples) against the "
          f"double Python RTI (error on each input's bound range); ms at 168 MHz")
    print(f"{'problem':<22} {'N':>3} {'flash B':>8} {'RAM B':>8} {'instr med':>10} {'instr max':>10} "
          f"{'ms med':>7} {'ms max':>7} {'QP med':>6} {'QP max':>6} {'u error':>9} {'allowed':>9} {'check':>5}")
    print("(max: the worst sample after the first; ms from the cycle model)")
    cp_model, quad_model = (shooting.load_model(name) for name in ("cartpole", "quadrotor"))
    chain = chain_model(5)
    cp = target_row("cartpole swing-up", controller_ocp(cp_model, 20)[0], steps, work)
    quad_horizon = shooting.default_scenario(quad_model).problem.horizon
    quad = target_row("quadrotor (default N)", controller_ocp(quad_model, quad_horizon)[0], steps, work)
    ch = target_row("chain of 5 masses", chain_ocp(chain, 20), steps, work)
    kib = 1024
    print(f"target: cart-pole N = 20 at most 0.5 ms per sample and 12 KiB RAM: {verdict(cp['ms'] <= 0.5)} "
          f"({cp['ms']:.2f} ms), {verdict(cp['ram'] <= 12 * kib)} ({cp['ram']:.0f} B)")
    print(f"target: quadrotor N = {quad_horizon} at most 10 ms, 64 KiB RAM, 96 KiB flash: "
          f"{verdict(quad['ms'] <= 10)} ({quad['ms']:.1f} ms), {verdict(quad['ram'] <= 64 * kib)} "
          f"({quad['ram']:.0f} B), {verdict(quad['flash'] <= 96 * kib)} ({quad['flash']:.0f} B)")
    print(f"target: the {chain.nx}-state chain N = 20 at most 96 KiB RAM: {verdict(ch['ram'] <= 96 * kib)} "
          f"({ch['ram']:.0f} B)")
    regulation = dict(cases(cp_model))["regulation"]
    host_us = {horizon: host_loop_us(controller_ocp(cp_model, horizon)[0], work / f"target_host_{horizon}",
                                     host_steps, regulation)[1] for horizon in (20, 100)}
    print(f"target: host C double, cart-pole regulation, N = 20 at most 10 us per sample (median): "
          f"{verdict(host_us[20] <= 10)} ({host_us[20]:.1f} us); N = 100 at most 5x N = 20: "
          f"{verdict(host_us[100] <= 5 * host_us[20])} ({host_us[100] / host_us[20]:.2f}x)")
    print()


def longest_failed_run(status: list[str]) -> int:
    """The longest run of consecutive failed samples (neither ok nor stopped by the budget)."""
    run = best = 0
    for s in status:
        run = run + 1 if s not in ("ok", "optimal", "converged", "budget") else 0
        best = max(best, run)
    return best


def deadline_board(ocp: shooting.MultipleShootingOCP, x0: np.ndarray, steps: int, noise: float, seeds: int,
                   budget: tuple[int, int]) -> dict[str, float]:
    """The float C in closed loop on the board: ms per sample (median, worst after the first) over `seeds` runs
    with process noise, the longest failed run, finite inputs within the bounds, the largest QP iterations of a
    sample, the final state's distance to the reference (the last run)."""
    spec = controller_spec(ocp)
    export = generate_controller(spec, ocp.model.name, real="float")
    cyc, worst, runs, ok_inputs, qp = [], 0.0, 0, True, 0
    run = None
    for seed in range(seeds):
        run = board_loop(export, spec, x0, steps, noise, seed=seed, budget=budget)
        assert run.sample_cycles is not None
        cyc += list(run.sample_cycles[1:])
        worst = max(worst, float(run.sample_cycles[1:].max()))
        runs = max(runs, longest_failed_run(run.status))
        ok_inputs &= bool(np.isfinite(run.u).all() and np.all(run.u >= ocp.u_min - 1e-6)
                          and np.all(run.u <= ocp.u_max + 1e-6))
        qp = max(qp, int(run.qp_iterations[1:].max()))
    assert run is not None
    hz = float(run.cycle_model.get("clock_hz", 168e6))  # type: ignore[arg-type]
    return {"ms": float(np.median(cyc)) / hz * 1e3, "ms_max": worst / hz * 1e3, "runs": runs,
            "inputs": float(ok_inputs), "qp": qp, "final": float(np.abs(run.x[-1] - ocp.x_ref[-1]).max())}


def deadline_table(work: Path, long: int, seeds: int) -> None:
    """Table 8: issue 23's targets (a controller with a deadline)."""
    if not have_board():
        print("8. Deadline targets on the Cortex-M4: skipped (needs arm-none-eabi-gcc, newlib and qemu-system-arm)")
        return
    cp = shooting.load_model("cartpole")
    ocp = controller_ocp(cp, 20)[0]
    print(f"8. A controller with a deadline: float on the emulated Cortex-M4 (ms from the cycle model at 168 MHz), "
          f"the cart-pole swing-up N = 20 with soft bounds; noise: {seeds} seeds x {long} samples")
    print(f"{'run':<44} {'ms med':>7} {'ms max':>7} {'QP max':>6} {'failed run':>10} {'inputs':>6} {'final':>8}")
    rows = {}
    for label, steps, noise, n, budget in (("no noise", 100, 0.0, 1, (0, 0)),
                                           ("noise 0.03", long, 0.03, seeds, (0, 0)),
                                           ("noise 0.03, budget 4 QP iterations", long, 0.03, seeds, (4, 0)),
                                           ("noise 0.1", long, 0.1, seeds, (0, 0)),
                                           ("noise 0.1, budget 3 SQP iterations", long, 0.1, seeds, (0, 3)),
                                           ("budget 3 QP / 2 SQP", 100, 0.0, 1, (3, 2))):
        r = deadline_board(ocp, cp.x0, steps, noise, n, budget)
        rows[label] = r
        print(f"{label:<44} {r['ms']:>7.3f} {r['ms_max']:>7.3f} {r['qp']:>6} {r['runs']:>10} "
              f"{'ok' if r['inputs'] else 'BAD':>6} {r['final']:>8.3f}", flush=True)
    quad = shooting.load_model("quadrotor")
    q30 = target_row("quadrotor (default N)", controller_ocp(quad, 30)[0], 40, work)
    q15 = target_row("quadrotor N = 15", controller_ocp(quad, 15)[0], 40, work)
    base, noisy, budgeted = rows["no noise"], rows["noise 0.03"], rows["noise 0.03, budget 4 QP iterations"]
    print(f"target: cart-pole median <= 0.5 ms: {verdict(base['ms'] <= 0.5)} ({base['ms']:.3f} ms); every sample "
          f"after the first <= 1.0 ms: {verdict(base['ms_max'] <= 1.0)} ({base['ms_max']:.3f} ms), with noise "
          f"0.03 {verdict(noisy['ms_max'] <= 1.0)} ({noisy['ms_max']:.3f} ms), with noise 0.03 and a budget of 4 "
          f"QP iterations {verdict(budgeted['ms_max'] <= 1.0)} ({budgeted['ms_max']:.3f} ms)")
    print(f"target: quadrotor N = 30 every sample after the first within 1.2x its median: "
          f"{verdict(q30['cyc_max'] <= 1.2 * q30['cyc_med'])} ({q30['cyc_max'] / q30['cyc_med']:.2f}x); N = 15 worst "
          f"<= 2 ms: {verdict(q15['ms_max'] <= 2.0)} ({q15['ms_max']:.2f} ms, {q15['ms_max'] / 2.0:.1f}x the target)")
    b = rows["budget 3 QP / 2 SQP"]
    print(f"target: budget 3 QP / 2 SQP: upright at the end and no sample over it: "
          f"{verdict(b['final'] < 0.05 and b['qp'] <= 6)} (final |x - x_ref| {b['final']:.3f}, {b['qp']} QP "
          f"iterations at most)")
    noise_targets(ocp, rows["noise 0.1"], long, seeds, work)
    print()


def noise_targets(ocp: shooting.MultipleShootingOCP, board: dict[str, float], long: int, seeds: int,
                  work: Path) -> None:
    """Noise 0.3 on the host (C double, and the Python RTI), 0.1 on the board; the Python RTI's speed."""
    folder = work / "deadline_host"
    assert export_controller(ocp, folder, force=True).ok
    ctl = load_controller(folder)
    host_runs = python_runs = 0
    inputs = True
    for seed in range(seeds):
        for controller in (ctl, shooting.RTIController(ocp)):
            traj = shooting.simulate_closed_loop(controller, ocp.model.x0, long, noise_std=0.3, seed=seed,
                                                 progress=False)
            inputs &= bool(np.isfinite(traj.u).all() and np.all(np.abs(traj.u) <= 80.0))
            if controller is ctl:
                host_runs = max(host_runs, longest_failed_run(list(traj.status)))
            else:
                python_runs = max(python_runs, longest_failed_run(list(traj.status)))
    print(f"target: noise 0.3 (host, double) and 0.1 (board, float), no run of more than 5 failed samples, inputs "
          f"finite and within the bounds: {verdict(max(host_runs, python_runs, board['runs']) <= 5 and inputs)} "
          f"(C host {host_runs}, Python RTI {python_runs}, board {board['runs']})")
    x0 = ocp.model.x0
    times = {}
    for label, controller in (("rti", shooting.RTIController(ocp)), ("ipopt", shooting.MPCController(ocp)),
                              ("c", load_controller(folder))):
        traj = shooting.simulate_closed_loop(controller, x0, 100, progress=False)
        times[label] = (float(np.median(traj.solve_time[1:])), traj.u)
    gap = float(np.abs(times["rti"][1] - times["c"][1]).max() / 80.0)
    ratio = times["rti"][0] / times["ipopt"][0]
    print(f"target: the Python RTIController at most 0.1x IPOPT's warm MPC per sample and equal to the C to 1e-10: "
          f"{verdict(ratio <= 0.1 and gap <= 1e-10)} ({ratio:.3f}x: {times['rti'][0] * 1e6:.0f} us against "
          f"{times['ipopt'][0] * 1e6:.0f} us; {gap:.1e} of the input range)")


def far_starts(count: int, seed: int = 23) -> list[np.ndarray]:
    """Cart-pole starts: p in [-1, 1] m, theta in [-pi, pi], v in [-1, 1] m/s, omega in [-2, 2] rad/s."""
    rng = np.random.default_rng(seed)
    low, high = np.array([-1.0, -np.pi, -1.0, -2.0]), np.array([1.0, np.pi, 1.0, 2.0])
    return [rng.uniform(low, high) for _ in range(count)]


#: The float C's cold solves (Gauss-Newton, 100 SQP iterations) from the 22 far starts on the board at issue 24's
#: main (5781ddd, measured 2026-11-27 with this table's method): median and total instructions.
BOARD_COLD_BEFORE = {"median": 12.51e6, "total": 557e6}


def board_cold_rows(ocp: shooting.MultipleShootingOCP, starts: list[np.ndarray], truths: list, work: Path) -> None:
    """Table 9's board part: the float C's cold solves, Gauss-Newton and exact Hessians side by side."""
    print("the float C on the board (reset + solve, 100 SQP iterations at most): instructions (M) per cold solve")
    print(f"{'Hessian':<13} {'median':>8} {'max':>8} {'total':>8} {'QP its':>7} {'converged':>9} {'to IPOPT':>8}")
    medians = {}
    for hessian in ("gauss-newton", "exact"):
        runs = board_cold_starts(ocp, starts, hessian, 100, work / f"board_cold_{hessian}")
        ins = np.array([r.instructions for r in runs], dtype=float)
        same = sum(r.status == 0 and abs(r.u0 - t.u[0, 0]) <= 1e-4 * 160 for r, t in zip(runs, truths, strict=True))
        print(f"{hessian:<13} {np.median(ins) / 1e6:>8.2f} {ins.max() / 1e6:>8.2f} {ins.sum() / 1e6:>8.1f} "
              f"{sum(r.qp_iterations for r in runs):>7} {sum(r.status == 0 for r in runs):>9} {same:>8}")
        medians[hessian] = (float(np.median(ins)), float(ins.sum()))
    median, total = medians["gauss-newton"]
    before = BOARD_COLD_BEFORE
    print(f"target: the board's cold start at least halved (Gauss-Newton, against 5781ddd's median "
          f"{before['median'] / 1e6:.2f}M and total {before['total'] / 1e6:.0f}M): "
          f"{verdict(median <= 0.5 * before['median'] and total <= 0.5 * before['total'])} "
          f"({median / before['median']:.2f}x the median, {total / before['total']:.2f}x the total)")


def cold_start_table(count: int, work: Path) -> None:
    """Table 9: SQP from far cart-pole starts (the Python RTIController's solve, the C's method) with Gauss-Newton
    and exact Hessians, against IPOPT from the same state (the OCP's own initial guess for all)."""
    cp = shooting.load_model("cartpole")
    ocp = shooting.build_ocp(shooting.default_scenario(cp), cp)
    print(f"9. Cold starts: SQP (300 iterations at most) from {count} far cart-pole starts, N = {ocp.horizon}, "
          f"from the OCP's initial guess; 'same' = the first input within 1e-4 of its range of IPOPT's")
    print(f"{'start':<34} {'IPOPT cost':>11} {'GN its':>6} {'GN':>10} {'exact its':>9} {'exact':>10}")
    counts: dict[str, list[int]] = {"gauss-newton": [], "exact": []}
    reached = {"gauss-newton": 0, "exact": 0}
    truths = []
    for x0 in far_starts(count):
        truth = ocp.solve(x0)
        truths.append(truth)
        row = f"{np.array2string(x0, precision=2, separator=','):<34} {truth.cost:>11.4g}"
        for hessian in ("gauss-newton", "exact"):
            res = shooting.RTIController(ocp, hessian=hessian, initialize_with_ipopt=False).solve(x0, max_iter=300)
            same = res.status == 0 and truth.success and abs(res.u[0, 0] - truth.u[0, 0]) <= 1e-4 * 160
            verdict_text = "same" if same else ("other min" if res.status == 0 else SQP_STATUS[res.status])
            reached[hessian] += same
            if res.status == 0:
                counts[hessian].append(res.iterations)
            row += f" {res.iterations:>{6 if hessian == 'gauss-newton' else 9}} {verdict_text:>10}"
        print(row, flush=True)
    for hessian, its in counts.items():
        print(f"{hessian}: converged from {len(its)} of {count}, to IPOPT's solution from {reached[hessian]}; "
              f"iterations median {np.median(its) if its else float('nan'):.0f}")
    exact, gn = counts["exact"], counts["gauss-newton"]
    ok = len(exact) == count and reached["exact"] >= count - 2 and bool(gn) and np.median(exact) <= np.median(gn)
    print(f"target: the exact Hessian converges from all {count} starts (at most 2 to another minimum), its median "
          f"iterations at most Gauss-Newton's: {verdict(ok)} ({len(exact)} of {count}, {reached['exact']} to IPOPT's; "
          f"median {np.median(exact) if exact else float('nan'):.0f} against "
          f"{np.median(gn) if gn else float('nan'):.0f})")
    if have_board():
        board_cold_rows(ocp, far_starts(count), truths, work)
    else:
        print("the board's cold starts: skipped (no arm-none-eabi-gcc or qemu-system-arm)")
    print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (for the tests)")
    parser.add_argument("--targets-only", action="store_true", help="only table 7 (issue 15's targets)")
    parser.add_argument("--deadline-only", action="store_true", help="only table 8 (issue 23's targets)")
    parser.add_argument("--board-only", action="store_true",
                        help="only table 3 (the float controllers on the emulated Cortex-M4: what to budget)")
    parser.add_argument("--cold-starts-only", action="store_true",
                        help="only table 9 (far cold starts, Gauss-Newton and exact Hessians)")
    add_models_option(parser)
    args = parser.parse_args(argv)
    models = selected_models(parser, args)
    print(f"casadi {ca.__version__}, shooting {shooting.__version__}, python {sys.version.split()[0]}\n")
    horizon = 10 if args.quick else 20
    with tempfile.TemporaryDirectory(prefix="bench_controller_") as tmp:
        if args.targets_only:
            targets_table(40, 100, Path(tmp))
            return 0
        if args.deadline_only:
            deadline_table(Path(tmp), 100 if args.quick else 1000, 1 if args.quick else 3)
            return 0
        if args.board_only:
            board_table(models, horizon, 5 if args.quick else 100)
            return 0
        if args.cold_starts_only:
            cold_start_table(4 if args.quick else 22, Path(tmp))
            return 0
        # (quick, the tests' smoke run: the exporting tables' paths on two models, the step table on every one;
        # every model's controller is checked on the host and the board by tests/test_controller_reach.py)
        few = models[:2] if args.quick else models
        host_table(few, horizon, 10 if args.quick else 100, Path(tmp))
        step_table(models, Path(tmp), 200 if args.quick else 5000)
        board_table(few, horizon, 5 if args.quick else 100)
        cold_table(few, horizon, 1 if args.quick else 20, Path(tmp))
        if any(m.name == "cartpole" for m in models):
            constraint_table(horizon, 10 if args.quick else 100, 5 if args.quick else 40, Path(tmp))
            growth_table((10, 20) if args.quick else (20, 50, 100, 200), 10 if args.quick else 60,
                         3 if args.quick else 10, Path(tmp))
            if not args.quick and any(m.name == "quadrotor" for m in models):
                targets_table(40, 100, Path(tmp))
                deadline_table(Path(tmp), 1000, 3)
            cold_start_table(4 if args.quick else 22, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
