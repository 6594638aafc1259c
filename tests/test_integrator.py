"""build_integrator against independent truth: scipy, finite differences, R(hF)^N."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import shooting
from conftest import evaluate

T0, DT, U = 0.3, 1.0, 0.7
MODES = ("forward", "ad", "variational")


def _reference(model: shooting.Model, x0, u, p, t0, dt) -> np.ndarray:
    f = model.f

    def rhs(t, x):
        return np.array(f(x, u, p, t)).ravel()

    sol = solve_ivp(rhs, (t0, t0 + dt), x0, method="DOP853", rtol=1e-13, atol=1e-14)
    assert sol.success
    return sol.y[:, -1]


def _slope(hs: list[float], errs: list[float], lo: float = 1e-13, hi: float = 1e-2) -> float:
    """Least-squares log-log slope over the three finest points inside [lo, hi].

    The reference (DOP853, rtol 1e-13) agrees with one at rtol 2.3e-14 to
    6e-15 on this problem, so errors above 1e-13 are measured to a few per
    cent; the finest steps are the most asymptotic.
    """
    pts = [(h, e) for h, e in zip(hs, errs, strict=True) if lo < e < hi][-3:]
    assert len(pts) == 3, f"too few points in the asymptotic window: {list(zip(hs, errs, strict=True))}"
    lh, le = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(lh, le, 1)[0])


#: Orders from the literature (not from the library): (order of b, order of b_hat or None).
#: Hairer, Norsett & Wanner I, Sec. II.1-II.5 and II.7; Dormand & Prince (1980); Fehlberg (1969);
#: Bogacki & Shampine (1989); Cash & Karp (1990); Shu & Osher (1988) for SSPRK3; Ralston (1962);
#: Radau IIA with s stages has order 2s - 1, Gauss-Legendre 2s.
LITERATURE_ORDERS = {
    "euler": (1, None), "midpoint": (2, None), "heun": (2, None), "ralston": (2, None), "kutta3": (3, None),
    "heun3": (3, None), "ralston3": (3, None), "ssprk3": (3, None), "rk4": (4, None), "rk38": (4, None),
    "bs3": (3, 2), "rkf45": (4, 5), "cashkarp": (5, 4), "dopri5": (5, 4), "implicit_euler": (1, None),
    "implicit_midpoint": (2, None), "gauss2": (4, None), "gauss3": (6, None), "radau2": (3, None),
    "radau3": (5, None),
}


def test_every_catalogue_entry_has_its_literature_order():
    assert set(LITERATURE_ORDERS) == set(shooting.tableau_names())
    for name, (order, embedded) in LITERATURE_ORDERS.items():
        tab = shooting.get_tableau(name)
        assert (tab.order, tab.embedded_order) == (order, embedded), name
        assert tab.verified_order() == order, name


@pytest.fixture(scope="module")
def reference(forced):
    return _reference(forced, forced.x0, U, forced.p0, T0, DT)


@pytest.mark.parametrize("name", shooting.tableau_names())
def test_convergence_order(forced, reference, name):
    """Measured global order on a time-varying parameterised problem is the literature's."""
    tab = shooting.get_tableau(name)
    order, embedded = LITERATURE_ORDERS[name]
    hs, errs, est = [], [], []
    for steps in (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        F = shooting.build_integrator(forced, tab, steps, "none")
        out = evaluate(F, x=forced.x0, u=U, p=forced.p0, t0=T0, dt=DT)
        hs.append(DT / steps)
        errs.append(np.max(np.abs(out["x_next"].ravel() - reference)))
        if tab.b_hat is not None:
            est.append(np.max(np.abs(out["err"])))
        if errs[-1] < 1e-13 and (not est or est[-1] < 1e-13):
            break
    assert abs(_slope(hs, errs) - order) < 0.3, (name, hs, errs)
    if embedded is not None:
        expected = min(order, embedded)
        assert abs(_slope(hs, est) - expected) < 0.3, (name, hs, est)


@pytest.mark.parametrize("name", shooting.tableau_names())
@pytest.mark.parametrize("steps,unroll", [(1, True), (3, True), (5, False)])
def test_modes_agree_and_match_finite_differences(forced, name, steps, unroll):
    dt = 0.2
    x0 = np.array([0.8, -0.3])
    args = dict(x=x0, u=U, p=forced.p0, t0=T0, dt=dt)
    outs = {m: evaluate(shooting.build_integrator(forced, name, steps, m, unroll=unroll), **args) for m in MODES}
    for m in MODES[1:]:
        for k in ("x_next", "A", "B"):
            np.testing.assert_allclose(outs[m][k], outs["forward"][k], rtol=1e-12, atol=1e-13, err_msg=f"{m} {k}")
    F = shooting.build_integrator(forced, name, steps, "none", unroll=unroll)

    def step(x, u):
        return evaluate(F, x=x, u=u, p=forced.p0, t0=T0, dt=dt)["x_next"].ravel()

    eps = 1e-6
    A_fd = np.column_stack([(step(x0 + eps * e, U) - step(x0 - eps * e, U)) / (2 * eps) for e in np.eye(2)])
    B_fd = ((step(x0, U + eps) - step(x0, U - eps)) / (2 * eps))[:, None]
    np.testing.assert_allclose(outs["forward"]["A"], A_fd, atol=1e-8)
    np.testing.assert_allclose(outs["forward"]["B"], B_fd, atol=1e-8)
    np.testing.assert_allclose(outs["forward"]["x_next"].ravel(), step(x0, U), rtol=1e-14, atol=1e-15)


def linear_model(Fm: np.ndarray, Gm: np.ndarray) -> shooting.Model:
    nx, nu = Gm.shape
    x, u = ca.SX.sym("x", nx), ca.SX.sym("u", nu)
    return shooting.Model("lin", x, u, ca.mtimes(ca.DM(Fm), x) + ca.mtimes(ca.DM(Gm), u))


def discrete_linear_map(A, b, Fm, Gm, h, steps):
    """Independent truth: one RK substep on x' = Fx + Gu is x+ = R(hF) x + S u with

    R(Z) = I + (b^T kron Z)(I - A kron Z)^{-1}(1 kron I) and
    S = h (b^T kron I)(I - A kron hF)^{-1}(1 kron G); N substeps compose.
    """
    s, nx = len(b), Fm.shape[0]
    Z = h * Fm
    Minv = np.linalg.inv(np.eye(s * nx) - np.kron(A, Z))
    ones = np.kron(np.ones((s, 1)), np.eye(nx))
    R = np.eye(nx) + np.kron(b[None, :], Z) @ Minv @ ones
    Su = h * np.kron(b[None, :], np.eye(nx)) @ Minv @ np.kron(np.ones((s, 1)), Gm)
    Atot, Btot = np.eye(nx), np.zeros_like(Gm)
    for _ in range(steps):
        Atot, Btot = R @ Atot, R @ Btot + Su
    return Atot, Btot


@pytest.mark.parametrize("name", shooting.tableau_names())
@pytest.mark.parametrize("steps", [1, 7])
def test_linear_ode_matches_stability_matrix(name, steps):
    rng = np.random.default_rng(7)
    Fm = rng.normal(size=(3, 3)) - 2 * np.eye(3)
    Gm = rng.normal(size=(3, 2))
    tab = shooting.get_tableau(name)
    F = shooting.build_integrator(linear_model(Fm, Gm), tab, steps, "forward")
    x0, u0 = rng.normal(size=3), rng.normal(size=2)
    out = evaluate(F, x=x0, u=u0, dt=0.3)
    Aref, Bref = discrete_linear_map(tab.A, tab.b, Fm, Gm, 0.3 / steps, steps)
    np.testing.assert_allclose(out["A"], Aref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(out["B"], Bref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(out["x_next"].ravel(), Aref @ x0 + Bref @ u0, rtol=1e-12, atol=1e-13)


def test_stage_times(name_list=("rk4", "dopri5", "gauss2", "radau3")):
    """x' = g(t) is pure quadrature: x_next = x + sum_n h sum_i b_i g(t_n + c_i h) exactly."""
    x, u, t = ca.SX.sym("x"), ca.SX.sym("u"), ca.SX.sym("t")
    model = shooting.Model("quad", x, u, ca.sin(3 * t) + t**2, t=t)
    t0, dt = 0.4, 0.9
    for name in name_list:
        tab = shooting.get_tableau(name)
        for steps, unroll in ((1, True), (3, True), (6, False), (11, False)):
            F = shooting.build_integrator(model, tab, steps, "forward", unroll=unroll)
            h = dt / steps
            expected = 1.5 + sum(
                h * tab.b[i] * (np.sin(3 * tau) + tau**2)
                for n in range(steps)
                for i, tau in enumerate([t0 + n * h + ci * h for ci in tab.c])
            )
            got = evaluate(F, x=1.5, u=0, t0=t0, dt=dt)["x_next"].item()
            assert got == pytest.approx(expected, rel=1e-14, abs=1e-14), (name, steps)


def test_error_output_is_the_embedded_difference(forced):
    """err = x_next(b) - x_next(b_hat) for one substep, built from a tableau without b_hat."""
    tab = shooting.get_tableau("dopri5")
    hat = shooting.ButcherTableau(tab.A_exact, tab.b_hat_exact, name="dopri5_hat")
    args = dict(x=forced.x0, u=U, p=forced.p0, t0=T0, dt=0.1)
    full = evaluate(shooting.build_integrator(forced, tab, 1, "none"), **args)
    low = evaluate(shooting.build_integrator(forced, hat, 1, "none"), **args)
    np.testing.assert_allclose(full["err"], full["x_next"] - low["x_next"], atol=1e-15)


def test_unrolled_and_doubled_agree(forced):
    args = dict(x=forced.x0, u=U, p=forced.p0, t0=T0, dt=0.7)
    for name in ("rk4", "bs3", "radau2"):
        for steps in (1, 2, 5, 13):
            a = evaluate(shooting.build_integrator(forced, name, steps, unroll=True), **args)
            b = evaluate(shooting.build_integrator(forced, name, steps, unroll=False), **args)
            for k in a:
                np.testing.assert_allclose(a[k], b[k], rtol=1e-13, atol=1e-14, err_msg=f"{name} {steps} {k}")


def test_generated_code_does_not_grow_with_steps(forced, tmp_path):
    sizes = {}
    for steps in (1, 200):
        F = shooting.build_integrator(forced, "rk4", steps)
        cg = ca.CodeGenerator(f"f{steps}.c")
        cg.add(F)
        cg.generate(str(tmp_path) + "/")
        sizes[steps] = (tmp_path / f"f{steps}.c").stat().st_size
    assert sizes[200] <= 3 * sizes[1], sizes


def test_signature_and_outputs(forced):
    F = shooting.build_integrator(forced)
    assert F.name_in() == ["x", "u", "p", "t0", "dt"]
    assert F.name_out() == ["x_next", "A", "B"]
    assert F.size_out("A") == (2, 2) and F.size_out("B") == (2, 1)
    assert shooting.build_integrator(forced, "rk4", 1, "none").name_out() == ["x_next"]
    assert shooting.build_integrator(forced, "dopri5").name_out() == ["x_next", "A", "B", "err"]
    assert not F.has_free()
    # positional call as in the contract
    x_next, A, B = F(forced.x0, U, forced.p0, T0, 0.1)
    assert A.shape == (2, 2)


def test_forward_is_the_cheapest_mode(forced):
    """The default mode has the fewest CasADi instructions (see scripts/bench_integrators.py)."""
    for name in ("euler", "rk4", "dopri5", "gauss2"):
        counts = {m: shooting.build_integrator(forced, name, 1, m).n_instructions() for m in MODES}
        assert counts["forward"] <= min(counts.values()), (name, counts)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(method="rk5000"), "rk5000"),
        (dict(method=3.0), "method"),
        (dict(steps=0), "steps"),
        (dict(steps=2.5), "steps"),
        (dict(steps=True), "steps"),
        (dict(sensitivities="reverse"), "sensitivities"),
        (dict(newton_iterations=0), "newton_iterations"),
        (dict(unroll="yes"), "unroll"),
        (dict(name="has space"), "name"),
    ],
)
def test_bad_input_names_the_culprit(forced, kwargs, match):
    with pytest.raises(ValueError, match=match):
        shooting.build_integrator(forced, **kwargs)


def test_bad_model():
    with pytest.raises(ValueError, match="model"):
        shooting.build_integrator("cartpole")
