"""Closed loops of a generated controller, on this machine and on the emulated Cortex-M4, against Python.

The reference is `RTIController` on the same OCP, started from the same
IPOPT guess, driving the same plant (the model integrated with many substeps
of an accurate method, in double). The C runs

- on the host (`host_loop`): compiled as a shared library and driven by
  `simulate_closed_loop` through `load_controller`;
- on QEMU's MPS2 AN386 (`board_loop`, `shooting.controller.board`): a
  program that runs controller and plant on the board (the plant in double,
  whatever the controller's real type), its every cycle costed by the
  Cortex-M4 cycle model (`shooting.codegen.cycles`), and prints every sample.

`compare_inputs` measures how far the inputs of the first samples are from
the reference's, on each input's scale (its bound range; see `input_scale`),
and `input_tolerance` says how far they may be: what rounding in the C's
precision does to the solution of the first sample's QP (the integrator's A, B
and x_next perturbed by their Monte-Carlo rounding spread, every other datum by
the unit roundoff; the double solver of `shooting.qp` on each perturbed QP),
times a safety factor, never below the solver's own stopping accuracy.
"""

from __future__ import annotations

import copy
import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shooting.codegen.c_files import CExport
from shooting.codegen.rounding import UNIT_ROUNDOFF, rounding_spread
from shooting.controller.board import (
    BOARD_BUDGET,
    NOISE_SEED,
    PLANT_METHOD,
    PLANT_STEPS,
    board_loop,
    process_noise,
)
from shooting.controller.c_source import ControllerSpec
from shooting.controller.host import load_controller
from shooting.controller.loop_run import LoopRun
from shooting.mpc.controllers import ReferenceFunction, sample_horizon
from shooting.mpc.curvature import row_multipliers
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.mpc.rti import RTIController
from shooting.mpc.rti_stage import StageQPBuilder
from shooting.mpc.simulate import simulate_closed_loop
from shooting.mpc.sqp import COLD_START_ITERATIONS, SQP_TOLERANCES, SQPResult, sqp
from shooting.options import ControllerHessian, Real
from shooting.qp import OCP_QP_TOLERANCES, StageQP, StageQPResult, solve_stage_qp
from shooting.qp.render import MU_FLOOR

__all__ = ["MAX_TOLERANCE", "NOISE_SEED", "REFERENCE_AGREEMENT", "REFERENCE_IPOPT_OPTIONS", "TOLERANCE_FLOOR",
           "TERMINATION_SAFETY", "TOLERANCE_SAFETY", "LoopRun", "Tolerance", "board_loop", "compare_inputs",
           "host_loop", "input_scale", "input_tolerance", "process_noise", "reference_loop", "reference_run",
           "solver_agreement", "stopping_move", "termination_move", "verified_optimum"]

FloatArray = npt.NDArray[np.float64]

#: The check allows this many times the input deviation that rounding in the
#: C's precision causes in the first sample's QP (`input_tolerance`): the
#: closed loops compared run five samples apart from each other, each adding
#: its own rounding to the next linearisation.
TOLERANCE_SAFETY = 10.0

#: The interior point's stopping accuracy on the input scale: the smallest
#: tolerance (double: both sides follow the same iterates to ~1e-13; float:
#: the stopping tolerances of `shooting.qp` on the worst-conditioned tests).
TOLERANCE_FLOOR = {"double": 1e-9, "float": 1e-6}

#: The largest tolerance of a check, on the inputs' scale: beyond it the check could not tell a wrong controller
#: from rounding (float: 1 % of an input's range).
MAX_TOLERANCE = {"double": 1e-5, "float": 1e-2}

#: Draws of the rounding estimate.
TOLERANCE_DRAWS = 8

#: The budget of the checks' closed loops (QP iterations per QP, SQP iterations per sample): the default one,
#: whatever the export's (the reference, `RTIController`, has none: a smaller budget would stop samples where it
#: does not).
CHECK_BUDGET = BOARD_BUDGET

def reference_loop(ocp: MultipleShootingOCP, x0: FloatArray, steps: int, noise: float = 0.0
                   ) -> tuple[FloatArray, FloatArray]:
    """The Python RTIController's closed loop (states (K+1, nx), inputs (K, nu)) on the check's plant (with
    process noise of standard deviation `noise` per state and sample, `NOISE_SEED`)."""
    x, u, _ = reference_run(ocp, x0, steps, noise)
    return x, u


