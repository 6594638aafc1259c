"""Variable scaling: x = D_x x~, u = D_u u~ with positive diagonal D_x, D_u.

A linear change of variables leaves the optimal control problem unchanged
(its solution maps one to one) and changes only the numbers the solvers see:
the QP's Hessian becomes D H D, its constraint Jacobians D^-1 A D, so that a
plant whose states differ by orders of magnitude (kilograms in 1e4, kelvin in
3e2, radians in 1) becomes one whose variables are all of order one.

"auto" follows IPOPT's gradient-based rule in spirit (Waechter and Biegler,
Math. Prog. 106 (2006), sec. 3.8: scale only what is far from one, since
scaling a well-scaled problem buys nothing and perturbs tuned behaviour): each
variable's typical magnitude m is its largest finite bound, else the largest
of its nominal value, start and references; the scale is the power of two
nearest m where m lies outside [1/AUTO_THRESHOLD, AUTO_THRESHOLD], else 1.
Powers of two are exact in binary floating point: a scaled value carries the
same bits of mantissa as the unscaled one, so scaling itself rounds nothing.

A Runge-Kutta step commutes with the change of variables (each stage is
linear in f), so the scaled model's step is the scaled step of the model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.model import Model
from shooting.mpc.problem import OCPProblem

if TYPE_CHECKING:  # (the OCP imports this module)
    from shooting.mpc.ocp import MultipleShootingOCP

__all__ = ["AUTO_THRESHOLD", "auto_scale", "controller_scales", "is_unscaled", "resolve_scale", "scale_model",
           "scaled_problem", "scaled_twin"]

FloatArray = npt.NDArray[np.float64]

#: "auto" scales a variable only where its typical magnitude is beyond this factor of one (IPOPT's default
#: nlp_scaling_max_gradient is 100 for the same reason); every built-in model is within it and stays unscaled.
AUTO_THRESHOLD = 100.0


def auto_scale(lower: FloatArray, upper: FloatArray, *typical: FloatArray) -> FloatArray:
    """The "auto" scales of variables with bounds `lower`, `upper` (n,) and typical values `typical` (rows of n).

    Returns
    -------
    ndarray, shape (n,)
        Powers of two (1 where the magnitude is within `AUTO_THRESHOLD` of one, or unknown).
    """
    lo, hi = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    bound = np.fmax(np.where(np.isfinite(lo), np.abs(lo), np.nan), np.where(np.isfinite(hi), np.abs(hi), np.nan))
    seen = np.zeros_like(lo)
    for values in typical:
        v = np.abs(np.asarray(values, dtype=float)).reshape(-1, lo.size)
        seen = np.maximum(seen, np.max(np.where(np.isfinite(v), v, 0.0), axis=0, initial=0.0))
    m = np.where(np.isfinite(bound) & (bound > 0), bound, seen)
    far = (m > AUTO_THRESHOLD) | ((m > 0) & (m < 1.0 / AUTO_THRESHOLD))
    return np.where(far, np.exp2(np.round(np.log2(np.where(m > 0, m, 1.0)))), 1.0)


def resolve_scale(value: object, n: int, what: str, auto: Callable[[], FloatArray]) -> FloatArray:
    """`value` ("auto" or None: ``auto()``; else positive numbers, (n,) or one for all) as an array (n,)."""
    given = _validate.scale(value, n, what)
    return np.asarray(auto(), dtype=float) if given is None else given


def is_unscaled(*scales: FloatArray) -> bool:
    """True where every scale is exactly one (the problem is its own scaled twin)."""
    return all(bool(np.all(np.asarray(s) == 1.0)) for s in scales)


def scale_model(model: Model, x_scale: FloatArray, u_scale: FloatArray) -> Model:
    """The model in the scaled variables x~ = x / x_scale, u~ = u / u_scale.

    x~' = f(D_x x~, z, D_u u~, p, t) / x_scale, 0 = g(D_x x~, z, D_u u~, p, t);
    bounds, nominal values and units follow; parameters, time and algebraic
    states are unchanged.

    Parameters
    ----------
    model : Model
    x_scale : ndarray, shape (nx,)
    u_scale : ndarray, shape (nu,)

    Returns
    -------
    Model
        Named as `model` (the generated C keeps its prefix).
    """
    dx, du = np.asarray(x_scale, dtype=float), np.asarray(u_scale, dtype=float)
    xs, us = ca.SX.sym("xs", model.nx), ca.SX.sym("us", model.nu)
    old = ca.vertcat(model.x, model.u)
    new = ca.vertcat(ca.DM(dx) * xs, ca.DM(du) * us)
    f = ca.substitute(model.xdot, old, new) / ca.DM(dx)
    alg = ca.substitute(model.alg, old, new) if model.nz else None

    def units(names: Sequence[str] | None, scale: FloatArray) -> list[str] | None:
        if names is None:
            return None
        # "1024 kg": one unit of the scaled variable (empty where that does not fit a unit's 16 characters)
        texts = [u if s == 1 else f"{s:g} {u}".strip() for u, s in zip(names, scale, strict=True)]
        return [t if len(t) <= 16 else "" for t in texts]

    return Model(
        model.name, xs, us, f, model.p if model.np else None, model.t if model.time_varying else None,
        state_names=list(model.state_names), input_names=list(model.input_names),
        param_names=list(model.param_names), x0=model.x0 / dx, x_min=model.x_min / dx, x_max=model.x_max / dx,
        u_min=model.u_min / du, u_max=model.u_max / du, p0=model.p0 if model.np else None, u0=model.u0 / du,
        dt=model.dt, description=model.description, time_unit=model.time_unit,
        z=model.z if model.nz else None, alg=alg, z0=model.z0 if model.nz else None,
        z_min=model.z_min if model.nz else None, z_max=model.z_max if model.nz else None,
        algebraic_names=list(model.algebraic_names) if model.nz else None,
        state_units=units(model.state_units, dx), input_units=units(model.input_units, du))


def controller_scales(x_scale: FloatArray, u_scale: FloatArray, soft_states: npt.NDArray[np.int_]
                      ) -> tuple[FloatArray, FloatArray]:
    """The scales the controllers' QP uses: the OCP's, but 1 on the states with soft bounds.

    A soft bound's slack is priced per unit of the model (slack_l1 s + slack_l2 s^2, one weight for every
    slack): in a scaled state it would be priced per scaled unit, another problem. Those states keep their units.
    """
    dx = np.array(x_scale, dtype=float)
    dx[np.asarray(soft_states, dtype=int)] = 1.0
    return dx, np.array(u_scale, dtype=float)


def scaled_problem(ocp: MultipleShootingOCP, x_scale: FloatArray, u_scale: FloatArray) -> OCPProblem:
    """`ocp`'s problem in the variables x / x_scale, u / u_scale (shapes (nx,), (nu,)): the same OCP, its optimum
    mapped one to one. Its validated weights become D W D, its references and bounds are divided by the scales,
    the user's functions are called with D x~, D u~; the problem's own scales 1."""
    dx, du = np.asarray(x_scale, dtype=float), np.asarray(u_scale, dtype=float)
    Dx, Du = ca.DM(dx), ca.DM(du)
    cost, con = ocp.problem.cost, ocp.problem.constraints

    def stage(f: Callable[..., ca.SX] | None) -> Callable[..., ca.SX] | None:
        return None if f is None else (lambda x, u, p: f(Dx * x, Du * u, p))

    def final(f: Callable[..., ca.SX] | None) -> Callable[..., ca.SX] | None:
        return None if f is None else (lambda x, p: f(Dx * x, p))

    return ocp.problem.with_changes(
        Q=ocp.Q * np.outer(dx, dx), R=ocp.R * np.outer(du, du), Q_terminal=ocp.Q_terminal * np.outer(dx, dx),
        R_delta=ocp.R_delta * np.outer(du, du), x_ref=ocp.x_ref / dx, u_ref=ocp.u_ref / du,
        x_min=ocp.x_min / dx, x_max=ocp.x_max / dx, u_min=ocp.u_min / du, u_max=ocp.u_max / du,
        stage_cost=stage(cost.stage_cost), terminal_cost=final(cost.terminal_cost),
        path_constraints=stage(con.path_constraints), terminal_constraints=final(con.terminal_constraints),
        x_scale=np.ones(dx.size), u_scale=np.ones(du.size))


def scaled_twin(ocp: MultipleShootingOCP) -> tuple[MultipleShootingOCP, FloatArray, FloatArray]:
    """The OCP `ocp`'s controllers solve: `ocp` in x / dx, u / du with dx, du its `controller_scales`.

    Returns
    -------
    twin : MultipleShootingOCP
        `ocp` itself where every scale is 1, else the same OCP of the scaled model (`scale_model`,
        `scaled_problem`), its own scales 1.
    dx : ndarray, shape (nx,)
    du : ndarray, shape (nu,)
    """
    dx, du = controller_scales(ocp.x_scale, ocp.u_scale, ocp.soft_states)
    if is_unscaled(dx, du):
        return ocp, dx, du
    twin = type(ocp).from_problem(scale_model(ocp.model, dx, du), scaled_problem(ocp, dx, du))
    return twin, dx, du
