"""Rooted trees, order conditions, collocation constructions (exact arithmetic)."""

from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from shooting.tableaus.catalogue import get_tableau
from shooting.tableaus.collocation import gauss_legendre, radau_iia
from shooting.tableaus.order_conditions import (
    ElementaryWeights,
    density,
    elementary_weight,
    order_bounds,
    order_from_trees,
    rooted_trees,
    simplifying_assumptions,
    symmetry,
    tree_order,
)
from shooting.tableaus.tableau import ButcherTableau

LEAF = ()
TALL3 = (((),),)
BUSHY3 = ((), ())


# --------------------------------------------------------------------------
# Trees
# --------------------------------------------------------------------------
def test_number_of_trees_is_oeis_a000081():
    assert [len(rooted_trees(n)) for n in range(1, 11)] == [1, 1, 2, 4, 9, 20, 48, 115, 286, 719]


@pytest.mark.parametrize("n", range(1, 9))
def test_trees_are_distinct_canonical_and_of_the_right_order(n):
    trees = rooted_trees(n)
    assert len(set(trees)) == len(trees)
    assert all(tree_order(t) == n for t in trees)
    canonical = lambda t: tuple(sorted(canonical(u) for u in t))  # noqa: E731
    assert all(canonical(t) == t for t in trees)


@pytest.mark.parametrize(
    "tree, gamma, sigma",
    [
        (LEAF, 1, 1),
        (((),), 2, 1),
        (BUSHY3, 3, 2),
        (TALL3, 6, 1),
        (((), (), ()), 4, 6),
        (((), ((),)), 8, 1),
        ((((), ()),), 12, 2),
        (((((),),),), 24, 1),
        ((((),), ((),)), 20, 2),  # root with two children of order 2: gamma = 5 * 2 * 2
    ],
)
def test_density_and_symmetry_of_known_trees(tree, gamma, sigma):
    assert density(tree) == gamma
    assert symmetry(tree) == sigma


@pytest.mark.parametrize("n", range(1, 9))
def test_tree_counting_identities(n):
    """Independent identities: sum n!/(gamma sigma) = (n-1)! (recursive trees), sum n!/sigma = n^(n-1) (Cayley)."""
    trees = rooted_trees(n)
    fact = math.factorial(n)
    assert sum(F(fact, density(t) * symmetry(t)) for t in trees) == math.factorial(n - 1)
    assert sum(F(fact, symmetry(t)) for t in trees) == n ** (n - 1)


def test_bad_tree_arguments():
    with pytest.raises(ValueError, match="order must be an integer >= 1"):
        rooted_trees(0)
    with pytest.raises(ValueError, match="a rooted tree is a tuple"):
        density([(), ()])


def test_stage_vectors_match_matrix_products():
    tab = get_tableau("rk4")
    A, c = np.array(tab.A), np.array(tab.c)
    w = ElementaryWeights(tab.A_exact)
    np.testing.assert_array_equal([float(x) for x in w.stage_vector(LEAF)], np.ones(4))
    np.testing.assert_array_equal([float(x) for x in w.stage_vector(((),))], c)
    np.testing.assert_array_equal([float(x) for x in w.stage_vector(BUSHY3)], c * c)
    np.testing.assert_array_equal([float(x) for x in w.stage_vector(TALL3)], A @ c)
    # Non-canonical child order is accepted.
    assert w.stage_vector((((),), ())) == w.stage_vector(((), ((),)))


def test_elementary_weights_of_rk4():
    tab = get_tableau("rk4")
    for n in range(1, 5):
        for t in rooted_trees(n):
            assert elementary_weight(tab.A_exact, tab.b_exact, t) == F(1, density(t))
    misses = [t for t in rooted_trees(5) if elementary_weight(tab.A_exact, tab.b_exact, t) != F(1, density(t))]
    assert misses  # RK4 is not of order 5
    assert order_from_trees(tab.A_exact, tab.b_exact) == 4
    assert order_from_trees(tab.A_exact, tab.b_exact, max_order=3) == 3


