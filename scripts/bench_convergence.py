"""The convergence corpus: the exported controller's cold SQP (``reset`` + ``solve``) from far starts, beside IPOPT from
the same guess.

Every built-in model's default scenario, its state bounds hard (as declared) and soft, from the guess stored at
export (IPOPT's solution at the scenario's start: ``reset()``) and from the measured state held over the horizon
(``reset(x0)``), seeded far starts (angles anywhere, the other states spread about the scenario's start and kept
inside the bounds), the C on this machine in double and float; then the peer OCPs of tests/ (acados' race car on
a slalom and on two circuit-like tracks, do-mpc's batch reactor and double pendulum swing-up, TUM's single-track
vehicle). Per row: how many starts the SQP converged from (status 0), how many IPOPT solved from the same guess,
how many of ours reached a cost within 1e-6 (relative) of IPOPT's or below it, and the iterations (median and
largest of the converged ones) beside IPOPT's. Target: converged wherever IPOPT converged, and a median at most
twice IPOPT's.

    python scripts/bench_convergence.py [--starts 20] [--models all] [--reals double,float] [--no-peers]
    python scripts/bench_convergence.py --scaling

``--scaling``: variable scaling instead (issue 35, item 5): do-mpc's polymerisation reactor (tests/poly_reactor.py)
in kg and retyped in g (the same plant, masses in 1e7), unscaled (x_scale = u_scale = 1) and "auto": IPOPT's
iterations and cost, and the float export's check on the host (worst input error on the inputs' ranges, allowed,
verdict).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import shooting
from benchkit import add_models_option, selected_models
from shooting.codegen import export_controller, load_controller

ROOT = Path(__file__).resolve().parents[1]
MAX_ITER = 300  # the SQP's iteration limit per solve (IPOPT's: its own default, 3000)
SAME_COST = 1e-6  # "to IPOPT's cost": within this (relative) of IPOPT's, or below it


@dataclass
class Case:
    """One OCP of the corpus: its name, the OCP, the scenario's start, and how to draw far starts."""

    name: str
    ocp: shooting.MultipleShootingOCP
    x0: np.ndarray
    draw: Callable[[np.random.Generator], np.ndarray]


def far_start(model: shooting.Model, x0: np.ndarray, lower: np.ndarray, upper: np.ndarray
              ) -> Callable[[np.random.Generator], np.ndarray]:
    """A far start: angles (unit 'rad') anywhere in [-pi, pi], a quaternion (qw, qx, qy, qz) a random rotation,
    the other states x0 + 0.3 (1 + |x0|) N(0, 1); every state inside 0.9 times its finite bounds."""
    names, units = list(model.state_names), list(model.state_units)
    angle = np.array([u == "rad" for u in units])
    quat = [names.index(n) for n in ("qw", "qx", "qy", "qz")] if {"qw", "qx", "qy", "qz"} <= set(names) else []
    lo = np.where(np.isfinite(lower), 0.9 * lower, -np.inf)
    hi = np.where(np.isfinite(upper), 0.9 * upper, np.inf)

    def draw(rng: np.random.Generator) -> np.ndarray:
        x = x0 + 0.3 * (1 + np.abs(x0)) * rng.standard_normal(x0.size)
        x[angle] = rng.uniform(-np.pi, np.pi, int(angle.sum()))
        if quat:
            q = rng.standard_normal(4)
            x[quat] = q / np.linalg.norm(q)
        return np.clip(x, lo, hi)

    return draw


def builtin_cases(models: list[shooting.Model], soft: bool = True) -> list[Case]:
    cases = []
    for model in models:
        name = model.name
        scenario = shooting.default_scenario(model)
        base = shooting.build_ocp(scenario, model)
        bounded = bool(np.isfinite(base.x_min).any() or np.isfinite(base.x_max).any())
        x0 = np.asarray(scenario.x0, dtype=float)
        draw = far_start(model, x0, base.x_min, base.x_max)
        cases.append(Case(f"{name} hard" if bounded else name, base, x0, draw))
        if bounded and soft:
            relaxed = shooting.MultipleShootingOCP.from_problem(model,
                                                              scenario.problem.with_changes(soft_x_bounds=True))
            cases.append(Case(f"{name} soft", relaxed, x0, draw))
    return cases


