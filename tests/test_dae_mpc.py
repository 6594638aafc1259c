"""Algebraic states in the MPC: the OCP, RTI and the closed loop on a DAE equal those on its reduced ODE.

The double pendulum's algebraic equations are linear in z, so the same
model with z eliminated symbolically (z = M(q)^-1 rhs) is an independent
truth: every solution must agree to the solvers' tolerances.
"""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.cli import main
from shooting.codegen import export_controller, load_controller
from support import needs_gcc


def _reduced(m: shooting.Model) -> shooting.Model:
    z = ca.solve(ca.jacobian(m.alg, m.z), -ca.substitute(m.alg, m.z, ca.DM.zeros(m.nz)))
    return shooting.Model("dip_reduced", m.x, m.u, ca.substitute(m.xdot, m.z, z), x0=m.x0, u_min=m.u_min,
                          u_max=m.u_max, x_min=m.x_min, x_max=m.x_max, dt=m.dt)


def _ocp(model: shooting.Model, **kw: object) -> shooting.MultipleShootingOCP:
    q = [10.0, 100.0, 100.0, 1.0, 1.0, 1.0]
    return shooting.MultipleShootingOCP(model, 20, dt=0.02, Q=q, R=[1e-2], Q_terminal=[10 * v for v in q],
                                        solver_options={"ipopt.tol": 1e-10}, **kw)


@pytest.fixture(scope="module")
def dip() -> shooting.Model:
    return shooting.load_model("dip")


def test_ocp_on_dae_equals_ocp_on_reduced_ode(dip):
    a, b = _ocp(dip).solve(dip.x0), _ocp(_reduced(dip)).solve(dip.x0)
    assert a.success and b.success
    # IPOPT at tol 1e-10 on two formulations of one NLP: inputs of size 20 agree to ~1e-6.
    assert np.abs(a.u - b.u).max() < 1e-5 and np.abs(a.x - b.x).max() < 1e-7
    assert a.cost == pytest.approx(b.cost, rel=1e-8)
    # z at x_1..x_N: the accelerations of the reduced model there
    zfun = ca.Function("z", [dip.x, dip.u], [ca.solve(ca.jacobian(dip.alg, dip.z),
                                                       -ca.substitute(dip.alg, dip.z, ca.DM.zeros(3)))])
    # row k: z at x_{k+1} under u_k (the end of interval k, input held)
    z_true = np.array([np.array(zfun(a.x[k + 1], a.u[k])).ravel() for k in range(20)])
    assert a.z.shape == (20, 3) and np.abs(a.z - z_true).max() < 1e-9


def test_bounds_on_algebraic_states_are_imposed(dip):
    free = _ocp(dip).solve(dip.x0)
    peak = float(np.abs(free.z[:, 0]).max())
    limit = 0.6 * peak
    bounded = shooting.Model("dip", dip.x, dip.u, dip.xdot, z=dip.z, alg=dip.alg, z0=dip.z0, x0=dip.x0,
                             u_min=dip.u_min, u_max=dip.u_max, z_min=[-limit, -np.inf, -np.inf],
                             z_max=[limit, np.inf, np.inf], dt=dip.dt)
    sol = _ocp(bounded).solve(dip.x0)
    assert sol.success
    assert np.abs(sol.z[:, 0]).max() <= limit * (1 + 1e-7)
    assert np.abs(sol.z[:, 0]).max() >= limit * (1 - 1e-6)  # active: the bound changed the optimum
    assert sol.cost > free.cost
    with pytest.raises(ValueError, match="algebraic states.*z_min/z_max"):
        shooting.RTIController(_ocp(bounded))


def test_closed_loop_with_dae_plant_and_controllers(dip):
    red = _reduced(dip)
    x0 = [0.0, 0.1, -0.05, 0.0, 0.0, 0.0]
    a = shooting.simulate_closed_loop(_ocp(dip), x0, 25)
    b = shooting.simulate_closed_loop(_ocp(red), x0, 25, plant=red)
    assert np.abs(a.x - b.x).max() < 1e-6 and np.abs(a.u - b.u).max() < 1e-4
    assert np.abs(a.x[-1, 1:3]).max() < np.abs(a.x[0, 1:3]).max()  # being caught
    r = shooting.simulate_closed_loop(shooting.RTIController(_ocp(dip)), x0, 25)
    s = shooting.simulate_closed_loop(shooting.RTIController(_ocp(red)), x0, 25, plant=red)
    # the same QPs from the same linearisations (A, B equal to rounding): same inputs to QP accuracy
    assert np.abs(r.u - s.u).max() < 1e-6 and np.abs(r.x - s.x).max() < 1e-8


