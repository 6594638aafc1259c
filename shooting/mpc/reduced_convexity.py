"""The exact Hessian kept wherever the reduced Hessian is positive definite: a Riccati pass and a telescoping shift.

With ``hessian="exact"`` a stage's block of the Lagrangian's Hessian,
H_k = M_k + W_k (the cost's block and the constraints' curvature at the
multipliers), is often indefinite: the cart-pole's swing-up has multipliers
of 1e4 against an input weight of 0.01. What Newton's method needs is less:
that the QP be convex on the affine set its dynamics leave, i.e. that its
reduced Hessian be positive definite. The classical Riccati recursion, from
P_N = Q_N,

    T_k = H_k + G_k' P_{k+1} G_k   (G_k = [A_k  B_k]),   P_k = T_xx - T_xu T_uu^-1 T_ux,

says when: exactly when every T_uu (= R_k + B_k' P_{k+1} B_k) is positive
definite; the P_k themselves may be indefinite. Each stage's T_uu is made so
(Verschueren, Zanon, Quirynen and Diehl, SIAM J. Optim. 27, 2017: the
sparsity-preserving convexification, by changes of R_k alone):

* the inputs at a bound in the QP the multipliers came from (lam > t on a
  side) gain ACTIVE_STIFFNESS (1 + max|T_k|) on their diagonal. While the
  active set stays, the QP fixes them, so the change moves neither its
  solution nor the Newton step (only their bounds' multipliers), and the
  recursion's P_k is then close to the active set's, in which they are fixed. The hard state bounds at a bound
  in that QP gain STATE_STIFFNESS (1 + max|T_k|) on their state's diagonal likewise (stages 1..N-1): left free in
  the recursion, the cart-pole held at its cart bound had T_uu mirrored upstream (its shift 8e7 times the blocks)
  and its SQP crept to the optimum at a linear rate of 0.98 (100 iterations; Gauss-Newton's: 19; stiffened: 12).
  Mirroring them instead (the least change) left them free in the recursion:
  its P_k took the curvature of directions the solution cannot move in, and
  two_link_arm's SQP cycled next to IPOPT's optimum. Stiffened: 5 iterations
  from there, against Gauss-Newton's 17;
* the free inputs' block, where not positive definite, has its eigenvalues
  mirrored (|lambda|, at least `convexify`'s tau relative to the block: acados' "MIRROR"; relative to all of T_k
  it raised the single-track's force direction, weighted 1e-10, 1e4-fold: no convergence in 100 iterations,
  against 22), and so
  has all of T_uu should the two together still not be.

Mirroring leaves the recursion's P_k to the negative curvature downstream.
Where that compounds along the horizon the shift below grows geometrically
(do-mpc's double pendulum's swing-up from hanging, an energy cost, N = 100:
every T_uu mirrored, Phi up to 1e23 times the blocks), the shifted QP's data
cancel to rounding, its multipliers come out as powers of two up to 3e8, and
the SQP stalled at cost 195.9 against IPOPT's 90.7. So where the largest
|Phi_k| exceeds SHIFT_LIMIT (1 + the largest entry of the blocks and W_k)
(a million: the shifted QP's data have lost 6 of double's 16 digits to
the cancellation), the iteration's QP is Gauss-Newton's instead
(`convexify_by_riccati` returns None: the stages' cost blocks projected as
`convexify` does, without W_k; the terminal block stays the exact one): a
convex QP whose step descends; near a strict local minimum the exact Hessian
comes back, with Newton's local convergence. The pendulum then converges to
IPOPT's optimum (first input 6e-10 of its range off) in 342 iterations, the
last ones exact; Gauss-Newton alone creeps there linearly, in 446. The cart-pole's far starts mirror
with shifts up to 2e6 times the blocks and keep the mirrored QP below the
limit (falling back at every mirror instead left one of 22 far starts at the
iteration limit, 137 iterations with the mirror).

The QP solvers (`shooting.qp`) run the square-root recursion, which needs
every P_k positive semidefinite as well. The QP is therefore handed in an
equivalent form: with Phi_k = P_k - P~_k, P~_k the projection of P_k
(eigenvalues raised to tau; Phi_k = 0 where P_k is definite) and Phi_N = 0,
stage k's objective gains

    1/2 y_k' Phi_{k+1} y_k - 1/2 x_k' Phi_k x_k,   y_k = A_k x_k + B_k u_k + b_k,

i.e. G' Phi_{k+1} G - [Phi_k 0; 0 0] on its block and G' Phi_{k+1} b_k on its
gradient. On the dynamics (y_k = x_{k+1}) the terms telescope to the constant
-1/2 x_0' Phi_0 x_0: the QP's solution is the same, its square-root recursion
meets T~_k = T_k - [Phi_k 0; 0 0], whose Schur complement is P~_k (positive
definite) and whose T_uu is T_k's; only the dynamics' multipliers move,
pi~_k = pi_k - Phi_{k+1} x_{k+1} (`true_multipliers` gives pi back). The added
terms' value off the dynamics is `telescoped` (the SQP's predicted decrease
takes it off). The C runs the same pass (``convexify_by_riccati`` in mpc.c.in).
"""

