"""Time-varying data: per-stage model parameters and references, in the OCP, the RTI and the closed loop.

Independent truth:
- on x' = u + p (every Runge-Kutta method is exact: x+ = x + dt (u + p)) the
  optimum of the tracking problem is a linear least-squares problem solved
  here in numpy;
- a reference that is itself a trajectory of the controller's discrete
  model, with the inputs that generate it as input reference, has cost zero:
  it is the optimum, so MPC and RTI against a plant with the same discrete
  map follow it to the solver's tolerance. Any misalignment (a reference, an
  input or a parameter one stage off, the plant on the nominal parameters)
  shows as an error of the size of one step of the reference, ~1e-2 here.
"""

from __future__ import annotations

import csv
import json

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting import ControlStep, MPCController, RTIController, simulate_closed_loop
from shooting.cli import main
from shooting.codegen import export_controller, load_controller
from shooting.mpc.rti import QPPoint
from support import needs_gcc

N, DT = 8, 0.1
# Under CI=true a missing compiler fails the C test instead of skipping it.


@pytest.fixture(scope="module")
def drift() -> shooting.Model:
    """x' = u + p: a scalar integrator with a parameter that adds to the input."""
    x, u, p = ca.SX.sym("x"), ca.SX.sym("u"), ca.SX.sym("p")
    return shooting.Model("drift", x, u, u + p, p=p, x0=[1.0], p0=[0.0])


def _lq_truth(x0: float, P: np.ndarray, xr: np.ndarray, ur: np.ndarray, q: float, r: float, qf: float):
    """min sum_k q (x_k - xr_k)^2 + r (u_k - ur_k)^2 + qf (x_N - xr_N)^2, x_{k+1} = x_k + DT (u_k + p_k)."""
    T = np.tril(np.ones((N, N)))  # x_{1..N} = x0 + DT T (u + p)
    w = np.sqrt(np.r_[np.full(N - 1, q), qf])
    # Least squares in u: rows sqrt(w)(x - xr) for x_1..x_N and sqrt(r)(u - ur).
    A = np.vstack([w[:, None] * DT * T, np.sqrt(r) * np.eye(N)])
    b = np.r_[w * (xr[1:] - x0 - DT * T @ P), np.sqrt(r) * ur]
    u = np.linalg.lstsq(A, b, rcond=None)[0]
    x = np.r_[x0, x0 + DT * T @ (u + P)]
    cost = q * np.sum((x[:N] - xr[:N]) ** 2) + r * np.sum((u - ur) ** 2) + qf * (x[N] - xr[N]) ** 2
    return x, u, cost


def test_per_stage_parameters_and_references_give_the_least_squares_optimum(drift):
    q, r, qf = 3.0, 0.2, 10.0
    ocp = shooting.MultipleShootingOCP(drift, N, dt=DT, Q=[q], R=[r], Q_terminal=[qf], x_min=-np.inf,
                                       x_max=np.inf, u_min=-np.inf, u_max=np.inf,
                                       solver_options={"ipopt.tol": 1e-12})
    rng = np.random.default_rng(3)
    P, xr, ur = rng.normal(size=N), rng.normal(size=N + 1), rng.normal(size=N)
    x_true, u_true, cost_true = _lq_truth(1.0, P, xr, ur, q, r, qf)
    sol = ocp.solve([1.0], p=P[:, None], x_ref=xr[:, None], u_ref=ur[:, None])
    assert sol.success
    np.testing.assert_allclose(sol.u.ravel(), u_true, atol=1e-8)
    np.testing.assert_allclose(sol.x.ravel(), x_true, atol=1e-8)
    assert sol.cost == pytest.approx(cost_true, rel=1e-10)
    assert ocp.cost(sol.x, sol.u, p=P[:, None], x_ref=xr[:, None], u_ref=ur[:, None]) == pytest.approx(cost_true)
    # One vector still means every interval.
    flat = ocp.solve([1.0], p=[0.4])
    np.testing.assert_allclose(flat.u.ravel(), _lq_truth(1.0, np.full(N, 0.4), np.zeros(N + 1), np.zeros(N),
                                                         q, r, qf)[1], atol=1e-8)
    # The RTI's QP is exact for this linear-quadratic problem: its first input is the optimum's from any guess.
    rti = RTIController(ocp, initialize_with_ipopt=False)
    step = rti.step([1.0], 0.0, p=P[:, None], x_ref=xr[:, None], u_ref=ur[:, None])
    assert step.u[0] == pytest.approx(u_true[0], abs=1e-8)


