"""A validated symbolic model x' = f(x, u, p, t) built on CasADi SX."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

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

    Parameters
    ----------
    name : str
        Identifier (letters, digits, underscore); also used to name generated C.
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

    Attributes
    ----------
    nx, nu, np : int
        Numbers of states, inputs and parameters.
    f : casadi.Function
        ``f(x, u, p, t) -> xdot`` with named inputs and output; ``p`` is 0x1
        when the model has none, and ``t`` is accepted (and ignored) when the
        dynamics do not depend on time.

    Raises
    ------
    ValueError
        A non-symbolic or non-column input, a wrong shape, a symbol used twice,
        a free symbol in `xdot`, or inconsistent names, nominal values or bounds.
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
    ) -> None:
        self.name = _validate.identifier(name, "model name")
        self.x = _symbol_vector(x, "x", allow_none=False)
        if self.x.numel() == 0:
            raise ValueError("x is empty: a model needs at least one state")
        self.u = _symbol_vector(u, "u", allow_none=True)
        self.p = _symbol_vector(p, "p", allow_none=True)
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

        seen: dict[int, str] = {}
        for what, vec in (("x", self.x), ("u", self.u), ("p", self.p), ("t", self.t)):
            for i in range(vec.numel()):
                key = vec[i].element_hash()
                sym = vec[i].name()
                if key in seen:
                    raise ValueError(
                        f"symbol '{sym}' appears in both {seen[key]} and {what}: each symbol may be used once"
                    )
                seen[key] = what

        self.xdot = self._check_xdot(xdot)

        self.state_names = _validate.names(state_names, self.nx, "x", "state_names")
        self.input_names = _validate.names(input_names, self.nu, "u", "input_names")
        self.param_names = _validate.names(param_names, self.np, "p", "param_names")
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
        self.dt = None if dt is None else _validate.positive_real(dt, "dt")
        self.description = str(description)
        if not isinstance(time_unit, str) or not time_unit.strip() or len(time_unit) > 16:
            raise ValueError(f"time_unit must be a short unit name such as 's', 'min' or 'h', got {time_unit!r}")
        self.time_unit = time_unit.strip()

        self.f = ca.Function(
            "f",
            [self.x, self.u, self.p, self.t],
            [self.xdot],
            ["x", "u", "p", "t"],
            ["xdot"],
        )

    def _check_xdot(self, xdot: object) -> ca.SX:
        if isinstance(xdot, (list, tuple)):
            try:
                xdot = ca.vertcat(*xdot)
            except Exception:  # noqa: BLE001 - anything casadi rejects is a user error here
                raise ValueError("xdot is a list that casadi cannot stack: give an SX column vector") from None
        if isinstance(xdot, ca.MX):
            raise ValueError("xdot is a casadi.MX expression; build the model from SX symbols")
        if isinstance(xdot, (ca.DM, np.ndarray, int, float)):
            xdot = ca.SX(ca.DM(xdot))
        if not isinstance(xdot, ca.SX):
            raise ValueError(f"xdot must be a casadi.SX expression, got {type(xdot).__name__}")
        if xdot.shape != (self.nx, 1):
            raise ValueError(
                f"xdot has shape {xdot.shape} but x has shape ({self.nx}, 1): give one derivative per state"
            )
        allowed = {s.element_hash() for v in (self.x, self.u, self.p, self.t) for s in ca.symvar(v)}
        free = [s.name() for s in ca.symvar(xdot) if s.element_hash() not in allowed]
        if free:
            raise ValueError(
                f"xdot depends on free symbol(s) {', '.join(repr(n) for n in free)} that are not in x, u, p or t: "
                f"declare them as parameters (p) or substitute numbers"
            )
        return ca.densify(xdot)

    @property
    def expression_hash(self) -> str:
        """SHA-256 of the serialised right-hand side, to tell generated code apart."""
        return hashlib.sha256(self.f.serialize().encode()).hexdigest()

    def __repr__(self) -> str:
        return f"Model({self.name!r}, nx={self.nx}, nu={self.nu}, np={self.np})"
