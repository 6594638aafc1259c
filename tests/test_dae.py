"""Semi-explicit index-1 DAEs: the model checks, the step against scipy, measured orders, A and B, C.

Truth: the reduced ODE x' = f(x, G(x)) integrated by scipy at rtol 1e-13
(G by brentq to 1e-15, or by a linear solve for the double pendulum whose
algebraic equations are linear in z), central finite differences, and the
compiled C.
"""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

import shooting
from shooting.integrate.dae import DAESubstepBuilder

U = 0.3
X0 = np.array([1.0, 0.5])
T = 1.0


def _toy(**kw: object) -> shooting.Model:
    """x1' = x2, x2' = z - x1, 0 = exp(z) + z - x1 - u (dg/dz = exp(z) + 1 > 0: index 1 everywhere)."""
    x, z, u = ca.SX.sym("x", 2), ca.SX.sym("z"), ca.SX.sym("u")
    return shooting.Model("toy", x, u, ca.vertcat(x[1], z - x[0]), z=z, alg=ca.exp(z) + z - x[0] - u,
                          **{"z0": [0.0], **kw})


def _G(a: float) -> float:
    return brentq(lambda z: np.exp(z) + z - a, -60.0, 60.0, xtol=1e-15, rtol=1e-15)


@pytest.fixture(scope="module")
def toy() -> shooting.Model:
    return _toy()


@pytest.fixture(scope="module")
def reference() -> tuple[np.ndarray, float]:
    sol = solve_ivp(lambda t, y: [y[1], _G(y[0] + U) - y[0]], (0.0, T), X0, method="DOP853", rtol=1e-13,
                    atol=1e-14)
    x = sol.y[:, -1]
    return x, _G(x[0] + U)


def _errors(model: shooting.Model, method: str, Ns: list[int], ref: tuple[np.ndarray, float]) -> np.ndarray:
    out = []
    for N in Ns:
        F = shooting.build_integrator(model, method, N, "none")
        r = F(x=X0, u=U, p=[], t0=0.0, dt=T, z0=0.0)
        out.append((np.abs(np.array(r["x_next"]).ravel() - ref[0]).max(), abs(float(r["z"]) - ref[1])))
    return np.array(out)


# ----------------------------------------------------------------- the model
def test_model_attributes(toy: shooting.Model) -> None:
    assert toy.nz == 1 and toy.is_dae and tuple(toy.algebraic_names) == ("z0",)
    assert toy.f.name_in() == ["x", "u", "p", "t", "z"] and toy.g is not None
    assert toy.g.name_in() == ["x", "u", "p", "t", "z"] and toy.g.name_out() == ["alg"]
    assert float(toy.g(X0, U, [], 0.0, 0.2)) == pytest.approx(np.exp(0.2) + 0.2 - X0[0] - U)
    assert toy.consistent_z(X0, [U]) == pytest.approx(_G(X0[0] + U), abs=1e-12)
    assert "nz=1" in repr(toy)
    ode = shooting.load_model("cartpole")
    assert ode.nz == 0 and not ode.is_dae and ode.g is None


@pytest.mark.parametrize("kwargs, words", [
    (dict(alg=None), "alg is missing"),
    (dict(z0=[0.0, 1.0]), "z0"),
    (dict(z_min=[1.0], z_max=[0.0]), "z_min"),
])
def test_model_refuses_bad_algebraic_input(kwargs: dict, words: str) -> None:
    x, z, u = ca.SX.sym("x", 2), ca.SX.sym("z"), ca.SX.sym("u")
    args = dict(z=z, alg=ca.exp(z) + z - x[0] - u)
    args.update(kwargs)
    with pytest.raises(ValueError, match=words):
        shooting.Model("toy", x, u, ca.vertcat(x[1], z - x[0]), **args)


def test_model_refuses_algebraic_data_without_z() -> None:
    x, u = ca.SX.sym("x", 2), ca.SX.sym("u")
    for key, value in (("alg", x[0]), ("z0", [0.0]), ("z_max", [1.0])):
        with pytest.raises(ValueError, match=f"{key} is given but"):
            shooting.Model("m", x, u, ca.vertcat(x[1], -x[0]), **{key: value})
    with pytest.raises(ValueError, match="free symbol.*'w'.*algebraic states"):
        shooting.Model("m", x, u, ca.vertcat(x[1], -x[0]), z=ca.SX.sym("z"), alg=ca.SX.sym("w"))


