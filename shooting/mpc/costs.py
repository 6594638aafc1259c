"""General stage and terminal costs in the RTI and the C: nonlinear least squares, exact Hessians made convex.

A ``stage_cost``/``terminal_cost`` enters each real-time iteration's QP as a
quadratic model at the guess z = (xb, ub) with the exact gradient g:

* `LeastSquares` (acados' NONLINEAR_LS): c = r(z)' W r(z) for a residual r
  (an output minus its reference) and a positive semidefinite W; the model
  uses the Gauss-Newton Hessian 2 J' W J (J = dr/dz), positive semidefinite
  by construction, and g = 2 J' W r.
* any other cost: its exact Hessian H = d2c/dz2.

The stage's whole Hessian block M = [Hxx Hux'; Hux Huu] (tracking weights
included) must be positive definite for the QP to be convex. `convexify`
applies one rule, the same in numpy and in the C: with tau = 1e-9 (1 +
max|M|) (float: 1e-5), M is kept when a Cholesky factorisation of M + tau I
succeeds; else its eigenvalues below tau are raised to tau, M~ = V max(L, tau) V'
(M = V L V'): the projection onto the positive definite matrices (acados'
"PROJECT" regularisation; Nocedal and Wright, sec. 3.4, "modifying the
eigenvalues"). It changes M only along its directions of negative curvature,
by the least amount in the Frobenius norm; a shift M + delta I (the rule
before) changes every direction, and on the cart-pole's pole-tip cost made
the closed loop 9 % worse than IPOPT's where the projection is within 1 %.
The C computes the eigenvalues by cyclic Jacobi rotations (the numpy twin by
LAPACK: equal to rounding). The QP's gradient is corrected so that the model's
gradient at the guess stays the cost's: q = g - (M~ - M_tracking) zb. A
converged SQP iterate is therefore still a KKT point of the OCP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.options import CONTROLLER_HESSIANS, Hessian

__all__ = ["CONVEXIFY_TAU", "LeastSquares", "automatic_hessian", "convexify", "definite", "hessians", "least_squares",
           "mirror", "resolve_hessian"]

FloatArray = npt.NDArray[np.float64]

#: The relative shift below which a Hessian block counts as positive definite, and the smallest eigenvalue the
#: projection leaves (relative to 1 + max|M|).
CONVEXIFY_TAU = {"double": 1e-9, "float": 1e-5}


class LeastSquares:
    """A cost r' W r of a residual function: ``stage_cost=least_squares(r, W)`` (also for ``terminal_cost``).

    Calling it gives the cost (IPOPT's OCP uses that); the RTI and the C
    recognise it and use the Gauss-Newton Hessian 2 J' W J.

    Parameters
    ----------
    residual : callable ``(x, u, p) -> SX column`` (stage) or ``(x, p) -> SX column`` (terminal)
    weight : array_like, shape (ny, ny) or (ny,) (a diagonal)
        Symmetric positive semidefinite.
    """

    def __init__(self, residual: Callable[..., Any], weight: npt.ArrayLike) -> None:
        if not callable(residual):
            raise ValueError(f"least_squares needs a callable residual (x, u, p) -> SX, got "
                             f"{type(residual).__name__}")
        W = _validate.array(weight, "least_squares weight")
        W = np.diag(W) if W.ndim == 1 else W
        if W.ndim != 2 or W.shape[0] != W.shape[1]:
            raise ValueError(f"least_squares weight must be (ny, ny) or (ny,), got shape {W.shape}")
        if not np.allclose(W, W.T, rtol=1e-12, atol=0.0):
            raise ValueError("least_squares weight must be symmetric")
        if np.linalg.eigvalsh(W).min() < -1e-12 * max(1.0, float(np.abs(W).max())):
            raise ValueError(f"least_squares weight must be positive semidefinite (eigenvalues "
                             f"{_validate.vector_text(np.linalg.eigvalsh(W))})")
        self.residual = residual
        self.weight = W
        self.__name__ = f"least_squares({getattr(residual, '__name__', 'residual')})"

    def value(self, *args: Any) -> ca.SX:
        """The residual r(args) as a column, checked against the weight's size."""
        r = ca.SX(self.residual(*args))
        if r.size2() != 1 or r.size1() != self.weight.shape[0]:
            raise ValueError(f"{self.__name__} returns shape {r.shape}, but its weight is "
                             f"{self.weight.shape}: the residual must be a column of {self.weight.shape[0]}")
        return r

    def __call__(self, *args: Any) -> ca.SX:
        r = self.value(*args)
        return ca.bilin(ca.DM(self.weight), r, r)


def least_squares(residual: Callable[..., Any], weight: npt.ArrayLike) -> LeastSquares:
    """A nonlinear least-squares cost r' W r (see `LeastSquares`).

    Parameters
    ----------
    residual : callable
        ``residual(x, u, p)`` (stage) or ``residual(x, p)`` (terminal) returning the residual
        r, shape (nr,), as CasADi SX.
    weight : array_like
        W, shape (nr,) (a diagonal) or (nr, nr), symmetric positive semidefinite.

    Examples
    --------
    ``shooting.MultipleShootingOCP(..., stage_cost=least_squares(lambda x, u, p: tip(x) - 1.0, [10.0]))``

    Returns
    -------
    LeastSquares
    """
    return LeastSquares(residual, weight)


def expansion(cost: Callable[..., Any], z: ca.SX, *args: ca.SX) -> tuple[ca.SX, ca.SX]:
    """(Hessian, gradient) of `cost` in `z` for the QP: Gauss-Newton for `LeastSquares`, else exact."""
    if isinstance(cost, LeastSquares):
        r = cost.value(*args)
        J = ca.jacobian(r, z)
        W = ca.DM(cost.weight)
        return 2 * ca.mtimes([J.T, W, J]), 2 * ca.mtimes([J.T, W, r])
    c = ca.SX(cost(*args))
    H, g = ca.hessian(c, z)
    return H, g


def automatic_hessian(stage_cost: Callable[..., Any] | None, terminal_cost: Callable[..., Any] | None) -> Hessian:
    """What ``hessian="auto"`` chooses for an OCP with these extra costs: "exact" where one of them is not a
    `LeastSquares` cost, else "gauss-newton".

    Gauss-Newton's Hessian is the cost's alone: a tracking or least-squares cost has curvature in every weighted
    direction, and near a solution whose residuals and multipliers are small it is the Lagrangian's up to
    them. A general cost (an economic one, -P of a batch reactor: linear in the states) may have none along the
    directions the dynamics bend, and Gauss-Newton's QP then steps to the bounds and back (do-mpc's batch
    reactor: its line search failed; with the Lagrangian's Hessian, 11 iterations to IPOPT's optimum).

    Parameters
    ----------
    stage_cost, terminal_cost : callable or None
        The OCP's extra costs (`QuadraticCost.stage_cost`, ``terminal_cost``).

    Returns
    -------
    {"exact", "gauss-newton"}
    """
    general = [c for c in (stage_cost, terminal_cost) if c is not None and not isinstance(c, LeastSquares)]
    return "exact" if general else "gauss-newton"


def hessians(hessian: str, stage_cost: Callable[..., Any] | None, terminal_cost: Callable[..., Any] | None,
             real: str = "double", curved_rows: bool = False) -> tuple[Hessian, Hessian]:
    """The Hessians `hessian` (one of `shooting.options.CONTROLLER_HESSIANS`, validated) gives the real-time
    iterations' QPs and the SQP's (a cold start's, `solve`'s).

    "gauss-newton" and "exact" give both that one. "auto" gives the real-time iterations `automatic_hessian`'s
    choice and the SQP the Lagrangian's ("exact"): from a far start Gauss-Newton converges at best linearly, with a
    rate above 1 where the multipliers are large (a swing-up's, a fall's), and its line search then crawls or
    stalls next to the solution (measured, Python, far starts held at the state: the cart-pole 18 of 22 converged
    against 22 of 22 exact, the double pendulum on a cart 5 of 12 against 12, two_link_arm's median 46 iterations
    against 15); a real-time iteration starts next to the last sample's solution, where Gauss-Newton's QP is
    nearly the exact one's at a fraction of its cost. In single precision (`real` "float": an export's) "auto"
    leaves the SQP the real-time iterations' Hessian: its exact Hessian is convexified stage by stage (the Riccati
    pass's shifted QP is too ill-conditioned for float), which converged no more often (float C, far starts: the
    cart-pole 19 of 22 against 20, the double pendulum 6 of 12 against 5), and it costs a board 1.3 to 2.4 times
    the flash and RAM (the second-order step, every stage's Hessian blocks; the cart-pole at N = 200: 88 KiB of
    RAM against 68). Except where the OCP has `curved_rows` (path or terminal constraints that are not linear in
    x and u): their multipliers reach the penalty's weight (a soft row's slack_l1, 1e3 to 1e4), Gauss-Newton
    leaves their curvature times that weight out, and its iterations then circle the solution at a linear rate
    near 1 (a gantry crane whose sway row is soft, float C from its stored guess: 118 SQP iterations, past the
    budget of 100, against 12 with the exact Hessian), so the SQP takes the exact Hessian in float too.

    Returns
    -------
    (rti, sqp) : each "exact" or "gauss-newton"
    """
    choice = _validate.choice(hessian, CONTROLLER_HESSIANS, "hessian")
    if choice == "auto":
        rti = automatic_hessian(stage_cost, terminal_cost)
        return rti, rti if real == "float" and not curved_rows else "exact"
    return choice, choice


def resolve_hessian(hessian: str, stage_cost: Callable[..., Any] | None,
                    terminal_cost: Callable[..., Any] | None) -> Hessian:
    """`hessian` validated (one of `shooting.options.CONTROLLER_HESSIANS`), "auto" resolved by `automatic_hessian`:
    the real-time iterations' Hessian (`hessians`' first)."""
    return hessians(hessian, stage_cost, terminal_cost)[0]


def convexify(M: FloatArray, real: str = "double") -> tuple[FloatArray, bool]:
    """The rule of the module docstring: (M~, changed); M itself when it is positive definite."""
    tau = _tau(M, real)
    n = M.shape[0]
    if _cholesky_ok(M + tau * np.eye(n)):
        return M, False
    if not np.isfinite(M).all():
        raise ValueError("a stage Hessian of the cost is not finite at the guess (check the cost there)")
    lam, V = np.linalg.eigh(0.5 * (M + M.T))
    return (V * np.maximum(lam, tau)) @ V.T, True


def definite(M: FloatArray, real: str = "double") -> bool:
    """Whether M's smallest eigenvalue exceeds `convexify`'s tau: M - tau I has a Cholesky factor (the C's test)."""
    return _cholesky_ok(M - _tau(M, real) * np.eye(M.shape[0]))


def mirror(S: FloatArray, scale: float, real: str = "double") -> FloatArray:
    """S with its eigenvalues replaced by their moduli, at least CONVEXIFY_TAU (1 + scale) (acados' "MIRROR")."""
    tau = CONVEXIFY_TAU["float" if real == "float" else "double"] * (1.0 + scale)
    lam, V = np.linalg.eigh(0.5 * (S + S.T))
    return (V * np.maximum(np.abs(lam), tau)) @ V.T


def _tau(M: FloatArray, real: str) -> float:
    """The eigenvalue floor of `convexify`: CONVEXIFY_TAU (1 + max|M|)."""
    return CONVEXIFY_TAU["float" if real == "float" else "double"] * (1.0 + float(np.abs(M).max(initial=0.0)))


def _cholesky_ok(M: FloatArray) -> bool:
    if not np.isfinite(M).all():
        return False
    try:
        np.linalg.cholesky(M)
    except np.linalg.LinAlgError:
        return False
    return True
