#!/usr/bin/env python3
"""Benchmark: real-time iteration against full IPOPT MPC on each model's default scenario, in one run.

Per model (every built-in one by default: cart-pole and pendulum swing-up,
quadrotor flight to hover, the double pendulum, ...), both controllers run
the model's default scenario in closed loop against the same accurate plant;
the table gives the closed-loop cost (the OCP's stage cost summed over the
run) and its ratio to IPOPT's, the final error, the largest |x_0| (the
cart's excursion on the cart-pole), and the time per step (RTI: feedback +
preparation, with feedback alone beside it). A controller that cannot take
a model's problem gets a row saying why.

    python scripts/bench_rti.py                        # N = 20 and 40, 100 steps, every built-in model
    python scripts/bench_rti.py --quick                # N = 10, 5 steps, the cart-pole
    python scripts/bench_rti.py --quick --models all   # the same on every built-in model (the tests)
"""

from __future__ import annotations

import argparse
import sys

import casadi as ca
import numpy as np

import shooting
from benchkit import NAME_WIDTH, add_models_option, selected_models, skip_row  # scripts/ is on sys.path
from shooting import build_ocp, default_scenario

CONTROLLERS = (("IPOPT (full solve, warm)", None), ("RTI, qrqp", "qrqp"), ("RTI, osqp", "osqp"))


def run(model: shooting.Model, horizon: int, steps: int) -> None:
    scenario = default_scenario(model).with_changes(horizon=horizon)
    Q, R = scenario.problem.cost.Q, scenario.problem.cost.R
    print(f"\n{model.name}: closed loop of its default scenario, N = {horizon}, dt = {scenario.problem.dt}, "
          f"{steps} steps, {scenario.problem.method} x {scenario.problem.steps}; plant {scenario.plant_method} x "
          f"{scenario.plant_steps}")
    print(f"{'model':<{NAME_WIDTH}}{'controller':<26}{'cost':>12}{'ratio':>7}{'final err':>11}{'max|x0|':>8}"
          f"{'step ms':>9}{'max ms':>8}{'feedback':>10}{'success':>9}")
    print("-" * (NAME_WIDTH + 100))
    base = np.nan
    for label, qp in CONTROLLERS:
        ocp = build_ocp(scenario, model)
        try:
            controller = ocp if qp is None else shooting.RTIController(ocp, qp_solver=qp)
        except ValueError as err:  # the RTI's refusal: path constraints, bounds on algebraic states
            print(skip_row(model.name, f"{label}: {err}"))
            continue
        traj = shooting.simulate_closed_loop(controller, scenario.x0, steps, progress=False)
        cost = traj.stats(Q=Q, R=R)["closed_loop_cost"]
        base = cost if qp is None else base
        times = np.asarray(traj.solve_time[1:]) * 1e3  # the first step includes the initial cold solve
        fb = f"{np.median(controller.feedback_times[1:]) * 1e3:.3f}" if qp is not None else "-"
        print(f"{model.name:<{NAME_WIDTH}}{label:<26}{cost:>12.4g}{cost / base:>7.3f}{traj.final_error():>11.1e}"
              f"{float(np.max(np.abs(traj.x[:, 0]))):>8.2f}{float(np.median(times)):>9.3f}"
              f"{float(np.max(times)):>8.2f}{fb:>10}{float(np.mean(traj.success)):>9.2f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one short horizon, few steps (smoke test)")
    add_models_option(ap)
    args = ap.parse_args(argv)
    models = selected_models(ap, args)
    print(f"casadi {ca.__version__}, shooting {shooting.__version__}, python {sys.version.split()[0]}")
    horizons, steps = ((10,), 5) if args.quick else ((20, 40), 100)
    for model in models:
        for horizon in horizons:
            run(model, horizon, steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