def test_stage_and_terminal_functions_get_their_own_parameters(drift):
    """stage_cost(x, u, p_k) on interval k, terminal_cost(x, p_{N-1}): a cost of p itself adds exactly those."""
    plain = shooting.MultipleShootingOCP(drift, N, dt=DT)
    extra = shooting.MultipleShootingOCP(drift, N, dt=DT, stage_cost=lambda x, u, p: p[0] ** 2,
                                         terminal_cost=lambda x, p: 7.0 * p[0])
    P = np.arange(1.0, N + 1.0)[:, None]  # p_k = k + 1
    x, u = np.zeros((N + 1, 1)), np.zeros((N, 1))
    difference = extra.cost(x, u, p=P) - plain.cost(x, u, p=P)
    assert difference == pytest.approx(np.sum(P ** 2) + 7.0 * P[-1, 0])


def test_parameter_shapes_are_checked(drift):
    ocp = shooting.MultipleShootingOCP(drift, N, dt=DT)
    with pytest.raises(ValueError, match=r"p must be finite numbers of shape \(1,\) or \(8, 1\), got shape \(9, 1\)"):
        ocp.solve([1.0], p=np.zeros((N + 1, 1)))
    with pytest.raises(ValueError, match=r"x_ref must be finite numbers of shape \(1,\) or \(9, 1\)"):
        ocp.solve([1.0], x_ref=np.zeros((N, 1)))
    with pytest.raises(ValueError, match=r"p must be finite numbers of shape \(1,\) or \(8, 1\)"):
        MPCController(ocp, p=np.zeros((2, 2)))


def _generated(model: shooting.Model, steps: int):
    """A trajectory of the rk4 map of `model` under a known input and a time-varying mu, on the grid k DT."""
    F = shooting.build_integrator(model, "rk4", 1, "none")
    mu = lambda t: np.array([1.0 + 0.5 * np.sin(0.7 * t)])  # noqa: E731
    us = [np.array([0.5 * np.sin(1.3 * k * DT)]) for k in range(steps)]
    xs = [np.array([0.5, -0.2])]
    for k in range(steps):
        xs.append(np.array(F(xs[-1], us[k], mu(k * DT), k * DT, DT)).ravel())
    xs, us = np.array(xs), np.array(us)

    def reference(t: float):
        j = int(round(t / DT))
        return xs[j], us[min(j, steps - 1)]

    return xs, reference, mu


@pytest.mark.parametrize("kind", ["mpc", "rti"])
def test_closed_loop_follows_a_trajectory_of_its_own_model(kind, tmp_path):
    model = shooting.load_model("vanderpol")
    K = 25
    xs, reference, mu = _generated(model, K + N + 1)
    ocp = shooting.MultipleShootingOCP(model, N, dt=DT, Q=[10.0, 10.0], R=[0.1], solver_options={"ipopt.tol": 1e-10})
    controller = MPCController(ocp) if kind == "mpc" else RTIController(ocp)
    traj = simulate_closed_loop(controller, xs[0], K, reference=reference, parameters=mu, plant_method="rk4",
                                plant_steps=1, progress=False)
    assert traj.success.all()
    # The reference is the optimum (cost zero): followed to the solver's tolerance, not to ~1e-2.
    np.testing.assert_allclose(traj.x, xs[:K + 1], atol=1e-6)
    err = traj.tracking_error()
    assert err["max"].shape == (2,) and err["max"].max() < 1e-6 and (err["rms"] <= err["max"]).all()
    # The trajectory records the reference per sample; JSON and CSV carry it.
    assert traj.time_varying and traj.x_ref.shape == (K + 1, 2) and traj.u_ref.shape == (K, 1)
    np.testing.assert_array_equal(traj.x_ref, xs[:K + 1])
    data = json.loads(traj.save_json(tmp_path / "t.json").read_text())
    assert len(data["x_ref"]) == K + 1 and data["x_ref"][3] == pytest.approx(xs[3].tolist())
    assert data["stats"]["tracking_error"]["max"] == pytest.approx(err["max"].tolist())
    rows = list(csv.reader(traj.save_csv(tmp_path / "t.csv").open()))
    assert rows[0] == ["t", "x1", "x2", "u", "solve_time", "x1_ref", "x2_ref", "u_ref"]
    assert float(rows[4][5]) == xs[3][0] and rows[-1][-1] == ""
    assert sorted(p.name for p in traj.plot(tmp_path)) == ["inputs.png", "solve_time.png", "states.png"]


