#!/usr/bin/env python3
"""Benchmark: real-time iteration against full IPOPT MPC on the cart-pole swing-up, in one run.

Both controllers run the model's default scenario (swing-up from hanging,
acados' weights) in closed loop against the same accurate plant; the table
gives the closed-loop cost (the OCP's stage cost summed over the run), the
final error, the largest cart excursion and the time per step (RTI:
feedback + preparation, with feedback alone beside it).

    python scripts/bench_rti.py            # N = 20 and 40, 100 steps
    python scripts/bench_rti.py --quick    # N = 20, 40 steps (used by the tests)
"""

from __future__ import annotations

import argparse
import sys

import casadi as ca
import numpy as np

import shooting
from shooting import build_ocp, default_scenario


def run(horizon: int, steps: int) -> None:
    model = shooting.load_model("cartpole")
    scenario = default_scenario(model)
    scenario = scenario.with_changes(horizon=horizon)
    Q, R = scenario.problem.cost.Q, scenario.problem.cost.R
    rows = []
    for label, qp in (("IPOPT (full solve, warm)", None), ("RTI, qrqp", "qrqp"), ("RTI, osqp", "osqp")):
        ocp = build_ocp(scenario, model)
        controller = ocp if qp is None else shooting.RTIController(ocp, qp_solver=qp)
        traj = shooting.simulate_closed_loop(controller, scenario.x0, steps, progress=False)
        st = traj.stats(Q=Q, R=R)
        times = np.asarray(traj.solve_time[1:]) * 1e3  # the first step includes the initial cold solve
        feedback = (np.median(controller.feedback_times[1:]) * 1e3) if qp is not None else np.nan
        rows.append((label, st["closed_loop_cost"], traj.final_error(), float(np.max(np.abs(traj.x[:, 0]))),
                     float(np.median(times)), float(np.max(times)), feedback, float(np.mean(traj.success))))
    print(f"\nCart-pole swing-up, closed loop: N = {horizon}, dt = {scenario.problem.dt}, {steps} steps, "
          f"plant {scenario.plant_method} x {scenario.plant_steps}")
    print(f"{'controller':<26}{'cost':>12}{'ratio':>7}{'final err':>11}{'max|p|':>8}{'step ms':>9}"
          f"{'max ms':>8}{'feedback':>10}{'success':>9}")
    print("-" * 100)
    base = rows[0][1]
    for label, cost, err, pmax, med, mx, fb, ok in rows:
        fbs = "-" if np.isnan(fb) else f"{fb:.3f}"
        print(f"{label:<26}{cost:>12.1f}{cost / base:>7.3f}{err:>11.1e}{pmax:>8.2f}{med:>9.3f}{mx:>8.2f}"
              f"{fbs:>10}{ok:>9.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 20, 40 steps (smoke test)")
    args = ap.parse_args(argv)
    print(f"casadi {ca.__version__}, shooting {shooting.__version__}, python {sys.version.split()[0]}")
    for horizon in (20,) if args.quick else (20, 40):
        run(horizon, 40 if args.quick else 100)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
