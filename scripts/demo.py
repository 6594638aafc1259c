#!/usr/bin/env python3
"""The whole path on the cart-pole: model, tableau, integrator with exact sensitivities, C, checks, MPC, MPC in C.

    python scripts/demo.py [--out DIR]

Each step prints what it did and what it verified, and what it skipped (with
the command that installs what is missing); the script exits 1 if a check
fails. The C, the closed loop's trajectory and its plots are written under
``codegen_out/demo/`` of the repository (or DIR).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import shooting
from shooting.codegen import export_controller, export_integrator, load_controller, qemu_mps2, toolchain
from shooting.controller.c_source import controller_spec, generate_controller
from shooting.controller.check import board_loop
from shooting.mpc import run_scenario

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "codegen_out" / "demo"
ARM_INSTALL = "sudo apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    out_dir = parser.parse_args().out
    ok = True

    # 1. A symbolic model (CasADi SX): acados' pendulum on a cart.
    model = shooting.load_model("cartpole")
    print(f"1. model    {model}: states {model.state_names}, input {model.input_names}, dt = {model.dt} s")

    # 2. A verified Butcher tableau.
    tab = shooting.get_tableau("rk4")
    print(f"2. tableau  {tab.name}: verified order {tab.verified_order()}, "
          f"A-stable {tab.is_a_stable()}, stages {tab.stages}")

    # 3. The shooting step with exact sensitivities, one casadi.Function.
    steps = 2
    F = shooting.build_integrator(model, tab, steps, "forward")
    print(f"3. step     {F.name()}: {F.name_in()} -> {F.name_out()}, "
          f"{F.n_instructions()} instructions, {steps} substeps")
    x = model.x0 + np.array([0.1, -0.2, 0.3, 0.5])
    u = np.array([5.0])
    out = F(x=x, u=u, p=model.p0, t0=0.0, dt=model.dt)
    x_next, A, B = (np.array(out[k]) for k in ("x_next", "A", "B"))

    # 4. A and B are the derivatives of the discrete map: central differences agree.
    step = shooting.build_integrator(model, tab, steps, "none")

    def phi(xx: np.ndarray, uu: np.ndarray) -> np.ndarray:
        return np.array(step(x=xx, u=uu, p=model.p0, t0=0.0, dt=model.dt)["x_next"]).ravel()

    eps = 1e-6
    A_fd = np.column_stack([(phi(x + eps * e, u) - phi(x - eps * e, u)) / (2 * eps) for e in np.eye(model.nx)])
    B_fd = np.column_stack([(phi(x, u + eps * e) - phi(x, u - eps * e)) / (2 * eps) for e in np.eye(model.nu)])
    fd_err = max(np.max(np.abs(A - A_fd)), np.max(np.abs(B - B_fd)))
    ok &= fd_err < 1e-7
    print(f"4. check    |[A B] - finite differences| = {fd_err:.1e}  ({'ok' if fd_err < 1e-7 else 'FAILED'})")

    # 5. The modes agree to rounding.
    worst = 0.0
    for mode in ("ad", "variational"):
        other = shooting.build_integrator(model, tab, steps, mode)(x=x, u=u, p=model.p0, t0=0.0, dt=model.dt)
        worst = max(worst, *(float(np.max(np.abs(np.array(other[k]) - np.array(out[k])))) for k in ("A", "B")))
    ok &= worst < 1e-12
    print(f"5. check    forward vs ad vs variational: {worst:.1e}  ({'ok' if worst < 1e-12 else 'FAILED'})")

    # 6. Accuracy against dopri5 with 256 substeps (error ~1e-16 here; the
    #    tests use scipy's DOP853 as an independent reference).
    fine = shooting.build_integrator(model, "dopri5", 256, "none")
    ref = np.array(fine(x=x, u=u, p=model.p0, t0=0.0, dt=model.dt)["x_next"]).ravel()
    err = float(np.max(np.abs(x_next.ravel() - ref)))
    print(f"6. accuracy |x_next - dopri5 x 256| = {err:.1e} (rk4, h = {model.dt / steps} s, 4th order)")
    ok &= err < 1e-5

    # 7. Plain C for a microcontroller: compiled with -Werror and run on test vectors,
    #    on the host and (when the toolchain is installed) on an emulated Cortex-M4.
    have_gcc = toolchain.have_host_compiler()
    have_m4 = qemu_mps2.have_cortex_m4_toolchain() and qemu_mps2.have_qemu()
    if not have_gcc:
        print("7. C        SKIPPED: gcc not found (install: sudo apt-get install gcc); the C is written unchecked")
    elif not have_m4:
        print(f"7. C        Cortex-M4 steps SKIPPED: arm-none-eabi-gcc, newlib or qemu-system-arm not found "
              f"(install: {ARM_INSTALL})")
    for real in ("double", "float"):
        report = export_integrator(F, out_dir / f"c_{real}", name="cartpole_step", real=real,
                                   target="cortex-m4" if have_m4 else "host", check=have_gcc, force=True)
        ok &= report.ok
        for k, line in enumerate(report.lines):
            print(f"{'7. C      ' if k == 0 and real == 'double' else '          '} {line}")
        for problem in report.problems:
            print(f"           FAILED: {problem}")
        if report.ok:
            print(f"           written: {report.files[0].parent}")

    # 8. MPC: the swing-up from hanging in closed loop, with full IPOPT solves
    #    (warm-started) and with real-time iterations built on A and B.
    scenario = shooting.default_scenario(model).with_changes(sim_steps=60)
    ocp = shooting.build_ocp(scenario, model)
    sol = ocp.solve(model.x0)
    print(f"8. OCP      N = {ocp.horizon}, dt = {ocp.dt}: {sol.status}, {sol.iterations} iterations, "
          f"{sol.solve_time * 1e3:.1f} ms, cost {sol.cost:.1f}")
    ok &= sol.success
    for label, rti in (("IPOPT MPC", False), ("RTI", True)):
        run = run_scenario(scenario, out_dir / ("mpc_rti" if rti else "mpc_ipopt"), model=model, rti=rti, force=True)
        traj = run.trajectory
        upright = run.ok and traj is not None and abs(traj.x[-1, 1]) < 0.05 and \
            np.max(np.abs(traj.x[:, 0])) <= 2.0 + 1e-6
        ok &= upright
        if traj is not None:
            print(f"   {label:<10} after {traj.t[-1]:.1f} s: |x| = {traj.final_error():.1e}, "
                  f"max |p| = {np.max(np.abs(traj.x[:, 0])):.2f} m, median step "
                  f"{np.median(traj.solve_time[1:]) * 1e3:.2f} ms  ({'upright' if upright else 'FAILED'})")
        print(f"              trajectory and plots: {run.out_dir}")

    # 9. The controller itself as C: RTI with A and B, condensing, a dual active-set QP,
    #    static memory. In the loop from Python against the plant, then on the emulated board.
    if not have_gcc:
        print("9. MPC in C SKIPPED: gcc not found (install: sudo apt-get install gcc)")
    else:
        soft = shooting.MultipleShootingOCP.from_problem(model, scenario.problem.with_changes(soft_x_bounds=True))
        for real in ("double", "float"):
            target = "cortex-m4" if have_m4 and real == "float" else "host"
            report = export_controller(soft, out_dir / f"mpc_c_{real}", real=real, target=target, check=True,
                                       force=True)
            ok &= report.ok
            for k, line in enumerate(report.lines):
                print(f"{'9. MPC in C' if k == 0 and real == 'double' else '          '} {line}")
            for problem in report.problems:
                print(f"           FAILED: {problem}")
        if (out_dir / "mpc_c_double" / "manifest.json").exists():
            traj = shooting.simulate_closed_loop(load_controller(out_dir / "mpc_c_double"), model.x0, 60,
                                                 progress=False)
            upright = abs(traj.x[-1, 1]) < 0.05
            ok &= upright
            print(f"   C in the loop from Python: after {traj.t[-1]:.1f} s |theta| = {abs(traj.x[-1, 1]):.1e} "
                  f"({'upright' if upright else 'FAILED'}), median RTI sample "
                  f"{np.median(traj.solve_time[1:]) * 1e6:.1f} us")
            print(f"              controller C: {out_dir / 'mpc_c_double'}, {out_dir / 'mpc_c_float'}")
        if have_m4:
            spec = controller_spec(soft)
            board = board_loop(generate_controller(spec, "cartpole", real="float"), spec, model.x0, 60)
            upright = abs(board.x[-1, 1]) < 0.05 and all(st == "ok" for st in board.status)
            ok &= upright
            total, cycles = board.sample_instructions, board.sample_cycles
            assert total is not None and cycles is not None
            print(f"   on the emulated Cortex-M4 (float, controller and plant on the board): after 60 samples "
                  f"|theta| = {abs(board.x[-1, 1]):.1e} ({'upright' if upright else 'FAILED'}), "
                  f"{np.median(total):.0f} instructions = {np.median(cycles):.0f} cycles per sample (median; "
                  f"worst after the first {np.max(cycles[1:]):.0f}) = {np.median(cycles) / 168e3:.2f} ms at 168 MHz "
                  f"(the Cortex-M4 cycle model)")
        else:
            print(f"   Cortex-M4 closed loop SKIPPED (install: {ARM_INSTALL})")

    print("demo", "passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
