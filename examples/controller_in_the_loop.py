"""The MPC controller exported as C and run in the loop from Python: the pendulum's swing-up, the generated
controller (double, compiled for this machine) against the Python real-time iteration it was checked with.

    python examples/controller_in_the_loop.py [OUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import shooting
from shooting.codegen import export_controller, load_controller


def main(out: Path) -> None:
    model = shooting.load_model("pendulum")
    scenario = shooting.default_scenario(model)
    ocp = shooting.build_ocp(scenario.with_changes(soft_x_bounds=True), model)
    report = export_controller(ocp, out / "ctrl", check=True, force=True)
    print("\n".join(report.lines))
    if not report.ok:
        raise SystemExit(f"export failed: {report.problems}")
    c = shooting.simulate_closed_loop(load_controller(out / "ctrl"), scenario.x0, 50, progress=False)
    py = shooting.simulate_closed_loop(shooting.RTIController(ocp), scenario.x0, 50, progress=False)
    print(f"C and Python inputs differ by at most {np.abs(c.u - py.u).max():.1e}; C feedback median "
          f"{1e6 * np.median(c.solve_time):.1f} us")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="shooting_example_"))
    target.mkdir(parents=True, exist_ok=True)
    main(target)
