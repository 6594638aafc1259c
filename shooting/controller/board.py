"""The generated controller in a closed loop on QEMU's emulated Cortex-M4, every cycle costed.

A program runs controller and plant (the model integrated accurately, in double) on the MPS2 AN386 board
(`shooting.codegen.qemu_mps2`), under QEMU's execution trace costed by the cycle model
(`shooting.codegen.cycles`): each sample's feedback and preparation are segments started by marker functions,
and the controller, compiled with ``NAME_MPC_PHASE`` defined (through ``NAME_MPC_CONFIG``), marks its phases
too (a QP iteration, the linearisation, an evaluation of the OCP's functions, the bookkeeping between them), so
that each phase's largest cost is known: `shooting.controller.loop_run.LoopRun.worst_case` bounds a sample from
them and the budget.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shooting.codegen import cycles
from shooting.codegen.c_files import CExport, generate_c
from shooting.codegen.emitter import literal
from shooting.codegen.toolchain import ToolchainError, first_error_line
from shooting.controller.c_source import MAX_QP_ITERATIONS, ControllerSpec
from shooting.controller.host import CONTROLLER_STATUS
from shooting.controller.loop_run import PHASES, LoopRun
from shooting.integrate.integrator import build_integrator
from shooting.model import Model
from shooting.mpc.controllers import ReferenceFunction, sample_horizon
from shooting.mpc.sqp import COLD_START_ITERATIONS

__all__ = ["BOARD_BUDGET", "PLANT_METHOD", "PLANT_STEPS", "board_loop", "process_noise", "reference_tables"]

FloatArray = npt.NDArray[np.float64]

#: The plant of every check: the model integrated by this tableau and substeps, in double.
PLANT_METHOD, PLANT_STEPS = "dopri5", 20

#: The budget of the board's closed loop (the reference, `RTIController`, has none; see `check.CHECK_BUDGET`).
BOARD_BUDGET = (MAX_QP_ITERATIONS, COLD_START_ITERATIONS)

#: The seed of the checks' process noise: the same draws on the host, the board and the reference.
NOISE_SEED = 0


def process_noise(nx: int, steps: int, noise: float, seed: int = NOISE_SEED) -> FloatArray:
    """The checks' process noise, shape (steps, nx): what `shooting.simulate_closed_loop` adds after each plant
    step with ``noise_std=noise, seed=seed`` (its generator draws nx normals per step, in order)."""
    return noise * np.random.default_rng(seed).standard_normal((steps, nx))


_PHASES_H = """\
/* The board check's phase markers for {stem}.c (NAME_MPC_CONFIG): each phase a segment of the cycle trace. */
void shooting_phase(int phase);
#define {NAME}_MPC_PHASE(mem, phase) ((void)(mem), shooting_phase(phase))
"""

_BOARD_MAIN = """\
/* Closed loop on the emulated Cortex-M4: the generated controller and the plant in double. */
#include <stdio.h>
#include "{stem}.h"
#include "shooting_plant.h"
{markers}
static const double x_init[{nx}] = {{{x0}}};
static const double p_plant[{np1}] = {{{p}}};
static const double noise[{steps}][{nx}] = {{{noise}}};  /* process noise after each plant step */
static double z_plant[{nz1}] = {{{z0}}};  /* a DAE plant's algebraic states: consistent at x0, then warm */
{reference_tables}
void shooting_phase(int phase) {{
  switch (phase) {{
    case {NAME}_MPC_PHASE_QP_ITERATION: shooting_mark_qp_iteration(); break;
    case {NAME}_MPC_PHASE_LINEARISE: shooting_mark_linearise(); break;
    case {NAME}_MPC_PHASE_EVALUATE: shooting_mark_evaluate(); break;
    default: shooting_mark_other(); break;
  }}
}}

