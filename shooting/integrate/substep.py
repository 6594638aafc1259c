"""One Runge-Kutta substep with sensitivities, as SX expressions.

A substep maps (x_n, S_n) to (x_{n+1}, S_{n+1}) where S = d x / d(x_0, u) =
[A B] (shape nx x (nx+nu)) is carried along so that substeps chain by the
chain rule. Four ways to obtain S_{n+1} (all exact derivatives of the same
discrete map; they agree to rounding):

- ``forward``: stage-wise forward propagation (the RK4 and Euler step notes'
  recursion, generalised to any tableau, with their typos corrected: Errata
  E1, E2 and E4 in docs/errata.md; the Jacobians are taken at the stage state
  before the update). Differentiating K_i = f(X_i), X_i = x_n + h sum_j a_ij K_j
  with respect to w = (x_0, u) gives

      dK_i = J_i (S_n + h sum_j a_ij dK_j) + [0  F_i],   J_i = f_x(X_i), F_i = f_u(X_i),
      S_{n+1} = S_n + h sum_i b_i dK_i.

  For explicit tableaus this is a forward recursion over the stages. For
  implicit ones it is the linear system (implicit-function theorem)

      (I - h blockdiag(J_i)(A kron I)) dK = [J_i S_n + [0 F_i]]_i,

  whose matrix is the Newton matrix at the converged stages.
- ``variational``: the tableau applied to the augmented state z = [x; vec(S)]
  with z' = [f; f_x S + [0 f_u]] ("method 1" of the sensitivity-equation
  note; Errata E6 and E7 in docs/errata.md: its z_{n+1} = z_n + h/2 (...) is a
  typo for h/6, and its k_2, k_3 evaluate f_x at x_n + k/2 where
  x_n + h k/2 is meant). The S-part of the augmented stage
  equations is linear, so for implicit tableaus it is solved exactly with the
  same matrix as above.
- ``ad``: CasADi's algorithmic differentiation. Explicit tableaus: jacobian
  of the substep map. Implicit: the stage residual r(K, x, u) is
  differentiated by AD and combined by the implicit-function theorem
  dK/dw = -r_K^{-1} r_w (differentiating through the unrolled Newton
  iterations instead would only be as accurate as the second-to-last iterate).
- ``none``: no sensitivities.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import casadi as ca
import numpy as np

from shooting.integrate.stages import RhsSizes, combine, explicit_stages, implicit_stages, newton_matrix

__all__ = ["SubstepBuilder"]

#: One substep's result: x_next, the propagated sensitivity S (or None) and
#: the local error estimate of an embedded pair (or None).
Step = tuple[ca.SX, ca.SX | None, ca.SX | None]


def _value_and_jacobian(fjac: ca.Function, X: ca.SX, u: ca.SX, p: ca.SX, tau: ca.SX) -> tuple[ca.SX, ca.SX]:
    """``(f, f_x)`` at a stage: the first two outputs of the builder's ``fjac``."""
    f, f_x, _ = fjac(X, u, p, tau)
    return f, f_x


