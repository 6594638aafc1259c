"""``hessian="exact"`` in the RTI: the Lagrangian's curvature, and the projection that keeps each QP convex.

Independent truth: CasADi's Hessian of pi' F (F the plain step, no sensitivities) and of mu' h; IPOPT's optimum
(tol 1e-12) of the same OCP; IPOPT's closed loop for the pole-tip cost.
"""

from __future__ import annotations

from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.controller import export_controller, load_controller
from shooting.controller.check import verified_optimum
from shooting.mpc.curvature import curvature_functions
from support import needs_m4

L_POLE = 0.8


def _tip_ocp(horizon: int = 30, tip_weight: float = 6.0) -> shooting.MultipleShootingOCP:
    """The cart-pole keeping its pole tip over the origin: an indefinite cost (4 (l cos th - l)^2)."""
    m = shooting.load_model("cartpole")
    pole = L_POLE
    return shooting.MultipleShootingOCP(
        m, horizon, dt=0.05, Q=[0, 0, 1e-3, 1e-3], R=[1e-3], Q_terminal=[0, 0, 0, 0],
        stage_cost=lambda x, u, p: tip_weight * (x[0] + pole * ca.sin(x[1])) ** 2
        + 4 * (pole * ca.cos(x[1]) - pole) ** 2,
        terminal_cost=lambda x, p: 60 * (x[0] + pole * ca.sin(x[1])) ** 2, u_min=[-80], u_max=[80])


def _tip_error(traj: shooting.Trajectory) -> float:
    x = traj.x
    return float(np.sum(np.abs(x[:, 0] + L_POLE * np.sin(x[:, 1])) + np.abs(L_POLE * np.cos(x[:, 1]) - L_POLE)))


@pytest.mark.parametrize("model, method", [("cartpole", "rk4"), ("dip", "rk4"), ("vanderpol", "gauss2")])
def test_stage_curvature_is_casadis_hessian_of_the_lagrangian(model: str, method: str) -> None:
    m = shooting.load_model(model)
    problem = shooting.default_scenario(m).problem.with_changes(method=method, steps=2)
    ocp = shooting.MultipleShootingOCP.from_problem(m, problem)
    stage, _ = curvature_functions(ocp)
    rng = np.random.default_rng(3)
    x = np.asarray(m.x0, float) + 0.2 * rng.standard_normal(m.nx)
    u = np.asarray(m.u0, float) + 0.2 * rng.standard_normal(m.nu)
    pi = 10 * rng.standard_normal(m.nx)
    W = np.array(stage(x, u, m.p0, 0.4, pi, np.zeros(0)))
    plain = shooting.build_integrator(m, method, 2, "none", newton_iterations=12)
    xs, us = ca.SX.sym("x", m.nx), ca.SX.sym("u", m.nu)
    args = [xs, us, m.p0, 0.4, ocp.dt] + ([m.z0] if m.nz else [])
    value = ca.dot(ca.DM(pi), plain.call(args)[0])
    W_ref = np.array(ca.Function("W", [xs, us], [ca.hessian(value, ca.vertcat(xs, us))[0]])(x, u))
    assert np.abs(W - W_ref).max() <= 1e-9 * np.abs(W_ref).max()


