"""The EKF against an EKF written out here (CasADi's AD Jacobians of the plain step, numpy), its consistency (NEES),
its covariance in ill-conditioned runs, missing measurements and every bad input (issue 39)."""

from __future__ import annotations

import warnings
from pathlib import Path

import casadi as ca
import numpy as np
import pytest
from scipy.stats import chi2

import shooting
from shooting.estimate.kalman import EKF_INPUTS, EKF_OUTPUTS

CARTPOLE = shooting.load_model("cartpole")
PENDULUM = shooting.load_model("pendulum")


class WrittenOutEKF:
    """The textbook EKF: x- = F(x), P- = A P A' + Q with A = dF/dx by AD of the plain step (no sensitivities
    asked of the integrator), K = P- H' S^-1, and the Joseph update, in numpy."""

    def __init__(self, model, h, Q, R, x0, P0, method, dt):
        x, u, p = ca.SX.sym("x", model.nx), ca.SX.sym("u", model.nu), ca.SX.sym("p", model.np)
        F = shooting.build_integrator(model, method, 1, "none")
        args = [x, u, p, 0.0, dt] + ([ca.DM(model.z0)] if model.nz else [])
        x_next = F(*args)[0] if model.nz else F(*args)
        self.F = ca.Function("F", [x, u, p], [x_next, ca.jacobian(x_next, x)])
        y = ca.vertcat(h(x, u, p))
        self.h = ca.Function("h", [x, u, p], [y, ca.jacobian(y, x)])
        self.Q, self.R, self.x, self.P = np.asarray(Q), np.asarray(R), np.array(x0, float), np.array(P0, float)
        self.p = model.p0

    def update(self, y, u):
        x_next, A = (np.array(v, dtype=float) for v in self.F(self.x, u, self.p))
        x_pred, P_pred = x_next.ravel(), A @ self.P @ A.T + self.Q
        y_hat, H = (np.array(v, dtype=float) for v in self.h(x_pred, u, self.p))
        S = H @ P_pred @ H.T + self.R
        K = P_pred @ H.T @ np.linalg.inv(S)
        self.x = x_pred + K @ (np.asarray(y) - y_hat.ravel())
        I_KH = np.eye(len(self.x)) - K @ H
        self.P = I_KH @ P_pred @ I_KH.T + K @ self.R @ K.T
        return self.x, self.P


def _run_against_truth(model, method, samples, seed, Q, R, P0):
    h = shooting.default_measurement(model)
    ekf = shooting.EKF(model, None, Q=Q, R=R, P0=P0, method=method)
    truth = WrittenOutEKF(model, h, Q, R, model.x0, P0, method, model.dt)
    plant = shooting.build_integrator(model, "dopri5", 10, "none")
    rng = np.random.default_rng(seed)
    x = model.x0 + 0.05 * rng.standard_normal(model.nx)
    z = model.z0
    worst_x = worst_P = 0.0
    for k in range(samples):
        u = np.clip(0.5 * model.u_max * np.sin(0.3 * k) if np.isfinite(model.u_max).all() else np.sin(0.3 * k),
                    model.u_min, model.u_max)
        out = plant.call({"x": x, "u": u, "p": model.p0, "t0": 0.0, "dt": model.dt, **({"z0": z} if model.nz else {})})
        x = np.array(out["x_next"], dtype=float).ravel()
        z = np.array(out["z"], dtype=float).ravel() if model.nz else z
        y = np.array(ekf.measurement_function(x, u, model.p0), dtype=float).ravel()
        y = y + np.sqrt(np.diag(truth.R)) * rng.standard_normal(y.size)
        x_hat, P = ekf.update(y, u, t=k * model.dt)
        x_ref, P_ref = truth.update(y, u)
        worst_x = max(worst_x, np.max(np.abs(x_hat - x_ref)) / (1 + np.max(np.abs(x_ref))))
        worst_P = max(worst_P, np.max(np.abs(P - P_ref)) / np.max(np.abs(P_ref)))
        assert np.allclose(P, P.T, rtol=0, atol=0), "P_hat must be exactly symmetric"
    return worst_x, worst_P