def reference_run(ocp: MultipleShootingOCP, x0: FloatArray, steps: int, noise: float = 0.0, *,
                  hessian: ControllerHessian = "gauss-newton", convexification: str = "riccati",
                  reference: ReferenceFunction | None = None) -> tuple[FloatArray, FloatArray, list[str]]:
    """`reference_loop` with each sample's status (the check's explanations read them); `hessian` and
    `convexification` as the export's (`RTIController`'s); `reference` a time-varying reference ``t -> (x_ref,
    u_ref)`` followed sample by sample (`simulate_closed_loop`'s)."""
    traj = simulate_closed_loop(RTIController(ocp, hessian=hessian, convexification=convexification), x0, steps,
                                plant_method=PLANT_METHOD, plant_steps=PLANT_STEPS, noise_std=noise or None,
                                seed=NOISE_SEED, progress=False, reference=reference)
    return traj.x, traj.u, [str(s) for s in traj.status]


#: How close (on the inputs' scale) the verified optimum must be to the Python SQP's converged first sample to be
#: the same local solution; beyond, the SQP's (the same method as the C's, from the same guess) is the reference.
REFERENCE_AGREEMENT = 1e-4

#: IPOPT's tolerances for the verified optimum the first prediction is compared with (`verified_optimum`).
REFERENCE_IPOPT_OPTIONS = {"ipopt.tol": 1e-12, "ipopt.constr_viol_tol": 1e-12, "ipopt.dual_inf_tol": 1e-10,
                           "ipopt.compl_inf_tol": 1e-12, "ipopt.acceptable_iter": 0, "ipopt.max_iter": 3000}


def verified_optimum(ocp: MultipleShootingOCP, x0: FloatArray, x_ref: FloatArray | None = None,
                     u_ref: FloatArray | None = None) -> FloatArray | None:
    """The OCP's optimal inputs from `x0` (N, nu) by IPOPT at `REFERENCE_IPOPT_OPTIONS`, its status checked; None
    when it does not succeed. Warm-started at IPOPT's solution at the OCP's own settings from the OCP's initial
    guess (what `controller_spec` stores as the controller's guess), so it polishes the same local solution
    instead of finding another (a tighter tolerance alone changes IPOPT's path, and on a nonconvex OCP its end).
    `x_ref`, `u_ref`: the first sample's references (default the OCP's)."""
    settings = ocp.problem.solver
    options = {k: v for k, v in dict(settings.solver_options or {}).items() if k.startswith("ipopt.")}
    tight = dataclasses.replace(settings, solver="ipopt", hessian="exact",
                                solver_options={**options, **REFERENCE_IPOPT_OPTIONS})
    reference = MultipleShootingOCP.from_problem(ocp.model, dataclasses.replace(ocp.problem, solver=tight))
    start = ocp.solve(x0, x_ref=x_ref, u_ref=u_ref)
    if not start.success:
        return None
    solution = reference.solve(x0, warm_start=start, x_ref=x_ref, u_ref=u_ref)
    return np.asarray(solution.u, dtype=float) if solution.success else None


def input_scale(spec: ControllerSpec, *, scaled: bool = False) -> FloatArray:
    """Each input's scale: its bound range, or where unbounded the largest of 1, |u_ref| and |u_guess|; in the
    model's units (`scaled`: in the controller's variables u / u_scale)."""
    span = spec.u_max - spec.u_min
    fallback = np.maximum(1.0, np.maximum(np.abs(spec.u_ref).max(axis=0), np.abs(spec.u_guess).max(axis=0)))
    scale = np.where(np.isfinite(span) & (span > 0), span, fallback)
    return scale if scaled else scale * spec.scales[1]


def compare_inputs(u: FloatArray, u_ref: FloatArray, samples: int, scale: FloatArray | None = None) -> float:
    """Largest difference of the first `samples` inputs, each on its input's `scale` (nu,).

    Without `scale`, relative to the reference's largest input (at least 1e-12).
    """
    n = min(samples, u.shape[0], u_ref.shape[0])
    if n == 0:
        return 0.0
    if scale is None:
        scale = np.full(u.shape[1], max(float(np.max(np.abs(u_ref[:n]))), 1e-12))
    return float(np.max(np.abs(u[:n] - u_ref[:n]) / scale))


#: The SQP's stopping tolerance on the step (relative to 1 + the trajectory's largest entry): two converged
#: first samples may differ by one last step below it (`input_tolerance`).
SQP_ALLOWANCE = {key: SQP_TOLERANCES[key]["step"] for key in ("double", "float")}