def test_a_reference_one_stage_late_is_tracked_with_a_lag(drift):
    """The same check, made to fail: shifting the reference's time by one step is visible far above 1e-6."""
    model = shooting.load_model("vanderpol")
    xs, reference, mu = _generated(model, 40)
    ocp = shooting.MultipleShootingOCP(model, N, dt=DT, Q=[10.0, 10.0], R=[0.1])
    late = simulate_closed_loop(ocp, xs[0], 10, reference=lambda t: reference(t + DT), parameters=mu,
                                plant_method="rk4", plant_steps=1, progress=False)
    nominal = simulate_closed_loop(ocp, xs[0], 10, reference=reference, plant_method="rk4", plant_steps=1,
                                   progress=False)  # the plant and the controller on mu = 1
    assert late.tracking_error()["max"].max() > 1e-2 and nominal.tracking_error()["max"].max() > 1e-3


def test_time_varying_data_need_a_controller_that_takes_them():
    model = shooting.load_model("vanderpol")

    class Fixed:
        dt, horizon = 0.1, 5

        def __init__(self):
            self.model = model

        def step(self, x, t):
            return ControlStep(u=np.zeros(1), solve_time=0.0, success=True, status="ok", iterations=0)

    ref = lambda t: (np.zeros(2), None)  # noqa: E731
    with pytest.raises(ValueError, match="Fixed cannot take a time-varying reference"):
        simulate_closed_loop(Fixed(), [0.1, 0.0], 3, reference=ref, progress=False)
    with pytest.raises(ValueError, match="Fixed cannot take time-varying parameters"):
        simulate_closed_loop(Fixed(), [0.1, 0.0], 3, parameters=lambda t: [1.0], progress=False)

    class Spy(Fixed):
        """Takes every keyword; records what it gets."""

        def __init__(self):
            super().__init__()
            self.seen = []

        def step(self, x, t, **data):
            self.seen.append(data)
            return ControlStep(u=np.array([0.1 * len(self.seen)]), solve_time=0.0, success=True, status="ok",
                               iterations=0)

    spy = Spy()
    simulate_closed_loop(spy, [0.1, 0.0], 3, reference=lambda t: ([t, 0.0], [2 * t]),
                         parameters=lambda t: [1 + t], progress=False)
    first, second = spy.seen[0], spy.seen[1]
    np.testing.assert_allclose(first["x_ref"][:, 0], DT * np.arange(6))  # nodes t + j dt, j = 0..N
    np.testing.assert_allclose(second["u_ref"][:, 0], 2 * DT * np.arange(1, 6))  # intervals j = 0..N-1
    np.testing.assert_allclose(second["p"][:, 0], 1 + DT * np.arange(1, 6))
    assert "u_prev" not in first and second["u_prev"] == pytest.approx([0.1])  # the input applied before