def test_singular_algebraic_equations_are_named() -> None:
    x, z, u = ca.SX.sym("x", 2), ca.SX.sym("z", 2), ca.SX.sym("u")
    xdot = ca.vertcat(x[1], z[0])
    # alg[1] constrains x alone (index 2): named as not depending on z.
    with pytest.raises(ValueError, match=r"alg\[1\].*do not depend on z.*index reduction"):
        shooting.Model("pend", x, u, xdot, z=z, alg=ca.vertcat(z[0] + z[1] - u, x[0] - 1.0))
    # Both rows in the left null space of [[1, 1], [2, 2]].
    with pytest.raises(ValueError, match=r"alg\[0\].*alg\[1\].*linearly dependent"):
        shooting.Model("pend", x, u, xdot, z=z, alg=ca.vertcat(z[0] + z[1], 2 * z[0] + 2 * z[1] - x[0]))
    # Singular only at the given z0 (dg/dz = 2 z): the check is at z0, a better z0 passes.
    zs = ca.SX.sym("z")
    with pytest.raises(ValueError, match="singular"):
        shooting.Model("sq", x, u, ca.vertcat(x[1], zs), z=zs, alg=zs**2 - 1 - x[0] ** 2, z0=[0.0])
    assert shooting.Model("sq", x, u, ca.vertcat(x[1], zs), z=zs, alg=zs**2 - 1 - x[0] ** 2, z0=[1.0]).nz == 1


# ------------------------------------------------------------ accuracy
# Index-1 theory (Hairer & Wanner II, VI.1): the stages solve g exactly, so x
# is the method on the reduced ODE (classical order p), and z at the end,
# consistent with x_next, has the same order.
ORDERS = {"euler": 1, "midpoint": 2, "rk4": 4, "dopri5": 5, "implicit_euler": 1, "implicit_midpoint": 2,
          "gauss2": 4, "gauss3": 6, "radau2": 3, "radau3": 5}


@pytest.mark.parametrize("method", sorted(ORDERS))
def test_measured_orders_of_x_and_z(toy: shooting.Model, reference: tuple[np.ndarray, float], method: str) -> None:
    p = ORDERS[method]
    Ns = [4, 8, 16, 32] if p <= 4 else [1, 2, 4] if p >= 6 else [2, 4, 8]
    e = _errors(toy, method, Ns, reference)
    orders = np.log2(e[:-1] / e[1:])
    # The finest pair, still far above rounding (errors >= 1e-12 here, the
    # reference is good to ~1e-14): the asymptotic order to within 0.3
    # (pre-asymptotic terms of relative size h).
    assert e[-1].min() > 1e-12
    assert np.all(np.abs(orders[-1] - p) < 0.3), (method, orders)


def test_direct_approach_z_of_gauss_loses_order(toy: shooting.Model, reference: tuple[np.ndarray, float]) -> None:
    """What projecting z onto g(x_next, z) = 0 buys: the direct approach's
    z_{n+1} = (1 - b'A^-1 1) z_n + b'A^-1 Z keeps only order s (s even) or
    s + 1 (s odd) for Gauss-Legendre, where ours has 2s; Radau IIA (stiffly
    accurate, b'A^-1 = e_s') is unaffected."""
    measured = {}
    for name in ("gauss2", "gauss3", "radau2"):
        tab = shooting.get_tableau(name)
        A, b, c = (np.array(v, dtype=float) for v in (tab.A, tab.b, tab.c))
        builder = DAESubstepBuilder(toy.f, toy.g, A, b, c, None, False, "none", 6)
        xs, zs, us, hs = ca.SX.sym("x", 2), ca.SX.sym("z"), ca.SX.sym("u"), ca.SX.sym("h")
        K, Z = builder.stage_values(xs, us, ca.SX(0, 1), ca.SX(0), hs, zs)
        w = np.linalg.solve(A.T, b)
        step = ca.Function("direct", [xs, zs, us, hs],
                           [xs + hs * sum(bi * k for bi, k in zip(b, K, strict=True)),
                            (1 - w.sum()) * zs + sum(wi * Zi for wi, Zi in zip(w, Z, strict=True))])
        errs = []
        for N in (8, 16, 32):
            xv, zv = X0.copy(), _G(X0[0] + U)
            for _ in range(N):
                xn, zn = step(xv, zv, U, T / N)
                xv, zv = np.array(xn).ravel(), float(zn)
            errs.append(abs(zv - reference[1]))
        measured[name] = np.log2(errs[-2] / errs[-1])
    assert abs(measured["gauss2"] - 2) < 0.2 and abs(measured["gauss3"] - 4) < 0.2
    assert abs(measured["radau2"] - 3) < 0.2


def test_z_output_is_consistent(toy: shooting.Model) -> None:
    for method in ("rk4", "gauss2", "radau3", "dopri5"):
        F = shooting.build_integrator(toy, method, 3)
        r = F(x=X0, u=U, p=[], t0=0.0, dt=0.4, z0=-1.0)  # a poor guess: Newton from it
        res = float(toy.g(r["x_next"], U, [], 0.4, r["z"]))
        assert abs(res) < 1e-13, (method, res)