@needs_gcc
def test_c_controller_on_the_dae_equals_the_one_on_the_reduced_ode(dip, tmp_path):
    """The C controller takes algebraic states (its step's A and B eliminate z): its closed loop on the DAE
    equals the C controller's on the reduced ODE (an independent formulation) to the QPs' accuracy."""
    red = _reduced(dip)
    x0 = [0.0, 0.1, -0.05, 0.0, 0.0, 0.0]
    assert export_controller(_ocp(dip), tmp_path / "dae", x0=x0).ok
    assert export_controller(_ocp(red), tmp_path / "ode", x0=x0).ok
    a = shooting.simulate_closed_loop(load_controller(tmp_path / "dae"), x0, 25, progress=False)
    b = shooting.simulate_closed_loop(load_controller(tmp_path / "ode", model=red), x0, 25, plant=red,
                                      progress=False)
    assert a.success.all() and b.success.all()
    assert np.abs(a.u - b.u).max() < 1e-6 and np.abs(a.x - b.x).max() < 1e-8


def test_c_controller_refuses_bounds_on_algebraic_states(dip, tmp_path):
    bounded = shooting.Model("dip", dip.x, dip.u, dip.xdot, z=dip.z, alg=dip.alg, z0=dip.z0, x0=dip.x0,
                             u_min=dip.u_min, u_max=dip.u_max, z_min=[-1.0, -np.inf, -np.inf], dt=dip.dt)
    with pytest.raises(ValueError, match="algebraic states.*z_min/z_max"):
        export_controller(_ocp(bounded), tmp_path / "c")
    assert not (tmp_path / "c").exists()


@needs_gcc
@pytest.mark.parametrize("real", ["double", "float"])
def test_cli_controller_for_the_dae_built_in_passes_its_check(real, tmp_path):
    status = main(["controller", "--model", "dip", "--real", real, "--check", "--out", str(tmp_path / "c"), "-q",
                   "--no-lint"])
    assert status == 0 and (tmp_path / "c" / "dip_mpc.c").is_file()


def test_unconverged_algebraic_solve_is_reported_not_hidden():
    """0 = exp(z) - exp(-x): z = -x, but Newton from z0 = 0 gains only about 1 per step when x is large,
    so at x = 20 the step's fixed Newton steps cannot reach z = -20: the OCP must say so."""
    x, z, u = ca.SX.sym("x"), ca.SX.sym("z"), ca.SX.sym("u")
    m = shooting.Model("slow", x, u, z + u, z=z, alg=ca.exp(z) - ca.exp(-x), z0=[0.0], u_min=[-1.0], u_max=[1.0])
    ocp = shooting.MultipleShootingOCP(m, 5, dt=0.1)
    near = ocp.solve([0.5])
    assert near.success and near.max_violation < 1e-8
    far = ocp.solve([20.0])
    assert not far.success and "algebraic equations unsolved" in far.status
    assert far.max_violation > 1e-2  # x_1 off by ~0.5 of ~19 (relative 0.028)


def test_soft_bounds_on_algebraic_states(dip):
    """soft_x_bounds also softens z bounds: with a large L1 weight (exact penalty) the soft optimum is the
    hard one; with small weights the bound gives way and the slacks are the smallest the z need."""
    free = _ocp(dip).solve(dip.x0)
    limit = 0.6 * float(np.abs(free.z[:, 0]).max())
    bounded = shooting.Model("dip", dip.x, dip.u, dip.xdot, z=dip.z, alg=dip.alg, z0=dip.z0, x0=dip.x0,
                             u_min=dip.u_min, u_max=dip.u_max, z_min=[-limit, -np.inf, -np.inf],
                             z_max=[limit, np.inf, np.inf], dt=dip.dt)
    hard = _ocp(bounded).solve(dip.x0)
    exact = _ocp(bounded, soft_x_bounds=True, slack_l1=1e5, slack_l2=1.0).solve(dip.x0)
    assert hard.success and exact.success
    # one column: the model built here bounds no state, only the algebraic dds
    assert exact.slacks.shape == (20, 1) and np.abs(exact.slacks).max() < 1e-6
    assert np.abs(exact.u - hard.u).max() < 1e-4
    loose = _ocp(bounded, soft_x_bounds=True, slack_l1=1e-2, slack_l2=1e-2).solve(dip.x0)
    assert loose.success and np.abs(loose.z[:, 0]).max() > limit * 1.05  # the bound gave way
    ocp = _ocp(bounded, soft_x_bounds=True, slack_l1=1e-2, slack_l2=1e-2)
    need = ocp.minimal_slacks(loose.x, loose.z)
    assert np.abs(loose.slacks - need).max() < 1e-6
    assert ocp.cost(loose.x, loose.u) == pytest.approx(loose.cost, rel=1e-7)