int main(void) {{
  {stem}_mem* mem = {stem}_default();
  double x[{nx}], xn[{nx}], ud[{nu}];
  {name}_real xr[{nx}], u[{nu}];
  int k, i, j, st;
  for (i = 0; i < {nx}; ++i) x[i] = x_init[i];
  (void)j;
  if ({stem}_init(mem) || {stem}_prepare(mem)) {{ printf("prepare failed\\n"); return 3; }}
  {stem}_set_budget(mem, {budget_qp}, {budget_sqp});  /* (the reference has no budget) */
  for (k = 0; k < {steps}; ++k) {{
    for (i = 0; i < {nx}; ++i) xr[i] = ({name}_real)x[i];
    shooting_mark_feedback();
{set_reference}    st = {stem}_feedback(mem, xr, u);
    shooting_mark_prepare();
    (void){stem}_shift(mem);
    (void){stem}_prepare(mem);
    shooting_mark_plant();
    printf("k %d %d %d", k, st, mem->qp_iterations_sample);
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


def reference_tables(model: Model, dt: float, horizon: int, steps: int, reference: ReferenceFunction | None,
                     real: str) -> tuple[str, str]:
    """C text of a closed loop that follows `reference` sample by sample: static tables of the reference at
    t_i = i dt, i = 0..steps+N (x_ref; u_ref when the reference gives one), and the statements that hand sample k
    its stages' rows (``NAME_mpc_set_reference(mem, j, x_tab[k + j], u_tab[k + j])``, as the host's
    `shooting.simulate_closed_loop` does with `shooting.mpc.controllers.sample_horizon`); empty without one.
    The statements use the loop's ``mem``, ``k`` and an ``int j``."""
    if reference is None:
        return "", ""
    data = sample_horizon(model, 0.0, dt, steps + horizon, reference=reference)
    assert data.x_ref is not None

    def table(name: str, rows: FloatArray) -> str:
        body = ",\n  ".join("{" + ", ".join(literal(float(v), real) for v in row) + "}" for row in rows)
        return f"static const REAL {name}[{rows.shape[0]}][{rows.shape[1]}] = {{\n  {body}}};\n"

    text = table("x_tab", data.x_ref)
    u_row = "0"
    if data.u_ref is not None and model.nu:
        text += table("u_tab", data.u_ref)
        u_row = f"j < {horizon} ? u_tab[k + j] : 0"
    calls = (f"    for (j = 0; j <= {horizon}; ++j)\n"
             f"      if (STEM_set_reference(mem, j, x_tab[k + j], {u_row})) {{ printf(\"reference failed\\n\"); "
             f"return 5; }}\n")
    return text, calls


def board_loop(export: CExport, spec: ControllerSpec, x0: FloatArray, steps: int, noise: float = 0.0, *,
               seed: int = NOISE_SEED, budget: tuple[int, int] = BOARD_BUDGET,
               reference: ReferenceFunction | None = None) -> LoopRun:
    """The generated controller and the plant (double) in a closed loop on QEMU's mps2-an386, every cycle costed.

    Parameters
    ----------
    export : CExport
    spec : ControllerSpec
    x0 : ndarray, shape (nx,)
    steps : int
    noise : float
        Process noise (`process_noise`) added after each plant step.
    seed : int
        The noise's seed.
    budget : (int, int)
        ``NAME_mpc_set_budget``'s QP and SQP iterations (default `BOARD_BUDGET`).
    reference : callable ``t -> (x_ref, u_ref)``, optional
        A time-varying reference the loop follows sample by sample (`reference_tables`).

    Returns
    -------
    LoopRun
        With instructions and cycles per sample, each phase's largest cost and the cycle model.

    Raises
    ------
    ToolchainError
        A tool that is missing, fails to build, or times out; or a program that faults.
    """
    model = spec.plant_model
    plant = build_integrator(model, PLANT_METHOD, PLANT_STEPS, "none", name="shooting_plant")
    z_start = model.consistent_z(x0, model.u0, model.p0) if model.nz else np.zeros(0)  # (as the host's plant)
    plant_c = generate_c(plant, "shooting_plant", real="double")
    stem = export.name
    name = stem[:-len("_mpc")]
    tables, calls = reference_tables(model, spec.dt, spec.horizon, steps, reference, export.manifest["real"])
    table = ",".join("{" + ", ".join(repr(float(v)) for v in row) + "}"
                     for row in process_noise(model.nx, steps, noise, seed))
    main = _BOARD_MAIN.format(
        stem=stem, name=name, NAME=name.upper(), markers=cycles.marker_functions("feedback", "prepare", "plant",
                                                                               *PHASES),
        nx=model.nx, nu=model.nu, np1=max(model.np, 1), x0=", ".join(repr(float(v)) for v in x0),
        p=", ".join(repr(float(v)) for v in model.p0) or "0.0", steps=steps, dt=literal(spec.dt, "double"),
        nz1=max(model.nz, 1), z0=", ".join(repr(float(v)) for v in z_start) or "0.0", noise=table,
        budget_qp=budget[0], budget_sqp=budget[1],
        plant_z="z_plant, " if model.nz else "", plant_z_out=", z_plant" if model.nz else "",
        reference_tables=tables.replace("REAL", f"{name}_real"), set_reference=calls.replace("STEM", stem))
    with tempfile.TemporaryDirectory(prefix="shooting_ctl_m4_") as tmp:
        d = Path(tmp)
        for fname, text in export.files.items():
            (d / fname).write_text(text)
        for fname, text in plant_c.files.items():
            if fname.endswith((".c", ".h")):
                (d / fname).write_text(text)
        (d / "board_main.c").write_text(main)
        (d / "board_phases.h").write_text(_PHASES_H.format(stem=stem, NAME=name.upper()))
        run = cycles.trace_on_cortex_m4([d / f"{stem}.c", d / "shooting_plant.c", d / "board_main.c"],
                                        include_dirs=(d,), workdir=d,
                                        extra_flags=(f"-D{name.upper()}_MPC_CONFIG=\"board_phases.h\"",),
                                        timeout=600.0)
    if run.exit_code != 0:
        raise ToolchainError(f"the closed loop on the emulated Cortex-M4 exited with {run.exit_code}"
                             f"{' (a fault)' if run.faulted else ''}: "
                             f"{first_error_line(run.stdout + run.stderr)}")
    return _loop(run, model.nx, model.nu, x0)


def _loop(run: cycles.TraceRun, nx: int, nu: int, x0: FloatArray) -> LoopRun:
    """The printed loop, and each sample's instructions and cycles from the trace's segments: a sample's feedback
    runs from its "feedback" marker to its "prepare" marker, its preparation from there to "plant", the phases'
    markers between them splitting both."""
    us, status, iters = [], [], []
    xs = [np.asarray(x0, dtype=float)]
    for line in run.stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == "k" and len(parts) == 4 + nu:
            status.append(CONTROLLER_STATUS.get(int(parts[2]), parts[2]))
            iters.append(int(parts[3]))
            us.append([float(v) for v in parts[4:]])
        elif parts and parts[0] == "x" and len(parts) == 1 + nx:
            xs.append(np.array([float(v) for v in parts[1:]]))
    if len(xs) != len(us) + 1:
        raise ToolchainError(f"the closed loop on the emulated Cortex-M4 printed {len(us)} inputs and "
                             f"{len(xs) - 1} states: {run.stdout[-300:]!r}")
    fb: list[list[int]] = []  # per sample: feedback instructions, cycles, preparation instructions, cycles
    phases: dict[str, tuple[int, int]] = {}
    part = -1  # 0 in the feedback, 1 in the preparation, -1 outside a sample
    for seg in run.segments:
        if seg.marker == "feedback":
            fb.append([0, 0, 0, 0])
            part = 0
        elif seg.marker in ("prepare", "plant"):
            part = 1 if seg.marker == "prepare" else -1
        if part < 0:
            continue
        fb[-1][2 * part] += seg.instructions
        fb[-1][2 * part + 1] += seg.cycles
        key = {"feedback": "head", "prepare": "prep"}.get(seg.marker, seg.marker)
        old = phases.get(key, (0, 0))
        phases[key] = (max(old[0], seg.instructions), max(old[1], seg.cycles))
    if len(fb) != len(us):
        raise ToolchainError(f"the cycle trace holds {len(fb)} samples, the loop printed {len(us)}")
    counts = np.array(fb, dtype=float).reshape(-1, 4)
    return LoopRun("cortex-m4", np.array(xs, dtype=float).reshape(-1, nx), np.array(us, dtype=float).reshape(-1, nu),
                   status, np.array(iters, dtype=int), feedback_instructions=counts[:, 0],
                   prepare_instructions=counts[:, 2], feedback_cycles=counts[:, 1], prepare_cycles=counts[:, 3],
                   phases=phases, cycle_model=run.model.as_dict())