@pytest.mark.parametrize(("name", "method"), [("pendulum", "rk4"), ("pendulum", "radau2"), ("cartpole", "rk4"),
                                              ("cartpole", "gauss2"), ("dip", "rk4")])
def test_ekf_matches_a_written_out_ekf_over_a_long_run(name, method):
    model = shooting.load_model(name)
    ny = {"pendulum": 1, "cartpole": 2, "dip": 3}[name]
    samples = 60 if name == "dip" else 200
    worst_x, worst_P = _run_against_truth(model, method, samples, seed=3, Q=np.eye(model.nx) * 1e-4,
                                          R=np.eye(ny) * 1e-4, P0=np.eye(model.nx) * 1e-2)
    assert worst_x < 1e-9, worst_x
    assert worst_P < 1e-9, worst_P


def _nees(model, method, Q, R, runs, samples, seed):
    """Average NEES per sample over independent runs with noise drawn from Q, R and the prior from P0."""
    P0 = np.eye(model.nx) * 1e-3
    ekf = shooting.EKF(model, None, Q=Q, R=R, P0=P0, method=method)
    F = shooting.build_integrator(model, method, 1, "none")
    rng = np.random.default_rng(seed)
    LQ, LR, L0 = (np.linalg.cholesky(C) for C in (Q, R, P0))
    nees = np.zeros((runs, samples))
    for r in range(runs):
        ekf.reset()
        x = model.x0 + L0 @ rng.standard_normal(model.nx)
        for k in range(samples):
            u = np.clip([np.sin(0.2 * k + r)], model.u_min, model.u_max)
            x = np.array(F(x, u, model.p0, 0.0, model.dt), dtype=float).ravel() + LQ @ rng.standard_normal(model.nx)
            y = np.array(ekf.measurement_function(x, u, model.p0), dtype=float).ravel() + LR @ rng.standard_normal(
                R.shape[0])
            x_hat, P = ekf.update(y, u)
            e = x - x_hat
            nees[r, k] = e @ np.linalg.solve(P, e)
    return nees


@pytest.mark.parametrize(("name", "Q", "R"), [
    ("pendulum", np.diag([1e-6, 1e-4]), np.diag([1e-4])),
    ("cartpole", np.diag([1e-6, 1e-6, 1e-4, 1e-4]), np.diag([1e-4, 1e-4])),
    ("vanderpol", np.diag([1e-5, 1e-4]), np.diag([1e-3])),
])
def test_ekf_is_consistent_nees_within_the_chi_square_band(name, Q, R):
    """Bar-Shalom's test: the NEES averaged over M independent runs, M times it chi-square with M nx degrees of
    freedom when the filter's covariance is its actual error's; nearly every sample inside the 99 % band, and the
    overall average inside the band of all M K terms (samples of one run are correlated: a wider 99.9 % band)."""
    model = shooting.load_model(name)
    runs, samples = 30, 80
    nees = _nees(model, "rk4", Q, R, runs, samples, seed=11)
    nx = model.nx
    lo, hi = chi2.ppf([0.005, 0.995], runs * nx) / runs
    inside = np.mean((nees.mean(axis=0) >= lo) & (nees.mean(axis=0) <= hi))
    assert inside >= 0.9, (inside, nees.mean(axis=0))
    dof = runs * samples * nx
    lo_all, hi_all = chi2.ppf([0.0005, 0.9995], dof) / (runs * samples)
    spread = 3 * np.sqrt(2 * nx / runs / samples) * np.sqrt(10)  # ten samples' correlation, generously
    assert lo_all - spread < nees.mean() < hi_all + spread, (nees.mean(), nx)


def test_covariance_stays_symmetric_positive_definite_with_near_perfect_sensors():
    """Precise sensors against a vague prior (variances 1e-8 beside 1e4): P stays exactly symmetric and has a
    Cholesky factor at every sample."""
    ekf = shooting.EKF(CARTPOLE, None, Q=np.eye(4) * 1e-10, R=np.eye(2) * 1e-8, P0=np.eye(4) * 1e4)
    rng = np.random.default_rng(0)
    for k in range(300):
        y = np.array([0.0, np.pi]) + 1e-4 * rng.standard_normal(2)
        _, P = ekf.update(y, [np.sin(k)])
        assert np.array_equal(P, P.T)
        np.linalg.cholesky(P)


