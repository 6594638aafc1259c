"""check_stability against the discrete map itself: the spectral radius of A = dx_next/dx."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import shooting


def _spectral_radius(model: shooting.Model, method: str, steps: int, x: np.ndarray) -> float:
    """rho(A) of the step at an equilibrium: the growth of a small perturbation over one interval."""
    F = shooting.build_integrator(model, method, steps)
    A = np.array(F(x, model.u0, model.p0, 0.0, model.dt)[1])
    return float(np.max(np.abs(np.linalg.eigvals(A))))


@pytest.mark.parametrize("method", ["euler", "rk4", "dopri5"])
def test_min_steps_is_where_the_discrete_map_stops_growing(method):
    """The stiff chain is linear at rest: the step's A has eigenvalues R(h lambda)^N exactly."""
    model = shooting.load_model("stiff_chain")
    rest = np.zeros(model.nx)
    report = shooting.check_stability(model, method, 1, x=rest)
    assert not report.stable and report.min_steps > 1
    assert report.worst_h_lambda.real < -2 and f"--steps {report.min_steps}" in report.message
    n = report.min_steps
    assert _spectral_radius(model, method, n, rest) <= 1.0 + 1e-9
    assert _spectral_radius(model, method, n - 1, rest) > 1.0
    assert shooting.check_stability(model, method, n, x=rest).stable
    assert not shooting.check_stability(model, method, n - 1, x=rest).stable


def test_a_stable_methods_and_growing_modes():
    chain = shooting.load_model("stiff_chain")
    for method in ("radau2", "gauss2", "implicit_euler"):
        report = shooting.check_stability(chain, method)
        assert report.stable and report.min_steps == 1 and report.amplification <= 1.0
    # Van der Pol at the origin is unstable itself (Re lambda > 0): not the method's fault.
    vdp = shooting.load_model("vanderpol")
    report = shooting.check_stability(vdp, "rk4", x=[0.0, 0.0])
    assert report.stable and "unstable here" in report.message
    assert np.all(report.eigenvalues.real > 0)


def test_undamped_oscillation_under_explicit_euler_has_no_cure():
    """The hanging cart-pole's pendulum mode is undamped: Euler grows it for any number of substeps."""
    model = shooting.load_model("cartpole")
    report = shooting.check_stability(model, "euler")
    assert not report.stable and report.min_steps == 0 and "A-stable" in report.message
    assert shooting.check_stability(model, "rk4").stable  # RK4 damps slightly on the imaginary axis
    with pytest.raises(ValueError, match="no nominal dt"):
        x = shooting.Model("nodt", model.x, model.u, model.xdot)
        shooting.check_stability(x, "rk4")


def test_cli_warns_and_goes_on(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "shooting.cli", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)

    proc = run("integrator", "--model", "stiff_chain", "--out", "a", "-q")
    assert proc.returncode == 0 and (tmp_path / "a").exists()
    assert "warning: rk4 x 1 at dt = 0.05 s is outside its stability region" in proc.stderr
    assert "--steps 19" in proc.stderr
    proc = run("integrator", "--model", "stiff_chain", "--out", "b", "-q", "--no-lint")
    assert proc.returncode == 0 and proc.stderr == ""
    proc = run("integrator", "--model", "stiff_chain", "--method", "radau2", "--out", "c", "-q")
    assert proc.returncode == 0 and "warning" not in proc.stderr
