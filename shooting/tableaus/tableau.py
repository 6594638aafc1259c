"""Butcher tableaus as validated, exact data.

A Runge-Kutta method with ``s`` stages is the data

    c | A            k_i     = f(t_n + c_i h, x_n + h sum_j a_ij k_j)
    --+----          x_{n+1} = x_n + h sum_i b_i k_i
      | b^T          (embedded: x^_{n+1} = x_n + h sum_i b^_i k_i)

Erratum E12 (docs/errata.md): a course cheat sheet writes the stage as
``K_n = f(t_k + dt c_n, x_n + dt (A_n) K)``; the stage state starts from the
step's initial state, ``x_k + dt sum_j a_nj K_j`` (``x_k``, not ``x_n``).

Exactness and tolerances
------------------------
Every coefficient is stored exactly as a :class:`fractions.Fraction`
(``A_exact``, ``b_exact``, ``c_exact``, ``b_hat_exact``) next to its
correctly rounded float64 value (``A``, ``b``, ``c``, ``b_hat``; read-only).

* Input made only of ints, Fractions, Decimals and strings (``"2/9"``,
  ``"0.25"``, parsed exactly) gives an *exact* tableau: consistency and order
  conditions are checked exactly (``tolerance == 0``).
* A float anywhere makes the tableau *inexact*: each float is converted
  exactly (``Fraction(0.1)``), the arithmetic stays exact, but a condition is
  accepted within ``tolerance = 1e-12`` (:data:`INEXACT_TOLERANCE`), scaled by
  the size of its terms: ``tolerance * max(1, ||A||_inf)`` for ``c = A @ 1``,
  ``tolerance * max(1, ||b||_1)`` for ``sum(b) = 1`` and
  ``tolerance * max(1, ||b||_1) * max(1, ||A||_inf)**(q-1)`` for an order
  condition of order ``q`` (see :mod:`shooting.tableaus.order_conditions`).
* ``tolerance`` can also be given explicitly; the collocation methods of
  :mod:`shooting.tableaus.collocation` with irrational nodes are *nearly exact*
  (~300-bit coefficients) and carry ``tolerance = 1e-40``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.tableaus import order_conditions, plot, stability
from shooting.tableaus.coefficients import (
    MAX_BITS,
    format_fraction,
    ordinal,
    parse_matrix,
    parse_vector,
    to_fraction,
)
from shooting.tableaus.json_file import read_json_object

__all__ = ["INEXACT_TOLERANCE", "MAX_LABEL", "ButcherTableau", "load_tableau"]

#: Base tolerance of the checks for tableaus given with float coefficients.
INEXACT_TOLERANCE = 1e-12
#: Longest name, description or reference (a line, a paragraph).
MAX_LABEL = 4096

_JSON_KEYS = (
    "A", "b", "c", "b_hat", "name", "order", "embedded_order",
    "description", "reference", "tolerance",
)


def _check_declared(value: Any, what: str) -> int | None:
    if value is None:
        return None
    return _validate.integer(value, what, minimum=1)


def _common_denominator(values: Any, common: int, label: str) -> int:
    """The least common denominator of `values` and `common`, or ValueError beyond `MAX_BITS` bits.

    Exact order conditions and stability polynomials work on the integers
    ``D x``: their cost grows with the bits of ``D``, not of each
    coefficient (1600 coefficients with unrelated 64-bit denominators have a
    ``D`` of ~100000 bits, and a 40-stage check of them took minutes).
    Rational tableaus need a few dozen bits, floats at most 1074, the
    collocation families ~320.
    """
    for x in values:
        common = math.lcm(common, x.denominator)
        if common.bit_length() > MAX_BITS:
            raise ValueError(f"the coefficients of the tableau (up to {label}) have no common denominator of at most "
                             f"{MAX_BITS} bits: write them over a common denominator, or as floats")
    return common


def _readable(text: str) -> bool:
    """Whether a coefficient written as `text` is accepted again (a row sum may exceed the bounds)."""
    try:
        to_fraction(text, "c")
    except ValueError:
        return False
    return True


def _frozen_array(values: Any) -> npt.NDArray[np.float64]:
    arr = np.array(values, dtype=np.float64)
    arr.setflags(write=False)
    return arr


# --------------------------------------------------------------------------
# The tableau
# --------------------------------------------------------------------------
@dataclass(frozen=True, eq=False, repr=False)
class ButcherTableau:
    """A validated Butcher tableau with exact coefficients.

    Parameters
    ----------
    A : array_like, shape (s, s)
        Runge-Kutta matrix.  Entries: int, Fraction, float or strings such
        as ``"2/9"`` / ``"0.25"`` (parsed exactly).
    b : array_like, shape (s,)
        Weights of the propagated solution; must sum to 1.
    c : array_like, shape (s,), optional
        Nodes; default ``A @ 1``.  If given it must equal ``A @ 1``.
    b_hat : array_like, shape (s,), optional
        Weights of the embedded (error-estimating) solution; sum to 1.
    name : str, optional
    order : int, optional
        Order of ``(A, b)``.  Computed from the order conditions when
        omitted; checked against them when given.
    embedded_order : int, optional
        Order of ``(A, b_hat)``; computed or checked likewise.
    description, reference : str, optional
        One line of properties and the literature reference.
    tolerance : float, optional
        Base tolerance of all checks; default 0 for exact input and
        :data:`INEXACT_TOLERANCE` if any coefficient is a float.

    Attributes
    ----------
    A : ndarray, shape (s, s)
    b, c : ndarray, shape (s,)
    b_hat : ndarray, shape (s,) or None
        Correctly rounded float64 values (read-only).
    A_exact : tuple of tuple of Fraction, shape (s, s)
    b_exact, c_exact : tuple of Fraction, shape (s,)
    b_hat_exact : tuple of Fraction or None
    stages : int
        ``s``.
    order, embedded_order : int or None
        Verified orders.

    Raises
    ------
    ValueError
        For a wrong shape, more than 40 stages, a non-numeric or non-finite
        entry, coefficients without a common denominator of at most 4096
        bits, ``c != A @ 1``, weights not summing to one, or a declared
        order that the order conditions contradict.

    Notes
    -----
    Equality and hashing compare the exact coefficients only (name,
    description and tolerance are ignored): ``gauss_legendre(2) ==
    get_tableau("gauss2")``.
    """

    # Declared Any: the constructor takes array-likes (and None for what is
    # derived), __post_init__ stores read-only float64 arrays, ints and a float
    # (see Attributes).
    A: Any
    b: Any
    c: Any = None
    _: KW_ONLY
    b_hat: Any = None
    name: str = ""
    order: Any = None
    embedded_order: Any = None
    description: str = ""
    reference: str = ""
    tolerance: Any = None
    A_exact: tuple[tuple[Fraction, ...], ...] = field(init=False)
    b_exact: tuple[Fraction, ...] = field(init=False)
    c_exact: tuple[Fraction, ...] = field(init=False)
    b_hat_exact: tuple[Fraction, ...] | None = field(init=False)
    stages: int = field(init=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for attr in ("name", "description", "reference"):
            if not isinstance(getattr(self, attr), str):
                raise ValueError(f"{attr} must be a str, got {getattr(self, attr)!r}")
            if len(getattr(self, attr)) > MAX_LABEL:
                raise ValueError(f"{attr} has {len(getattr(self, attr))} characters: at most {MAX_LABEL}")
        A, exact = parse_matrix(self.A)
        s = len(A)
        common = _common_denominator((x for row in A for x in row), 1, "A")
        row_sums = tuple(sum(row, Fraction(0)) for row in A)
        vectors: dict[str, Any] = {"b": self.b, "c": self.c, "b_hat": self.b_hat}
        for label, raw in vectors.items():
            if raw is not None or label == "b":
                vectors[label], ok = parse_vector(raw, label, s)
                exact = exact and ok
                common = _common_denominator(vectors[label], common, label)
        b, b_hat = vectors["b"], vectors["b_hat"]
        c = row_sums if self.c is None else vectors["c"]

        if self.tolerance is None:
            tolerance = 0.0 if exact else INEXACT_TOLERANCE
        else:
            tolerance = _validate.real(self.tolerance, "tolerance", minimum=0.0)
        tol = Fraction(tolerance)

        # Consistency: c = A @ 1 and sum(b) = sum(b_hat) = 1.
        norm_A = max(Fraction(1), max(sum(abs(x) for x in row) for row in A))
        for i, (row_sum, c_i) in enumerate(zip(row_sums, c, strict=True)):
            if abs(row_sum - c_i) > tol * norm_A:
                raise ValueError(
                    f"row {i} of A sums to {format_fraction(row_sum)} but c[{i}] = {format_fraction(c_i)} "
                    f"(c must equal A @ 1; omit c to use the row sums)"
                )
        for label, weights in (("b", b), ("b_hat", b_hat)):
            if weights is None:
                continue
            total = sum(weights, Fraction(0))
            if abs(total - 1) > tol * max(Fraction(1), sum(abs(x) for x in weights)):
                raise ValueError(
                    f"{label} sums to {format_fraction(total)} but must sum to 1 "
                    f"(consistency condition sum({label}) == 1)"
                )

        set_(self, "A_exact", A)
        set_(self, "b_exact", b)
        set_(self, "c_exact", c)
        set_(self, "b_hat_exact", b_hat)
        set_(self, "stages", s)
        set_(self, "tolerance", tolerance)
        set_(self, "A", _frozen_array([[float(x) for x in row] for row in A]))
        set_(self, "b", _frozen_array([float(x) for x in b]))
        set_(self, "c", _frozen_array([float(x) for x in c]))
        set_(self, "b_hat", None if b_hat is None else _frozen_array([float(x) for x in b_hat]))

        # Orders: computed when omitted, verified when declared.
        declared = _check_declared(self.order, "order")
        set_(self, "order", self._resolve_order(declared, embedded=False))
        declared = _check_declared(self.embedded_order, "embedded_order")
        if b_hat is None:
            if declared is not None:
                raise ValueError(
                    f"embedded_order = {declared} given but the tableau has no b_hat; "
                    f"pass b_hat or drop embedded_order"
                )
            set_(self, "embedded_order", None)
        else:
            set_(self, "embedded_order", self._resolve_order(declared, embedded=True))

    def _resolve_order(self, declared: int | None, *, embedded: bool) -> int:
        lower, upper = self.order_bounds(embedded=embedded)
        label = "embedded_order" if embedded else "order"
        if declared is None or declared == lower:
            return lower
        if lower == upper:
            raise ValueError(
                f"declared {label.replace('_', ' ')} {declared} but the order "
                f"conditions give {lower} (tableau {self.name or '<unnamed>'!s}); "
                f"fix the coefficients or declare {label}={lower}"
            )
        raise ValueError(
            f"declared {label.replace('_', ' ')} {declared} cannot be verified: the order "
            f"conditions give an order between {lower} and {upper} (trees are checked up "
            f"to order {order_conditions.MAX_TREE_ORDER}); declare {label}={lower}"
        )

    # ------------------------------------------------------------------
    # Order conditions
    # ------------------------------------------------------------------
    @cached_property
    def _weights(self) -> order_conditions.ElementaryWeights:
        return order_conditions.ElementaryWeights(self.A_exact, Fraction(self.tolerance))

    @cached_property
    def _bounds(self) -> dict[bool, tuple[int, int]]:
        return {}

    def order_bounds(self, *, embedded: bool = False) -> tuple[int, int]:
        """Lower and upper bound of the order (equal when it is determined).

        See `shooting.tableaus.order_conditions.order_bounds`; cached.
        """
        if embedded not in self._bounds:
            weights = self._weights_for(embedded)
            self._bounds[embedded] = order_conditions.order_bounds(
                self.A_exact,
                weights,
                self.c_exact,
                tolerance=Fraction(self.tolerance),
                weights=self._weights,
            )
        return self._bounds[embedded]

    def _weights_for(self, embedded: bool) -> tuple[Fraction, ...]:
        if not embedded:
            return self.b_exact
        if self.b_hat_exact is None:
            raise ValueError(
                f"tableau {self.name or '<unnamed>'} has no embedded weights b_hat; "
                f"use embedded=False"
            )
        return self.b_hat_exact

    def verified_order(self, *, embedded: bool = False) -> int:
        """Order given by the order conditions (of ``b``, or of ``b_hat`` if ``embedded``).

        Rooted-tree conditions are checked exactly (or within the tableau's
        tolerance) up to order 10, stopping at the first failing order; above
        that, Butcher's simplifying assumptions B(p), C(q), D(r) certify the
        order (Gauss-Legendre 2s, Radau IIA 2s - 1).  In the rare case where
        neither settles it, the returned value is a guaranteed lower bound
        (see :meth:`order_bounds`).  Cached per tableau.
        """
        return self.order_bounds(embedded=embedded)[0]

    # ------------------------------------------------------------------
    # Structure
    # ------------------------------------------------------------------
    @property
    def exact(self) -> bool:
        """True if all checks are exact (``tolerance == 0``)."""
        return self.tolerance == 0

    @property
    def explicit(self) -> bool:
        """True iff ``A`` is strictly lower triangular."""
        return all(x == 0 for i, row in enumerate(self.A_exact) for x in row[i:])

    @property
    def implicit(self) -> bool:
        """``not explicit``."""
        return not self.explicit

    @property
    def diagonally_implicit(self) -> bool:
        """True iff ``A`` is lower triangular with a nonzero diagonal entry (DIRK)."""
        A = self.A_exact
        lower = all(x == 0 for i, row in enumerate(A) for x in row[i + 1:])
        return lower and any(A[i][i] != 0 for i in range(self.stages))

    @property
    def embedded(self) -> bool:
        """True if the tableau has embedded weights ``b_hat``."""
        return self.b_hat_exact is not None

    @property
    def stiffly_accurate(self) -> bool:
        """True iff the last row of ``A`` equals ``b`` (``x_{n+1}`` is the last stage)."""
        return self.A_exact[-1] == self.b_exact

    @property
    def fsal(self) -> bool:
        """First Same As Last: the first stage is explicit and the last row of A is b."""
        return (
            self.stages > 1
            and all(x == 0 for x in self.A_exact[0])
            and self.stiffly_accurate
        )

    @property
    def summary(self) -> str:
        """One line of properties, e.g. ``"4th order explicit Runge-Kutta method, 4 stages."``."""
        kind = (
            "explicit" if self.explicit
            else "diagonally implicit" if self.diagonally_implicit
            else "implicit"
        )
        text = f"{ordinal(self.order)} order {kind} Runge-Kutta method"
        if self.embedded:
            text += f" with an embedded {ordinal(self.embedded_order)} order method"
        plural = "s" if self.stages > 1 else ""
        return f"{text}, {self.stages} stage{plural}."

    # ------------------------------------------------------------------
    # Linear stability (see shooting.tableaus.stability)
    # ------------------------------------------------------------------
    @cached_property
    def _stability(self) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]]:
        return stability.stability_polynomials(self)

    def stability_polynomials(self) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]]:
        """Exact ``(P, Q)`` with ``R = P / Q``, coefficients lowest degree first."""
        return self._stability

    def stability_function(self, z: Any) -> Any:
        """``R(z) = det(I - z(A - 1 b^T)) / det(I - z A)`` for ``z`` of any shape (...).

        Returns a complex (scalar ``z``) or a complex128 array of the shape of ``z``.
        """
        return stability.stability_function(self, z)

    def is_a_stable(self) -> bool:
        """``|R(z)| <= 1`` for all ``Re z <= 0`` (exact decision)."""
        return stability.is_a_stable(self)

    def is_l_stable(self) -> bool:
        """A-stable and ``R(z) -> 0`` as ``|z| -> inf``."""
        return stability.is_l_stable(self)

    def plot_stability_region(self, path: str | os.PathLike[str], **options: Any) -> str:
        """Write a PNG of ``{z : |R(z)| <= 1}``; see `shooting.tableaus.plot.plot_stability_region`."""
        return plot.plot_stability_region(self, path, **options)

    # ------------------------------------------------------------------
    # Copies and serialisation
    # ------------------------------------------------------------------
    def replace(self, **changes: Any) -> ButcherTableau:
        """Copy with some fields changed, keeping the exact coefficients.

        (``dataclasses.replace`` would rebuild from the float arrays.)  A new
        ``A`` resets ``c`` to the row sums, and orders not given are recomputed.
        """
        unknown = set(changes) - set(_JSON_KEYS)
        if unknown:
            raise ValueError(f"replace() got unknown fields {sorted(unknown)}; valid: {list(_JSON_KEYS)}")
        kwargs: dict[str, Any] = {key: getattr(self, key) for key in _JSON_KEYS}
        kwargs.update(A=self.A_exact, b=self.b_exact, c=self.c_exact, b_hat=self.b_hat_exact)
        if "A" in changes:
            kwargs["c"] = None
        if {"A", "b"} & set(changes):
            kwargs["order"] = None
        if {"A", "b_hat"} & set(changes):
            kwargs["embedded_order"] = None
        kwargs.update(changes)
        return ButcherTableau(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; coefficients as exact fraction strings (``"1/6"``).

        ``from_json(t.to_dict()) == t`` with the same name, orders and
        tolerance, for every tableau (also through a JSON file). ``c`` is
        left out only when it is the row sums of ``A`` and beyond what a
        coefficient may be (the row sums are then derived again).
        """
        c = [str(x) for x in self.c_exact]
        row_sums = tuple(sum(row, Fraction(0)) for row in self.A_exact)
        derived = self.c_exact == row_sums and not all(_readable(text) for text in c)
        out: dict[str, Any] = {
            "name": self.name,
            "A": [[str(x) for x in row] for row in self.A_exact],
            "b": [str(x) for x in self.b_exact],
            **({} if derived else {"c": c}),
        }
        optional = {
            "b_hat": None if self.b_hat_exact is None else [str(x) for x in self.b_hat_exact],
            "order": self.order,
            "embedded_order": self.embedded_order,
            "description": self.description,
            "reference": self.reference,
            "tolerance": self.tolerance,  # omitted when 0 (exact)
        }
        out.update({key: value for key, value in optional.items() if value})
        return out

    @classmethod
    def from_json(cls, source: str | os.PathLike[str] | Mapping[str, Any]) -> ButcherTableau:
        """Build a tableau from a JSON file or an already parsed dict.

        Format::

            {"A": [[0, 0], ["1/2", 0]], "b": [0, 1], "c": [0, "1/2"],
             "b_hat": [...], "name": "midpoint", "order": 2, "embedded_order": 1}

        ``A`` and ``b`` are required; fractions may be strings; JSON floats
        make the tableau inexact.

        Raises
        ------
        ValueError
            Naming the file (or "tableau dict") and the problem: missing
            file, invalid JSON, missing or unknown keys, bad coefficients.
        """
        if isinstance(source, Mapping):
            return cls._from_mapping(source, "tableau dict")
        if not isinstance(source, (str, os.PathLike)):
            raise ValueError(
                f"from_json expects a path or a dict, got {type(source).__name__}"
            )
        path = os.fspath(source)
        origin = f"tableau file {path!r}"
        data = read_json_object(path, origin)
        return cls._from_mapping(data, origin)

    @classmethod
    def _from_mapping(cls, data: Mapping[str, Any], origin: str) -> ButcherTableau:
        missing = [key for key in ("A", "b") if key not in data]
        if missing:
            raise ValueError(f"{origin}: missing required key(s) {missing} (need 'A' and 'b')")
        unknown = sorted(set(data) - set(_JSON_KEYS))
        if unknown:
            raise ValueError(f"{origin}: unknown key(s) {unknown}; valid keys: {list(_JSON_KEYS)}")
        kwargs = dict(data)
        if isinstance(kwargs.get("tolerance"), str):
            try:
                kwargs["tolerance"] = float(kwargs["tolerance"])
            except ValueError:
                raise ValueError(f"{origin}: tolerance {data['tolerance']!r} is not a number") from None
        kwargs.setdefault("name", "")
        try:
            return cls(**kwargs)
        except ValueError as err:
            raise ValueError(f"{origin}: {err}") from None

    # ------------------------------------------------------------------
    # Dunder methods
    # ------------------------------------------------------------------
    def _key(self) -> tuple:
        return (self.A_exact, self.b_exact, self.c_exact, self.b_hat_exact)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ButcherTableau):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"ButcherTableau(name={self.name!r}, stages={self.stages}, order={self.order}, "
            f"embedded_order={self.embedded_order}, explicit={self.explicit}, "
            f"exact={self.exact})"
        )

    def __str__(self) -> str:
        def fmt(x: Fraction) -> str:
            return str(x) if self.exact else format_fraction(x)

        s = self.stages
        c_col = [fmt(x) for x in self.c_exact]
        body = [[fmt(x) for x in row] for row in self.A_exact]
        weights = [([fmt(x) for x in self.b_exact], f"b, order {self.order}")]
        if self.b_hat_exact is not None:
            weights.append(
                ([fmt(x) for x in self.b_hat_exact], f"b_hat, order {self.embedded_order}")
            )
        widths = [max(len(r[j]) for r in body + [w for w, _ in weights]) for j in range(s)]
        wc = max(len(x) for x in c_col)

        def cells(row: list[str]) -> str:
            return "  ".join(f"{x:>{w}}" for x, w in zip(row, widths, strict=True))

        head = self.name or "Butcher tableau"
        lines = [f"{head}: {self.description or self.summary}"]
        lines += [f"  {c_col[i]:>{wc}} | {cells(body[i])}" for i in range(s)]
        lines.append(f"  {'-' * wc}-+-{'-' * len(cells(body[0]))}")
        lines += [f"  {'':>{wc}} | {cells(row)}   ({label})" for row, label in weights]
        return "\n".join(lines)


def load_tableau(path: str | os.PathLike[str]) -> ButcherTableau:
    """Load a tableau from a JSON file.

    Parameters
    ----------
    path : str or os.PathLike
        A JSON file ``{"A": [[...]], "b": [...], "c": [...], "b_hat": [...],
        "name": ..., "order": ..., "embedded_order": ...}``; ``c``, ``b_hat``
        and the rest are optional, and entries may be fractions as strings
        (``"1/6"``), which stay exact.

    Returns
    -------
    ButcherTableau

    Raises
    ------
    ValueError
        A missing or unreadable file, invalid JSON, missing ``A`` or ``b``,
        ragged rows, or a tableau that fails validation; the message names
        the file. See :meth:`ButcherTableau.from_json`.
    """
    return ButcherTableau.from_json(path)
