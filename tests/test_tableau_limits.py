"""What from_json accepts, to_dict writes back exactly; tableaus are bounded in stages; the exact analysis is fast.

Independent truths: the tableau itself (exact Fractions compared for
equality), the integer Faddeev-LeVerrier and the explicit shortcut against
the Fraction recursion on the same matrices, and polynomial gcds against
factors built by hand.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from shooting import ButcherTableau
from shooting.tableaus import polynomials, stability
from shooting.tableaus.coefficients import MAX_BITS, MAX_TABLEAU_STAGES, MAX_TEXT


def _coefficient() -> st.SearchStrategy[object]:
    """Every kind of coefficient from_json takes: ints, fraction and decimal strings, floats, big Fractions."""
    big = st.integers(1, 2**600)  # (4096 bits: `test_the_largest_tableau_round_trips_through_a_file`)
    return st.one_of(
        st.integers(-10**6, 10**6),
        st.fractions(max_denominator=10**9).map(str),
        st.builds(lambda m, e: f"{m}e{e}", st.integers(-10**30, 10**30), st.integers(-330, 280)),
        st.floats(-1e300, 1e300, allow_nan=False, allow_infinity=False),
        st.builds(lambda n, d, neg: Fraction(-n if neg else n, d), big, big, st.booleans()),
    )


@st.composite
def tableau_data(draw: st.DrawFn) -> dict[str, object]:
    s = draw(st.integers(1, 3))
    data: dict[str, object] = {"A": [[draw(_coefficient()) for _ in range(s)] for _ in range(s)]}
    for key in ("b", "b_hat") if draw(st.booleans()) else ("b",):
        head = [draw(_coefficient()) for _ in range(s - 1)]
        last = 1 - sum((Fraction(x) for x in head), Fraction(0))  # consistent: sums to one
        data[key] = [*head, str(last) if abs(last) > 1e300 or draw(st.booleans()) else float(last)]
    if draw(st.booleans()):
        data["c"] = [str(sum((Fraction(x) for x in row), Fraction(0))) for row in data["A"]]  # type: ignore[union-attr]
    if draw(st.booleans()):
        data["name"] = draw(st.text(max_size=30))
        data["description"] = draw(st.text(max_size=60))
    return data


@settings(max_examples=100, deadline=None)
@example(data={"A": [["-2e-249", "50/49"], ["1", 0.0]], "b": ["-6/5", 2.2]})  # the case
@example(data={"A": [[5e-324, 0], [1e300, -1e300]], "b": ["1/3", "2/3"]})  # a subnormal: a 1074-bit denominator
@given(data=tableau_data())
def test_what_from_json_accepts_to_dict_writes_back_exactly(data):
    try:
        tab = ButcherTableau.from_json(data)
    except ValueError:
        assume(False)  # not a tableau (e.g. a float b that misses 1 by more than the tolerance)
        raise
    back = ButcherTableau.from_json(tab.to_dict())
    assert back == tab  # the exact coefficients, c and b_hat included
    assert (back.b_hat_exact, back.c_exact) == (tab.b_hat_exact, tab.c_exact)
    assert (back.name, back.description, back.tolerance, back.order, back.embedded_order) == \
        (tab.name, tab.description, tab.tolerance, tab.order, tab.embedded_order)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.json"
        path.write_text(json.dumps(tab.to_dict()))
        assert ButcherTableau.from_json(path) == tab


def test_the_largest_tableau_round_trips_through_a_file(tmp_path):
    # 40 stages over one 4096-bit denominator, magnitudes up to 1e300: the longest coefficient strings, and
    # row sums beyond 1e300 (c is then derived again).
    rng = random.Random(7)
    s = MAX_TABLEAU_STAGES
    D = s * (rng.getrandbits(MAX_BITS - 8) | 2**(MAX_BITS - 9))  # (b = 1/s shares it)
    A = [[Fraction(rng.getrandbits(MAX_BITS) * (-1) ** (i + j), D) for j in range(s)] for i in range(s)]
    A[0][0] = Fraction(10**300 - 1)
    A[0][1] = Fraction(10**300 - 1)
    tab = ButcherTableau(A, [Fraction(1, s)] * s)
    written = tab.to_dict()
    assert max(len(x) for row in written["A"] for x in row) > 2400 and "c" not in written
    path = tmp_path / "big.json"
    path.write_text(json.dumps(written))
    assert ButcherTableau.from_json(path) == tab
    assert max(len(x) for row in written["A"] for x in row) <= MAX_TEXT


def test_coefficients_without_a_moderate_common_denominator_are_refused():
    rng = random.Random(3)
    A = [[Fraction(1, rng.getrandbits(64) | 1) for _ in range(10)] for _ in range(10)]  # 6400 bits together
    with pytest.raises(ValueError, match="no common denominator of at most 4096 bits"):
        ButcherTableau(A, [Fraction(1, 10)] * 10)


def test_more_stages_than_the_bound_are_refused_at_once(tmp_path):
    s = MAX_TABLEAU_STAGES + 1
    A = [[Fraction(1, s) if j < i else 0 for j in range(s)] for i in range(s)]
    with pytest.raises(ValueError, match=rf"A has {s} rows: tableaus have at most {MAX_TABLEAU_STAGES} stages"):
        ButcherTableau(A, [Fraction(1, s)] * s)
    # the CLI on a 400-stage file: one line, exit 2, in about a second (it ran for minutes)
    path = tmp_path / "t400.json"
    path.write_text(json.dumps({"A": [["1/400" if j < i else 0 for j in range(400)] for i in range(400)],
                                "b": ["1/400"] * 400}))
    proc = subprocess.run([sys.executable, "-m", "shooting.cli", "tableau", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "at most 40 stages" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    # at the bound, an explicit tableau's exact stability polynomial is the truncated series of exp for
    # composed Euler steps: R(z) = (1 + z/s)^s, from s matrix-vector products (it took 99 s at 60 stages)
    ok = MAX_TABLEAU_STAGES
    euler = ButcherTableau([[Fraction(1, ok) if j < i else 0 for j in range(ok)] for i in range(ok)],
                           [Fraction(1, ok)] * ok)
    P, Q = euler.stability_polynomials()
    from math import comb
    assert Q == (1,) and P == tuple(Fraction(comb(ok, k), ok**k) for k in range(ok + 1))


def _random_matrix(s: int, rng: random.Random, lower: bool = False) -> list[list[Fraction]]:
    return [[Fraction(rng.randint(-9, 9), rng.randint(1, 9)) if (j < i or not lower) else Fraction(0)
             for j in range(s)] for i in range(s)]


@pytest.mark.parametrize("s", [1, 2, 5, 9])
def test_integer_determinant_polynomial_equals_the_fraction_recursion(s):
    rng = random.Random(s)
    M = _random_matrix(s, rng)
    assert stability._det_one_minus_zM(M) == stability._det_one_minus_zM_fractions(M)
    # collocation-like denominators: a common power of two
    G = [[Fraction(rng.getrandbits(300) - 2**299, 2**320) for _ in range(s)] for _ in range(s)]
    assert stability._det_one_minus_zM(G) == stability._det_one_minus_zM_fractions(G)


@pytest.mark.parametrize("s", [1, 3, 8])
def test_explicit_shortcut_equals_the_two_determinants(s):
    rng = random.Random(10 + s)
    A = _random_matrix(s, rng, lower=True)
    b = [Fraction(rng.randint(1, 9), 7) for _ in range(s)]
    M = [[A[i][j] - b[j] for j in range(s)] for i in range(s)]
    assert stability._explicit_stability_polynomial(tuple(map(tuple, A)), tuple(b)) == \
        stability._det_one_minus_zM_fractions(M)


@settings(max_examples=60, deadline=None)
@given(common=st.lists(st.integers(-5, 5), min_size=1, max_size=4),
       p=st.lists(st.integers(-5, 5), min_size=1, max_size=5), q=st.lists(st.integers(-5, 5), min_size=1, max_size=5))
def test_polynomial_gcd_finds_the_common_factor(common, p, q):
    common, p, q = (polynomials.poly_trim([Fraction(x) for x in v]) for v in (common, p, q))
    assume(common and p and q)
    P, Q = polynomials.poly_mul(p, common), polynomials.poly_mul(q, common)
    g = polynomials.poly_gcd(P, Q)
    # g divides both, and the common factor divides g
    assert not polynomials.poly_divmod(P, g)[1] and not polynomials.poly_divmod(Q, g)[1]
    assert not polynomials.poly_divmod(g, common)[1]
    assert g[-1] == 1

