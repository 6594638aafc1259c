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

Erratum (seed cheat sheet 004, "L-stability"): the sheet defines L-stability
through ``lim_{w -> +-inf} |R(i w h)| = 0``; the definition is
``R(z) -> 0`` as ``|z| -> inf`` (Ehle 1969; HNW II, Def. IV.3.7).  For a
rational R both limits agree, but only the latter is the definition, and it
is what is checked here (``deg P < deg Q`` exactly).

For tableaus that are not exact (float input, or collocation methods built
from ~300-bit roots), polynomial coefficients whose size is below the
tableau's ``tolerance`` times the size of the largest coefficient are set to
zero before the exact decisions; this removes e.g. the 1e-90 noise in the
E-polynomial of Gauss methods, which is identically zero in theory.

Erratum (seed slides 003, "RK: Stability"): "for orders higher than 5 the
stability domain depends on the concrete Butcher tableau" -- it already does
from order 5 on: an explicit method of order p = s exists only for p <= 4
(then R is the degree-p Taylor polynomial of exp), while order 5 needs 6
stages and a free z^6 coefficient (dopri5: 1/600, cashkarp: 1/800).

This module also holds the small exact polynomial kit (lists of Fractions,
lowest degree first) shared with :mod:`shooting.collocation`.
"""

from __future__ import annotations

import math
import os
import io
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from shooting.files import write_atomic

if TYPE_CHECKING:
    from shooting.tableau import ButcherTableau

__all__ = [
    "stability_polynomials",
    "stability_function",
    "e_polynomial",
    "is_a_stable",
    "is_l_stable",
    "plot_stability_region",
]

Poly = list  # list[Fraction], coefficient of z**k at index k; [] is the zero polynomial


# --------------------------------------------------------------------------
# Exact polynomial arithmetic on Fractions
# --------------------------------------------------------------------------
def poly_trim(p: Poly) -> Poly:
    """Drop trailing zero coefficients (the zero polynomial becomes ``[]``)."""
    p = list(p)
    while p and p[-1] == 0:
        p.pop()
    return p


def poly_add(p: Poly, q: Poly) -> Poly:
    """``p + q``."""
    n = max(len(p), len(q))
    return poly_trim(
        [(p[k] if k < len(p) else 0) + (q[k] if k < len(q) else 0) for k in range(n)]
    )


def poly_scale(p: Poly, factor) -> Poly:
    """``factor * p``."""
    return poly_trim([factor * x for x in p])


def poly_sub(p: Poly, q: Poly) -> Poly:
    """``p - q``."""
    return poly_add(p, poly_scale(q, -1))


def poly_mul(p: Poly, q: Poly) -> Poly:
    """``p * q``."""
    if not p or not q:
        return []
    out = [Fraction(0)] * (len(p) + len(q) - 1)
    for i, x in enumerate(p):
        if x:
            for j, y in enumerate(q):
                out[i + j] += x * y
    return poly_trim(out)


def poly_deriv(p: Poly) -> Poly:
    """``dp/dz``."""
    return poly_trim([k * p[k] for k in range(1, len(p))])


def poly_integrate(p: Poly) -> Poly:
    """Antiderivative vanishing at 0."""
    return poly_trim([Fraction(0)] + [Fraction(x) / (k + 1) for k, x in enumerate(p)])


def poly_eval(p: Poly, x):
    """Horner evaluation (exact for Fraction ``x``)."""
    acc = Fraction(0) if isinstance(x, (int, Fraction)) else 0 * x
    for coeff in reversed(p):
        acc = acc * x + coeff
    return acc


def poly_from_roots(roots) -> Poly:
    """Monic ``prod (z - r)``."""
    p: Poly = [Fraction(1)]
    for r in roots:
        p = poly_mul(p, [-Fraction(r), Fraction(1)])
    return p


def poly_divmod(p: Poly, q: Poly) -> tuple[Poly, Poly]:
    """Quotient and remainder of ``p / q`` (``q`` nonzero)."""
    q = poly_trim(q)
    if not q:
        raise ZeroDivisionError("polynomial division by zero")
    rem = [Fraction(x) for x in poly_trim(p)]
    quot = [Fraction(0)] * max(len(rem) - len(q) + 1, 0)
    while len(rem) >= len(q):
        shift = len(rem) - len(q)
        factor = rem[-1] / q[-1]
        quot[shift] = factor
        for k, y in enumerate(q):
            rem[k + shift] -= factor * y
        rem.pop()  # the leading coefficient is now exactly zero
        rem = poly_trim(rem)
    return poly_trim(quot), rem


def poly_gcd(p: Poly, q: Poly) -> Poly:
    """Monic greatest common divisor (Euclid over the rationals)."""
    p, q = poly_trim(p), poly_trim(q)
    while q:
        p, q = q, poly_divmod(p, q)[1]
    return poly_scale(p, 1 / p[-1]) if p else []


def _sign(x) -> int:
    return (x > 0) - (x < 0)


def _sign_changes(values) -> int:
    signs = [_sign(v) for v in values if v != 0]
    return sum(1 for u, v in zip(signs, signs[1:]) if u != v)


def _positive_root_count(p: Poly) -> int:
    """Number of distinct real roots of ``p`` in ``(0, inf)`` (Sturm's theorem)."""
    p = poly_trim(p)
    while p and p[0] == 0:  # remove roots at 0 so that V(0) is well defined
        p = p[1:]
    if len(p) <= 1:
        return 0
    sturm = [p, poly_deriv(p)]
    while True:
        rem = poly_divmod(sturm[-2], sturm[-1])[1]
        if not rem:
            break
        sturm.append(poly_scale(rem, -1))
    at_zero = _sign_changes([f[0] if f else 0 for f in sturm])
    at_inf = _sign_changes([f[-1] for f in sturm])
    return at_zero - at_inf


def _odd_multiplicity_part(p: Poly) -> Poly:
    """Product of the square-free factors of odd multiplicity (Yun's algorithm).

    ``p`` changes sign exactly at the real roots of this factor.
    """
    dp = poly_deriv(p)
    a = poly_gcd(p, dp)
    if len(a) <= 1:
        return p
    b = poly_divmod(p, a)[0]
    c = poly_divmod(dp, a)[0]
    d = poly_sub(c, poly_deriv(b))
    odd: Poly = [Fraction(1)]
    multiplicity = 1
    while len(b) > 1:
        a = poly_gcd(b, d)
        if multiplicity % 2 == 1:
            odd = poly_mul(odd, a)
        b = poly_divmod(b, a)[0]
        c = poly_divmod(d, a)[0]
        d = poly_sub(c, poly_deriv(b))
        multiplicity += 1
    return odd


def _nonnegative_on_halfline(p: Poly) -> bool:
    """Exact test of ``p(w) >= 0`` for all ``w >= 0``."""
    p = poly_trim(p)
    if not p:
        return True
    if p[-1] < 0 or p[0] < 0:
        return False
    if all(x >= 0 for x in p):
        return True
    return _positive_root_count(_odd_multiplicity_part(p)) == 0


def _is_hurwitz(p: Poly) -> bool:
    """Exact Routh-Hurwitz test: all roots of ``p`` strictly in Re z < 0."""
    p = poly_trim(p)
    n = len(p) - 1
    if n <= 0:
        return True
    high = list(reversed(p))  # a_n, a_{n-1}, ..., a_0
    rows = [high[0::2], high[1::2]]
    first = [rows[0][0], rows[1][0] if rows[1] else Fraction(0)]
    while len(first) < n + 1:
        upper, lower = rows[-2], rows[-1]
        if not lower or lower[0] == 0:
            return False  # zero in the first column: a root with Re >= 0
        new = []
        for j in range(len(upper) - 1):
            below = lower[j + 1] if j + 1 < len(lower) else 0
            new.append((lower[0] * upper[j + 1] - upper[0] * below) / lower[0])
        rows.append(new or [Fraction(0)])
        first.append(rows[-1][0])
    signs = {_sign(x) for x in first}
    return 0 not in signs and len(signs) == 1


# --------------------------------------------------------------------------
# R(z) = P(z) / Q(z)
# --------------------------------------------------------------------------
def _det_one_minus_zM(M: list[list[Fraction]]) -> Poly:
    """Coefficients of ``det(I - z M)`` via Faddeev-LeVerrier.

    With ``det(lambda I - M) = sum_k c_k lambda^k`` (``c_s = 1``) one has
    ``det(I - z M) = sum_k c_{s-k} z^k``; the recursion
    ``M_k = M M_{k-1} + c_{s-k+1} I``, ``c_{s-k} = -tr(M M_k) / k`` is exact
    over the rationals.
    """
    s = len(M)
    coeffs = [Fraction(1)]  # c_s, c_{s-1}, ... == coefficient of z^0, z^1, ...
    Mk = [[Fraction(0)] * s for _ in range(s)]
    for k in range(1, s + 1):
        Mk = [
            [sum(M[i][l] * Mk[l][j] for l in range(s)) + (coeffs[-1] if i == j else 0)
             for j in range(s)]
            for i in range(s)
        ]
        trace = sum(sum(M[i][l] * Mk[l][i] for l in range(s)) for i in range(s))
        coeffs.append(-trace / k)
    return poly_trim(coeffs)


def _trim_relative(p: Poly, tolerance: Fraction, scale: Fraction) -> Poly:
    if tolerance == 0:
        return poly_trim(p)
    cut = tolerance * max(Fraction(1), scale)
    return poly_trim([x if abs(x) > cut else Fraction(0) for x in p])


def stability_polynomials(
    tableau: ButcherTableau,
) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]]:
    """Exact numerator and denominator of ``R(z) = P(z) / Q(z)``.

    Parameters
    ----------
    tableau : ButcherTableau

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


def stability_function(tableau: ButcherTableau, z):
    """Evaluate ``R(z)`` for a complex scalar or an array of any shape.

    Parameters
    ----------
    tableau : ButcherTableau
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