from __future__ import annotations

import copy

import numpy as np
import numpy.typing as npt

from shooting.mpc.costs import convexify, definite, mirror
from shooting.qp import StageQP

__all__ = ["ACTIVE_STIFFNESS", "SHIFT_LIMIT", "STATE_STIFFNESS", "convexify_by_riccati", "telescoped",
           "true_multipliers", "unshifted"]

FloatArray = npt.NDArray[np.float64]

#: The active inputs' diagonal gains ACTIVE_STIFFNESS (1 + max|T_k|): see the module docstring.
ACTIVE_STIFFNESS = 100.0
#: The largest shift Phi_k, relative to 1 + the largest entry of the QP's blocks and W_k, the exact Hessian's QP
#: keeps; beyond it the iteration's QP is Gauss-Newton's (see the module docstring). The double pendulum's
#: swing-up converged in 343 +- 1 iterations for limits from 3e5 to 3e6, at none in 1000 for 1e7, in 574 for 1e8;
#: the cart-pole's far starts mirror with shifts up to 2e6 (seeds 7 and 23: all 44 converge at 1e6, 588 and 561
#: iterations in all against 565 and 533 without the limit).
SHIFT_LIMIT = 1e6
#: The hard state bounds at a bound gain STATE_STIFFNESS (1 + max|T_k|) on their state's diagonal (see the module
#: docstring): the cart-pole held at its cart bound converged in 12 iterations with 1 to 10 (100: the interior point
#: read the stiffened QP's multipliers as diverging; 0.1: still mirrored, 100 iterations at a linear rate of 0.98).
STATE_STIFFNESS = 1.0


def convexify_by_riccati(qp: StageQP, W: FloatArray, active: npt.NDArray[np.bool_], xb: FloatArray,
                         ub: FloatArray, active_x: npt.NDArray[np.bool_] | None = None) -> FloatArray | None:
    """Add the curvature W_k to the QP's stage blocks, mirror where T_uu is not definite, and shift the QP by the
    telescoping terms of the module docstring, in place; or, where the shift would exceed `SHIFT_LIMIT` times the
    blocks, leave the QP unchanged and return None (the caller makes its stages Gauss-Newton's).

    Parameters
    ----------
    qp : StageQP
        Its stage blocks (Q, S, R) the cost's (and the rate penalty's), Q_N final (positive definite).
    W : ndarray, shape (N, nx + nu, nx + nu)
        The constraints' curvature W_k in the model's (x, u).
    active : ndarray of bool, shape (N, nu)
        The inputs at a bound in the QP the multipliers came from (lam > t on a side).
    xb : ndarray, shape (N+1, nx)
    ub : ndarray, shape (N, nu)
        The linearisation point: each change D of a block takes D zb off the gradients (the model's gradient at
        the guess stays the Lagrangian's); the shift is exact and changes the gradients by G' Phi b instead.
    active_x : ndarray of bool, shape (N, nbx), optional
        The hard state bounds at a bound in that QP (row k - 1: x_k), stiffened by `STATE_STIFFNESS` (stages
        1..N-1; see the module docstring).

    Returns
    -------
    ndarray, shape (N+1, nxq, nxq), or None
        Phi_k (Phi_N = 0) in the QP's states; None where the shift is too large (the QP untouched).
    """
    assert qp.S is not None and qp.q is not None and qp.r is not None
    N, n = W.shape[0], W.shape[1]
    nxq, nu = qp.A.shape[1], qp.B.shape[2]
    nx = n - nu
    model = np.r_[0:nx, nxq:nxq + nu]  # the model's (x, u) within the QP's (x~, u)
    size = max(float(np.abs(v).max(initial=0.0)) for v in (qp.Q, qp.S, qp.R, qp.Q_N, W))
    phi = np.zeros((N + 1, nxq, nxq))
    changes = np.array(W, dtype=float)  # D_k: W_k and the inputs' changes (written once the pass is through)
    P = np.array(qp.Q_N, dtype=float)
    for k in range(N - 1, -1, -1):
        D = changes[k]
        G = np.hstack([qp.A[k], qp.B[k]])
        T = np.block([[qp.Q[k], qp.S[k].T], [qp.S[k], qp.R[k]]]) + G.T @ P @ G
        T[np.ix_(model, model)] += D
        scale = float(np.abs(T).max())
        if active_x is not None and k > 0:  # the hard state bounds at a bound: stiffened (as the inputs below)
            for j in np.flatnonzero(active_x[k - 1]):
                i = int(qp.idxbx[j])
                D[i, i] += STATE_STIFFNESS * (1.0 + scale)
                T[i, i] += STATE_STIFFNESS * (1.0 + scale)
        for part in ([j for j in range(nu) if not active[k, j]], [j for j in range(nu) if active[k, j]], None):
            rows = list(range(nu)) if part is None else part
            if not rows:
                continue
            block = T[nxq:, nxq:][np.ix_(rows, rows)]
            if part is not None and active[k, rows[0]]:  # the active inputs: stiffened
                change = ACTIVE_STIFFNESS * (1.0 + scale) * np.eye(len(rows))
            elif not definite(block):  # the free inputs' block, then (rarely) all of T_uu: mirrored
                change = mirror(block, float(np.abs(block).max())) - block
            else:
                continue
            D[np.ix_([nx + j for j in rows], [nx + j for j in rows])] += change
            T[np.ix_([nxq + j for j in rows], [nxq + j for j in rows])] += change
        # P_k = T_xx - T_xu T_uu^-1 T_ux through the Cholesky factor L of T_uu (Y = L^-1 T_ux), as the C
        L = np.linalg.cholesky(T[nxq:, nxq:])
        Y = np.linalg.solve(L, T[nxq:, :nxq])
        P = T[:nxq, :nxq] - Y.T @ Y
        P = 0.5 * (P + P.T)
        projected, changed = convexify(P)
        if changed:
            phi[k] = P - projected
    if float(np.abs(phi).max()) > SHIFT_LIMIT * (1.0 + size):
        return None
    for k, D in enumerate(changes):
        qp.Q[k][:nx, :nx] += D[:nx, :nx]
        qp.S[k][:, :nx] += D[nx:, :nx]
        qp.R[k] += D[nx:, nx:]
        shift = D @ np.concatenate([xb[k], ub[k]])
        qp.q[k][:nx] -= shift[:nx]
        qp.r[k] -= shift[nx:]
    _shift(qp, qp.Q, qp.S, qp.R, qp.q, qp.r, phi, 1.0)  # (after the pass: its recursion is the unshifted QP's)
    return phi


