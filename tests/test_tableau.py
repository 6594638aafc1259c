"""ButcherTableau validation, JSON round trips and the named catalogue."""

from __future__ import annotations

import json
from fractions import Fraction as F

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from shooting.tableaus.catalogue import get_tableau, rk2, rk3, tableau_names
from shooting.tableaus.collocation import gauss_legendre, radau_iia
from shooting.tableaus.tableau import INEXACT_TOLERANCE, ButcherTableau, load_tableau

RK4 = dict(
    A=[[0, 0, 0, 0], ["1/2", 0, 0, 0], [0, "1/2", 0, 0], [0, 0, 1, 0]],
    b=["1/6", "1/3", "1/3", "1/6"],
)

# name: (order, embedded_order, explicit) -- from the literature, not from the code.
EXPECTED = {
    "euler": (1, None, True),
    "midpoint": (2, None, True),
    "heun": (2, None, True),
    "ralston": (2, None, True),
    "kutta3": (3, None, True),
    "heun3": (3, None, True),
    "ralston3": (3, None, True),
    "ssprk3": (3, None, True),
    "rk4": (4, None, True),
    "rk38": (4, None, True),
    "bs3": (3, 2, True),
    "rkf45": (4, 5, True),
    "cashkarp": (5, 4, True),
    "dopri5": (5, 4, True),
    "implicit_euler": (1, None, False),
    "implicit_midpoint": (2, None, False),
    "gauss2": (4, None, False),
    "gauss3": (6, None, False),
    "radau2": (3, None, False),
    "radau3": (5, None, False),
}


# --------------------------------------------------------------------------
# Catalogue
# --------------------------------------------------------------------------
def test_catalogue_names_cover_the_required_set():
    assert set(EXPECTED) <= set(tableau_names())
    assert all(isinstance(n, str) for n in tableau_names())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_catalogue_orders_and_structure(name):
    tab = get_tableau(name)
    order, embedded_order, explicit = EXPECTED[name]
    assert tab.name == name
    assert tab.order == order == tab.verified_order()
    assert tab.embedded_order == embedded_order
    if embedded_order is not None:
        assert tab.verified_order(embedded=True) == embedded_order
    assert tab.explicit is explicit and tab.implicit is not explicit
    # Consistency, exactly and in floats.
    assert sum(tab.b_exact) == 1 or abs(sum(tab.b_exact) - 1) < 1e-40
    assert all(abs(sum(row) - ci) <= 1e-40 for row, ci in zip(tab.A_exact, tab.c_exact, strict=True))
    np.testing.assert_allclose(tab.A.sum(axis=1), tab.c, atol=1e-15)
    assert tab.b.sum() == pytest.approx(1.0, abs=1e-15)
    assert tab.A.shape == (tab.stages, tab.stages) and tab.b.shape == tab.c.shape == (tab.stages,)
    assert tab.A.dtype == np.float64
    assert not tab.A.flags.writeable and not tab.b.flags.writeable
    assert tab.description and tab.reference
    assert tab.description.startswith(f"{order}")
    assert name in str(tab)


@pytest.mark.parametrize("name", ["euler", "rk4", "rkf45", "dopri5", "gauss3", "radau2"])
def test_float_arrays_are_correctly_rounded(name):
    tab = get_tableau(name)
    for row_f, row_x in zip(tab.A, tab.A_exact, strict=True):
        assert [float(x) for x in row_x] == list(row_f)
    assert [float(x) for x in tab.b_exact] == list(tab.b)


def _rk_step(tab, b, f, t, x, h):
    """One step of any tableau; implicit stages by fixed-point iteration (h small)."""
    K = np.array([f(t, x)] * tab.stages)
    for _ in range(1 if tab.explicit else 200):
        for i in range(tab.stages):  # forward substitution is exact for explicit A
            K[i] = f(t + tab.c[i] * h, x + h * tab.A[i] @ K)
    return x + h * b @ K


