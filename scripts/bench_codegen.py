#!/usr/bin/env python3
"""Benchmark: generated C steps against CasADi's own code generation, in one run.

Table 1, per model (every built-in one by default; a DAE's step takes its z0
and returns z) x {euler, rk4, dopri5, gauss2} x {double, float}: ns per call
of NAME_step from a C timing loop (gcc -O3), gcc compile time, Cortex-M4
flash/RAM of the object, and the same Function called from Python.

Table 3: generated C size, compile time and speed against the number of
substeps.

Table 2, the cart-pole RK4 step with A and B (1 substep), side by side with
the same flags: ours; the plain CasADi recipe (an SX RK4 step with
`jacobian`, exported by CasADi); CasADi's `integrator('rk')` with its
jacobian, exported by CasADi. Ratios are to ours. Cortex-M4 float objects:
ours against CasADi's own float export of the same step.

    python scripts/bench_codegen.py                        # full tables, every built-in model
    python scripts/bench_codegen.py --quick                # cart-pole, rk4 only, short loops
    python scripts/bench_codegen.py --quick --models all   # every built-in model, rk4, short loops (the tests)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import casadi as ca

import shooting
from bench_integrators import python_call_us  # scripts/ is on sys.path when run as a script
from benchkit import NAME_WIDTH, add_models_option, nominal_args, nominal_dt, selected_models
from shooting.codegen import generate_c, qemu_mps2, toolchain

METHODS = ("euler", "rk4", "dopri5", "gauss2")
QUICK_METHODS = ("rk4",)


def _array(values) -> str:
    return "{" + "".join(f"{float(v)!r}, " for v in values) + "0}"


def _timing_main(header: str, call: str, decls: str, reps: int) -> str:
    return f"""#include <stdio.h>
#include <time.h>
#include "{header}"
{decls}
int main(void) {{
  struct timespec a, b; long i, n = {reps}; volatile double sink = 0;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (i = 0; i < n; i++) {{ x[0] += 1e-12f; {call}; sink += (double)out0[0]; }}
  clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.2f\\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
  return 0;
}}
"""


def _run_timing(workdir: Path, sources: list[str], runs: int = 3) -> tuple[float, float]:
    """Compile with gcc -O3 (returns the compile seconds) and the best of `runs` timings."""
    t = time.perf_counter()
    proc = subprocess.run(["gcc", "-O3", "-o", "bench", *sources, "-lm"], cwd=workdir, capture_output=True, text=True)
    compile_s = time.perf_counter() - t
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    ns = min(float(subprocess.run(["./bench"], cwd=workdir, capture_output=True, text=True, check=True).stdout)
             for _ in range(runs))
    return ns, compile_s


def time_ours(F: ca.Function, model: shooting.Model, real: str, workdir: Path, reps: int) -> tuple[float, float, str]:
    export = generate_c(F, "s", real=real)
    for name, text in export.files.items():
        (workdir / name).write_text(text)
    R = "s_real"
    decls = (f"static {R} x[{model.nx + 1}] = {_array(model.x0)}; static {R} u[{model.nu + 1}] = {_array(model.u0)};\n"
             f"static {R} p[{model.np + 1}] = {_array(model.p0)}; static {R} out0[{model.nx}], "
             f"A[{model.nx * model.nx}], B[{model.nx * model.nu + 1}];\n"
             f"static {R} z0[{model.nz + 1}] = {_array(model.z0)}, z[{model.nz + 1}];")
    # A DAE's step takes the guess z0 of its algebraic state and returns z.
    call = (f"s_step(x, u, p, 0, ({R}){nominal_dt(model)!r}, {'z0, ' if model.nz else ''}out0, A, B"
            f"{', z' if model.nz else ''})")
    (workdir / "main.c").write_text(_timing_main("s.h", call, decls, reps))
    ns, compile_s = _run_timing(workdir, ["main.c", "s.c"])
    return ns, compile_s, export.files["s.c"]


def time_casadi(F: ca.Function, model: shooting.Model, workdir: Path, reps: int) -> tuple[float, float]:
    """CasADi's own code generation of F, timed through its calling convention."""
    cg = ca.CodeGenerator("c.c", {"with_header": True})
    cg.add(F)
    cg.generate(str(workdir) + "/")
    n_in, n_out = F.n_in(), F.n_out()
    decls = (f"static casadi_real x[{model.nx + 1}] = {_array(model.x0)}; static casadi_real u[{model.nu + 1}] = "
             f"{_array(model.u0)};\nstatic casadi_real p[{model.np + 1}] = {_array(model.p0)}, t0 = 0, "
             f"dt = {model.dt!r};\nstatic casadi_real out0[{model.nx}], A[{model.nx * model.nx}], "
             f"B[{model.nx * model.nu + 1}];\nstatic casadi_real w[{F.sz_w() + 1}]; "
             f"static casadi_int iw[{F.sz_iw() + 1}];\nstatic const casadi_real* arg[{max(F.sz_arg(), n_in)}]; "
             f"static casadi_real* res[{max(F.sz_res(), n_out)}];")
    inputs = {"x": "x", "u": "u", "p": "p", "t0": "&t0", "dt": "&dt", "x0": "x", "T": "&dt"}
    outputs = {"x_next": "out0", "A": "A", "B": "B"}
    setup = "".join(f"arg[{i}] = {inputs[n]}; " for i, n in enumerate(F.name_in()))
    setup += "".join(f"res[{i}] = {outputs[n]}; " for i, n in enumerate(F.name_out()))
    call = f"{setup}{F.name()}(arg, res, iw, w, 0)"
    (workdir / "main.c").write_text(_timing_main("c.h", call, decls, reps))
    return _run_timing(workdir, ["main.c", "c.c"])


