"""Named scenarios beyond each model's default: a time-varying reference, and the input-rate penalty.

`named_scenario(model, name)` returns a model's scenario by name
(``"default"`` is `default_scenario`); `scenario_names(model)` lists them;
``shooting-codegen mpc --model M --scenario NAME`` runs one.

- cartpole ``"tracking"``: the cart follows the sinusoid
  p_ref(t) = A (1 - cos(2 pi t / T)) (A = 0.5 m, T = 4 s: from rest at the
  origin to 1 m and back) with the pole upright; the reference carries the
  matching velocity p_ref'(t). It starts at rest on the reference.
- pendulum ``"hold"``: from hanging, hold the pendulum 0.6 rad off the
  hanging position, which takes a constant torque m g l sin(0.6) = 5.5 N m.
  An input weight R on tau - 0 would trade that torque against the angle and
  settle with an offset; here the input is weighted through its changes
  only (R = 0, R_delta > 0), so it settles on the reference and the torque
  moves smoothly.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shooting.loading import builtin_name, load_model
from shooting.model import Model
from shooting.mpc.controllers import ReferenceFunction
from shooting.mpc.problem import OCPProblem, QuadraticCost
from shooting.mpc.scenarios import Scenario, default_scenario

__all__ = ["cartpole_tracking", "named_scenario", "pendulum_hold", "scenario_names", "sinusoid_reference"]

#: Cart-pole tracking: amplitude [m] and period [s] of the cart's reference.
CART_AMPLITUDE, CART_PERIOD = 0.5, 4.0
#: Pendulum hold: the angle held, measured from hanging [rad].
HOLD_OFFSET = 0.6


def sinusoid_reference(amplitude: float, period: float, nx: int, position: int, velocity: int,
                       base: np.ndarray | None = None) -> ReferenceFunction:
    """``t -> (x_ref, None)``: state `position` at ``amplitude (1 - cos(2 pi t / period))``, `velocity` its rate.

    Parameters
    ----------
    amplitude : float
    period : float
        [s]
    nx : int
        Length of x_ref.
    position, velocity : int
        Indices of the position and its velocity in the state.
    base : ndarray, shape (nx,), optional
        The other states' reference (default zeros).

    Returns
    -------
    callable
        ``reference(t) -> (x_ref (nx,), None)``: no input reference (the OCP's own).
    """
    omega = 2.0 * np.pi / period
    rest = np.zeros(nx) if base is None else np.asarray(base, dtype=float)

    def sinusoid(t: float) -> tuple[np.ndarray, None]:
        x = rest.copy()
        x[position] = amplitude * (1.0 - np.cos(omega * t))
        x[velocity] = amplitude * omega * np.sin(omega * t)
        return x, None

    return sinusoid


def cartpole_tracking(model: Model) -> Scenario:
    """The cart follows ``0.5 (1 - cos(pi t / 2))`` m with the pole upright, for two periods (8 s).

    N = 30 (1.5 s), dt = 0.05 s, rk4; Q = diag(100, 10, 1, 0.1) on (p, theta,
    v, omega), R = 0.01, Q_terminal = Q; no input reference.

    Parameters
    ----------
    model : Model
        The cart-pole (nx = 4, nu = 1).

    Returns
    -------
    Scenario
    """
    q = [100.0, 10.0, 1.0, 0.1]
    return Scenario(
        model=model.name,
        problem=OCPProblem(horizon=30, dt=0.05, method="rk4", steps=1,
                           cost=QuadraticCost(Q=q, R=[1e-2], Q_terminal=q, x_ref=np.zeros(4), u_ref=[0.0])),
        x0=np.zeros(4), sim_steps=160,
        reference=sinusoid_reference(CART_AMPLITUDE, CART_PERIOD, 4, position=0, velocity=2),
        description=f"the cart tracks p_ref(t) = {CART_AMPLITUDE:g} (1 - cos(2 pi t / {CART_PERIOD:g} s)) m "
                    f"with the pole upright (two periods)",
    )


def pendulum_hold(model: Model) -> Scenario:
    """Hold the pendulum 0.6 rad off hanging, input weighted by its rate only (R = 0, R_delta = 0.05).

    N = 40 (2 s), dt = 0.05 s; Q = diag(10, 0.1) on (theta, omega); from
    hanging at rest, 100 samples (5 s).

    Parameters
    ----------
    model : Model
        The pendulum (nx = 2, nu = 1).

    Returns
    -------
    Scenario
    """
    target = np.array([np.pi - HOLD_OFFSET, 0.0])
    return Scenario(
        model=model.name,
        problem=OCPProblem(horizon=40, dt=0.05, method="rk4", steps=1,
                           cost=QuadraticCost(Q=[10.0, 0.1], R=[0.0], R_delta=[0.05], Q_terminal=[10.0, 0.1],
                                              x_ref=target, u_ref=[0.0])),
        x0=model.x0, sim_steps=100,
        description=f"hold {HOLD_OFFSET:g} rad off hanging (a constant torque) with the input weighted by its "
                    f"rate only (R = 0, R_delta = 0.05): no offset",
    )


#: Built-in models' named scenarios besides "default".
SCENARIOS: dict[str, dict[str, Callable[[Model], Scenario]]] = {
    "cartpole": {"tracking": cartpole_tracking},
    "pendulum": {"hold": pendulum_hold},
}


def scenario_names(model: Model | str) -> list[str]:
    """The scenario names `named_scenario` knows for `model`: ``"default"`` first.

    Parameters
    ----------
    model : Model or str
        A model, or a spec for `shooting.load_model`.

    Returns
    -------
    list of str
    """
    return ["default", *_named(model)]


def _named(model: Model | str) -> dict[str, Callable[[Model], Scenario]]:
    """The named scenarios of a built-in model (none for a user's model, whatever its name)."""
    if isinstance(model, str):
        model = load_model(model)
    builtin = builtin_name(model) if isinstance(model, Model) else None
    return SCENARIOS.get(builtin, {}) if builtin is not None else {}


def named_scenario(model: Model | str, name: str = "default") -> Scenario:
    """A model's scenario by name: ``"default"`` (`default_scenario`) or one of `scenario_names`.

    Parameters
    ----------
    model : Model or str
        A model, or a spec for `shooting.load_model`.
    name : str, default "default"

    Returns
    -------
    Scenario

    Raises
    ------
    ValueError
        An unknown name (the message lists the model's), or a model whose
        dimensions do not fit the named scenario.
    """
    if isinstance(model, str):
        model = load_model(model)
    if not isinstance(model, Model):
        raise ValueError(f"model must be a shooting.Model or a model spec, got {type(model).__name__}")
    if name == "default":
        return default_scenario(model)
    factory = _named(model).get(name) if isinstance(name, str) else None
    if factory is None:
        raise ValueError(f"model {model.name} has no scenario {name!r}: choose one of "
                         f"{', '.join(scenario_names(model))}")
    scenario = factory(model)
    if (scenario.nx, scenario.nu) != (model.nx, model.nu):
        raise ValueError(f"scenario {name!r} is for the built-in {model.name} (nx={scenario.nx}, "
                         f"nu={scenario.nu}); this model has nx={model.nx}, nu={model.nu}")
    return scenario