def _forced_pendulum(t, x):
    return np.array([x[1], -np.sin(x[0]) + 0.5 * np.cos(2.0 * t)])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_measured_local_error_order(name):
    """Independent truth: local error ~ h^(p+1) on a non-autonomous nonlinear ODE."""
    tab = get_tableau(name)
    t0, x0 = 0.3, np.array([0.8, -0.4])
    hs = np.array([0.2, 0.1, 0.05])
    ref = [
        solve_ivp(_forced_pendulum, (t0, t0 + h), x0, method="DOP853", rtol=1e-13, atol=1e-15).y[:, -1]
        for h in hs
    ]
    for weights, p in ((tab.b, tab.order), (tab.b_hat, tab.embedded_order)):
        if weights is None:
            continue
        errs = [np.linalg.norm(_rk_step(tab, weights, _forced_pendulum, t0, x0, h) - r)
                for h, r in zip(hs, ref, strict=True)]
        slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
        assert slope > p + 1 - 0.45, (name, p, errs)
        # dopri5's 5th order weights have optimised (tiny) principal error
        # coefficients: at these h the 6th order terms still dominate (slope ~6.8).
        if (name, p) != ("dopri5", 5):
            assert slope < p + 1 + 0.45, (name, p, errs)


def test_get_tableau_is_cached_and_case_insensitive():
    assert get_tableau("rk4") is get_tableau("rk4")
    assert get_tableau("RK4") is get_tableau("rk4")


def test_unknown_name_lists_names_and_suggests():
    with pytest.raises(ValueError, match=r"unknown tableau 'gaus3'.*Did you mean 'gauss3'.*dopri5"):
        get_tableau("gaus3")
    with pytest.raises(ValueError, match=r"unknown tableau 'xyzzy'. Valid names: euler, "):
        get_tableau("xyzzy")
    with pytest.raises(ValueError, match="Did you mean 'dopri5'"):
        get_tableau("dopri")
    with pytest.raises(ValueError, match="name must be a str"):
        get_tableau(4)


def test_collocation_aliases():
    assert get_tableau("gauss2") == gauss_legendre(2)
    assert get_tableau("gauss3") == gauss_legendre(3)
    assert get_tableau("implicit_midpoint") == gauss_legendre(1)
    assert get_tableau("radau2") == radau_iia(2)
    assert get_tableau("radau3") == radau_iia(3)
    assert get_tableau("implicit_euler") == radau_iia(1)
    assert get_tableau("gauss2") != get_tableau("radau2")
    assert hash(get_tableau("gauss2")) == hash(gauss_legendre(2))


def test_structure_flags():
    assert get_tableau("dopri5").fsal and get_tableau("bs3").fsal
    assert not get_tableau("rk4").fsal and not get_tableau("radau3").fsal
    assert get_tableau("radau3").stiffly_accurate
    assert get_tableau("implicit_euler").diagonally_implicit
    assert not get_tableau("gauss2").diagonally_implicit
    assert not get_tableau("rk4").diagonally_implicit
    assert get_tableau("dopri5").embedded and not get_tableau("rk4").embedded


# --------------------------------------------------------------------------
# Seed-note errata: the notes' versions fail the consistency checks.
# --------------------------------------------------------------------------
def test_cheat_sheet_ralston_typo_is_rejected():
    with pytest.raises(ValueError, match=r"b sums to 7/12"):
        ButcherTableau([[0, 0], ["2/3", 0]], ["1/4", "1/3"])
    assert get_tableau("ralston").b_exact == (F(1, 4), F(3, 4))


def test_cheat_sheet_midpoint_typo_is_rejected():
    with pytest.raises(ValueError, match=r"b sums to 1/2"):
        ButcherTableau([[0, 0], ["1/2", 0]], [0, "1/2"])
    assert get_tableau("midpoint").b_exact == (0, 1)


