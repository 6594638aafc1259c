"""The real-time MHE (issue 39 item 2): one Gauss-Newton QP step per sample, its numpy twin and its C.

Truth, independent of the code under test:
- on a linear model with linear sensors one Gauss-Newton step is the minimiser, so the twin's window equals
  `shooting.MHE`'s (IPOPT, itself checked against a batch NLP written out in test_mhe.py) at every sample, with a
  state bound active too;
- the C against the twin over runs it was not checked on, within the allowance derived from the arithmetic
  (`rounding_allowance`: the twin perturbed at the unit roundoff, its QP stopped an iteration early), in double
  and float, on the host and on the emulated Cortex-M4 for every built-in model;
- a C with one wrong line (the noise's gradient dropped) fails the export's own check and writes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.codegen import export_estimator, load_estimator
from shooting.estimate import rt_mhe, rt_mhe_c
from shooting.estimate.export_mhe import rounding_allowance
from shooting.estimate.problem import Sample
from shooting.estimate.rt_mhe import RealTimeMHE
from support import needs_m4

BUILT_IN = ("cartpole", "dip", "pendulum", "quadrotor", "stiff_chain", "two_link_arm", "vanderpol")


def _cart(bounded: bool) -> shooting.Model:
    x, u = ca.SX.sym("x", 2), ca.SX.sym("u")
    if bounded:
        return shooting.Model("cartb", x, u, ca.vertcat(x[1], u), x0=[0.02, 0.0], x_min=[0.0, -np.inf],
                              x_max=[np.inf, np.inf], dt=0.1)
    return shooting.Model("cart", x, u, ca.vertcat(x[1], u), x0=[0.0, 0.0], dt=0.1)


def _data(model: shooting.Model, samples: int, seed: int, u: float) -> list[tuple[np.ndarray, np.ndarray]]:
    F = shooting.build_integrator(model, "rk4", 1, "none")
    rng = np.random.default_rng(seed)
    x, out = model.x0.copy(), []
    for k in range(samples):
        uk = np.array([u * np.cos(0.3 * k)])
        x = np.clip(np.array(F(x, uk, model.p0, k * model.dt, model.dt), dtype=float).ravel(), model.x_min,
                    model.x_max)
        out.append((uk, np.array([x[0] + 0.05 * rng.standard_normal()])))
    return out


@pytest.mark.parametrize(("bounded", "horizon"), [(False, 1), (False, 5), (True, 6)])
def test_one_gauss_newton_step_is_the_mhe_on_a_linear_model(bounded: bool, horizon: int) -> None:
    model = _cart(bounded)
    h = lambda x, u, p: x[0]  # noqa: E731
    Q, R, P0 = np.diag([1e-4, 1e-3]), np.diag([1e-2]), np.diag([0.5, 0.5])
    mhe = shooting.MHE(model, h, horizon, Q=Q, R=R, P0=P0)
    rt = RealTimeMHE(model, h, horizon, Q=Q, R=R, P0=P0)
    worst, lowest, iterations = 0.0, np.inf, []
    for k, (u, y) in enumerate(_data(model, 30, seed=3, u=-0.05 if bounded else 1.0)):
        x_ipopt, P_ipopt = mhe.update(y, u, t=k * 0.1)
        x_rt, P_rt = rt.update(y, u, t=k * 0.1)
        assert rt.last_status == 0 and np.array_equal(P_rt, P_ipopt)  # (the same arrival cost, bit for bit)
        iterations.append(rt.last_iterations)
        worst = max(worst, float(np.abs(mhe.window_states - rt.window_states).max()))
        lowest = min(lowest, float(rt.window_states[:, 0].min()))
    # IPOPT at tol 1e-10 relaxes bounds by ~1e-8: the active bound's case is that far apart, the others to rounding
    assert worst < (1e-6 if bounded else 1e-12), worst
    if bounded:
        assert 0.0 <= lowest <= 1e-12  # the bound is active (an interior point's step stops just inside it)
    else:  # no bound: after the first sample the last QP's active set (none) holds, one Newton step each
        assert iterations[1:] == [1] * (len(iterations) - 1), iterations


def _mhe(name: str, horizon: int) -> shooting.MHE:
    model = shooting.load_model(name)
    h = shooting.default_measurement(model)
    ny = int(ca.SX(h(ca.SX.sym("x", model.nx), ca.SX.sym("u", model.nu), ca.SX.sym("p", model.np))).size1())
    problem = shooting.default_scenario(model).problem  # (its step: a stiff model's implicit tableau)
    return shooting.MHE(model, None, horizon, Q=1e-4 * np.eye(model.nx), R=1e-3 * np.eye(ny),
                        P0=0.1 * np.eye(model.nx), method=problem.method, steps=problem.steps)


def _loaded_against_twin(out: Path, mhe: shooting.MHE, real: str, seed: int) -> float:
    """The loaded C and a fresh twin on a run the check did not see: the worst error over its allowance."""
    rt = RealTimeMHE.of(mhe.problem, mhe.horizon)
    samples = rt.problem.simulated_run(3 * mhe.horizon + 4, seed=seed, in_bounds=True)
    est = load_estimator(out)
    reference, loaded = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", shooting.MissingMeasurementWarning)
        for s in samples:
            y = np.where(s.valid > 0, s.y, np.nan)
            reference.append(rt.update(y, s.u, s.t)[0])
            loaded.append(est.update(y, s.u, s.t)[0])
    ref = np.array(reference)
    allowed = rounding_allowance(rt, samples, ref, real)  # type: ignore[arg-type]
    return float((np.abs(np.array(loaded) - ref) / allowed).max())


@pytest.mark.parametrize(("name", "real"), [("cartpole", "double"), ("cartpole", "float"), ("pendulum", "double")])
def test_the_c_is_its_twin_on_a_run_it_was_not_checked_on(name: str, real: str, tmp_path: Path) -> None:
    mhe = _mhe(name, 6)
    report = export_estimator(mhe, tmp_path / name, real=real, check=True)  # type: ignore[arg-type]
    assert report.ok, report.problems
    manifest = report.manifest
    assert manifest["estimator"]["type"] == "mhe" and manifest["estimator"]["horizon"] == 6
    assert manifest["check_host"]["worst_ratio"] <= 1.0
    assert sorted(report.files) == sorted(tmp_path / name / f for f in
                                          ("Makefile", f"{name}_mhe.c", f"{name}_mhe.h", "manifest.json"))
    assert _loaded_against_twin(tmp_path / name, mhe, real, seed=11) <= 1.0


@pytest.mark.slow
@needs_m4
@pytest.mark.parametrize("name", BUILT_IN)
def test_every_built_in_models_mhe_passes_its_float_check_on_the_board(name: str, tmp_path: Path) -> None:
    # (the quadrotor's board run, a minute of tracing, is scripts/bench_estimator.py's; here its float C runs on
    # the host: the suite's time)
    target = "host" if name == "quadrotor" else "cortex-m4"
    report = export_estimator(_mhe(name, 3), tmp_path / name, real="float", target=target, check=True)
    assert report.ok, (name, report.problems)
    manifest = report.manifest
    assert manifest["check_host"]["worst_ratio"] <= 1.0
    if target == "cortex-m4":
        assert manifest["check_cortex_m4"]["worst_ratio"] <= 1.0
        assert manifest["cortex_m4_cycles"]["updates"] == manifest["check_cortex_m4"]["samples"] >= 20
        assert report.double_symbols == () and report.flash and report.ram


def test_a_wrong_line_of_c_fails_the_check_and_writes_nothing(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    good = rt_mhe_c.rt_mhe_files

    def broken(rt: RealTimeMHE, name: str, real: str) -> dict[str, str]:
        files = good(rt, name, real)  # type: ignore[arg-type]
        line = "m->r[k * NX + i] = m->xi[j * NX + i];"
        assert line in files[f"{name}.c"]
        return {**files, f"{name}.c": files[f"{name}.c"].replace(line, "m->r[k * NX + i] = 0;")}

    monkeypatch.setattr("shooting.estimate.export_mhe.rt_mhe_files", broken)
    report = export_estimator(_mhe("pendulum", 4), tmp_path / "bad", check=True)
    assert not report.ok and "FAILED" in report.problems[0] and not (tmp_path / "bad").exists()


def test_loaded_mhe_takes_missing_sensors_and_refuses_bad_input(tmp_path: Path) -> None:
    mhe = _mhe("cartpole", 4)
    assert export_estimator(mhe, tmp_path / "m").ok
    est = load_estimator(tmp_path / "m")
    assert isinstance(est, shooting.estimate.HostRealTimeMHE) and est.horizon == 4
    with pytest.raises(ValueError, match="y has 1 entries"):
        est.update([0.0], [0.0])
    with pytest.raises(ValueError, match="inf"):
        est.update([0.0, np.inf], [0.0])
    with pytest.raises(ValueError, match="u"):
        est.update([0.0, 3.1], [0.0, 1.0])
    with pytest.warns(shooting.MissingMeasurementWarning, match=r"y\[1\]"):
        x_hat, _ = est.update([0.0, np.nan], [0.0])
    assert np.isfinite(x_hat).all() and not est.last_corrected
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", shooting.MissingMeasurementWarning)
        for k in range(3):  # the cart-pole far from its bound: the C's warm start takes one QP iteration too
            est.update([0.01 * k, 3.1], [0.0], t=0.05 * (k + 1))
            assert est.last_status == 0 and est.last_iterations == 1
    est.reset()
    assert np.array_equal(est.x_hat, mhe.problem.x0) and np.array_equal(est.P, mhe.problem.P0)
    # the C itself takes a non-finite entry as a missing sensor, whatever its valid flag says (a caller's bug
    # must not poison the window nor, a window later, the arrival cost)
    c = rt_mhe_c.HostMHE(tmp_path / "m", "cartpole_mhe", "double", 4, 1, 2, 0)
    twin = RealTimeMHE.of(mhe.problem, 4)
    for k in range(7):
        y = np.array([0.01 * k, np.nan if k == 2 else 3.1])
        x_c, _ = c.update_sample(Sample(y, np.ones(2), np.zeros(1), np.zeros(0), 0.05 * k))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", shooting.MissingMeasurementWarning)
            x_twin, _ = twin.update(y, [0.0], 0.05 * k)
        assert c.last_status == 0 and np.abs(x_c - x_twin).max() < 1e-12, (k, x_c, x_twin)
    est.reset(x0=[0.1, 3.0, 0.0, 0.0])
    x_hat, _ = est.update([0.1, 3.0], [0.0])
    assert abs(x_hat[0] - 0.1) < 0.01 and abs(x_hat[1] - 3.0) < 0.01


def test_cli_exports_an_mhe(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "shooting", "estimator", "--model", "pendulum", "--kind", "mhe",
                          "--horizon", "5", "--check", "-q", "--out", "m"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["estimator"]["type"] == "mhe" and manifest["estimator"]["horizon"] == 5
    assert manifest["name"] == "pendulum_mhe" and "within" in run.stdout


def test_a_failed_arrival_update_keeps_the_prior_and_the_window_moves_on() -> None:
    model = _cart(False)
    h = lambda x, u, p: x[0]  # noqa: E731
    rt = RealTimeMHE(model, h, 3, Q=np.diag([1e-4, 1e-3]), R=np.diag([1e-2]), P0=np.diag([0.5, 0.5]))
    exact, broken = rt.function_evaluator, {"left": 1}

    def once_nan(F: ca.Function, args: list) -> list:  # the arrival's first update comes out NaN
        outs = exact(F, args)
        if F is rt.update_function and broken["left"]:
            broken["left"] -= 1
            return [np.full_like(o, np.nan) for o in outs]
        return outs

    rt.function_evaluator = once_nan
    statuses, priors = [], []
    for k, (u, y) in enumerate(_data(model, 8, seed=1, u=1.0)):
        rt.update(y, u, t=k * 0.1)
        statuses.append(rt.last_status)
        priors.append(rt.P.copy())
    # samples 0-2 fill the window; sample 3's arrival update fails (its prior kept, the window moved: status FAILED),
    # sample 4's succeeds
    assert statuses == [0, 0, 0, rt_mhe.FAILED, 0, 0, 0, 0], statuses
    assert np.array_equal(priors[3], priors[2]) and not np.array_equal(priors[4], priors[3])
    assert rt.window_states.shape == (4, 2) and np.isfinite(rt.window_states).all()
