"""Built-in models: consistency, and each model's physics against an independent truth."""

from __future__ import annotations

import csv
import importlib
import json
from pathlib import Path

import casadi as ca
import numpy as np
import pytest
from matplotlib.figure import Figure
from scipy.integrate import solve_ivp
from scipy.spatial.transform import Rotation

import shooting
from shooting.loading import load_model, model_names

BUILTINS = ["cartpole", "dip", "pendulum", "quadrotor", "stiff_chain", "two_link_arm", "vanderpol"]


def xdot(model: shooting.Model, x, u=None, p=None) -> np.ndarray:
    """Evaluate the model's right-hand side as a flat numpy array."""
    u = model.u0 if u is None else u
    p = model.p0 if p is None else p
    if model.nz:  # the algebraic states solved from g at x
        return np.array(model.f(x, u, p, 0.0, model.consistent_z(x, u, p))).reshape(-1)
    return np.array(model.f(x, u, p, 0.0)).reshape(-1)


def simulate(model: shooting.Model, x0, t_end: float, u=None, p=None) -> np.ndarray:
    """Reference solution with DOP853 at tight tolerances, states as rows."""
    sol = solve_ivp(
        lambda t, x: xdot(model, x, u, p),
        (0.0, t_end),
        np.asarray(x0, dtype=float),
        method="DOP853",
        rtol=1e-12,
        atol=1e-12,
        dense_output=False,
        t_eval=np.linspace(0.0, t_end, 41),
    )
    assert sol.success, sol.message
    return sol.y.T


# ---------------------------------------------------------------------------
# All built-ins


def test_dip_lagrange_equations_conserve_energy():
    """Unforced and frictionless, T + V of the double pendulum is constant along the reduced ODE (scipy);
    a sign or factor error in the Lagrangian's derivatives would break it."""
    import casadi as ca

    from shooting.models import dip

    m, prm = dip.make_model(), dip.DIPParams()
    q, dq = m.x[:3], m.x[3:]
    V = -dip.lagrangian(prm, q, ca.SX.zeros(3))  # L(q, 0) = -V(q)
    T = dip.lagrangian(prm, q, dq) + V
    energy = ca.Function("E", [m.x], [T + V])
    X = simulate(m, [0.1, 2.5, -1.0, 0.3, 1.0, -2.0], 2.0, u=[0.0])
    E = np.array([float(energy(x)) for x in X])
    assert np.abs(E - E[0]).max() < 1e-9 * max(1.0, abs(E[0]))
    assert np.ptp(X[:, 2]) > 1.0  # it really moved


def test_model_names_lists_the_builtins():
    assert model_names() == BUILTINS


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_is_consistent(name):
    module = importlib.import_module(f"shooting.models.{name}")
    for model in (module.make_model(), load_model(name)):
        assert isinstance(model, shooting.Model)
        assert model.name == name
        assert len(model.state_names) == model.nx == model.x0.size == model.x_min.size == model.x_max.size
        assert len(model.input_names) == model.nu == model.u0.size == model.u_min.size == model.u_max.size
        assert len(model.param_names) == model.np == model.p0.size
        assert len(set(model.state_names)) == model.nx and len(set(model.input_names)) == model.nu
        assert np.all(model.x_min <= model.x0) and np.all(model.x0 <= model.x_max)
        assert np.all(model.u_min <= model.u0) and np.all(model.u0 <= model.u_max)
        assert np.all(np.isfinite(model.u_min)) and np.all(np.isfinite(model.u_max)), "inputs need bounds"
        assert model.dt is not None and 0 < model.dt <= 0.1
        assert model.description and "\n" not in model.description
        assert np.all(np.isfinite(xdot(model, model.x0)))
        assert not model.f.has_free()
    assert module.__doc__ and "Default scenario" in module.__doc__
    assert module.make_model.__doc__


@pytest.mark.parametrize("name", BUILTINS)
def test_unknown_parameter_lists_valid_ones(name):
    module = importlib.import_module(f"shooting.models.{name}")
    with pytest.raises(ValueError, match=rf"{name}: unknown parameter 'bogus'; valid parameters: \w+"):
        module.make_model(bogus=1.0)


