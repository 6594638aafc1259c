"""Peers' OCPs as their examples write them, through the exported C: acados' race car (tests/race_car.py; do-mpc's
batch reactor is in test_exact_hessian.py).

Independent truth: IPOPT at tol 1e-12 from the same guess (the state held, the inputs at their references).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shooting.controller import export_controller, load_controller

TIGHT = {"ipopt.tol": 1e-12, "ipopt.bound_relax_factor": 0.0, "ipopt.constr_viol_tol": 1e-12}


def test_race_car_cold_sqp_reaches_ipopts_optimum_and_its_exports_pass_their_checks(tmp_path: Path) -> None:
    # (issue 24: the race car's cold SQP ended in "QP iteration limit", could not declare convergence even at
    # IPOPT's optimum, and its double and float checks failed)
    from race_car import make_model, make_ocp

    model = make_model()
    ocp = make_ocp(model, solver_options=TIGHT)
    x0 = np.asarray(model.x0, dtype=float)
    truth = ocp.solve(x0)
    assert truth.success
    span = model.u_max - model.u_min
    for real in ("double", "float"):  # (each export runs its own check: host closed loop against the Python RTI)
        report = export_controller(ocp, tmp_path / real, name=f"race_{real}", real=real, x0=x0)
        assert report.ok, report.problems
    ctl = load_controller(tmp_path / "double", model=model)
    ctl.reset(x0)
    cold = ctl.solve(x0, max_iter=300)
    assert cold.status == 0, cold.message
    assert (np.abs(cold.u - truth.u) / span).max() <= 1e-4
    again = ctl.solve(x0, max_iter=300)  # started at its own solution: converged at once
    assert again.status == 0 and again.iterations <= 3, (again.status, again.iterations)
    assert (np.abs(again.u - truth.u) / span).max() <= 1e-4