@dataclass(frozen=True)
class Tolerance:
    """What the check allows, from the precision and the conditioning of the first sample's QP.

    Attributes
    ----------
    applied, applied_estimate : float
        Tolerance and rounding estimate of the first `samples` inputs (on their scale).
    prediction, prediction_estimate : float
        The same for the first QP's whole predicted input trajectory.
    first_u : ndarray, shape (N, nu), or None
        The first sample's inputs in double, verified: IPOPT at tight
        tolerances (`verified_optimum`), else the Python SQP from the spec's
        guess when it converged, else None (the prediction is not compared).
    first_reference : str
        Which of them `first_u` is, in words.
    capped : bool
        The rounding estimate asked for more than `MAX_TOLERANCE`: the
        tolerances are capped there (a check that would pass anything checks
        nothing).
    termination : float
        How far the whole first prediction moves when the converged first
        sample's QP stops where the C's interior point in its precision may
        stop (`termination_move`), or how far two converged solvers' first
        predictions are apart (`solver_agreement`), the larger.
    termination_first : float
        What the stopping points can do to the compared closed-loop inputs:
        `samples` times the move on the first `samples` stages of a warm QP
        stopped where the C's interior point stops and then shortcut from its
        active set (`stopping_move` with ``rti``: zero where the shortcut
        finds the exact solution; an active soft row at its limit is left to
        the interior point). The inputs' tolerance is at least
        `TERMINATION_SAFETY` times it.
    """

    applied: float
    applied_estimate: float
    prediction: float
    prediction_estimate: float
    first_u: FloatArray | None
    first_reference: str = "IPOPT (tol 1e-12)"
    capped: bool = False
    termination: float = 0.0
    termination_first: float = 0.0