def peer_cases() -> list[Case]:
    """The peer OCPs of tests/ as their tests write them, with far starts of their own."""
    sys.path.insert(0, str(ROOT / "tests"))
    import batch_reactor
    import dip_swing
    import race_car
    import single_track

    cases = []
    for track in race_car.TRACKS:
        model = race_car.make_model(track)
        ocp = race_car.make_ocp(model)
        x0 = np.asarray(model.x0, dtype=float)
        cases.append(Case(f"race car, {track}", ocp, x0, lambda rng, x0=x0: x0 + np.array(
            [rng.uniform(0, 1), rng.uniform(-0.1, 0.1), rng.uniform(-0.3, 0.3), rng.uniform(0, 1.0),
             rng.uniform(-0.5, 0.5), rng.uniform(-0.3, 0.3)])))
    model = batch_reactor.make_model()
    x0 = np.asarray(model.x0, dtype=float)
    cases.append(Case("batch reactor", batch_reactor.make_ocp(model), x0,
                      lambda rng, x0=x0: x0 * rng.uniform(0.5, 1.5, x0.size) + np.array([0, 0, 0.5, 0]) *
                      rng.uniform(0, 1)))
    model = single_track.make_model()
    x0 = np.asarray(model.x0, dtype=float)
    cases.append(Case("single-track vehicle", single_track.make_ocp(model), x0,
                      far_start(model, x0, np.full(x0.size, -np.inf), np.full(x0.size, np.inf))))
    ocp = dip_swing.make_ocp()
    cases.append(Case("double pendulum swing-up", ocp, dip_swing.X0.copy(),
                      lambda rng: dip_swing.X0 + np.concatenate([[0.0], rng.uniform(-0.5, 0.5, 2), np.zeros(3)])))
    return cases


def ipopt_from(ocp: shooting.MultipleShootingOCP, x0: np.ndarray, guess: tuple[np.ndarray, np.ndarray]
               ) -> tuple[bool, int, float]:
    sol = ocp.solve(x0, guess=guess)
    # (its cost by the same function as ours: IPOPT's objective holds its own soft rows' slacks, not the least ones
    # at its point, 2e-4 above on the race car)
    return bool(sol.success), int(sol.iterations), float(ocp.cost(sol.x, sol.u))


def run_case(case: Case, real: str, starts: list[np.ndarray], work: Path) -> list[str]:
    """The rows of one case in one precision: from the stored guess and held."""
    ocp = case.ocp
    folder = work / f"{case.name.replace(' ', '_').replace(',', '')}_{real}"
    report = export_controller(ocp, folder, real=real, force=True, x0=case.x0)
    if not report.ok:
        return [f"{case.name:<28} {real:<6} export failed: {'; '.join(report.problems)[:80]}"]
    ctl = load_controller(folder, model=ocp.model)
    base = ocp.solve(case.x0)  # (the export's guess: IPOPT's solution at the case's start)
    stored = (base.x, base.u)
    rows = []
    for guess in ("stored", "held"):
        ours, theirs, same = [], [], 0
        for x0 in starts:
            if guess == "stored":
                ctl.reset()
                primal = (np.vstack([x0, stored[0][1:]]), stored[1])
            else:
                ctl.reset(x0)
                primal = (np.tile(x0, (ocp.horizon + 1, 1)), np.clip(np.broadcast_to(ocp.u_ref, (ocp.horizon, ocp.nu)),
                                                                   ocp.u_min, ocp.u_max))
            res = ctl.solve(x0, max_iter=MAX_ITER)
            ok, its, cost = ipopt_from(ocp, x0, primal)
            ours.append(res.iterations if res.status == 0 else -1)
            theirs.append(its if ok else -1)
            if res.status == 0 and ok:
                mine = ocp.cost(res.x, res.u)
                same += mine <= cost + SAME_COST * (1 + abs(cost))
        conv = [i for i in ours if i >= 0]
        ip = [i for i in theirs if i >= 0]
        where = sum(o >= 0 for o, t in zip(ours, theirs, strict=True) if t >= 0)
        med, ipmed = (float(np.median(conv)) if conv else np.nan), (float(np.median(ip)) if ip else np.nan)
        verdict = "ok" if where == len(ip) and (not conv or med <= 2 * ipmed) else "MISS"
        rows.append(f"{case.name:<28} {real:<6} {guess:<6} {100 * len(conv) / len(starts):>5.0f}% "
                    f"{100 * len(ip) / len(starts):>5.0f}% {100 * same / max(len(ip), 1):>6.0f}% "
                    f"{med:>6.0f} {max(conv, default=0):>5} {ipmed:>6.0f} {max(ip, default=0):>5} {verdict:>5}")
    return rows


