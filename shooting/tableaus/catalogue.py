"""Named Butcher tableaus and the generic RK2 / RK3 families.

Every coefficient is an exact fraction, checked against the rooted-tree
order conditions when the catalogue entry is first built (``get_tableau`` is
cached).  Where the notes this project started from disagree with the order
conditions, an ``Erratum`` comment sits next to the corrected coefficient,
numbered as in docs/errata.md.

``order`` is always the order of ``b`` (the propagated solution) and
``embedded_order`` that of ``b_hat`` (the error estimator): for the
Fehlberg pair ``rkf45`` this means order 4 / embedded order 5, for
``dopri5``, ``cashkarp`` 5 / 4, and for ``bs3`` 3 / 2.
"""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache
from typing import Any

from shooting.tableaus.coefficients import to_fraction
from shooting.tableaus.collocation import gauss_legendre, radau_iia
from shooting.tableaus.tableau import ButcherTableau

__all__ = ["get_tableau", "tableau_names", "rk2", "rk3"]

F = Fraction


def _explicit(rows: list[list[Any]], b: list[Any], *, b_hat: list[Any] | None = None,
              **meta: Any) -> ButcherTableau:
    """Explicit tableau from its strictly lower rows (row i has i entries)."""
    s = len(rows)
    A = [[F(x) for x in row] + [F(0)] * (s - len(row)) for row in rows]
    return ButcherTableau(
        A, [F(x) for x in b], b_hat=None if b_hat is None else [F(x) for x in b_hat], **meta
    )


# --------------------------------------------------------------------------
# Explicit methods
# --------------------------------------------------------------------------
def _euler() -> ButcherTableau:
    return _explicit(
        [[]], [1],
        name="euler", order=1,
        description="1st order explicit Runge-Kutta method (forward Euler), 1 stage. Euler (1768).",
        reference="L. Euler, Institutionum calculi integralis, vol. 1 (1768).",
    )


def _midpoint() -> ButcherTableau:
    return _explicit(
        [[], ["1/2"]],
        # Erratum E14 (docs/errata.md): a course cheat sheet gives b = (0, 1/2), which
        # sums to 1/2 (inconsistent); correct b = (0, 1).
        [0, 1],
        name="midpoint", order=2,
        description="2nd order explicit Runge-Kutta method (explicit midpoint rule), "
        "2 stages. Runge (1895).",
        reference="C. Runge, Ueber die numerische Aufloesung von Differentialgleichungen, "
        "Math. Ann. 46 (1895) 167-178.",
    )


def _heun() -> ButcherTableau:
    return _explicit(
        [[], [1]], ["1/2", "1/2"],
        name="heun", order=2,
        description="2nd order explicit Runge-Kutta method (Heun / explicit trapezoidal "
        "rule), 2 stages. Heun (1900).",
        reference="K. Heun, Neue Methoden zur approximativen Integration der "
        "Differentialgleichungen einer unabhaengigen Veraenderlichen, Z. Math. Phys. 45 "
        "(1900) 23-38.",
    )


def _ralston() -> ButcherTableau:
    return _explicit(
        [[], ["2/3"]],
        # Erratum E15 (docs/errata.md): a course cheat sheet gives b = (1/4, 1/3),
        # which sums to 7/12; correct b = (1/4, 3/4) (= rk2(2/3): b_2 =
        # 1/(2 alpha) = 3/4).
        ["1/4", "3/4"],
        name="ralston", order=2,
        description="2nd order explicit Runge-Kutta method (Ralston, minimum error bound), "
        "2 stages. Ralston (1962).",
        reference="A. Ralston, Runge-Kutta methods with minimum error bounds, Math. Comp. 16 "
        "(1962) 431-437.",
    )


def _kutta3() -> ButcherTableau:
    return _explicit(
        [[], ["1/2"], [-1, 2]], ["1/6", "2/3", "1/6"],
        name="kutta3", order=3,
        description="3rd order explicit Runge-Kutta method, 3 stages (= rk3(1/2)). Kutta (1901).",
        reference="W. Kutta, Beitrag zur naeherungsweisen Integration totaler "
        "Differentialgleichungen, Z. Math. Phys. 46 (1901) 435-453.",
    )