def input_tolerance(ocp: MultipleShootingOCP, spec: ControllerSpec, x0: FloatArray, real: str, samples: int,
                    seed: int = 0, *, x_ref: FloatArray | None = None, u_ref: FloatArray | None = None
                    ) -> Tolerance:
    """How far the C's inputs may be from the double reference (see `Tolerance`).

    The first sample's stage-wise QP (as `RTIController` builds it at the
    spec's guess) is solved again with its data perturbed as rounding in
    `real` would: the integrator's x_next, A and B at every stage entry by
    entry by their Monte-Carlo rounding spread (`shooting.codegen.rounding`),
    weights, gradients and x0 by the unit roundoff (relative). The estimates
    are the largest move, on the inputs' scale over `TOLERANCE_DRAWS` draws, of
    the first `samples` predicted inputs (those the closed-loop check compares)
    and of all of them; each tolerance is `TOLERANCE_SAFETY` times its
    estimate, at least `TOLERANCE_FLOOR`, and at least the SQP's stopping
    tolerance on the step (relative to 1 + the trajectory's largest entry, here
    on the inputs' scale): the first sample iterates to convergence, and two
    converged iterates may differ by one last step below that tolerance.
    The prediction's is also at least `TERMINATION_SAFETY` times how far the
    interior point's own stopping point in `real` moves it
    (`termination_move`), and how far the C's Python twin and IPOPT, both
    converged, are apart (`solver_agreement`). Both are capped at `MAX_TOLERANCE`.
    With ``hessian="exact"`` the stage blocks also move by the constraints'
    curvature at multipliers off by the QP's stopping tolerance in `real`
    (``tol_stat`` of the largest multiplier, per entry): the curvature is
    linear in them, and a float QP's multipliers are no more exact than that.
    `x_ref` (N+1, nx), `u_ref` (N, nu): the first sample's references (default the OCP's).
    """
    N, nx, nu = ocp.horizon, ocp.nx, ocp.nu
    builder = StageQPBuilder(ocp)
    d = ocp.layout.unpack_parameters(ocp.parameters(x0, x_ref, u_ref))
    xg, ug, zero = spec.x_guess, spec.u_guess, np.zeros(nu)
    qp = builder.with_state(builder.build(xg, ug, d["x_ref"], d["u_ref"], d["p"], 0.0, zero), x0, zero)
    x_start = builder.guess(xg, ug, zero)
    exact = solve_stage_qp(qp, x_guess=x_start, u_guess=ug)
    xs = np.array(xg, dtype=float)
    xs[0] = x0
    cold = sqp(xs, ug, lambda a, b, f, rho, scale, states=False, **extra: builder.sqp_step(
                   a, b, d["x_ref"], d["u_ref"], d["p"], 0.0, zero, loose=f, prox=rho, prox_scale=scale,
                   prox_states=states, **extra),
               lambda a, b: ocp.cost(a, b, x_ref=d["x_ref"], u_ref=d["u_ref"], p=d["p"]),
               lambda a, b: builder.defects(a, b, d["p"], 0.0), max_iter=COLD_START_ITERATIONS, prox=True)
    multipliers = _multiplier_curvature(ocp, spec, xg, ug, exact, np.asarray(d["p"], dtype=float), real)
    cast = np.float32 if real == "float" else np.float64
    z0 = (spec.model.z0,) if spec.model.nz else ()  # (a DAE's step: Newton from the model's z0)
    vectors = [[np.asarray(v, dtype=cast).astype(float) for v in (xg[k], ug[k], spec.p0, k * spec.dt, spec.dt, *z0)]
               for k in range(N)]
    spread = rounding_spread(spec.step, vectors, real, elementwise=True)
    u = UNIT_ROUNDOFF[real]
    rng = np.random.default_rng(seed)
    scale = input_scale(spec, scaled=True)  # (the QP's inputs are the spec's: scaled)
    first = whole = 0.0
    for _ in range(TOLERANCE_DRAWS):
        q = copy.deepcopy(qp)
        for k in range(N):
            if spread is not None:  # per entry (CasADi's column-major nonzeros of the dense outputs)
                s_x = spread[k][0]
                s_A, s_B = spread[k][1].reshape(nx, nx, order="F"), spread[k][2].reshape(nx, nu, order="F")
            else:  # too large to interpret: ten roundings of the largest entry
                s_x, s_A, s_B = (10 * u * np.abs(M).max() for M in (qp.b[k], qp.A[k], qp.B[k]))
            q.A[k][:nx, :nx] += s_A * rng.uniform(-1, 1, (nx, nx))
            q.B[k][:nx, :] += s_B * rng.uniform(-1, 1, (nx, nu))
            q.b[k][:nx] += s_x * rng.uniform(-1, 1, nx)
        for name in ("Q", "S", "R", "Q_N", "q", "r", "x0"):
            v = np.asarray(getattr(q, name), dtype=float)
            setattr(q, name, v * (1 + u * rng.uniform(-1, 1, v.shape)))
        if multipliers is not None:
            multipliers(q, rng)
        moved = solve_stage_qp(q, x_guess=x_start, u_guess=ug)
        if moved.status == 0:
            move = np.abs(moved.u - exact.u) / scale
            first, whole = max(first, float(move[:samples].max())), max(whole, float(move.max()))
    key = "float" if real == "float" else "double"
    optimum = verified_optimum(ocp, x0, x_ref, u_ref)
    # (the SQP's step tolerance is relative to the iterate it stops at, near the optimum: its size, else the
    # guess's; a reference far from the stored guess makes them differ)
    ends = [xs, ug] + ([cold.x, cold.u] if cold.status == 0 else []) + ([optimum] if optimum is not None else [])
    size = max(float(np.abs(a).max(initial=0.0)) for a in ends)
    floor = max(TOLERANCE_FLOOR[key], SQP_ALLOWANCE[key] * (1.0 + size) / float(scale.min()))
    twin = RTIController(ocp, hessian=spec.hessian_option).solve(x0, x_ref=x_ref, u_ref=u_ref,
                                                                   max_iter=COLD_START_ITERATIONS)
    # (the QP's stopping move at the converged point: the SQP's from the C's guess, else the twin's from IPOPT's)
    end = cold if cold.status == 0 else twin
    moves = stopping_move(builder, end, x0, d, scale, key) if end.status == 0 else None
    stop = 0.0 if moves is None else float(moves.max())
    # The closed loop's inputs: every compared sample's QP (the cold start's last one too) is warm and ends at the
    # interior point's stopping point after the shortcut from its active set where that applies (an active soft
    # row at its limit, slack 0, is left to the interior point: shooting.qp.shortcut); each sample adds its move
    # on the stages the loop follows, carried into the next samples without contraction at worst.
    warm = stopping_move(builder, end, x0, d, scale, key, rti=True) if end.status == 0 else None
    stop_first = 0.0 if warm is None else samples * float(warm[:samples].max())
    agree = solver_agreement(twin, optimum, scale)
    applied = max(TOLERANCE_SAFETY * first, floor, TERMINATION_SAFETY * stop_first)
    prediction = max(TOLERANCE_SAFETY * whole, floor, TERMINATION_SAFETY * max(stop, agree))
    cap = MAX_TOLERANCE[key]
    same = optimum is not None and (cold.status != 0 or
                                    float(np.abs(optimum - cold.u).max()) <= REFERENCE_AGREEMENT * float(scale.min()))
    if optimum is not None and same:
        first_u, label = optimum, "IPOPT (tol 1e-12)"
    elif cold.status == 0:  # (also where IPOPT polished another local solution than the SQP's from the guess)
        first_u, label = cold.u, "the Python SQP (converged)"
    else:
        first_u, label = None, "none (neither IPOPT nor the Python SQP converged from the guess)"
    return Tolerance(min(applied, cap), first, min(prediction, cap), whole, first_u, label,
                     capped=TOLERANCE_SAFETY * max(first, whole) > cap, termination=max(stop, agree),
                     termination_first=stop_first)


