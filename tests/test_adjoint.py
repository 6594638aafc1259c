"""Adjoint and second-order sensitivities of the discrete step (`sensitivities="adjoint"`, `"second-order"`).

Independent truth: the forward mode's A and B (themselves checked against finite differences and CasADi's AD
in test_integrator.py) for lam' A and lam' B; CasADi's AD of lam' A and lam' B (the forward step's graph,
differentiated once more) and CasADi's Hessian of lam' x_next for H; the compiled C against CasADi.
"""

from __future__ import annotations

from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.codegen import export_integrator

# (model, method, substeps): explicit, embedded, implicit (collocation), DAE; unrolled (<= 4 substeps) and
# doubled (more); models with parameters (vanderpol)
CASES = [
    ("cartpole", "rk4", 1), ("cartpole", "rk4", 6), ("cartpole", "radau2", 1), ("cartpole", "gauss2", 3),
    ("pendulum", "dopri5", 2), ("pendulum", "radau3", 5), ("vanderpol", "kutta3", 3), ("vanderpol", "gauss2", 7),
    ("quadrotor", "rk4", 2), ("two_link_arm", "heun", 5), ("stiff_chain", "rk4", 2), ("stiff_chain", "radau2", 1),
    ("dip", "rk4", 3), ("dip", "radau2", 1), ("dip", "implicit_euler", 6),
]


