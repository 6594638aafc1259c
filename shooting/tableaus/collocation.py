"""Collocation Runge-Kutta methods: Gauss-Legendre and Radau IIA.

Construction (HNW I, Sec. II.7): given distinct nodes ``c_1 < ... < c_s`` in [0, 1], let

    ell_i(tau) = prod_{j != i} (tau - c_j) / (c_i - c_j)     (Lagrange basis)
    L_i(tau)   = integral_0^tau ell_i(xi) dxi
    a_ji = L_i(c_j),   b_i = L_i(1).

* Gauss-Legendre: ``c`` = roots of the shifted Legendre polynomial
  ``P_s(tau) = (1/s!) d^s/dtau^s (tau^2 - tau)^s``; order ``2s``, A-stable.
* Radau IIA: ``c`` = roots of ``d^(s-1)/dtau^(s-1) (tau^(s-1) (tau - 1)^s)``
  (so ``c_s = 1``); order ``2s - 1``, L-stable.

Exact arithmetic
----------------
All polynomials have rational coefficients and are handled as Fractions.  The
nodes are algebraic numbers; rational nodes (``1/2`` for odd Gauss ``s``,
``1`` and ``1/3`` for Radau) are detected exactly (a candidate from
``limit_denominator`` is accepted only if the polynomial vanishes exactly).
Irrational nodes are computed as dyadic rationals: float roots from numpy as
starting points, exact-rational Newton iterations rounded to the grid
``2**-300``, and a final exact sign change of the polynomial across
``x -+ 2**-290`` proves that a true root lies within ``2**-290`` of each node
(``s`` disjoint brackets = all ``s`` roots).

If every node is rational the tableau is exact (radau_iia(2): ``c = (1/3, 1)``,
``A = [[5/12, -1/12], [3/4, 1/4]]``).  Otherwise ``A`` and ``b`` are rounded
to the grid ``2**-320`` and the tableau is *nearly exact*: its order
conditions hold to ~1e-85 and it carries ``tolerance = 1e-40``.  The
declared order (2s or 2s - 1) is certified by the simplifying assumptions
B(p), C(q), D(r) (see :mod:`shooting.order_conditions`), for any s.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from shooting import _validate
from shooting.tableaus.coefficients import ordinal
from shooting.tableaus.polynomials import (
    poly_deriv,
    poly_eval,
    poly_from_roots,
    poly_integrate,
    poly_mul,
    poly_scale,
)
from shooting.tableaus.tableau import ButcherTableau

__all__ = [
    "gauss_legendre",
    "radau_iia",
    "shifted_legendre",
    "radau_polynomial",
    "NEARLY_EXACT_TOLERANCE",
    "MAX_STAGES",
]

#: Tolerance carried by collocation tableaus with irrational nodes.
NEARLY_EXACT_TOLERANCE = 1e-40
#: Largest supported number of stages (float starting values stay reliable).
MAX_STAGES = 12

_ROOT_BITS = 300  # grid 2**-300 for the nodes
_COEFF_BITS = 320  # grid 2**-320 for A and b
_BRACKET = Fraction(1, 2**290)


def _check_stages(s: object, family: str) -> int:
    return _validate.integer(s, f"{family}: number of stages s", minimum=1, maximum=MAX_STAGES)


def _binomial_power(p: list[Fraction], k: int) -> list[Fraction]:
    out = [Fraction(1)]
    for _ in range(k):
        out = poly_mul(out, p)
    return out


def _nth_derivative(p: list[Fraction], n: int) -> list[Fraction]:
    for _ in range(n):
        p = poly_deriv(p)
    return p


def shifted_legendre(s: int) -> list[Fraction]:
    """Coefficients (lowest first) of ``P_s(tau) = (1/s!) d^s/dtau^s (tau^2 - tau)^s``."""
    base = _binomial_power([Fraction(0), Fraction(-1), Fraction(1)], s)
    return poly_scale(_nth_derivative(base, s), Fraction(1, math.factorial(s)))


def radau_polynomial(s: int) -> list[Fraction]:
    """Coefficients of ``d^(s-1)/dtau^(s-1) (tau^(s-1) (tau - 1)^s)``."""
    base = poly_mul(
        [Fraction(0)] * (s - 1) + [Fraction(1)],
        _binomial_power([Fraction(-1), Fraction(1)], s),
    )
    return _nth_derivative(base, s - 1)


def _round_to_grid(x: Fraction, bits: int) -> Fraction:
    return Fraction(round(x * 2**bits), 2**bits)


def _refine_root(p: list[Fraction], dp: list[Fraction], guess: float) -> tuple[Fraction, bool]:
    """A root of ``p`` near ``guess``: exact if rational, else to ~2**-300.

    Returns the root and whether it is exact.
    """
    candidate = Fraction(guess).limit_denominator(10**6)
    if poly_eval(p, candidate) == 0:
        return candidate, True
    x = _round_to_grid(Fraction(guess), _ROOT_BITS)
    for _ in range(40):
        step = poly_eval(p, x) / poly_eval(dp, x)
        x_new = _round_to_grid(x - step, _ROOT_BITS)
        if x_new == x:
            break
        x = x_new
    # Certify: an exact sign change brackets a true root within 2**-290.
    lo, hi = poly_eval(p, x - _BRACKET), poly_eval(p, x + _BRACKET)
    if not (lo < 0 < hi or hi < 0 < lo):
        raise ArithmeticError(f"root refinement near {guess!r} failed to bracket a root")
    return x, False


def _roots_in_unit_interval(p: list[Fraction]) -> tuple[list[Fraction], bool]:
    degree = len(p) - 1
    guesses = sorted(float(np.real(g)) for g in np.roots([float(x) for x in reversed(p)]))
    dp = poly_deriv(p)
    roots, exact = [], True
    for g in guesses:
        r, is_exact = _refine_root(p, dp, g)
        roots.append(r)
        exact = exact and is_exact
    # s distinct, disjointly bracketed roots of a degree-s polynomial are all of them.
    if not (
        len(roots) == degree
        and all(b - a > 2 * _BRACKET for a, b in zip(roots, roots[1:], strict=False))
        and 0 <= roots[0]
        and roots[-1] <= 1
    ):
        raise ArithmeticError(f"collocation nodes could not be isolated: {roots!r}")
    return roots, exact


def _collocation_coefficients(
    c: list[Fraction],
) -> tuple[list[list[Fraction]], list[Fraction]]:
    """``A[j][i] = L_i(c_j)``, ``b[i] = L_i(1)`` for the Lagrange basis on ``c``."""
    s = len(c)
    A = [[Fraction(0)] * s for _ in range(s)]
    b = [Fraction(0)] * s
    for i in range(s):
        others = [c[j] for j in range(s) if j != i]
        scale = Fraction(1)
        for cj in others:
            scale *= c[i] - cj
        L_i = poly_integrate(poly_scale(poly_from_roots(others), 1 / scale))
        for j in range(s):
            A[j][i] = poly_eval(L_i, c[j])
        b[i] = poly_eval(L_i, Fraction(1))
    return A, b


def _collocation_tableau(
    p: list[Fraction], *, name: str, order: int, description: str, reference: str
) -> ButcherTableau:
    c, exact = _roots_in_unit_interval(p)
    A, b = _collocation_coefficients(c)
    tolerance = 0.0
    if not exact:
        A = [[_round_to_grid(x, _COEFF_BITS) for x in row] for row in A]
        b = [_round_to_grid(x, _COEFF_BITS) for x in b]
        tolerance = NEARLY_EXACT_TOLERANCE
    return ButcherTableau(
        A, b, c,
        name=name,
        order=order,
        description=description,
        reference=reference,
        tolerance=tolerance,
    )


def gauss_legendre(s: int) -> ButcherTableau:
    """Gauss-Legendre collocation method with ``s`` stages (order ``2s``).

    Parameters
    ----------
    s : int
        Number of stages, ``1 <= s <= MAX_STAGES``.

    Returns
    -------
    ButcherTableau
        Named ``"gauss{s}"``; exact for ``s = 1`` (implicit midpoint),
        nearly exact (``tolerance = 1e-40``) otherwise.  A-stable, not
        L-stable; ``R(z)`` is the (s, s) Pade approximant of ``exp(z)``.
    """
    return _gauss_legendre(_check_stages(s, "gauss_legendre"))


@lru_cache(maxsize=None)
def _gauss_legendre(s: int) -> ButcherTableau:
    return _collocation_tableau(
        shifted_legendre(s),
        name=f"gauss{s}",
        order=2 * s,
        description=(
            f"{ordinal(2 * s)} order implicit Runge-Kutta method (Gauss-Legendre "
            f"collocation), {s} stage{'s' if s > 1 else ''}; A-stable, symplectic."
        ),
        reference=(
            "J. C. Butcher, Implicit Runge-Kutta processes, Math. Comp. 18 (1964) 50-64; "
            "Hairer & Wanner, Solving ODEs II, Sec. IV.5."
        ),
    )


def radau_iia(s: int) -> ButcherTableau:
    """Radau IIA collocation method with ``s`` stages (order ``2s - 1``).

    Parameters
    ----------
    s : int
        Number of stages, ``1 <= s <= MAX_STAGES``.

    Returns
    -------
    ButcherTableau
        Named ``"radau{s}"``; ``c_s = 1`` and ``b`` = last row of ``A``
        (stiffly accurate).  Exact for ``s = 1`` (implicit Euler) and
        ``s = 2``; nearly exact otherwise.  L-stable.
    """
    return _radau_iia(_check_stages(s, "radau_iia"))


@lru_cache(maxsize=None)
def _radau_iia(s: int) -> ButcherTableau:
    order = 2 * s - 1
    return _collocation_tableau(
        radau_polynomial(s),
        name=f"radau{s}",
        order=order,
        description=(
            f"{ordinal(order)} order implicit Runge-Kutta method (Radau IIA collocation), "
            f"{s} stage{'s' if s > 1 else ''}; L-stable, stiffly accurate."
        ),
        reference=(
            "B. L. Ehle, On Pade approximations to the exponential function and "
            "A-stable methods for the numerical solution of initial value problems, "
            "Univ. Waterloo (1969); Hairer & Wanner, Solving ODEs II, Sec. IV.5."
        ),
    )
