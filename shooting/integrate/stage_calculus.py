"""The model's derivatives at a Runge-Kutta stage, as the adjoint and second-order steps need them.

At a stage the step sees the right-hand side as a function of w = (x, u):
for an ODE f(x, u), for a semi-explicit index-1 DAE the reduced
f~(x, u) = f(x, G(x, u), u), G the implicit function of g(x, z, u) = 0 (the
stages of `shooting.integrate.dae` satisfy g exactly, so the step is the
tableau on f~). Three quantities per stage, as SX Functions built once:

- ``jac``: J = df~/dw, shape (nx, nx + nu). For a DAE
  J = [f_x f_u] - f_z g_z^-1 [g_x g_u].
- ``vjp``: J' theta, shape (nx + nu, 1), by reverse-mode AD for an ODE (about
  the cost of one f, whatever nx); for a DAE
  J' theta = [f_x f_u]' theta + [g_x g_u]' nu with nu = -g_z^-T f_z' theta.
- ``hess``: the Hessian of theta' f~ with respect to w, shape (nx+nu, nx+nu).
  For a DAE it is the Hessian of the Lagrangian L = theta' f + nu' g on the
  tangent space of g = 0: T' (d2L/dv2) T with v = (x, u, z),
  T = [I; -g_z^-1 [g_x g_u]] (second derivative of an implicit function:
  differentiating g(w, G(w)) = 0 twice gives f_z G'' in terms of g's second
  derivatives, which is what nu' g contributes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import casadi as ca

__all__ = ["StageCalculus", "stage_calculus"]


@dataclass(frozen=True)
class StageCalculus:
    """``jac``, ``vjp`` and ``hess`` of the (reduced) right-hand side at a stage (module docstring).

    Each Function takes ``(x, u, p, t, z)`` (``z`` empty for an ODE), and ``vjp``/``hess`` also ``theta``.
    """

    jac: ca.Function
    vjp: ca.Function
    hess: ca.Function
    nx: int
    nu: int

    def jacobian(self, X: Any, u: Any, p: Any, tau: Any, Z: Any) -> ca.SX:
        """J at a stage, shape (nx, nx + nu)."""
        return self.jac(X, u, p, tau, Z)

    def transposed_product(self, X: Any, u: Any, p: Any, tau: Any, Z: Any, theta: Any) -> ca.SX:
        """J' theta at a stage, shape (nx + nu, 1)."""
        return self.vjp(X, u, p, tau, Z, theta)

    def hessian(self, X: Any, u: Any, p: Any, tau: Any, Z: Any, theta: Any) -> ca.SX:
        """The Hessian of theta' f~ at a stage, shape (nx + nu, nx + nu)."""
        return self.hess(X, u, p, tau, Z, theta)


def stage_calculus(f: ca.Function, g: ca.Function | None = None) -> StageCalculus:
    """The stage derivatives of the ODE right-hand side `f` (``f(x, u, p, t)``) or the DAE (`f`, `g`)
    (``f(x, u, p, t, z)``, ``g(x, u, p, t, z)``).

    Parameters
    ----------
    f : casadi.Function
    g : casadi.Function, optional

    Returns
    -------
    StageCalculus
    """
    names = ("x", "u", "p", "t", "z")
    nz = int(f.size1_in(4)) if g is not None else 0
    x, u, p, t = (ca.SX.sym(n, f.sparsity_in(i)) for i, n in enumerate(names[:4]))
    z = ca.SX.sym("z", nz)
    nx, nu = x.numel(), u.numel()
    theta = ca.SX.sym("theta", nx)
    w = ca.vertcat(x, u)
    if g is None:
        fx = f(x, u, p, t)
        jac = ca.jacobian(fx, w)
        vjp = ca.jtimes(fx, w, theta, True)
        hess = ca.hessian(ca.dot(theta, fx), w)[0]
    else:
        fx, gx = f(x, u, p, t, z), g(x, u, p, t, z)
        f_w, f_z, g_w, g_z = ca.jacobian(fx, w), ca.jacobian(fx, z), ca.jacobian(gx, w), ca.jacobian(gx, z)
        dz = -ca.solve(g_z, g_w)  # dG/dw, (nz, nx + nu)
        jac = f_w + ca.mtimes(f_z, dz)
        nu_ = -ca.solve(g_z.T, ca.mtimes(f_z.T, theta))
        vjp = ca.mtimes(f_w.T, theta) + ca.mtimes(g_w.T, nu_)
        # d2L/dv2 with nu held constant (a symbol), then nu substituted
        nu_sym = ca.SX.sym("nu", nz)
        v = ca.vertcat(w, z)
        L = ca.dot(theta, fx) + ca.dot(nu_sym, gx)
        tangent = ca.vertcat(ca.SX.eye(nx + nu), dz)
        hess = ca.mtimes([tangent.T, ca.hessian(L, v)[0], tangent])
        hess = ca.substitute(hess, nu_sym, nu_)
    ins, in_names = [x, u, p, t, z], list(names)
    return StageCalculus(
        jac=ca.Function("stage_jac", ins, [ca.densify(jac)], in_names, ["J"], {"cse": True}),
        vjp=ca.Function("stage_vjp", [*ins, theta], [ca.densify(vjp)], [*in_names, "theta"], ["JT_theta"],
                        {"cse": True}),
        hess=ca.Function("stage_hess", [*ins, theta], [ca.densify(hess)], [*in_names, "theta"], ["H_theta"],
                         {"cse": True}),
        nx=nx, nu=nu,
    )