def solver_agreement(twin: SQPResult, optimum: FloatArray | None, scale: FloatArray) -> float:
    """How far two converged solvers' first predictions are apart on this problem (the largest on `scale`): the C's
    Python twin (`twin`: `RTIController.solve`, the export's Hessian, in double) against IPOPT's `optimum`; 0 where
    either did not converge or they found different local solutions (`REFERENCE_AGREEMENT`).

    Both end within their tolerances on the KKT conditions (1e-10 to 1e-12); how far apart that leaves the inputs
    is the problem's conditioning: a gantry crane whose force has the weight 1e-3 and whose sway row a penalty
    multiplier of 1e3 ends 3.6e-7 of the force's range from IPOPT's at tol 1e-12, in 4 exact SQP iterations whose
    stationarity is 1e-12. A C that follows its twin (the closed loop's inputs are compared with it at rounding)
    and converges cannot be nearer to IPOPT than that.
    """
    if optimum is None or twin.status != 0:
        return 0.0
    apart = float(np.max(np.abs(np.asarray(twin.u) - optimum) / scale))
    return apart if apart <= REFERENCE_AGREEMENT else 0.0


#: The check allows this many times the move of the float interior point's stopping point (`termination_move`):
#: a deterministic effect measured on the problem itself, not a spread estimated from draws.
TERMINATION_SAFETY = 2.0


def termination_move(builder: StageQPBuilder, cold: SQPResult, x0: FloatArray, d: dict[str, Any],
                     scale: FloatArray, real: str = "float") -> float:
    """How far the interior point's stopping point in `real` moves the converged first sample's predicted inputs
    (the largest on `scale`).

    The QP ends where its complementarity reaches the precision's floor (`MU_FLOOR[real]` relative to
    1 + the largest multiplier or gradient, an exact penalty's weight among them: C ``@{p}_ipm``), not at its
    solution: a side whose multiplier is small against that scale stays mu / lam inside its bound. The QP at the
    converged double SQP's point `cold` (from `x0`, data `d`) is solved to convergence and stopped at that floor
    (the double twin of the C's interior point at the tolerances of `real`); the difference of their inputs is
    what the stopping alone does, rounding aside. (The planar quadrotor past an obstacle, penalty weight 1e3, in
    float: a thrust with multiplier 0.016 at its bound moves by 4e-3 of its range; a gantry crane with a sway
    penalty of 1e3, in double: a force at its bound by 1.3e-9.)
    """
    move = stopping_move(builder, cold, x0, d, scale, real)
    return 0.0 if move is None else float(move.max())


def stopping_move(builder: StageQPBuilder, cold: SQPResult, x0: FloatArray, d: dict[str, Any], scale: FloatArray,
                  real: str = "float", rti: bool = False) -> FloatArray | None:
    """`termination_move` per stage and input, shape (N, nu) on `scale`; None where a QP fails. With `rti`, the
    stopped QP is solved again warm from its own end, as a real-time iteration's (and an SQP iteration's after
    the first) is: the shortcut from its active set where it applies, else the interior point stopping again."""
    zero = np.zeros(builder.ocp.nu)
    qp = builder.with_state(builder.build(cold.x, cold.u, d["x_ref"], d["u_ref"], d["p"], 0.0, zero), x0, zero)
    start = builder.guess(cold.x, cold.u, zero)  # (the QP's states: with a rate penalty, augmented)
    exact = solve_stage_qp(qp, x_guess=start, u_guess=cold.u)
    key: Real = "float" if real == "float" else "double"
    tight = OCP_QP_TOLERANCES[key]
    stopped = solve_stage_qp(qp, x_guess=start, u_guess=cold.u,
                             tolerances={**tight, "tol_mu": 100 * tight["tol_mu"] + MU_FLOOR[key]})
    if exact.status != 0 or stopped.status != 0:
        return None
    if rti:  # (a real-time iteration's QP is warm: the shortcut from the stopped point's active set, else on)
        again = solve_stage_qp(qp, x_guess=start, u_guess=cold.u, warm=stopped,
                               tolerances={**tight, "tol_mu": 100 * tight["tol_mu"] + MU_FLOOR[key]})
        stopped = again if again.status == 0 else stopped
    return np.abs(np.asarray(stopped.u) - np.asarray(exact.u)) / scale


