"""Runge-Kutta stages on CasADi SX: explicit recursion and unrolled Newton.

Everything here works on symbolic SX vectors and plain float coefficients, so
the same routines step the state (``x``), the variational system
(``[x; vec(S)]``) or anything else with a right-hand side ``rhs(X, tau)``.

Notation (Hairer, Norsett & Wanner, *Solving ODEs I*, II.1, eq. (1.8)): one
step of size h from (t_n, x_n) has stage slopes

    K_i = f(X_i, t_n + c_i h),   X_i = x_n + h * sum_j a_ij K_j,   i = 1..s,

and advances x_{n+1} = x_n + h * sum_i b_i K_i. The stage state is always built
from x_n, never from the previous stage (Erratum E1 in docs/errata.md: the RK4
step note this project started from writes x_3 = x_2 + h/2 f_2 and
x_4 = x_3 + h f_3; right are x_3 = x_n + h/2 f_2 and x_4 = x_n + h f_3).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import casadi as ca
import numpy as np
import numpy.typing as npt

__all__ = ["RhsSizes", "combine", "explicit_stages", "implicit_stages", "stage_states", "newton_matrix"]

Rhs = Callable[[ca.SX, ca.SX], ca.SX]


class RhsSizes:
    """``nx``, ``nu``, ``npar`` of a builder whose ``f`` is a model's right-hand side ``f(x, u, p, t[, z])``."""

    f: ca.Function

    @property
    def nx(self) -> int:
        return int(self.f.size1_in(0))

    @property
    def nu(self) -> int:
        return int(self.f.size1_in(1))

    @property
    def npar(self) -> int:
        return int(self.f.size1_in(2))


def combine(base: ca.SX, h: ca.SX, weights: Sequence[float] | npt.NDArray[np.float64],
            slopes: Sequence[ca.SX]) -> ca.SX:
    """Return ``base + sum_j (h w_j) * slopes[j]``, skipping zero weights.

    The scalar ``h w_j`` is formed first, so each term costs one multiply per
    entry of the slope (``h * (w_j * k_j)`` would cost two), which matters for
    the sensitivity matrices (nx x (nx + nu) per slope).

    Parameters
    ----------
    base : casadi.SX, shape (n, m)
    h : casadi.SX, scalar
    weights : sequence of float, length s
    slopes : sequence of casadi.SX, each shape (n, m)
    """
    acc = base
    for w, k in zip(weights, slopes, strict=True):
        w = float(w)
        if w == 0.0:
            continue
        acc = acc + (h if w == 1.0 else w * h) * k
    return acc


def explicit_stages(rhs: Rhs, A: np.ndarray, c: np.ndarray, x: ca.SX, t: ca.SX, h: ca.SX) -> list[ca.SX]:
    """Stage slopes of an explicit tableau (strictly lower-triangular `A`).

    Parameters
    ----------
    rhs : callable ``(X, tau) -> SX`` of shape (n, 1)
    A : ndarray, shape (s, s)
    c : ndarray, shape (s,)
    x : casadi.SX, shape (n, 1)
        State at the start of the step.
    t, h : casadi.SX, scalars
        Start time and step size.

    Returns
    -------
    list of casadi.SX, each shape (n, 1)
    """
    K: list[ca.SX] = []
    for i in range(len(c)):
        Xi = combine(x, h, A[i, :i], K)
        K.append(rhs(Xi, t + float(c[i]) * h))
    return K


def stage_states(A: np.ndarray, x: ca.SX, h: ca.SX, K: Sequence[ca.SX]) -> list[ca.SX]:
    """``X_i = x + h sum_j a_ij K_j`` for every stage (any tableau)."""
    return [combine(x, h, A[i, :], K) for i in range(A.shape[0])]


