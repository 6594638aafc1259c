"""The constraints' curvature for an exact-Hessian QP: what ``hessian="exact"`` adds to each stage's block.

The OCP's Lagrangian, with the conventions of the stage-wise QP (`shooting.qp`: pi_{k+1} the multiplier of
x_{k+1} = F(x_k, u_k), the gradient of the cost-to-go; lam >= 0 one per side of a row),

    L = sum_k l_k(x_k, u_k) + l_N(x_N) + sum_k pi_{k+1}' (F(x_k, u_k) - x_{k+1})
        + sum_k (lam_hi - lam_lo)' h(x_k, u_k) + (lam_hi - lam_lo)' c(x_N),

has, beside the costs' Hessians (already in the QP: `shooting.mpc.rti_data`), the stage blocks

    W_k = d2/d(x, u)2 [pi_{k+1}' F(x_k, u_k)] + sum_j (lam_hi - lam_lo)_j d2 h_j / d(x, u)2,
    W_N = sum_j (lam_hi - lam_lo)_j d2 c_j / dx2,

the first from the integrator's second-order step (`sensitivities="second-order"`: the Hessian of lam' x_next
through the tableau). Bounds are linear and add nothing. `curvature_functions` gives both as CasADi Functions
(one stage's, mapped over the horizon by the caller); `shooting.mpc.rti_stage` adds them to the QP at the
sample's multipliers and makes each stage's block positive definite (`shooting.mpc.costs.convexify`).
"""

from __future__ import annotations

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting.integrate.integrator import HOST_UNROLL_STEPS, build_integrator
from shooting.mpc.ocp import MultipleShootingOCP

__all__ = ["curvature_functions", "row_multipliers"]

FloatArray = npt.NDArray[np.float64]


def curvature_functions(ocp: MultipleShootingOCP, *, unroll: bool | int | None = HOST_UNROLL_STEPS
                        ) -> tuple[ca.Function, ca.Function | None]:
    """The stage block W_k and the terminal W_N of the module docstring.

    Parameters
    ----------
    ocp : MultipleShootingOCP
    unroll : bool or int or None
        The second-order step's unrolling (`shooting.build_integrator`; the C export passes None, its default).

    Returns
    -------
    stage : casadi.Function
        ``(x (nx), u (nu), p (np), t, pi (nx), mu (nh)) -> W (nx+nu, nx+nu)``; ``mu`` = lam_hi - lam_lo of the
        path rows (empty without path constraints).
    terminal : casadi.Function or None
        ``(x (nx), p (np), nu (nc)) -> W_N (nx, nx)``, None without terminal constraints.
    """
    nx, nu, npar = ocp.nx, ocp.nu, ocp.np
    con = ocp.problem.constraints
    step = build_integrator(ocp.model, ocp.method, ocp.steps, "second-order", unroll=unroll,
                            name=f"{ocp.model.name}_so_step")
    x, u, p, t = ca.MX.sym("x", nx), ca.MX.sym("u", nu), ca.MX.sym("p", npar), ca.MX.sym("t")
    pi = ca.MX.sym("pi", nx)
    z_guess = [ca.MX(ca.DM(ocp.model.z0))] if ocp.model.nz else []  # (Newton on g from z0, as the QP's data)
    W = step.call([x, u, p, t, ca.MX(ocp.dt), pi, *z_guess])[3]
    xs, us, ps = ca.SX.sym("x", nx), ca.SX.sym("u", nu), ca.SX.sym("p", npar)
    nh = 0
    if con.path_constraints is not None:
        h = ca.SX(con.path_constraints(xs, us, ps))
        nh = h.numel()
        mus = ca.SX.sym("mu", nh)
        hess = ca.Function("path_hessian", [xs, us, ps, mus],
                           [ca.densify(ca.hessian(ca.dot(mus, h), ca.vertcat(xs, us))[0])])
        mu = ca.MX.sym("mu", nh)
        W = W + hess(x, u, p, mu)
    else:
        mu = ca.MX.sym("mu", 0)
    stage = ca.Function("stage_curvature", [x, u, p, t, pi, mu], [W], ["x", "u", "p", "t", "pi", "mu"], ["W"])
    if step.is_a("SXFunction"):
        # (an unrolled step: the whole block one SX Function, whose C keeps its work on the stack; an MX
        # composition's C has static buffers, and a controller with it is not reentrant)
        stage = stage.expand()
    terminal = None
    if con.terminal_constraints is not None:
        c = ca.SX(con.terminal_constraints(xs, ps))
        nus = ca.SX.sym("nu", c.numel())
        terminal = ca.Function("terminal_curvature", [xs, ps, nus],
                               [ca.densify(ca.hessian(ca.dot(nus, c), xs)[0])], ["x", "p", "nu"], ["W_N"])
    return stage, terminal


def row_multipliers(lam: FloatArray, N: int, nu: int, nbx: int, ng: int, ngN: int) -> tuple[FloatArray, FloatArray]:
    """lam_hi - lam_lo of the general rows (N, ng) and of the terminal rows (ngN,), from a stage QP's multipliers
    of every side (inputs', state bounds', general rows', terminal rows'; lower then upper side per row)."""
    lam = np.asarray(lam, dtype=float)
    a = 2 * N * nu + 2 * N * nbx
    g = lam[a:a + 2 * N * ng].reshape(N, ng, 2)
    t = lam[a + 2 * N * ng:a + 2 * N * ng + 2 * ngN].reshape(ngN, 2)
    return g[:, :, 1] - g[:, :, 0], t[:, 1] - t[:, 0]