# --------------------------------------------------------------------------
# Deliberately broken tableaus drop to the right order
# --------------------------------------------------------------------------
def test_broken_rk4_weights_drop_to_order_2():
    # b2 + e, b3 - e keeps sum(b) and b.c (c2 = c3) and b.c^2, but b.(A c) changes.
    eps = F(1, 1000)
    A, b = get_tableau("rk4").A_exact, list(get_tableau("rk4").b_exact)
    b[1] += eps
    b[2] -= eps
    assert ButcherTableau(A, b).verified_order() == 2


def test_broken_rk4_matrix_drops_to_order_1():
    A = [list(r) for r in get_tableau("rk4").A_exact]
    A[3][2] += F(1, 100)  # c_4 follows the row sum, b.c != 1/2
    assert ButcherTableau(A, get_tableau("rk4").b_exact).verified_order() == 1


def test_broken_gauss2_drops_to_order_2():
    # a11 + d, a12 - d keeps c (and B(4)), but b.(A c) = 1/6 fails: order 2.
    g = get_tableau("gauss2")
    A = [list(r) for r in g.A_exact]
    A[0][0] += F(1, 1000)
    A[0][1] -= F(1, 1000)
    broken = ButcherTableau(A, g.b_exact, g.c_exact, tolerance=g.tolerance)
    assert broken.verified_order() == 2
    with pytest.raises(ValueError, match="declared order 4 but the order conditions give 2"):
        ButcherTableau(A, g.b_exact, g.c_exact, tolerance=g.tolerance, order=4)


def test_broken_dopri5_embedded_weights():
    d = get_tableau("dopri5")
    b_hat = list(d.b_hat_exact)
    b_hat[2] += F(1, 10**6)
    b_hat[3] -= F(1, 10**6)  # c_3 != c_4: b_hat.c changes -> order 1
    tab = ButcherTableau(d.A_exact, d.b_exact, b_hat=b_hat)
    assert (tab.order, tab.embedded_order) == (5, 1)


# --------------------------------------------------------------------------
# Collocation
# --------------------------------------------------------------------------
@pytest.mark.parametrize("s", range(1, 6))
def test_gauss_legendre_order_2s(s):
    tab = gauss_legendre(s)
    assert tab.order == tab.verified_order() == 2 * s
    # The tree path alone (no simplifying assumptions) agrees; gauss5 uses all 1205 trees.
    assert order_from_trees(tab.A_exact, tab.b_exact, tolerance=tab.tolerance) == 2 * s


@pytest.mark.parametrize("s", range(1, 5))
def test_radau_iia_order_2s_minus_1(s):
    tab = radau_iia(s)
    assert tab.order == tab.verified_order() == 2 * s - 1
    assert order_from_trees(tab.A_exact, tab.b_exact, tolerance=tab.tolerance) == 2 * s - 1
    assert tab.c_exact[-1] == 1 and tab.A_exact[-1] == tab.b_exact


@pytest.mark.parametrize("s", [6, 7, 8])
def test_high_stage_collocation_orders_beyond_the_tree_limit(s):
    assert gauss_legendre(s).verified_order() == 2 * s
    assert radau_iia(s).verified_order() == 2 * s - 1
    g = gauss_legendre(s)
    assert simplifying_assumptions(g.A_exact, g.b_exact, g.c_exact, tolerance=g.tolerance) == (2 * s, s, s)
    r = radau_iia(s)
    assert simplifying_assumptions(r.A_exact, r.b_exact, r.c_exact, tolerance=r.tolerance) == (2 * s - 1, s, s - 1)


@pytest.mark.parametrize("s", range(1, 9))
def test_gauss_nodes_and_weights_match_numpy_leggauss(s):
    x, w = np.polynomial.legendre.leggauss(s)
    tab = gauss_legendre(s)
    np.testing.assert_allclose(tab.c, (x + 1) / 2, atol=1e-14)
    np.testing.assert_allclose(tab.b, w / 2, atol=1e-14)