@dataclass(frozen=True)
class SubstepBuilder(RhsSizes):
    """Build one substep of a tableau on a model's right-hand side.

    Parameters
    ----------
    f : casadi.Function
        ``f(x, u, p, t) -> xdot`` (a `Model.f`).
    A : ndarray, shape (s, s)
    b : ndarray, shape (s,)
    c : ndarray, shape (s,)
    b_hat : ndarray, shape (s,), or None
        Embedded weights; when given the substep also returns the local error
        estimate ``h sum_i (b_i - b_hat_i) K_i``.
    explicit : bool
    mode : {"forward", "ad", "variational", "none"}
    newton_iterations : int
        Newton steps on the stage equations of implicit tableaus.
    simplified_newton : bool
        Reuse one factorisation for all Newton steps (`shooting.integrate.stages.implicit_stages`).
    """

    f: ca.Function
    A: np.ndarray
    b: np.ndarray
    c: np.ndarray
    b_hat: np.ndarray | None
    explicit: bool
    mode: str
    newton_iterations: int
    simplified_newton: bool = False

    @cached_property
    def _fjac(self) -> ca.Function:
        # Built once per builder (frozen dataclass: cached_property writes __dict__ directly).
        x, u, p, t = (ca.SX.sym(n, self.f.sparsity_in(i)) for i, n in enumerate(("x", "u", "p", "t")))
        xdot = self.f(x, u, p, t)
        return ca.Function(
            "fjac", [x, u, p, t], [xdot, ca.jacobian(xdot, x), ca.jacobian(xdot, u)],
            ["x", "u", "p", "t"], ["f", "f_x", "f_u"],
        )

    # ------------------------------------------------------------------ stages
    def _slopes(self, x: ca.SX, u: ca.SX, p: ca.SX, t: ca.SX, h: ca.SX) -> list[ca.SX]:
        """Stage slopes K_i of the plain state (Newton for implicit tableaus)."""
        if self.explicit:
            return explicit_stages(lambda X, tau: self.f(X, u, p, tau), self.A, self.c, x, t, h)
        fjac = self._fjac
        K, _ = implicit_stages(
            lambda X, tau: _value_and_jacobian(fjac, X, u, p, tau), self.A, self.c, x, t, h, self.newton_iterations,
            self.simplified_newton,
        )
        return K

    def stage_values(self, x: ca.SX, u: ca.SX, p: ca.SX, t: ca.SX, h: ca.SX,
                     z: ca.SX | None = None) -> tuple[list[ca.SX], list[ca.SX]]:
        """The converged stage slopes K_i (each (nx, 1)), and no algebraic stage values (an ODE; `z` unused).

        The same interface as `shooting.integrate.dae.DAESubstepBuilder.stage_values`.
        """
        return self._slopes(x, u, p, t, h), []

    def _error(self, h: ca.SX, K: list[ca.SX]) -> ca.SX | None:
        if self.b_hat is None:
            return None
        return combine(ca.SX.zeros(self.nx), h, self.b - self.b_hat, K)

    # ------------------------------------------------------------- substeps
    def step(
        self, x: ca.SX, S: ca.SX | ca.DM | None, u: ca.SX, p: ca.SX, t: ca.SX, h: ca.SX
    ) -> Step:
        """One substep from (x, S) at time t with step h.

        Parameters
        ----------
        x : casadi.SX, shape (nx, 1)
        S : casadi.SX or DM, shape (nx, nx + nu), or None
            Sensitivity of `x` with respect to (x_0, u); ignored (and returned
            as None) when the mode is ``"none"``.
        u : casadi.SX, shape (nu, 1)
        p : casadi.SX, shape (np, 1)
        t, h : casadi.SX, scalars

        Returns
        -------
        x_next : casadi.SX, shape (nx, 1)
        S_next : casadi.SX, shape (nx, nx + nu), or None
        err : casadi.SX, shape (nx, 1), or None
            Local error estimate of an embedded pair.
        """
        if self.mode == "none" or S is None:
            K = self._slopes(x, u, p, t, h)
            return combine(x, h, self.b, K), None, self._error(h, K)
        if self.mode == "ad":
            return self._step_ad(x, S, u, p, t, h)
        if self.mode == "variational" and self.explicit:
            return self._step_variational(x, S, u, p, t, h)
        if self.explicit:
            return self._step_forward_explicit(x, S, u, p, t, h)
        return self._step_implicit(x, S, u, p, t, h)

    def _step_forward_explicit(self, x: ca.SX, S: Any, u: ca.SX, p: ca.SX, t: ca.SX, h: ca.SX) -> Step:
        fjac = self._fjac
        nx = self.nx
        K: list[ca.SX] = []
        dK: list[ca.SX] = []
        for i in range(len(self.c)):
            Xi = combine(x, h, self.A[i, :i], K)
            dXi = combine(S, h, self.A[i, :i], dK)
            fi, Ji, Fi = fjac(Xi, u, p, t + float(self.c[i]) * h)
            K.append(fi)
            dK.append(ca.mtimes(Ji, dXi) + ca.horzcat(ca.SX(nx, nx), Fi))
        return combine(x, h, self.b, K), combine(S, h, self.b, dK), self._error(h, K)

    def _step_implicit(self, x: ca.SX, S: Any, u: ca.SX, p: ca.SX, t: ca.SX, h: ca.SX) -> Step:
        # Implicit-function theorem on the converged stages (module docstring).
        fjac = self._fjac
        nx, s = self.nx, len(self.c)
        K, X = implicit_stages(
            lambda Xs, tau: _value_and_jacobian(fjac, Xs, u, p, tau), self.A, self.c, x, t, h, self.newton_iterations,
            self.simplified_newton,
        )
        J, rhs = [], []
        for i in range(s):
            _, Ji, Fi = fjac(X[i], u, p, t + float(self.c[i]) * h)
            J.append(Ji)
            rhs.append(ca.mtimes(Ji, S) + ca.horzcat(ca.SX(nx, nx), Fi))
        dK = ca.solve(newton_matrix(self.A, h, J), ca.vertcat(*rhs))
        dK_list = [dK[i * nx:(i + 1) * nx, :] for i in range(s)]
        return combine(x, h, self.b, K), combine(S, h, self.b, dK_list), self._error(h, K)

    def _step_variational(self, x: ca.SX, S: Any, u: ca.SX, p: ca.SX, t: ca.SX, h: ca.SX) -> Step:
        # The same explicit tableau applied to z = [x; vec(S)] (module docstring, "variational").
        nx, m = self.nx, self.nx + self.nu
        fjac = self._fjac

        def g(z: ca.SX, tau: ca.SX) -> ca.SX:
            xz = z[:nx]
            Sz = ca.reshape(z[nx:], nx, m)
            fz, Jz, Fz = fjac(xz, u, p, tau)
            dS = ca.mtimes(Jz, Sz) + ca.horzcat(ca.SX(nx, nx), Fz)
            return ca.vertcat(fz, ca.vec(dS))

        z0 = ca.vertcat(x, ca.vec(ca.SX(S)))
        Kz = explicit_stages(g, self.A, self.c, z0, t, h)
        z1 = combine(z0, h, self.b, Kz)
        K = [k[:nx] for k in Kz]
        return z1[:nx], ca.reshape(z1[nx:], nx, m), self._error(h, K)

    def _step_ad(self, x: ca.SX, S: Any, u: ca.SX, p: ca.SX, t: ca.SX, h: ca.SX) -> Step:
        # AD on fresh symbols, then substitution of the actual arguments.
        nx, nu, s = self.nx, self.nu, len(self.c)
        xs, us = ca.SX.sym("xs", nx), ca.SX.sym("us", nu)
        if self.explicit:
            K = self._slopes(xs, us, p, t, h)
            x1 = combine(xs, h, self.b, K)
            Jx, Ju = ca.jacobian(x1, xs), ca.jacobian(x1, us)
        else:
            Ks = ca.SX.sym("K", s * nx)
            Kl = [Ks[i * nx:(i + 1) * nx] for i in range(s)]
            Xl = [combine(xs, h, self.A[i, :], Kl) for i in range(s)]
            r = ca.vertcat(*[Kl[i] - self.f(Xl[i], us, p, t + float(self.c[i]) * h) for i in range(s)])
            dK = -ca.solve(ca.jacobian(r, Ks), ca.jacobian(r, ca.vertcat(xs, us)))
            x1 = combine(xs, h, self.b, Kl)
            J = ca.jacobian(x1, ca.vertcat(xs, us)) + ca.mtimes(ca.jacobian(x1, Ks), dK)
            Jx, Ju = J[:, :nx], J[:, nx:]
            Kstar = ca.vertcat(*self._slopes(xs, us, p, t, h))
            x1, Jx, Ju = ca.substitute([x1, Jx, Ju], [Ks], [Kstar])
            K = [Kstar[i * nx:(i + 1) * nx] for i in range(s)]
        err = self._error(h, K)
        outs = [x1, Jx, Ju] + ([err] if err is not None else [])
        outs = ca.substitute(outs, [xs, us], [x, u])
        S_next = ca.mtimes(outs[1], S) + ca.horzcat(ca.SX(nx, nx), outs[2])
        return outs[0], S_next, outs[3] if err is not None else None
