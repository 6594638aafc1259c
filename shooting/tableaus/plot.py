"""A picture of a method's stability region ``{z : |R(z)| <= 1}`` in the complex plane."""

from __future__ import annotations

import io
import math
import os
from fractions import Fraction
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting._files import write_atomic

__all__ = ["StabilityFunction", "plot_stability_region"]


class StabilityFunction(Protocol):
    """What the plot reads from a tableau (a `ButcherTableau` has it all)."""

    @property
    def name(self) -> str: ...

    @property
    def order(self) -> Any: ...

    @property
    def stages(self) -> int: ...

    def stability_function(self, z: Any) -> Any:
        """``R(z)`` for an array of complex ``z``."""
        ...

    def stability_polynomials(self) -> tuple[tuple[Fraction, ...], tuple[Fraction, ...]]:
        """``(P, Q)`` with ``R = P / Q``."""
        ...


def _stable_mask(tableau: StabilityFunction, re: npt.NDArray[np.float64],
                 im: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
    with np.errstate(over="ignore", invalid="ignore"):
        r = np.abs(tableau.stability_function(re[None, :] + 1j * im[:, None]))
    return np.nan_to_num(r, nan=np.inf) <= 1.0


def _auto_window(tableau: StabilityFunction) -> tuple[float, float, float, float]:
    """Window (re_min, re_max, im_min, im_max) showing the interesting part.

    Starts from a square around 0 large enough for all poles and zeros of R.
    If ``|R(inf)| > 1`` (explicit methods) the stable set is bounded, if
    ``|R(inf)| < 1`` (e.g. Radau IIA) the unstable set is: the square is
    doubled until that bounded set no longer touches the border, then zoomed
    to its bounding box (with the origin and some margin).  ``|R(inf)| = 1``
    (Gauss) keeps the square.
    """
    P, Q = tableau.stability_polynomials()
    roots: list[complex] = []
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
    tableau: StabilityFunction,
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
    tableau : StabilityFunction
        A `ButcherTableau`.
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
    resolution = _validate.integer(resolution, "resolution", minimum=20)
    if window is None:
        window = _auto_window(tableau)
    else:
        given = tuple(float(v) for v in window)
        if len(given) != 4 or not all(math.isfinite(v) for v in given) or not (
            given[0] < given[1] and given[2] < given[3]
        ):
            raise ValueError(
                f"window must be (re_min, re_max, im_min, im_max) with finite, "
                f"increasing bounds, got {window!r}"
            )
        window = (given[0], given[1], given[2], given[3])
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
