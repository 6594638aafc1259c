#!/usr/bin/env python3
"""Benchmark: integrator Functions per built-in model, tableau and sensitivity mode.

Prints, for each built-in model x {euler, rk4, dopri5, gauss2} x sensitivity
mode: CasADi's instruction count, work-vector size, build time and the
microseconds per call from Python (a DAE is called with its z0). A second
table times the substep loop of the cart-pole in compiled C (gcc -O3),
unrolled against binary doubling, which is how
`shooting.integrate.integrator.UNROLL_MAX_STEPS` was chosen.

    python scripts/bench_integrators.py                        # full tables, every built-in model
    python scripts/bench_integrators.py --quick                # cart-pole, few repeats
    python scripts/bench_integrators.py --quick --models all   # every built-in model, few repeats (the tests)
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import casadi as ca
import numpy as np

import shooting
from benchkit import add_models_option, nominal_args, selected_models  # scripts/ is on sys.path

METHODS = ("euler", "rk4", "dopri5", "gauss2")
MODES = ("forward", "ad", "variational", "none")

TIMING_MAIN = r"""
#include <stdio.h>
#include <time.h>
#include "f.h"
int main(void) {
  static casadi_real x[NX], u[NU + 1], p[NP + 1], t0 = 0, dt = DT, xn[NX], A[NX * NX], B[NX * NU + 1];
  static casadi_real w[SZW + 1]; static casadi_int iw[SZIW + 1];
  static const casadi_real x_init[NX + 1] = X0, u_init[NU + 1] = U0, p_init[NP + 1] = P0;
  const casadi_real* arg[SZARG] = {x, u, p, &t0, &dt};
  casadi_real* res[SZRES] = {xn, A, B};
  struct timespec a, b; volatile double sink = 0; long i, n = REPS; int k;
  for (k = 0; k < NX; k++) x[k] = x_init[k];
  for (k = 0; k < NU; k++) u[k] = u_init[k];
  for (k = 0; k < NP; k++) p[k] = p_init[k];
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (i = 0; i < n; i++) { x[0] += 1e-12; F(arg, res, iw, w, 0); sink += xn[0]; }
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
  return 0;
}
"""


def python_call_us(F: ca.Function, args: list, repeats: int) -> float:
    """Best-of-5 mean microseconds per positional call from Python."""
    best = np.inf
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(repeats):
            F(*args)
        best = min(best, (time.perf_counter() - t) / repeats)
    return best * 1e6


def table_functions(models: list[shooting.Model], repeats: int) -> None:
    header = f"{'model':<13}{'method':<8}{'mode':<12}{'instr':>8}{'sz_w':>7}{'build ms':>10}{'us/call':>9}"
    print(header)
    print("-" * len(header))
    for model in models:
        name, args = model.name, nominal_args(model)
        for method in METHODS:
            for mode in MODES:
                t = time.perf_counter()
                F = shooting.build_integrator(model, method, 1, mode)
                build = (time.perf_counter() - t) * 1e3
                us = python_call_us(F, args, repeats)
                print(f"{name:<13}{method:<8}{mode:<12}{F.n_instructions():>8}{F.sz_w():>7}{build:>10.1f}{us:>9.1f}")


def _c_array(values: np.ndarray) -> str:
    """A C initialiser with one spare element, so that empty vectors stay valid C."""
    return "{" + "".join(f"{float(v)!r}, " for v in values) + "0}"


def c_ns_per_call(F: ca.Function, model: shooting.Model, workdir: Path, reps: int) -> float:
    """Generate F as C, compile it with a timing loop at -O3 and return ns per call."""
    cg = ca.CodeGenerator("f.c", {"with_header": True})
    cg.add(F)
    cg.generate(str(workdir) + "/")
    src = TIMING_MAIN
    for key, val in {
        "NX": model.nx, "NU": model.nu, "NP": model.np, "DT": model.dt, "REPS": reps,
        "SZW": F.sz_w(), "SZIW": F.sz_iw(), "SZARG": max(F.sz_arg(), 5), "SZRES": max(F.sz_res(), 3),
        "X0": _c_array(model.x0), "U0": _c_array(model.u0), "P0": _c_array(model.p0),
    }.items():
        src = src.replace(key, str(val))
    (workdir / "main.c").write_text(src.replace("F(arg", f"{F.name()}(arg"))
    subprocess.run(["gcc", "-O3", "-o", "bench", "main.c", "f.c", "-lm"], cwd=workdir, check=True)
    runs = [float(subprocess.run(["./bench"], cwd=workdir, capture_output=True, text=True, check=True).stdout)
            for _ in range(3)]
    return min(runs)


def table_substeps(model_name: str, steps_list: tuple[int, ...], reps: int) -> None:
    model = shooting.load_model(model_name)
    print(f"\nSubstep loop in C (gcc -O3), {model_name}, rk4, forward sensitivities: unrolled vs binary doubling")
    header = f"{'steps':>6}{'unrolled ns':>13}{'doubled ns':>12}{'ratio':>7}{'unrolled .c B':>15}{'doubled .c B':>14}"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for steps in steps_list:
            row = []
            for unroll in (True, False):
                if unroll and steps > 64:
                    row.append((np.nan, 0))
                    continue
                F = shooting.build_integrator(model, "rk4", steps, unroll=unroll, name="F")
                ns = c_ns_per_call(F, model, work, max(2000, reps // steps))
                row.append((ns, (work / "f.c").stat().st_size))
            (nu, su), (nd, sd) = row
            print(f"{steps:>6}{nu:>13.1f}{nd:>12.1f}{nd / nu:>7.2f}{su:>15}{sd:>14}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few repeats, short C loops (smoke test)")
    add_models_option(ap)
    args = ap.parse_args(argv)
    models = selected_models(ap, args)
    print(f"casadi {ca.__version__}, shooting {shooting.__version__}, python {sys.version.split()[0]}\n")
    table_functions(models, 20 if args.quick else 2000)
    if shutil.which("gcc"):
        table_substeps("cartpole", (1, 4) if args.quick else (1, 2, 3, 4, 6, 8, 16, 64, 200),
                       20000 if args.quick else 2_000_000)
    else:
        print("\n(gcc not found: C timing table skipped)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
