"""Closed loops of a generated controller, on this machine and on the emulated Cortex-M4, against Python.

The reference is `RTIController` on the same OCP, started from the same
IPOPT guess, driving the same plant (the model integrated with many substeps
of an accurate method, in double). The C runs

- on the host (`host_loop`): compiled as a shared library and driven by
  `simulate_closed_loop` through `load_controller`;
- on QEMU's MPS2 AN386 (`board_loop`): a program that runs controller and
  plant on the board (the plant in double, whatever the controller's real
  type), counts instructions per phase with SysTick under ``-icount``, and
  prints every sample.

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
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shooting.codegen import qemu_mps2
from shooting.codegen.c_files import CExport, generate_c
from shooting.codegen.emitter import literal
from shooting.codegen.rounding import UNIT_ROUNDOFF, rounding_spread
from shooting.codegen.toolchain import ToolchainError, first_error_line
from shooting.controller.c_source import MAX_QP_ITERATIONS, ControllerSpec
from shooting.controller.host import CONTROLLER_STATUS, load_controller
from shooting.integrate.integrator import build_integrator
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.mpc.rti import RTIController
from shooting.mpc.rti_stage import StageQPBuilder
from shooting.mpc.simulate import simulate_closed_loop
from shooting.mpc.sqp import COLD_START_ITERATIONS, SQP_TOLERANCES, sqp
from shooting.qp import solve_stage_qp

__all__ = ["NOISE_SEED", "TOLERANCE_FLOOR", "TOLERANCE_SAFETY", "LoopRun", "Tolerance", "board_loop", "compare_inputs",
           "host_loop", "process_noise",
           "input_scale", "input_tolerance", "reference_loop"]

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

#: Draws of the rounding estimate.
TOLERANCE_DRAWS = 8

#: The plant of every check: the model integrated by this tableau and substeps, in double.
PLANT_METHOD, PLANT_STEPS = "dopri5", 20

#: The budget of the checks' closed loops (QP iterations per QP, SQP iterations per sample): the default one,
#: whatever the export's (the reference, `RTIController`, has none: a smaller budget would stop samples where it
#: does not).
CHECK_BUDGET = (MAX_QP_ITERATIONS, COLD_START_ITERATIONS)

#: The seed of the checks' process noise (``check_noise``): the same draws on the host, the board and the reference.
NOISE_SEED = 0

#: Cortex-M4 clock for the time estimates, and cycles per instruction assumed.
M4_HZ, CYCLES_PER_INSTRUCTION = 168e6, 1.25


@dataclass(frozen=True)
class LoopRun:
    """One closed loop of the generated controller.

    Attributes
    ----------
    target : str
        "host" or "cortex-m4".
    x : ndarray, shape (K+1, nx)
    u : ndarray, shape (K, nu)
    status : list of str
    qp_iterations : ndarray of int, shape (K,)
    feedback_seconds, prepare_seconds : ndarray, shape (K,) or None
        Host only.
    feedback_instructions, prepare_instructions : ndarray, shape (K,) or None
        Cortex-M4 only (SysTick under ``-icount``, resolution 40 instructions).
    first_prediction : ndarray, shape (N, nu), or None
        Host only: the inputs the first sample's QP predicts over the horizon.
    """

    target: str
    x: FloatArray
    u: FloatArray
    status: list[str]
    qp_iterations: npt.NDArray[np.int64]
    feedback_seconds: FloatArray | None = None
    prepare_seconds: FloatArray | None = None
    feedback_instructions: FloatArray | None = None
    prepare_instructions: FloatArray | None = None
    first_prediction: FloatArray | None = None

    @property
    def sample_instructions(self) -> FloatArray | None:
        """Instructions of one RTI sample (feedback + preparation) on the board."""
        if self.feedback_instructions is None or self.prepare_instructions is None:
            return None
        return self.feedback_instructions + self.prepare_instructions

    def summary(self) -> dict[str, object]:
        """Medians and maxima for the manifest and the report."""
        out: dict[str, object] = {
            "samples": int(self.u.shape[0]), "qp_iterations_median": float(np.median(self.qp_iterations)),
            "qp_iterations_max": int(np.max(self.qp_iterations, initial=0)),
            "failed_samples": sum(s != "ok" for s in self.status)}
        if self.feedback_seconds is not None and self.prepare_seconds is not None:
            out["feedback_us_median"] = float(np.median(self.feedback_seconds) * 1e6)
            out["prepare_us_median"] = float(np.median(self.prepare_seconds) * 1e6)
        total = self.sample_instructions
        if total is not None and self.feedback_instructions is not None:
            out["instructions_per_sample_median"] = float(np.median(total))
            out["instructions_per_sample_max"] = float(np.max(total))
            out["feedback_instructions_median"] = float(np.median(self.feedback_instructions))
            out["ms_at_168MHz_max"] = float(np.max(total) * CYCLES_PER_INSTRUCTION / M4_HZ * 1e3)
        return out


def reference_loop(ocp: MultipleShootingOCP, x0: FloatArray, steps: int, noise: float = 0.0
                   ) -> tuple[FloatArray, FloatArray]:
    """The Python RTIController's closed loop (states (K+1, nx), inputs (K, nu)) on the check's plant (with
    process noise of standard deviation `noise` per state and sample, `NOISE_SEED`)."""
    traj = simulate_closed_loop(RTIController(ocp), x0, steps, plant_method=PLANT_METHOD, plant_steps=PLANT_STEPS,
                                noise_std=noise or None, seed=NOISE_SEED, progress=False)
    return traj.x, traj.u


def process_noise(nx: int, steps: int, noise: float) -> FloatArray:
    """The checks' process noise, shape (steps, nx): what `simulate_closed_loop` adds after each plant step with
    ``noise_std=noise, seed=NOISE_SEED`` (its generator draws nx normals per step, in order)."""
    return noise * np.random.default_rng(NOISE_SEED).standard_normal((steps, nx))


def input_scale(spec: ControllerSpec) -> FloatArray:
    """Each input's scale: its bound range, or where unbounded the largest of 1, |u_ref| and |u_guess|."""
    span = spec.u_max - spec.u_min
    fallback = np.maximum(1.0, np.maximum(np.abs(spec.u_ref).max(axis=0), np.abs(spec.u_guess).max(axis=0)))
    return np.where(np.isfinite(span) & (span > 0), span, fallback)


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
    first_u : ndarray, shape (N, nu)
        The first sample's inputs in double: SQP to convergence from the
        spec's guess (the C's first feedback: a cold start).
    """

    applied: float
    applied_estimate: float
    prediction: float
    prediction_estimate: float
    first_u: FloatArray


def input_tolerance(ocp: MultipleShootingOCP, spec: ControllerSpec, x0: FloatArray, real: str, samples: int,
                    seed: int = 0) -> Tolerance:
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
    """
    N, nx, nu = ocp.horizon, ocp.nx, ocp.nu
    builder = StageQPBuilder(ocp)
    d = ocp.layout.unpack_parameters(ocp.parameters(x0))
    xg, ug, zero = spec.x_guess, spec.u_guess, np.zeros(nu)
    qp = builder.with_state(builder.build(xg, ug, d["x_ref"], d["u_ref"], d["p"], 0.0, zero), x0, zero)
    x_start = builder.guess(xg, ug, zero)
    exact = solve_stage_qp(qp, x_guess=x_start, u_guess=ug)
    xs = np.array(xg, dtype=float)
    xs[0] = x0
    cold = sqp(xs, ug, lambda a, b, f: builder.sqp_step(a, b, d["x_ref"], d["u_ref"], d["p"], 0.0, zero, loose=f),
               lambda a, b: ocp.cost(a, b), lambda a, b: builder.defects(a, b, d["p"], 0.0),
               max_iter=COLD_START_ITERATIONS)
    cast = np.float32 if real == "float" else np.float64
    z0 = (spec.model.z0,) if spec.model.nz else ()  # (a DAE's step: Newton from the model's z0)
    vectors = [[np.asarray(v, dtype=cast).astype(float) for v in (xg[k], ug[k], spec.p0, k * spec.dt, spec.dt, *z0)]
               for k in range(N)]
    spread = rounding_spread(spec.step, vectors, real, elementwise=True)
    u = UNIT_ROUNDOFF[real]
    rng = np.random.default_rng(seed)
    scale = input_scale(spec)
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
        moved = solve_stage_qp(q, x_guess=x_start, u_guess=ug)
        if moved.status == 0:
            move = np.abs(moved.u - exact.u) / scale
            first, whole = max(first, float(move[:samples].max())), max(whole, float(move.max()))
    key = "float" if real == "float" else "double"
    floor = max(TOLERANCE_FLOOR[key], SQP_ALLOWANCE[key] * (1.0 + max(np.abs(xs).max(), np.abs(ug).max()))
                / float(scale.min()))
    return Tolerance(max(TOLERANCE_SAFETY * first, floor), first, max(TOLERANCE_SAFETY * whole, floor), whole,
                     cold.u)