def test_slides_rkf45_tableau_matches_catalogue():
    """Typed from the 003 slides (Runge-Kutta-Fehlberg 4/5): x1 row = b, x2 row = b_hat."""
    slides = {
        "c": "0 1/4 3/8 12/13 1 1/2",
        "A": ["", "1/4", "3/32 9/32", "1932/2197 -7200/2197 7296/2197",
              "439/216 -8 3680/513 -845/4104", "-8/27 2 -3544/2565 1859/4104 -11/40"],
        "x1": "25/216 0 1408/2565 2197/4104 -1/5 0",
        "x2": "16/135 0 6656/12825 28561/56430 -9/50 2/55",
    }
    A = [[F(x) for x in row.split()] + [F(0)] * (6 - len(row.split())) for row in slides["A"]]
    tab = ButcherTableau(A, slides["x1"].split(), slides["c"].split(), b_hat=slides["x2"].split())
    assert tab == get_tableau("rkf45")
    assert (tab.order, tab.embedded_order) == (4, 5)


# --------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [F(1, 2), 1, F(2, 3), "1/3", 3, -1, "0.25", 0.37, 1.5])
def test_rk2_family_has_order_2(alpha):
    tab = rk2(alpha)
    assert tab.order == tab.verified_order() == 2
    assert tab.exact is not isinstance(alpha, float)
    assert tab.c[1] == pytest.approx(float(F(alpha)))


def test_rk2_special_cases():
    assert rk2(F(1, 2)) == get_tableau("midpoint")
    assert rk2(1) == get_tableau("heun")
    assert rk2("2/3") == get_tableau("ralston")
    with pytest.raises(ValueError, match=r"rk2: alpha = 0"):
        rk2(0)
    with pytest.raises(ValueError, match="alpha"):
        rk2("two")


@pytest.mark.parametrize("alpha", [F(1, 2), F(1, 3), "1/4", 2, -1, "3/4", 0.1, 0.9, 1.7])
def test_rk3_family_has_order_3(alpha):
    tab = rk3(alpha)
    assert tab.order == tab.verified_order() == 3
    assert tab.exact is not isinstance(alpha, float)


@pytest.mark.parametrize("alpha", [F(1, 3), F(1, 2), F(3, 4), 2])
def test_rk3_matches_cheat_sheet_formula(alpha):
    a = F(alpha)
    k = (1 - a) / (a * (3 * a - 2))  # cheat sheet 004, generic third-order method
    sheet_A = ((0, 0, 0), (a, 0, 0), (1 + k, -k, 0))
    sheet_b = (F(1, 2) - 1 / (6 * a), 1 / (6 * a * (1 - a)), (2 - 3 * a) / (6 * (1 - a)))
    tab = rk3(alpha)
    assert tab.A_exact == sheet_A and tab.b_exact == sheet_b


def test_rk3_special_case_and_forbidden_values():
    assert rk3("1/2") == get_tableau("kutta3")
    for bad in (0, "2/3", 1, F(2, 3), 2 / 3):
        with pytest.raises(ValueError, match=r"rk3: alpha = .* must differ from 0, 2/3 and 1"):
            rk3(bad)


# --------------------------------------------------------------------------
# Construction and validation
# --------------------------------------------------------------------------
def test_exact_input_and_defaults():
    tab = ButcherTableau(**RK4, name="rk4")
    assert tab.exact and tab.tolerance == 0
    assert tab.c_exact == (0, F(1, 2), F(1, 2), 1)
    assert tab.order == 4 and tab.embedded_order is None and tab.b_hat is None
    assert tab.A_exact[1][0] == F(1, 2) and isinstance(tab.A_exact[1][0], F)
    assert tab == get_tableau("rk4")


def test_accepts_numpy_and_mixed_entry_types():
    tab = ButcherTableau(np.array([[0, 0], [1, 0]]), [F(1, 2), "0.5"], [np.int64(0), 1])
    assert tab.exact and tab.order == 2
    floats = ButcherTableau(np.array([[0.0, 0.0], [0.5, 0.0]]), np.array([0.0, 1.0]))
    assert not floats.exact and floats.tolerance == INEXACT_TOLERANCE and floats.order == 2