def test_dip_against_reduced_ode_with_scipy_radau() -> None:
    """The double pendulum's accelerations solve M(q) z = rhs, so its reduced ODE is available: the DAE
    step equals the same method on the reduced ODE to rounding (the theory of the direct approach), and
    converges to scipy's Radau (rtol 1e-12) at the method's order."""
    m = shooting.load_model("dip")
    zfun = ca.Function("z_of_x", [m.x, m.u], [ca.solve(ca.jacobian(m.alg, m.z), -ca.substitute(m.alg, m.z, 0))])
    xdot = ca.substitute(m.xdot, m.z, zfun(m.x, m.u))
    reduced = shooting.Model("reduced", m.x, m.u, xdot)
    rhs = ca.Function("reduced", [m.x, m.u], [xdot])
    x0, u, Tend = m.x0, 1.5, 0.4
    ref = solve_ivp(lambda t, y: np.array(rhs(y, u)).ravel(), (0, Tend), x0, method="Radau", rtol=1e-12,
                    atol=1e-13).y[:, -1]
    for method, p in (("rk4", 4), ("radau3", 5)):
        errs = []
        for N in (40, 80):
            r = shooting.build_integrator(m, method, N)(x=x0, u=u, p=[], t0=0.0, dt=Tend, z0=m.z0)
            same = shooting.build_integrator(reduced, method, N)(x=x0, u=u, p=[], t0=0.0, dt=Tend)
            x_dae = np.array(r["x_next"]).ravel()
            assert np.abs(x_dae - np.array(same["x_next"]).ravel()).max() < 1e-13, method
            assert np.abs(np.array(r["A"]) - np.array(same["A"])).max() < 1e-11, method
            assert np.abs(np.array(r["z"]).ravel() - np.array(zfun(x_dae, u)).ravel()).max() < 1e-12, method
            errs.append(np.abs(x_dae - ref).max())
        assert abs(np.log2(errs[0] / errs[1]) - p) < 0.3, (method, errs)


def _sinh_dae(z0: float) -> shooting.Model:
    """x1' = x2, x2' = z - x1, 0 = sinh(z) - x1 - u: z = asinh(x1 + u), strongly nonlinear in z.

    Newton on sinh(z) = a from a guess far above the root gains about one unit of z per step until it is
    close, then converges quadratically: from z0 = 4 (a = 1.3) 4 steps leave z off by 7e-2 and 8 steps
    converge to rounding; from z0 = 7, 8 steps leave 2e-3, which the joint stage Newton of an implicit
    tableau still removes, and 4 steps leave 2.0, which it does not.
    """
    x, z, u = ca.SX.sym("x", 2), ca.SX.sym("z"), ca.SX.sym("u")
    return shooting.Model("sinh_dae", x, u, ca.vertcat(x[1], z - x[0]), z=z, alg=ca.sinh(z) - x[0] - u, z0=[z0])


def _sinh_flow(x0: np.ndarray, u: float, T: float) -> np.ndarray:
    """The reduced ODE x2' = asinh(x1 + u) - x1 integrated by scipy's DOP853 at rtol 1e-13."""
    sol = solve_ivp(lambda t, y: [y[1], np.arcsinh(y[0] + u) - y[0]], (0.0, T), x0, method="DOP853", rtol=1e-13,
                    atol=1e-14)
    return sol.y[:, -1]


@pytest.mark.parametrize("method, z0, dt", [("rk4", 4.0, 0.1), ("dopri5", 4.0, 0.1), ("gauss2", 7.0, 0.1),
                                            ("radau2", 7.0, 0.1)])
def test_a_far_guess_of_z_is_converged_before_the_first_stage(method: str, z0: float, dt: float) -> None:
    """The first algebraic solve of a step starts from the caller's z0 (farther off than a neighbouring
    stage's Z) and takes twice the Newton steps (explicit tableaus: the first stage; implicit ones: z at
    x_n before the joint stage Newton). With the model's own far z0 every output must match the exact flow:
    x_next and z against scipy at rtol 1e-13, A and B against its central differences. Without the doubling
    the first stage's Z is off by ~1e-2 and x_next, A, B by 1e-4 to 1e-3 (the method's own error here is
    below 4e-7)."""
    m = _sinh_dae(z0)
    x0, u = np.array([1.0, 0.5]), 0.3
    r = shooting.build_integrator(m, method, 1)(x=x0, u=u, p=[], t0=0.0, dt=dt, z0=m.z0)
    x_ref = _sinh_flow(x0, u, dt)
    eps = 1e-4  # truncation ~eps^2 and scipy's rounding ~1e-13/eps: both near 1e-8
    A_ref = np.column_stack([(_sinh_flow(x0 + eps * e, u, dt) - _sinh_flow(x0 - eps * e, u, dt)) / (2 * eps)
                             for e in np.eye(2)])
    B_ref = ((_sinh_flow(x0, u + eps, dt) - _sinh_flow(x0, u - eps, dt)) / (2 * eps))[:, None]
    assert np.abs(np.array(r["x_next"]).ravel() - x_ref).max() < 1e-5
    assert abs(float(r["z"]) - np.arcsinh(x_ref[0] + u)) < 1e-5
    assert np.abs(np.array(r["A"]) - A_ref).max() < 1e-5
    assert np.abs(np.array(r["B"]) - B_ref).max() < 1e-5