@pytest.mark.parametrize(
    ("name", "params", "culprit"),
    [
        ("cartpole", {"m": 0.0}, "m"),
        ("cartpole", {"l": -0.8}, "l"),
        ("cartpole", {"M": float("nan")}, "M"),
        ("pendulum", {"m": -1.0}, "m"),
        ("pendulum", {"l": 0}, "l"),
        ("pendulum", {"b": -0.1}, "b"),
        ("quadrotor", {"m": 0.0}, "m"),
        ("quadrotor", {"arm": -0.1}, "arm"),
        ("quadrotor", {"J": [[1, 0, 0], [0, -1, 0], [0, 0, 1]]}, "J"),
        ("quadrotor", {"J": [[1, 0.5, 0], [0, 1, 0], [0, 0, 1]]}, "J"),
        ("quadrotor", {"T_max": 1.0}, "T_max"),
        ("two_link_arm", {"m1": 0.0}, "m1"),
        ("two_link_arm", {"l2": -0.5}, "l2"),
        ("two_link_arm", {"m2": "heavy"}, "m2"),
        ("stiff_chain", {"masses": (1.0, 0.0, 1.0)}, "masses"),
        ("stiff_chain", {"springs": (1.0, 1.0)}, "springs"),
        ("vanderpol", {"u_max": 0.0}, "u_max"),
    ],
)
def test_bad_physical_constant_is_a_value_error(name, params, culprit):
    module = importlib.import_module(f"shooting.models.{name}")
    with pytest.raises(ValueError, match=rf"^{name}: .*\b{culprit}\b"):
        module.make_model(**params)


# ---------------------------------------------------------------------------
# Cart-pole: exactly acados' equations


def cartpole_numpy(x, F, M=1.0, m=0.1, l=0.8, g=9.81):  # noqa: E741
    """The contract's equations, written out independently."""
    _, theta, v, omega = x
    D = M + m - m * np.cos(theta) ** 2
    return np.array(
        [
            v,
            omega,
            (-m * l * np.sin(theta) * omega**2 + m * g * np.cos(theta) * np.sin(theta) + F) / D,
            (-m * l * np.cos(theta) * np.sin(theta) * omega**2 + F * np.cos(theta) + (M + m) * g * np.sin(theta))
            / (l * D),
        ]
    )


@pytest.mark.parametrize("params", [{}, {"M": 2.0, "m": 0.3, "l": 0.5, "g": 9.7}])
def test_cartpole_matches_acados_equations(params):
    model = load_model("cartpole", **params)
    rng = np.random.default_rng(0)
    for _ in range(200):
        x = rng.uniform([-2, -2 * np.pi, -5, -10], [2, 2 * np.pi, 5, 10])
        F = rng.uniform(-80, 80)
        np.testing.assert_allclose(xdot(model, x, [F]), cartpole_numpy(x, F, **params), rtol=1e-12, atol=1e-12)


def test_cartpole_matches_acados_defaults():
    model = load_model("cartpole")
    assert model.state_names == ("p", "theta", "v", "omega") and model.input_names == ("F",)
    np.testing.assert_array_equal(model.x0, [0.0, np.pi, 0.0, 0.0])
    assert model.u_min[0] == -80 and model.u_max[0] == 80 and model.dt == 0.05
    # theta = 0 is upright: the upright rest is an equilibrium, and unstable.
    assert np.allclose(xdot(model, [0, 0, 0, 0], [0]), 0)
    assert xdot(model, [0, 0.1, 0, 0], [0])[3] > 0


# ---------------------------------------------------------------------------
# Pendulum


def test_pendulum_equations_and_upright_convention():
    m, l, g, b = 0.7, 1.3, 9.81, 0.2  # noqa: E741
    model = load_model("pendulum", m=m, l=l, b=b)
    rng = np.random.default_rng(1)
    for _ in range(50):
        theta, omega, tau = rng.uniform(-7, 7), rng.uniform(-5, 5), rng.uniform(-8, 8)
        # m l^2 theta'' = m g l sin(theta) - b omega + tau (theta from upright)
        expected = [omega, (m * g * l * np.sin(theta) - b * omega + tau) / (m * l**2)]
        np.testing.assert_allclose(xdot(model, [theta, omega], [tau]), expected, rtol=1e-13, atol=1e-13)
    assert xdot(model, [0.1, 0.0], [0.0])[1] > 0  # upright: falls away
    assert xdot(model, [np.pi + 0.1, 0.0], [0.0])[1] < 0  # hanging: restoring
    np.testing.assert_array_equal(model.x0, [np.pi, 0.0])


