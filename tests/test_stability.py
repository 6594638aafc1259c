"""Stability function R(z), exact A-/L-stability, stability-region plot."""

from __future__ import annotations

import math
import os
from fractions import Fraction as F

import numpy as np
import pytest

from shooting.tableaus.catalogue import get_tableau, tableau_names
from shooting.tableaus.collocation import gauss_legendre, radau_iia
from shooting.tableaus.plot import plot_stability_region
from shooting.tableaus.stability import e_polynomial, is_a_stable
from shooting.tableaus.tableau import ButcherTableau

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _det_formula(tab, z):
    """Independent evaluation: R(z) = det(I - z(A - 1 b^T)) / det(I - z A) with numpy."""
    s = tab.stages
    A, b = np.array(tab.A), np.array(tab.b)
    eye = np.eye(s)
    return np.linalg.det(eye - z * (A - np.outer(np.ones(s), b))) / np.linalg.det(eye - z * A)


@pytest.mark.parametrize("name", tableau_names())
def test_stability_function_matches_determinant_formula(name):
    tab = get_tableau(name)
    rng = np.random.default_rng(0)
    z = rng.normal(size=(3, 4)) * 2 + 1j * rng.normal(size=(3, 4)) * 2
    r = tab.stability_function(z)
    assert r.shape == z.shape and r.dtype == np.complex128
    expected = np.vectorize(lambda zz: _det_formula(tab, zz))(z)
    np.testing.assert_allclose(r, expected, rtol=1e-10, atol=1e-12)


def test_euler_rk4_implicit_euler_closed_forms():
    assert get_tableau("euler").stability_polynomials() == ((1, 1), (1,))
    assert get_tableau("rk4").stability_polynomials() == (
        tuple(F(1, math.factorial(k)) for k in range(5)),
        (1,),
    )
    assert get_tableau("implicit_euler").stability_polynomials() == ((1,), (1, -1))
    z = np.linspace(-3, 1, 7) + 0.5j
    np.testing.assert_allclose(get_tableau("euler").stability_function(z), 1 + z)
    np.testing.assert_allclose(get_tableau("implicit_euler").stability_function(z), 1 / (1 - z))
    rk4 = sum(z**k / math.factorial(k) for k in range(5))
    np.testing.assert_allclose(get_tableau("rk4").stability_function(z), rk4, rtol=1e-14)
    value = get_tableau("euler").stability_function(-0.5)
    assert isinstance(value, complex) and value == 0.5


@pytest.mark.parametrize("name", ["midpoint", "heun", "ralston", "kutta3", "heun3", "ralston3", "ssprk3", "rk38"])
def test_explicit_p_equals_s_gives_truncated_exponential(name):
    tab = get_tableau(name)
    P, Q = tab.stability_polynomials()
    assert P == tuple(F(1, math.factorial(k)) for k in range(tab.order + 1)) and Q == (1,)


def _pade(k, j):
    """(k, j) Pade approximant of exp: numerator degree k, denominator degree j (HNW II, Thm IV.3.11)."""
    fact = math.factorial
    num = [F(fact(k + j - i) * fact(k), fact(k + j) * fact(i) * fact(k - i)) for i in range(k + 1)]
    den = [(-1) ** i * F(fact(k + j - i) * fact(j), fact(k + j) * fact(i) * fact(j - i)) for i in range(j + 1)]
    return num, den


@pytest.mark.parametrize("s", range(1, 5))
def test_gauss_is_diagonal_pade(s):
    P, Q = gauss_legendre(s).stability_polynomials()
    num, den = _pade(s, s)
    assert len(P) == len(num) and len(Q) == len(den)
    assert all(abs(x - y) < F(1, 10**60) for x, y in zip(P + Q, num + den, strict=True))
    # And R(z) - exp(z) = O(z^(2s+1)): halving z divides the error by ~2^(2s+1).
    z = np.array([0.02, 0.01])
    err = np.abs(gauss_legendre(s).stability_function(z) - np.exp(z))
    if s <= 2:
        assert err[0] / err[1] == pytest.approx(2 ** (2 * s + 1), rel=0.05)
    assert gauss_legendre(s).is_a_stable() and not gauss_legendre(s).is_l_stable()
    assert e_polynomial(gauss_legendre(s)) == ()  # |R(iy)| = 1


@pytest.mark.parametrize("s", range(1, 5))
def test_radau_iia_is_subdiagonal_pade(s):
    P, Q = radau_iia(s).stability_polynomials()
    num, den = _pade(s - 1, s)
    assert len(P) == len(num) and len(Q) == len(den)
    assert all(abs(x - y) < F(1, 10**60) for x, y in zip(P + Q, num + den, strict=True))


@pytest.mark.parametrize(
    "name, a_stable, l_stable",
    [
        ("gauss2", True, False),
        ("gauss3", True, False),
        ("implicit_midpoint", True, False),
        ("radau2", True, True),
        ("radau3", True, True),
        ("implicit_euler", True, True),
    ]
    + [(n, False, False) for n in ["euler", "midpoint", "heun", "ralston", "kutta3", "heun3",
                                    "ralston3", "ssprk3", "rk4", "rk38", "bs3", "rkf45",
                                    "cashkarp", "dopri5"]],
)
def test_a_and_l_stability_flags(name, a_stable, l_stable):
    tab = get_tableau(name)
    assert tab.is_a_stable() is a_stable
    assert tab.is_l_stable() is l_stable


@pytest.mark.parametrize("s", range(4, 9))
def test_high_order_collocation_stability(s):
    assert gauss_legendre(s).is_a_stable() and not gauss_legendre(s).is_l_stable()
    assert radau_iia(s).is_l_stable()


