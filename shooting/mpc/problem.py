"""The optimal control problem as data: cost, constraints and solver settings, grouped.

As rockit and acados separate the problem from the method and the solver,
an `OCPProblem` holds the discretisation (horizon, dt, tableau, substeps),
a `QuadraticCost`, `Constraints` and `SolverSettings`. Each group is a frozen,
validated record; the dimensions are checked against a model when
`MultipleShootingOCP.from_problem` builds the NLP. Field names are exactly the
keywords of `MultipleShootingOCP`, so ``problem.with_changes(horizon=30,
hessian="gauss-newton")`` finds the group of each field by its name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import casadi as ca

from shooting import _validate
from shooting.integrate.integrator import resolve_tableau
from shooting.options import HESSIANS, NLP_SOLVERS, Hessian, NLPSolver
from shooting.tableaus.tableau import ButcherTableau

__all__ = ["MAX_HORIZON", "Constraints", "OCPProblem", "QuadraticCost", "SolverSettings", "StageFunction",
           "TerminalFunction", "column_expression", "problem_fields", "scalar_expression"]

#: Most shooting intervals. The NLP's memory and build time grow linearly
#: with N: measured on `shooting-codegen mpc` (build, first solve, 1-2
#: closed-loop samples), the quadrotor (nx = 13) took 1.36 GB and 21 s at
#: N = 1000, the cart-pole 0.30 GB / 12 s at 1000, 1.23 GB / 89 s at 5000 and
#: 2.4 GB / 395 s at the former maximum 10000 (where the quadrotor would need
#: ~14 GB). At 1000 every built-in model stays within 2 GB, and a horizon of
#: 1000 samples is far beyond an MPC's (tens to a few hundred).
MAX_HORIZON = 1000

#: ``(x, u, p) -> SX``: an extra stage cost (scalar) or path constraints (column).
StageFunction = Callable[[ca.SX, ca.SX, ca.SX], ca.SX]
#: ``(x, p) -> SX``: an extra terminal cost (scalar) or terminal constraints (column).
TerminalFunction = Callable[[ca.SX, ca.SX], ca.SX]


def scalar_expression(expr: Any, what: str) -> ca.SX:
    """`expr` as a scalar SX (what a cost function returns); a ValueError naming `what` otherwise."""
    e = expr if isinstance(expr, ca.SX) else ca.SX(expr)
    if e.shape != (1, 1):
        raise ValueError(f"{what} must return a scalar expression, got shape {e.shape}")
    return e


def column_expression(expr: Any, what: str) -> ca.SX:
    """`expr` as an SX column (what a constraint function returns); a ValueError naming `what` otherwise."""
    e = expr if isinstance(expr, ca.SX) else ca.SX(expr)
    if e.size2() != 1:
        raise ValueError(f"{what} must return a column vector, got shape {e.shape}")
    return e


def _callable(value: object, what: str) -> None:
    if value is not None and not callable(value):
        raise ValueError(f"{what} must be a function or None, got {type(value).__name__}")


@dataclass(frozen=True, kw_only=True, eq=False)
class QuadraticCost:
    """``sum_{k<N} |x_k - xr_k|_Q^2 + |u_k - ur_k|_R^2 + |u_k - u_{k-1}|_{R_delta}^2 + |x_N - xr_N|_{Q_terminal}^2``.

    Plus extra terms. No factor 1/2 and no dt weighting; u_{-1} is the input
    applied before the horizon (``solve(..., u_prev=...)``, zero by default).

    Parameters
    ----------
    Q : array_like, shape (nx, nx) or (nx,), optional
        State weight (a vector is a diagonal); default the identity.
    R : array_like, shape (nu, nu) or (nu,), optional
        Input weight; default 0.01 I.
    Q_terminal : array_like, shape (nx, nx) or (nx,), optional
        Terminal weight; default `Q`.
    R_delta : array_like, shape (nu, nu) or (nu,), optional
        Weight of the input changes u_k - u_{k-1}, k = 0..N-1 (do-mpc's
        ``rterm``); default none (zero).
    x_ref : array_like, shape (nx,) or (N+1, nx), optional
        State reference (default zeros); each solve may override it.
    u_ref : array_like, shape (nu,) or (N, nu), optional
        Input reference (default zeros).
    stage_cost : callable ``(x, u, p) -> SX scalar``, optional
        Added at every stage k < N.
    terminal_cost : callable ``(x, p) -> SX scalar``, optional
        Added at x_N.

    Raises
    ------
    ValueError
        A weight that is not symmetric positive semi-definite, non-finite
        references, or a cost that is not callable.
    """

    Q: Any = None
    R: Any = None
    Q_terminal: Any = None
    R_delta: Any = None
    x_ref: Any = None
    u_ref: Any = None
    stage_cost: StageFunction | None = None
    terminal_cost: TerminalFunction | None = None

    def __post_init__(self) -> None:
        for name in ("Q", "R", "Q_terminal", "R_delta"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _validate.weight(value, None, name))
        for name in ("x_ref", "u_ref"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _validate.array(value, name))
        _callable(self.stage_cost, "stage_cost")
        _callable(self.terminal_cost, "terminal_cost")


@dataclass(frozen=True, kw_only=True, eq=False)
class Constraints:
    """Bounds and general constraints of the OCP.

    Parameters
    ----------
    x_min, x_max : array_like, shape (nx,) or scalar, optional
        Bounds on x_1..x_N (default: the model's; +-inf for none).
    u_min, u_max : array_like, shape (nu,) or scalar, optional
        Bounds on every u_k (default: the model's).
    path_constraints : callable ``(x, u, p) -> SX column``, optional
        h(x_k, u_k, p) <= 0 for k < N.
    terminal_constraints : callable ``(x, p) -> SX column``, optional
        c(x_N, p) = 0.
    soft_x_bounds : bool, default False
        Soften the state bounds: ``x_min - s <= x_k <= x_max + s``, ``s >= 0``
        (one slack per bounded state and stage 1..N), so that a state outside
        its bounds (a disturbance, model mismatch) never makes the problem
        infeasible. Input bounds stay hard.
    soft_path_constraints : bool, default False
        Soften the path constraints the same way: ``h(x_k, u_k, p) <= s_k``,
        ``s_k >= 0`` (one slack per row and stage, the same weights). Terminal
        constraints stay hard.
    slack_l1, slack_l2 : float, default 1e3 and 1e2
        The slacks' cost ``slack_l1 * sum(s) + slack_l2 * sum(s^2)`` (exact
        penalty: with `slack_l1` above the bounds' multipliers the soft
        solution equals the hard one whenever that is feasible).

    Raises
    ------
    ValueError
        NaN in a bound, a constraint that is not callable, or negative,
        non-finite or overflowing slack weights (above 1e150;
        both zero with soft bounds).
    """

    x_min: Any = None
    x_max: Any = None
    u_min: Any = None
    u_max: Any = None
    path_constraints: StageFunction | None = None
    terminal_constraints: TerminalFunction | None = None
    soft_x_bounds: bool = False
    soft_path_constraints: bool = False
    slack_l1: float = 1e3
    slack_l2: float = 1e2

    def __post_init__(self) -> None:
        object.__setattr__(self, "soft_x_bounds", _validate.flag(self.soft_x_bounds, "soft_x_bounds"))
        object.__setattr__(self, "soft_path_constraints", _validate.flag(self.soft_path_constraints,
                                                                         "soft_path_constraints"))
        for name in ("slack_l1", "slack_l2"):
            object.__setattr__(self, name, _validate.real(getattr(self, name), name, minimum=0.0,
                                                          maximum=_validate.MAX_WEIGHT))
        if (self.soft_x_bounds or self.soft_path_constraints) and self.slack_l1 == 0 and self.slack_l2 == 0:
            which = "soft_x_bounds" if self.soft_x_bounds else "soft_path_constraints"
            raise ValueError(f"{which} with slack_l1 = slack_l2 = 0 leaves the slacks free (the constraints would "
                             "mean nothing): give slack_l1 > 0 and/or slack_l2 > 0")
        for name in ("x_min", "x_max", "u_min", "u_max"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _validate.array(value, name, allow_inf=True).reshape(-1))
        _callable(self.path_constraints, "path_constraints")
        _callable(self.terminal_constraints, "terminal_constraints")


@dataclass(frozen=True, kw_only=True, eq=False)
class SolverSettings:
    """How the NLP is solved.

    Parameters
    ----------
    solver : {"ipopt", "fatrop"}, default "ipopt"
        IPOPT, or CasADi's fatrop (exploits the stage structure).
    hessian : {"exact", "gauss-newton"}, default "exact"
        "gauss-newton": the Hessian of the cost only.
    solver_options : mapping, optional
        Passed to ``casadi.nlpsol`` over the defaults (e.g. ``{"ipopt.tol": 1e-10}``).
    jit : bool, default False
        Compile the NLP functions with the system C compiler at build time,
        in every process (CasADi's jit).
    compile_nlp : bool or None, default None
        Compile the NLP functions once per problem into the per-user cache
        and reuse them in later processes (`shooting.mpc.nlp_cache`); None
        reads ``$SHOOTING_COMPILE_NLP`` (off when unset, and with `jit`).
        Falls back to the uncompiled functions, with a warning, when there is
        no compiler or no writable cache.
    """

    solver: NLPSolver = "ipopt"
    hessian: Hessian = "exact"
    solver_options: Mapping[str, object] | None = None
    jit: bool = False
    compile_nlp: bool | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "solver", _validate.choice(self.solver, NLP_SOLVERS, "solver"))
        object.__setattr__(self, "hessian", _validate.choice(self.hessian, HESSIANS, "hessian"))
        if self.solver_options is not None and not isinstance(self.solver_options, Mapping):
            raise ValueError(f"solver_options must be a dict of solver options, got "
                             f"{type(self.solver_options).__name__}")
        object.__setattr__(self, "solver_options", dict(self.solver_options or {}))
        object.__setattr__(self, "jit", _validate.flag(self.jit, "jit"))
        if self.compile_nlp is not None:
            object.__setattr__(self, "compile_nlp", _validate.flag(self.compile_nlp, "compile_nlp"))
        if self.jit and self.compile_nlp:
            raise ValueError("jit=True and compile_nlp=True both compile the NLP (jit in every process, compile_nlp "
                             "once into the cache): choose one")


@dataclass(frozen=True, kw_only=True, eq=False)
class OCPProblem:
    """A multiple-shooting OCP without its model: discretisation, cost, constraints, solver.

    Parameters
    ----------
    horizon : int
        Shooting intervals N.
    dt : float
        Interval length [s].
    method : str or ButcherTableau, default "rk4"
        Integrator tableau.
    steps : int, default 1
        Integrator substeps per interval.
    cost : QuadraticCost, optional
    constraints : Constraints, optional
    solver : SolverSettings, optional
    x_scale, u_scale : "auto", None or array_like, shapes (nx,) and (nu,)
        The solvers work in x / x_scale and u / u_scale (`shooting.mpc.scaling`):
        "auto" (or None, the default) from the finite bounds, else the nominal
        values and references; or positive numbers per variable. The answer
        and every interface stay in the model's units.

    Raises
    ------
    ValueError
        A non-positive horizon, dt or step count, an unknown tableau, a
        group of the wrong type, a scale that is not positive.
    """

    horizon: int
    dt: float
    method: str | ButcherTableau = "rk4"
    steps: int = 1
    cost: QuadraticCost = field(default_factory=QuadraticCost)
    constraints: Constraints = field(default_factory=Constraints)
    solver: SolverSettings = field(default_factory=SolverSettings)
    x_scale: object = None
    u_scale: object = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "horizon", _validate.integer(self.horizon, "horizon", minimum=1,
                                                              maximum=MAX_HORIZON))
        object.__setattr__(self, "dt", _validate.positive_real(self.dt, "dt"))
        object.__setattr__(self, "steps", _validate.integer(self.steps, "steps", minimum=1))
        resolve_tableau(self.method)  # an unknown name is reported here, before any build
        for name, kind in (("cost", QuadraticCost), ("constraints", Constraints), ("solver", SolverSettings)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name} must be a shooting.{kind.__name__}, got {type(getattr(self, name)).__name__}")
        for name in ("x_scale", "u_scale"):
            object.__setattr__(self, name, _validate.scale(getattr(self, name), None, name))  # (None: "auto")

    @property
    def tableau(self) -> ButcherTableau:
        """The integrator tableau (`method` resolved)."""
        return resolve_tableau(self.method)

    def with_changes(self, **changes: object) -> OCPProblem:
        """A copy with fields changed, each found in its group by name.

        ``problem.with_changes(horizon=30, Q=[1, 1], hessian="gauss-newton")``
        changes the horizon, the cost's Q and the solver's Hessian.

        Raises
        ------
        ValueError
            A name that is no field of the problem or its groups.
        """
        unknown = sorted(set(changes) - problem_fields() - set(_GROUPS))
        if unknown:
            raise ValueError(f"unknown OCP field(s) {unknown}; valid: {', '.join(sorted(problem_fields()))}")
        own = {f.name for f in dataclasses.fields(self)}
        updates: dict[str, Any] = {k: v for k, v in changes.items() if k in own}
        for group, kind in _GROUPS.items():
            mine = {k: v for k, v in changes.items() if k in {f.name for f in dataclasses.fields(kind)}}
            if mine:
                updates[group] = dataclasses.replace(updates.get(group, getattr(self, group)), **mine)
        return dataclasses.replace(self, **updates)


_GROUPS: dict[str, type] = {"cost": QuadraticCost, "constraints": Constraints, "solver": SolverSettings}


def problem_fields() -> set[str]:
    """Every name `OCPProblem.with_changes` accepts (the problem's and its groups' fields)."""
    names = {f.name for f in dataclasses.fields(OCPProblem)} - set(_GROUPS)
    for kind in _GROUPS.values():
        names |= {f.name for f in dataclasses.fields(kind)}
    return names
