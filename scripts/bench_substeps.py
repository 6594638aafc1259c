#!/usr/bin/env python3
"""Benchmark: what substeps cost to build, in time and peak memory, as their number grows.

A doubled step is one call node in the OCP's NLP and the RTI's QP data (O(log
N) graph), so building them must not grow with the substeps; running them
(IPOPT iterating over N x steps RK stages) grows with the arithmetic. Each row
is a fresh child process (its own peak RSS) that builds the model's default
scenario's OCP (NLP and derivatives), the RTI's stage-wise QP builder and the
controller's C at `steps` substeps, then solves the OCP once at a horizon of 4.

    python scripts/bench_substeps.py                      # cart-pole, 4 .. 16384 substeps
    python scripts/bench_substeps.py --quick              # 1 and 2 (used by the tests: that the script runs)
    python scripts/bench_substeps.py --models all --quick # every built-in model
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import NAME_WIDTH, add_models_option, selected_models  # noqa: E402

_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    import shooting
    from shooting.controller.c_source import controller_spec, generate_controller
    spec, steps = sys.argv[1], int(sys.argv[2])
    model = shooting.load_model(spec)
    scenario = shooting.default_scenario(model).with_changes(horizon=4, steps=steps)
    t = time.perf_counter()
    ocp = shooting.build_ocp(scenario, model)
    rti = shooting.RTIController(ocp, initialize_with_ipopt=False)
    build = time.perf_counter() - t
    t = time.perf_counter()
    sol = ocp.solve(scenario.x0)
    solve = time.perf_counter() - t
    t = time.perf_counter()
    code = "skipped: algebraic states" if model.nz else \\
        generate_controller(controller_spec(ocp, guess=(sol.x, sol.u)), "bench").files["bench_mpc.c"]
    c_time = time.perf_counter() - t
    print(json.dumps({"build": build, "solve": solve, "iterations": sol.iterations, "c_time": c_time,
                      "c_lines": None if model.nz else code.count(chr(10)),
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
""")


def measure(model: str, steps: int) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", _CHILD, model, str(steps)], capture_output=True, text=True,
                          timeout=3600)
    if proc.returncode:
        raise SystemExit(f"{model} at {steps} substeps failed: {proc.stderr.strip().splitlines()[-1]}")
    return json.loads(proc.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 and 2 substeps only")
    add_models_option(parser, default="cartpole", quick_default="cartpole")
    args = parser.parse_args()
    steps_list = [1, 2] if args.quick else [4, 64, 1024, 16384]
    print("Build (OCP with derivatives + RTI builder), one IPOPT solve at N = 4, controller C; child process each")
    print(f"{'model':<{NAME_WIDTH}} {'steps':>6} {'build s':>8} {'solve s':>8} {'iters':>5} {'C s':>6} "
          f"{'C lines':>8} {'peak MB':>8} {'MB/first':>8}")
    for model in selected_models(parser, args):
        base = None
        spec = model.name
        for steps in steps_list:
            r = measure(spec, steps)
            base = base or r["rss_mb"]
            lines = "-" if r["c_lines"] is None else f"{r['c_lines']:d}"
            print(f"{spec:<{NAME_WIDTH}} {steps:>6d} {r['build']:>8.2f} {r['solve']:>8.2f} {r['iterations']:>5d} "
                  f"{r['c_time']:>6.2f} {lines:>8} {r['rss_mb']:>8.0f} {r['rss_mb'] / base:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