# ------------------------------------------------------------ sensitivities
@pytest.mark.parametrize("method, steps, unroll", [("rk4", 2, True), ("radau3", 2, True), ("gauss2", 5, False),
                                                   ("dopri5", 8, False)])
def test_A_B_against_finite_differences(toy: shooting.Model, method: str, steps: int, unroll: bool) -> None:
    F = shooting.build_integrator(toy, method, steps, unroll=unroll)
    x, u, dt = np.array([0.7, -0.4]), 0.2, 0.5
    r = F(x=x, u=u, p=[], t0=0.0, dt=dt, z0=0.0)
    A, B = np.array(r["A"]), np.array(r["B"])
    eps = 1e-6

    def xn(xv: np.ndarray, uv: float) -> np.ndarray:
        return np.array(F(x=xv, u=uv, p=[], t0=0.0, dt=dt, z0=0.0)["x_next"]).ravel()

    A_fd = np.column_stack([(xn(x + eps * e, u) - xn(x - eps * e, u)) / (2 * eps) for e in np.eye(2)])
    B_fd = ((xn(x, u + eps) - xn(x, u - eps)) / (2 * eps))[:, None]
    # Central differences: truncation ~eps^2 |x'''| and rounding ~1e-16/eps.
    assert np.abs(A - A_fd).max() < 1e-8 and np.abs(B - B_fd).max() < 1e-8


def test_doubled_equals_unrolled_and_none_equals_forward(toy: shooting.Model) -> None:
    a = shooting.build_integrator(toy, "radau2", 6, unroll=True)(x=X0, u=U, p=[], t0=0.1, dt=0.9, z0=0.0)
    b = shooting.build_integrator(toy, "radau2", 6, unroll=False)(x=X0, u=U, p=[], t0=0.1, dt=0.9, z0=0.0)
    c = shooting.build_integrator(toy, "radau2", 6, "none")(x=X0, u=U, p=[], t0=0.1, dt=0.9, z0=0.0)
    for key in ("x_next", "A", "B", "z"):
        assert np.allclose(np.array(a[key]), np.array(b[key]), rtol=0, atol=1e-14), key
    assert np.abs(np.array(a["x_next"]) - np.array(c["x_next"])).max() < 1e-15
    F = shooting.build_integrator(toy, "dopri5", 2)
    assert F.name_in() == ["x", "u", "p", "t0", "dt", "z0"] and F.name_out() == ["x_next", "A", "B", "err", "z"]


@pytest.mark.parametrize("method, unroll", [("rk4", True), ("rk4", False), ("radau2", True), ("dopri5", False)])
def test_sensitivity_modes_agree(toy: shooting.Model, method: str, unroll: bool) -> None:
    """"ad" differentiates through the converged Newton iterations, "forward" uses the implicit-function
    theorem: the same derivatives to rounding ("variational" builds forward's expressions)."""
    r = {mode: shooting.build_integrator(toy, method, 5, mode, unroll=unroll)(x=X0, u=U, p=[], t0=0.0, dt=0.7,
                                                                             z0=0.0)
         for mode in ("forward", "ad", "variational")}
    for mode in ("ad", "variational"):
        for key in ("x_next", "A", "B", "z"):
            assert np.abs(np.array(r[mode][key]) - np.array(r["forward"][key])).max() < 1e-12, (mode, key)


def test_unavailable_options_are_refused(toy: shooting.Model) -> None:
    with pytest.raises(ValueError, match="newton='simplified'"):
        shooting.build_integrator(toy, "radau2", newton="simplified")


def test_stability_lint_uses_the_reduced_jacobian() -> None:
    # x' = z, 0 = z + 50 x: the reduced ODE x' = -50 x is stiff; f_x alone is 0 and would call rk4 stable.
    x, z, u = ca.SX.sym("x"), ca.SX.sym("z"), ca.SX.sym("u")
    m = shooting.Model("stiff", x, u, z, z=z, alg=z + 50 * x, dt=0.1)
    rep = shooting.check_stability(m, "rk4")
    assert not rep.stable and rep.worst_h_lambda == pytest.approx(-5.0)
    assert rep.min_steps == 2  # rk4's real stability boundary is -2.785