def test_pendulum_energy_is_conserved_without_friction_and_input():
    m, l, g = 1.0, 1.0, 9.81  # noqa: E741
    model = load_model("pendulum", b=0.0)
    traj = simulate(model, [2.0, 1.5], 10.0, u=[0.0])
    energy = 0.5 * m * l**2 * traj[:, 1] ** 2 + m * g * l * np.cos(traj[:, 0])
    scale = 0.5 * m * l**2 * np.max(traj[:, 1] ** 2) + m * g * l
    assert np.max(np.abs(energy - energy[0])) / scale < 1e-9
    # ... and friction dissipates it.
    traj = simulate(load_model("pendulum"), [2.0, 1.5], 10.0, u=[0.0])
    energy_damped = 0.5 * m * l**2 * traj[:, 1] ** 2 + m * g * l * np.cos(traj[:, 0])
    assert energy_damped[-1] < energy_damped[0] - 0.1


# ---------------------------------------------------------------------------
# Two-link arm


ARM = {"m1": 1.2, "m2": 0.8, "l1": 0.6, "l2": 0.45, "lc1": 0.25, "lc2": 0.2, "I1": 0.03, "I2": 0.015, "g": 9.81}


def spong_arm(x, tau, m1, m2, l1, l2, lc1, lc2, I1, I2, g, b1=0.0, b2=0.0):
    """Spong, Hutchinson & Vidyasagar, "Robot Modeling and Control", sec. 7.4.1.

    Their q1 is measured from the horizontal x-axis; ours from the upward
    vertical, so q1_spong = q1 + pi/2 (q2 is relative in both).
    """
    q1, q2, dq1, dq2 = x
    t1 = q1 + np.pi / 2
    d11 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * np.cos(q2)) + I1 + I2
    d12 = m2 * (lc2**2 + l1 * lc2 * np.cos(q2)) + I2
    d22 = m2 * lc2**2 + I2
    h = -m2 * l1 * lc2 * np.sin(q2)
    coriolis = np.array([h * dq2**2 + 2 * h * dq1 * dq2, -h * dq1**2])
    phi = np.array(
        [
            (m1 * lc1 + m2 * l1) * g * np.cos(t1) + m2 * lc2 * g * np.cos(t1 + q2),
            m2 * lc2 * g * np.cos(t1 + q2),
        ]
    )
    D = np.array([[d11, d12], [d12, d22]])
    ddq = np.linalg.solve(D, np.asarray(tau) - np.array([b1 * dq1, b2 * dq2]) - coriolis - phi)
    energy = 0.5 * np.array([dq1, dq2]) @ D @ np.array([dq1, dq2]) + g * (
        (m1 * lc1 + m2 * l1) * np.sin(t1) + m2 * lc2 * np.sin(t1 + q2)
    )
    return np.concatenate([[dq1, dq2], ddq]), D, energy