def e_polynomial(tableau: ButcherTableau) -> tuple[Fraction, ...]:
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


def is_a_stable(tableau: ButcherTableau) -> bool:
    """``|R(z)| <= 1`` on the whole closed left half-plane, decided exactly.

    Explicit methods are never A-stable (``R`` is a nonconstant polynomial).
    """
    if tableau.explicit:
        return False
    P, Q = tableau.stability_polynomials()
    if len(P) > len(Q):
        return False  # |R| -> inf
    # Poles: roots of Q must lie in Re z > 0  <=>  Q(-z) is Hurwitz.
    if not _is_hurwitz([x * (-1) ** k for k, x in enumerate(Q)]):
        return False
    return _nonnegative_on_halfline(list(e_polynomial(tableau)))


def is_l_stable(tableau: ButcherTableau) -> bool:
    """A-stable and ``R(z) -> 0`` as ``|z| -> inf`` (``deg P < deg Q``, exactly)."""
    # Erratum (seed cheat sheet 004): not "lim |R(i w h)| = 0" but R(z) -> 0
    # as |z| -> inf in any direction (Ehle 1969; HNW II, Def. IV.3.7).
    if not is_a_stable(tableau):
        return False
    P, Q = tableau.stability_polynomials()
    return len(P) < len(Q)