def test_rational_nodes_are_exact():
    r2 = radau_iia(2)
    assert r2.exact
    assert r2.c_exact == (F(1, 3), F(1))
    assert r2.A_exact == ((F(5, 12), F(-1, 12)), (F(3, 4), F(1, 4)))
    assert r2.b_exact == (F(3, 4), F(1, 4))
    for s in (1, 3, 5, 7):
        assert gauss_legendre(s).c_exact[s // 2] == F(1, 2)
    assert gauss_legendre(1).exact and radau_iia(1).exact
    assert gauss_legendre(1).A_exact == ((F(1, 2),),)
    assert radau_iia(1).A_exact == ((F(1),),)


def test_radau3_nodes_match_closed_form():
    sq6 = math.sqrt(6)
    np.testing.assert_allclose(radau_iia(3).c, [(4 - sq6) / 10, (4 + sq6) / 10, 1], atol=1e-15)
    tab = radau_iia(3)
    assert not tab.exact and tab.tolerance == 1e-40
    # Nearly exact: the defect of every order-5 condition is far below 1e-80.
    for t in rooted_trees(5):
        assert abs(elementary_weight(tab.A_exact, tab.b_exact, t) - F(1, density(t))) < F(1, 10**80)


@pytest.mark.parametrize("bad", [0, -1, 2.0, "3", True, 100, [2], None])
def test_collocation_rejects_bad_stage_counts(bad):
    with pytest.raises(ValueError, match=r"gauss_legendre: number of stages s must be an integer"):
        gauss_legendre(bad)
    with pytest.raises(ValueError, match=r"radau_iia: number of stages s"):
        radau_iia(bad)


def test_order_bounds_for_catalogue():
    for name in ("rk4", "dopri5", "gauss3", "radau3"):
        tab = get_tableau(name)
        lo, hi = order_bounds(tab.A_exact, tab.b_exact, tab.c_exact, tolerance=tab.tolerance)
        assert lo == hi == tab.order


# --------------------------------------------------------------------------
# Hypothesis
# --------------------------------------------------------------------------
small_fractions = st.builds(F, st.integers(-9, 9), st.integers(1, 9))


@st.composite
def explicit_tableaus(draw):
    s = draw(st.integers(1, 5))
    A = [[draw(small_fractions) if j < i else F(0) for j in range(s)] for i in range(s)]
    weights = [F(draw(st.integers(1, 9))) for _ in range(s)]
    b = [w / sum(weights) for w in weights]
    return A, b


@settings(max_examples=60, deadline=None)
@given(explicit_tableaus(), st.booleans())
def test_random_consistent_explicit_tableaus(data, as_float):
    A, b = data
    if as_float:
        A = [[float(x) for x in row] for row in A]
        b = [float(x) for x in b]
    tab = ButcherTableau(A, b)
    assert tab.explicit
    assert tab.verified_order() >= 1
    assert tab.exact is not as_float


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 5), st.data())
def test_random_rational_order_2_tableaus(s, data):
    A = [[data.draw(small_fractions) if j < i else F(0) for j in range(s)] for i in range(s)]
    c = [sum(row) for row in A]
    k = max(range(s), key=lambda i: abs(c[i]))
    assume(c[k] != 0)
    # Free weights except b_0 and b_k, which solve sum(b) = 1 and b.c = 1/2.
    b = [data.draw(small_fractions) for _ in range(s)]
    b[k] = (F(1, 2) - sum(b[i] * c[i] for i in range(s) if i not in (0, k))) / c[k]
    b[0] = 1 - sum(b[1:])
    tab = ButcherTableau(A, b)
    assert tab.verified_order() >= 2
    # Independent check of order 3 with the two textbook conditions.
    bc2 = sum(bi * ci * ci for bi, ci in zip(b, c, strict=True))
    bAc = sum(b[i] * sum(A[i][j] * c[j] for j in range(s)) for i in range(s))
    assert (tab.verified_order() >= 3) == (bc2 == F(1, 3) and bAc == F(1, 6))
