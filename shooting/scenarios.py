"""Default closed-loop scenarios: what `shooting-codegen mpc --model M` runs.

A `Scenario` is plain data: the OCP's horizon, sampling time, integrator and
weights, the start state, the target, and how long to simulate.
`default_scenario` returns a tuned one for each built-in model (checked in
closed loop by tests/test_closed_loop.py) and a plain regulation problem for
any other model; `build_ocp` turns a scenario into a `MultipleShootingOCP`.
Change a field with ``dataclasses.replace(scenario, horizon=30)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shooting.model import Model
from shooting.tableau import ButcherTableau

__all__ = ["Scenario", "build_ocp", "default_scenario"]


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"Scenario.{what} must be an integer >= 1, got {value!r}")
    return int(value)


def _vec(value: object, n: int | None, what: str, *, allow_inf: bool = False) -> np.ndarray:
    try:
        arr = np.array(value, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"Scenario.{what} must be a vector of numbers, got {value!r}") from None
    if n is not None and arr.size != n:
        raise ValueError(f"Scenario.{what} has {arr.size} entries but needs {n}")
    bad = np.isnan(arr) if allow_inf else ~np.isfinite(arr)
    if bad.any():
        raise ValueError(f"Scenario.{what} contains {'NaN' if allow_inf else 'NaN or inf'}: {arr}")
    arr.setflags(write=False)
    return arr


def _weight(value: object, n: int, what: str) -> np.ndarray:
    W = np.array(value, dtype=float)
    if W.ndim <= 1 and W.size == n:
        W = np.diag(W.reshape(-1))
    if W.shape != (n, n) or not np.isfinite(W).all():
        raise ValueError(f"Scenario.{what} must be a finite ({n}, {n}) matrix or {n} diagonal entries, "
                         f"got shape {np.shape(value)}")
    if not np.allclose(W, W.T) or np.linalg.eigvalsh((W + W.T) / 2).min() < -1e-12 * max(1.0, np.abs(W).max()):
        raise ValueError(f"Scenario.{what} must be symmetric positive semi-definite")
    W.setflags(write=False)
    return W


@dataclass(frozen=True, eq=False, kw_only=True)
class Scenario:
    """A closed-loop MPC experiment: OCP settings, start, target and duration.

    Parameters
    ----------
    model : str
        Model spec for `shooting.load_model` (a built-in name or the model's name).
    horizon : int
        Shooting intervals N of the OCP.
    dt : float
        Interval length and sampling time [s].
    method : str or ButcherTableau, default "rk4"
        Integrator of the OCP.
    steps : int, default 1
        Integrator substeps per interval.
    Q : array_like, shape (nx, nx) or (nx,)
        State weight (a vector is a diagonal).
    R : array_like, shape (nu, nu) or (nu,)
        Input weight.
    Q_terminal : array_like, shape (nx, nx) or (nx,)
        Terminal state weight.
    x0 : array_like, shape (nx,)
        Initial state of the closed loop.
    x_ref : array_like, shape (nx,)
        Target state.
    u_ref : array_like, shape (nu,)
        Input reference (e.g. the hover thrust).
    sim_steps : int
        Closed-loop steps K to simulate.
    description : str, default ""
        One line for reports.
    x_min, x_max : array_like, shape (nx,), optional
        State bounds of the OCP, tighter than the model's (default: the model's).
    u_min, u_max : array_like, shape (nu,), optional
        Input bounds of the OCP (default: the model's).
    plant_method : str, default "dopri5"
        Integrator of the simulated plant.
    plant_steps : int, default 20
        Its substeps per sampling interval.
    hessian : {"exact", "gauss-newton"}, default "exact"
        Hessian of the OCP's Lagrangian (see `MultipleShootingOCP`).

    Raises
    ------
    ValueError
        A non-positive horizon, dt or step count, weights or vectors of the
        wrong size, non-finite numbers, or an indefinite weight.
    """

    model: str
    horizon: int
    dt: float
    method: str | ButcherTableau = "rk4"
    steps: int = 1
    Q: np.ndarray
    R: np.ndarray
    Q_terminal: np.ndarray
    x0: np.ndarray
    x_ref: np.ndarray
    u_ref: np.ndarray
    sim_steps: int
    description: str = ""
    x_min: np.ndarray | None = None
    x_max: np.ndarray | None = None
    u_min: np.ndarray | None = None
    u_max: np.ndarray | None = None
    plant_method: str = "dopri5"
    plant_steps: int = 20
    hessian: str = "exact"

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"Scenario.model must be a model name or spec, got {self.model!r}")
        put("horizon", _int(self.horizon, "horizon"))
        put("steps", _int(self.steps, "steps"))
        put("sim_steps", _int(self.sim_steps, "sim_steps"))
        put("plant_steps", _int(self.plant_steps, "plant_steps"))
        if isinstance(self.dt, bool) or not isinstance(self.dt, (int, float, np.floating)) \
                or not np.isfinite(self.dt) or self.dt <= 0:
            raise ValueError(f"Scenario.dt must be a positive number of seconds, got {self.dt!r}")
        put("dt", float(self.dt))
        if self.hessian not in ("exact", "gauss-newton"):
            raise ValueError(f"Scenario.hessian must be 'exact' or 'gauss-newton', got {self.hessian!r}")
        if not isinstance(self.method, (str, ButcherTableau)):
            raise ValueError(f"Scenario.method must be a tableau name or a ButcherTableau, got {self.method!r}")
        put("x0", _vec(self.x0, None, "x0"))
        nx = self.x0.size
        put("x_ref", _vec(self.x_ref, nx, "x_ref"))
        put("u_ref", _vec(self.u_ref, None, "u_ref"))
        nu = self.u_ref.size
        put("Q", _weight(self.Q, nx, "Q"))
        put("R", _weight(self.R, nu, "R"))
        put("Q_terminal", _weight(self.Q_terminal, nx, "Q_terminal"))
        for name, n in (("x_min", nx), ("x_max", nx), ("u_min", nu), ("u_max", nu)):
            if getattr(self, name) is not None:
                put(name, _vec(getattr(self, name), n, name, allow_inf=True))

    @property
    def nx(self) -> int:
        """Number of states."""
        return int(self.x0.size)

    @property
    def nu(self) -> int:
        """Number of inputs."""
        return int(self.u_ref.size)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (matrices as nested lists, unbounded limits as None)."""

        def plain(v: object) -> object:
            if isinstance(v, np.ndarray):
                return [plain(e) for e in v] if v.ndim else plain(float(v))
            if isinstance(v, float) and not np.isfinite(v):
                return None
            if isinstance(v, ButcherTableau):
                return v.name or "custom"
            return v

        fields = ("model", "horizon", "dt", "method", "steps", "Q", "R", "Q_terminal", "x0", "x_ref",
                  "u_ref", "sim_steps", "description", "x_min", "x_max", "u_min", "u_max",
                  "plant_method", "plant_steps", "hessian")
        return {name: plain(getattr(self, name)) for name in fields}


def _cartpole(model: Model) -> Scenario:
    # acados' minimal example (Tf = 1 s, N = 20, Fmax = 80) with its weights
    # W = 2 diag(1e3, 1e3, 1e-2, 1e-2, 1e-2) under acados' factor 1/2, i.e.
    # these exact weights in our cost without 1/2.
    return Scenario(
        model=model.name, horizon=20, dt=0.05, method="rk4", steps=1,
        Q=[1e3, 1e3, 1e-2, 1e-2], R=[1e-2], Q_terminal=[1e3, 1e3, 1e-2, 1e-2],
        x0=model.x0, x_ref=np.zeros(4), u_ref=[0.0], sim_steps=100,
        description="swing-up from hanging (theta = pi) to upright at the origin, |F| <= 80 N",
    )


def _pendulum(model: Model) -> Scenario:
    return Scenario(
        model=model.name, horizon=40, dt=0.05, method="rk4", steps=1,
        Q=[10.0, 0.1], R=[0.01], Q_terminal=[10.0, 0.1],
        x0=model.x0, x_ref=np.zeros(2), u_ref=[0.0], sim_steps=100,
        description="swing-up from hanging (theta = pi) with |tau| <= 8 N m, less than m g l",
    )


def _quadrotor(model: Model) -> Scenario:
    # Target: hover at the origin, level (identity quaternion, not zeros), at
    # the hover thrust u0.
    x_ref = np.zeros(13)
    x_ref[3] = 1.0
    q = [10.0] * 3 + [1.0] * 4 + [1.0] * 3 + [0.1] * 3
    return Scenario(
        model=model.name, horizon=30, dt=0.05, method="rk4", steps=1,
        Q=q, R=[1.0] * 4, Q_terminal=q,
        x0=model.x0, x_ref=x_ref, u_ref=model.u0, sim_steps=80,
        description="point-to-point from (1, 1, 1) at rest to hover at the origin",
    )


def _vanderpol(model: Model) -> Scenario:
    return Scenario(
        model=model.name, horizon=20, dt=model.dt or 0.1, method="rk4", steps=1,
        Q=[1.0, 1.0], R=[0.1], Q_terminal=[10.0, 10.0],
        x0=model.x0, x_ref=np.zeros(2), u_ref=[0.0], sim_steps=80,
        description="regulation to the origin (unstable for u = 0), |u| <= 1",
    )


def _two_link_arm(model: Model) -> Scenario:
    return Scenario(
        model=model.name, horizon=40, dt=0.05, method="rk4", steps=1,
        Q=[100.0, 100.0, 0.1, 0.1], R=[0.01, 0.01], Q_terminal=[100.0, 100.0, 0.1, 0.1],
        x0=model.x0, x_ref=np.zeros(4), u_ref=[0.0, 0.0], sim_steps=100,
        description="swing-up from hanging (q1 = pi) to upright, |tau1| <= 20, |tau2| <= 10 N m",
    )


def _stiff_chain(model: Model) -> Scenario:
    # rk4 diverges at dt = 0.05 (h lambda = -50); the L-stable radau2 takes one
    # step. Gauss-Newton: the dynamics are linear but for the wall spring's
    # cubic term, and the exact Hessian of the implicit step is costly to build.
    # The plant uses radau3 (dopri5's 20 substeps would sit near its stability limit).
    n = model.nx // 2
    return Scenario(
        model=model.name, horizon=20, dt=0.05, method="radau2", steps=1,
        Q=[10.0] * n + [1.0] * n, R=[0.01], Q_terminal=[10.0] * n + [1.0] * n,
        x0=model.x0, x_ref=np.zeros(2 * n), u_ref=[0.0], sim_steps=60,
        description="regulation to rest from every mass displaced by 0.5 m, |F| <= 10 N "
                    "(implicit radau2: rk4 is unstable at dt = 0.05)",
        plant_method="radau3", plant_steps=10, hessian="gauss-newton",
    )


_BUILTIN = {
    "cartpole": _cartpole,
    "pendulum": _pendulum,
    "quadrotor": _quadrotor,
    "vanderpol": _vanderpol,
    "two_link_arm": _two_link_arm,
    "stiff_chain": _stiff_chain,
}

def default_scenario(model: Model | str) -> Scenario:
    """The default closed-loop scenario of a model.

    Built-ins: cart-pole and pendulum swing-up from hanging, quadrotor flight
    from (1, 1, 1) to hover at the origin, Van der Pol regulation to the
    origin, two-link-arm swing-up, stiff-chain regulation to rest (with the
    implicit ``radau2``). Any other model: regulation to zero from ``model.x0``
    with Q = I, R = 0.01 I, Q_terminal = Q, N = 20, dt = ``model.dt`` or 0.1,
    ``u_ref = model.u0``, 50 steps.

    Parameters
    ----------
    model : Model or str
        A model, or a spec for `shooting.load_model`.

    Returns
    -------
    Scenario
    """
    if isinstance(model, str):
        from shooting.loading import load_model

        model = load_model(model)
    if not isinstance(model, Model):
        raise ValueError(f"model must be a shooting.Model or a model spec, got {type(model).__name__}")
    maker = _BUILTIN.get(model.name)
    if maker is not None:
        try:
            scenario = maker(model)
        except ValueError:  # a user model that only shares a built-in's name
            scenario = None
        if scenario is not None and (scenario.nx, scenario.nu) == (model.nx, model.nu):
            return scenario
    return Scenario(
        model=model.name, horizon=20, dt=model.dt or 0.1, method="rk4", steps=1,
        Q=np.ones(model.nx), R=np.full(model.nu, 0.01), Q_terminal=np.ones(model.nx),
        x0=model.x0, x_ref=np.zeros(model.nx), u_ref=model.u0, sim_steps=50,
        description=f"regulation of {model.name} to zero from its nominal x0",
    )


def build_ocp(
    scenario: Scenario,
    model: Model | None = None,
    *,
    hessian: str | None = None,
    solver_options: dict[str, object] | None = None,
) -> Any:
    """The `MultipleShootingOCP` of a scenario.

    Scenario fields (horizon, dt, method, weights, ...) are changed with
    ``dataclasses.replace(scenario, ...)`` before calling this.

    Parameters
    ----------
    scenario : Scenario
    model : Model, optional
        The model to control (default ``load_model(scenario.model)``); it must
        have the scenario's nx and nu.
    hessian : {"exact", "gauss-newton"}, optional
        Passed to `MultipleShootingOCP` (default: the scenario's).
    solver_options : dict, optional
        IPOPT options passed to `MultipleShootingOCP`.

    Returns
    -------
    MultipleShootingOCP
        With the scenario's weights, references (constant over the horizon)
        and bounds (the model's where the scenario gives none).

    Raises
    ------
    ValueError
        A model whose dimensions differ from the scenario's.
    """
    from shooting.ocp import MultipleShootingOCP

    if not isinstance(scenario, Scenario):
        raise ValueError(f"scenario must be a shooting.Scenario, got {type(scenario).__name__}")
    if model is None:
        from shooting.loading import load_model

        model = load_model(scenario.model)
    if not isinstance(model, Model):
        raise ValueError(f"model must be a shooting.Model, got {type(model).__name__}")
    if (model.nx, model.nu) != (scenario.nx, scenario.nu):
        raise ValueError(f"model {model.name} has nx={model.nx}, nu={model.nu} but the scenario for "
                         f"{scenario.model} has nx={scenario.nx}, nu={scenario.nu}")
    return MultipleShootingOCP(
        model, horizon=scenario.horizon, dt=scenario.dt, method=scenario.method, steps=scenario.steps,
        Q=scenario.Q, R=scenario.R, Q_terminal=scenario.Q_terminal, x_ref=scenario.x_ref, u_ref=scenario.u_ref,
        x_min=scenario.x_min, x_max=scenario.x_max, u_min=scenario.u_min, u_max=scenario.u_max,
        hessian=scenario.hessian if hessian is None else hessian, solver_options=solver_options,
    )
