"""One Runge-Kutta substep of a semi-explicit index-1 DAE, with sensitivities.

The model is x' = f(x, z, u, p, t), 0 = g(x, z, u, p, t) with dg/dz
nonsingular. A Runge-Kutta method applies to it by the direct approach of
Hairer & Wanner (*Solving ODEs II*, VI.1, eq. (1.11)): every stage carries
an algebraic value Z_i that satisfies the algebraic equations at its stage
state,

    K_i = f(X_i, Z_i, t_n + c_i h),   0 = g(X_i, Z_i, t_n + c_i h),
    X_i = x_n + h sum_j a_ij K_j,     x_{n+1} = x_n + h sum_i b_i K_i.

Since Z_i = G(X_i) exactly (G the implicit function of g), x_{n+1} is the
method applied to the reduced ODE x' = f(x, G(x)): the differential states
keep the classical order p of the tableau, for explicit and implicit methods
alike. The algebraic state returned at the end of the step is consistent with
x_{n+1}: for stiffly accurate tableaus (last row of A equal to b, c_s = 1:
Radau IIA, Lobatto IIIA, backward Euler, dopri5's FSAL stage) it is Z_s, whose
stage state is x_{n+1}; for the others it is the solution of
g(x_{n+1}, z) = 0 by Newton from Z_s. Either way z_{n+1} = G(x_{n+1}), so z
has the order of x as well (the direct approach's own extrapolation
z_{n+1} = (1 - b' A^-1 1) z_n + b' A^-1 Z, which a non-stiffly-accurate
method such as Gauss-Legendre would need, keeps only the stage order; the
docs/dae.md gives the measured orders).

Explicit tableaus solve g(X_i, Z_i) = 0 for Z_i at each stage by Newton
(guess: the previous stage's Z; the first stage, from the caller's guess z0,
takes twice the Newton steps). Implicit tableaus solve the stage equations
for (K, Z) together by Newton on

    r_K,i = K_i - f(X_i, Z_i) = 0,   r_g,i = g(X_i, Z_i) = 0,

whose Jacobian is, with J_i = f_x, F_i = f_z, G_i = g_x, H_i = g_z at stage i,

    M = [ I - h blockdiag(J_i)(A kron I)    -blockdiag(F_i) ]
        [ h blockdiag(G_i)(A kron I)         blockdiag(H_i) ],

solved by eliminating Z stage by stage (`DAESubstepBuilder._joint_solve`).

All Newton iterations are unrolled into the SX graph (code-generable; no
rootfinder object). Sensitivities S = dx/d(x_0, u) follow the
implicit-function theorem at the converged stages: differentiating the stage
equations gives

    M [dK; dZ] = [ J_i S_n + [0 f_u,i] ; -(G_i S_n + [0 g_u,i]) ]_i

for implicit tableaus, and for explicit ones, stage by stage,

    dX_i = S_n + h sum_{j<i} a_ij dK_j,   dZ_i = -H_i^-1 (G_i dX_i + [0 g_u,i]),
    dK_i = J_i dX_i + F_i dZ_i + [0 f_u,i],

then S_{n+1} = S_n + h sum_i b_i dK_i. These are the exact derivatives of the
discrete map (with exactly solved stages), not of the DAE.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import casadi as ca
import numpy as np

from shooting.integrate.stages import RhsSizes, combine, newton_matrix

__all__ = ["DAESubstepBuilder", "stiffly_accurate"]

#: One substep's result: x_next, its sensitivity S (or None), the local error
#: estimate of an embedded pair (or None) and the consistent z at x_next.
DAEStep = tuple[ca.SX, ca.SX | None, ca.SX | None, ca.SX]


def stiffly_accurate(A: np.ndarray, b: np.ndarray, c: np.ndarray) -> bool:
    """True when the last stage state is x_{n+1}: ``A[s-1, :] == b`` and ``c[s-1] == 1``."""
    return bool(np.array_equal(A[-1, :], b) and c[-1] == 1.0)


@dataclass(frozen=True)
class DAESubstepBuilder(RhsSizes):
    """Build one substep of a tableau on a DAE model (module docstring).

    Parameters
    ----------
    f : casadi.Function
        ``f(x, u, p, t, z) -> xdot`` (a DAE `Model.f`).
    g : casadi.Function
        ``g(x, u, p, t, z) -> alg`` (`Model.g`).
    A : ndarray, shape (s, s)
    b : ndarray, shape (s,)
    c : ndarray, shape (s,)
    b_hat : ndarray, shape (s,), or None
    explicit : bool
    mode : {"forward", "variational", "ad", "none"}
        "variational" (the tableau applied to [x; vec(S)] with
        S' = (f_x - f_z g_z^-1 g_x) S + [0, f_u - f_z g_z^-1 g_u]) gives, stage
        by stage, the same expressions as "forward" and is built by it.
    newton_iterations : int
        Newton steps of every algebraic solve (explicit tableaus: per stage)
        and of the joint stage equations (implicit tableaus).
    """

    f: ca.Function
    g: ca.Function
    A: np.ndarray
    b: np.ndarray
    c: np.ndarray
    b_hat: np.ndarray | None
    explicit: bool
    mode: str
    newton_iterations: int

    @property
    def nz(self) -> int:
        return int(self.f.size1_in(4))

    @cached_property
    def _jac(self) -> ca.Function:
        """All values and first derivatives at one point: f, g, f_x, f_z, f_u, g_x, g_z, g_u."""
        x, u, p, t, z = (ca.SX.sym(n, self.f.sparsity_in(i)) for i, n in enumerate(("x", "u", "p", "t", "z")))
        f, g = self.f(x, u, p, t, z), self.g(x, u, p, t, z)
        outs = [f, g] + [ca.jacobian(e, v) for e in (f, g) for v in (x, z, u)]
        return ca.Function("dae_jac", [x, z, u, p, t], outs, ["x", "z", "u", "p", "t"],
                           ["f", "g", "f_x", "f_z", "f_u", "g_x", "g_z", "g_u"])

    @cached_property
    def stiffly_accurate(self) -> bool:
        return stiffly_accurate(self.A, self.b, self.c)

    # ------------------------------------------------------------ algebraic
    def solve_z(self, x: ca.SX, z: ca.SX, u: ca.SX, p: ca.SX, t: ca.SX, iterations: int | None = None) -> ca.SX:
        """Newton steps (default ``newton_iterations``) on g(x, z) = 0 from the guess `z`, shape (nz, 1)."""
        for _ in range(self.newton_iterations if iterations is None else iterations):
            z = z - ca.solve(self.g_z(x, z, u, p, t), self.g(x, u, p, t, z))
        return z

    def g_z(self, x: ca.SX, z: ca.SX, u: ca.SX, p: ca.SX, t: ca.SX) -> ca.SX:
        return self._jac(x, z, u, p, t)[6]

    def stage_values(self, x: ca.SX, u: ca.SX, p: ca.SX, t: ca.SX, h: ca.SX,
                     z: ca.SX) -> tuple[list[ca.SX], list[ca.SX]]:
        """The converged stage slopes K_i (each (nx, 1)) and algebraic stage values Z_i (each (nz, 1))."""
        K, Z, _ = self._explicit(x, None, u, p, t, h, z) if self.explicit else self._implicit(x, None, u, p, t, h, z)
        return K, Z

    def z_at_end(self, x1: ca.SX, Z: list[ca.SX], u: ca.SX, p: ca.SX, t: ca.SX, h: ca.SX) -> ca.SX:
        """The algebraic state consistent with the substep's end state `x1` (module docstring), shape (nz, 1)."""
        return Z[-1] if self.stiffly_accurate else self.solve_z(x1, Z[-1], u, p, t + h)

    # ----------------------------------------------------------------- step
    def step(self, x: ca.SX, S: Any, u: ca.SX, p: ca.SX, t: ca.SX, h: ca.SX,
             z: ca.SX) -> DAEStep:
        """One substep from (x, S) at time t with step h and algebraic guess `z`.

        Parameters
        ----------
        x : casadi.SX, shape (nx, 1)
        S : casadi.SX or DM, shape (nx, nx + nu), or None
        u : casadi.SX, shape (nu, 1)
        p : casadi.SX, shape (np, 1)
        t, h : casadi.SX, scalars
        z : casadi.SX, shape (nz, 1)
            Guess of the algebraic state at x (e.g. the previous substep's z).

        Returns
        -------
        x_next : casadi.SX, shape (nx, 1)
        S_next : casadi.SX, shape (nx, nx + nu), or None
        err : casadi.SX, shape (nx, 1), or None
        z_next : casadi.SX, shape (nz, 1)
            The algebraic state consistent with x_next.
        """
        if self.mode == "ad" and S is not None:
            return self._step_ad(x, S, u, p, t, h, z)
        if self.explicit:
            K, Z, dK = self._explicit(x, S, u, p, t, h, z)
        else:
            K, Z, dK = self._implicit(x, S, u, p, t, h, z)
        x1 = combine(x, h, self.b, K)
        S1 = None if dK is None else combine(S, h, self.b, dK)
        z1 = self.z_at_end(x1, Z, u, p, t, h)
        err = None if self.b_hat is None else combine(ca.SX.zeros(self.nx), h, self.b - self.b_hat, K)
        return x1, S1, err, z1

    def _step_ad(self, x: ca.SX, S: Any, u: ca.SX, p: ca.SX, t: ca.SX, h: ca.SX, z: ca.SX) -> DAEStep:
        """``"ad"``: CasADi's jacobian of the substep map (x, u) -> x_next, on fresh symbols, chained into S.

        It differentiates through the unrolled Newton iterations; at converged
        iterates (g at rounding) the derivative of a Newton step is
        -g_z^-1 g_x, so this agrees with the implicit-function theorem of
        "forward" to rounding.
        """
        nx = self.nx
        xs, us = ca.SX.sym("xs", nx), ca.SX.sym("us", self.nu)
        x1, _, err, z1 = self.step(xs, None, us, p, t, h, z)
        J = ca.jacobian(x1, ca.vertcat(xs, us))
        outs = ca.substitute([x1, J, z1] + ([err] if err is not None else []), [xs, us], [x, u])
        S1 = ca.mtimes(outs[1][:, :nx], S) + ca.horzcat(ca.SX(nx, nx), outs[1][:, nx:])
        return outs[0], S1, outs[3] if err is not None else None, outs[2]

    def _explicit(self, x: ca.SX, S: Any, u: ca.SX, p: ca.SX, t: ca.SX, h: ca.SX,
                  z: ca.SX) -> tuple[list[ca.SX], list[ca.SX], list[ca.SX] | None]:
        sens = self.mode in ("forward", "variational") and S is not None
        K: list[ca.SX] = []
        Z: list[ca.SX] = []
        dK: list[ca.SX] = []
        for i in range(len(self.c)):
            tau = t + float(self.c[i]) * h
            Xi = combine(x, h, self.A[i, :i], K)
            # The first solve starts from the caller's guess (farther off than a
            # neighbouring stage's Z): twice the Newton steps.
            Zi = self.solve_z(Xi, Z[-1] if Z else z, u, p, tau, None if Z else 2 * self.newton_iterations)
            fi, _, Jx, Jz, Ju, Gx, Gz, Gu = self._jac(Xi, Zi, u, p, tau)
            K.append(fi)
            Z.append(Zi)
            if sens:
                dXi = combine(S, h, self.A[i, :i], dK)
                dZi = -ca.solve(Gz, ca.mtimes(Gx, dXi) + ca.horzcat(ca.SX(self.nz, self.nx), Gu))
                dK.append(ca.mtimes(Jx, dXi) + ca.mtimes(Jz, dZi) + ca.horzcat(ca.SX(self.nx, self.nx), Ju))
        return K, Z, dK if sens else None

    def _implicit(self, x: ca.SX, S: Any, u: ca.SX, p: ca.SX, t: ca.SX, h: ca.SX,
                  z: ca.SX) -> tuple[list[ca.SX], list[ca.SX], list[ca.SX] | None]:
        s, nx, nz = len(self.c), self.nx, self.nz
        taus = [t + float(self.c[i]) * h for i in range(s)]
        # Predictor: z consistent at x_n, and the slopes at the explicit-Euler
        # stage states x_n + c_i h f(x_n, z_n) (as for ODEs in stages.py).
        z_n = self.solve_z(x, z, u, p, t, 2 * self.newton_iterations)  # from the caller's guess
        f0 = self._jac(x, z_n, u, p, t)[0]
        K = [self._jac(x + (float(self.c[i]) * h) * f0, z_n, u, p, taus[i])[0] if self.c[i] != 0.0 else f0
             for i in range(s)]
        Z = [z_n] * s
        for _ in range(self.newton_iterations):
            X = [combine(x, h, self.A[i, :], K) for i in range(s)]
            vals = [self._jac(X[i], Z[i], u, p, taus[i]) for i in range(s)]
            dK, dZ = self._joint_solve(h, vals, [K[i] - vals[i][0] for i in range(s)], [v[1] for v in vals])
            K = [K[i] - dK[i] for i in range(s)]
            Z = [Z[i] - dZ[i] for i in range(s)]
        if self.mode not in ("forward", "variational") or S is None:
            return K, Z, None
        X = [combine(x, h, self.A[i, :], K) for i in range(s)]
        vals = [self._jac(X[i], Z[i], u, p, taus[i]) for i in range(s)]
        rhs_K = [ca.mtimes(v[2], S) + ca.horzcat(ca.SX(nx, nx), v[4]) for v in vals]
        rhs_g = [-(ca.mtimes(v[5], S) + ca.horzcat(ca.SX(nz, nx), v[7])) for v in vals]
        dK, _ = self._joint_solve(h, vals, rhs_K, rhs_g)
        return K, Z, dK

    def _joint_solve(self, h: ca.SX, vals: list[Any], r_K: list[ca.SX],
                     r_g: list[ca.SX]) -> tuple[list[ca.SX], list[ca.SX]]:
        """Solve M [dK; dZ] = [r_K; r_g] with the joint matrix M of the module docstring.

        The algebraic blocks are block diagonal (H_i = g_z at stage i), so dZ is
        eliminated stage by stage (Schur complement):

            dZ_i = H_i^-1 (r_g,i - h G_i sum_j a_ij dK_j),
            (I - h blockdiag(J_i - F_i H_i^-1 G_i)(A kron I)) dK = r_K + [F_i H_i^-1 r_g,i]_i,

        i.e. the ODE's Newton matrix with the reduced Jacobians: an s nx system
        and s small nz systems instead of one of size s (nx + nz).
        """
        s = len(self.c)
        Hinv_G = [ca.solve(v[6], v[5]) for v in vals]                # H_i^-1 G_i, (nz, nx)
        Hinv_r = [ca.solve(v[6], r) for v, r in zip(vals, r_g, strict=True)]
        reduced = [v[2] - ca.mtimes(v[3], Hg) for v, Hg in zip(vals, Hinv_G, strict=True)]
        rhs = ca.vertcat(*[r_K[i] + ca.mtimes(vals[i][3], Hinv_r[i]) for i in range(s)])
        d = ca.solve(newton_matrix(self.A, h, reduced), rhs)
        nx = self.nx
        dK = [d[i * nx:(i + 1) * nx, :] for i in range(s)]
        dZ = [Hinv_r[i] - ca.mtimes(Hinv_G[i], combine(ca.SX.zeros(dK[0].shape), h, self.A[i, :], dK))
              for i in range(s)]
        return dK, dZ