def _point(m: shooting.Model, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.asarray(m.x0, float) + 0.2 * rng.standard_normal(m.nx)
    u = np.asarray(m.u0, float) + 0.2 * rng.standard_normal(m.nu)
    p = np.asarray(m.p0, float) * (1 + 0.1 * rng.standard_normal(m.np))  # (not the nominal parameters)
    args = {"x": x, "u": u, "p": p, "t0": np.array(0.3), "dt": np.array(m.dt or 0.05)}
    if m.nz:
        args["z0"] = m.consistent_z(x, u, p)
    return args


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    a = a.reshape(b.shape) if a.size == b.size else a
    return float(np.abs(a - b).max() / max(1.0, float(np.abs(b).max())))


@pytest.mark.parametrize("model, method, steps", CASES)
def test_adjoint_and_second_order_against_the_forward_mode_and_casadi_ad(model: str, method: str,
                                                                         steps: int) -> None:
    m = shooting.load_model(model)
    args = _point(m)
    lam = np.random.default_rng(7).standard_normal(m.nx)
    forward = shooting.build_integrator(m, method, steps, "forward", newton_iterations=12)
    adjoint = shooting.build_integrator(m, method, steps, "adjoint", newton_iterations=12)
    second = shooting.build_integrator(m, method, steps, "second-order", newton_iterations=12)
    assert adjoint.name_in() == ["x", "u", "p", "t0", "dt", "lam"] + (["z0"] if m.nz else [])
    assert adjoint.name_out()[:3] == ["x_next", "lam_x", "lam_u"]
    assert second.name_out()[:4] == ["x_next", "A", "B", "H"]
    rf, ra, rs = forward(**args), adjoint(**args, lam=lam), second(**args, lam=lam)
    A, B = np.array(rf["A"]), np.array(rf["B"])
    # lam' A and lam' B: the same derivatives by another route, to rounding
    assert _rel(ra["lam_x"], A.T @ lam) < 1e-12
    assert _rel(ra["lam_u"], B.T @ lam) < 1e-12
    for key in ("x_next", *(["err"] if "err" in rf else []), *(["z"] if m.nz else [])):
        assert _rel(ra[key], rf[key]) < 1e-13 and _rel(rs[key], rf[key]) < 1e-13
    assert _rel(rs["A"], A) < 1e-12 and _rel(rs["B"], B) < 1e-12
    # H: CasADi's AD of [A' lam; B' lam] through the forward step (its stages' Newton iterations converged)
    xs, us = ca.MX.sym("x", m.nx), ca.MX.sym("u", m.nu)
    r = forward(**{**args, "x": xs, "u": us})
    grad = ca.vertcat(ca.mtimes(r["A"].T, lam), ca.mtimes(r["B"].T, lam))
    w = ca.vertcat(xs, us)
    H_ref = np.array(ca.Function("H", [xs, us], [ca.jacobian(grad, w)])(args["x"], args["u"]))
    H = np.array(rs["H"])
    assert H.shape == (m.nx + m.nu, m.nx + m.nu)
    assert np.abs(H - H_ref).max() <= 1e-9 * np.abs(H_ref).max()
    assert np.array_equal(H, H.T)


@pytest.mark.parametrize("model, method", [("cartpole", "rk4"), ("vanderpol", "dopri5"), ("two_link_arm", "ralston")])
def test_explicit_hessian_equals_casadis_hessian_of_the_unrolled_step(model: str, method: str) -> None:
    m = shooting.load_model(model)
    args = _point(m, 3)
    lam = np.random.default_rng(4).standard_normal(m.nx)
    plain = shooting.build_integrator(m, method, 3, "none")
    xs, us = ca.SX.sym("x", m.nx), ca.SX.sym("u", m.nu)
    w = ca.vertcat(xs, us)
    value = ca.dot(ca.DM(lam), plain.call([xs, us, args["p"], args["t0"], args["dt"]])[0])
    H_ref = np.array(ca.Function("H", [xs, us], [ca.hessian(value, w)[0]])(args["x"], args["u"]))
    H = np.array(shooting.build_integrator(m, method, 3, "second-order")(**args, lam=lam)["H"])
    assert np.abs(H - H_ref).max() <= 1e-12 * np.abs(H_ref).max()


@pytest.mark.parametrize("sens", ["adjoint", "second-order"])
@pytest.mark.parametrize("model, method, steps", [("cartpole", "rk4", 13), ("dip", "radau2", 5),
                                                  ("pendulum", "dopri5", 64)])
def test_doubled_equals_unrolled(model: str, method: str, steps: int, sens: str) -> None:
    m = shooting.load_model(model)
    args = _point(m, 5)
    lam = np.random.default_rng(2).standard_normal(m.nx)
    flat = shooting.build_integrator(m, method, steps, sens, unroll=True)(**args, lam=lam)
    doubled = shooting.build_integrator(m, method, steps, sens, unroll=False)
    hosted = shooting.build_integrator(m, method, steps, sens, unroll=4)(**args, lam=lam)
    for key, value in doubled(**args, lam=lam).items():
        assert _rel(value, flat[key]) < 1e-12, key
        assert _rel(hosted[key], flat[key]) < 1e-12, key


def test_the_adjoint_is_cheaper_than_the_forward_mode_for_many_states() -> None:
    # The point of the reverse mode: lam' [A B] for one lam costs about one step plus one reverse sweep,
    # the forward mode nx + nu directions (21 states of the chain).
    m = shooting.load_model("stiff_chain")
    fwd = shooting.build_integrator(m, "rk4", 2, "forward")
    adj = shooting.build_integrator(m, "rk4", 2, "adjoint")
    assert adj.n_instructions() < 0.5 * fwd.n_instructions()


@pytest.mark.parametrize("real", ["double", "float"])
@pytest.mark.parametrize("model, method, steps, sens", [("cartpole", "rk4", 6, "second-order"),
                                                        ("dip", "radau2", 1, "adjoint"),
                                                        ("vanderpol", "gauss2", 2, "second-order")])
def test_exported_c_matches_casadi(tmp_path: Path, model: str, method: str, steps: int, sens: str,
                                   real: str) -> None:
    m = shooting.load_model(model)
    F = shooting.build_integrator(m, method, steps, sens)
    report = export_integrator(F, tmp_path / "out", real=real, check=True)  # type: ignore[arg-type]
    assert report.ok, report.lines
    names = ["lam_x", "lam_u"] if sens == "adjoint" else ["A", "B", "H"]
    for name in names:
        assert name in report.errors
        # double to rounding; float: the rounding estimate's allowance (a few 1e-6 relative at most)
        assert report.errors[name] <= (1e-13 if real == "double" else 1e-5)


def test_unknown_sensitivities_name_the_choices() -> None:
    m = shooting.load_model("pendulum")
    with pytest.raises(ValueError, match="second-order"):
        shooting.build_integrator(m, "rk4", 1, "hessian")  # type: ignore[arg-type]


@pytest.mark.parametrize("method, steps", [("rk4", 3), ("rk4", 11), ("radau2", 6)])
def test_time_varying_parametric_model(method: str, steps: int) -> None:
    # Every stage's time (t0 + (n + c_i) h, also in the doubled levels' second halves) and the parameters
    # enter the derivatives: a forced nonlinear oscillator whose forcing and stiffness depend on t and p.
    x, u, p, t = ca.SX.sym("x", 2), ca.SX.sym("u"), ca.SX.sym("p", 2), ca.SX.sym("t")
    f = ca.vertcat(x[1], -p[0] * ca.sin(x[0]) - p[1] * x[1] * x[0] ** 2 + ca.cos(3 * t) * u + ca.sin(t) * x[0] * u)
    m = shooting.Model("forced", x, u, f, p=p, t=t, x0=[0.4, -0.2], p0=[2.0, 0.3], dt=0.1)
    args = {"x": np.array([0.7, -0.4]), "u": np.array([0.8]), "p": np.array([1.7, 0.4]), "t0": np.array(1.3),
            "dt": np.array(0.4)}
    lam = np.array([0.6, -1.1])
    rf = shooting.build_integrator(m, method, steps, "forward", newton_iterations=12)(**args)
    rs = shooting.build_integrator(m, method, steps, "second-order", newton_iterations=12)(**args, lam=lam)
    ra = shooting.build_integrator(m, method, steps, "adjoint", newton_iterations=12)(**args, lam=lam)
    assert _rel(ra["lam_x"], np.array(rf["A"]).T @ lam) < 1e-12
    assert _rel(ra["lam_u"], np.array(rf["B"]).T @ lam) < 1e-12
    # H by central differences of the adjoint's gradient (O(eps^2) truncation, eps = 1e-5: about 1e-9)
    adj = shooting.build_integrator(m, method, steps, "adjoint", newton_iterations=12)
    w = np.concatenate([args["x"], args["u"]])
    eps, H_fd = 1e-5, np.zeros((3, 3))
    for j in range(3):
        cols = []
        for sign in (1, -1):
            v = w.copy()
            v[j] += sign * eps
            r = adj(**{**args, "x": v[:2], "u": v[2:]}, lam=lam)
            cols.append(np.concatenate([np.array(r["lam_x"]).ravel(), np.array(r["lam_u"]).ravel()]))
        H_fd[:, j] = (cols[0] - cols[1]) / (2 * eps)
    H = np.array(rs["H"])
    assert np.abs(H - H_fd).max() <= 1e-7 * max(1.0, np.abs(H).max())


def test_cli_exports_an_adjoint_step(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "shooting.cli", "integrator", "--model", "cartpole", "--method",
                           "rk4", "--steps", "3", "--sensitivities", "adjoint", "--check", "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["sensitivities"] == "adjoint"
    assert set(manifest["inputs"]) == {"x", "u", "p", "t0", "dt", "lam"}
    assert set(manifest["outputs"]) == {"x_next", "lam_x", "lam_u"}
    assert manifest["check_host"]["passed"]