# --------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------
def _stable_mask(tableau: ButcherTableau, re, im) -> npt.NDArray[np.bool_]:
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.abs(tableau.stability_function(re[None, :] + 1j * im[:, None]))
    return np.nan_to_num(r, nan=np.inf) <= 1.0


def _auto_window(tableau: ButcherTableau) -> tuple[float, float, float, float]:
    """Window (re_min, re_max, im_min, im_max) showing the interesting part.

    Starts from a square around 0 large enough for all poles and zeros of R.
    If ``|R(inf)| > 1`` (explicit methods) the stable set is bounded, if
    ``|R(inf)| < 1`` (e.g. Radau IIA) the unstable set is: the square is
    doubled until that bounded set no longer touches the border, then zoomed
    to its bounding box (with the origin and some margin).  ``|R(inf)| = 1``
    (Gauss) keeps the square.
    """
    P, Q = tableau.stability_polynomials()
    roots = []
    for poly in (P, Q):
        if len(poly) > 1:
            roots.extend(np.roots([float(x) for x in reversed(poly)]))
    half = max([3.0] + [1.5 * abs(r) for r in roots if np.isfinite(r)])
    if len(P) != len(Q):
        at_infinity = math.inf if len(P) > len(Q) else 0.0
    else:
        at_infinity = abs(float(P[-1] / Q[-1])) if P else 0.0
    if at_infinity == 1.0:
        return -half, half, -half, half
    for _ in range(8):
        grid = np.linspace(-half, half, 161)
        stable = _stable_mask(tableau, grid, grid)
        bounded_set = stable if at_infinity > 1 else ~stable
        edges = (bounded_set[0], bounded_set[-1], bounded_set[:, 0], bounded_set[:, -1])
        if not any(edge.any() for edge in edges):
            break
        half *= 2.0
    if not bounded_set.any():
        return -half, half, -half, half
    rows, cols = np.nonzero(bounded_set)
    x0, x1 = min(grid[cols.min()], -0.5), max(grid[cols.max()], 0.5)
    y0, y1 = min(grid[rows.min()], -0.5), max(grid[rows.max()], 0.5)
    if at_infinity < 1:  # show some of the (stable) left half-plane as well
        x0 = min(x0, -0.5 * (x1 - x0))
    pad = 0.15 * max(x1 - x0, y1 - y0)
    return x0 - pad, x1 + pad, y0 - pad, y1 + pad