def _multiplier_curvature(ocp: MultipleShootingOCP, spec: ControllerSpec, xg: FloatArray, ug: FloatArray,
                          first: StageQPResult, p: FloatArray, real: str
                          ) -> Callable[[StageQP, np.random.Generator], None] | None:
    """For ``hessian="exact"``: a perturbation of a stage QP's blocks by the curvature of multiplier errors at the
    QP's stopping tolerance (see `input_tolerance`), from the multipliers of the `first` QP at the guess (p: its
    parameters per stage); None where the real-time iterations' Hessian is Gauss-Newton's (the SQP's exact one,
    hessian "auto", converges to the same KKT point whatever its curvature's rounding)."""
    if spec.curvature is None or spec.hessian != "exact":
        return None
    N, nx = ocp.horizon, ocp.nx
    pi, lam = np.asarray(first.pi, dtype=float)[:, :nx], np.asarray(first.lam, dtype=float)
    z = spec.sizes
    mu, _ = row_multipliers(lam, N, z.nu, z.nbx, z.ng, z.ngN)
    size = OCP_QP_TOLERANCES["float" if real == "float" else "double"]["tol_stat"] * max(
        float(np.abs(pi).max(initial=0.0)), float(np.abs(mu).max(initial=0.0)), 1.0)
    stage = spec.curvature  # (the export's own, built once by controller_spec)
    times = ocp.dt * np.arange(N)

    def perturb(q: StageQP, rng: np.random.Generator) -> None:
        dpi, dmu = size * rng.uniform(-1, 1, pi.shape), size * rng.uniform(-1, 1, mu.shape)
        W = np.array(stage.map(N)(xg[:N].T, ug.T, p.T, times[None, :], dpi.T, dmu.T), dtype=float)
        W = W.reshape(nx + ocp.nu, N, nx + ocp.nu).transpose(1, 0, 2)  # (W_k side by side: (N, n, n))
        assert q.Q is not None and q.S is not None and q.R is not None
        q.Q[:, :nx, :nx] += W[:, :nx, :nx]
        q.S[:, :, :nx] += W[:, nx:, :nx]
        q.R[...] = q.R + W[:, nx:, nx:]

    return perturb


def _write(export: CExport, folder: Path) -> None:
    for fname, text in export.files.items():
        (folder / fname).write_text(text)


def host_loop(export: CExport, spec: ControllerSpec, x0: FloatArray, steps: int, noise: float = 0.0, *,
              reference: ReferenceFunction | None = None, budget: tuple[int, int] = CHECK_BUDGET) -> LoopRun:
    """The generated controller compiled for this machine (ctypes) in a closed loop with the check's plant (and
    its process noise: `process_noise`), following `reference` (``t -> (x_ref, u_ref)``) sample by sample when
    given, at `budget` (``NAME_mpc_set_budget``'s QP and SQP iterations)."""
    with tempfile.TemporaryDirectory(prefix="shooting_ctl_host_") as tmp:
        _write(export, Path(tmp))
        controller = load_controller(tmp, model=spec.plant_model)
        controller.set_budget(*budget)
        first_data = sample_horizon(spec.plant_model, 0.0, spec.dt, spec.horizon, reference=reference)
        # the first sample alone: its whole prediction (the closed loop resets it)
        controller.step(x0, 0.0, x_ref=first_data.x_ref, u_ref=first_data.u_ref)
        first = None if controller.u_pred is None else controller.u_pred.copy()
        traj = simulate_closed_loop(controller, x0, steps, plant_method=PLANT_METHOD, plant_steps=PLANT_STEPS,
                                    noise_std=noise or None, seed=NOISE_SEED, progress=False, reference=reference)
    return LoopRun("host", traj.x, traj.u, list(traj.status), traj.iterations,
                   feedback_seconds=np.array(controller.feedback_times[:len(traj.u)]),
                   prepare_seconds=np.array(controller.preparation_times[1:len(traj.u) + 1]),
                   first_prediction=first)
