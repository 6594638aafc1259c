"""Exact Butcher coefficients from user input: numbers, fraction strings, nested sequences.

``to_fraction`` turns one coefficient into a `fractions.Fraction` and says
whether the input was exact (ints, Fractions, Decimals and strings such as
``"2/9"`` or ``"0.25"`` are; floats are converted exactly but make the tableau
*inexact*, see `shooting.tableaus.tableau`).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["MAX_BITS", "MAX_COEFFICIENT", "MAX_TABLEAU_STAGES", "MAX_TEXT", "format_fraction", "is_sequence",
           "ordinal", "parse_matrix", "parse_vector", "to_fraction"]


# --------------------------------------------------------------------------
#: Most stages of a tableau. Feagin's RK14(12), the largest Runge-Kutta
#: method in use, has 35; collocation families are used with far fewer (ours
#: stop at 12). At 40 stages the order verification of a dense order-10
#: tableau takes under a second and its exact stability analysis ~10 s (the
#: cost grows like s^4; 400 stages took minutes).
MAX_TABLEAU_STAGES = 40
#: Largest magnitude of a coefficient (beyond it float64 overflows).
MAX_COEFFICIENT = Fraction(10) ** 300
#: Largest numerator or denominator, in bits (collocation tableaus use ~320).
MAX_BITS = 4096
#: Longest coefficient string: that of any Fraction within `MAX_BITS` (a sign,
#: two numbers of 1234 digits and the slash), so that what `to_fraction`
#: accepts, written back as ``str(fraction)``, is accepted again. Together
#: with the largest decimal exponent this bounds the work of exact parsing
#: ("1e100000000" would make Fraction compute 10**1e8).
MAX_TEXT = 2 * len(str(2**MAX_BITS)) + 2
MAX_EXPONENT = 330

_EXPONENT = re.compile(r"[eE]([+-]?\d+)")


def to_fraction(value: Any, where: str) -> tuple[Fraction, bool]:
    """Exact value of one coefficient and whether the input was exact.

    Raises
    ------
    ValueError
        Not a number, not finite, or outside the bounds above.
    """
    number, exact = _parse(value, where)
    if abs(number) > MAX_COEFFICIENT or max(number.numerator.bit_length(), number.denominator.bit_length()) > MAX_BITS:
        raise ValueError(f"{where} is too large or too finely divided (|x| <= 1e300 and at most {MAX_BITS}-bit "
                         f"numerator and denominator): a Butcher coefficient is a moderate number")
    return number, exact


def _parse(value: Any, where: str) -> tuple[Fraction, bool]:
    fix = "use an int, a Fraction, a float or a fraction string such as '2/9' or '0.25'"
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{where} = {value!r} is a bool, not a number; {fix}")
    if isinstance(value, Fraction):
        return value, True
    if isinstance(value, (int, np.integer)):
        return Fraction(int(value)), True
    if isinstance(value, Decimal):
        if not value.is_finite() or abs(value.adjusted()) > MAX_EXPONENT:
            raise ValueError(f"{where} is {value}; coefficients must be finite numbers below 1e300")
        return Fraction(value), True
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"{where} is {number}; coefficients must be finite numbers")
        return Fraction(number), False
    if isinstance(value, str):
        text = value.strip()
        if len(text) > MAX_TEXT or any(abs(int(e)) > MAX_EXPONENT for e in _EXPONENT.findall(text)):
            raise ValueError(f"{where} = {value[:40]!r}... is too long or has a decimal exponent beyond "
                             f"+-{MAX_EXPONENT}; coefficients must be finite numbers below 1e300")
        try:
            return Fraction(text), True
        except (ValueError, ZeroDivisionError):
            pass
        if text.lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise ValueError(f"{where} is {value!r}; coefficients must be finite numbers")
        raise ValueError(f"{where} = {value!r} is not a number; {fix}")
    if isinstance(value, numbers.Rational):
        return Fraction(int(value.numerator), int(value.denominator)), True
    raise ValueError(f"{where} = {value!r} ({type(value).__name__}) is not a number; {fix}")


def is_sequence(x: Any) -> bool:
    return isinstance(x, np.ndarray) or (
        isinstance(x, Sequence) and not isinstance(x, (str, bytes))
    )


def parse_vector(v: Any, name: str, s: int) -> tuple[tuple[Fraction, ...], bool]:
    if isinstance(v, np.ndarray) and v.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of length s = {s}, got shape {v.shape}")
    if not is_sequence(v):
        raise ValueError(f"{name} must be a sequence of s = {s} numbers, got {v!r}")
    if len(v) != s:
        raise ValueError(
            f"{name} has {len(v)} entries but A is {s} x {s} ({name} must have length s = {s})"
        )
    parsed = [to_fraction(x, f"{name}[{i}]") for i, x in enumerate(v)]
    return tuple(x for x, _ in parsed), all(ok for _, ok in parsed)


def parse_matrix(A: Any) -> tuple[tuple[tuple[Fraction, ...], ...], bool]:
    if isinstance(A, np.ndarray) and A.ndim != 2:
        raise ValueError(f"A must be a 2-D array of shape (s, s), got shape {A.shape}")
    if not is_sequence(A):
        raise ValueError(f"A must be a square (s, s) nested sequence of numbers, got {A!r}")
    s = len(A)
    if s == 0:
        raise ValueError("A is empty; a Butcher tableau needs at least one stage (s >= 1)")
    if s > MAX_TABLEAU_STAGES:
        raise ValueError(f"A has {s} rows: tableaus have at most {MAX_TABLEAU_STAGES} stages (the largest methods "
                         f"in use have 35); for more accuracy take more steps or a higher-order method")
    rows, exact = [], True
    for i, row in enumerate(A):
        if not is_sequence(row):
            raise ValueError(f"row {i} of A is {row!r}, not a sequence (A must be s x s)")
        if len(row) != s:
            raise ValueError(
                f"row {i} of A has {len(row)} entries but A has {s} rows "
                f"(A must be square, s x s)"
            )
        parsed = [to_fraction(x, f"A[{i}, {j}]") for j, x in enumerate(row)]
        rows.append(tuple(x for x, _ in parsed))
        exact = exact and all(ok for _, ok in parsed)
    return tuple(rows), exact


def format_fraction(x: Fraction) -> str:
    return str(x) if x.denominator <= 10**6 else repr(float(x))


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
