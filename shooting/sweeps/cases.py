"""The cases of a sweep and the row each one becomes: drawing, validation, the figures of merit.

Case i is drawn from its own child seed, ``numpy.random.SeedSequence(seed,
spawn_key=(i,))`` (what ``SeedSequence(seed).spawn(n)[i]`` gives), so a case
is the same whatever the number of cases, the order they run in or the
machine that runs them, and a resumed sweep draws exactly the missing ones.
From that child: the noise generator's seed (its first 32-bit word), then the
start state and the plant's parameters:

* x0 uniformly in ``[x0 - s w, x0 + s w]`` intersected with the state bounds,
  ``s = x0_spread`` and ``w`` the state's bound range ``x_max - x_min`` where
  both bounds are finite, else 1 (an absolute spread in the state's unit);
* each plant parameter ``p0 (1 + p_spread U(-1, 1))`` (relative; a zero
  entry stays zero); the controller keeps the nominal ``p0``.

`Target` holds what a row is measured against (the scenario's weights,
references, bounds and tolerance); `measure` turns a closed-loop
`Trajectory` into the row of `COLUMNS`.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.model import Model
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.mpc.scenarios import Scenario
from shooting.mpc.trajectory import Trajectory

__all__ = ["CASE_KEYS", "COLUMNS", "MAX_CASES", "Case", "Target", "case_columns", "draw_cases", "measure",
           "target_of"]

FloatArray = npt.NDArray[np.float64]

#: The first columns of cases.csv, in this order (then ``x0_<state>`` and ``p_<parameter>``).
COLUMNS = ("case", "seed", "success", "failed_steps", "cost", "final_error", "max_violation", "solve_time_median",
           "solve_time_max", "outcome", "failure_reason", "final_error_scaled")
#: A case's outcome: arrived within the tolerance, ran to the end but did not, stopped early (the plant state
#: became non-finite), or could not run (an error before or in the loop). Solver failures on the way are counted
#: apart (``failed_steps``, ``failure_reason``): a case that arrived despite them succeeded.
OUTCOMES = ("reached", "missed", "stopped", "error")
#: The keys an explicit case may give.
CASE_KEYS = ("x0", "p", "noise_std", "seed")
#: Most cases of one sweep.
MAX_CASES = 10_000_000
#: The default success tolerance: every state within this fraction of its scale (`state_scale`: the nominal start's
#: distance from the target in that state) ...
TOLERANCE_FRACTION = 0.05
#: ... and at least this, in the state's unit.
TOLERANCE_FLOOR = 0.05


@dataclass(frozen=True, eq=False)
class Case:
    """One closed loop of a sweep.

    Parameters
    ----------
    index : int
        The case number (0-based, the ``case`` column).
    x0 : ndarray, shape (nx,)
        The plant's start state.
    p : ndarray, shape (np,)
        The plant's parameters (the controller keeps the nominal ones).
    noise_std : float
        Standard deviation of the process noise on every state.
    seed : int
        Seed of the noise generator (the ``seed`` column).
    """

    index: int
    x0: FloatArray
    p: FloatArray
    noise_std: float
    seed: int


def case_columns(model: Model) -> tuple[str, ...]:
    """Every column of cases.csv for `model`: `COLUMNS`, ``x0_<state>``, ``p_<parameter>``."""
    return (*COLUMNS, *(f"x0_{name}" for name in model.state_names), *(f"p_{name}" for name in model.param_names))


def _spread(value: object, what: str) -> float:
    return _validate.real(value, what, minimum=0.0)


def draw_cases(scenario: Scenario, model: Model, x_min: FloatArray, x_max: FloatArray,
               cases: int | Sequence[Mapping[str, Any]], *, x0_spread: float, p_spread: float, noise_std: float,
               seed: int) -> list[Case]:
    """The cases of a sweep, each from its own child seed (see the module docstring).

    Parameters
    ----------
    scenario : Scenario
        Gives the nominal x0.
    model : Model
        Gives p0, the names and sizes.
    x_min, x_max : ndarray, shape (nx,)
        The state bounds the start states are drawn within (the OCP's).
    cases : int or sequence of dict
        How many to draw, or explicit cases: dicts with keys among `CASE_KEYS`
        (missing ones: the nominal x0, the nominal p0, `noise_std`, the child
        seed's noise seed).
    x0_spread, p_spread, noise_std : float
        Non-negative, finite.
    seed : int
        Non-negative.

    Returns
    -------
    list of Case

    Raises
    ------
    ValueError
        Zero cases, a negative or non-finite spread, a spread given with
        explicit cases, a parameter spread for a model without parameters,
        an explicit case with an unknown key or a bad value.
    """
    x0_spread = _spread(x0_spread, "x0_spread")
    p_spread = _spread(p_spread, "p_spread")
    noise_std = _spread(noise_std, "noise_std")
    seed = _validate.integer(seed, "seed", minimum=0)
    if p_spread > 0 and model.np == 0:
        raise ValueError(f"p_spread has no effect: model {model.name} has no parameters (give p_spread=0)")
    x0 = np.asarray(scenario.x0, dtype=float)
    low, high = _x0_box(x0, x_min, x_max, x0_spread, model)
    if isinstance(cases, (int, np.integer)) and not isinstance(cases, bool):
        n = _validate.integer(cases, "cases", minimum=1, maximum=MAX_CASES)
        return [_drawn(i, seed, low, high, model.p0, p_spread, noise_std) for i in range(n)]
    if not isinstance(cases, Sequence) or isinstance(cases, (str, bytes)):
        raise ValueError(f"cases must be a number of cases (>= 1) or a list of dicts with keys among "
                         f"{', '.join(CASE_KEYS)}, got {type(cases).__name__}")
    if not cases:
        raise ValueError("cases is an empty list: give at least one case (or a number of cases)")
    if len(cases) > MAX_CASES:
        raise ValueError(f"cases has {len(cases)} entries, more than {MAX_CASES}")
    for option, value in (("x0_spread", x0_spread), ("p_spread", p_spread)):
        if value:
            raise ValueError(f"{option} has no effect with explicit cases (each gives its own x0 and p): drop it "
                             f"or give a number of cases")
    return [_explicit(i, entry, seed, x0, model, noise_std) for i, entry in enumerate(cases)]


def _x0_box(x0: FloatArray, x_min: FloatArray, x_max: FloatArray, spread: float,
            model: Model) -> tuple[FloatArray, FloatArray]:
    """Where start states are drawn: x0 +- spread * (bound range, or 1 where unbounded), within the bounds."""
    finite = np.isfinite(x_min) & np.isfinite(x_max)
    width = np.where(finite, x_max - x_min, 1.0)
    low = np.maximum(x0 - spread * width, x_min)
    high = np.minimum(x0 + spread * width, x_max)
    if spread and (low > high).any():
        i = int(np.flatnonzero(low > high)[0])
        raise ValueError(f"the scenario's x0 has {model.state_names[i]} = {x0[i]:g} outside its bounds "
                         f"[{x_min[i]:g}, {x_max[i]:g}]: start the scenario inside them")
    return low, high


def _child(seed: int, index: int) -> tuple[int, np.random.Generator]:
    """Case `index`'s noise seed and generator, from its child seed of `seed`."""
    child = np.random.SeedSequence(seed, spawn_key=(index,))
    noise_seed = int(child.generate_state(1, np.uint32)[0])
    return noise_seed, np.random.default_rng(child)


def _drawn(index: int, seed: int, low: FloatArray, high: FloatArray, p0: FloatArray, p_spread: float,
           noise_std: float) -> Case:
    noise_seed, rng = _child(seed, index)
    # x0 = low + (high - low) U(0, 1): exactly the nominal x0 when the box is a point (no spread).
    x0 = low + (high - low) * rng.uniform(0.0, 1.0, low.size)
    p = p0 * (1.0 + p_spread * rng.uniform(-1.0, 1.0, p0.size))
    return Case(index, x0, p, noise_std, noise_seed)


def _explicit(index: int, entry: object, seed: int, x0: FloatArray, model: Model, noise_std: float) -> Case:
    what = f"cases[{index}]"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{what} must be a dict with keys among {', '.join(CASE_KEYS)}, got {type(entry).__name__}")
    unknown = sorted(str(k) for k in entry if k not in CASE_KEYS)
    if unknown:
        raise ValueError(f"{what} has unknown key(s) {unknown}: the keys are {', '.join(CASE_KEYS)}")
    noise_seed, _ = _child(seed, index)
    start = _validate.vector(entry.get("x0", x0), model.nx, f"{what}['x0']", broadcast=False)
    p = _validate.vector(entry.get("p", model.p0), model.np, f"{what}['p']", broadcast=False)
    std = _spread(entry.get("noise_std", noise_std), f"{what}['noise_std']")
    case_seed = _validate.integer(entry.get("seed", noise_seed), f"{what}['seed']", minimum=0, maximum=2**63 - 1)
    return Case(index, start, p, std, case_seed)


@dataclass(frozen=True, eq=False)
class Target:
    """What a case's closed loop is measured against.

    Parameters
    ----------
    Q : ndarray, shape (nx, nx)
    R : ndarray, shape (nu, nu)
        The scenario's weights (the OCP's, defaults filled in).
    x_ref : ndarray, shape (nx,)
    u_ref : ndarray, shape (nu,)
        The constant references (the OCP's first stage), used when the
        scenario has no time-varying ``reference``.
    x_min, x_max : ndarray, shape (nx,)
    u_min, u_max : ndarray, shape (nu,)
        The OCP's bounds (``max_violation``).
    tolerance : float
        ``success`` needs ``final_error_scaled <= tolerance`` (`scaled`), else ``final_error <= tolerance``.
    reference : callable ``t -> (x_ref, u_ref)``, optional
        The scenario's time-varying reference.
    path : callable ``(x, u, p) -> h``, optional
        The OCP's path constraints h <= 0 (``max_violation`` counts their excess too).
    scale : ndarray, shape (nx,), optional
        Each state's scale for ``final_error_scaled`` (see `state_scale`); default ones.
    scaled : bool, default False
        Whether `tolerance` applies to ``final_error_scaled`` (the default tolerance) or to ``final_error`` (a
        scenario's ``final_tolerance``, in the states' units).
    """

    Q: FloatArray
    R: FloatArray
    x_ref: FloatArray
    u_ref: FloatArray
    x_min: FloatArray
    x_max: FloatArray
    u_min: FloatArray
    u_max: FloatArray
    tolerance: float
    reference: Callable[[float], Any] | None = None
    path: Callable[[Any, Any, Any], Any] | None = None
    scale: FloatArray | None = None
    scaled: bool = False

    def arrival_error(self, final_error: float, final_error_scaled: float) -> float:
        """The error `tolerance` applies to."""
        return final_error_scaled if self.scaled else final_error

    def path_excess(self, x: FloatArray, u: FloatArray, p: FloatArray) -> float:
        """The largest h(x_k, u_k, p) over the K samples (x (K+1, nx), u (K, nu)), 0 when none exceeds 0."""
        if self.path is None or not len(u):
            return 0.0
        xs, us, ps = ca.SX.sym("x", x.shape[1]), ca.SX.sym("u", u.shape[1]), ca.SX.sym("p", p.size)
        h = ca.Function("h", [xs, us, ps], [ca.vec(ca.SX(self.path(xs, us, ps)))])
        values = np.array(h.map(len(u))(x[:-1].T, u.T, np.tile(p.reshape(-1, 1), (1, len(u)))), dtype=float)
        return max(float(values.max(initial=0.0)), 0.0)

    def references(self, t: FloatArray) -> tuple[FloatArray, FloatArray]:
        """The state reference at each of the K+1 instants `t` and the input reference of the first K."""
        nx, nu = self.x_ref.size, self.u_ref.size
        if self.reference is None:
            return np.tile(self.x_ref, (t.size, 1)), np.tile(self.u_ref, (max(t.size - 1, 0), 1))
        xs, us = [], []
        for k, tk in enumerate(t):
            x_ref, u_ref = self.reference(float(tk))
            xs.append(_validate.vector(x_ref, nx, f"reference(t) x_ref at t = {tk:g}", broadcast=False))
            if k < t.size - 1:
                us.append(self.u_ref if u_ref is None else
                          _validate.vector(u_ref, nu, f"reference(t) u_ref at t = {tk:g}", broadcast=False))
        return np.array(xs).reshape(t.size, nx), np.array(us).reshape(t.size - 1, nu)


def target_of(scenario: Scenario, ocp: MultipleShootingOCP) -> Target:
    """The `Target` of a scenario from its OCP (weights, first-stage references, bounds) and its tolerance: the
    scenario's ``final_tolerance`` on ``final_error`` when it gives one, else `TOLERANCE_FRACTION` on
    ``final_error_scaled``."""
    x_ref, u_ref = ocp.x_ref[0].copy(), ocp.u_ref[0].copy()
    scaled = scenario.final_tolerance is None
    tolerance = TOLERANCE_FRACTION if scenario.final_tolerance is None else scenario.final_tolerance
    return Target(ocp.Q.copy(), ocp.R.copy(), x_ref, u_ref, ocp.x_min.copy(), ocp.x_max.copy(), ocp.u_min.copy(),
                  ocp.u_max.copy(), float(tolerance), scenario.reference, ocp.problem.constraints.path_constraints,
                  state_scale(np.asarray(scenario.x0, dtype=float), x_ref), scaled)


def state_scale(x0: FloatArray, x_ref: FloatArray) -> FloatArray:
    """Each state's scale for a distance that does not add metres to radians: the nominal start's distance from
    the target in that state (what the loop must remove there), at least 1 of the state's unit (a state that
    starts at or near its target: 5 % of the scale is then 0.05 of its unit).

    Parameters
    ----------
    x0, x_ref : ndarray, shape (nx,)

    Returns
    -------
    ndarray, shape (nx,)
    """
    return np.maximum(np.abs(x0 - x_ref), TOLERANCE_FLOOR / TOLERANCE_FRACTION)


def measure(case: Case, traj: Trajectory, target: Target, steps: int) -> dict[str, Any]:
    """The row of `case` (keys `COLUMNS` plus ``"x0"`` and ``"p"`` as arrays) from its closed loop.

    ``cost`` = sum over k < K of (x_k - x_ref_k)' Q (x_k - x_ref_k) + (u_k - u_ref_k)' R (u_k - u_ref_k);
    ``final_error`` = max_i |x_K,i - x_ref_K,i|; ``max_violation`` the largest excess of any state (k = 0..K)
    or input over its bound and of any path constraint h(x_k, u_k, p) over 0 (the case's p). A loop that
    stopped early (the plant state became non-finite) has cost and final error inf, and its missing samples
    count as failed steps.
    """
    x_ref, u_ref = target.references(traj.t)
    dx = traj.x[:-1] - x_ref[:-1]
    du = traj.u - u_ref
    cost = float(np.einsum("ki,ij,kj->", dx, target.Q, dx) + np.einsum("ki,ij,kj->", du, target.R, du))
    final_error = float(np.max(np.abs(traj.x[-1] - x_ref[-1]), initial=0.0))
    scale = np.ones(traj.x.shape[1]) if target.scale is None else target.scale
    final_scaled = float(np.max(np.abs(traj.x[-1] - x_ref[-1]) / scale, initial=0.0))
    excess = [np.maximum(target.x_min - traj.x, traj.x - target.x_max), np.maximum(target.u_min - traj.u,
                                                                                    traj.u - target.u_max)]
    violation = max((float(e.max()) for e in excess if e.size), default=0.0)
    if np.all(np.isfinite(traj.x)):
        violation = max(violation, target.path_excess(traj.x, traj.u, case.p))
    failed = int(np.count_nonzero(~traj.success)) + (steps - traj.steps)
    if traj.stopped:
        cost = final_error = final_scaled = math.inf
    times = traj.solve_time
    arrived = target.arrival_error(final_error, final_scaled) <= target.tolerance
    outcome = "stopped" if traj.stopped else ("reached" if arrived else "missed")
    # (the statuses' leading words: "budget", "line search failed", "QP failed"; a status may carry details)
    reasons = collections.Counter(str(s).split(":", 1)[0] for s, ok in zip(traj.status, traj.success, strict=False)
                                  if not ok)
    return {
        "case": case.index, "seed": case.seed, "success": outcome == "reached", "outcome": outcome,
        "failure_reason": reasons.most_common(1)[0][0] if reasons else "", "final_error_scaled": final_scaled,
        "failed_steps": failed, "cost": cost, "final_error": final_error, "max_violation": max(violation, 0.0),
        "solve_time_median": float(np.median(times)) if times.size else math.nan,
        "solve_time_max": float(times.max()) if times.size else math.nan,
        "x0": case.x0.copy(), "p": case.p.copy(),
    }
