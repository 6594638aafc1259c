"""Linear stability of Runge-Kutta methods: R(z), A- and L-stability, plots.

Applied to Dahlquist's test equation ``x' = lambda x`` one step of a
Runge-Kutta method gives ``x_{n+1} = R(z) x_n`` with ``z = h lambda`` and

    R(z) = det(I - z (A - 1 b^T)) / det(I - z A) = P(z) / Q(z)
                                                  (HNW II, Prop. IV.3.2)

Both determinants are polynomials of degree ``<= s``; they are computed here
exactly, from the Fraction coefficients of the tableau, via the
characteristic polynomial (Faddeev-LeVerrier), so the A-/L-stability tests
below decide on exact coefficients instead of sampled values:

* A-stable  <=>  Q has no root with Re z <= 0  and  |R(iy)| <= 1 for all
  real y, i.e. the E-polynomial E(y) = |Q(iy)|^2 - |P(iy)|^2 >= 0
  (HNW II, Sec. IV.3, eq. (3.8)).  E is even, a polynomial in w = y^2 with
  rational coefficients; its nonnegativity on w >= 0 is decided exactly
  (square-free factorisation + Sturm sequences).  Pole location: Routh-
  Hurwitz on Q(-z), also exact.
* L-stable  <=>  A-stable and R(z) -> 0 as |z| -> inf, i.e. deg P < deg Q.

Erratum E16 (docs/errata.md): a course cheat sheet defines L-stability through
``lim_{w -> +-inf} |R(i w h)| = 0``; the definition is
``R(z) -> 0`` as ``|z| -> inf`` (Ehle 1969; HNW II, Def. IV.3.7).  For a
rational R both limits agree, but only the latter is the definition, and it
is what is checked here (``deg P < deg Q`` exactly).

For tableaus that are not exact (float input, or collocation methods built
from ~300-bit roots), polynomial coefficients whose size is below the
tableau's ``tolerance`` times the size of the largest coefficient are set to
zero before the exact decisions; this removes e.g. the 1e-90 noise in the
E-polynomial of Gauss methods, which is identically zero in theory.

Erratum E9 (docs/errata.md): lecture slides say "for orders higher than 5 the
stability domain depends on the concrete Butcher tableau"; it already does
from order 5 on: an explicit method of order p = s exists only for p <= 4
(then R is the degree-p Taylor polynomial of exp), while order 5 needs 6
stages and a free z^6 coefficient (dopri5: 1/600, cashkarp: 1/800).

The exact polynomial algorithms live in `shooting.tableaus.polynomials`; the
plot of the stability region in `shooting.tableaus.plot`.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

from shooting.tableaus.polynomials import (
    Poly,
    is_hurwitz,
    nonnegative_on_halfline,
    poly_add,
    poly_divmod,
    poly_gcd,
    poly_mul,
    poly_scale,
    poly_sub,
    poly_trim,
)

__all__ = [
    "ExactTableau",
    "e_polynomial",
    "is_a_stable",
    "is_l_stable",
    "stability_function",
    "stability_polynomials",
]


class ExactTableau(Protocol):
    """What the stability analysis reads from a tableau (a `ButcherTableau` has it all).

    Attributes
    ----------
    A_exact : tuple of tuple of Fraction, shape (s, s)
    b_exact : tuple of Fraction, shape (s,)
    tolerance : float
        0 for exact coefficients.
    explicit : bool
    """

    @property
    def A_exact(self) -> tuple[tuple[Fraction, ...], ...]: ...

    @property
    def b_exact(self) -> tuple[Fraction, ...]: ...

    @property
    def tolerance(self) -> Any: ...

    @property
    def explicit(self) -> bool: ...

    def stability_polynomials(self) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]]:
        """``(P, Q)`` with ``R = P / Q`` (cached by the tableau)."""
        ...


# --------------------------------------------------------------------------
# R(z) = P(z) / Q(z)
# --------------------------------------------------------------------------
#: Largest common denominator (in bits) for which `_det_one_minus_zM` works in
#: integers; beyond it the Fraction recursion is cheaper (measured: 20-stage
#: Gauss, denominators 2**320: 0.15 s in integers against 6.4 s in Fractions;
#: 16 stages of random 64-bit denominators: 86 s against 43 s).
_INTEGER_BITS = 4096


def _det_one_minus_zM(M: list[list[Fraction]]) -> Poly:
    """Coefficients of ``det(I - z M)`` via Faddeev-LeVerrier.

    With ``det(lambda I - M) = sum_k c_k lambda^k`` (``c_s = 1``) one has
    ``det(I - z M) = sum_k c_{s-k} z^k``; the recursion
    ``M_k = M M_{k-1} + c_{s-k+1} I``, ``c_{s-k} = -tr(M M_k) / k`` is exact
    over the rationals. It runs on the integer matrix ``N = D M`` (``D`` the
    least common denominator), where every ``M_k`` and ``c`` is an integer
    and the division by ``k`` is exact; then ``c_{s-k}(M) = c_{s-k}(N) / D^k``.
    """
    s = len(M)
    D = math.lcm(*(x.denominator for row in M for x in row))
    if D.bit_length() > _INTEGER_BITS:
        return _det_one_minus_zM_fractions(M)
    N = [[x.numerator * (D // x.denominator) for x in row] for row in M]
    coeffs = [1]  # c_s, c_{s-1}, ... of N: the coefficients of z^0, z^1, ...
    Mk = [[0] * s for _ in range(s)]
    for k in range(1, s + 1):
        columns = list(zip(*Mk, strict=True))
        Mk = [[sum(a * b for a, b in zip(row, col, strict=True)) for col in columns] for row in N]
        for i in range(s):
            Mk[i][i] += coeffs[-1]
        trace = sum(sum(N[i][m] * Mk[m][i] for m in range(s)) for i in range(s))
        quotient, remainder = divmod(-trace, k)
        assert remainder == 0, "Faddeev-LeVerrier on an integer matrix divides exactly"
        coeffs.append(quotient)
    return poly_trim([Fraction(c, D**k) for k, c in enumerate(coeffs)])


def _det_one_minus_zM_fractions(M: list[list[Fraction]]) -> Poly:
    """`_det_one_minus_zM` in Fractions (for matrices whose common denominator is huge)."""
    s = len(M)
    coeffs = [Fraction(1)]
    Mk = [[Fraction(0)] * s for _ in range(s)]
    for k in range(1, s + 1):
        Mk = [
            [sum((M[i][m] * Mk[m][j] for m in range(s)), Fraction(0)) + (coeffs[-1] if i == j else 0)
             for j in range(s)]
            for i in range(s)
        ]
        trace = sum((M[i][m] * Mk[m][i] for i in range(s) for m in range(s)), Fraction(0))
        coeffs.append(-trace / k)
    return poly_trim(coeffs)


def _explicit_stability_polynomial(A: tuple[tuple[Fraction, ...], ...], b: tuple[Fraction, ...]) -> Poly:
    """``R(z) = 1 + sum_k z^(k+1) b' A^k 1`` of an explicit method (A nilpotent; HNW II, Prop. IV.3.1).

    From ``R(z) = 1 + z b' (I - z A)^(-1) 1``: s matrix-vector products
    instead of two determinants.
    """
    s = len(b)
    coeffs, v = [Fraction(1)], [Fraction(1)] * s
    for _ in range(s):
        coeffs.append(sum((bi * vi for bi, vi in zip(b, v, strict=True)), Fraction(0)))
        v = [sum((A[i][j] * v[j] for j in range(i)), Fraction(0)) for i in range(s)]
    return poly_trim(coeffs)


def _trim_relative(p: Poly, tolerance: Fraction, scale: Fraction) -> Poly:
    if tolerance == 0:
        return poly_trim(p)
    cut = tolerance * max(Fraction(1), scale)
    return poly_trim([x if abs(x) > cut else Fraction(0) for x in p])


def stability_polynomials(
    tableau: ExactTableau,
) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]]:
    """Exact numerator and denominator of ``R(z) = P(z) / Q(z)``.

    Parameters
    ----------
    tableau : ExactTableau

    Returns
    -------
    P, Q : tuple of Fraction
        Coefficients, lowest degree first, normalised to ``Q(0) = 1``.
        ``P = det(I - z (A - 1 b^T))``, ``Q = det(I - z A)``; for exact
        tableaus common factors are cancelled exactly (reducible methods);
        for inexact ones, coefficients below the tolerance are dropped.
    """
    A = [list(row) for row in tableau.A_exact]
    b = tableau.b_exact
    if tableau.explicit:
        P, Q = _explicit_stability_polynomial(tableau.A_exact, b), [Fraction(1)]
    else:
        M = [[A[i][j] - b[j] for j in range(len(b))] for i in range(len(b))]
        P, Q = _det_one_minus_zM(M), _det_one_minus_zM(A)
    tol = Fraction(tableau.tolerance)
    if tol == 0:
        g = poly_gcd(P, Q)
        if len(g) > 1:
            P, Q = poly_divmod(P, g)[0], poly_divmod(Q, g)[0]
            P, Q = poly_scale(P, 1 / Q[0]), poly_scale(Q, 1 / Q[0])
    else:
        scale = max(abs(x) for x in P + Q)
        P, Q = _trim_relative(P, tol, scale), _trim_relative(Q, tol, scale)
    return tuple(P), tuple(Q)


def stability_function(tableau: ExactTableau, z: Any) -> Any:
    """Evaluate ``R(z)`` for a complex scalar or an array of any shape.

    Parameters
    ----------
    tableau : ExactTableau
    z : complex or array_like of complex, shape (...)

    Returns
    -------
    complex or ndarray of complex128, shape (...)
        Same shape as ``z`` (a Python ``complex`` for scalar input);
        ``inf``/``nan`` at poles.
    """
    P, Q = tableau.stability_polynomials()
    zz = np.asarray(z, dtype=np.complex128)
    p = np.polynomial.polynomial.polyval(zz, np.array([float(x) for x in P] or [0.0]))
    q = np.polynomial.polynomial.polyval(zz, np.array([float(x) for x in Q]))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = p / q
    if np.ndim(z) == 0:
        return complex(r)
    return np.asarray(r, dtype=np.complex128)


def _abs_squared_on_axis(p: Poly) -> Poly:
    """Coefficients in ``w = y^2`` of ``|p(iy)|^2`` for real ``y``."""
    # p(iy) = sum_k p_k i^k y^k = Re(y) + i Im(y)
    re = [Fraction(0)] * len(p)
    im = [Fraction(0)] * len(p)
    for k, x in enumerate(p):
        sign = (-1) ** (k // 2)
        (re if k % 2 == 0 else im)[k] = sign * x
    square = poly_add(poly_mul(re, re), poly_mul(im, im))  # even in y
    return poly_trim(square[0::2])


def e_polynomial(tableau: ExactTableau) -> tuple[Fraction, ...]:
    """The E-polynomial ``E = |Q(iy)|^2 - |P(iy)|^2`` as a polynomial in ``w = y^2``.

    Returns
    -------
    tuple of Fraction
        Coefficients of ``w**k``, lowest first; ``()`` when ``E`` vanishes
        identically (``|R(iy)| = 1``, e.g. Gauss methods).
    """
    P, Q = tableau.stability_polynomials()
    q2, p2 = _abs_squared_on_axis(list(Q)), _abs_squared_on_axis(list(P))
    E = poly_sub(q2, p2)
    tol = Fraction(tableau.tolerance)
    scale = max((abs(x) for x in poly_add(q2, p2)), default=Fraction(1))
    return tuple(_trim_relative(E, tol, scale))


def is_a_stable(tableau: ExactTableau) -> bool:
    """``|R(z)| <= 1`` on the whole closed left half-plane, decided exactly.

    Explicit methods are never A-stable (``R`` is a nonconstant polynomial).
    """
    if tableau.explicit:
        return False
    P, Q = tableau.stability_polynomials()
    if len(P) > len(Q):
        return False  # |R| -> inf
    # Poles: roots of Q must lie in Re z > 0  <=>  Q(-z) is Hurwitz.
    if not is_hurwitz([x * (-1) ** k for k, x in enumerate(Q)]):
        return False
    return nonnegative_on_halfline(list(e_polynomial(tableau)))


def is_l_stable(tableau: ExactTableau) -> bool:
    """A-stable and ``R(z) -> 0`` as ``|z| -> inf`` (``deg P < deg Q``, exactly)."""
    # Erratum E16 (docs/errata.md): not "lim |R(i w h)| = 0" but R(z) -> 0
    # as |z| -> inf in any direction (Ehle 1969; HNW II, Def. IV.3.7).
    if not is_a_stable(tableau):
        return False
    P, Q = tableau.stability_polynomials()
    return len(P) < len(Q)