def test_float_input_is_checked_with_tolerance():
    third = 1 / 3
    tab = ButcherTableau(
        [[0, 0, 0, 0], [0.5, 0, 0, 0], [0, 0.5, 0, 0], [0, 0, 1, 0]],
        [1 / 6, third, third, 1 / 6],
    )
    assert not tab.exact and tab.order == 4
    assert tab.A_exact[1][0] == F(0.5)
    # Off by 1e-9: beyond the tolerance.
    with pytest.raises(ValueError, match="b sums to"):
        ButcherTableau([[0, 0], [0.5, 0]], [0.0, 1.0 + 1e-9])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(A=[[0, 0], [1]], b=[1, 0]), r"row 1 of A has 1 entries but A has 2 rows"),
        (dict(A=np.zeros((2, 2, 2)), b=[1, 0]), r"A must be a 2-D array"),
        (dict(A=[], b=[]), r"A is empty"),
        (dict(A=5, b=[1]), r"A must be a square"),
        (dict(A=[[0, 0], [1, 0]], b=[1, 0, 0]), r"b has 3 entries but A is 2 x 2"),
        (dict(A=[[0, 0], [1, 0]], b=[1, 0], c=[0]), r"c has 1 entries"),
        (dict(A=[[0, 0], [1, 0]], b=[1, 0], b_hat=[1]), r"b_hat has 1 entries"),
        (dict(A=[[0, 0, 0], [1, 0, 0], ["1/4", "1/4", 0]], b=[1, 0, 0], c=[0, 1, "3/4"]),
         r"row 2 of A sums to 1/2 but c\[2\] = 3/4 \(c must equal A @ 1"),
        (dict(A=[[0, 0], [1, 0]], b=["1/2", "1/4"]), r"b sums to 3/4 but must sum to 1"),
        (dict(A=[[0, 0], [1, 0]], b=[1, 0], b_hat=[1, 1]), r"b_hat sums to 2 but must sum to 1"),
        (dict(A=[[0, 0], [float("nan"), 0]], b=[1, 0]), r"A\[1, 0\] is nan"),
        (dict(A=[[0, 0], [1, 0]], b=[float("inf"), 0]), r"b\[0\] is inf"),
        (dict(A=[[0, 0], ["nan", 0]], b=[1, 0]), r"A\[1, 0\] is 'nan'.*finite"),
        (dict(A=[[0, 0], ["abc", 0]], b=[1, 0]), r"A\[1, 0\] = 'abc' is not a number"),
        (dict(A=[[0, 0], [None, 0]], b=[1, 0]), r"A\[1, 0\] = None \(NoneType\) is not a number"),
        (dict(A=[[0, 0], [True, 0]], b=[1, 0]), r"A\[1, 0\] = True is a bool"),
        (dict(A=[[0, 0], [1, 0]], b=[1, 0], c=["x", 1]), r"c\[0\] = 'x' is not a number"),
        (dict(A=[[0, 0], [1, 0]], b="10"), r"b must be a sequence"),
        (dict(A=[[0]], b=None), r"b must be a sequence of s = 1 numbers, got None"),
        (dict(**RK4, order=5), r"declared order 5 but the order conditions give 4"),
        (dict(**RK4, order=2.0), r"order must be an integer >= 1"),
        (dict(**RK4, order=0), r"order must be an integer >= 1"),
        (dict(**RK4, embedded_order=3), r"embedded_order = 3 given but the tableau has no b_hat"),
        (dict(**RK4, b_hat=[0, 0, 0, 1], embedded_order=2),
         r"declared embedded order 2 but the order conditions give 1"),
        (dict(**RK4, tolerance=-1.0), r"tolerance must be a finite number >= 0"),
        (dict(**RK4, name=3), r"name must be a str"),
    ],
)
def test_bad_input_is_a_value_error_naming_it(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ButcherTableau(**kwargs)


def test_embedded_order_without_b_hat():
    with pytest.raises(ValueError, match="has no embedded weights b_hat"):
        get_tableau("rk4").verified_order(embedded=True)


def test_tableau_is_frozen():
    tab = get_tableau("rk4")
    with pytest.raises(AttributeError):
        tab.order = 3
    with pytest.raises(ValueError):
        tab.A[0, 0] = 1.0


def test_replace_keeps_exact_coefficients():
    tab = get_tableau("gauss2").replace(name="g2", description="renamed")
    assert tab == get_tableau("gauss2") and tab.name == "g2"
    assert tab.tolerance == get_tableau("gauss2").tolerance
    hat = get_tableau("dopri5").replace(b=get_tableau("dopri5").b_hat_exact, b_hat=None)
    assert hat.order == 4 and hat.embedded_order is None
    with pytest.raises(ValueError, match="unknown fields"):
        tab.replace(nmae="x")


def test_str_shows_fraction_layout():
    text = str(get_tableau("rk4"))
    lines = text.splitlines()
    assert lines[0] == "rk4: 4th order explicit Runge-Kutta method, 4 stages. Kutta (1901)."
    assert "1/2 | 1/2" in text and "1/6" in text and "(b, order 4)" in text
    assert "(b_hat, order 4)" in str(get_tableau("dopri5"))
    assert "ButcherTableau(name='rk4'" in repr(get_tableau("rk4"))
    # Nearly exact tableaus print floats, not 300-bit fractions.
    assert "0.21132486540518" in str(get_tableau("gauss2"))
    assert max(len(line) for line in str(get_tableau("gauss3")).splitlines()) < 200


def test_summary_for_ad_hoc_tableau():
    tab = ButcherTableau([[0, 0], [1, 0]], ["1/2", "1/2"], b_hat=[1, 0])
    assert tab.summary == (
        "2nd order explicit Runge-Kutta method with an embedded 1st order method, 2 stages."
    )


# --------------------------------------------------------------------------
# JSON
# --------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_json_round_trip(name, tmp_path):
    tab = get_tableau(name)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(tab.to_dict()))
    back = load_tableau(path)
    assert back == tab
    assert (back.order, back.embedded_order, back.name) == (tab.order, tab.embedded_order, name)
    assert back.tolerance == tab.tolerance
    assert ButcherTableau.from_json(tab.to_dict()) == tab