def test_the_update_is_one_named_sx_function():
    ekf = shooting.EKF(CARTPOLE, None, Q=np.eye(4) * 1e-4, R=[1e-4, 1e-4])
    F = ekf.update_function
    assert isinstance(F, ca.Function) and F.is_a("SXFunction")
    assert F.name_in() == list(EKF_INPUTS) and F.name_out() == list(EKF_OUTPUTS)
    assert not F.has_free()
    assert F.size_in("P") == (4, 4) and F.size_in("y") == (2, 1) and F.size_out("P_hat") == (4, 4)
    dip = shooting.load_model("dip")
    G = shooting.EKF(dip, None, Q=np.eye(6) * 1e-4, R=np.eye(3) * 1e-4).update_function
    assert G.name_in()[-1] == "z0" and G.name_out()[-1] == "z"


def test_nan_measurement_skips_the_correction_and_says_so():
    ekf = shooting.EKF(PENDULUM, None, Q=np.eye(2) * 1e-4, R=[1e-4])
    twin = shooting.EKF(PENDULUM, None, Q=np.eye(2) * 1e-4, R=[1e-4])
    with pytest.warns(shooting.MissingMeasurementWarning, match=r"y\[0\]|every sensor.*NaN.*skipped"):
        x_hat, P = ekf.update([np.nan], [1.0])
    assert not ekf.last_corrected and np.isfinite(x_hat).all() and np.isfinite(P).all()
    # predicted only: exactly the prediction of a filter told the sensor is missing, P grown by A P A' + Q
    F = shooting.build_integrator(PENDULUM, "rk4", 1, "forward")
    x_pred, A, _ = (np.array(v, dtype=float) for v in F(PENDULUM.x0, [1.0], [], 0.0, PENDULUM.dt))
    assert np.allclose(x_hat, x_pred.ravel(), rtol=0, atol=1e-14)
    assert np.allclose(P, A @ A.T + np.eye(2) * 1e-4, rtol=1e-13, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        twin.update([np.pi], [1.0])
        assert twin.last_corrected


def test_partly_missing_measurement_uses_the_measured_rows_only():
    """A NaN row is skipped exactly: the same as a filter whose sensors are the measured rows."""
    R = np.array([[1e-4, 3e-5], [3e-5, 2e-4]])
    both = shooting.EKF(CARTPOLE, None, Q=np.eye(4) * 1e-4, R=R)
    angle = shooting.EKF(CARTPOLE, lambda x, u, p: x[1], Q=np.eye(4) * 1e-4, R=[[R[1, 1]]], check_observability=False)
    with pytest.warns(shooting.MissingMeasurementWarning, match=r"y\[0\] \(p\)"):
        x1, P1 = both.update([np.nan, 3.1], [2.0])
    x2, P2 = angle.update([3.1], [2.0])
    assert np.allclose(x1, x2, rtol=0, atol=1e-13) and np.allclose(P1, P2, rtol=1e-12, atol=1e-18)
    assert list(both.last_valid) == [False, True]


def test_reset_and_the_prior():
    ekf = shooting.EKF(PENDULUM, None, Q=np.eye(2) * 1e-4, R=[1e-4], x0=[3.0, 0.1], P0=[0.1, 0.2])
    assert np.array_equal(ekf.x_hat, [3.0, 0.1]) and np.array_equal(ekf.P, np.diag([0.1, 0.2]))
    ekf.update([3.0], [0.0])
    ekf.reset()
    assert np.array_equal(ekf.x_hat, [3.0, 0.1]) and np.array_equal(ekf.P, np.diag([0.1, 0.2]))
    ekf.reset(x0=[1.0, 2.0], P0=np.eye(2))
    assert np.array_equal(ekf.x_hat, [1.0, 2.0]) and np.array_equal(ekf.P, np.eye(2))
    default = shooting.EKF(PENDULUM, None, Q=np.eye(2) * 1e-4, R=[1e-4])
    assert np.array_equal(default.x_hat, PENDULUM.x0) and np.array_equal(default.P, np.eye(2))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"Q": np.eye(3)}, r"Q must be a finite \(4, 4\) matrix"),
    ({"Q": [[1, 0.5, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]}, r"Q must be symmetric: Q\[0, 1\]"),
    ({"Q": np.diag([1.0, -1.0, 1.0, 1.0])}, r"Q must be positive semi-definite"),
    ({"R": [1e-4, 0.0]}, r"R must be positive definite.*smallest eigenvalue is 0"),
    ({"R": [[1, 2], [2, 1]]}, r"R must be positive definite"),
    ({"R": [1e-4, np.nan]}, r"R contains NaN or inf"),
    ({"P0": np.zeros((4, 4))}, r"P0 must be positive definite"),
    ({"x0": [0.0, 1.0]}, r"x0 has 2 entries but needs 4"),
    ({"method": "nope"}, r"nope"),
])
def test_bad_covariances_and_priors_are_one_line_errors(kwargs, match):
    args = {"Q": np.eye(4) * 1e-4, "R": [1e-4, 1e-4], **kwargs}
    with pytest.raises(ValueError, match=match) as info:
        shooting.EKF(CARTPOLE, None, **args)
    assert "\n" not in str(info.value)


