"""The controller export as one library call: C files, closed-loop checks, sizes, manifest, safe install.

`export_controller` chains: read the OCP (`controller_spec`: refuses what the
C cannot do, computes the initial guess with IPOPT) -> generate the C
(`generate_controller`) -> with ``check``, run it in a closed loop on the host
against `RTIController` (`host_loop`) -> for ``target="cortex-m4"``,
cross-compile, measure flash and RAM, prove a float build free of double
precision, and with ``check`` run the closed loop on the emulated board with
instructions counted (`board_loop`) -> write the measurements into the
manifest and the header -> install. A failed check writes nothing.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shooting import _files, _validate
from shooting.codegen import toolchain
from shooting.codegen.c_files import CExport
from shooting.codegen.pipeline import ExportReport, ExportRuns, require_tools
from shooting.codegen.verify import CheckReport
from shooting.controller.c_source import (
    ControllerSpec,
    GuessNotSolved,
    budget_defaults,
    controller_files,
    controller_spec,
    generate_controller,
)
from shooting.controller.check import (
    MAX_TOLERANCE,
    NOISE_SEED,
    TERMINATION_SAFETY,
    TOLERANCE_FLOOR,
    TOLERANCE_SAFETY,
    LoopRun,
    Tolerance,
    board_loop,
    compare_inputs,
    host_loop,
    input_scale,
    input_tolerance,
    reference_run,
)
from shooting.controller.diagnosis import explain, status_hint
from shooting.controller.firmware import BOARDS, FIRMWARE_DIR, NETDUINOPLUS2_ARGS, firmware_files
from shooting.controller.firmware_estimator import board_estimator
from shooting.estimate.ekf import EKF
from shooting.mpc.controllers import ReferenceFunction, sample_horizon
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.mpc.scenarios import Scenario, build_ocp
from shooting.options import CONTROLLER_HESSIANS, REALS, TARGETS, ControllerHessian, Real, Target

__all__ = ["CHECK_SAMPLES", "CHECK_STEPS", "REJECTED_NOTE", "STILL", "CheckedLoop", "check_controller_export",
           "export_controller", "rejected_files"]

Progress = Callable[[str], None]

#: Closed-loop samples of the check, and how many of the first are compared with Python.
CHECK_STEPS, CHECK_SAMPLES = 40, 5

#: A checked closed loop "barely moves" when every state stays within this fraction of max(1, |x0_i|) of its
#: range and every input within it of its scale (`input_scale`): far above rounding, far below any motion a
#: controller is exported for. Such a check compares a controller at rest; it is said, not passed silently.
STILL = 1e-6


#: Largest weight of a float controller: by the rule of the double bound
#: (`shooting._validate.MAX_WEIGHT`: w^2 e^2 below the range for deviations
#: e up to 1e4), FLT_MAX = 3.4e38 allows w up to 1.8e15.
MAX_FLOAT_WEIGHT = 1e15


def _check_float_weights(ocp: MultipleShootingOCP) -> None:
    """ValueError naming the first weight too large for single precision."""
    weights = {"Q": ocp.Q, "R": ocp.R, "Q_terminal": ocp.Q_terminal, "R_delta": ocp.R_delta}
    if ocp.soft_x_bounds:
        weights.update(slack_l1=np.array(ocp.slack_l1), slack_l2=np.array(ocp.slack_l2))
    for option, value in weights.items():
        largest = float(np.abs(value).max(initial=0.0))
        if largest > MAX_FLOAT_WEIGHT:
            raise ValueError(f"{option} has a weight of {largest:.3g}: a float controller takes weights within "
                             f"+-{MAX_FLOAT_WEIGHT:g} (beyond, the QP's products overflow single precision); rescale "
                             f"the cost (every weight by the same factor) or export with real='double'")


def _legacy(manifest: dict[str, Any]) -> list[str]:
    return controller_files(str(manifest.get("name", "")))


def check_controller_export(out_dir: str | os.PathLike[str], name: str | None = None, *, real: Real = "double",
                            target: Target = "host", check: bool = False, force: bool = False) -> None:
    """Raise ValueError now if `export_controller` would refuse these options (before any long work)."""
    _validate.choice(real, REALS, "real")
    target = _validate.choice(target, TARGETS, "target")
    check = _validate.flag(check, "check")
    names = [] if name is None else \
        controller_files(_validate.identifier(name, "name", maximum=_validate.MAX_PREFIX_LENGTH))
    _files.check_destination(out_dir, names, "manifest.json", force=_validate.flag(force, "force"), legacy=_legacy)
    require_tools(target, check)


def _loop_report(run: LoopRun, ref_u: np.ndarray, ref_status: list[str], real: Real, scale: np.ndarray,
                 tol: Tolerance, input_names: list[str]) -> CheckReport:
    """The first samples' inputs against the reference loop's and, on the host, the first QP's whole prediction
    against the verified optimum of the same OCP (a faithfully compiled controller is within the rounding
    estimates); `details` explains a failure (`shooting.controller.diagnosis.explain`)."""
    n = min(CHECK_SAMPLES, run.u.shape[0])
    worst = {"u": compare_inputs(run.u, ref_u, CHECK_SAMPLES, scale)}
    allowed = {"u": tol.applied}
    reasons = [explain("input", run.u[:n], ref_u[:n], scale, tol.applied, run.status, ref_status, input_names,
                       real=real)]
    if run.first_prediction is not None and tol.first_u is not None:
        worst["u_pred"] = float(np.max(np.abs(run.first_prediction - tol.first_u) / scale))
        allowed["u_pred"] = tol.prediction
        reasons.append(explain("first prediction", run.first_prediction, tol.first_u, scale, tol.prediction,
                               run.status[:1], ["ok"], input_names, reference=tol.first_reference, real=real))
    failed = [(k, s) for k, s in enumerate(run.status) if s != "ok"]
    passed = all(worst[k] <= allowed[k] for k in worst) and not failed
    if failed:
        k, status = failed[0]
        reasons.append(f"{len(failed)} of {len(run.status)} samples did not end ok, the first at sample {k} "
                       f"('{status}'): {status_hint(status)}")
    if tol.capped and not passed:
        reasons.append(f"{real} rounding alone moves this problem's inputs by about {tol.applied_estimate:.1e} of "
                       f"their range (estimate), more than a check can allow ({MAX_TOLERANCE[real]:.0e}): "
                       + ("export in double, or rescale the problem" if real == "float" else "rescale the problem"))
    details = "; ".join(r for r in reasons if r)
    margin = max(worst[k] / allowed[k] if allowed[k] > 0 else float("inf") for k in worst)
    return CheckReport(run.target, real, n, worst, allowed, passed, details, margin=margin)


@dataclasses.dataclass(frozen=True)
class CheckedLoop:
    """What the checks' closed loops run: where they start, which reference they follow, for how long.

    Attributes
    ----------
    x0 : ndarray, shape (nx,)
        The loops' start (the model's units).
    steps : int
        Samples.
    noise : float
        Process noise (standard deviation per state and sample).
    reference : callable ``t -> (x_ref, u_ref)`` or None
        A time-varying reference followed sample by sample; None: the OCP's own.
    label : {"scenario", "constant", "none"}
        The reference in one word for the manifest: the time-varying one, the OCP's constant one, or none at all
        (every reference zero: regulation to the origin).
    """

    x0: np.ndarray
    steps: int
    noise: float
    reference: ReferenceFunction | None
    label: str

    def describe(self) -> str:
        """The loop in words, for the printed line."""
        towards = {"scenario": "along the scenario's reference", "constant": "towards the OCP's constant reference",
                   "none": "towards the origin (no reference)"}[self.label]
        return f"from x0 = [{', '.join(f'{v:.4g}' for v in self.x0)}] {towards}"


def _reference_label(spec: ControllerSpec, reference: ReferenceFunction | None) -> str:
    if reference is not None:
        return "scenario"
    return "constant" if np.any(spec.x_ref != 0) or np.any(spec.u_ref != 0) else "none"


def _violations(ocp: MultipleShootingOCP, run: LoopRun) -> dict[str, float]:
    """How far the checked loop went past the OCP's state bounds and path constraints (the model's units; 0 when
    within): what soft rows price instead of imposing, said beside the verdict."""
    x = run.x[1:]
    over = np.maximum(np.maximum(ocp.x_min - x, x - ocp.x_max), 0.0)
    out = {"max_state_violation": float(np.where(np.isfinite(over), over, 0.0).max(initial=0.0))}
    if ocp.problem.constraints.path_constraints is not None and run.u.shape[0]:
        out["max_path_violation"] = float(np.maximum(ocp.path_values(run.x, run.u), 0.0).max(initial=0.0))
    return out


def _motion(run: LoopRun, scale: np.ndarray) -> tuple[list[float], bool]:
    """Each state's range over the loop (largest minus smallest, the model's units), and whether the loop moved
    (`STILL`)."""
    x0 = run.x[0]
    state_range = np.ptp(run.x, axis=0)
    input_range = np.ptp(run.u, axis=0) if run.u.shape[0] else np.zeros(run.u.shape[1])
    moved = bool(np.any(state_range > STILL * np.maximum(1.0, np.abs(x0))) or np.any(input_range > STILL * scale))
    return [float(v) for v in state_range], moved


class _Runs(ExportRuns):
    """The checks and measurements of one controller export."""

    def __init__(self, export: CExport, spec: ControllerSpec, ocp: MultipleShootingOCP, loop: CheckedLoop,
                 say: Progress) -> None:
        super().__init__(export, say)
        self.spec, self.ocp, self.loop = spec, ocp, loop
        self.x0, self.steps, self.noise = loop.x0, loop.steps, loop.noise
        self.budget = (spec.max_qp_iterations, spec.max_sqp_iterations)
        self._ref: tuple[np.ndarray, list[str]] | None = None
        self._tolerance: Tolerance | None = None

    def tolerance(self) -> Tolerance:
        """The input tolerance of this export's precision and problem, and the rounding estimate behind it."""
        if self._tolerance is None:
            real = self.export.manifest["real"]
            self.say(f"estimating what {real} rounding does to the first QP's inputs (the check's tolerance)")
            # (in the controller's variables: the OCP's scaled twin, shooting.mpc.scaling; the verified first
            # prediction back in the model's units, as the C's interface gives it)
            twin, dx, du = self.ocp.scaled_twin()
            first = sample_horizon(self.spec.plant_model, 0.0, self.spec.dt, self.spec.horizon,
                                   reference=self.loop.reference)  # (the first sample's references)
            tol = input_tolerance(twin, self.spec, self.x0 / dx, real, CHECK_SAMPLES,
                                  x_ref=None if first.x_ref is None else first.x_ref / dx,
                                  u_ref=None if first.u_ref is None else first.u_ref / du)
            self._tolerance = tol if tol.first_u is None else dataclasses.replace(tol, first_u=tol.first_u * du)
        return self._tolerance

    def reference(self) -> tuple[np.ndarray, list[str]]:
        """The reference loop's inputs (K, nu) and statuses."""
        if self._ref is None:
            self.say(f"running the Python RTIController for {self.steps} samples (the reference)")
            rule = "stage" if self.export.manifest["real"] == "float" else "riccati"  # (the C's: c_source)
            _, u, status = reference_run(self.ocp, self.x0, self.steps, self.noise, hessian=self.spec.hessian_option,
                                         convexification=rule, reference=self.loop.reference)
            self._ref = u, status
        return self._ref

    def record(self, run: LoopRun, key: str) -> None:
        real = self.export.manifest["real"]
        tol = self.tolerance()
        ref_u, ref_status = self.reference()
        report = _loop_report(run, ref_u, ref_status, real, input_scale(self.spec), tol,
                              list(self.spec.model.input_names))
        self.checks.append(report)
        summary = run.summary()
        scale = input_scale(self.spec)
        state_range, moved = _motion(run, scale)
        violations = _violations(self.ocp, run)
        self.measured[key] = {"x0": [float(v) for v in self.x0], "reference": self.loop.label,
                              "state_range": state_range, "moved": moved, **violations,
                              "budget": {"max_qp_iterations": self.budget[0], "max_sqp_iterations": self.budget[1]},
                              "process_noise": self.noise, "noise_seed": NOISE_SEED,
                              "samples_compared": report.vectors, "input_error": report.worst["u"],
                              "input_tolerance": report.allowed["u"], "rounding_estimate": tol.applied_estimate,
                              "error_scale": "each input's bound range", "passed": report.passed, **summary}
        if "u_pred" in report.worst:
            self.measured[key].update(prediction_error=report.worst["u_pred"],
                                      prediction_tolerance=report.allowed["u_pred"],
                                      prediction_rounding_estimate=tol.prediction_estimate)
        self.measured["input_tolerance"] = tol.applied
        line = (f"{run.target} {real}: closed loop of {summary['samples']} samples {self.loop.describe()} at the "
                f"export's budget ({self.budget[0]} QP, {self.budget[1]} SQP iterations), first {report.vectors} "
                f"inputs "
                f"within {report.worst['u']:.1e} of the Python RTIController on their ranges (allowed "
                f"{report.allowed['u']:.1e}: the largest of {TOLERANCE_SAFETY:g} x the {real} rounding estimate "
                f"{tol.applied_estimate:.1e}, the solvers' stopping accuracy (at least {TOLERANCE_FLOOR[real]:.0e}) "
                f"and {TERMINATION_SAFETY:g} x what the interior point's stopping points do to these samples "
                f"{tol.termination_first:.1e})")
        if "u_pred" in report.worst:
            why = (f" = {TERMINATION_SAFETY:g} x how far the solvers' stopping points (the {real} interior point's, "
                   f"the SQP's and IPOPT's) move it, {tol.termination:.1e}"
                   if report.allowed["u_pred"] == TERMINATION_SAFETY * tol.termination else "")
            line += (f", first prediction within {report.worst['u_pred']:.1e} of {tol.first_reference} (allowed "
                     f"{report.allowed['u_pred']:.1e}{why})")
        elif run.first_prediction is not None:
            line += f", first prediction not compared (verified optimum: {tol.first_reference})"
        line += (f", QP iterations median {summary['qp_iterations_median']:g} max {summary['qp_iterations_max']}")
        if "cycles_per_sample_median" in summary:
            worst = run.worst_case(self.spec.max_qp_iterations, self.spec.max_sqp_iterations)
            self.measured[key]["worst_case"] = worst
            line += (f", per sample {summary['cycles_per_sample_median']:.0f} cycles = {summary['ms_median']:.3f} ms "
                     f"median, {summary['cycles_per_sample_max_after_start']:.0f} = "
                     f"{summary['ms_max_after_start']:.3f} ms worst after the first ({summary['ms_max']:.2f} ms the "
                     f"first, a cold start; {summary['instructions_per_sample_median']:.0f} instructions median), "
                     f"at most {float(worst['ms']):.2f} ms within the budget "  # type: ignore[arg-type]
                     f"({self.spec.max_qp_iterations} QP, {self.spec.max_sqp_iterations} SQP iterations)")
        if "feedback_us_median" in summary:
            line += (f", feedback {summary['feedback_us_median']:.1f} us + preparation "
                     f"{summary['prepare_us_median']:.1f} us (median)")
        past = [f"{what} by up to {violations[key]:.3g}" for key, what in
                (("max_state_violation", "the state bounds"), ("max_path_violation", "the path constraints"))
                if violations.get(key, 0.0) > 0]
        if past:  # (soft rows price a violation instead of imposing the row: said, whatever the verdict)
            line += f"; the closed loop went past {' and '.join(past)}"
        self.lines.append(line + (": ok" if report.passed else f": MISMATCH {report.details}"))
        if not report.passed:
            self.problems.append(self.lines[-1])
        if not moved:
            still = (f"{run.target} {real}: the checked closed loop barely moved (every state within {STILL:g} of "
                     f"its start, every input of its range): it compared a controller at rest, not the motion it is "
                     f"exported for; start the check elsewhere (check_x0=, --check-x0) or give it a reference")
            self.lines.append(still)
            warnings.warn(still, UserWarning, stacklevel=4)

    def sizes(self) -> dict[str, Any]:
        """The header's and manifest's measured sizes: flash, RAM, the memory struct, the checks' most QP
        iterations."""
        sizes: dict[str, Any] = {}
        if self.size is not None:
            sizes.update(flash=self.size.flash, ram=self.size.ram, mem_bytes=self.measured["cortex_m4"]["mem_bytes"])
        iterations = [v["qp_iterations_max"] for k, v in self.measured.items() if k.startswith("check_")]
        if iterations:
            sizes["qp_iterations_max"] = max(iterations)
        return sizes

    def run(self, target: Target, check: bool) -> None:
        if check:
            self.say("closed loop on the host (ctypes)")
            self.record(host_loop(self.export, self.spec, self.x0, self.steps, self.noise,
                                  reference=self.loop.reference, budget=self.budget), "check_host")
        if target != "cortex-m4":
            return
        self.say("cross-compiling for Cortex-M4")
        if not self.cross_compile("auto", instance=f"{self.export.name}_instance"):
            return
        if check:
            self.say(f"closed loop on the emulated Cortex-M4 (qemu mps2-an386, -icount), {self.steps} samples")
            self.record(board_loop(self.export, self.spec, self.x0, self.steps, self.noise, budget=self.budget,
                                   reference=self.loop.reference), "check_cortex_m4")