def _write(export: CExport, folder: Path) -> None:
    for fname, text in export.files.items():
        (folder / fname).write_text(text)


def host_loop(export: CExport, spec: ControllerSpec, x0: FloatArray, steps: int, noise: float = 0.0) -> LoopRun:
    """The generated controller compiled for this machine (ctypes) in a closed loop with the check's plant (and
    its process noise: `process_noise`)."""
    with tempfile.TemporaryDirectory(prefix="shooting_ctl_host_") as tmp:
        _write(export, Path(tmp))
        controller = load_controller(tmp, model=spec.model)
        controller.set_budget(*CHECK_BUDGET)  # (the reference has no budget)
        controller.step(x0, 0.0)  # the first sample alone: its whole prediction (the closed loop resets it)
        first = None if controller.u_pred is None else controller.u_pred.copy()
        traj = simulate_closed_loop(controller, x0, steps, plant_method=PLANT_METHOD, plant_steps=PLANT_STEPS,
                                    noise_std=noise or None, seed=NOISE_SEED, progress=False)
    return LoopRun("host", traj.x, traj.u, list(traj.status), traj.iterations,
                   feedback_seconds=np.array(controller.feedback_times[:len(traj.u)]),
                   prepare_seconds=np.array(controller.preparation_times[1:len(traj.u) + 1]),
                   first_prediction=first)