@pytest.mark.parametrize("params", [ARM, {}])
def test_two_link_arm_matches_textbook_equations(params):
    from shooting.models import two_link_arm

    full = {**vars(two_link_arm.TwoLinkArmParams()), **params}
    model = load_model("two_link_arm", **params)
    rng = np.random.default_rng(2)
    for _ in range(100):
        x = rng.uniform([-np.pi, -np.pi, -6, -6], [np.pi, np.pi, 6, 6])
        tau = rng.uniform(-10, 10, 2)
        expected, D, energy = spong_arm(
            x, tau, **{k: full[k] for k in ("m1", "m2", "l1", "l2", "lc1", "lc2", "I1", "I2", "g", "b1", "b2")}
        )
        np.testing.assert_allclose(xdot(model, x, tau), expected, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(two_link_arm.mass_matrix(x[:2], **params), D, rtol=1e-12, atol=1e-14)
        assert two_link_arm.energy(x, **params) == pytest.approx(energy, rel=1e-12, abs=1e-12)


def test_two_link_arm_mass_matrix_is_symmetric_positive_definite():
    from shooting.models import two_link_arm

    model = load_model("two_link_arm", **ARM)
    B = ca.Function("B", [model.x, model.u], [ca.jacobian(model.xdot, model.u)])
    rng = np.random.default_rng(3)
    for _ in range(50):
        q = rng.uniform(-np.pi, np.pi, 2)
        M = two_link_arm.mass_matrix(q, **ARM)
        np.testing.assert_array_equal(M, M.T)
        assert np.linalg.eigvalsh(M).min() > 0
        # d ddq / d tau is M(q)^{-1}: the derived dynamics use that same matrix.
        np.testing.assert_allclose(np.array(B(np.r_[q, 0.3, -0.2], [0, 0]))[2:], np.linalg.inv(M), rtol=1e-10)


def test_two_link_arm_energy_is_conserved_without_damping_and_input():
    from shooting.models import two_link_arm

    params = {**ARM, "b1": 0.0, "b2": 0.0}
    model = load_model("two_link_arm", **params)
    traj = simulate(model, [2.5, -1.0, 1.0, 2.0], 5.0, u=[0.0, 0.0])
    energy = np.array([two_link_arm.energy(x, **params) for x in traj])
    kinetic = energy - np.array([two_link_arm.energy(np.r_[x[:2], 0, 0], **params) for x in traj])
    scale = np.max(np.abs(kinetic)) + 9.81 * (ARM["m1"] + ARM["m2"]) * (ARM["l1"] + ARM["l2"])
    assert np.max(np.abs(energy - energy[0])) / scale < 1e-9
    assert np.ptp(kinetic) > 1.0  # the arm really moved


def test_two_link_arm_upright_is_the_origin():
    model = load_model("two_link_arm")
    np.testing.assert_allclose(xdot(model, [0, 0, 0, 0], [0, 0]), 0, atol=1e-15)
    np.testing.assert_allclose(xdot(model, [np.pi, 0, 0, 0], [0, 0]), 0, atol=1e-12)
    np.testing.assert_array_equal(model.x0, [np.pi, 0, 0, 0])


# ---------------------------------------------------------------------------
# Quadrotor


def random_unit_quaternion(rng) -> np.ndarray:
    q = rng.normal(size=4)
    return q / np.linalg.norm(q)


def scipy_rotation(q) -> np.ndarray:
    """Body-to-world matrix of a scalar-first quaternion, from scipy (scalar last)."""
    return Rotation.from_quat([q[1], q[2], q[3], q[0]]).as_matrix()


def quad_state(p=(0, 0, 0), q=(1, 0, 0, 0), v=(0, 0, 0), w=(0, 0, 0)) -> np.ndarray:
    return np.concatenate([p, q, v, w]).astype(float)


def test_quadrotor_layout_and_hover():
    model = load_model("quadrotor")
    assert model.nx == 13 and model.nu == 4
    assert model.state_names[3:7] == ("qw", "qx", "qy", "qz")
    np.testing.assert_allclose(model.u0, 0.5 * 9.81 / 4)
    np.testing.assert_array_equal(model.u_min, 0.0)
    # Hover: level, at rest, hover thrust -> nothing moves.
    for p in ([0, 0, 0], [1, 1, 1], [-3, 2, 5]):
        np.testing.assert_allclose(xdot(model, quad_state(p=p)), 0, atol=1e-15)
    np.testing.assert_allclose(xdot(model, model.x0), 0, atol=1e-15)


def test_quadrotor_rotation_and_quaternion_product_against_scipy():
    from shooting.models.quadrotor import quaternion_product, rotation_matrix

    rng = np.random.default_rng(4)
    for _ in range(20):
        a, b = random_unit_quaternion(rng), random_unit_quaternion(rng)
        np.testing.assert_allclose(np.array(ca.DM(rotation_matrix(ca.DM(a)))), scipy_rotation(a), atol=1e-14)
        ab = np.array(ca.DM(quaternion_product(ca.DM(a), ca.DM(b)))).reshape(-1)
        # Hamilton product composes rotations: R(a (x) b) = R(a) R(b).
        np.testing.assert_allclose(scipy_rotation(ab), scipy_rotation(a) @ scipy_rotation(b), atol=1e-14)


def test_quadrotor_translation_follows_the_body_z_axis():
    m, g = 0.5, 9.81
    model = load_model("quadrotor")
    rng = np.random.default_rng(5)
    for _ in range(20):
        q = random_unit_quaternion(rng)
        T = rng.uniform(0, 2.5, 4)
        dx = xdot(model, quad_state(q=q, v=[1, 2, 3]), T)
        np.testing.assert_allclose(dx[0:3], [1, 2, 3])
        expected = scipy_rotation(q) @ [0, 0, T.sum()] / m - [0, 0, g]
        np.testing.assert_allclose(dx[7:10], expected, rtol=1e-13, atol=1e-13)


def test_quadrotor_attitude_kinematics_use_body_rates():
    # With w in body axes, R' = R S(w) (cheat sheet 6.8); check q' through R(q).
    model = load_model("quadrotor")
    rng = np.random.default_rng(9)
    eps = 1e-6
    for _ in range(10):
        q, w = random_unit_quaternion(rng), rng.uniform(-3, 3, 3)
        q_dot = xdot(model, quad_state(q=q, w=w))[3:7]
        assert abs(q @ q_dot) < 1e-14  # tangent to the unit sphere
        R_dot = (scipy_rotation(q + eps * q_dot) - scipy_rotation(q - eps * q_dot)) / (2 * eps)
        S = np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])
        np.testing.assert_allclose(R_dot, scipy_rotation(q) @ S, atol=1e-8)