@pytest.mark.parametrize(
    "theta, a_stable, l_stable",
    [(F(1, 4), False, False), (F(1, 2), True, False), (F(3, 4), True, False), (F(1), True, True)],
)
def test_theta_method(theta, a_stable, l_stable):
    """R = (1 + (1-theta) z) / (1 - theta z): A-stable iff theta >= 1/2, L-stable iff theta = 1."""
    tab = ButcherTableau([[theta]], [1])
    assert tab.is_a_stable() is a_stable and tab.is_l_stable() is l_stable


def test_pole_in_left_half_plane_is_not_a_stable():
    # R = 1 / (1 + z) ... after a = -1: Q = 1 + z has its root at z = -1.
    tab = ButcherTableau([[-1]], [1])
    assert tab.stability_polynomials() == ((1, 2), (1, 1))
    assert not is_a_stable(tab)


def test_trapezoidal_rule_and_sdirk():
    trap = ButcherTableau([[0, 0], ["1/2", "1/2"]], ["1/2", "1/2"])  # Lobatto IIIA, s = 2
    assert trap.is_a_stable() and not trap.is_l_stable() and trap.order == 2
    g = 1 - 1 / math.sqrt(2)  # Alexander's L-stable SDIRK2 (floats: inexact tableau)
    sdirk = ButcherTableau([[g, 0], [1 - g, g]], [1 - g, g])
    assert sdirk.diagonally_implicit and sdirk.order == 2
    assert sdirk.is_a_stable() and sdirk.is_l_stable()
    # SDIRK2 with gamma = 1/4 (order 2): the A-stability boundary, |R(iy)| = 1.
    edge = ButcherTableau([["1/4", 0], ["1/2", "1/4"]], ["1/2", "1/2"])
    assert e_polynomial(edge) == () and edge.is_a_stable() and not edge.is_l_stable()
    # [[g, 0], [1 - g, g]], b = (1 - g, g): E(w) = -7/25 w + w^2/625 < 0 near 0 for g = 1/5.
    g = F(1, 5)
    bad = ButcherTableau([[g, 0], [1 - g, g]], [1 - g, g])
    assert e_polynomial(bad) == (0, F(-7, 25), F(1, 625))
    assert bad.is_a_stable() is False
    good = ButcherTableau([["3/10", 0], ["7/10", "3/10"]], ["7/10", "3/10"])
    assert good.is_a_stable() and good.is_l_stable()


@pytest.mark.parametrize(
    "roots, nonnegative",
    [
        ([1, 1], True),  # (w - 1)^2: negative coefficient, but >= 0
        ([1, 1, -1], True),  # (w - 1)^2 (w + 1)
        ([1, 2], False),  # negative on (1, 2)
        ([0, 1, -1], False),  # w^3 - w < 0 on (0, 1)
        ([F(1, 3), F(1, 3), 2, 2], True),
        ([F(1, 3), F(1, 3), F(1, 3), 2, 2, -5], False),  # odd multiplicity at 1/3
        ([], True),
    ],
)
def test_exact_nonnegativity_on_half_line(roots, nonnegative):
    from shooting.tableaus.polynomials import nonnegative_on_halfline, poly_from_roots

    assert nonnegative_on_halfline(poly_from_roots(roots)) is nonnegative
    assert nonnegative_on_halfline([-x for x in poly_from_roots(roots)]) is (roots == [] and False)


def test_reducible_method_cancels_common_factor():
    # Two identical implicit-midpoint stages: R = (1 + z/2) / (1 - z/2) after cancelling (1 - z/2).
    tab = ButcherTableau([["1/2", 0], [0, "1/2"]], ["1/2", "1/2"])
    assert tab.stability_polynomials() == ((1, F(1, 2)), (1, F(-1, 2)))
    assert tab.is_a_stable() and not tab.is_l_stable()


def test_same_order_5_different_stability_functions():
    """Supports the slide erratum: from order 5 on R depends on the tableau."""
    assert get_tableau("dopri5").stability_polynomials() != get_tableau("cashkarp").stability_polynomials()
    assert get_tableau("rk4").stability_polynomials() == get_tableau("rk38").stability_polynomials()


@pytest.mark.parametrize("name", ["rk4", "radau3", "gauss2", "dopri5", "euler"])
def test_plot_writes_png_and_no_temp_file(tmp_path, name):
    path = tmp_path / f"{name}.png"
    out = get_tableau(name).plot_stability_region(path)
    assert out == str(path)
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000
    assert os.listdir(tmp_path) == [f"{name}.png"]


def test_plot_options_and_errors(tmp_path):
    tab = get_tableau("heun")
    path = plot_stability_region(tab, str(tmp_path / "heun.png"), window=(-3, 1, -2, 2), resolution=50, title="Heun")
    assert open(path, "rb").read(8) == PNG_MAGIC
    with pytest.raises(ValueError, match="window must be"):
        plot_stability_region(tab, tmp_path / "x.png", window=(1, -1, 0, 1))
    with pytest.raises(ValueError, match="resolution must be an integer >= 20"):
        plot_stability_region(tab, tmp_path / "x.png", resolution=5)
    with pytest.raises(ValueError, match="directory .* does not exist"):
        plot_stability_region(tab, tmp_path / "missing" / "x.png")
    with pytest.raises(TypeError):
        tab.plot_stability_region(tmp_path / "x.png", colour="red")
    assert sorted(os.listdir(tmp_path)) == ["heun.png"]
