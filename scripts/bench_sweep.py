#!/usr/bin/env python3
"""Benchmark: sweeps on Dask, cases per second per controller and number of workers, and the overhead per case.

Per model (the cart-pole swing-up by default, 200 samples per case), each
controller (the Python RTI, IPOPT to convergence, the C controller) sweeps
cases with a small start-state spread in this process, on a local cluster of
one worker process and on one of two. The rate is the steady one: cases
finished per second between the first finished case and the last (the
cluster's start, the C export and each worker's first build are not in it).
Then the distribution's own cost: cases of about 50 ms (the C controller,
its samples chosen to take that long) in this process against one worker
process of a local cluster; the difference per case is the overhead
(scheduling, serialisation, the row's way back).

    python scripts/bench_sweep.py                        # the cart-pole, 200 samples per case
    python scripts/bench_sweep.py --quick                # 10 samples, 2 cases, in process, the cart-pole
    python scripts/bench_sweep.py --quick --models all   # every built-in model (the tests)
"""

from __future__ import annotations

import argparse
import sys
import time

import shooting
from benchkit import NAME_WIDTH, add_models_option, selected_models, skip_row  # scripts/ is on sys.path

CONTROLLERS = ("rti", "ipopt", "c")


class _Clock:
    """A progress callable that notes when each case finished."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, message: str) -> None:
        self.times.append(time.perf_counter())

    def rate(self) -> float:
        """Cases per second between the first and the last finished case."""
        if len(self.times) < 2:
            return float("nan")
        return (len(self.times) - 1) / (self.times[-1] - self.times[0])


def _rate(scenario: shooting.Scenario, model: shooting.Model, controller: str, cases: int,
          where: dict[str, object]) -> float:
    clock = _Clock()
    shooting.sweep(scenario, model=model, controller=controller, cases=cases, x0_spread=0.02, seed=1,
                   progress=clock, **where)  # type: ignore[arg-type]
    return clock.rate()


def run_model(model: shooting.Model, steps: int, cases: dict[str, int], address: str | None) -> None:
    scenario = shooting.default_scenario(model).with_changes(sim_steps=steps)
    places: list[tuple[str, dict[str, object]]] = [("in process", {"workers": 1})]
    if address is not None:
        places += [("1 worker", {"scheduler": address}), ("2 workers", {"workers": 2})]
    print(f"\n{model.name}: {steps} samples per case (dt = {scenario.problem.dt:g}, N = {scenario.problem.horizon}), "
          f"x0 spread 0.02; steady cases per second")
    print(f"{'model':<{NAME_WIDTH}}{'controller':<11}" + "".join(f"{p:>13}" for p, _ in places)
          + (f"{'2w / 1w':>9}" if address else "") + f"{'ms per case':>13}")
    rates = {}
    for controller in (c for c in CONTROLLERS if c in cases):
        try:
            row = [_rate(scenario, model, controller, cases[controller], where) for _, where in places]
        except ValueError as err:  # a controller the model's problem does not fit (the C and a DAE)
            print(skip_row(model.name, f"{controller}: {err}"), flush=True)
            continue
        rates[controller] = row[0]
        scaling = f"{row[2] / row[1]:>9.2f}" if address else ""
        print(f"{model.name:<{NAME_WIDTH}}{controller:<11}" + "".join(f"{r:>13.3g}" for r in row) + scaling
              + f"{1e3 / row[0]:>13.1f}", flush=True)
    if "c" in rates and "rti" in rates:
        print(f"{model.name:<{NAME_WIDTH}}C controller per case: {rates['c'] / rates['rti']:.1f}x the Python RTI's "
              f"rate (in process)")


def overhead(model: shooting.Model, address: str, cases: int, target: float = 0.05) -> None:
    """The distribution's cost per case for cases of about `target` seconds (the C controller)."""
    base = shooting.default_scenario(model)
    probe = _rate(base.with_changes(sim_steps=100), model, "c", 6, {"workers": 1})
    steps = max(10, int(round(100 * target * probe)))
    scenario = base.with_changes(sim_steps=steps)
    serial = _rate(scenario, model, "c", cases, {"workers": 1})
    remote = _rate(scenario, model, "c", cases, {"scheduler": address})
    case, extra = 1 / serial, 1 / remote - 1 / serial
    print(f"\n{model.name}: distribution overhead for cases of {case * 1e3:.0f} ms ({steps} samples, C controller, "
          f"{cases} cases)")
    print(f"{'model':<{NAME_WIDTH}}{'in process ms':>15}{'1 worker ms':>13}{'overhead ms':>13}{'overhead':>10}")
    print(f"{model.name:<{NAME_WIDTH}}{case * 1e3:>15.2f}{1e3 / remote:>13.2f}{extra * 1e3:>13.2f}"
          f"{100 * extra / case:>9.1f}%", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="10 samples, 2 cases, in process only, the C controller on the first model only")
    add_models_option(parser, default="cartpole")
    args = parser.parse_args(argv)
    models = selected_models(parser, args)
    if args.quick:  # (the C controller's export on the first model only: the tests' smoke run)
        for i, model in enumerate(models):
            run_model(model, 10, {"rti": 2, "ipopt": 2, **({"c": 2} if i == 0 else {})}, None)
        return 0
    from shooting.sweeps.cluster import local_cluster

    # One worker process of the sweeps' own local cluster, given by address (workers=1 runs in this process).
    with local_cluster(1) as cluster:
        for model in models:
            run_model(model, 200, {"rti": 10, "ipopt": 6, "c": 120}, cluster.scheduler_address)
        overhead(models[0], cluster.scheduler_address, 160)
    return 0


if __name__ == "__main__":  # (the local cluster's worker processes import this script)
    sys.exit(main())