def test_semidefinite_Q_is_taken():
    ekf = shooting.EKF(CARTPOLE, None, Q=np.diag([0.0, 0.0, 1e-4, 1e-4]), R=[1e-4, 1e-4])
    _, P = ekf.update([0.0, np.pi], [0.0])
    assert np.linalg.eigvalsh(P).min() > 0


def test_wrong_sizes_of_y_and_u_name_them():
    ekf = shooting.EKF(CARTPOLE, None, Q=np.eye(4) * 1e-4, R=[1e-4, 1e-4])
    with pytest.raises(ValueError, match=r"y has 3 entries but the sensors measure 2 \(p, theta\)"):
        ekf.update([0.0, 1.0, 2.0], [0.0])
    with pytest.raises(ValueError, match=r"u has 2 entries but needs 1"):
        ekf.update([0.0, 1.0], [0.0, 1.0])
    with pytest.raises(ValueError, match=r"y contains inf"):
        ekf.update([0.0, np.inf], [0.0])
    with pytest.raises(ValueError, match=r"u contains NaN"):
        ekf.update([0.0, 1.0], [np.nan])
    assert np.array_equal(ekf.x_hat, CARTPOLE.x0), "a refused sample leaves the estimate"


def test_unobservable_sensors_name_the_states_they_cannot_see():
    with pytest.raises(ValueError, match=r"cannot see p, v.*rank 2 < 4.*add a sensor of p") as info:
        shooting.EKF(CARTPOLE, lambda x, u, p: x[1], Q=np.eye(4) * 1e-4, R=[1e-4])
    assert "\n" not in str(info.value)
    quad = shooting.load_model("quadrotor")
    with pytest.raises(ValueError, match=r"cannot see wz, qw, qz"):
        shooting.MHE(quad, lambda x, u, p: x[0:3], 5, Q=np.eye(13) * 1e-4, R=[1e-4] * 3)
    # told to skip the test, it builds
    shooting.EKF(CARTPOLE, lambda x, u, p: x[1], Q=np.eye(4) * 1e-4, R=[1e-4], check_observability=False)


@pytest.mark.parametrize(("measurement", "match"), [
    (lambda x, u, p: ca.MX.sym("a"), r"MX"),
    (lambda x, u, p: CARTPOLE.x[0], r"symbol.*not its arguments x, u, p"),
    (lambda x, u, p: ca.horzcat(x[0], x[1]), r"SX column.*shape \(1, 2\)"),
    (lambda x, u, p: "x", r"must return a casadi.SX column, got str"),
    (lambda x, u, p: 1 / (x[0] - x[0]), r"not finite at the model's nominal point"),
    (lambda x, u, p: x[7], r"measurement raised"),
    ("x[0]", r"measurement must be a function"),
])
def test_bad_measurements(measurement, match):
    with pytest.raises(ValueError, match=match) as info:
        shooting.EKF(CARTPOLE, measurement, Q=np.eye(4) * 1e-4, R=[1e-4], check_observability=False)
    assert "\n" not in str(info.value)


