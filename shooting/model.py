"""A validated symbolic model x' = f(x, u, p, t), or a semi-explicit index-1 DAE
x' = f(x, z, u, p, t), 0 = g(x, z, u, p, t), built on CasADi SX."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import Any

import casadi as ca
import numpy as np

from shooting import _validate

__all__ = ["Model"]


def _symbol_vector(value: object, what: str, *, allow_none: bool) -> ca.SX:
    """Return `value` as an SX column of pure symbols, or raise ValueError naming `what`."""
    if value is None:
        if allow_none:
            return ca.SX(0, 1)
        raise ValueError(f"{what} is required: pass a casadi.SX column vector, e.g. ca.SX.sym('{what}', n)")
    if isinstance(value, ca.MX):
        raise ValueError(f"{what} is a casadi.MX; models are built from SX symbols: use ca.SX.sym('{what}', n)")
    if not isinstance(value, ca.SX):
        raise ValueError(
            f"{what} must be a casadi.SX column vector of symbols (ca.SX.sym('{what}', n)), "
            f"got {type(value).__name__}"
        )
    if value.numel() == 0:
        return ca.SX(0, 1)
    if not value.is_column():
        raise ValueError(f"{what} must be a column vector, got shape {value.shape}: use ca.SX.sym('{what}', n)")
    for i in range(value.numel()):
        if not value[i].is_symbolic():
            raise ValueError(
                f"{what}[{i}] is the expression {value[i]}, not a symbol: {what} must contain "
                f"only symbols created with ca.SX.sym"
            )
    return value


class Model:
    """A continuous-time model x' = f(x, u, p, t) in CasADi SX symbols.

    With algebraic states `z` it is the semi-explicit DAE
    x' = f(x, z, u, p, t), 0 = g(x, z, u, p, t) of index 1: the Jacobian
    dg/dz must be nonsingular, so that g determines z from (x, u, p, t).

    Parameters
    ----------
    name : str
        Identifier (letters, digits, underscore; at most 112 characters); also
        used to name generated C.
    x : casadi.SX, shape (nx, 1)
        State symbols.
    u : casadi.SX, shape (nu, 1)
        Input symbols, held constant over a shooting interval.
    xdot : casadi.SX, shape (nx, 1)
        Right-hand side, an expression in `x`, `u`, `p` and `t` only.
    p : casadi.SX, shape (np, 1), optional
        Parameter symbols (constant over the horizon). Omitted: ``np == 0``.
    t : casadi.SX, scalar, optional
        Time symbol, for time-varying dynamics.
    state_names, input_names, param_names : sequence of str, optional
        Labels for plots and generated code (default ``x0, x1, ...``).
    x0 : array_like, shape (nx,), optional
        Nominal initial state (default zeros).
    x_min, x_max : array_like, shape (nx,), optional
        State bounds (default -inf / +inf).
    u_min, u_max : array_like, shape (nu,), optional
        Input bounds (default -inf / +inf).
    p0 : array_like, shape (np,)
        Nominal parameter values; required when the model has parameters.
    u0 : array_like, shape (nu,), optional
        Nominal input, e.g. the hover thrust (default zeros).
    dt : float, optional
        Nominal sampling time [s] for this model's default scenarios.
    description : str, optional
        One line shown by ``shooting-codegen list``.
    time_unit : str, default "s"
        The unit of t and dt (``"s"``, ``"min"``, ``"h"``), for plots and messages.
    state_units, input_units : sequence of str, optional
        The unit of each state and input (``"m"``, ``"rad/s"``, ``"N"``; at
        most 16 characters each), for plot labels, tables and messages
        (default none).
    z : casadi.SX, shape (nz, 1), optional
        Algebraic state symbols; `xdot` may depend on them.
    alg : casadi.SX, shape (nz, 1)
        The algebraic equations 0 = g(x, z, u, p, t), one per algebraic
        state; required with `z`.
    z0 : array_like, shape (nz,), optional
        Guess of z at the nominal point (default zeros); dg/dz must be
        nonsingular at (x0, z0, u0, p0, t = 0).
    z_min, z_max : array_like, shape (nz,), optional
        Bounds on the algebraic states (default -inf / +inf), imposed by the
        OCP as path constraints.
    algebraic_names : sequence of str, optional
        Labels of z (default ``z0, z1, ...``).

    Attributes
    ----------
    nx, nu, np, nz : int
        Numbers of states, inputs, parameters and algebraic states.
    f : casadi.Function
        ``f(x, u, p, t) -> xdot`` with named inputs and output; ``p`` is 0x1
        when the model has none, and ``t`` is accepted (and ignored) when the
        dynamics do not depend on time. For a DAE (``nz > 0``):
        ``f(x, u, p, t, z) -> xdot`` (z appended, so the first four inputs
        are the ODE's).
    g : casadi.Function or None
        For a DAE, ``g(x, u, p, t, z) -> alg``; None for an ODE.

    Raises
    ------
    ValueError
        A non-symbolic or non-column input, a wrong shape, a symbol used twice,
        a free symbol in `xdot`, inconsistent or repeated names (one name for
        two states, inputs, parameters or algebraic states), nominal values or
        bounds, or `xdot` or `alg` not finite at the nominal point.
    """

    def __init__(
        self,
        name: str,
        x: ca.SX,
        u: ca.SX,
        xdot: ca.SX,
        p: ca.SX | None = None,
        t: ca.SX | None = None,
        *,
        state_names: Sequence[str] | None = None,
        input_names: Sequence[str] | None = None,
        param_names: Sequence[str] | None = None,
        x0: Sequence[float] | np.ndarray | None = None,
        x_min: Sequence[float] | np.ndarray | None = None,
        x_max: Sequence[float] | np.ndarray | None = None,
        u_min: Sequence[float] | np.ndarray | None = None,
        u_max: Sequence[float] | np.ndarray | None = None,
        p0: Sequence[float] | np.ndarray | None = None,
        u0: Sequence[float] | np.ndarray | None = None,
        dt: float | None = None,
        description: str = "",
        time_unit: str = "s",
        z: ca.SX | None = None,
        alg: ca.SX | None = None,
        z0: Sequence[float] | np.ndarray | None = None,
        z_min: Sequence[float] | np.ndarray | None = None,
        z_max: Sequence[float] | np.ndarray | None = None,
        algebraic_names: Sequence[str] | None = None,
        state_units: Sequence[str] | None = None,
        input_units: Sequence[str] | None = None,
    ) -> None:
        self.name = _validate.identifier(name, "model name", maximum=_validate.MAX_PREFIX_LENGTH)
        self.x = _symbol_vector(x, "x", allow_none=False)
        if self.x.numel() == 0:
            raise ValueError("x is empty: a model needs at least one state")
        self.u = _symbol_vector(u, "u", allow_none=True)
        self.p = _symbol_vector(p, "p", allow_none=True)
        self.z = _symbol_vector(z, "z", allow_none=True)
        if t is None:
            self.t = ca.SX.sym("t")
            self.time_varying = False
        else:
            self.t = _symbol_vector(t, "t", allow_none=False)
            if self.t.numel() != 1:
                raise ValueError(f"t must be a scalar symbol, got shape {self.t.shape}")
            self.time_varying = True
        self.nx = int(self.x.numel())
        self.nu = int(self.u.numel())
        self.np = int(self.p.numel())
        self.nz = int(self.z.numel())

        seen: dict[int, str] = {}
        for what, vec in (("x", self.x), ("z", self.z), ("u", self.u), ("p", self.p), ("t", self.t)):
            for i in range(vec.numel()):
                key = vec[i].element_hash()
                sym = vec[i].name()
                if key in seen:
                    raise ValueError(
                        f"symbol '{sym}' appears in both {seen[key]} and {what}: each symbol may be used once"
                    )
                seen[key] = what

        self.xdot = self._check_expression(xdot, self.nx, "xdot", "x", "give one derivative per state")

        self.state_names = _validate.names(state_names, self.nx, "x", "state_names")
        self.input_names = _validate.names(input_names, self.nu, "u", "input_names")
        self.param_names = _validate.names(param_names, self.np, "p", "param_names")
        self.state_units = _validate.units(state_units, self.nx, "state_units")
        self.input_units = _validate.units(input_units, self.nu, "input_units")
        self.x0 = _validate.vector(x0, self.nx, "x0", default=0.0)
        self.u0 = _validate.vector(u0, self.nu, "u0", default=0.0)
        if p0 is None and self.np:
            names = ", ".join(self.p[i].name() for i in range(self.np))
            raise ValueError(f"model {name} has {self.np} parameter(s) ({names}) but no p0: give their nominal "
                             f"values, e.g. p0=[{', '.join(['1.0'] * self.np)}] (a silent 0 is a division by zero "
                             f"waiting to happen)")
        self.p0 = _validate.vector(p0, self.np, "p0", default=0.0)
        self.x_min = _validate.vector(x_min, self.nx, "x_min", default=-np.inf, allow_inf=True)
        self.x_max = _validate.vector(x_max, self.nx, "x_max", default=np.inf, allow_inf=True)
        self.u_min = _validate.vector(u_min, self.nu, "u_min", default=-np.inf, allow_inf=True)
        self.u_max = _validate.vector(u_max, self.nu, "u_max", default=np.inf, allow_inf=True)
        _validate.bounds(self.x_min, self.x_max, "x")
        _validate.bounds(self.u_min, self.u_max, "u")
        self._set_algebraic(alg, z0=z0, z_min=z_min, z_max=z_max, algebraic_names=algebraic_names)
        self.dt = None if dt is None else _validate.positive_real(dt, "dt")
        self.description = str(description)
        if not isinstance(time_unit, str) or not time_unit.strip() or len(time_unit) > 16:
            raise ValueError(f"time_unit must be a short unit name such as 's', 'min' or 'h', got {time_unit!r}")
        self.time_unit = time_unit.strip()

        _check_unique_names(self)
        if self.nz:
            # z last: the ODE's inputs (x, u, p, t) keep their places
            args, arg_names = [self.x, self.u, self.p, self.t, self.z], ["x", "u", "p", "t", "z"]
            self.f = ca.Function("f", args, [self.xdot], arg_names, ["xdot"])
            self.g: ca.Function | None = ca.Function("g", args, [self.alg], arg_names, ["alg"])
            _check_finite_at_nominal(self, self.g, "alg", self.algebraic_names)
            _check_finite_at_nominal(self, self.f, "xdot", self.state_names)
            check_index_one(self)
        else:
            self.f = ca.Function("f", [self.x, self.u, self.p, self.t], [self.xdot], ["x", "u", "p", "t"], ["xdot"])
            self.g = None
            _check_finite_at_nominal(self, self.f, "xdot", self.state_names)

    def _set_algebraic(self, alg: object, **given: Any) -> None:
        """Validate and store `alg`, `z0`, `z_min`, `z_max` and `algebraic_names` (module docstring)."""
        if self.nz and alg is None:
            raise ValueError(f"z has {self.nz} algebraic state(s) but alg is missing: give the equations "
                             f"0 = g(x, z, u, p, t) as alg=ca.vertcat(...), one per algebraic state")
        if not self.nz:
            for option, value in {"alg": alg, **given}.items():
                if value is not None:
                    raise ValueError(f"{option} is given but the model has no algebraic states: declare z "
                                     f"(z=ca.SX.sym('z', n)) and alg, or drop {option}")
        self.alg = self._check_expression(alg, self.nz, "alg", "z", "give one equation per algebraic state") \
            if self.nz else ca.SX(0, 1)
        self.algebraic_names = _validate.names(given["algebraic_names"], self.nz, "z", "algebraic_names")
        self.z0 = _validate.vector(given["z0"], self.nz, "z0", default=0.0)
        self.z_min = _validate.vector(given["z_min"], self.nz, "z_min", default=-np.inf, allow_inf=True)
        self.z_max = _validate.vector(given["z_max"], self.nz, "z_max", default=np.inf, allow_inf=True)
        _validate.bounds(self.z_min, self.z_max, "z")

    def consistent_z(self, x: Sequence[float] | np.ndarray, u: Sequence[float] | np.ndarray | None = None,
                     p: Sequence[float] | np.ndarray | None = None, t: float = 0.0,
                     z_guess: Sequence[float] | np.ndarray | None = None) -> np.ndarray:
        """The algebraic state z with g(x, z, u, p, t) = 0, by Newton's method from `z_guess`.

        Parameters
        ----------
        x : array_like, shape (nx,)
        u : array_like, shape (nu,), optional
            Default `u0`.
        p : array_like, shape (np,), optional
            Default `p0`.
        t : float, default 0
        z_guess : array_like, shape (nz,), optional
            Default `z0`.

        Returns
        -------
        ndarray, shape (nz,)

        Raises
        ------
        ValueError
            The model has no algebraic states, or Newton does not converge.
        """
        if not self.nz or self.g is None:
            raise ValueError(f"model {self.name} has no algebraic states")
        xv = _validate.vector(x, self.nx, "x", broadcast=False)
        uv = self.u0 if u is None else _validate.vector(u, self.nu, "u", broadcast=False)
        pv = self.p0 if p is None else _validate.vector(p, self.np, "p", broadcast=False)
        zv = self.z0 if z_guess is None else _validate.vector(z_guess, self.nz, "z_guess", broadcast=False)
        tv = _validate.real(t, "t")
        G, solver = self._z_solver
        z = np.array(solver(zv, np.concatenate([xv, uv, pv, [tv]])), dtype=float).ravel()
        residual = np.array(G(z, np.concatenate([xv, uv, pv, [tv]])), dtype=float).ravel()
        if not np.all(np.isfinite(z)) or np.max(np.abs(residual), initial=0.0) > 1e-8 * (1 + np.abs(z).max()):
            raise ValueError(f"model {self.name}: Newton on the algebraic equations did not converge at "
                             f"x = {_validate.vector_text(xv)} from z = {_validate.vector_text(zv)} "
                             f"(residual {np.max(np.abs(residual)):.2e}): give a better z_guess")
        return z

    @functools.cached_property
    def _z_solver(self) -> tuple[ca.Function, ca.Function]:
        """g as a function of z given (x, u, p, t), and CasADi's Newton rootfinder on it (built once)."""
        G = ca.Function("g_of_z", [self.z, ca.vertcat(self.x, self.u, self.p, self.t)], [self.alg])
        solver = ca.rootfinder("consistent_z", "newton", G, {"error_on_fail": False, "abstol": 1e-13,
                                                              "max_iter": 100})
        return G, solver

    @property
    def is_dae(self) -> bool:
        """True when the model has algebraic states."""
        return self.nz > 0

    def _check_expression(self, expr: object, n: int, what: str, against: str, fix: str) -> ca.SX:
        """`expr` as a dense SX column of length `n` in the model's symbols, or ValueError naming `what`."""
        if isinstance(expr, (list, tuple)):
            try:
                expr = ca.vertcat(*expr)
            except Exception:  # noqa: BLE001 - anything casadi rejects is a user error here
                raise ValueError(f"{what} is a list that casadi cannot stack: give an SX column vector") from None
        if isinstance(expr, ca.MX):
            raise ValueError(f"{what} is a casadi.MX expression; build the model from SX symbols")
        if isinstance(expr, (ca.DM, np.ndarray, int, float)):
            expr = ca.SX(ca.DM(expr))
        if not isinstance(expr, ca.SX):
            raise ValueError(f"{what} must be a casadi.SX expression, got {type(expr).__name__}")
        if expr.shape != (n, 1):
            raise ValueError(f"{what} has shape {expr.shape} but {against} has shape ({n}, 1): {fix}")
        allowed = {s.element_hash() for v in (self.x, self.z, self.u, self.p, self.t) for s in ca.symvar(v)}
        free = [s.name() for s in ca.symvar(expr) if s.element_hash() not in allowed]
        if free:
            where = "x, z, u, p or t" if self.nz else "x, u, p or t"
            raise ValueError(
                f"{what} depends on free symbol(s) {', '.join(repr(n) for n in free)} that are not in {where}: "
                f"declare them as parameters (p){' or algebraic states (z)' if what == 'alg' else ''} "
                f"or substitute numbers"
            )
        return ca.densify(expr)

    @property
    def expression_hash(self) -> str:
        """SHA-256 of the serialised right-hand side, to tell generated code apart."""
        text = self.f.serialize() + ("" if self.g is None else self.g.serialize())
        return hashlib.sha256(text.encode()).hexdigest()

    def __repr__(self) -> str:
        dae = f", nz={self.nz}" if self.nz else ""
        return f"Model({self.name!r}, nx={self.nx}, nu={self.nu}, np={self.np}{dae})"


def _check_unique_names(model: Model) -> None:
    """Refuse a name given to two of the states, inputs, parameters and algebraic states (labels, CSV columns)."""
    seen: dict[str, str] = {}
    for what, labels in (("state_names", model.state_names), ("input_names", model.input_names),
                         ("param_names", model.param_names), ("algebraic_names", model.algebraic_names)):
        for i, label in enumerate(labels):
            where = f"{what}[{i}]"
            if label in seen:
                raise ValueError(f"model {model.name}: the name {label!r} is given to both {seen[label]} and {where}: "
                                 f"give every state, input, parameter and algebraic state its own name")
            seen[label] = where


def _check_finite_at_nominal(model: Model, function: ca.Function, what: str, labels: Sequence[str]) -> None:
    """Refuse equations that are not finite at the nominal point (x0, u0, p0, t = 0[, z0]), naming them."""
    args = [model.x0, model.u0, model.p0, 0.0] + ([model.z0] if model.nz else [])
    values = np.array(function(*args), dtype=float).reshape(-1)
    bad = [i for i in range(values.size) if not np.isfinite(values[i])]
    if bad:
        point = "(x0, z0, u0, p0, t = 0)" if model.nz else "(x0, u0, p0, t = 0)"
        names = ", ".join(f"{what}[{i}] ({labels[i]}) = {values[i]:g}" for i in bad[:4])
        more = f" and {len(bad) - 4} more" if len(bad) > 4 else ""
        raise ValueError(f"model {model.name}: {names}{more} at the nominal point {point}: the equations must be "
                         f"finite there; choose x0{', z0' if model.nz else ''}, u0 and p0 where they are defined, "
                         f"or fix the expression")


#: Relative size of the smallest singular value of dg/dz below which the
#: algebraic equations are taken as singular (index above 1).
SINGULAR_RTOL = 1e-10


def check_index_one(model: Model) -> None:
    """Raise ValueError unless dg/dz is nonsingular at the model's nominal point (x0, z0, u0, p0, t = 0).

    The message names the algebraic equations that do not determine z: those
    that do not depend on z at all (a constraint on x alone: index 2 or more),
    or those in the left null space of dg/dz.
    """
    Gz = ca.Function("g_z", [model.x, model.z, model.u, model.p, model.t], [ca.jacobian(model.alg, model.z)])
    G = np.array(Gz(model.x0, model.z0, model.u0, model.p0, 0.0), dtype=float)
    if not np.all(np.isfinite(G)):
        raise ValueError(f"dg/dz of model {model.name} is not finite at the nominal point (x0, z0, u0, p0): "
                         f"choose z0 where the algebraic equations are defined")
    sv = np.linalg.svd(G, compute_uv=False)
    scale = max(float(sv[0]), 1.0) if sv.size else 1.0
    if sv.size and sv[-1] > SINGULAR_RTOL * scale:
        return
    zero_rows = [i for i in range(model.nz) if not np.any(G[i] != 0.0)]
    if zero_rows:
        culprits = zero_rows
        why = "do not depend on z"
    else:
        U, s, _ = np.linalg.svd(G)
        null = U[:, s <= SINGULAR_RTOL * scale] if s.size else U
        culprits = [i for i in range(model.nz) if np.max(np.abs(null[i])) > 1e-8]
        why = "are linearly dependent in z"
    names = ", ".join(f"alg[{i}] ({model.alg[i]})"[:80] for i in culprits)
    raise ValueError(
        f"model {model.name}: dg/dz is singular at (x0, z0, u0, p0), so the algebraic equations {names} {why}: "
        f"the DAE is not of index 1 there. Differentiate a constraint on x alone until z appears (index "
        f"reduction), or give a z0 where dg/dz is nonsingular"
    )
