"""MPC with a nonlinear path constraint and its plots: the cart-pole swing-up with the cart's power limited,
|F v| <= 60 W (two soft rows), solved by IPOPT every sample.

    python examples/mpc_path_constraint.py [OUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import casadi as ca
import numpy as np

import shooting

POWER = 60.0


def power_limit(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
    """h(x, u) <= 0: the cart's power F v within +-POWER."""
    return ca.vertcat(u[0] * x[2] - POWER, -u[0] * x[2] - POWER)


def main(out: Path) -> None:
    model = shooting.load_model("cartpole")
    scenario = shooting.default_scenario(model).with_changes(path_constraints=power_limit,
                                                              soft_path_constraints=True, sim_steps=60)
    ocp = shooting.build_ocp(scenario, model)
    traj = shooting.simulate_closed_loop(shooting.MPCController(ocp), scenario.x0, scenario.sim_steps,
                                         progress=False)
    power = np.abs(traj.u[:, 0] * traj.x[:-1, 2])
    print(f"final state {np.round(traj.x[-1], 3)}, largest |F v| {power.max():.1f} W (limit {POWER:g} W)")
    for path in traj.plot(out):
        print(f"wrote {path}")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="shooting_example_"))
    target.mkdir(parents=True, exist_ok=True)
    main(target)
