"""Variable scaling (issue 35, item 5): ``x_scale``/``u_scale`` on `MultipleShootingOCP` and `OCPProblem`.

Truth: a change of variables does not change the optimum, so IPOPT on the unscaled problem at tight tolerances is
the reference for the scaled IPOPT solve, the scaled Python SQP and the scaled C (its interface in the model's units);
and do-mpc's polymerisation reactor retyped in grams (tests/poly_reactor.py: the same plant, masses in 1e7) is the
badly scaled plant that float exports only scaled.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import shooting
from poly_reactor import make_model as reactor_model
from poly_reactor import make_ocp as reactor_ocp
from shooting.codegen import export_controller, load_controller
from support import needs_gcc

TIGHT = {"ipopt.tol": 1e-12, "ipopt.constr_viol_tol": 1e-12}
#: Scales that are not powers of two (their divisions round) and far from one, on every variable.
CARTPOLE_X_SCALE, CARTPOLE_U_SCALE = [3.0, 0.3, 7.0, 0.2], [37.0]


def _cartpole(**options: object) -> shooting.MultipleShootingOCP:
    """The cart-pole's default scenario at N = 30 with its hard cart bound |p| <= 2, soft if asked."""
    model = shooting.load_model("cartpole")
    problem = shooting.default_scenario("cartpole").problem.with_changes(horizon=30, **options)
    return shooting.MultipleShootingOCP.from_problem(model, problem)


@pytest.mark.parametrize("name", shooting.model_names())
def test_auto_leaves_every_built_in_model_unscaled(name: str) -> None:
    # every built-in's magnitudes are within 100 of one: "auto" must change nothing there (the twin is the OCP)
    ocp = shooting.MultipleShootingOCP.from_problem(shooting.load_model(name), shooting.default_scenario(name).problem)
    assert (ocp.x_scale == 1).all() and (ocp.u_scale == 1).all()
    assert ocp.scaled_twin()[0] is ocp


def test_auto_scales_a_badly_scaled_plant_by_powers_of_two_near_its_magnitudes() -> None:
    ocp = reactor_ocp(reactor_model(grams=True), 4, grams=True)
    # m_W: no finite bound but 0, its start 1e7 g; T_R: |bound| 365.15 K; m_P: lower bound 26000 g; the feed 3e7 g/h
    for scale, magnitude in ((ocp.x_scale[0], 1e7), (ocp.x_scale[3], 365.15), (ocp.x_scale[2], 26000.0),
                             (ocp.u_scale[0], 3e7), (ocp.u_scale[1], 373.15)):
        assert np.log2(scale) == np.round(np.log2(scale))
        assert magnitude / np.sqrt(2) <= scale <= magnitude * np.sqrt(2)
    assert ocp.x_scale[9] == 512.0  # T_adiab: its upper bound 382.15 K


@pytest.mark.parametrize("value, fragment", [
    (0.0, "positive"), ([1.0, -2.0, 1.0, 1.0], "positive"), ([1.0, 1.0], "needs 4"), ("large", "'auto'"),
    ([1.0, np.nan, 1.0, 1.0], "NaN"), ([1.0, np.inf, 1.0, 1.0], "inf")])
def test_a_bad_scale_is_a_value_error_naming_it(value: object, fragment: str) -> None:
    with pytest.raises(ValueError, match="x_scale") as err:
        _cartpole(x_scale=value)
    assert fragment in str(err.value)