def test_every_built_in_model_names_observable_sensors():
    for name in shooting.model_names():
        model = shooting.load_model(name)
        ekf = shooting.EKF(model, None, Q=np.eye(model.nx) * 1e-4, R=np.ones(7 if name == "quadrotor" else
                                                                           model.nx // 2) * 1e-4,
                           method="radau2" if name == "stiff_chain" else "rk4")
        assert ekf.ny >= 1 and all(s in model.state_names for s in ekf.sensors), (name, ekf.sensors)
    # a built-in made without load_model still has its sensors
    from shooting.models import pendulum

    assert shooting.default_measurement(pendulum.make_model(m=2.0)) is pendulum.measurement


def test_a_model_file_names_its_sensors(tmp_path: Path):
    path = tmp_path / "tank.py"
    path.write_text(
        "import casadi as ca\nimport shooting\n\n"
        "def make_model():\n"
        "    x, u = ca.SX.sym('x', 2), ca.SX.sym('u')\n"
        "    return shooting.Model('tank', x, u, ca.vertcat(x[1], -x[0] + u), x0=[1, 0], dt=0.1)\n\n"
        "def measurement(x, u, p):\n"
        "    return x[0] ** 2\n"
    )
    model = shooting.load_model(str(path))
    ekf = shooting.EKF(model, None, Q=np.eye(2) * 1e-4, R=[1e-4])
    assert float(ekf.measurement_function([3.0, 0.0], [0.0], [])) == 9.0
    bare = shooting.Model("bare", ca.SX.sym("x"), ca.SX.sym("u"), ca.SX(0), dt=0.1)
    with pytest.raises(ValueError, match=r"model bare names no sensors: pass measurement"):
        shooting.EKF(bare, None, Q=[1e-4], R=[1e-4])
    with pytest.raises(ValueError, match=r"dt is required"):
        shooting.EKF(shooting.Model("nodt", ca.SX.sym("x"), ca.SX.sym("u"), ca.SX(0)), lambda x, u, p: x,
                     Q=[1e-4], R=[1e-4])


def _float32_filter(joseph: bool, R: float, Q: float, samples: int = 1000) -> int:
    """The cart-pole's EKF in numpy float32 (A from the step, rounded), short or Joseph form: the samples whose P
    has no Cholesky factor."""
    f = np.float32
    F = shooting.build_integrator(CARTPOLE, "rk4", 1, "forward")
    H = np.eye(2, 4, dtype=f)
    x, P = CARTPOLE.x0.astype(f), (np.eye(4) * 1e2).astype(f)
    Rm, Qm, I4 = (np.eye(2) * R).astype(f), (np.eye(4) * Q).astype(f), np.eye(4, dtype=f)
    rng, failures = np.random.default_rng(0), 0
    for k in range(samples):
        x_next, A, _ = F(x.astype(float), [np.sin(0.1 * k)], [], 0.0, CARTPOLE.dt)
        A, x = np.array(A, f), np.array(x_next, f).ravel()
        P = A @ P @ A.T + Qm
        P = (P + P.T) / f(2) if joseph else P
        K = np.linalg.solve(H @ P @ H.T + Rm, H @ P).T.astype(f)
        x = x + K @ (x[:2] + f(1e-4) * rng.standard_normal(2).astype(f) - H @ x)
        if joseph:
            P = (I4 - K @ H) @ P @ (I4 - K @ H).T + K @ Rm @ K.T
            P = (P + P.T) / f(2)
        else:
            P = (I4 - K @ H) @ P
        try:
            np.linalg.cholesky(P.astype(float))
        except np.linalg.LinAlgError:
            failures += 1
    return failures


def test_joseph_form_keeps_a_cholesky_factor_in_float_where_the_short_form_does_not():
    """Why the update is Joseph's (measured, float32 like the C on a Cortex-M4): precise sensors against a vague
    prior make the short form (I - K H) P- indefinite within a few samples; Joseph's, symmetrised, never."""
    assert _float32_filter(joseph=True, R=1e-6, Q=1e-8) == 0
    assert _float32_filter(joseph=False, R=1e-6, Q=1e-8) > 900
