"""Closed-loop MPC: default scenarios reach their targets; trajectories save and plot."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting import ControlStep, MPCController, Trajectory, simulate_closed_loop
from shooting.mpc.scenarios import Scenario, build_ocp, default_scenario

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def cartpole():
    model = shooting.load_model("cartpole")
    scenario = default_scenario(model)
    return model, scenario, build_ocp(scenario, model)


@pytest.fixture(scope="module")
def swing_up(cartpole) -> Trajectory:
    model, scenario, ocp = cartpole
    return simulate_closed_loop(ocp, scenario.x0, 60, progress=False)


def test_cartpole_swings_up_within_bounds(cartpole, swing_up):
    model, scenario, _ = cartpole
    traj = swing_up
    assert scenario.x0[1] == pytest.approx(np.pi) and traj.x[0, 1] == pytest.approx(np.pi)
    p, theta, v, omega = traj.x[-1]
    assert abs(theta) < 0.05 and abs(p) < 0.05 and abs(v) < 0.1 and abs(omega) < 0.1
    assert np.all(np.abs(traj.u) <= 80.0 + 1e-9)
    assert np.all(np.abs(traj.x[:, 0]) <= 2.0 + 1e-6)
    stats = traj.stats()
    assert stats["success_rate"] == 1.0
    assert stats["max_input_violation"] == 0.0 and stats["max_state_violation"] < 1e-6
    assert stats["final_error"] < 0.05
    # The whole swing-up: the pole passes through horizontal and the force saturates.
    assert np.abs(traj.u).max() == pytest.approx(80.0)
    # Warm-started solves are cheaper than the cold first one.
    assert np.median(traj.iterations[1:]) < traj.iterations[0]


def test_quadrotor_flies_to_hover():
    model = shooting.load_model("quadrotor")
    scenario = default_scenario(model)
    cost = scenario.problem.cost
    assert cost.x_ref[3] == 1.0 and np.allclose(cost.x_ref[[0, 1, 2, 4, 5, 6]], 0)
    assert np.allclose(cost.u_ref, model.u0)
    traj = simulate_closed_loop(build_ocp(scenario, model), scenario.x0, 60, progress=False)
    assert np.linalg.norm(traj.x[-1, :3]) < 0.02
    assert np.allclose(traj.x[-1, 3:7], [1, 0, 0, 0], atol=0.01)
    assert np.linalg.norm(traj.x[-1, 7:]) < 0.05
    assert np.allclose(traj.u[-1], model.u0, atol=0.02)
    assert np.all((traj.u >= 0) & (traj.u <= model.u_max))
    assert traj.success.all()


def test_vanderpol_is_regulated():
    model = shooting.load_model("vanderpol")
    scenario = default_scenario(model)
    traj = simulate_closed_loop(build_ocp(scenario, model), scenario.x0, scenario.sim_steps, progress=False)
    assert traj.final_error() < 1e-3
    assert np.all(np.abs(traj.u) <= 1.0)
    assert traj.success.all()


def test_rti_controller_runs_in_the_loop():
    model = shooting.load_model("vanderpol")
    scenario = default_scenario(model)
    rti = shooting.RTIController(build_ocp(scenario, model))
    traj = simulate_closed_loop(rti, scenario.x0, scenario.sim_steps, progress=False)
    assert traj.final_error() < 1e-2
    assert traj.x_ref is not None and np.allclose(traj.x_ref, 0)


def test_mismatch_and_noise_are_reproducible(cartpole):
    _, scenario, ocp = cartpole
    # A 10 % heavier cart: the swing stays inside |p| <= 2. (With M = 1.2 it
    # overshoots the hard bound, a few solves are infeasible and the swing-up
    # can take several seconds longer.)
    heavy = shooting.load_model("cartpole", M=1.1)

    def run(seed: int) -> Trajectory:
        return simulate_closed_loop(ocp, scenario.x0, 60, plant=heavy, noise_std=1e-3, seed=seed, progress=False)

    a, b, c = run(7), run(7), run(8)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.u, b.u)
    assert not np.array_equal(a.x, c.x)
    for traj in (a, c):  # upright despite the heavier cart and the noise
        assert abs(traj.x[-1, 1]) < 0.05 and abs(traj.x[-1, 0]) < 0.05 and traj.success.all()


def test_plant_mismatch_checks_dimensions(cartpole):
    _, scenario, ocp = cartpole
    with pytest.raises(ValueError, match="plant pendulum has nx=2"):
        simulate_closed_loop(ocp, scenario.x0, 3, plant=shooting.load_model("pendulum"), progress=False)
    with pytest.raises(ValueError, match="noise_std"):
        simulate_closed_loop(ocp, scenario.x0, 3, noise_std=[0.1, 0.1], progress=False)
    with pytest.raises(ValueError, match="x0 has 3 entries"):
        simulate_closed_loop(ocp, [0, 1, 2], 3, progress=False)
    with pytest.raises(ValueError, match="controller must be"):
        simulate_closed_loop(object(), scenario.x0, 3, progress=False)


def test_json_csv_and_plots(swing_up, tmp_path):
    traj = swing_up
    K, nx, nu = 60, 4, 1
    data = json.loads(traj.save_json(tmp_path / "t.json").read_text())
    assert {"t", "x", "u", "solve_time"} <= set(data)
    assert len(data["t"]) == K + 1 and len(data["solve_time"]) == K
    assert len(data["x"]) == K + 1 and all(len(row) == nx for row in data["x"])
    assert len(data["u"]) == K and all(len(row) == nu for row in data["u"])
    assert data["state_names"] == ["p", "theta", "v", "omega"] and data["input_names"] == ["F"]
    assert data["bounds"]["u_max"] == [80.0] and data["bounds"]["x_max"][1] is None
    assert data["x"][0][1] == pytest.approx(np.pi) and data["t"][1] == 0.05

    rows = list(csv.reader((tmp_path / "t.csv").open())) if traj.save_csv(tmp_path / "t.csv") else []
    assert rows[0] == ["t [s]", "p [m]", "theta [rad]", "v [m/s]", "omega [rad/s]", "F [N]", "solve_time"]
    assert len(rows) == K + 2 and all(len(r) == 7 for r in rows)
    assert rows[-1][-2:] == ["", ""] and float(rows[1][5]) == traj.u[0, 0]
    assert float(rows[-1][0]) == pytest.approx(3.0)

    paths = traj.plot(tmp_path / "plots")
    assert sorted(p.name for p in paths) == ["inputs.png", "solve_time.png", "states.png"]
    for path in paths:
        assert path.read_bytes()[:8] == PNG
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(p.name for p in paths)  # no temp files


def test_stats_cost_matches_definition(cartpole, swing_up):
    _, scenario, _ = cartpole
    traj = swing_up
    Q, R = scenario.problem.cost.Q, scenario.problem.cost.R
    stats = traj.stats(Q, R)
    expected = sum(x @ Q @ x for x in traj.x[:-1]) + sum(u @ R @ u for u in traj.u)
    assert stats["closed_loop_cost"] == pytest.approx(expected)
    ms = stats["solve_time_ms"]
    assert ms["min"] <= ms["median"] <= ms["p95"] <= ms["max"] and ms["mean"] > 0


class _FakeSolution:
    def __init__(self, x, u, success=True):
        self.x, self.u = np.asarray(x, float), np.asarray(u, float)
        self.success, self.status, self.iterations, self.solve_time = success, "fake", 3, 1e-3

    def shifted(self):
        return _FakeSolution(np.vstack([self.x[1:], self.x[-1:]]), np.vstack([self.u[1:], self.u[-1:]]))


class _FakeOCP(shooting.MultipleShootingOCP):
    """A real (small) OCP whose solve records the warm starts it is given and returns scripted solutions."""

    def __init__(self, model, solutions):
        super().__init__(model, 2, dt=0.1)
        self.solutions, self.warm_starts = list(solutions), []

    def solve(self, x0, *, warm_start=None, x_ref=None, u_ref=None, p=None, t0=0.0, u_prev=None):
        self.warm_starts.append(warm_start)
        return self.solutions.pop(0)


def test_mpc_controller_warm_starts_and_falls_back():
    model = shooting.load_model("vanderpol")
    good = _FakeSolution(np.zeros((3, 2)), [[0.3], [0.5]])
    failed = _FakeSolution(np.zeros((3, 2)), [[0.7], [0.9]], success=False)
    broken = _FakeSolution(np.full((3, 2), np.nan), [[np.nan], [np.nan]], success=False)
    ocp = _FakeOCP(model, [good, failed, broken, broken])
    ctrl = MPCController(ocp)
    first = ctrl.step(model.x0, 0.0)
    assert isinstance(first, ControlStep) and first.u.tolist() == [0.3] and first.success
    assert ocp.warm_starts[0] is None  # cold first solve
    second = ctrl.step(model.x0, 0.1)  # a failed but finite solve: its own first input
    assert second.u.tolist() == [0.7] and not second.success and second.status == "fake"
    assert ocp.warm_starts[1].u[0, 0] == 0.5  # the previous solution shifted
    third = ctrl.step(model.x0, 0.2)  # NaN: the shifted previous solution's first input
    assert third.u.tolist() == [0.9] and not third.success
    ctrl.reset()
    fourth = ctrl.step(model.x0, 0.3)  # NaN without any previous solution: u0 within bounds
    assert fourth.u.tolist() == [0.0] and ocp.warm_starts[-1] is None


def test_custom_controller_and_forced_progress_bar(capsys):
    model = shooting.load_model("vanderpol")

    class Saturating:
        dt = 0.1

        def __init__(self):
            self.model = model

        def step(self, x, t):
            return ControlStep(u=np.array([-5.0 * x[1]]), solve_time=0.0, success=True, status="ok", iterations=0)

    traj = simulate_closed_loop(Saturating(), [0.2, 0.3], 20, progress="always")
    assert np.abs(traj.u).max() == 1.0  # clipped to |u| <= 1
    assert traj.x_ref is None and traj.solve_time.shape == (20,)
    err = capsys.readouterr().err
    assert "20/20" in err and "\r[" in err
    simulate_closed_loop(Saturating(), [0.2, 0.3], 5, progress=True)  # stderr is not a terminal here
    assert capsys.readouterr().err == ""

    class WrongSize(Saturating):
        def step(self, x, t):
            return ControlStep(u=np.zeros(2), solve_time=0.0, success=True, status="ok", iterations=0)

    with pytest.raises(ValueError, match="returned 2 inputs"):
        simulate_closed_loop(WrongSize(), [0.2, 0.3], 5, progress=False)


@pytest.mark.parametrize("name", shooting.model_names())
def test_default_scenarios_fit_their_models(name):
    model = shooting.load_model(name)
    sc = default_scenario(model)
    assert sc.model == name and (sc.nx, sc.nu) == (model.nx, model.nu)
    assert sc.problem.cost.Q.shape == (model.nx, model.nx) and sc.problem.cost.R.shape == (model.nu, model.nu)
    assert np.all(sc.x0 == model.x0) and sc.sim_steps >= 1 and sc.description
    json.dumps(sc.to_dict())
    if name == "stiff_chain":
        assert not shooting.get_tableau(sc.problem.method).explicit


def test_generic_scenario_and_validation(forced):
    sc = default_scenario(forced)
    cost = sc.problem.cost
    assert sc.problem.horizon == 20 and sc.problem.dt == 0.1
    assert np.allclose(cost.Q, np.eye(2)) and np.allclose(cost.R, 0.01)
    assert np.allclose(cost.x_ref, 0) and np.allclose(sc.x0, forced.x0)
    with pytest.raises(ValueError, match="Scenario.Q must be of shape"):
        sc.with_changes(Q=np.eye(3))
    with pytest.raises(ValueError, match="horizon must be an integer in 1..1000"):
        sc.with_changes(horizon=0)
    with pytest.raises(ValueError, match="Q must be positive semi-definite"):
        sc.with_changes(Q=[1.0, -1.0])
    with pytest.raises(ValueError, match="unknown scenario field"):
        sc.with_changes(horizn=3)
    with pytest.raises(ValueError, match="nx=4"):
        build_ocp(default_scenario("cartpole"), forced)
    assert isinstance(sc, Scenario)


def test_user_model_with_time_and_parameters(forced):
    """The generic scenario on a time-varying model with parameters: t and p reach OCP and plant."""
    sc = default_scenario(forced).with_changes(horizon=10)
    ocp = build_ocp(sc, forced)
    traj = simulate_closed_loop(ocp, sc.x0, 30, p=forced.p0, progress=False)
    assert traj.t[-1] == pytest.approx(3.0) and traj.success.all()
    assert np.linalg.norm(traj.x[-1]) < 0.2 * np.linalg.norm(sc.x0)  # u acts through cos(3 t): slow
    with pytest.raises(ValueError, match="p has 2 entries"):
        simulate_closed_loop(ocp, sc.x0, 3, p=[1.0, 2.0], progress=False)


@pytest.mark.parametrize("name, tolerance", [("pendulum", 0.05), ("two_link_arm", 0.05), ("stiff_chain", 0.05)])
def test_default_closed_loops_reach_their_targets(name, tolerance):
    """The scenarios `shooting-codegen mpc` runs by default, run whole (no test ran them before)."""
    model = shooting.load_model(name)
    scenario = default_scenario(model)
    traj = simulate_closed_loop(build_ocp(scenario, model), scenario.x0, scenario.sim_steps,
                                plant_method=scenario.plant_method, plant_steps=scenario.plant_steps, progress=False)
    assert traj.success.all() and not traj.stopped
    assert traj.final_error() < tolerance, traj.x[-1]
    assert np.all(traj.u >= model.u_min - 1e-9) and np.all(traj.u <= model.u_max + 1e-9)
    assert traj.stats()["max_state_violation"] < 1e-6


def test_path_constraints_are_in_the_trajectory_its_summary_json_and_plots(tmp_path: Path) -> None:
    # (issue 25: path constraints appeared in no summary or plot) the cart-pole's power |F v| <= 20 W, soft.
    model = shooting.load_model("cartpole")

    def power(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
        return ca.vertcat(u[0] * x[2] - 20.0, -u[0] * x[2] - 20.0)

    scenario = shooting.default_scenario(model).with_changes(path_constraints=power, soft_path_constraints=True,
                                                              horizon=20)
    ocp = shooting.build_ocp(scenario, model)
    traj = shooting.simulate_closed_loop(shooting.RTIController(ocp), scenario.x0, 25, progress=False)
    assert traj.path_values is not None and traj.path_values.shape == (25, 2)
    recomputed = np.column_stack([traj.u[:, 0] * traj.x[:-1, 2] - 20.0, -traj.u[:, 0] * traj.x[:-1, 2] - 20.0])
    np.testing.assert_allclose(traj.path_values, recomputed, rtol=1e-12, atol=1e-12)
    assert traj.stats()["max_path_violation"] == pytest.approx(max(0.0, float(recomputed.max())), abs=1e-12)
    traj.save_json(tmp_path / "t.json")
    assert len(json.loads((tmp_path / "t.json").read_text())["path_values"]) == 25
    assert "path_constraints.png" in [p.name for p in traj.plot(tmp_path / "plots")]
    plain = shooting.simulate_closed_loop(shooting.RTIController(shooting.build_ocp(shooting.default_scenario(model),
                                                                                    model)), scenario.x0, 3,
                                          progress=False)
    assert plain.path_values is None and plain.stats()["max_path_violation"] is None