def _subject(ocp: object, x0: object, reference: object) -> tuple[MultipleShootingOCP, object,
                                                                 ReferenceFunction | None]:
    """The OCP, start and reference `export_controller` exports and checks: a `Scenario`'s own (its OCP, start and
    reference where not given), else the OCP as given; ValueError for anything else."""
    if isinstance(ocp, Scenario):
        x0 = ocp.x0 if x0 is None else x0
        reference = ocp.reference if reference is None else reference
        ocp = build_ocp(ocp)
    if not isinstance(ocp, MultipleShootingOCP):
        raise ValueError(f"ocp must be a shooting.MultipleShootingOCP or a shooting.Scenario, got "
                         f"{type(ocp).__name__}")
    if reference is not None and not callable(reference):
        raise ValueError(f"reference must be a function of time t returning (x_ref, u_ref), got "
                         f"{type(reference).__name__}")
    return ocp, x0, reference


def export_controller(
    ocp: MultipleShootingOCP | Scenario,
    out_dir: str | os.PathLike[str],
    *,
    real: Real = "double",
    target: Target = "host",
    check: bool = False,
    force: bool = False,
    name: str | None = None,
    x0: object = None,
    check_x0: object = None,
    check_steps: int = CHECK_STEPS,
    reference: ReferenceFunction | None = None,
    metadata: Mapping[str, object] | None = None,
    progress: bool | Progress | None = None,
    max_qp_iterations: int | None = None,
    max_sqp_iterations: int | None = None,
    check_noise: float = 0.0,
    keep_failed: bool = False,
    hessian: ControllerHessian = "auto",
    firmware: str | None = None,
    estimator: EKF | None = None,
    measurement_noise: npt.ArrayLike = 0.0,
) -> ExportReport:
    """Export the real-time-iteration controller of `ocp` as C into `out_dir`, optionally checked.

    Writes ``NAME_mpc.c``, ``NAME_mpc.h``, ``manifest.json`` and ``Makefile``
    (see the header for the C interface and its status codes).

    Parameters
    ----------
    ocp : MultipleShootingOCP or Scenario
        Tracking cost with extra stage and terminal costs, input bounds,
        hard or soft state bounds (``soft_x_bounds``), path and terminal
        constraints, a rate penalty, references per stage, model parameters.
        A `Scenario` gives its OCP (`shooting.build_ocp`), and the defaults of
        `x0` and `reference`: its start and its time-varying reference.
    out_dir : str or path
        Created if missing; files we did not write are never touched.
    real : {"double", "float"}
    target : {"host", "cortex-m4"}
        "cortex-m4" also cross-compiles and measures flash and RAM.
    check : bool
        Run closed loops of `check_steps` samples from `check_x0` along
        `reference` on the host (and on the emulated Cortex-M4 for that
        target), at the export's budget, and compare the first
        `CHECK_SAMPLES` inputs with `RTIController` on each input's bound range,
        within a tolerance derived from the precision and the problem's
        conditioning (`shooting.controller.check.input_tolerance`,
        recorded in the manifest and the header). A failure writes nothing.
        The manifest's ``check_host`` (``check_cortex_m4``) records what was
        checked: ``x0``, ``reference`` ("scenario", "constant" or "none"),
        ``samples``, ``state_range`` (per state, the largest minus the smallest
        value over the loop, the model's units) and ``moved``; a loop that
        barely moves (`STILL`) is said in the report's lines and by a
        ``UserWarning``.
    force : bool
        Add our files to a directory that holds other files.
    name : str, optional
        C prefix (default the model's name).
    x0 : array_like, shape (nx,), optional
        Initial state of the guess and of the checks (default the scenario's
        start, else the model's ``x0``).
    check_x0 : array_like, shape (nx,), optional
        Initial state of the checks' closed loops (and of the firmware's),
        when it is not `x0`.
    check_steps : int
        Samples of the checks' closed loops (default `CHECK_STEPS`).
    reference : callable ``t -> (x_ref, u_ref)``, optional
        A time-varying reference (shapes (nx,) and (nu,), u_ref may be None)
        that the checks' loops and the firmware follow sample by sample, as
        `shooting.simulate_closed_loop` does (default: the scenario's; none:
        the OCP's own references).
    metadata : mapping, optional
        Extra manifest entries.
    progress : bool or callable ``(str) -> None``, optional
        One line before each stage: None or False silent (the default), True
        on stderr, a callable is called with each line.
    max_qp_iterations, max_sqp_iterations : int, optional
        The budget's defaults (``NAME_mpc_set_budget`` with 0 keeps them):
        iterations per QP (default 50) and SQP iterations per sample (default
        100). The checks run at this budget, as the board will (a sample it
        stops ends "budget", which fails the check: the Python reference has
        none), and report the worst case it allows.
    check_noise : float
        Process noise of the checks' closed loops: this standard deviation per
        state and sample, added after each plant step (the same draws, fixed
        seed, on the host, the board and the reference).
    keep_failed : bool
        When a check fails, install the rejected export anyway, its manifest
        marked ``"check_failed"`` and `REJECTED_NOTE` beside it saying why
        (``ok`` stays False); by default a failed check writes nothing.
    hessian : {"auto", "gauss-newton", "exact"}
        The QP's Hessian ("auto", the default: "exact" where the OCP has a
        stage or terminal cost that is not a least-squares one, else
        "gauss-newton"; the manifest's ``qp.hessian`` records the choice):
        the costs' own (Gauss-Newton for the dynamics), or
        the Lagrangian's, the constraints' curvature at the last QP's
        multipliers added and each stage's block projected to positive
        definite (as ``RTIController(hessian=)``, which the checks compare with).
    firmware : {"stm32f405"}, optional
        Also write ``firmware/`` (`shooting.controller.firmware`): startup
        code, linker script, clock and USART set-up and a ``main.c`` running
        the check's closed loop (`check_steps` samples from `x0`) on the
        board, with a Makefile; ``make -C OUT/firmware`` builds
        ``firmware.elf`` (QEMU's ``netduinoplus2`` runs it).
    estimator : EKF, optional
        With `firmware`: output feedback on the board
        (`shooting.controller.firmware_estimator`). The EKF's C (in `real`)
        runs beside the controller, updated after each plant step from the
        plant's sensors (its measurement) plus noise, and the controller sees
        its estimate, as ``simulate_closed_loop(..., estimator=estimator,
        measurement_noise=measurement_noise, seed=0)`` runs the same loop on
        the host. Its model must be the controller's (nx, nu), its dt the
        OCP's; its prior (x0, P0) is the loop's.
    measurement_noise : float or array_like, shape (ny,), default 0.0
        Standard deviations of the sensors' noise in the firmware's loop.

    Returns
    -------
    ExportReport
        ``errors`` holds ``{"u": worst relative input error}`` when checked;
        ``flash``/``ram`` for the Cortex-M4 target. When IPOPT fails on the
        OCP (the controller's guess) ``ok`` is False and nothing is written.

    Raises
    ------
    ValueError
        Bad options, an OCP the C cannot solve, weights above
        `MAX_FLOAT_WEIGHT` for a float export, a refused directory, a
        missing tool.
    """
    reporter = _validate.progress(progress)

    def say(message: str) -> None:
        if reporter is not None:
            reporter(message)

    ocp, x0, reference = _subject(ocp, x0, reference)
    real = _validate.choice(real, REALS, "real")
    target = _validate.choice(target, TARGETS, "target")
    check = _validate.flag(check, "check")
    force = _validate.flag(force, "force")
    keep_failed = _validate.flag(keep_failed, "keep_failed")
    steps = _validate.integer(check_steps, "check_steps", minimum=1, maximum=100_000)
    name = _validate.sanitized_identifier(ocp.model.name) if name is None else \
        _validate.identifier(name, "name", maximum=_validate.MAX_PREFIX_LENGTH)
    out = Path(out_dir)
    check_controller_export(out, name, real=real, target=target, check=check, force=force)
    if real == "float":
        _check_float_weights(ocp.scaled_twin()[0])  # (the weights the C holds: in the scaled variables)
    start = ocp.model.x0 if x0 is None else _validate.vector(x0, ocp.model.nx, "x0", broadcast=False)
    check_start = start if check_x0 is None else _validate.vector(check_x0, ocp.model.nx, "check_x0",
                                                                  broadcast=False)
    if reference is not None:  # (its every value checked now, before the long work: one line names a bad one)
        sample_horizon(ocp.model, 0.0, ocp.dt, ocp.horizon + steps, reference=reference)
    budget_defaults(max_qp_iterations, max_sqp_iterations)  # (refused before the long work)
    hessian = _validate.choice(hessian, CONTROLLER_HESSIANS, "hessian")
    if firmware is not None:
        firmware = _validate.choice(firmware, BOARDS, "firmware")
    noise = _validate.real(check_noise, "check_noise", minimum=0.0)
    board_est = board_estimator(estimator, measurement_noise, firmware, ocp, name, real, steps)

    say(f"solving the OCP from x0 with IPOPT for the initial guess (N = {ocp.horizon})")
    try:
        spec = controller_spec(ocp, x0=start, max_qp_iterations=max_qp_iterations,
                               max_sqp_iterations=max_sqp_iterations, hessian=hessian, real=real)
    except GuessNotSolved as err:  # a failed solve: reported, nothing written
        return ExportReport(ok=False, name=name, out_dir=out, files=[], errors={},
                            problems=(str(err),))
    say(f"generating the controller C ({real}; QP: {spec.nv} variables in {spec.horizon} stages)")
    export = generate_controller(spec, name, real=real, metadata=metadata)
    loop = CheckedLoop(np.asarray(check_start, dtype=float), steps, noise, reference,
                       _reference_label(spec, reference))
    runs = _Runs(export, spec, ocp, loop, say)
    try:
        runs.run(target, check)
    except toolchain.ToolchainError as err:
        runs.problems.append(str(err).splitlines()[0])
    errors = {"u": max((r.worst["u"] for r in runs.checks), default=0.0)} if runs.checks else {}
    sizes = runs.sizes()
    board_files = {} if firmware is None else firmware_files(spec, f"{name}_mpc", loop.x0, steps, firmware,
                                                             real=real, reference=reference,
                                                             estimator=board_est)
    extra: dict[str, Any] = {} if firmware is None else {
        "files": controller_files(name) + sorted(board_files),
        "firmware": {"board": firmware, "build": f"make -C {FIRMWARE_DIR}",
                     "run": f"qemu-system-arm {' '.join(NETDUINOPLUS2_ARGS)} -kernel {FIRMWARE_DIR}/firmware.elf",
                     "samples": steps, "x0": [float(v) for v in loop.x0], "reference": loop.label,
                     **({} if board_est is None else {"estimator": board_est.description})}}
    export = generate_controller(spec, name, real=real, sizes=sizes, metadata={**dict(metadata or {}),
                                                                                **runs.measured, **extra})
    size = runs.size
    common = dict(name=export.name, out_dir=out, errors=errors, checks=tuple(runs.checks),
                  flash=None if size is None else size.flash, ram=None if size is None else size.ram, size=size,
                  double_symbols=tuple(runs.doubles), manifest=export.manifest, lines=tuple(runs.lines))
    files = {**export.files, **board_files}
    if runs.problems:
        if not keep_failed:
            return ExportReport(ok=False, files=[], problems=tuple(runs.problems), **common)  # type: ignore[arg-type]
        files = {**rejected_files(export, runs.problems), **board_files}

    def write(tmp: Path) -> None:
        for fname, text in files.items():
            (tmp / fname).parent.mkdir(exist_ok=True)
            (tmp / fname).write_text(text)

    _files.install_directory(out, write, set(files), "manifest.json", force=force, legacy=_legacy)
    say(f"wrote {', '.join(sorted(files))} to {out}")
    return ExportReport(ok=not runs.problems, files=[out / f for f in files], problems=tuple(runs.problems),
                        **common)  # type: ignore[arg-type]


#: The note beside a rejected export kept by ``keep_failed``.
REJECTED_NOTE = "CHECK_FAILED.txt"


def rejected_files(export: CExport, problems: list[str]) -> dict[str, str]:
    """A rejected export's files: its own, its manifest marked ``"check_failed"`` with the problems, and
    `REJECTED_NOTE` saying why it must not be used as it is."""
    manifest = {**export.manifest, "check_failed": list(problems),
                "files": sorted({*export.manifest.get("files", []), REJECTED_NOTE})}
    note = ("This controller export FAILED its check and is kept only to be inspected (keep_failed / "
            "--keep-failed).\nDo not deploy it as it is.\n\n" + "\n".join(f"- {p}" for p in problems) + "\n")
    return {**export.files, "manifest.json": json.dumps(manifest, indent=2, sort_keys=True) + "\n",
            REJECTED_NOTE: note}
