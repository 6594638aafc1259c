"""The exported controller on every built-in model and at every horizon, in single precision.

Independent truth: the check inside `shooting-codegen controller --check`
compares the C, on the host and on the emulated Cortex-M4, with the double
Python RTI (its exact stage-wise QP) at a tolerance derived from float
rounding and the first QP's conditioning; the closed loop here is the C
against the accurate plant (dopri5), judged by the physics (the pole upright,
the cart home). Memory is read from the cross-compiled object (`size`, the
stack's -fstack-usage): it must grow linearly with the horizon.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shooting
from shooting.codegen import export_controller, load_controller
from support import needs_gcc, needs_m4


@needs_m4
@pytest.mark.parametrize("name", shooting.loading.model_names())
def test_every_built_in_model_passes_the_float_check_on_the_board(name: str, tmp_path: Path) -> None:
    """The command of the issue, for every built-in model with its default scenario (the DAE included)."""
    proc = subprocess.run([sys.executable, "-m", "shooting.cli", "controller", "--model", name, "--real", "float",
                           "--target", "cortex-m4", "--check", "-q", "--out", str(tmp_path / "c")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert manifest["check_cortex_m4"]["passed"] and manifest["check_cortex_m4"]["instructions_per_sample_median"] > 0


def _swing_up(horizon: int) -> shooting.MultipleShootingOCP:
    model = shooting.load_model("cartpole")
    problem = shooting.default_scenario(model).problem.with_changes(horizon=horizon, soft_x_bounds=True)
    return shooting.MultipleShootingOCP.from_problem(model, problem)


@needs_gcc
@pytest.mark.parametrize("horizon", [30, 50, 100, 200])
def test_float_swing_up_passes_its_check_and_reaches_upright_at_every_horizon(horizon: int, tmp_path: Path) -> None:
    ocp = _swing_up(horizon)
    report = export_controller(ocp, tmp_path / "c", real="float", check=True, progress=False)
    assert report.ok, report.problems
    controller = load_controller(tmp_path / "c")
    traj = shooting.simulate_closed_loop(controller, ocp.model.x0, 100, progress=False)
    assert all(traj.success)
    # upright (theta = 0) and the cart back near the origin after 5 s, from hanging (theta = pi)
    assert abs(traj.x[-1, 1]) < 0.02 and abs(traj.x[-1, 0]) < 0.05, traj.x[-1]


@needs_m4
@pytest.mark.parametrize("hessian", ["gauss-newton", "auto"])
def test_memory_is_linear_in_the_horizon(tmp_path: Path, hessian: str) -> None:
    """Cart-pole float on the Cortex-M4: RAM(200) at most 4.5 RAM(50) (quadratic growth, as the condensed
    QP's, gives 16 RAM(50)), the same bytes per stage from 50 to 100 as from 100 to 200, and at most 64 KiB
    (memory struct and worst stack) with the default Hessian and Gauss-Newton's (the same in float: an exact SQP
    would keep each stage's Hessian blocks, 440 bytes a stage against 336, 88 KiB at N = 200)."""
    sizes = {}
    for horizon in (50, 100, 200):
        report = export_controller(_swing_up(horizon), tmp_path / str(horizon), real="float", target="cortex-m4",
                                   progress=False, hessian=hessian)
        assert report.ok and report.ram is not None and report.flash is not None
        sizes[horizon] = (report.ram, report.flash)
    ram = {n: r for n, (r, _) in sizes.items()}
    assert ram[200] <= 4.5 * ram[50], sizes
    assert ram[200] <= 64 * 1024, sizes
    # linear: equal increments per stage between 50 -> 100 and 100 -> 200 (up to alignment)
    per_stage = [(ram[100] - ram[50]) / 50, (ram[200] - ram[100]) / 100]
    assert np.isclose(per_stage[0], per_stage[1], rtol=0.05), per_stage


def _everything() -> shooting.MultipleShootingOCP:
    """The cart-pole swing-up with every problem class of the controller at once: a least-squares output cost
    (the pole tip's height), a soft power limit |F v| <= 150 W (active while swinging up), the rate penalty,
    soft state bounds, a reference that changes along the horizon, and a model parameter."""
    import casadi as ca

    model = shooting.load_model("cartpole")
    tip = shooting.least_squares(lambda x, u, p: ca.vertcat(ca.cos(x[1]) - 1.0), [5.0])

    def power(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
        return ca.vertcat(u[0] * x[2] - 150.0, -u[0] * x[2] - 150.0)

    x_ref = np.zeros((21, model.nx))
    x_ref[:, 0] = np.linspace(0.0, 0.2, 21)  # the cart's target moves along the horizon
    problem = shooting.default_scenario(model).problem.with_changes(
        soft_x_bounds=True, stage_cost=tip, path_constraints=power, soft_path_constraints=True, R_delta=[1e-3],
        x_ref=x_ref)
    return shooting.MultipleShootingOCP.from_problem(model, problem)


@needs_m4
@pytest.mark.parametrize("real", ["double", "float"])
def test_every_problem_class_at_once_passes_the_check_on_the_board(real: str, tmp_path: Path) -> None:
    """The check compares the C (host, and in float the board) with the double Python RTI over 40 closed-loop
    samples, and its first prediction with IPOPT's (tol 1e-12). (Double on the emulated board: its cold start, the
    exact SQP in software double, is 1.1e9 instructions, 3.5 minutes of QEMU; the board's double is checked on the
    cart-pole in tests/test_controller.py.)"""
    ocp = _everything()
    report = export_controller(ocp, tmp_path / "c", real=real, target="cortex-m4" if real == "float" else "host",
                               check=True, check_steps=40, progress=False)
    assert report.ok, report.problems
    controller = load_controller(tmp_path / "c")
    traj = shooting.simulate_closed_loop(controller, ocp.model.x0, 80, progress=False)
    assert all(traj.success)
    # the power limit is soft: violated by at most what the penalty's L1 weight lets through (measured 0)
    assert np.max(np.abs(traj.u[:, 0] * traj.x[:-1, 2])) <= 150.0 * (1 + 1e-3) + 1.0