def _shift(qp: StageQP, Q: FloatArray, S: FloatArray, R: FloatArray, q: FloatArray, r: FloatArray,
           phi: FloatArray, sign: float) -> None:
    """Add (sign 1) or take off (-1) the telescoping terms in Q, S, R, q, r (the QP's or copies), in place."""
    for k in range(qp.A.shape[0]):
        A, B, b, Phi = qp.A[k], qp.B[k], qp.b[k], phi[k + 1]
        Q[k] += sign * (A.T @ Phi @ A - phi[k])
        S[k] += sign * (B.T @ Phi @ A)
        R[k] += sign * (B.T @ Phi @ B)
        q[k] += sign * (A.T @ Phi @ b)
        r[k] += sign * (B.T @ Phi @ b)


def telescoped(qp: StageQP, phi: FloatArray, x: FloatArray, u: FloatArray) -> float:
    """The shift's value at (x (N+1, nxq), u (N, nu)): sum_k 1/2 y_k' Phi_{k+1} y_k - sum_k 1/2 x_k' Phi_k x_k."""
    y = np.einsum("kij,kj->ki", qp.A, x[:-1]) + np.einsum("kij,kj->ki", qp.B, u) + qp.b
    return float(0.5 * np.einsum("ki,kij,kj->", y, phi[1:], y) - 0.5 * np.einsum("ki,kij,kj->", x, phi, x))


def true_multipliers(pi: FloatArray, phi: FloatArray, x: FloatArray) -> FloatArray:
    """The dynamics' multipliers of the unshifted QP: pi_k = pi~_k + Phi_{k+1} x_{k+1} (pi (N, nxq), x (N+1, nxq))."""
    return pi + np.einsum("kij,kj->ki", phi[1:], x[1:])


def unshifted(qp: StageQP, phi: FloatArray) -> StageQP:
    """A copy of the shifted QP without the shift (its blocks and gradients as the pass left them before it): the
    Lagrangian's model, whose H dz the SQP's stationarity test reads (`shooting.qp.stage_qp_stationarity`)."""
    out = copy.copy(qp)
    assert qp.S is not None and qp.q is not None and qp.r is not None
    Q, S, R, q, r = (np.array(v, dtype=float) for v in (qp.Q, qp.S, qp.R, qp.q, qp.r))
    _shift(qp, Q, S, R, q, r, phi, -1.0)
    out.Q, out.S, out.R, out.q, out.r = Q, S, R, q, r
    return out