@pytest.mark.parametrize("soft", [False, True])
def test_ipopt_in_scaled_variables_finds_the_unscaled_optimum(soft: bool) -> None:
    truth = _cartpole(soft_x_bounds=soft, x_scale=1.0, u_scale=1.0, solver_options=TIGHT)
    scaled = _cartpole(soft_x_bounds=soft, x_scale=CARTPOLE_X_SCALE, u_scale=CARTPOLE_U_SCALE, solver_options=TIGHT)
    assert np.allclose(scaled.x_scale, CARTPOLE_X_SCALE) and np.allclose(scaled.u_scale, CARTPOLE_U_SCALE)
    x0 = np.array([0.0, 0.6, 0.0, 0.0])
    a, b = truth.solve(x0), scaled.solve(x0)
    assert a.success and b.success
    # the same KKT point in the model's units (the solver's stopping tolerance times the problem's scale)
    assert np.abs(b.u - a.u).max() <= 1e-6 * 80
    assert np.abs(b.x - a.x).max() <= 1e-7 * (1 + np.abs(a.x).max())
    assert abs(b.cost - a.cost) <= 1e-9 * abs(a.cost)
    assert abs(scaled.cost(b.x, b.u) - b.cost) <= 1e-9 * abs(b.cost)
    assert np.allclose(scaled.path_values(b.x, b.u), truth.path_values(b.x, b.u))
    assert b.max_violation <= 1e-8
    if soft:
        assert np.allclose(b.slacks, a.slacks, atol=1e-8)
    # warm start from its own shift, and from a guess given in the model's units
    warm = scaled.solve(b.x[1], warm_start=b.shifted())
    assert warm.success and np.allclose(b.shifted().x, np.vstack([b.x[1:], b.x[-1:]]))
    again = scaled.solve(x0, guess=(a.x, a.u))  # (measured: 7 iterations from the optimum, 18 from it scaled wrong)
    assert again.success and again.iterations <= min(10, b.iterations // 2)
    assert np.abs(again.u - a.u).max() <= 1e-6 * 80


@pytest.mark.parametrize("soft", [False, True])
def test_the_python_sqp_in_scaled_variables_answers_in_the_models_units(soft: bool) -> None:
    x0 = np.array([0.3, 0.5, 0.0, 0.0])
    plain = shooting.RTIController(_cartpole(soft_x_bounds=soft, x_scale=1.0, u_scale=1.0))
    scaled = shooting.RTIController(_cartpole(soft_x_bounds=soft, x_scale=CARTPOLE_X_SCALE,
                                              u_scale=CARTPOLE_U_SCALE))
    # the QP works in x / dx: soft-bounded states keep their units (their slacks' price is per unit of the model)
    assert scaled._dx[0] == (1.0 if soft else 3.0) and scaled._du[0] == 37.0
    a, b = plain.solve(x0, max_iter=100), scaled.solve(x0, max_iter=100)
    assert a.status == 0 and b.status == 0
    assert np.abs(b.u - a.u).max() <= 1e-6 * 160 and np.abs(b.x - a.x).max() <= 1e-6 * (1 + np.abs(a.x).max())
    # real-time iterations from there: the same inputs, in newtons
    for k in range(3):
        ua, ub = plain.step(a.x[k], k * 0.05).u, scaled.step(a.x[k], k * 0.05).u
        assert np.abs(ub - ua).max() <= 1e-6 * 160, (k, ua, ub)


@needs_gcc
def test_the_c_controller_in_scaled_variables_speaks_the_models_units(tmp_path: Path) -> None:
    x0 = np.array([0.3, 0.5, 0.0, 0.0])
    runs = {}
    for key, scales in (("plain", dict(x_scale=1.0, u_scale=1.0)),
                        ("scaled", dict(x_scale=CARTPOLE_X_SCALE, u_scale=CARTPOLE_U_SCALE))):
        ocp = _cartpole(**scales)
        report = export_controller(ocp, tmp_path / key, x0=x0, check=True, check_steps=10)
        assert report.ok, report.problems
        assert report.manifest["scaling"]["u_scale"] == [1.0 if key == "plain" else 37.0]
        c = load_controller(tmp_path / key)
        c.reset(x0)  # (the state held over the horizon: the C divides x0 by x_scale)
        res = c.solve(x0, max_iter=100)
        assert res.status == 0
        c.set_reference(30, [0.2, 0.0, 0.0, 0.0])  # a reference in metres
        steps = [c.step(x0 + 0.01 * k, 0.05 * k) for k in range(3)]
        runs[key] = (res, steps, c.x_pred.copy(), c.u_pred.copy())
    (a, sa, xa, ua), (b, sb, xb, ub) = runs["plain"], runs["scaled"]
    assert np.abs(b.u - a.u).max() <= 1e-6 * 160 and np.abs(b.x - a.x).max() <= 1e-6 * (1 + np.abs(a.x).max())
    for one, two in zip(sa, sb, strict=True):
        assert one.status == two.status == "ok"
        assert np.abs(two.u - one.u).max() <= 1e-6 * 160
    assert np.abs(ub - ua).max() <= 1e-6 * 160 and np.abs(xb - xa).max() <= 1e-6 * (1 + np.abs(xa).max())


@needs_gcc
def test_a_plant_in_grams_exports_in_float_only_scaled(tmp_path: Path) -> None:
    # do-mpc's polymerisation reactor in g and g/h (masses 1e7, the feed's bound 3e7). Unscaled (x_scale=1,
    # u_scale=1, today's main), float rounding moves the inputs beyond the check's allowance (measured: 3.8e-2 of the
    # range at sample 1, allowed 1e-2; 20 samples, scripts/bench_convergence.py --scaling); with "auto" the C works in
    # x / x_scale and its inputs are within 1e-4 of the double reference (measured 7e-5)
    scaled = reactor_ocp(reactor_model(grams=True), 10, grams=True)
    assert (scaled.x_scale > 1e3).sum() == 4 and scaled.u_scale[0] > 1e7
    report = export_controller(scaled, tmp_path / "auto", real="float", check=True, check_steps=12)
    assert report.ok, report.problems
    assert report.errors["u"] <= 1e-3


def test_a_dae_in_scaled_variables_keeps_its_solution_and_algebraic_states() -> None:
    # the built-in double pendulum is an index-1 DAE (its accelerations algebraic): the algebraic states are not
    # scaled, the differential ones are
    dip = shooting.load_model("dip")
    q = [10.0, 100.0, 100.0, 1.0, 1.0, 1.0]

    def ocp(**scales: object) -> shooting.MultipleShootingOCP:
        return shooting.MultipleShootingOCP(dip, 20, dt=0.02, Q=q, R=[1e-2], Q_terminal=[10 * v for v in q],
                                            solver_options={"ipopt.tol": 1e-10}, **scales)

    plain, scaled = ocp(x_scale=1.0, u_scale=1.0), ocp(x_scale=[3, 0.5, 0.25, 7, 2, 2], u_scale=13)
    a, b = plain.solve(dip.x0), scaled.solve(dip.x0)
    assert a.success and b.success
    # IPOPT at tol 1e-10 on two formulations of one NLP (tests/test_dae_mpc.py: inputs of size 20 agree to ~1e-6)
    assert np.abs(b.u - a.u).max() < 1e-5 and np.abs(b.x - a.x).max() < 1e-7 and np.abs(b.z - a.z).max() < 1e-6
    ra, rb = shooting.RTIController(plain).solve(dip.x0), shooting.RTIController(scaled).solve(dip.x0)
    assert ra.status == rb.status == 0
    assert np.abs(rb.u - ra.u).max() <= 1e-8 * 20 and np.abs(rb.x - ra.x).max() <= 1e-8


@pytest.mark.parametrize("scales", [{}, {"x_scale": CARTPOLE_X_SCALE, "u_scale": CARTPOLE_U_SCALE}])
def test_a_reference_of_the_wrong_shape_is_named_scaled_or_not(scales: dict[str, object]) -> None:
    controller = shooting.RTIController(_cartpole(**scales), initialize_with_ipopt=False)
    x0 = np.array([0.3, 0.5, 0.0, 0.0])
    for bad in ({"x_ref": [1.0, 2.0, 3.0]}, {"u_ref": np.zeros((5, 1))}, {"u_prev": [1.0, 2.0]}):
        with pytest.raises(ValueError, match=next(iter(bad))) as err:
            controller.step(x0, 0.0, **bad)
        assert "broadcast" not in str(err.value)