def test_reference_callables_with_the_wrong_shape_are_named():
    model = shooting.load_model("vanderpol")
    ocp = shooting.MultipleShootingOCP(model, 4, dt=DT)
    with pytest.raises(ValueError, match=r"reference\(t\) x_ref at t = 0 has 3 entries but needs 2"):
        simulate_closed_loop(ocp, [0.1, 0.0], 2, reference=lambda t: (np.zeros(3), None), progress=False)
    with pytest.raises(ValueError, match=r"reference\(t\) u_ref at t = 0 has 2 entries but needs 1"):
        simulate_closed_loop(ocp, [0.1, 0.0], 2, reference=lambda t: (np.zeros(2), np.zeros(2)), progress=False)
    with pytest.raises(ValueError, match=r"reference\(t\) must return a pair \(x_ref, u_ref\)"):
        simulate_closed_loop(ocp, [0.1, 0.0], 2, reference=lambda t: np.zeros(2), progress=False)
    with pytest.raises(ValueError, match=r"parameters\(t\) at t = 0 has 2 entries but needs 1"):
        simulate_closed_loop(ocp, [0.1, 0.0], 2, parameters=lambda t: [1.0, 2.0], progress=False)
    with pytest.raises(ValueError, match="not both"):
        simulate_closed_loop(ocp, [0.1, 0.0], 2, p=[1.0], parameters=lambda t: [1.0], progress=False)


def test_cartpole_tracking_scenario_follows_the_sinusoid(tmp_path, capsys):
    scenario = shooting.named_scenario("cartpole", "tracking")
    assert shooting.scenario_names("cartpole") == ["default", "tracking"] and scenario.reference is not None
    traj = simulate_closed_loop(RTIController(shooting.build_ocp(scenario)), scenario.x0, scenario.sim_steps,
                                reference=scenario.reference, progress=False)
    assert traj.success.all()
    # Over the second period (the start has the cart-pole's non-minimum-phase dip) the cart is within
    # 1 cm of its 1 m sinusoid; measured 0.0034 m.
    second = traj.tracking_error(skip=80)
    assert second["max"][0] < 0.01 and traj.tracking_error()["rms"][0] < 0.05
    code = main(["mpc", "--model", "cartpole", "--scenario", "tracking", "--sim-steps", "10", "--rti", "-q",
                 "--out", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 0 and "tracking error per state (RMS / max over the run): p " in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert "tracking_error" in summary["stats"] and summary["scenario"]["reference"] == "sinusoid"
    assert list(csv.reader((tmp_path / "run" / "trajectory.csv").open()))[0][-4:] == [
        "p_ref [m]", "theta_ref [rad]", "v_ref [m/s]", "omega_ref [rad/s]"]
    assert main(["mpc", "--model", "pendulum", "--scenario", "tracking", "--out", str(tmp_path / "x")]) == 2
    assert "has no scenario 'tracking': choose one of default, hold" in capsys.readouterr().err


@needs_gcc
def test_exported_controller_takes_the_reference_through_set_reference(tmp_path):
    """The generated C has no x_ref keyword: the closed loop sets every stage's reference instead, and the C
    follows the sinusoid exactly as the Python RTI does from the same guess."""
    scenario = shooting.named_scenario("cartpole", "tracking").with_changes(horizon=20)
    ocp = shooting.build_ocp(scenario)
    assert export_controller(ocp, tmp_path / "c", x0=np.zeros(4)).ok
    c_run = simulate_closed_loop(load_controller(tmp_path / "c"), np.zeros(4), 40, reference=scenario.reference,
                                 progress=False)

    class SameGuess(RTIController):  # the C starts from IPOPT's solution for the OCP's own (zero) reference
        def reset(self):
            super().reset()
            self._guess = QPPoint(ocp.solve(np.zeros(4)).w, None, None)

    py_run = simulate_closed_loop(SameGuess(ocp), np.zeros(4), 40, reference=scenario.reference, progress=False)
    assert np.abs(c_run.u - py_run.u).max() < 1e-8 * np.abs(py_run.u).max()
    np.testing.assert_allclose(c_run.x_ref, py_run.x_ref)
    assert py_run.tracking_error()["max"][0] < 0.2