def python_us(F: ca.Function, model: shooting.Model, repeats: int) -> float:
    """Microseconds per positional call from Python at the model's nominal point."""
    return python_call_us(F, nominal_args(model), repeats)


def m4_size(source: Path, workdir: Path, call_graph=None) -> tuple[int, int] | None:
    if not qemu_mps2.have_cortex_m4_toolchain():
        return None
    res, size = toolchain.compile_cortex_m4(source, workdir / "m4.o", call_graph=call_graph)
    return (size.flash, size.ram) if res.ok and size else None


def plain_recipe(model: shooting.Model) -> ca.Function:
    """The plain CasADi recipe: an SX RK4 step and `jacobian`."""
    x, u, p, t0, dt = (ca.SX.sym(n, k) for n, k in (("x", model.nx), ("u", model.nu), ("p", model.np),
                                                       ("t0", 1), ("dt", 1)))

    def f(xx, tt):
        return model.f(xx, u, p, tt)

    k1 = f(x, t0)
    k2 = f(x + dt / 2 * k1, t0 + dt / 2)
    k3 = f(x + dt / 2 * k2, t0 + dt / 2)
    k4 = f(x + dt * k3, t0 + dt)
    xn = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return ca.Function("recipe", [x, u, p, t0, dt], [xn, ca.jacobian(xn, x), ca.jacobian(xn, u)],
                       ["x", "u", "p", "t0", "dt"], ["x_next", "A", "B"])


def casadi_integrator(model: shooting.Model) -> ca.Function:
    """CasADi's integrator('rk') (RK4, one interval) with its jacobian.

    CasADi cannot generate code for the RungeKutta object itself ("#error Code
    generation not supported for RungeKutta"); its option ``simplify`` makes it
    an MX Function that can be, and the wrapper is then expanded to SX (the
    faster of the two; the MX version keeps call overhead).
    """
    dae = {"x": model.x, "u": model.u, "p": model.p, "ode": model.xdot}
    if model.time_varying:
        dae["t"] = model.t
    intg = ca.integrator("I", "rk", dae, 0.0, model.dt, {"number_of_finite_elements": 1, "simplify": True})
    x, u, p = ca.MX.sym("x", model.nx), ca.MX.sym("u", model.nu), ca.MX.sym("p", model.np)
    xf = intg(x0=x, u=u, p=p)["xf"]
    return ca.Function("cintg", [x, u, p], [xf, ca.jacobian(xf, x), ca.jacobian(xf, u)],
                       ["x", "u", "p"], ["x_next", "A", "B"]).expand()


