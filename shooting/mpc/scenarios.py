"""Closed-loop scenarios: what `shooting-codegen mpc --model M` runs.

A `Scenario` is plain data: the OCP (an `OCPProblem`: horizon, dt,
integrator, cost, constraints, solver), the start state, how long to
simulate and the plant's integrator. Each built-in model defines its own in
its module (``scenario(model)`` beside ``make_model``); `default_scenario`
finds it, or builds a plain regulation problem for any other model, and
`build_ocp` turns a scenario into a `MultipleShootingOCP`. Change fields with
``scenario.with_changes(horizon=30, hessian="gauss-newton", x0=[...])``.
A scenario may carry a time-varying reference ``reference(t) -> (x_ref,
u_ref)`` and model parameters ``parameters(t) -> p`` for its closed loop.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.loading import builtin_name, load_model, scenario_factory
from shooting.model import Model
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.mpc.problem import OCPProblem, QuadraticCost, problem_fields
from shooting.options import Hessian
from shooting.tableaus.tableau import ButcherTableau

__all__ = ["MAX_SIM_STEPS", "Scenario", "build_ocp", "check_scenario", "default_scenario"]

FloatArray = npt.NDArray[np.float64]

#: Most closed-loop steps of a scenario (each one solves the OCP).
MAX_SIM_STEPS = 1_000_000


@dataclass(frozen=True, eq=False, kw_only=True)
class Scenario:
    """A closed-loop MPC experiment: the OCP, the start state and the duration.

    Parameters
    ----------
    model : str
        Model spec for `shooting.load_model` (a built-in name or the model's name).
    problem : OCPProblem
        Horizon, dt, integrator, cost (weights and the target as ``x_ref``,
        ``u_ref``), constraints (bounds tighter than the model's) and solver.
    x0 : array_like, shape (nx,)
        Initial state of the closed loop.
    sim_steps : int
        Closed-loop steps K to simulate.
    description : str, default ""
        One line for reports.
    plant_method : str, default "dopri5"
        Integrator of the simulated plant.
    plant_steps : int, default 20
        Its substeps per sampling interval.
    reference : callable ``t -> (x_ref, u_ref)``, optional
        A time-varying reference for the closed loop (shapes (nx,) and (nu,);
        u_ref may be None), see `simulate_closed_loop`; the problem's
        ``x_ref``/``u_ref`` are then only the defaults of a plain solve.
    parameters : callable ``t -> p``, optional
        Time-varying model parameters (shape (np,)) for controller and plant.
    final_tolerance : float, optional
        What `shooting.sweep` counts as arrived, in the states' units: a case
        succeeds when max_i |x_K,i - x_ref,i| <= final_tolerance (failed
        solves on the way are counted apart). Default: each state on its own
        scale, |x_K,i - x_ref,i| <= 0.05 * max(1, |x0_i - x_ref,i|) (5 % of
        the nominal start's distance from the target in that state, at least
        0.05 of its unit; ``final_error_scaled <= 0.05``), so that metres and
        radians are not compared.

    Raises
    ------
    ValueError
        A non-positive step count, a non-finite `x0`, or a problem whose
        weights, references or bounds do not fit ``nx = len(x0)``.
    """

    model: str
    problem: OCPProblem
    x0: Any
    sim_steps: int
    description: str = ""
    plant_method: str = "dopri5"
    plant_steps: int = 20
    reference: Callable[[float], Any] | None = None
    parameters: Callable[[float], Any] | None = None
    final_tolerance: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"Scenario.model must be a model name or spec, got {self.model!r}")
        if not isinstance(self.problem, OCPProblem):
            raise ValueError(f"Scenario.problem must be a shooting.OCPProblem, got {type(self.problem).__name__}")
        x0 = _validate.array(self.x0, "Scenario.x0").reshape(-1)
        x0.setflags(write=False)
        object.__setattr__(self, "x0", x0)
        object.__setattr__(self, "sim_steps", _validate.integer(self.sim_steps, "Scenario.sim_steps", minimum=1,
                                                                maximum=MAX_SIM_STEPS))
        object.__setattr__(self, "plant_steps",
                           _validate.integer(self.plant_steps, "Scenario.plant_steps", minimum=1))
        if not isinstance(self.description, str):
            raise ValueError(f"Scenario.description must be a str, got {self.description!r}")
        if self.final_tolerance is not None:
            object.__setattr__(self, "final_tolerance",
                               _validate.positive_real(self.final_tolerance, "Scenario.final_tolerance"))
        for name in ("reference", "parameters"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise ValueError(f"Scenario.{name} must be a function of time t or None, got "
                                 f"{type(getattr(self, name)).__name__}")
        self._check_dimensions()

    def _check_dimensions(self) -> None:
        nx, nu, N = self.nx, self.nu, self.problem.horizon
        cost, con = self.problem.cost, self.problem.constraints
        sizes: list[tuple[str, Any, tuple[tuple[int, ...], ...]]] = [
            ("Q", cost.Q, ((nx, nx),)), ("Q_terminal", cost.Q_terminal, ((nx, nx),)),
            ("x_ref", cost.x_ref, ((nx,), (N + 1, nx))),
            ("x_min", con.x_min, ((nx,), (1,))), ("x_max", con.x_max, ((nx,), (1,))),
        ]
        if nu is not None:
            sizes += [("R", cost.R, ((nu, nu),)), ("R_delta", cost.R_delta, ((nu, nu),)),
                      ("u_ref", cost.u_ref, ((nu,), (N, nu))),
                      ("u_min", con.u_min, ((nu,), (1,))), ("u_max", con.u_max, ((nu,), (1,)))]
        for name, value, shapes in sizes:
            if value is not None and np.shape(value) not in shapes:
                raise ValueError(f"Scenario.{name} must be of shape {' or '.join(map(str, shapes))} for "
                                 f"nx = {nx}, nu = {nu}; got {np.shape(value)}")

    @property
    def nx(self) -> int:
        """Number of states (the length of `x0`)."""
        return int(self.x0.size)

    @property
    def nu(self) -> int | None:
        """Number of inputs, from the input weight or reference (None if neither is given)."""
        cost = self.problem.cost
        if cost.R is not None:
            return int(np.shape(cost.R)[0])
        if cost.u_ref is not None:
            return int(np.shape(cost.u_ref)[-1])
        return None

    def with_changes(self, **changes: object) -> Scenario:
        """A copy with fields of the scenario or of its problem changed (found by name).

        ``scenario.with_changes(horizon=30, x0=[0, 0.3, 0, 0], hessian="gauss-newton")``

        Raises
        ------
        ValueError
            A name that is neither a scenario field nor an `OCPProblem` field.
        """
        own = {f.name for f in dataclasses.fields(self)} - {"problem"}
        unknown = sorted(set(changes) - own - problem_fields())
        if unknown:
            raise ValueError(f"unknown scenario field(s) {unknown}; valid: "
                             f"{', '.join(sorted(own | problem_fields()))}")
        mine = {k: v for k, v in changes.items() if k in own}
        rest = {k: v for k, v in changes.items() if k not in own}
        problem = self.problem.with_changes(**rest) if rest else self.problem
        return dataclasses.replace(self, problem=problem, **mine)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (matrices as nested lists, unbounded limits as None, functions by name)."""

        def plain(v: object) -> object:
            if isinstance(v, np.ndarray):
                return [plain(e) for e in v] if v.ndim else plain(float(v))
            if isinstance(v, float) and not np.isfinite(v):
                return None
            if isinstance(v, ButcherTableau):
                return v.name or "custom"
            if callable(v):
                return getattr(v, "__name__", type(v).__name__)
            if isinstance(v, dict):
                return {str(k): plain(e) for k, e in v.items()}
            return v

        problem = self.problem
        out: dict[str, Any] = {"model": self.model}
        out.update({f.name: plain(getattr(problem, f.name)) for f in dataclasses.fields(problem)
                    if f.name not in ("cost", "constraints", "solver")})
        for group in (problem.cost, problem.constraints, problem.solver):
            out.update({f.name: plain(getattr(group, f.name)) for f in dataclasses.fields(group)})
        out.update({name: plain(getattr(self, name)) for name in
                    ("x0", "sim_steps", "description", "plant_method", "plant_steps", "reference", "parameters",
                     "final_tolerance")})
        return out


def regulation(model: Model) -> Scenario:
    """The generic scenario: regulation from ``model.x0`` to the point of the bounds nearest to zero.

    Q = I, R = 0.01 I, Q_terminal = Q, N = 20, dt = ``model.dt`` or 0.1,
    ``x_ref`` = zero clipped into ``[x_min, x_max]`` (a temperature bounded
    below by 300 K is not regulated to 0 K), ``u_ref = model.u0`` clipped into
    the input bounds, 50 closed-loop steps.

    Parameters
    ----------
    model : Model

    Returns
    -------
    Scenario
    """
    return Scenario(
        model=model.name,
        problem=OCPProblem(horizon=20, dt=model.dt or 0.1, cost=QuadraticCost(
            Q=np.ones(model.nx), R=np.full(model.nu, 0.01), Q_terminal=np.ones(model.nx),
            x_ref=np.clip(np.zeros(model.nx), model.x_min, model.x_max),
            u_ref=np.clip(model.u0, model.u_min, model.u_max))),
        x0=model.x0, sim_steps=50,
        description=f"regulation of {model.name} from its nominal x0 to the point of its bounds nearest zero",
    )


def default_scenario(model: Model | str) -> Scenario:
    """The default closed-loop scenario of a model.

    A model file (or module) defines its own as ``scenario(model)`` beside
    ``make_model``; `load_model` remembers it. The built-ins do so: cart-pole
    and pendulum swing-up from hanging, quadrotor flight from (1, 1, 1) to
    hover at the origin, Van der Pol regulation to the origin, two-link-arm
    swing-up, stiff-chain regulation to rest (with the implicit ``radau2``).
    Any other model: `regulation`.

    Parameters
    ----------
    model : Model or str
        A model, or a spec for `shooting.load_model`.

    Returns
    -------
    Scenario
    """
    if isinstance(model, str):
        model = load_model(model)
    if not isinstance(model, Model):
        raise ValueError(f"model must be a shooting.Model or a model spec, got {type(model).__name__}")
    factory = scenario_factory(model)
    if factory is not None:
        scenario = factory(model)
        if not isinstance(scenario, Scenario):
            raise ValueError(f"the scenario function of model {model.name} returned {type(scenario).__name__}, "
                             f"not a shooting.Scenario")
        if (scenario.nx, scenario.nu or model.nu) != (model.nx, model.nu):
            raise ValueError(f"the scenario of model {model.name} has nx={scenario.nx}, nu={scenario.nu} but the "
                             f"model has nx={model.nx}, nu={model.nu}")
        return scenario
    builtin = builtin_name(model)
    if builtin is not None:
        # A built-in made without load_model: its module by name (imported by
        # name: the models sit above this layer and import it).
        maker = getattr(importlib.import_module(f"shooting.models.{builtin}"), "scenario", None)
        built = maker(model) if callable(maker) else None
        if isinstance(built, Scenario):
            return built
    return regulation(model)


def check_scenario(scenario: Scenario, model: Model) -> None:
    """Raise ValueError now if `scenario` does not fit `model` (before any OCP is built).

    Checks the dimensions. References beyond the bounds are accepted (the
    OCP warns where their weight is nonzero).
    """
    if (model.nx, model.nu) != (scenario.nx, scenario.nu if scenario.nu is not None else model.nu):
        raise ValueError(f"model {model.name} has nx={model.nx}, nu={model.nu} but the scenario for "
                         f"{scenario.model} has nx={scenario.nx}, nu={scenario.nu}")


def build_ocp(
    scenario: Scenario,
    model: Model | None = None,
    *,
    hessian: Hessian | None = None,
    solver_options: dict[str, object] | None = None,
) -> MultipleShootingOCP:
    """The `MultipleShootingOCP` of a scenario.

    Parameters
    ----------
    scenario : Scenario
    model : Model, optional
        The model to control (default ``load_model(scenario.model)``); it must
        have the scenario's nx and nu.
    hessian : {"exact", "gauss-newton"}, optional
        Overrides the scenario's.
    solver_options : dict, optional
        Overrides the scenario's solver options.

    Returns
    -------
    MultipleShootingOCP

    Raises
    ------
    ValueError
        A model whose dimensions differ from the scenario's.
    """
    if not isinstance(scenario, Scenario):
        raise ValueError(f"scenario must be a shooting.Scenario, got {type(scenario).__name__}")
    if model is None:
        model = load_model(scenario.model)
    if not isinstance(model, Model):
        raise ValueError(f"model must be a shooting.Model, got {type(model).__name__}")
    check_scenario(scenario, model)
    changes: dict[str, object] = {}
    if hessian is not None:
        changes["hessian"] = hessian
    if solver_options is not None:
        changes["solver_options"] = solver_options
    problem = scenario.problem.with_changes(**changes) if changes else scenario.problem
    return MultipleShootingOCP.from_problem(model, problem)