def _heun3() -> ButcherTableau:
    return _explicit(
        [[], ["1/3"], [0, "2/3"]], ["1/4", 0, "3/4"],
        name="heun3", order=3,
        description="3rd order explicit Runge-Kutta method, 3 stages. Heun (1900).",
        reference="K. Heun, Z. Math. Phys. 45 (1900) 23-38.",
    )


def _ralston3() -> ButcherTableau:
    return _explicit(
        [[], ["1/2"], [0, "3/4"]], ["2/9", "1/3", "4/9"],
        name="ralston3", order=3,
        description="3rd order explicit Runge-Kutta method (Ralston, minimum error bound), "
        "3 stages. Ralston (1962).",
        reference="A. Ralston, Math. Comp. 16 (1962) 431-437.",
    )


def _ssprk3() -> ButcherTableau:
    return _explicit(
        [[], [1], ["1/4", "1/4"]], ["1/6", "1/6", "2/3"],
        name="ssprk3", order=3,
        description="3rd order explicit strong-stability-preserving Runge-Kutta method "
        "(SSP coefficient 1), 3 stages. Shu & Osher (1988).",
        reference="C.-W. Shu, S. Osher, Efficient implementation of essentially "
        "non-oscillatory shock-capturing schemes, J. Comput. Phys. 77 (1988) 439-471.",
    )


def _rk4() -> ButcherTableau:
    return _explicit(
        [[], ["1/2"], [0, "1/2"], [0, 0, 1]], ["1/6", "1/3", "1/3", "1/6"],
        name="rk4", order=4,
        description="4th order explicit Runge-Kutta method, 4 stages. Kutta (1901).",
        reference="W. Kutta, Z. Math. Phys. 46 (1901) 435-453.",
    )


def _rk38() -> ButcherTableau:
    return _explicit(
        [[], ["1/3"], ["-1/3", 1], [1, -1, 1]], ["1/8", "3/8", "3/8", "1/8"],
        name="rk38", order=4,
        description="4th order explicit Runge-Kutta method (3/8 rule), 4 stages. Kutta (1901).",
        reference="W. Kutta, Z. Math. Phys. 46 (1901) 435-453.",
    )


def _bs3() -> ButcherTableau:
    return _explicit(
        [[], ["1/2"], [0, "3/4"], ["2/9", "1/3", "4/9"]],
        ["2/9", "1/3", "4/9", 0],
        b_hat=["7/24", "1/4", "1/3", "1/8"],
        name="bs3", order=3, embedded_order=2,
        description="3rd order explicit Runge-Kutta method with an embedded 2nd order "
        "method, 4 stages, FSAL. Bogacki & Shampine (1989).",
        reference="P. Bogacki, L. F. Shampine, A 3(2) pair of Runge-Kutta formulas, "
        "Appl. Math. Lett. 2 (1989) 321-325.",
    )


def _rkf45() -> ButcherTableau:
    # Fehlberg's coefficients (checked against the order conditions: b has
    # order 4, b_hat order 5; the lecture slides' RKF45 table agrees).
    return _explicit(
        [
            [],
            ["1/4"],
            ["3/32", "9/32"],
            ["1932/2197", "-7200/2197", "7296/2197"],
            ["439/216", -8, "3680/513", "-845/4104"],
            ["-8/27", 2, "-3544/2565", "1859/4104", "-11/40"],
        ],
        ["25/216", 0, "1408/2565", "2197/4104", "-1/5", 0],
        b_hat=["16/135", 0, "6656/12825", "28561/56430", "-9/50", "2/55"],
        name="rkf45", order=4, embedded_order=5,
        description="4th order explicit Runge-Kutta method with an embedded 5th order "
        "method (Runge-Kutta-Fehlberg 4(5)), 6 stages. Fehlberg (1969).",
        reference="E. Fehlberg, Low-order classical Runge-Kutta formulas with stepsize "
        "control and their application to some heat transfer problems, NASA TR R-315 (1969).",
    )