_BOARD_MAIN = """\
/* Closed loop on the emulated Cortex-M4: the generated controller and the plant in double. */
#include <stdio.h>
#include "{stem}.h"
#include "shooting_plant.h"
{systick}
static const double x_init[{nx}] = {{{x0}}};
static const double p_plant[{np1}] = {{{p}}};
static const double noise[{steps}][{nx}] = {{{noise}}};  /* process noise after each plant step (check.process_noise) */
static double z_plant[{nz1}] = {{{z0}}};  /* a DAE plant's algebraic states: consistent at x0, then warm */

int main(void) {{
  {stem}_mem* mem = {stem}_default();
  double x[{nx}], xn[{nx}], ud[{nu}];
  {name}_real xr[{nx}], u[{nu}];
  unsigned int a, b, fb, prep;
  int k, i, st;
  systick_start();
  for (i = 0; i < {nx}; ++i) x[i] = x_init[i];
  if ({stem}_init(mem) || {stem}_prepare(mem)) {{ printf("prepare failed\\n"); return 3; }}
  {stem}_set_budget(mem, {budget_qp}, {budget_sqp});  /* (the reference has no budget) */
  for (k = 0; k < {steps}; ++k) {{
    for (i = 0; i < {nx}; ++i) xr[i] = ({name}_real)x[i];
    a = systick_now();
    st = {stem}_feedback(mem, xr, u);
    b = systick_now();
    fb = (a - b) & 0xFFFFFFu;
    a = systick_now();
    (void){stem}_shift(mem);
    (void){stem}_prepare(mem);
    b = systick_now();
    prep = (a - b) & 0xFFFFFFu;
    printf("k %d %d %d %u %u", k, st, mem->qp_iterations, fb, prep);
    for (i = 0; i < {nu}; ++i) {{ ud[i] = (double)u[i]; printf(" %.17g", ud[i]); }}
    printf("\\n");
    if (shooting_plant_step(x, ud, p_plant, {dt} * k, {dt}, {plant_z}xn, 0, 0{plant_z_out})) return 4;
    for (i = 0; i < {nx}; ++i) x[i] = xn[i] + noise[k][i];
    printf("x");
    for (i = 0; i < {nx}; ++i) printf(" %.17g", x[i]);
    printf("\\n");
  }}
  return 0;
}}
"""


