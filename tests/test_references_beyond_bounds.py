"""References beyond the bounds: accepted everywhere, a warning only where a weight pulls towards them.

do-mpc writes its CSTR with Q zero on C_a and x_ref C_a = 0 below the bound
C_a >= 0.1 (and its polymerisation reactor likewise): such an OCP must build
and solve. Independent truths: with zero weight the reference is inert, so the
solution equals that of the same OCP with the reference moved onto the bound;
with a nonzero weight the optimum of a pure integrator x' = u is known in
closed form (the fastest way to the bound, then rest; or the input spread
evenly under a budget) and sits on the bound.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.codegen import export_controller, toolchain
from shooting.controller.c_source import controller_spec, generate_controller
from shooting.controller.check import compare_inputs, host_loop, reference_loop
from support import needs_gcc

Warn = shooting.ReferenceBeyondBoundsWarning


def cstr() -> shooting.Model:
    """A CSTR-like two-state reactor: C_a fed by the input F, the temperature T driven by C_a."""
    x, u = ca.SX.sym("x", 2), ca.SX.sym("u", 1)
    c_a, T = x[0], x[1]
    xdot = ca.vertcat(u[0] * (1.0 - c_a) - 0.5 * c_a, -0.3 * (T - 1.0) + 0.8 * c_a * T)
    return shooting.Model("cstr_like", x, u, xdot, state_names=["C_a", "T"], input_names=["F"], x0=[1.0, 1.0],
                          x_min=[0.1, 0.0], x_max=[2.0, 5.0], u_min=[0.0], u_max=[2.0], dt=0.1)


def integrator_model() -> shooting.Model:
    """x' = u with 0.1 <= x <= 2 and |u| <= 1."""
    x, u = ca.SX.sym("x"), ca.SX.sym("u")
    return shooting.Model("integ", x, u, u, x0=[1.0], x_min=[0.1], x_max=[2.0], u_min=[-1.0], u_max=[1.0], dt=0.1)


TIGHT = {"ipopt.tol": 1e-12, "ipopt.constr_viol_tol": 1e-12, "ipopt.mu_target": 1e-13}


