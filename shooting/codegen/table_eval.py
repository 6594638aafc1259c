"""The lookup-table runtime of the generated C, in Python, operation for operation.

`shooting.codegen.rounding` evaluates these with every arithmetic result and
every table entry perturbed by up to one unit of roundoff, as the C computes
them in its real type: the grid's rounding moves the interpolation weights,
and a table with a steep slope turns that into an output error far larger
than one rounding of the output.

The algorithms are those of `templates/interp_*.c.in` (and of CasADi's
``casadi_interpn``/``casadi_nd_boor_eval``): same interval search, weights,
extrapolation and de Boor recursion.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from shooting.codegen.lookup import LinearTable, SplineTable

__all__ = ["evaluate_table"]

Round = Callable[[float], float]


def _low(x: float, grid: list[float], lookup: int) -> int:
    ng = len(grid)
    if lookup == 1:
        i = int((x - grid[0]) * (ng - 1) / (grid[-1] - grid[0])) if np.isfinite(x) else 0
        return min(max(i, 0), ng - 2)
    if lookup == 2:
        if ng < 2 or x < grid[1]:
            return 0
        if x > grid[-1]:
            return ng - 2
        start, stop = 0, ng - 1
        while True:
            pivot = (stop + start) // 2
            if x < grid[pivot]:
                if pivot == stop:
                    return pivot
                stop = pivot
            else:
                if pivot == start:
                    return pivot
                start = pivot
    for i in range(ng - 2):
        if x < grid[i + 1]:
            return i
    return max(ng - 2, 0)


def _interpn(t: LinearTable, x: list[float], r: Round) -> list[float]:
    grid = [r(g) for g in t.grid]
    values = [r(v) for v in t.values]
    m, ndim = t.m, t.ndim
    index, alpha = [], []
    for i in range(ndim):
        g = grid[t.offset[i]:t.offset[i + 1]]
        k = _low(x[i], g, t.lookup[i])
        index.append(k)
        alpha.append(r(r(x[i] - g[k]) / r(g[k + 1] - g[k])))
    res = [0.0] * (ndim * m if t.gradient else m)
    for corner_id in range(2 ** ndim):
        corner = [(corner_id >> i) & 1 for i in range(ndim)]
        c, base, ld, coeff = 1.0, 0, 1, []
        for i in range(ndim):
            coeff.append(c)
            c = r(c * (alpha[i] if corner[i] else r(1 - alpha[i])))
            base += (index[i] + corner[i]) * ld * m
            ld *= t.offset[i + 1] - t.offset[i]
        if not t.gradient:
            for j in range(m):
                res[j] = r(res[j] + r(c * values[base + j]))
            continue
        v = values[base:base + m]
        for i in reversed(range(ndim)):
            for j in range(m):
                term = r(v[j] * coeff[i])
                res[i * m + j] = r(res[i * m + j] + term if corner[i] else res[i * m + j] - term)
                v[j] = r(v[j] * (alpha[i] if corner[i] else r(1 - alpha[i])))
    if t.gradient:
        for i in range(ndim):
            g = grid[t.offset[i]:t.offset[i + 1]]
            delta = r(g[index[i] + 1] - g[index[i]])
            for j in range(m):
                res[i * m + j] = r(res[i * m + j] / delta)
    return res


def _bspline(t: SplineTable, x: list[float], r: Round) -> list[float]:
    knots_all = [r(k) for k in t.knots]
    coeffs = [r(c) for c in t.coeffs]
    ndim, m = t.ndim, t.m
    boors, starts = [], []
    for k in range(ndim):
        knots = knots_all[t.offset[k]:t.offset[k + 1]]
        n_knots, deg = len(knots), t.degree[k]
        n_b = n_knots - deg - 1
        xk = x[k]
        L = _low(xk, knots[deg:n_knots - deg], t.lookup[k])
        start = min(L, n_b - deg - 1)
        boor = [0.0] * (2 * deg + 2)
        if knots[0] <= xk <= knots[-1]:
            if xk == knots[1]:
                boor[:deg + 1] = [1.0] * (deg + 1)
            elif xk == knots[-1]:
                boor[deg] = 1.0
            elif knots[L + deg] == xk and knots[L + deg - 1] < xk:
                boor[deg - 1] = 1.0
            else:
                boor[deg] = 1.0
        kn = knots[start:start + 2 * deg + 2]
        for d in range(1, deg + 1):
            for i in range(2 * deg + 2 - d - 1):
                b, bottom = 0.0, r(kn[i + d] - kn[i])
                if bottom:
                    b = r(r(r(xk - kn[i]) * boor[i]) / bottom)
                bottom = r(kn[i + d + 1] - kn[i + 1])
                if bottom:
                    b = r(b + r(r(r(kn[i + d + 1] - xk) * boor[i + 1]) / bottom))
                boor[i] = b
        boors.append(boor)
        starts.append(start)
    ret = [0.0] * m
    pos = [0] * ndim
    while True:
        w = 1.0
        for k in reversed(range(ndim)):
            w = r(w * boors[k][pos[k]])
        off = (starts[0] + pos[0]) * m + sum((starts[k] + pos[k]) * t.strides[k] for k in range(1, ndim))
        for j in range(m):
            ret[j] = r(ret[j] + r(w * coeffs[off + j]))
        k = 0
        while k < ndim:
            pos[k] += 1
            if pos[k] <= t.degree[k]:
                break
            pos[k] = 0
            k += 1
        if k == ndim:
            return ret


def evaluate_table(table: LinearTable | SplineTable, x: npt.NDArray[np.float64],
                   perturb: Callable[[], float] | None) -> npt.NDArray[np.float64]:
    """The table at every column of `x` (ndim, columns): outputs (m or ndim*m, columns).

    `perturb()` returns a fresh relative perturbation for each operation and
    table entry (None: exact arithmetic).
    """
    def exact(v: float) -> float:
        return v

    def rounded(v: float) -> float:
        return v * (1.0 + perturb()) if perturb is not None else v

    r = exact if perturb is None else rounded
    columns = [list(map(float, x[:, c])) for c in range(x.shape[1])]
    if isinstance(table, LinearTable):
        out = [_interpn(table, col, r) for col in columns]
    else:
        out = [_bspline(table, col, r) for col in columns]
    return np.array(out, dtype=float).T.reshape(-1, x.shape[1])