def test_json_fraction_strings_and_optional_c(tmp_path):
    path = tmp_path / "heun.json"
    path.write_text('{"A": [[0, 0], [1, 0]], "b": ["1/2", "1/2"], "name": "h", "order": 2}')
    tab = load_tableau(str(path))
    assert tab.exact and tab.c_exact == (0, 1) and tab.name == "h"
    floats = ButcherTableau.from_json({"A": [[0, 0], [0.5, 0]], "b": [0, 1]})
    assert not floats.exact


@pytest.mark.parametrize(
    "content, match",
    [
        ("{not json", r"is not valid JSON: .* line 1"),
        ("[1, 2]", r"must contain a JSON object"),
        ('{"b": [1]}', r"missing required key\(s\) \['A'\]"),
        ('{"A": [[0]]}', r"missing required key\(s\) \['b'\]"),
        ('{"A": [[0, 0], [1]], "b": [1, 0]}', r"row 1 of A has 1 entries"),
        ('{"A": [[0]], "b": [1], "oder": 1}', r"unknown key\(s\) \['oder'\]"),
        ('{"A": [[0]], "b": ["1/0"]}', r"b\[0\] = '1/0' is not a number"),
        ('{"A": [[0]], "b": [1], "order": 2}', r"declared order 2 but the order conditions give 1"),
    ],
)
def test_json_errors_name_the_file(tmp_path, content, match):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=r"tableau file '.*bad\.json'") as info:
        load_tableau(path)
    assert info.match(match)


def test_json_missing_file_and_bad_source(tmp_path):
    with pytest.raises(ValueError, match=r"tableau file '.*nope\.json' does not exist"):
        load_tableau(tmp_path / "nope.json")
    with pytest.raises(ValueError, match=r"tableau dict: missing required key"):
        ButcherTableau.from_json({"A": [[0]]})
    with pytest.raises(ValueError, match="expects a path or a dict"):
        ButcherTableau.from_json(42)
