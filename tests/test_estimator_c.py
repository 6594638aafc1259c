"""The EKF as C (issue 39 item 3): `export_estimator`, `load_estimator`, `shooting-codegen estimator`.

Truth: the Python `EKF` (itself checked against an EKF written out with CasADi's AD Jacobians in test_ekf.py) on
the same measurements, sample after sample over long runs: the C in double to rounding (1e-12), in float within
what single precision allows over the run with its covariance symmetric positive definite throughout; every
built-in model's float C on the emulated Cortex-M4 against CasADi within each output's derived allowance.
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
from support import needs_m4


def _ekf(name: str, **kw: object) -> shooting.EKF:
    model = shooting.load_model(name)
    h = shooting.default_measurement(model)
    ny = int(ca.SX(h(ca.SX.sym("x", model.nx), ca.SX.sym("u", model.nu), ca.SX.sym("p", model.np))).size1())
    problem = shooting.default_scenario(model).problem  # (its step: a stiff model's implicit tableau)
    return shooting.EKF(model, None, Q=1e-4 * np.eye(model.nx), R=1e-3 * np.eye(ny), P0=0.1 * np.eye(model.nx),
                        method=problem.method, steps=problem.steps, **kw)  # type: ignore[arg-type]


def _run(ekf: shooting.EKF, est: object, samples: int, seed: int = 1, missing: bool = True
         ) -> tuple[float, float, float]:
    """Both filters on one simulated run: the largest relative differences of x_hat and P, and the C's smallest
    covariance eigenvalue."""
    model, problem = ekf.model, ekf.problem
    rng = np.random.default_rng(seed)
    x = problem.x0.copy()
    dx = dP = 0.0
    smallest = np.inf
    for k in range(samples):
        u = model.u0 + 0.1 * rng.standard_normal(model.nu)
        x = np.array(problem.advance(x, u, model.p0, k * ekf.dt)["x_next"], dtype=float).reshape(-1)
        y = np.array(problem.h(x, u, model.p0), dtype=float).reshape(-1) + 0.03 * rng.standard_normal(ekf.ny)
        if missing and k % 11 == 10:
            y[0] = np.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            xa, Pa = ekf.update(y, u, k * ekf.dt)
            xb, Pb = est.update(y, u, k * ekf.dt)  # type: ignore[attr-defined]
        dx = max(dx, float(np.abs(xa - xb).max() / (1 + np.abs(xa).max())))
        dP = max(dP, float(np.abs(Pa - Pb).max() / np.abs(Pa).max()))
        assert np.array_equal(Pb, Pb.T)  # (symmetrised in the C)
        smallest = min(smallest, float(np.linalg.eigvalsh(Pb).min()))
    return dx, dP, smallest


@pytest.mark.parametrize("name", ["pendulum", "cartpole", "dip"])
def test_the_double_c_is_the_python_ekf(name: str, tmp_path: Path) -> None:
    report = export_estimator(_ekf(name), tmp_path / "c", check=True)
    assert report.ok, report.problems
    est = load_estimator(tmp_path / "c")
    assert (est.nx, est.ny, est.real) == (_ekf(name).model.nx, _ekf(name).ny, "double")
    dx, dP, smallest = _run(_ekf(name), est, 300)
    assert dx <= 1e-12 and dP <= 1e-12 and smallest > 0
    est.reset()
    np.testing.assert_array_equal(est.x_hat, _ekf(name).x_hat)


def test_the_float_c_over_a_long_run(tmp_path: Path) -> None:
    # Single precision over 2,000 samples: the Joseph form keeps P symmetric positive definite; the estimate
    # follows double's within a few thousand units of float's roundoff (6e-8) relative, the filter's own
    # contraction keeping rounding from growing.
    ekf = _ekf("cartpole")
    report = export_estimator(ekf, tmp_path / "f", real="float", check=True)
    assert report.ok, report.problems
    dx, dP, smallest = _run(_ekf("cartpole"), load_estimator(tmp_path / "f"), 2000)
    assert smallest > 0 and dx < 1e-4 and dP < 1e-4


@needs_m4
@pytest.mark.parametrize("name", shooting.model_names())
def test_every_builtin_models_float_ekf_on_the_board(name: str, tmp_path: Path) -> None:
    report = export_estimator(_ekf(name), tmp_path / name, real="float", target="cortex-m4", check=True)
    assert report.ok, (name, report.problems)
    manifest = report.manifest
    assert manifest["check_cortex_m4"]["passed"] and manifest["cortex_m4_cycles"]["updates"] == 5
    assert manifest["cortex_m4_cycles"]["cycles_per_update_median"] > 100
    assert report.double_symbols == () and "cycles median" in report.lines[-1]


def test_bad_input(tmp_path: Path) -> None:
    ekf = _ekf("pendulum")
    with pytest.raises(ValueError, match="estimator must be"):
        export_estimator("ekf", tmp_path / "m")  # type: ignore[arg-type]
    assert export_estimator(ekf, tmp_path / "c").ok
    est = load_estimator(tmp_path / "c")
    with pytest.raises(ValueError, match="y has 2 entries"):
        est.update([0.0, 1.0], [0.0])
    with pytest.raises(ValueError, match="u"):
        est.update([0.0], [0.0, 1.0])
    with pytest.warns(shooting.MissingMeasurementWarning):
        x_hat, _ = est.update([np.nan], [0.0])
    assert np.isfinite(x_hat).all() and not est.last_corrected
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    manifest["estimator"]["nx"] = 3
    (tmp_path / "c" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="compiled C"):
        load_estimator(tmp_path / "c")
    with pytest.raises(ValueError, match="not an estimator export"):
        shooting.codegen.export_integrator(shooting.build_integrator(ekf.model, "rk4", 1), tmp_path / "i")
        load_estimator(tmp_path / "i")


def test_cli(tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "shooting", "estimator", *args], capture_output=True,
                              text=True, cwd=tmp_path, timeout=600)

    ok = cli("--model", "pendulum", "--check", "--Q", "1e-4,1e-3", "--R", "1e-2", "-q", "--out", "e")
    assert ok.returncode == 0, ok.stderr
    est = json.loads((tmp_path / "e" / "manifest.json").read_text())["estimator"]
    assert est["Q"] == [[1e-4, 0.0], [0.0, 1e-3]] and est["R"] == [[1e-2]] and est["sensors"] == ["theta"]
    for args, words in ((["--kind", "mhe", "--horizon", "0"], "--horizon"), (["--R", "1,2"], "--R"),
                        (["--horizon", "5"], "--horizon has no effect")):
        bad = cli("--model", "pendulum", *args, "--out", "x")
        assert bad.returncode == 2 and words in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
    assert not (tmp_path / "x").exists()
