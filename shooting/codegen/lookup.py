"""Lookup tables: the data of CasADi's linear and B-spline interpolants, for C of our own.

``casadi.interpolant(name, "linear" | "bspline", grid, values)`` creates a
Function whose tables CasADi does not expose through its Python API; its own
code generator writes them into C as static arrays passed to its runtime
(``casadi_interpn``, ``casadi_interpn_grad``, ``casadi_nd_boor_eval``). We
generate that C for the one Function, read the arrays and the call's
arguments back, and emit the interpolation ourselves (`lookup.c.in`): in the
chosen real type, with no double arithmetic in a float build and no heap.

Where a Function holds several tables (the derivative of a B-spline is an MX
Function with one spline node per input), they are returned in the order
CasADi's C evaluates them, which is the order of the Function's instructions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import casadi as ca

__all__ = ["LINEAR_CLASSES", "SPLINE_CLASS", "LinearTable", "SplineTable", "tables_in"]

#: Function classes evaluated by `LinearTable` (the interpolant and its Jacobian).
LINEAR_CLASSES = ("LinearInterpolant", "LinearInterpolantJac")
#: The B-spline interpolant's class.
SPLINE_CLASS = "BSplineInterpolant"

_ARRAY = re.compile(r"static const casadi_(real|int) (casadi_[cs]\d+)\[(\d+)\]\s*=\s*\{([^}]*)\};", re.S)
_CALL = re.compile(r"(?:CASADI_PREFIX\()?(?:casadi_)?(interpn_grad|interpn|nd_boor_eval)\)?\(([^;]*)\);")


@dataclass(frozen=True)
class LinearTable:
    """Multilinear interpolation on a tensor grid (``casadi_interpn``), or its gradient.

    Attributes
    ----------
    ndim : int
    grid : tuple of float
        All grid points, dimension after dimension (`offset` delimits them).
    offset : tuple of int, length ndim + 1
    values : tuple of float
        ``m`` values per grid point, first dimension fastest.
    lookup : tuple of int, length ndim
        CasADi's lookup mode per dimension: 0 linear scan, 1 equidistant, 2 binary search.
    m : int
        Outputs per point.
    gradient : bool
        The Jacobian (``ndim * m`` outputs) instead of the values.
    """

    ndim: int
    grid: tuple[float, ...]
    offset: tuple[int, ...]
    values: tuple[float, ...]
    lookup: tuple[int, ...]
    m: int
    gradient: bool


@dataclass(frozen=True)
class SplineTable:
    """A tensor-product B-spline (``casadi_nd_boor_eval``).

    Attributes
    ----------
    ndim : int
    knots : tuple of float
        All knots, dimension after dimension (`offset` delimits them).
    offset : tuple of int, length ndim + 1
    degree : tuple of int, length ndim
    strides : tuple of int, length ndim
        Coefficient stride per dimension.
    coeffs : tuple of float
    m : int
        Outputs.
    lookup : tuple of int, length ndim
    """

    ndim: int
    knots: tuple[float, ...]
    offset: tuple[int, ...]
    degree: tuple[int, ...]
    strides: tuple[int, ...]
    coeffs: tuple[float, ...]
    m: int
    lookup: tuple[int, ...]


def _arrays(text: str) -> dict[str, tuple[float, ...] | tuple[int, ...]]:
    out: dict[str, tuple[float, ...] | tuple[int, ...]] = {}
    for kind, name, size, body in _ARRAY.findall(text):
        items = [v for v in body.replace("\n", " ").split(",") if v.strip()]
        items += ["0"] * (int(size) - len(items))  # C fills the rest with zeros ({0} for all-zero arrays)
        out[name] = tuple(float(v) for v in items) if kind == "real" else tuple(int(v) for v in items)
    return out


def _body(text: str, name: str) -> str:
    """The C of the Function called `name` in CasADi's generated file."""
    start = text.find(f"/* {name}:")
    if start < 0:
        raise ValueError(f"cannot find the C of {name} in CasADi's generated code")
    end = text.find("\n}\n", start)
    return text[start:end]


def tables_in(F: ca.Function) -> list[LinearTable | SplineTable]:
    """The interpolation tables `F` evaluates, in order.

    Parameters
    ----------
    F : casadi.Function
        An interpolant (`LINEAR_CLASSES`, `SPLINE_CLASS`) or an MX Function
        with B-spline nodes (an interpolant's derivative).

    Returns
    -------
    list of LinearTable or SplineTable

    Raises
    ------
    ValueError
        When CasADi's C for `F` does not have the expected shape (another
        CasADi version): the message names the Function.
    """
    gen = ca.CodeGenerator("shooting_lookup")
    gen.add(F)
    text = gen.dump()
    arrays = _arrays(text)
    tables: list[LinearTable | SplineTable] = []
    try:
        for kind, argtext in _CALL.findall(_body(text, F.name())):
            args = [a.strip() for a in argtext.split(",")]
            if kind in ("interpn", "interpn_grad"):
                # (res, ndim, grid, offset, values, x, lookup_mode, m, iw, w)
                ndim = int(args[1])
                tables.append(LinearTable(ndim, tuple(map(float, arrays[args[2]])), tuple(map(int, arrays[args[3]])),
                                          tuple(map(float, arrays[args[4]])), tuple(map(int, arrays[args[6]])),
                                          int(args[7]), kind == "interpn_grad"))
            else:
                # (ret, n_dims, knots, offset, degree, strides, coeffs, m, x, lookup_mode, iw, w)
                ndim = int(args[1])
                tables.append(SplineTable(ndim, tuple(map(float, arrays[args[2]])),
                                          tuple(map(int, arrays[args[3]])), tuple(map(int, arrays[args[4]])),
                                          tuple(map(int, arrays[args[5]])), tuple(map(float, arrays[args[6]])),
                                          int(args[7]), tuple(map(int, arrays[args[9]]))))
    except (KeyError, IndexError, ValueError) as err:
        raise ValueError(f"cannot read the tables of {F.name()} ({F.class_name()}) from CasADi's C "
                         f"(casadi {ca.__version__}: {type(err).__name__} {err})") from None  # type: ignore[attr-defined]
    return tables