def plot_stability_region(
    tableau: ButcherTableau,
    path: str | os.PathLike[str],
    *,
    window: tuple[float, float, float, float] | None = None,
    resolution: int = 400,
    title: str | None = None,
    dpi: int = 100,
) -> str:
    """Fill ``{z : |R(z)| <= 1}`` in the complex plane and write a PNG.

    Parameters
    ----------
    tableau : ButcherTableau
    path : str or PathLike
        Output file.  Written to a temporary file in the same directory and
        moved into place with ``os.replace`` (never a half-written PNG).
    window : tuple of float, optional
        ``(re_min, re_max, im_min, im_max)``; chosen automatically if omitted.
    resolution : int, optional
        Grid points along the longer axis, ``>= 20``.
    title : str, optional
        Defaults to ``"<name>: order p, s stages"``.
    dpi : int, optional

    Returns
    -------
    str
        ``path``.
    """
    if isinstance(resolution, bool) or not isinstance(resolution, int) or resolution < 20:
        raise ValueError(f"resolution must be an integer >= 20, got {resolution!r}")
    if window is None:
        window = _auto_window(tableau)
    else:
        window = tuple(float(v) for v in window)
        if len(window) != 4 or not all(math.isfinite(v) for v in window) or not (
            window[0] < window[1] and window[2] < window[3]
        ):
            raise ValueError(
                f"window must be (re_min, re_max, im_min, im_max) with finite, "
                f"increasing bounds, got {window!r}"
            )
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ValueError(f"cannot write {path!r}: directory {directory!r} does not exist")

    # Lazy imports: matplotlib is only needed here, and the Agg canvas is used
    # directly so no global pyplot backend is touched.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    x0, x1, y0, y1 = window
    nx = resolution if x1 - x0 >= y1 - y0 else max(20, int(resolution * (x1 - x0) / (y1 - y0)))
    ny = resolution if y1 - y0 >= x1 - x0 else max(20, int(resolution * (y1 - y0) / (x1 - x0)))
    re, im = np.linspace(x0, x1, nx), np.linspace(y0, y1, ny)
    with np.errstate(over="ignore", invalid="ignore"):
        modulus = np.abs(tableau.stability_function(re[None, :] + 1j * im[:, None]))
    modulus = np.nan_to_num(modulus, nan=np.inf, posinf=1e300)

    fig = Figure(figsize=(6, 6 * (y1 - y0) / (x1 - x0) if x1 > x0 else 6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.contourf(re, im, modulus, levels=[0.0, 1.0], colors=["#9ecae1"])
    ax.contour(re, im, modulus, levels=[1.0], colors=["#08519c"], linewidths=1.2)
    ax.axhline(0.0, color="k", linewidth=0.6)
    ax.axvline(0.0, color="k", linewidth=0.6)
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.set_xlabel("Re z")
    ax.set_ylabel("Im z")
    if title is None:
        name = tableau.name or "Runge-Kutta method"
        plural = "s" if tableau.stages > 1 else ""
        title = f"{name}: order {tableau.order}, {tableau.stages} stage{plural}"
    ax.set_title(f"{title}\nshaded: |R(z)| <= 1")
    ax.grid(True, linewidth=0.3)

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    write_atomic(path, buffer.getvalue())
    return path