def _cashkarp() -> ButcherTableau:
    return _explicit(
        [
            [],
            ["1/5"],
            ["3/40", "9/40"],
            ["3/10", "-9/10", "6/5"],
            ["-11/54", "5/2", "-70/27", "35/27"],
            ["1631/55296", "175/512", "575/13824", "44275/110592", "253/4096"],
        ],
        ["37/378", 0, "250/621", "125/594", 0, "512/1771"],
        b_hat=["2825/27648", 0, "18575/48384", "13525/55296", "277/14336", "1/4"],
        name="cashkarp", order=5, embedded_order=4,
        description="5th order explicit Runge-Kutta method with an embedded 4th order "
        "method, 6 stages. Cash & Karp (1990).",
        reference="J. R. Cash, A. H. Karp, A variable order Runge-Kutta method for initial "
        "value problems with rapidly varying right-hand sides, ACM TOMS 16 (1990) 201-222.",
    )


def _dopri5() -> ButcherTableau:
    return _explicit(
        [
            [],
            ["1/5"],
            ["3/40", "9/40"],
            ["44/45", "-56/15", "32/9"],
            ["19372/6561", "-25360/2187", "64448/6561", "-212/729"],
            ["9017/3168", "-355/33", "46732/5247", "49/176", "-5103/18656"],
            ["35/384", 0, "500/1113", "125/192", "-2187/6784", "11/84"],
        ],
        ["35/384", 0, "500/1113", "125/192", "-2187/6784", "11/84", 0],
        b_hat=["5179/57600", 0, "7571/16695", "393/640", "-92097/339200", "187/2100", "1/40"],
        name="dopri5", order=5, embedded_order=4,
        description="5th order explicit Runge-Kutta method with an embedded 4th order "
        "method, 7 stages, FSAL. Dormand & Prince (1980).",
        reference="J. R. Dormand, P. J. Prince, A family of embedded Runge-Kutta formulae, "
        "J. Comput. Appl. Math. 6 (1980) 19-26.",
    )


# --------------------------------------------------------------------------
# Implicit methods (collocation)
# --------------------------------------------------------------------------
def _renamed(tableau: ButcherTableau, name: str, description: str) -> ButcherTableau:
    return tableau.replace(name=name, description=description)


_CATALOGUE: dict[str, Callable[[], ButcherTableau]] = {
    "euler": _euler,
    "midpoint": _midpoint,
    "heun": _heun,
    "ralston": _ralston,
    "kutta3": _kutta3,
    "heun3": _heun3,
    "ralston3": _ralston3,
    "ssprk3": _ssprk3,
    "rk4": _rk4,
    "rk38": _rk38,
    "bs3": _bs3,
    "rkf45": _rkf45,
    "cashkarp": _cashkarp,
    "dopri5": _dopri5,
    "implicit_euler": lambda: _renamed(
        radau_iia(1), "implicit_euler",
        "1st order implicit Runge-Kutta method (backward Euler = Radau IIA, s = 1), "
        "1 stage; L-stable.",
    ),
    "implicit_midpoint": lambda: _renamed(
        gauss_legendre(1), "implicit_midpoint",
        "2nd order implicit Runge-Kutta method (implicit midpoint = Gauss-Legendre, "
        "s = 1), 1 stage; A-stable, symplectic.",
    ),
    "gauss2": lambda: gauss_legendre(2),
    "gauss3": lambda: gauss_legendre(3),
    "radau2": lambda: radau_iia(2),
    "radau3": lambda: radau_iia(3),
}


def tableau_names() -> list[str]:
    """Names accepted by :func:`get_tableau`, explicit methods first."""
    return list(_CATALOGUE)


@lru_cache(maxsize=None)
def _build(name: str) -> ButcherTableau:
    return _CATALOGUE[name]()


def get_tableau(name: str) -> ButcherTableau:
    """The catalogue tableau called ``name`` (case-insensitive; cached).

    Parameters
    ----------
    name : str
        One of :func:`tableau_names`.

    Returns
    -------
    ButcherTableau

    Raises
    ------
    ValueError
        For an unknown name, listing the valid names and the closest match.
    """
    if not isinstance(name, str):
        raise ValueError(f"tableau name must be a str, got {name!r}; valid: {', '.join(_CATALOGUE)}")
    key = name.strip().lower().replace("-", "_")
    if key not in _CATALOGUE:
        close = difflib.get_close_matches(key, list(_CATALOGUE), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"unknown tableau {name!r}.{hint} Valid names: {', '.join(_CATALOGUE)}"
        )
    return _build(key)