def scaling_table(steps: int = 20) -> None:
    """The reactor in kg and in g, unscaled and "auto": IPOPT and the float export's check."""
    sys.path.insert(0, str(ROOT / "tests"))
    from poly_reactor import make_model, make_ocp  # (a peer's model: tests/)

    print(f"Variable scaling: do-mpc's polymerisation reactor, N = 10, float C on the host, check of {steps} samples")
    print(f"{'units':<6} {'scaling':<8} {'x_scale max':>11} {'IPOPT it':>8} {'IPOPT cost':>12} {'C error':>8} "
          f"{'allowed':>8} {'check':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for grams in (False, True):
            model = make_model(grams=grams)
            for scaling in ("none", "auto"):
                options = {} if scaling == "auto" else {"x_scale": 1.0, "u_scale": 1.0}
                ocp = make_ocp(model, 10, grams=grams, **options)
                sol = ocp.solve(model.x0, u_prev=model.u0)
                report = export_controller(ocp, Path(tmp) / f"{grams}{scaling}", real="float", check=True,
                                           check_steps=steps, keep_failed=True)
                check = report.checks[0] if report.checks else None
                print(f"{'g' if grams else 'kg':<6} {scaling:<8} {ocp.x_scale.max():>11.3g} {sol.iterations:>8} "
                      f"{sol.cost:>12.6g} {report.errors.get('u', float('nan')):>8.1e} "
                      f"{check.allowed['u'] if check else float('nan'):>8.1e} {'ok' if report.ok else 'FAILS':>6}",
                      flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=20, help="far starts per case (default 20)")
    add_models_option(parser)
    parser.add_argument("--reals", default="double,float", help="double, float or both")
    parser.add_argument("--no-peers", action="store_true", help="the built-in models only")
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--quick", action="store_true",
                        help="one start per case, double, the bounds as declared, no peers (the tests' smoke run)")
    parser.add_argument("--scaling", action="store_true", help="the variable-scaling table instead")
    args = parser.parse_args(argv)
    if args.scaling:
        scaling_table()
        return 0
    models = selected_models(parser, args)
    if args.quick:
        args.starts, args.reals, args.no_peers = 1, "double", True
    cases = builtin_cases(models, soft=not args.quick) + ([] if args.no_peers else peer_cases())
    reals = args.reals.split(",")
    print(f"Convergence corpus: reset + solve ({MAX_ITER} SQP iterations at most) from {args.starts} far starts per "
          f"case (seed {args.seed}), the C on this machine; IPOPT from the same guess")
    print(f"{'case':<28} {'real':<6} {'guess':<6} {'conv':>6} {'IPOPT':>6} {'cost':>7} {'med':>6} {'max':>5} "
          f"{'IP med':>6} {'IPmax':>5} {'':>5}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            rng = np.random.default_rng(args.seed)
            starts = [case.draw(rng) for _ in range(args.starts)]
            for real in reals:
                for row in run_case(case, real, starts, Path(tmp)):
                    print(row, flush=True)
    print(f"conv: converged (status 0); IPOPT: solved from the same guess; cost: of those IPOPT solved, ours at its "
          f"cost or below (1e-6); med, max: our iterations; IP med, IPmax: IPOPT's "
          f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
