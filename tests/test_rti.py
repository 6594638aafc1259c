"""RTIController: the KKT point of the OCP is its fixed point, extra costs included; the shift."""

from __future__ import annotations

import numpy as np
import pytest

import shooting

KW = dict(dt=0.05, Q=[10.0, 10.0, 1e-2, 1e-2], R=[1e-2])
X0 = np.array([0.2, 0.15, 0.0, 0.0])


@pytest.mark.parametrize("extra", [
    {},
    {"stage_cost": lambda x, u, p: 50 * x[2] ** 2 + 0.5 * u[0] ** 2},
    {"terminal_cost": lambda x, p: 1e3 * x[3] ** 2 + 40 * x[0] ** 2},
    {"stage_cost": lambda x, u, p: 2.0 * u[0]},  # linear: only the gradient enters
])
def test_first_rti_input_equals_ipopt_at_the_optimum(extra):
    """Started from IPOPT's solution at x0, one Gauss-Newton QP at x0 returns IPOPT's u_0 (the KKT point
    is the SQP iteration's fixed point). Dropping a cost term from the QP would move it."""
    model = shooting.load_model("cartpole")
    ocp = shooting.MultipleShootingOCP(model, 15, **KW, **extra)
    sol = ocp.solve(X0)
    assert sol.success
    step = shooting.RTIController(ocp).step(X0, 0.0)
    assert step.success
    np.testing.assert_allclose(step.u, sol.u[0], atol=1e-6 * max(1.0, abs(sol.u[0, 0])))
    if extra:  # the test is sensitive: without the extra term the optimum is elsewhere
        plain = shooting.MultipleShootingOCP(model, 15, **KW).solve(X0)
        assert abs(plain.u[0, 0] - sol.u[0, 0]) > 1e-3


def test_rti_refuses_constraints_its_sparse_qp_solvers_do_not_take():
    model = shooting.load_model("vanderpol")
    ocp = shooting.MultipleShootingOCP(model, 5, dt=0.1, path_constraints=lambda x, u, p: x)
    with pytest.raises(ValueError, match="path and terminal constraints need qp_solver='riccati-ipm'"):
        shooting.RTIController(ocp, qp_solver="qrqp")
    shooting.RTIController(ocp)  # (the stage-wise QP takes them)
    with pytest.raises(ValueError, match="qp_solver must be one of"):
        shooting.RTIController(shooting.MultipleShootingOCP(model, 5, dt=0.1), qp_solver="hpipm")


@pytest.mark.parametrize("qp_solver", ["qrqp", "osqp"])
def test_next_guess_is_the_last_qp_shifted(qp_solver):
    model = shooting.load_model("vanderpol")
    ocp = shooting.MultipleShootingOCP(model, 8, dt=0.1)
    rti = shooting.RTIController(ocp, qp_solver=qp_solver)
    x = np.array([1.0, 0.0])
    for k in range(3):
        x = x + 0.01 * k
        rti.step(x, 0.1 * k)
    L, last, guess = ocp.layout, rti.last_qp, rti.guess
    assert last is not None and guess is not None and last.lam_a is not None and guess.lam_a is not None
    xs, us = L.unpack_w(last.w)
    gx, gu = L.unpack_w(guess.w)
    np.testing.assert_array_equal(gx[:-1], xs[1:])
    np.testing.assert_array_equal(gu[:-1], us[1:])
    dyn = last.lam_a[L.dyn_idx]
    np.testing.assert_array_equal(guess.lam_a[L.dyn_idx[:-1]], dyn[1:])  # the dual shift
    np.testing.assert_array_equal(guess.lam_a[L.x0_idx], last.lam_a[L.x0_idx])
    rti.reset()
    assert rti.guess is None


def test_each_sample_is_prepared_once_before_it_is_measured(forced):
    """RTI splits a sample in two: the QP is built (linearised at the shifted guess, the data one stage on,
    t0 + dt) in the preparation phase after the previous feedback; the feedback phase only solves it. On a
    time-varying model with constant data, K samples at t_k = t0 + k dt take K + 1 preparations (the first
    sample's own, then one per sample, for the next one) and the QP waiting for sample k + 1 holds its
    time. A preparation for the wrong time keeps the inputs right but makes every feedback build its QP
    again first (2K preparations). New data at a sample (a moved reference) is the one case prepared again.
    """
    model = forced  # x2' = ... + u cos(w t)
    ocp = shooting.MultipleShootingOCP(model, 10, dt=0.1, Q=[10.0, 1.0], R=[0.1])
    rti = shooting.RTIController(ocp, cold_start_iterations=0)  # (a cold start's SQP linearises many times)
    plant = shooting.build_integrator(model, "rk4", 4, "none")
    x, t0, dt = model.x0.copy(), 0.3, ocp.dt
    for k in range(8):
        t = t0 + k * dt
        moved = {"x_ref": [0.2, 0.0]} if k >= 4 else {}  # from sample 4 on: a new target, then constant
        before = len(rti.preparation_times)
        step = rti.step(x, t, **moved)
        assert step.success
        extra = 1 if k in (0, 4) else 0  # the first sample, and the sample whose data changed
        assert len(rti.preparation_times) == before + 1 + extra, k
        assert len(rti.feedback_times) == k + 1
        waiting = ocp.layout.unpack_parameters(rti._prepared_P)["t0"]
        assert waiting == pytest.approx(t + dt, abs=1e-12), k  # prepared for the next sample's time
        x = np.array(plant(x, step.u, model.p0, t, dt)).ravel()


def test_a_non_finite_linearisation_is_a_failed_sample_naming_where():
    """qrqp threw "Ill-posed problem detected: LBA[31] <= UBA[31]" out of CasADi when the linearisation was NaN;
    now either QP solver reports a failed sample (success False, the last input held) that names where."""
    import casadi as ca

    x, u = ca.SX.sym("x", 2), ca.SX.sym("u")
    model = shooting.Model("nanny", x, u, ca.vertcat(x[1], ca.sqrt(1 - x[0]) + u), x0=[0.0, 0.0], dt=0.1,
                           x_min=[-1, -5], x_max=[0.9, 5], u_min=[-1], u_max=[1])
    ocp = shooting.MultipleShootingOCP(model, 5, dt=0.1, soft_x_bounds=True)
    for qp_solver, where in (("qrqp", "row 2 (dynamics of stage 0, x0)"), ("riccati-ipm", "stage 0")):
        rti = shooting.RTIController(ocp, qp_solver=qp_solver, initialize_with_ipopt=False)
        step = rti.step([3.0, 0.0], 0.0)  # sqrt(1 - 3): the linearisation at the guess is NaN
        assert not step.success and where in step.status, step.status
        assert np.isfinite(step.u).all()