# --------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------
def _parse_alpha(alpha: Any, family: str) -> tuple[Fraction, bool]:
    if isinstance(alpha, (str, numbers.Real)) and not isinstance(alpha, bool):
        return to_fraction(alpha, f"{family}: alpha")
    raise ValueError(f"{family}: alpha must be a real number (int, Fraction, float or '2/3'), got {alpha!r}")


def _finish(values: list[Any], exact: bool) -> list[Any]:
    return values if exact else [float(v) for v in values]


def rk2(alpha: Fraction | int | float | str) -> ButcherTableau:
    """Generic second order explicit two-stage method.

    ::

        0     |  0               0
        alpha |  alpha           0
        ------+----------------------------
              |  1 - 1/(2 alpha) 1/(2 alpha)

    ``alpha = 1/2``: midpoint, ``1``: Heun, ``2/3``: Ralston.

    Parameters
    ----------
    alpha : Fraction, int, str or float
        Node ``c_2``, nonzero.  Exact types give an exact tableau; a float
        gives an inexact one (coefficients derived exactly, then rounded).

    Returns
    -------
    ButcherTableau
        Order 2.
    """
    a, exact = _parse_alpha(alpha, "rk2")
    if a == 0:
        raise ValueError("rk2: alpha = 0 is not allowed (b_2 = 1/(2 alpha)); choose alpha != 0")
    b = _finish([1 - 1 / (2 * a), 1 / (2 * a)], exact)
    a_ = _finish([a], exact)[0]
    return ButcherTableau([[0, 0], [a_, 0]], b, [0, a_], name=f"rk2(alpha={alpha})", order=2)


def rk3(alpha: Fraction | int | float | str) -> ButcherTableau:
    """Generic third order explicit three-stage method with ``c = (0, alpha, 1)``.

    Derived from the order conditions (HNW I, Sec. II.1)::

        sum b = 1,  b.c = 1/2,  b.c^2 = 1/3,  b.(A c) = 1/6

    which give::

        b_2  = 1 / (6 alpha (1 - alpha))
        b_3  = (2 - 3 alpha) / (6 (1 - alpha))
        b_1  = 1/2 - 1/(6 alpha)
        a_32 = 1 / (6 b_3 alpha) = (1 - alpha) / (alpha (2 - 3 alpha))
        a_31 = 1 - a_32,   a_21 = alpha

    ``alpha = 1/2`` is Kutta's method (``kutta3``).

    Parameters
    ----------
    alpha : Fraction, int, str or float
        Node ``c_2``; must not be 0, 2/3 or 1 (division by zero in ``b_2``,
        ``a_32`` resp.).  Floats give an inexact tableau.

    Returns
    -------
    ButcherTableau
        Order 3.
    """
    a, exact = _parse_alpha(alpha, "rk3")
    forbidden = (F(0), F(2, 3), F(1))
    near = any(a == f for f in forbidden) if exact else any(abs(a - f) < 1e-12 for f in forbidden)
    if near:
        raise ValueError(
            f"rk3: alpha = {alpha} is not allowed; alpha must differ from 0, 2/3 and 1 "
            f"(the coefficients divide by alpha, 2 - 3 alpha and 1 - alpha)"
        )
    a32 = (1 - a) / (a * (2 - 3 * a))
    rows: list[list[Any]] = [[0, 0, 0], [a, 0, 0], [1 - a32, a32, 0]]
    b = [F(1, 2) - 1 / (6 * a), 1 / (6 * a * (1 - a)), (2 - 3 * a) / (6 * (1 - a))]
    A = [_finish(row, exact) for row in rows]
    c = _finish([0, a, 1], exact)
    return ButcherTableau(A, _finish(b, exact), c, name=f"rk3(alpha={alpha})", order=3)
