"""A model with an algebraic state (an index-1 DAE): a pendulum on a cart pulled through a spring whose force is
an algebraic state, z = k (u - p_cart), integrated by the 2-stage Radau IIA method ("radau2") with exact sensitivities.

    python examples/dae.py [OUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import casadi as ca
import numpy as np

import shooting


def make_model() -> shooting.Model:
    """x = (p_cart, v), u = the spring's far end, z = the spring force: 0 = z - k (u - p_cart)."""
    x, u, z = ca.SX.sym("x", 2), ca.SX.sym("u", 1), ca.SX.sym("z", 1)
    k, mass, damping = 20.0, 1.0, 0.5
    xdot = ca.vertcat(x[1], (z[0] - damping * x[1]) / mass)
    alg = z[0] - k * (u[0] - x[0])
    return shooting.Model("spring_cart", x, u, xdot, z=z, alg=alg, state_names=["p", "v"], input_names=["u"],
                          algebraic_names=["force"], x0=[0.0, 0.0], z0=[0.0], u_min=[-1.0], u_max=[1.0], dt=0.1)


def main(out: Path) -> None:
    model = make_model()
    step = shooting.build_integrator(model, "radau2", steps=2)
    x, z = np.array(model.x0, dtype=float), np.array(model.z0, dtype=float)
    for k in range(30):
        x_next, A, B, z = (np.array(v) for v in step(x, [0.5], model.p0, 0.1 * k, 0.1, z))
        x = x_next.ravel()
    print(f"after 3 s: p = {x[0]:.4f} m, v = {x[1]:.4f} m/s, force {float(z.ravel()[0]):.4f} N")
    scenario = shooting.default_scenario(model).with_changes(sim_steps=30, x_ref=[0.5, 0.0])
    traj = shooting.simulate_closed_loop(shooting.RTIController(shooting.build_ocp(scenario, model)), scenario.x0,
                                         scenario.sim_steps, progress=False)
    print(f"RTI to p = 0.5: final state {np.round(traj.x[-1], 4)}")
    for path in traj.plot(out):
        print(f"wrote {path}")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="shooting_example_"))
    target.mkdir(parents=True, exist_ok=True)
    main(target)
