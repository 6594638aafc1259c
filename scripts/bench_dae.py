"""Algebraic states: measured orders of x and z per tableau, the DAE step against the hand-reduced ODE, C sizes.

Prints three tables:

1. orders of x and z (log2 of the error ratio, finest pair) on
   x1' = x2, x2' = z - x1, 0 = exp(z) + z - x1 - u against scipy's DOP853 on
   the reduced ODE at rtol 1e-13, and the order of the direct approach's
   extrapolated z for the non-stiffly-accurate Gauss tableaus;
2. per model with algebraic states linear in z (the double pendulum `dip`),
   the DAE against the same model with z eliminated by hand (a symbolic solve
   of g = 0 for z): CasADi instructions of one step and the time of a call,
   side by side;
3. with a Cortex-M4 toolchain and QEMU: per DAE model, flash, RAM and the
   float check of the exported DAE step per tableau.

A model without algebraic states (every other built-in), or whose algebraic
equations are nonlinear in z, gets a row saying why it is skipped.

    python scripts/bench_dae.py                        # every built-in model
    python scripts/bench_dae.py --quick                # dip, a few methods, few calls, no Cortex-M4
    python scripts/bench_dae.py --quick --models all   # the same over every built-in model (the tests)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import casadi as ca
import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

import shooting
from benchkit import NAME_WIDTH, Skip, add_models_option, model_rows, nominal_args, selected_models
from shooting.codegen import export_integrator, qemu_mps2
from shooting.integrate.dae import DAESubstepBuilder

U, X0, T = 0.3, np.array([1.0, 0.5]), 1.0


def toy() -> shooting.Model:
    x, z, u = ca.SX.sym("x", 2), ca.SX.sym("z"), ca.SX.sym("u")
    return shooting.Model("toy", x, u, ca.vertcat(x[1], z - x[0]), z=z, alg=ca.exp(z) + z - x[0] - u, z0=[0.0])


def G(a: float) -> float:
    return brentq(lambda z: np.exp(z) + z - a, -60.0, 60.0, xtol=1e-15, rtol=1e-15)


def orders(methods: list[str]) -> None:
    m = toy()
    ref = solve_ivp(lambda t, y: [y[1], G(y[0] + U) - y[0]], (0.0, T), X0, method="DOP853", rtol=1e-13,
                    atol=1e-14).y[:, -1]
    z_ref = G(ref[0] + U)
    print("1. Orders on x1' = x2, x2' = z - x1, 0 = exp(z) + z - x1 - u (reference: scipy DOP853, rtol 1e-13)")
    print(f"{'method':<18} {'classical':>9} {'x order':>8} {'z order':>8} {'x error':>10} {'direct z':>9}")
    for name in methods:
        tab = shooting.get_tableau(name)
        Ns = [4, 8, 16, 32] if tab.order <= 4 else [1, 2, 4] if tab.order >= 6 else [2, 4, 8]
        errs = []
        for N in Ns:
            r = shooting.build_integrator(m, name, N, "none")(x=X0, u=U, p=[], t0=0.0, dt=T, z0=0.0)
            errs.append((np.abs(np.array(r["x_next"]).ravel() - ref).max(), abs(float(r["z"]) - z_ref)))
        e = np.array(errs)
        ox, oz = np.log2(e[-2] / e[-1])
        direct = direct_order(m, tab, ref, z_ref) if not tab.explicit else float("nan")
        dz = "" if np.isnan(direct) else f"{direct:9.2f}"
        print(f"{name:<18} {tab.order:>9} {ox:8.2f} {oz:8.2f} {e[-1, 0]:10.1e} {dz:>9}")
    print("direct z: order of z_{n+1} = (1 - b'A^-1 1) z_n + b'A^-1 Z without the projection onto g = 0\n")


def direct_order(m: shooting.Model, tab: shooting.ButcherTableau, ref: np.ndarray, z_ref: float) -> float:
    A, b, c = (np.array(v, dtype=float) for v in (tab.A, tab.b, tab.c))
    builder = DAESubstepBuilder(m.f, m.g, A, b, c, None, False, "none", 6)
    xs, zs, us, hs = ca.SX.sym("x", 2), ca.SX.sym("z"), ca.SX.sym("u"), ca.SX.sym("h")
    K, Z = builder.stage_values(xs, us, ca.SX(0, 1), ca.SX(0), hs, zs)
    w = np.linalg.solve(A.T, b)
    step = ca.Function("direct", [xs, zs, us, hs], [xs + hs * sum(bi * k for bi, k in zip(b, K, strict=True)),
                                                    (1 - w.sum()) * zs + sum(wi * Zi for wi, Zi in
                                                                             zip(w, Z, strict=True))])
    errs = []
    for N in (16, 32):
        xv, zv = X0.copy(), G(X0[0] + U)
        for _ in range(N):
            xn, zn = step(xv, zv, U, T / N)
            xv, zv = np.array(xn).ravel(), float(zn)
        errs.append(abs(zv - z_ref))
    return float(np.log2(errs[0] / errs[1]))


def reduced(m: shooting.Model) -> shooting.Model:
    """`m` with z eliminated by hand: z = -g_z^-1 g(x, 0, u) substituted into f (algebraic equations linear in z).

    Raises `Skip` for a model without algebraic states or with algebraic equations nonlinear in z.
    """
    if not m.nz:
        raise Skip("an ODE (no algebraic states): nothing to compare")
    g_z = ca.jacobian(m.alg, m.z)
    if ca.depends_on(g_z, m.z):
        raise Skip("its algebraic equations are nonlinear in z: no closed-form reduction to compare with")
    z = ca.solve(g_z, -ca.substitute(m.alg, m.z, ca.DM.zeros(m.nz)))
    return shooting.Model(f"{m.name}_reduced", m.x, m.u, ca.substitute(m.xdot, m.z, z), m.p if m.np else None,
                          m.t if m.time_varying else None, p0=m.p0 if m.np else None, dt=m.dt)


def against_reduced_rows(m: shooting.Model, methods: list[str], calls: int) -> None:
    red = reduced(m)
    x, u, p, t0, dt, z0 = nominal_args(m)
    u = np.clip(u + 1.0, m.u_min, m.u_max)  # a nonzero input (dip: u0 = 0)
    for name in methods:
        F, Fr = shooting.build_integrator(m, name, 1), shooting.build_integrator(red, name, 1)
        times = []
        for fn, args in ((F, [x, u, p, t0, dt, z0]), (Fr, [x, u, p, t0, dt])):
            fn(*args)
            t = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            times.append((time.perf_counter() - t) / calls * 1e6)
        dx = float(np.abs(np.array(F(x, u, p, t0, dt, z0)[0]) - np.array(Fr(x, u, p, t0, dt)[0])).max())
        ni, nr = F.n_instructions(), Fr.n_instructions()
        print(f"{m.name:<{NAME_WIDTH}}{name:<16} {ni:>10} {nr:>8} {ni / nr:6.2f} {times[0]:12.1f} {times[1]:11.1f} "
              f"{dx:9.1e}", flush=True)


def against_reduced(models: list[shooting.Model], methods: list[str], calls: int) -> None:
    print("2. DAE vs the same model with z eliminated by hand (one step, forward A and B)")
    print(f"{'model':<{NAME_WIDTH}}{'method':<16} {'DAE instr':>10} {'reduced':>8} {'ratio':>6} {'DAE call us':>12} "
          f"{'reduced us':>11} {'|dx| max':>9}")
    for m in models:
        with model_rows(m.name):
            against_reduced_rows(m, methods, calls)
    print()


def size_rows(m: shooting.Model, methods: list[str], folder: Path) -> None:
    if not m.nz:
        raise Skip("an ODE (no algebraic states): its step is measured by bench_codegen.py")
    for name in methods:
        F = shooting.build_integrator(m, name, 1)
        rep = export_integrator(F, folder / f"{m.name}_{name}", real="float", target="cortex-m4", check=True,
                                vectors=4)
        worst = max(rep.errors.values()) if rep.errors else float("nan")
        print(f"{m.name:<{NAME_WIDTH}}{name:<16} {rep.flash or 0:>9} {rep.ram or 0:>7} {worst:17.1e} "
              f"{'ok' if rep.ok else 'FAIL':>6}", flush=True)


def sizes(models: list[shooting.Model], methods: list[str]) -> None:
    if not (qemu_mps2.have_cortex_m4_toolchain() and qemu_mps2.have_qemu()):
        print("3. Cortex-M4: skipped (arm-none-eabi-gcc, newlib or qemu-system-arm missing)")
        return
    print("3. DAE steps exported for the Cortex-M4 in float (one substep, checked on QEMU)")
    print(f"{'model':<{NAME_WIDTH}}{'method':<16} {'flash B':>9} {'RAM B':>7} {'worst rel. error':>17} {'check':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            with model_rows(m.name):
                size_rows(m, methods, Path(tmp))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few methods, few calls, no Cortex-M4 export")
    add_models_option(parser, quick_default="dip")
    args = parser.parse_args(argv)
    models = selected_models(parser, args)
    if args.quick:
        orders(["rk4", "gauss2", "radau2"])
        against_reduced(models, ["rk4", "radau2"], 20)
        return 0
    orders(["euler", "midpoint", "bs3", "rk4", "rk38", "dopri5", "implicit_euler", "implicit_midpoint", "gauss2",
            "gauss3", "radau2", "radau3"])
    against_reduced(models, ["rk4", "implicit_euler", "radau2", "radau3"], 2000)
    sizes(models, ["rk4", "implicit_euler", "radau2"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
