"""Output feedback in the closed loop: the controller sees an estimator's estimate from noisy measurements of the
estimator's sensors, not the state (issue 39)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

import shooting

CARTPOLE = shooting.load_model("cartpole")
PENDULUM = shooting.load_model("pendulum")


@pytest.fixture(scope="module")
def cartpole_rti() -> shooting.RTIController:
    scenario = shooting.default_scenario(CARTPOLE)
    return shooting.RTIController(shooting.build_ocp(scenario, CARTPOLE))


@pytest.mark.parametrize("kind", ["ekf", "mhe"])
def test_output_feedback_swings_up_the_cartpole_from_cart_position_and_angle(cartpole_rti, kind):
    """Only p and theta measured (the model's default sensors, 5 mm and 0.01 rad of noise): the loop still swings
    the pole up from hanging and holds it upright, the velocities estimated."""
    Q, R = np.diag([1e-6, 1e-6, 1e-4, 1e-4]), np.diag([0.005 ** 2, 0.01 ** 2])
    P0 = np.diag([1e-4, 1e-4, 1e-2, 1e-2])
    estimator = (shooting.EKF(CARTPOLE, None, Q=Q, R=R, P0=P0) if kind == "ekf" else
                 shooting.MHE(CARTPOLE, None, 8, Q=Q, R=R, P0=P0))
    trajectory = shooting.simulate_closed_loop(cartpole_rti, CARTPOLE.x0, 100, estimator=estimator,
                                               measurement_noise=[0.005, 0.01], seed=4, progress=False)
    assert trajectory.stopped == ""
    # upright through the last second (the noise, amplified by acados' stiff weights, keeps the velocities moving:
    # measured with this seed, |theta| <= 0.032 rad, |p| <= 0.061 m, |v| <= 0.38 m/s, |omega| <= 0.47 rad/s)
    last = np.abs(trajectory.x[-20:]).max(axis=0)
    assert last[1] < 0.05 and last[0] < 0.1 and last[2] < 0.6 and last[3] < 0.7, last
    assert np.abs(trajectory.x[:, 1]).max() > 3.0  # it started hanging
    err = trajectory.stats()["estimation_error"]
    assert max(err["rms"][:2]) < 0.02 and max(err["rms"]) < 0.5, err
    assert np.array_equal(trajectory.x_hat[0], CARTPOLE.x0)  # the prior at the first sample


def test_the_controller_gets_the_estimate_not_the_state():
    """A controller that records what it is given: the estimates, which differ from the states."""

    class Recorder:
        dt, model = PENDULUM.dt, PENDULUM

        def __init__(self) -> None:
            self.seen: list[np.ndarray] = []

        def step(self, x, t):
            self.seen.append(np.array(x))
            return shooting.ControlStep(np.array([1.0]), 0.0, True, "ok", 1)

    recorder = Recorder()
    ekf = shooting.EKF(PENDULUM, None, Q=np.eye(2) * 1e-4, R=[1e-4], x0=[3.0, 0.0])
    trajectory = shooting.simulate_closed_loop(recorder, PENDULUM.x0, 10, estimator=ekf, measurement_noise=0.01,
                                               progress=False)
    assert np.array_equal(np.array(recorder.seen), trajectory.x_hat[:-1])
    assert not np.allclose(trajectory.x_hat, trajectory.x)
    assert np.array_equal(trajectory.x_hat[0], [3.0, 0.0])


def test_without_an_estimator_nothing_changes():
    ocp = shooting.MultipleShootingOCP(PENDULUM, 10, dt=0.05, Q=[10.0, 0.1], R=[0.01])
    a = shooting.simulate_closed_loop(ocp, PENDULUM.x0, 8, noise_std=0.01, progress=False)
    b = shooting.simulate_closed_loop(ocp, PENDULUM.x0, 8, noise_std=0.01, progress=False, estimator=None,
                                      measurement_noise=0.0)
    assert np.array_equal(a.x, b.x) and np.array_equal(a.u, b.u)
    assert a.x_hat is None and "x_hat" not in a.to_dict() and a.stats()["estimation_error"] is None


def test_seeded_measurement_noise_and_the_process_noise_stream(tmp_path: Path):
    ocp = shooting.MultipleShootingOCP(PENDULUM, 10, dt=0.05, Q=[10.0, 0.1], R=[0.01])

    def run(seed, sensor_noise):
        ekf = shooting.EKF(PENDULUM, None, Q=np.eye(2) * 1e-4, R=[1e-4])
        return shooting.simulate_closed_loop(ocp, PENDULUM.x0, 6, noise_std=0.01, seed=seed, estimator=ekf,
                                             measurement_noise=sensor_noise, progress=False)

    a, b, c = run(3, 0.01), run(3, 0.01), run(4, 0.01)
    assert np.array_equal(a.x_hat, b.x_hat) and np.array_equal(a.x, b.x)
    assert not np.array_equal(a.x_hat, c.x_hat)
    # the trajectory keeps the estimates: JSON, CSV, plots
    data = json.loads(a.save_json(tmp_path / "run.json").read_text())
    assert np.allclose(data["x_hat"], a.x_hat) and data["stats"]["estimation_error"] is not None
    with open(a.save_csv(tmp_path / "run.csv"), newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0][-2:] == ["theta_hat [rad]", "omega_hat [rad/s]"]
    assert np.allclose(np.array(rows[1:], dtype=object)[:, -2:].astype(float), a.x_hat)
    assert (tmp_path / "plots" / "states.png") in a.plot(tmp_path / "plots")


def test_bad_output_feedback_input():
    ocp = shooting.MultipleShootingOCP(PENDULUM, 5, dt=0.05, Q=[10.0, 0.1], R=[0.01])
    ekf = shooting.EKF(PENDULUM, None, Q=np.eye(2) * 1e-4, R=[1e-4])
    with pytest.raises(ValueError, match=r"measurement_noise is given but there is no estimator"):
        shooting.simulate_closed_loop(ocp, PENDULUM.x0, 2, measurement_noise=0.1, progress=False)
    with pytest.raises(ValueError, match=r"measurement_noise has 2 entries but needs 1"):
        shooting.simulate_closed_loop(ocp, PENDULUM.x0, 2, estimator=ekf, measurement_noise=[0.1, 0.1],
                                      progress=False)
    with pytest.raises(ValueError, match=r"measurement_noise must be a standard deviation >= 0"):
        shooting.simulate_closed_loop(ocp, PENDULUM.x0, 2, estimator=ekf, measurement_noise=-1.0, progress=False)
    cart_ekf = shooting.EKF(CARTPOLE, None, Q=np.eye(4) * 1e-4, R=[1e-4, 1e-4])
    with pytest.raises(ValueError, match=r"the estimator's model has nx=4, nu=1 but the controller's model "
                                         r"pendulum nx=2"):
        shooting.simulate_closed_loop(ocp, PENDULUM.x0, 2, estimator=cart_ekf, progress=False)
    with pytest.raises(ValueError, match=r"estimator must have update"):
        shooting.simulate_closed_loop(ocp, PENDULUM.x0, 2, estimator=object(), progress=False)  # type: ignore


def test_a_sweep_closes_its_loops_through_an_ekf() -> None:
    # Issue 39 item 4: sweeps take an estimator and measurement noise. A row is the closed loop that
    # simulate_closed_loop runs with the EKF the sweep describes (`estimator_spec`), recomputed here.
    import casadi as ca

    from shooting.sweeps.worker import estimator_spec

    model = shooting.load_model("pendulum")
    scenario = shooting.default_scenario(model).with_changes(sim_steps=40)
    result = shooting.sweep(scenario, model=model, cases=2, x0_spread=0.02, noise_std=0.001, estimator="ekf",
                            measurement_noise=0.01, workers=1, progress=False)
    assert result.summary["options"]["estimator"] == "ekf" and result.summary["options"]["measurement_noise"] == 0.01
    ocp = shooting.build_ocp(scenario, model)
    spec = estimator_spec(model, np.asarray(scenario.x0, dtype=float), ocp.x_min, ocp.x_max, 0.001, 0.02, 0.01)
    row = result.rows[1]
    with ca.global_unpickle_context():
        import pickle

        H = pickle.loads(spec.sensors)
    ekf = shooting.EKF(model, lambda x, u, p: H(x, u, p), Q=spec.Q, R=spec.R, x0=spec.x0, P0=spec.P0,
                       method=scenario.problem.method, steps=scenario.problem.steps)
    traj = shooting.simulate_closed_loop(shooting.RTIController(ocp), row["x0"], 40, noise_std=0.001,
                                         seed=row["seed"], estimator=ekf, measurement_noise=0.01, progress=False,
                                         plant_method=scenario.plant_method, plant_steps=scenario.plant_steps)
    assert traj.stats(ocp.Q, ocp.R)["closed_loop_cost"] == pytest.approx(row["cost"], rel=1e-9)
    plain = shooting.sweep(scenario, model=model, cases=2, x0_spread=0.02, noise_std=0.001, workers=1,
                           progress=False)
    assert plain.rows[1]["cost"] != pytest.approx(row["cost"], rel=1e-6)  # (the estimate, not the state, fed back)
    with pytest.raises(ValueError, match="measurement_noise needs an estimator"):
        shooting.sweep(scenario, model=model, cases=1, measurement_noise=0.1, workers=1, progress=False)
    with pytest.raises(ValueError, match="estimator must be"):
        shooting.sweep(scenario, model=model, cases=1, estimator="ukf", workers=1, progress=False)