def _quiet(fn, *args, **kwargs):
    """Call `fn` with every warning an error: a zero-weight reference beyond a bound must not warn."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn(*args, **kwargs)


def test_zero_weight_reference_below_the_bound_equals_the_reference_on_the_bound():
    model = cstr()
    common = dict(dt=0.1, Q=[0.0, 1.0], R=[0.1], solver_options=TIGHT)
    beyond = _quiet(shooting.MultipleShootingOCP, model, 15, x_ref=[0.0, 1.8], **common)
    on_bound = shooting.MultipleShootingOCP(model, 15, x_ref=[0.1, 1.8], **common)
    a, b = _quiet(beyond.solve, model.x0), on_bound.solve(model.x0)
    assert a.success and b.success
    np.testing.assert_allclose(a.x, b.x, atol=1e-8)
    np.testing.assert_allclose(a.u, b.u, atol=1e-8)
    assert abs(a.cost - b.cost) < 1e-8  # Q[0, 0] = 0: the constant is zero
    # Per-stage references through solve/parameters, partly below the bound at every stage.
    rows = np.column_stack([np.linspace(-1.0, 0.0, 16), np.linspace(1.2, 1.8, 16)])
    c = _quiet(beyond.solve, model.x0, x_ref=rows)
    d = on_bound.solve(model.x0, x_ref=np.column_stack([np.full(16, 0.1), rows[:, 1]]))
    np.testing.assert_allclose(c.u, d.u, atol=1e-8)
    # The real-time iteration and the scenario path take it too (no warning).
    ctrl = _quiet(shooting.RTIController, beyond)
    step = _quiet(ctrl.step, model.x0, 0.0)
    assert step.success and np.isfinite(step.u).all()
    scenario = shooting.Scenario(model=model.name, x0=model.x0, sim_steps=5, problem=shooting.OCPProblem(
        horizon=10, dt=0.1, cost=shooting.QuadraticCost(Q=[0.0, 1.0], R=[0.1], x_ref=[0.0, 1.8])))
    traj = _quiet(shooting.simulate_closed_loop, _quiet(shooting.build_ocp, scenario, model), model.x0, 5,
                  progress=False)
    assert traj.success.all()


def test_weighted_reference_beyond_the_bound_warns_and_the_optimum_sits_on_the_bound():
    model = integrator_model()
    N = 20
    with pytest.warns(Warn, match=r"x_ref\[0\]\[0\] \(x0\) = 0 lies beyond the bounds \[0.1, 2\] with nonzero "
                                  r"weight Q\[0, 0\] = 1"):
        ocp = shooting.MultipleShootingOCP(model, N, dt=0.1, Q=[1.0], R=[0.0], x_ref=[0.0], solver_options=TIGHT)
    sol = ocp.solve(model.x0)
    # Truth: every x_k is as small as the dynamics x_{k+1} = x_k + 0.1 u_k, |u| <= 1, and x >= 0.1 allow.
    truth = np.maximum(1.0 - 0.1 * np.arange(N + 1), 0.1)
    assert sol.success
    np.testing.assert_allclose(sol.x[:, 0], truth, atol=1e-6)
    np.testing.assert_allclose(sol.u[:9, 0], -1.0, atol=1e-5)
    np.testing.assert_allclose(sol.u[9:, 0], 0.0, atol=1e-5)


def test_weighted_input_reference_beyond_its_bound_spreads_the_input_to_the_state_bound():
    model = integrator_model()
    N = 20
    ocp = shooting.MultipleShootingOCP(model, N, dt=0.1, Q=[0.0], R=[1.0], solver_options=TIGHT)
    with pytest.warns(Warn, match=r"u_ref\[0\]\[0\] \(u0\) = 5 lies beyond the bounds \[-1, 1\] with nonzero "
                                  r"weight R\[0, 0\] = 1"):
        sol = ocp.solve(model.x0, u_ref=[5.0])
    # Truth: minimise sum (u_k - 5)^2 with u_k <= 1 and x_N = 1 + 0.1 sum u_k <= 2: by convexity the budget
    # of 10 is spread evenly, u_k = 0.5, and x_N sits on its bound 2.
    assert sol.success
    np.testing.assert_allclose(sol.u[:, 0], 0.5, atol=1e-6)
    assert abs(sol.x[-1, 0] - 2.0) < 1e-6


def test_warnings_name_the_weight_that_pulls_and_come_once_per_entry():
    model = cstr()
    # Q zero on C_a but the terminal weight pulls at x_N: only stage N is weighted.
    with pytest.warns(Warn, match=r"x_ref\[15\]\[0\] \(C_a\) = 0 lies beyond .* Q_terminal\[0, 0\] = 3") as seen:
        ocp = shooting.MultipleShootingOCP(model, 15, dt=0.1, Q=[0.0, 1.0], Q_terminal=[3.0, 1.0], x_ref=[0.0, 1.8])
    assert len([w for w in seen if issubclass(w.category, Warn)]) == 1
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        ocp.solve(model.x0, x_ref=[-1.0, 1.8])  # the same entry again: already said
    assert not [w for w in again if issubclass(w.category, Warn)]
    # A reference beyond the upper bound of T with weight: a second entry, a second warning.
    with pytest.warns(Warn, match=r"x_ref\[0\]\[1\] \(T\) = 9 lies beyond the bounds \[0, 5\] .* Q\[1, 1\] = 1"):
        ocp.solve(model.x0, x_ref=[0.0, 9.0])


@needs_gcc
def test_the_c_controller_tracks_a_reference_beyond_the_bound_like_the_python_rti():
    model = cstr()
    ocp = _quiet(shooting.MultipleShootingOCP, model, 12, dt=0.1, Q=[0.0, 1.0], R=[0.1], x_ref=[0.0, 1.8],
                 soft_x_bounds=True)
    spec = controller_spec(ocp)
    run = host_loop(generate_controller(spec, "cstr_like", real="double"), spec, model.x0, 20)
    xs, us = _quiet(reference_loop, ocp, model.x0, 20)
    assert all(s == "ok" for s in run.status)
    assert compare_inputs(run.u, us, 20) < 1e-8


REACTOR = '''
import casadi as ca
import shooting
from shooting.mpc import OCPProblem, QuadraticCost, Scenario


def make_model():
    x, u = ca.SX.sym("x", 2), ca.SX.sym("u")
    xdot = ca.vertcat(u * (1.0 - x[0]) - 0.5 * x[0], -0.3 * (x[1] - 1.0) + 0.8 * x[0] * x[1])
    return shooting.Model("reactor", x, u, xdot, state_names=["C_a", "T"], input_names=["F"], x0=[1.0, 1.0],
                          x_min=[0.1, 0.0], x_max=[2.0, 5.0], u_min=[0.0], u_max=[2.0], dt=0.1)


def scenario(model):
    # as do-mpc writes it: no weight on C_a, whose reference is left at 0 (below its bound 0.1)
    return Scenario(model=model.name, x0=model.x0, sim_steps=10, problem=OCPProblem(
        horizon=10, dt=0.1, cost=QuadraticCost(Q=[0.0, 1.0], R=[0.1], x_ref=[0.0, 1.8])))
'''


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shooting.cli", *args], cwd=tmp, capture_output=True, text=True,
                          timeout=300)


def test_cli_runs_a_reference_beyond_the_bound_and_warns_in_one_line_only_where_weighted(tmp_path):
    (tmp_path / "reactor.py").write_text(REACTOR)
    quiet = _cli(tmp_path, "mpc", "--model", "reactor.py", "--out", "a", "-q", "--no-lint")
    assert quiet.returncode == 0 and "warning" not in quiet.stderr, quiet.stderr
    assert (tmp_path / "a" / "summary.json").is_file()
    # --x-ref moves T beyond its upper bound 5, where Q[1, 1] = 1 pulls: one warning line, and a run.
    loud = _cli(tmp_path, "mpc", "--model", "reactor.py", "--x-ref", "0,7", "--out", "b", "-q", "--no-lint")
    assert loud.returncode == 0, loud.stderr
    lines = loud.stderr.strip().splitlines()
    assert lines == [line for line in lines if line.startswith("shooting-codegen: warning: x_ref[0][1] (T) = 7")]
    assert len(lines) == 1 and "Q[1, 1] = 1" in lines[0] and "Traceback" not in loud.stderr
    ctl = _cli(tmp_path, "controller", "--model", "reactor.py", "--out", "c", "-q", "--no-lint")
    assert ctl.returncode == 0 and "warning" not in ctl.stderr, ctl.stderr
    assert (tmp_path / "c" / "reactor_mpc.c").is_file()


def test_export_controller_accepts_the_reference_beyond_the_bound(tmp_path):
    if not toolchain.have_host_compiler():
        pytest.skip("needs gcc")
    model = cstr()
    ocp = _quiet(shooting.MultipleShootingOCP, model, 10, dt=0.1, Q=[0.0, 1.0], R=[0.1], x_ref=[0.0, 1.8])
    report = _quiet(export_controller, ocp, tmp_path / "ctl", check=True, check_steps=15)
    assert report.ok, report.problems