def newton_matrix(A: np.ndarray, h: ca.SX, jacobians: Sequence[ca.SX]) -> ca.SX:
    """Jacobian of the stage residual ``r_i(K) = K_i - f(X_i)`` with respect to K.

    ``dr/dK = I - h * blockdiag(J_1..J_s) (A kron I_n)``, with ``J_i = f_x(X_i)``;
    block (i, j) is ``delta_ij I - h a_ij J_i``.

    Parameters
    ----------
    A : ndarray, shape (s, s)
    h : casadi.SX, scalar
    jacobians : sequence of casadi.SX, each shape (n, n)

    Returns
    -------
    casadi.SX, shape (s n, s n)
    """
    s = A.shape[0]
    n = jacobians[0].shape[0]
    rows = []
    for i in range(s):
        blocks = []
        for j in range(s):
            blk = ca.SX(n, n)
            if A[i, j] != 0.0:
                blk = -(h * float(A[i, j])) * jacobians[i]
            if i == j:
                blk = blk + ca.SX.eye(n)
            blocks.append(blk)
        rows.append(ca.horzcat(*blocks))
    return ca.vertcat(*rows)


def implicit_stages(
    rhs_and_jac: Callable[[ca.SX, ca.SX], tuple[ca.SX, ca.SX]],
    A: np.ndarray,
    c: np.ndarray,
    x: ca.SX,
    t: ca.SX,
    h: ca.SX,
    iterations: int,
    simplified: bool = False,
) -> tuple[list[ca.SX], list[ca.SX]]:
    """Stage slopes of an implicit tableau by a fixed number of Newton steps.

    The stage equations r(K) = 0 with r_i = K_i - f(X_i, t + c_i h) are solved
    by full Newton iterations K <- K - (dr/dK)^{-1} r(K), unrolled so that the
    result is one flat SX graph (code-generable, no rootfinder object). The
    predictor is K_i = f(x + c_i h f(x, t), t + c_i h): the slopes at the
    explicit-Euler stage states. Each Newton step then roughly squares the
    relative error.

    Parameters
    ----------
    rhs_and_jac : callable ``(X, tau) -> (f, f_x)``
        Right-hand side and its Jacobian with respect to the state.
    A : ndarray, shape (s, s)
    c : ndarray, shape (s,)
    x : casadi.SX, shape (n, 1)
    t, h : casadi.SX, scalars
    iterations : int
        Number of Newton steps (>= 1).
    simplified : bool, default False
        Simplified Newton: the matrix I - h (A kron f_x(x, t)) is factorised
        once (symbolic QR) and reused by every step, which then costs only
        the stage slopes and two triangular products. 30-40 % fewer
        instructions from about four states up, but linear instead of quadratic convergence: it needs
        more steps, and on strongly nonlinear steps it may not reach rounding.

    Returns
    -------
    K : list of casadi.SX, each shape (n, 1)
        Stage slopes after the last Newton step.
    X : list of casadi.SX, each shape (n, 1)
        Stage states built from the final slopes (where sensitivities by the
        implicit-function theorem evaluate their Jacobians).
    """
    s = len(c)
    n = x.shape[0]
    taus = [t + float(c[i]) * h for i in range(s)]
    # Predictor: the slopes at the explicit-Euler stage states
    # X_i = x + c_i h f(x, t). One f per stage, far cheaper than a Newton step,
    # and it cuts one to two Newton steps on the built-in models.
    f0, J0 = rhs_and_jac(x, t)
    K = [rhs_and_jac(x + (float(c[i]) * h) * f0, taus[i])[0] if c[i] != 0.0 else f0 for i in range(s)]
    if simplified:
        Q, Rm = ca.qr(newton_matrix(A, h, [J0] * s))
    for _ in range(iterations):
        X = stage_states(A, x, h, K)
        if simplified:
            r = ca.vertcat(*[K[i] - rhs_and_jac(X[i], taus[i])[0] for i in range(s)])
            dK = ca.solve(Rm, ca.mtimes(Q.T, r))  # R is upper triangular: back substitution
        else:
            FJ = [rhs_and_jac(X[i], taus[i]) for i in range(s)]
            r = ca.vertcat(*[K[i] - FJ[i][0] for i in range(s)])
            dK = ca.solve(newton_matrix(A, h, [fj[1] for fj in FJ]), r)
        K = [K[i] - dK[i * n:(i + 1) * n] for i in range(s)]
    return K, stage_states(A, x, h, K)