def table_steps(models: list[shooting.Model], methods: tuple[str, ...], reps: int, py_repeats: int) -> None:
    print(f"{'model':<{NAME_WIDTH}}{'method':<8}{'real':<7}{'ns/call':>10}{'gcc -O3 s':>10}{'M4 flash':>10}"
          f"{'M4 RAM':>8}{'py us':>8}")
    print("-" * 74)
    for model in models:
        name = model.name
        for method in methods:
            F = shooting.build_integrator(model, method)
            py = python_us(F, model, py_repeats)
            for real in ("double", "float"):
                with tempfile.TemporaryDirectory() as tmp:
                    work = Path(tmp)
                    ns, comp, _ = time_ours(F, model, real, work, max(200, reps // max(1, F.n_instructions() // 200)))
                    size = m4_size(work / "s.c", work, generate_c(F, "s", real=real).call_graph)
                flash, ram = size if size else ("-", "-")
                print(f"{name:<{NAME_WIDTH}}{method:<8}{real:<7}{ns:>10.1f}{comp:>10.2f}{flash:>10}{ram:>8}"
                      f"{py:>8.1f}", flush=True)


def table_versus_casadi(reps: int) -> None:
    model = shooting.load_model("cartpole")
    ours = shooting.build_integrator(model, "rk4", 1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ns, comp, _ = time_ours(ours, model, "double", work, reps)
        rows.append(("shooting NAME_step (rk4, forward)", ns, comp))
        ns, comp = time_casadi(plain_recipe(model), model, work, reps)
        rows.append(("CasADi SX RK4 + jacobian, CasADi codegen", ns, comp))
        ns, comp = time_casadi(casadi_integrator(model), model, work, reps)
        rows.append(("CasADi integrator('rk') + jacobian, expanded", ns, comp))
    print("\nCart-pole RK4 step with A and B, 1 substep, double, gcc -O3, same timing loop")
    print(f"{'implementation':<46}{'ns/call':>10}{'ratio':>8}{'gcc s':>8}")
    print("-" * 72)
    for label, ns, comp in rows:
        print(f"{label:<46}{ns:>10.1f}{ns / rows[0][1]:>8.2f}{comp:>8.2f}")
    if not qemu_mps2.have_cortex_m4_toolchain():
        print("(arm-none-eabi-gcc not found: Cortex-M4 sizes skipped)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        export = generate_c(ours, "s", real="float")
        (work / "s.c").write_text(export.files["s.c"])
        (work / "s.h").write_text(export.files["s.h"])
        mine = m4_size(work / "s.c", work, export.call_graph)
        cg = ca.CodeGenerator("c.c", {"with_header": True, "casadi_real": "float", "casadi_int": "int"})
        cg.add(plain_recipe(model))
        cg.generate(str(work) + "/")
        theirs = m4_size(work / "c.c", work)
        undefined = toolchain.undefined_symbols(work / "m4.o")
    print("\nCortex-M4 float object (text + data; -O2, -mcpu=cortex-m4 -mfpu=fpv4-sp-d16 -mfloat-abi=hard)")
    print(f"  shooting float export            flash {mine[0]:>6} B  RAM {mine[1]:>5} B")
    print(f"  CasADi float export (recipe)     flash {theirs[0]:>6} B  RAM {theirs[1]:>5} B   "
          f"ratio {theirs[0] / mine[0]:.2f}; its double symbols: "
          f"{', '.join(toolchain.double_precision_symbols(undefined)) or 'none'}")


def table_steps_growth(steps_list: tuple[int, ...]) -> None:
    """Generated C size and compile time against the number of substeps (cart-pole, rk4, double)."""
    model = shooting.load_model("cartpole")
    print("\nSubsteps: generated C and gcc -O3 compile time (cart-pole, rk4, forward, double)")
    print(f"{'steps':>6}{'.c bytes':>10}{'ratio':>7}{'gcc s':>8}{'ns/call':>10}{'ns/substep':>11}{'static B':>10}")
    print("-" * 62)
    base = None
    for steps in steps_list:
        F = shooting.build_integrator(model, "rk4", steps)
        with tempfile.TemporaryDirectory() as tmp:
            ns, comp, src = time_ours(F, model, "double", Path(tmp), max(200, 200_000 // steps))
        static = generate_c(F, "s").manifest["work"]["static_bytes"]
        base = base or len(src)
        print(f"{steps:>6}{len(src):>10}{len(src) / base:>7.2f}{comp:>8.2f}{ns:>10.1f}{ns / steps:>11.1f}{static:>10}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="rk4 only, short loops (smoke test)")
    add_models_option(ap)
    args = ap.parse_args(argv)
    models = selected_models(ap, args)
    if not toolchain.have_host_compiler():
        print("gcc not found: nothing to benchmark")
        return 0
    print(f"casadi {ca.__version__}, shooting {shooting.__version__}, python {sys.version.split()[0]}\n")
    table_steps(models, QUICK_METHODS if args.quick else METHODS, 20_000 if args.quick else 2_000_000,
                20 if args.quick else 2000)
    table_versus_casadi(20_000 if args.quick else 5_000_000)
    table_steps_growth((1, 200) if args.quick else (1, 2, 4, 8, 16, 64, 200))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
