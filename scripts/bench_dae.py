"""Algebraic states: measured orders of x and z per tableau, the DAE step against the hand-reduced ODE, C sizes.

Prints three tables:

1. orders of x and z (log2 of the error ratio, finest pair) on
   x1' = x2, x2' = z - x1, 0 = exp(z) + z - x1 - u against scipy's DOP853 on
   the reduced ODE at rtol 1e-13, and the order of the direct approach's
   extrapolated z for the non-stiffly-accurate Gauss tableaus;
2. the double pendulum `dip` as a DAE against the same model with z eliminated
   by hand (a symbolic 3x3 solve): CasADi instructions of one step and the
   time of a call, side by side;
3. with a Cortex-M4 toolchain and QEMU: flash, RAM and the float check of the
   exported DAE step per tableau.

    python scripts/bench_dae.py [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import casadi as ca
import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

import shooting
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
    z = ca.solve(ca.jacobian(m.alg, m.z), -ca.substitute(m.alg, m.z, ca.DM.zeros(m.nz)))
    return shooting.Model("dip_reduced", m.x, m.u, ca.substitute(m.xdot, m.z, z), dt=m.dt)


def against_reduced(methods: list[str], calls: int) -> None:
    dip = shooting.load_model("dip")
    red = reduced(dip)
    print("2. dip as a DAE vs the same model with z eliminated by hand (one step, forward A and B)")
    print(f"{'method':<16} {'DAE instr':>10} {'reduced':>8} {'ratio':>6} {'DAE call us':>12} {'reduced us':>11} "
          f"{'|dx| max':>9}")
    x, u = dip.x0, 1.0
    for name in methods:
        F, Fr = shooting.build_integrator(dip, name, 1), shooting.build_integrator(red, name, 1)
        times = []
        for fn, args in ((F, [x, u, [], 0.0, 0.02, dip.z0]), (Fr, [x, u, [], 0.0, 0.02])):
            fn(*args)
            t = time.perf_counter()
            for _ in range(calls):
                out = fn(*args)
            times.append((time.perf_counter() - t) / calls * 1e6)
        dx = float(np.abs(np.array(F(x, u, [], 0.0, 0.02, dip.z0)[0]) - np.array(Fr(x, u, [], 0.0, 0.02)[0])).max())
        del out
        ni, nr = F.n_instructions(), Fr.n_instructions()
        print(f"{name:<16} {ni:>10} {nr:>8} {ni / nr:6.2f} {times[0]:12.1f} {times[1]:11.1f} {dx:9.1e}")
    print()


def sizes(methods: list[str]) -> None:
    if not (qemu_mps2.have_cortex_m4_toolchain() and qemu_mps2.have_qemu()):
        print("3. Cortex-M4: skipped (arm-none-eabi-gcc, newlib or qemu-system-arm missing)")
        return
    dip = shooting.load_model("dip")
    print("3. dip's DAE step exported for the Cortex-M4 in float (one substep, checked on QEMU)")
    print(f"{'method':<16} {'flash B':>9} {'RAM B':>7} {'worst rel. error':>17} {'check':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in methods:
            F = shooting.build_integrator(dip, name, 1)
            rep = export_integrator(F, Path(tmp) / name, real="float", target="cortex-m4", check=True, vectors=4)
            worst = max(rep.errors.values()) if rep.errors else float("nan")
            print(f"{name:<16} {rep.flash or 0:>9} {rep.ram or 0:>7} {worst:17.1e} {'ok' if rep.ok else 'FAIL':>6}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few methods, few calls, no Cortex-M4 export")
    quick = parser.parse_args().quick
    if quick:
        orders(["rk4", "gauss2", "radau2"])
        against_reduced(["rk4", "radau2"], 20)
        return
    orders(["euler", "midpoint", "bs3", "rk4", "rk38", "dopri5", "implicit_euler", "implicit_midpoint", "gauss2",
            "gauss3", "radau2", "radau3"])
    against_reduced(["rk4", "implicit_euler", "radau2", "radau3"], 2000)
    sizes(["rk4", "implicit_euler", "radau2"])


if __name__ == "__main__":
    main()