def test_path_constraints_curvature_joins_the_stage_block() -> None:
    m = shooting.load_model("cartpole")

    def power(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
        return ca.vertcat(u[0] * x[2] * x[1] - 150.0, x[0] ** 2 * ca.sin(x[1]) - 1.0)

    ocp = shooting.MultipleShootingOCP.from_problem(m, shooting.default_scenario(m).problem.with_changes(
        path_constraints=power, soft_path_constraints=True))
    stage, _ = curvature_functions(ocp)
    x, u, mu = np.array([0.3, 0.7, -1.2, 0.4]), np.array([5.0]), np.array([0.8, 2.5])
    both = np.array(stage(x, u, m.p0, 0.0, np.zeros(4), mu))
    xs, us = ca.SX.sym("x", 4), ca.SX.sym("u", 1)
    ref = ca.Function("H", [xs, us], [ca.hessian(ca.dot(ca.DM(mu), power(xs, us, None)), ca.vertcat(xs, us))[0]])
    assert np.abs(both - np.array(ref(x, u))).max() <= 1e-13 * np.abs(both).max()


@pytest.mark.parametrize("qp_solver", ["riccati-ipm", "riccati-ipm-numpy"])
def test_exact_hessian_sqp_reaches_ipopts_optimum(qp_solver: str) -> None:
    # (a KKT point whatever the QP's Hessian; with the blocks projected where indefinite, as here, not in fewer
    # iterations than Gauss-Newton)
    ocp = _tip_ocp()
    x0 = np.array([0.6, 0.4, 0.0, 0.0])
    truth = verified_optimum(ocp, x0)
    assert truth is not None
    runs = {}
    for hessian in ("gauss-newton", "exact"):
        ctl = shooting.RTIController(ocp, hessian=hessian, qp_solver=qp_solver,  # type: ignore[arg-type]
                                     initialize_with_ipopt=False)
        runs[hessian] = ctl.solve(x0, max_iter=200)
        assert runs[hessian].status == 0
        assert np.abs(runs[hessian].u - truth).max() <= 1e-6 * 80


def test_pole_tip_rti_is_within_3_percent_of_ipopts_closed_loop() -> None:
    ocp = _tip_ocp()
    x0 = np.array([0.6, 0.4, 0.0, 0.0])
    ipopt = _tip_error(shooting.simulate_closed_loop(shooting.MPCController(ocp), x0, 60, progress=False))
    for hessian in ("exact", "gauss-newton"):
        rti = shooting.RTIController(ocp, hessian=hessian)  # type: ignore[arg-type]
        error = _tip_error(shooting.simulate_closed_loop(rti, x0, 60, progress=False))
        assert error <= 1.03 * ipopt, (hessian, error / ipopt)


@pytest.mark.parametrize("real", ["double", "float"])
def test_c_projection_of_an_indefinite_cost_equals_the_python_rti(real: str, tmp_path: Path) -> None:
    # The pole-tip cost's Hessian is indefinite at most samples: the C's Jacobi projection against LAPACK's.
    ocp = _tip_ocp(horizon=20, tip_weight=8.0)
    x0 = np.array([-0.4, -0.5, 0.3, 0.0])
    report = export_controller(ocp, tmp_path / real, real=real, check=True, x0=x0)  # type: ignore[arg-type]
    assert report.ok, report.problems
    if real == "double":
        c = shooting.simulate_closed_loop(load_controller(tmp_path / real), x0, 30, progress=False)
        py = shooting.simulate_closed_loop(shooting.RTIController(ocp), x0, 30, progress=False)
        assert np.abs(c.u - py.u).max() <= 1e-9 * 80


def test_exact_hessian_needs_a_stage_wise_solver() -> None:
    with pytest.raises(ValueError, match="riccati-ipm"):
        shooting.RTIController(_tip_ocp(10), hessian="exact", qp_solver="qrqp")
    with pytest.raises(ValueError, match="gauss-newton"):
        shooting.RTIController(_tip_ocp(10), hessian="newton")  # type: ignore[arg-type]


def test_exact_hessian_keeps_newton_convergence_where_stage_blocks_are_indefinite() -> None:
    # two_link_arm from IPOPT's optimum: its Lagrangian's stage blocks are indefinite at most stages. Projecting
    # them converged linearly at rate 0.98 (no convergence in 100 iterations); the cost's block where the sum is
    # not positive definite converged as Gauss-Newton does (17, linearly); mirroring the active inputs instead of
    # stiffening them cycled next to the optimum. The Riccati pass (shooting.mpc.reduced_convexity) keeps the
    # curvature where the reduced Hessian is positive definite: Newton's convergence, 5 iterations.
    m = shooting.load_model("two_link_arm")
    scenario = shooting.default_scenario(m)
    ocp = shooting.build_ocp(scenario, m)
    truth = verified_optimum(ocp, scenario.x0)
    assert truth is not None
    runs = {h: shooting.RTIController(ocp, hessian=h).solve(scenario.x0, max_iter=100)  # type: ignore[arg-type]
            for h in ("gauss-newton", "exact")}
    assert runs["exact"].status == 0, runs["exact"].message
    assert runs["exact"].iterations <= 8 < runs["gauss-newton"].iterations
    assert np.abs(runs["exact"].u - truth).max() <= 1e-6 * 40


def _constrained_tip_ocp() -> shooting.MultipleShootingOCP:
    """The pole-tip OCP with soft nonlinear path constraints (the cart's power, and a curved keep-out region):
    the C's curvature terms pi' F and mu' h are exercised."""
    base = _tip_ocp(horizon=20, tip_weight=8.0)

    def power(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
        return ca.vertcat(u[0] * x[2] - 20.0, x[0] ** 2 * ca.sin(x[1]) - 0.02)

    problem = base.problem.with_changes(path_constraints=power, soft_path_constraints=True)
    return shooting.MultipleShootingOCP.from_problem(base.model, problem)


@pytest.mark.parametrize("case", ["pole tip", "constrained pole tip", "two_link_arm", "quadrotor"])
def test_c_exact_hessian_equals_the_python_rti(case: str, tmp_path: Path) -> None:
    # The exported controller with hessian="exact" against RTIController(hessian="exact") in the loop (double):
    # equal to rounding, and not Gauss-Newton's (the curvature is applied).
    if case == "pole tip":
        ocp, x0 = _tip_ocp(horizon=20, tip_weight=8.0), np.array([-0.4, -0.5, 0.3, 0.0])
    elif case == "constrained pole tip":
        ocp, x0 = _constrained_tip_ocp(), np.array([-0.4, -0.5, 0.3, 0.0])
    else:
        m = shooting.load_model(case)
        scenario = shooting.default_scenario(m)
        ocp, x0 = shooting.build_ocp(scenario, m), np.asarray(scenario.x0, dtype=float)
    report = export_controller(ocp, tmp_path / "c", check=True, x0=x0, hessian="exact")
    assert report.ok, report.problems
    assert report.manifest["qp"]["hessian"] == "exact"
    span = ocp.u_max - ocp.u_min
    c = shooting.simulate_closed_loop(load_controller(tmp_path / "c"), x0, 30, progress=False)
    py = shooting.simulate_closed_loop(shooting.RTIController(ocp, hessian="exact"), x0, 30, progress=False)
    gn = shooting.simulate_closed_loop(shooting.RTIController(ocp, hessian="gauss-newton"), x0, 30, progress=False)
    # C and Python differ by rounding, which the loop itself amplifies: on the constrained pole tip the keep-out
    # row's active set makes the feedback law steep, and 1e-13 at sample 21 became 5e-10 at 22 and 7e-7 at 29 (with
    # the exact Hessian's fallback to Gauss-Newton's QP at sample 14; 3e-10 without it). The bound is therefore
    # sample by sample the Python loop's own spread under rounding so far (three perturbations of x0 by a few
    # ulps; its largest up to that sample), ten times, and at least 1e-9 of an input's range: the early samples
    # are held to 1e-9, the constrained pole tip's last ones to about 1e-5 (its spread reached 1e-6).
    rng = np.random.default_rng(0)
    spread = np.zeros(len(py.u))
    for _ in range(3):
        x0p = x0 * (1 + 4e-16 * rng.choice([-1.0, 1.0], size=x0.shape)) + 1e-16 * rng.choice([-1.0, 1.0], size=x0.shape)
        pert = shooting.simulate_closed_loop(shooting.RTIController(ocp, hessian="exact"), x0p, 30, progress=False)
        spread = np.maximum(spread, np.maximum.accumulate((np.abs(pert.u - py.u) / span).max(axis=1)))
    assert ((np.abs(c.u - py.u) / span).max(axis=1) <= np.maximum(1e-9, 10 * spread)).all(), spread
    assert (np.abs(gn.u - py.u) / span).max() >= 1e-6


@needs_m4
def test_float_exact_hessian_controller_passes_its_board_check(tmp_path: Path) -> None:
    ocp, x0 = _tip_ocp(horizon=20, tip_weight=8.0), np.array([-0.4, -0.5, 0.3, 0.0])
    report = export_controller(ocp, tmp_path / "m4", real="float", target="cortex-m4", check=True, x0=x0,
                               hessian="exact")
    assert report.ok, report.problems
    assert report.manifest["check_cortex_m4"]["passed"]


def test_controller_cli_takes_the_hessian(tmp_path: Path) -> None:
    from shooting.cli import main
    assert main(["controller", "--model", "vanderpol", "--hessian", "exact", "--out", str(tmp_path / "v"),
                 "--quiet"]) == 0
    manifest = (tmp_path / "v" / "manifest.json").read_text()
    assert '"hessian": "exact"' in manifest
    assert main(["controller", "--model", "vanderpol", "--hessian", "newton", "--out", str(tmp_path / "w")]) == 2
    assert not (tmp_path / "w").exists()


def test_an_economic_cost_converges_with_the_exact_hessian(tmp_path: Path) -> None:
    # do-mpc's batch reactor (tests/batch_reactor.py): the cost -P is linear in the states, so its stage blocks are
    # singular and the Lagrangian's indefinite; keeping the cost's block there (as where it is definite) left the
    # states without curvature and the SQP's line search failed after 209 iterations (C and Python alike). The
    # projection of the Lagrangian's block there: IPOPT's optimum (tol 1e-12, from the same guess), C and Python.
    from batch_reactor import make_model, make_ocp

    model = make_model()
    ocp = make_ocp(model, {"ipopt.tol": 1e-12, "ipopt.bound_relax_factor": 0.0, "ipopt.constr_viol_tol": 1e-12})
    x0 = np.asarray(model.x0, dtype=float)
    truth = ocp.solve(x0)
    assert truth.success
    span = float(model.u_max[0] - model.u_min[0])
    py = shooting.RTIController(ocp, hessian="exact", initialize_with_ipopt=False).solve(x0, max_iter=100)
    assert py.status == 0, py.message
    assert np.abs(py.u - truth.u).max() <= 1e-6 * span
    assert export_controller(ocp, tmp_path / "c", name="batch", hessian="exact").ok
    ctl = load_controller(tmp_path / "c", model=model)
    ctl.reset(x0)
    c = ctl.solve(x0, max_iter=100)
    assert c.status == 0, c.message
    assert np.abs(c.u - truth.u).max() <= 1e-6 * span
    assert abs(c.iterations - py.iterations) <= 1


def test_an_economic_rti_follows_ipopts_closed_loop_without_chattering() -> None:
    # (issue 24: the batch reactor's RTI input chattered between 0 and 0.126 where IPOPT's is smooth) one exact-
    # Hessian RTI per sample against IPOPT's MPC over 40 samples: the inputs within 1e-3 of their range (measured
    # 4e-4: one SQP iteration per sample lags the optimum by that); Gauss-Newton's are half of it apart.
    from batch_reactor import make_model, make_ocp

    model = make_model()
    ocp = make_ocp(model)
    x0 = np.asarray(model.x0, dtype=float)
    rti = shooting.simulate_closed_loop(shooting.RTIController(ocp, hessian="exact"), x0, 40, progress=False)
    ipopt = shooting.simulate_closed_loop(shooting.MPCController(ocp), x0, 40, progress=False)
    assert rti.success.all() and ipopt.success.all()
    assert np.abs(rti.u - ipopt.u).max() <= 1e-3 * float(model.u_max[0] - model.u_min[0])


def test_the_default_hessian_is_exact_for_an_economic_cost_and_gauss_newton_for_least_squares(tmp_path: Path) -> None:
    # (issue 35) the batch reactor exported and solved with the defaults: "auto" picks the exact Hessian for its
    # cost -P (not a least-squares one), the manifest says so, and the SQP reaches IPOPT's optimum (Gauss-Newton's
    # line search failed there); a tracking cost and a least-squares extra cost keep Gauss-Newton's.
    import json

    from batch_reactor import make_model, make_ocp
    from shooting.mpc.costs import automatic_hessian

    model = make_model()
    ocp = make_ocp(model, {"ipopt.tol": 1e-12, "ipopt.bound_relax_factor": 0.0, "ipopt.constr_viol_tol": 1e-12})
    x0 = np.asarray(model.x0, dtype=float)
    truth = ocp.solve(x0)
    assert truth.success
    span = float(model.u_max[0] - model.u_min[0])
    rti = shooting.RTIController(ocp, initialize_with_ipopt=False)
    assert rti.hessian == "exact"
    py = rti.solve(x0, max_iter=100)
    assert py.status == 0, py.message
    assert np.abs(py.u - truth.u).max() <= 1e-6 * span
    assert export_controller(ocp, tmp_path / "c", name="batch").ok
    assert json.loads((tmp_path / "c" / "manifest.json").read_text())["qp"]["hessian"] == "exact"
    ctl = load_controller(tmp_path / "c", model=model)
    c = ctl.solve(x0, max_iter=100)
    assert c.status == 0, c.message
    assert np.abs(c.u - truth.u).max() <= 1e-6 * span
    tracking = shooting.MultipleShootingOCP(shooting.load_model("pendulum"), 10, dt=0.05)
    assert shooting.RTIController(tracking).hessian == "gauss-newton"
    lsq = shooting.least_squares(lambda x, u, p: x[:1], [1.0])
    assert automatic_hessian(lsq, None) == "gauss-newton"
    assert automatic_hessian(lsq, lambda x, p: x[0] ** 2) == "exact"
    with pytest.raises(ValueError, match="hessian"):
        shooting.RTIController(tracking, hessian="newton")  # type: ignore[arg-type]
