"""One closed loop of a generated controller, its figures, and the worst case its budget allows on the board.

`LoopRun` holds what a check's closed loop measured (`shooting.controller.check.host_loop`,
`shooting.controller.board.board_loop`): states, inputs, statuses, QP iterations, times on the host, and on the
emulated Cortex-M4 instructions and cycles per sample (`shooting.codegen.cycles`: QEMU's trace costed with the
Cortex-M4's timings) and the largest cost of each phase of a sample (a QP iteration, the linearisation, an
evaluation of the OCP's functions, the bookkeeping between them). `LoopRun.worst_case` bounds a sample from these
phase costs and the budget (`NAME_mpc_set_budget`):

    an RTI sample   <= head + Q iter + other + prep + lin + other
    a cold sample   <= head + S (lin + other + E (eval + other) + Q iter + 2 other) + prep + lin + other

with Q the QP budget (each Riccati factorisation counts one), S the SQP budget, E = 3 + 11 evaluations per SQP
iteration (the merit at the iterate, the QP model at both ends, and at most 11 line-search trials: steps 1, 1/2,
..., 1/1024), head the feedback's own start (before its first phase), prep the preparation's own start (the
shift). The bound assumes no phase ever costs more than its most expensive measured instance, which holds for
the loops the C runs (their trip counts are the problem's sizes) and not for the integrator's Newton iterations
of an implicit method (measured, not bounded).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["LINE_SEARCH_TRIALS", "PHASES", "LoopRun"]

FloatArray = npt.NDArray[np.float64]

#: The phases of a sample the board check marks (``NAME_MPC_PHASE``), as the header numbers them.
PHASES = ("qp_iteration", "linearise", "evaluate", "other")

#: Evaluations of the OCP's functions per SQP iteration: its merit at the iterate, the QP model at the QP's point
#: and at the iterate, and at most 1 + log2(1 / MIN_STEP) = 11 line-search trials.
LINE_SEARCH_TRIALS = 11


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
        Cortex-M4 only: instructions executed (QEMU's count).
    feedback_cycles, prepare_cycles : ndarray, shape (K,) or None
        Cortex-M4 only: cycles by the cycle model (`cycle_model`).
    phases : dict of str to (int, int)
        Cortex-M4 only: per phase (`PHASES`, and "head", "prep": the feedback's and the preparation's own
        starts), the largest (instructions, cycles) of one instance.
    cycle_model : dict
        Cortex-M4 only: the cycle model's assumptions (`shooting.codegen.cycles.CycleModel.as_dict`).
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
    feedback_cycles: FloatArray | None = None
    prepare_cycles: FloatArray | None = None
    phases: dict[str, tuple[int, int]] = field(default_factory=dict)
    cycle_model: dict[str, object] = field(default_factory=dict)

    @property
    def sample_instructions(self) -> FloatArray | None:
        """Instructions of one sample (feedback + preparation) on the board."""
        if self.feedback_instructions is None or self.prepare_instructions is None:
            return None
        return self.feedback_instructions + self.prepare_instructions

    @property
    def sample_cycles(self) -> FloatArray | None:
        """Cycles of one sample (feedback + preparation) on the board, by the cycle model."""
        if self.feedback_cycles is None or self.prepare_cycles is None:
            return None
        return self.feedback_cycles + self.prepare_cycles

    def summary(self) -> dict[str, object]:
        """Medians and maxima for the manifest and the report (on the board: the first sample, a cold start,
        apart from the maxima "after start")."""
        out: dict[str, object] = {
            "samples": int(self.u.shape[0]), "qp_iterations_median": float(np.median(self.qp_iterations)),
            "qp_iterations_max": int(np.max(self.qp_iterations, initial=0)),
            "failed_samples": sum(s != "ok" for s in self.status)}
        if self.feedback_seconds is not None and self.prepare_seconds is not None:
            out["feedback_us_median"] = float(np.median(self.feedback_seconds) * 1e6)
            out["prepare_us_median"] = float(np.median(self.prepare_seconds) * 1e6)
        total, cycles = self.sample_instructions, self.sample_cycles
        if total is not None and self.feedback_instructions is not None:
            later = total[1:] if total.size > 1 else total
            out["instructions_per_sample_median"] = float(np.median(total))
            out["instructions_per_sample_max"] = float(np.max(total))
            out["instructions_per_sample_max_after_start"] = float(np.max(later))
            out["feedback_instructions_median"] = float(np.median(self.feedback_instructions))
        if cycles is not None:
            hz = float(self.cycle_model.get("clock_hz", 168e6))  # type: ignore[arg-type]
            later = cycles[1:] if cycles.size > 1 else cycles
            out["cycles_per_sample_median"] = float(np.median(cycles))
            out["cycles_per_sample_max_after_start"] = float(np.max(later))
            out["cycles_per_sample_max"] = float(np.max(cycles))
            out["ms_median"] = float(np.median(cycles) / hz * 1e3)
            out["ms_max_after_start"] = float(np.max(later) / hz * 1e3)
            out["ms_max"] = float(np.max(cycles) / hz * 1e3)
            out["cycle_model"] = self.cycle_model
            out["phases"] = {k: {"instructions": v[0], "cycles": v[1]} for k, v in self.phases.items()}
        return out

    def worst_case(self, max_qp_iterations: int, max_sqp_iterations: int) -> dict[str, object]:
        """The bound on one sample the budget gives, from the phases' measured maxima (see the module docstring).

        Returns
        -------
        dict
            ``qp_iterations`` (per sample: Q S), ``sqp_iterations`` (S), ``instructions``, ``cycles``, ``ms`` (at
            the model's clock), and ``rule`` (the formula, in words).
        """
        Q, S = int(max_qp_iterations), int(max_sqp_iterations)
        out: dict[str, object] = {"qp_iterations": Q * S, "sqp_iterations": S,
                                  "rule": "max(RTI: head + Q iter + prep + lin + 2 other, cold: head + S (lin + "
                                          f"{3 + LINE_SEARCH_TRIALS} (eval + other) + Q iter + 3 other) + prep + "
                                          "lin + other), each phase at its largest measured cost"}
        for i, unit in enumerate(("instructions", "cycles")):
            c = {k: float(self.phases.get(k, (0, 0))[i]) for k in ("head", "prep", *PHASES)}
            rti = c["head"] + Q * c["qp_iteration"] + c["prep"] + c["linearise"] + 2 * c["other"]
            sqp_iteration = (c["linearise"] + (3 + LINE_SEARCH_TRIALS) * (c["evaluate"] + c["other"]) +
                             Q * c["qp_iteration"] + 3 * c["other"])
            cold = c["head"] + S * sqp_iteration + c["prep"] + c["linearise"] + c["other"]
            out[unit] = max(rti, cold)
        hz = float(self.cycle_model.get("clock_hz", 168e6))  # type: ignore[arg-type]
        out["ms"] = float(out["cycles"]) / hz * 1e3  # type: ignore[arg-type]
        return out