def test_quadrotor_gyroscopic_term_against_numpy():
    from shooting.models.quadrotor import QuadrotorParams

    J = np.array(QuadrotorParams().J)
    model = load_model("quadrotor")
    rng = np.random.default_rng(6)
    for _ in range(20):
        w = rng.uniform(-10, 10, 3)
        dx = xdot(model, quad_state(q=random_unit_quaternion(rng), w=w), model.u0)  # no rotor torque
        np.testing.assert_allclose(dx[10:13], np.linalg.solve(J, -np.cross(w, J @ w)), rtol=1e-12, atol=1e-12)


def test_quadrotor_rotor_torques_match_the_documented_x_layout():
    from shooting.models.quadrotor import QuadrotorParams

    prm = QuadrotorParams()
    J, d = np.array(prm.J), prm.arm / np.sqrt(2)
    # rotor positions (x forward, y left) and drag-torque signs (CCW rotor: -kappa T)
    positions = np.array([[d, -d, 0], [-d, -d, 0], [-d, d, 0], [d, d, 0]])
    spin = np.array([-1, 1, -1, 1])
    model = load_model("quadrotor")
    rng = np.random.default_rng(7)
    for _ in range(20):
        T = rng.uniform(0, 2.5, 4)
        tau = sum(np.cross(r, [0, 0, Ti]) for r, Ti in zip(positions, T, strict=True)) + [0, 0, prm.kappa * spin @ T]
        dx = xdot(model, quad_state(), T)
        np.testing.assert_allclose(J @ dx[10:13], tau, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("J", [None, (2.3e-3, 2.4e-3, 4.3e-3)])
def test_quadrotor_pure_yaw_input_only_yaws(J):
    params = {} if J is None else {"J": J}
    model = load_model("quadrotor", **params)
    kappa, delta = 0.016, 0.2
    dx = xdot(model, quad_state(), model.u0 + delta * np.array([-1, 1, -1, 1]))
    np.testing.assert_allclose(dx[:10], 0, atol=1e-15)  # no translation, no attitude rate yet
    from shooting.models.quadrotor import QuadrotorParams

    J_mat = QuadrotorParams(**params).inertia
    np.testing.assert_allclose(J_mat @ dx[10:13], [0, 0, 4 * kappa * delta], atol=1e-14)
    if J is not None:  # principal axes: the yaw torque gives yaw acceleration only
        assert dx[10] == 0 and dx[11] == 0 and dx[12] == pytest.approx(4 * kappa * delta / J[2])


def test_quadrotor_flow_preserves_the_quaternion_norm():
    model = load_model("quadrotor")
    rng = np.random.default_rng(8)
    for _ in range(3):
        x0 = quad_state(q=random_unit_quaternion(rng), w=rng.uniform(-5, 5, 3))
        traj = simulate(model, x0, 2.0, u=rng.uniform(0.8, 1.6, 4))
        norms = np.linalg.norm(traj[:, 3:7], axis=1)
        assert np.max(np.abs(norms - 1)) < 1e-10
        assert np.ptp(traj[:, 3]) > 0.1  # the attitude really changed


# ---------------------------------------------------------------------------
# Stiff chain


def jacobian_at_origin(model: shooting.Model) -> np.ndarray:
    A = ca.Function("A", [model.x, model.u], [ca.jacobian(model.xdot, model.x)])
    return np.array(A(np.zeros(model.nx), np.zeros(model.nu)))


def test_stiff_chain_eigenvalues_span_three_decades():
    model = load_model("stiff_chain")
    lam = np.linalg.eigvals(jacobian_at_origin(model))
    assert np.all(lam.real < 0)
    assert lam.real.min() < -500 and lam.real.max() > -20
    documented = [-1009.05, -10.59, -2.466, -1.001, -0.948 + 1.701j, -0.948 - 1.701j]
    for mu in documented:
        assert np.min(np.abs(lam - mu)) < 1e-3 * max(1.0, abs(mu))
    # Explicit RK4 diverges at the nominal dt, is stable with 19 substeps; implicit Euler is fine.
    rk4 = lambda z: 1 + z + z**2 / 2 + z**3 / 6 + z**4 / 24  # noqa: E731
    assert np.max(np.abs(rk4(model.dt * lam))) > 1
    assert np.max(np.abs(rk4(model.dt / 19 * lam))) < 1
    assert np.max(np.abs(1 / (1 - model.dt * lam))) < 1


def test_stiff_chain_against_hand_written_two_mass_chain():
    m, k, c, h = (2.0, 0.5), (3.0, 40.0), (1.0, 7.0), 0.3
    model = load_model("stiff_chain", masses=m, springs=k, dampers=c, hardening=h)
    assert model.nx == 4 and model.state_names == ("s1", "s2", "v1", "v2")
    s1, s2, v1, v2, F = 0.2, -0.1, 0.5, -1.0, 2.0
    f1 = k[0] * (s1 + h * s1**3) + c[0] * v1
    f2 = k[1] * (s2 - s1) + c[1] * (v2 - v1)
    expected = [v1, v2, (-f1 + f2) / m[0], (-f2 + F) / m[1]]
    np.testing.assert_allclose(xdot(model, [s1, s2, v1, v2], [F]), expected, rtol=1e-14)


# ---------------------------------------------------------------------------
# Van der Pol


def test_vanderpol_parameter_mu_enters():
    model = load_model("vanderpol")
    assert model.np == 1 and model.param_names == ("mu",) and model.p0[0] == 1.0
    x, u = [1.5, -0.7], [0.3]
    for mu in (0.0, 1.0, 2.5):
        x1, x2 = x
        np.testing.assert_allclose(xdot(model, x, u, [mu]), [x2, mu * (1 - x1**2) * x2 - x1 + u[0]], rtol=1e-15)
    assert not np.allclose(xdot(model, x, u, [1.0]), xdot(model, x, u, [2.0]))
    assert load_model("vanderpol", mu=0.5).p0[0] == 0.5


def test_units_label_plots_csv_and_json(tmp_path: Path) -> None:
    x, u = ca.SX.sym("x", 2), ca.SX.sym("u")
    model = shooting.Model("unit_cart", x, u, ca.vertcat(x[1], u), state_names=["pos", "vel"], input_names=["f"],
                           state_units=["m", "m/s"], input_units=["N"], x0=[1.0, 0.0], u_min=[-1], u_max=[1])
    ocp = shooting.MultipleShootingOCP(model, 10, dt=0.1)
    traj = shooting.simulate_closed_loop(shooting.RTIController(ocp), model.x0, 5, progress=False)
    traj.save_csv(tmp_path / "t.csv")
    header = next(csv.reader((tmp_path / "t.csv").open()))
    assert header[:4] == ["t [s]", "pos [m]", "vel [m/s]", "f [N]"]
    traj.save_json(tmp_path / "t.json")
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["state_units"] == ["m", "m/s"] and data["input_units"] == ["N"]
    labels: list[str] = []
    real_savefig = Figure.savefig

    def spy(fig: Figure, *args: object, **kwargs: object) -> None:
        labels.extend(ax.get_ylabel() for ax in fig.axes)
        real_savefig(fig, *args, **kwargs)

    Figure.savefig = spy  # type: ignore[method-assign]
    try:
        traj.plot(tmp_path / "plots")
    finally:
        Figure.savefig = real_savefig  # type: ignore[method-assign]
    assert {"pos [m]", "vel [m/s]", "f [N]"} <= set(labels)
    with pytest.raises(ValueError, match="state_units must be 2 short strings"):
        shooting.Model("bad", x, u, ca.vertcat(x[1], u), state_units=["m"])
    with pytest.raises(ValueError, match="state_units must be 2 short strings.*got 'm'"):
        shooting.Model("bad", x, u, ca.vertcat(x[1], u), state_units="m")
    with pytest.raises(ValueError, match="input_units must be 1 short strings"):
        shooting.Model("bad", x, u, ca.vertcat(x[1], u), input_units=["kg, m"])
    assert np.all(np.isfinite(traj.u))