def board_loop(export: CExport, spec: ControllerSpec, x0: FloatArray, steps: int, noise: float = 0.0) -> LoopRun:
    """The generated controller and the plant (double) in a closed loop on QEMU's mps2-an386, instructions counted.

    Raises
    ------
    ToolchainError
        A tool that is missing, fails to build, or times out; or a program that faults.
    """
    model = spec.model
    plant = build_integrator(model, PLANT_METHOD, PLANT_STEPS, "none", name="shooting_plant")
    z_start = model.consistent_z(x0, model.u0, model.p0) if model.nz else np.zeros(0)  # (as the host's plant)
    plant_c = generate_c(plant, "shooting_plant", real="double")
    stem = export.name
    main = _BOARD_MAIN.format(
        stem=stem, name=stem[:-len("_mpc")], systick=qemu_mps2.SYSTICK_C, nx=model.nx, nu=model.nu,
        budget_qp=CHECK_BUDGET[0], budget_sqp=CHECK_BUDGET[1],
        noise=",".join("{" + ", ".join(repr(float(v)) for v in row) + "}"
                       for row in process_noise(model.nx, steps, noise)),
        np1=max(model.np, 1), x0=", ".join(repr(float(v)) for v in x0),
        p=", ".join(repr(float(v)) for v in model.p0) or "0.0", steps=steps, dt=literal(spec.dt, "double"),
        nz1=max(model.nz, 1), z0=", ".join(repr(float(v)) for v in z_start) or "0.0",
        plant_z="z_plant, " if model.nz else "", plant_z_out=", z_plant" if model.nz else "")
    with tempfile.TemporaryDirectory(prefix="shooting_ctl_m4_") as tmp:
        d = Path(tmp)
        _write(export, d)
        for fname, text in plant_c.files.items():
            if fname.endswith((".c", ".h")):
                (d / fname).write_text(text)
        (d / "board_main.c").write_text(main)
        result = qemu_mps2.run_on_cortex_m4([d / f"{stem}.c", d / "shooting_plant.c", d / "board_main.c"],
                                            include_dirs=(d,), workdir=d, qemu_args=qemu_mps2.ICOUNT_ARGS,
                                            timeout=600.0)
    if result.exit_code != 0:
        raise ToolchainError(f"the closed loop on the emulated Cortex-M4 exited with {result.exit_code}"
                             f"{' (a fault)' if result.faulted else ''}: "
                             f"{first_error_line(result.stdout + result.stderr)}")
    return _parse_board(result.stdout, model.nx, model.nu, x0)


def _parse_board(stdout: str, nx: int, nu: int, x0: FloatArray) -> LoopRun:
    us, status, iters, fb, prep = [], [], [], [], []
    xs = [np.asarray(x0, dtype=float)]
    for line in stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == "k" and len(parts) == 6 + nu:
            status.append(CONTROLLER_STATUS.get(int(parts[2]), parts[2]))
            iters.append(int(parts[3]))
            fb.append(int(parts[4]) * qemu_mps2.INSTRUCTIONS_PER_SYSTICK)
            prep.append(int(parts[5]) * qemu_mps2.INSTRUCTIONS_PER_SYSTICK)
            us.append([float(v) for v in parts[6:]])
        elif parts and parts[0] == "x" and len(parts) == 1 + nx:
            xs.append(np.array([float(v) for v in parts[1:]]))
    if len(xs) != len(us) + 1:
        raise ToolchainError(f"the closed loop on the emulated Cortex-M4 printed {len(us)} inputs and "
                             f"{len(xs) - 1} states: {stdout[-300:]!r}")
    u = np.array(us, dtype=float).reshape(-1, nu)
    x = np.array(xs, dtype=float).reshape(-1, nx)
    return LoopRun("cortex-m4", x, u, status, np.array(iters, dtype=int), feedback_instructions=np.array(fb, float),
                   prepare_instructions=np.array(prep, float))
