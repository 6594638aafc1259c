"""The constants of the controller's C that come from the Python twins, as its template takes them (C literals): the
SQP's (`shooting.mpc.sqp`; `inexact_text`: the header's words on its inexact QPs), the convexification's
(`shooting.mpc.costs`, `shooting.mpc.reduced_convexity`) and the elastic QP's flags."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from shooting.codegen.emitter import literal
from shooting.mpc.costs import CONVEXIFY_TAU
from shooting.mpc.reduced_convexity import ACTIVE_STIFFNESS, SHIFT_LIMIT, STATE_STIFFNESS
from shooting.mpc.sqp import (
    ARMIJO,
    CURVATURE_STEP,
    ELASTIC_START,
    ELASTIC_STEER,
    ELASTIC_TRIES,
    MIN_STEP,
    NONMONOTONE,
    PENALTY_DECREASE,
    POLISH_ITERATIONS,
    PROX_DOWN,
    PROX_FAST,
    PROX_FLOOR,
    PROX_GAIN,
    PROX_MAX,
    PROX_OFF,
    PROX_SHORT,
    PROX_SMALL,
    PROX_START,
    PROX_STATES_STEP,
    PROX_UP,
    QP_LOOSE,
    QP_LOOSE_STEP,
    RESEED_STEP,
    SOC,
    SQP_ROUNDING,
    SQP_TOLERANCES,
    STALL,
    WATCHDOG_DECREASE,
    qp_tolerances,
)
from shooting.options import Real
from shooting.qp import OCP_QP_TOLERANCES

if TYPE_CHECKING:
    from shooting.controller.c_source import ControllerSpec

__all__ = ["convexify_constants", "elastic_flags", "inexact_text", "sqp_values"]


def convexify_constants(real: str) -> dict[str, str]:
    """The C's convexify and jacobi_eigen constants for `real` (see templates/mpc.c.in)."""
    eps = float(np.finfo(np.float32 if real == "float" else np.float64).eps)
    return {"convex_tau": literal(CONVEXIFY_TAU[real], real), "active_stiffness": literal(ACTIVE_STIFFNESS, real),
            "shift_limit": literal(SHIFT_LIMIT, real),
            "state_stiffness": literal(STATE_STIFFNESS, real),
            "jacobi_eps": literal(2 * eps, real),
            "jacobi_big": literal(1e15 if real == "double" else 1e7, real),
            "flt_limit": literal(1e300 if real == "double" else 1e37, real)}


def elastic_flags(spec: ControllerSpec) -> dict[str, str | int]:
    """The elastic QP's soft flags (its hard rows 2, the soft ones 1) and which QPs carry the curvature."""
    z = spec.sizes
    return dict(elastic_bx=", ".join(["1" if spec.soft else "2"] * max(z.nbx, 1)),
                elastic_g=", ".join(["1" if spec.soft_path else "2"] * max(z.ng, 1)),
                elastic_gN=", ".join(["2"] * max(z.ngN, 1)),
                rti_exact=int(spec.hessian == "exact"), sqp_exact=int(spec.sqp_hessian == "exact"))


def sqp_values(real: Real) -> dict[str, str | int]:
    """The SQP's constants as the controller's template takes them (C literals)."""
    sqp_tol = SQP_TOLERANCES[real]
    # Inexact QPs in the SQP's first iterations (sqp.py), float too (but its first QP: LOOSE_FIRST in the
    # template): the last QPs are exact, and the float check's first prediction is allowed the float interior
    # point's own stopping move (check.termination_move).
    loose = qp_tolerances(True, OCP_QP_TOLERANCES[real])
    return dict(sqp_tol_step=literal(sqp_tol["step"], real), sqp_tol_defect=literal(sqp_tol["defect"], real),
                sqp_tol_stat=literal(sqp_tol["stationarity"], real), sqp_tol_floor=literal(sqp_tol["floor"], real),
                armijo=literal(ARMIJO, real), min_step=literal(MIN_STEP, real), nonmonotone=NONMONOTONE, stall=STALL,
                floor_stall=int(real == "float"), loose_first=int(real == "double"),
                watchdog_decrease=literal(WATCHDOG_DECREASE[real], real),
                prox_start=literal(PROX_START, real), prox_down=literal(PROX_DOWN, real),
                prox_up=literal(PROX_UP, real), prox_short=literal(PROX_SHORT, real),
                prox_floor=literal(PROX_FLOOR, real), prox_off=literal(PROX_OFF, real),
                prox_gain=literal(PROX_GAIN, real), prox_small=literal(PROX_SMALL, real),
                prox_fast=literal(PROX_FAST, real),
                prox_states_step=literal(PROX_STATES_STEP if np.isfinite(PROX_STATES_STEP) else -1.0, real),
                rounding=literal(SQP_ROUNDING[real], real), qp_loose_stat=literal(loose["tol_stat"], real),
                qp_loose_eq=literal(loose["tol_eq"], real), qp_loose_mu=literal(loose["tol_mu"], real),
                qp_loose_step=literal(QP_LOOSE_STEP, real), elastic_start=literal(ELASTIC_START, real),
                elastic_steer=literal(ELASTIC_STEER, real), elastic_tries=ELASTIC_TRIES,
                reseed_step=literal(RESEED_STEP, real), curvature_step=literal(CURVATURE_STEP, real),
                prox_max=literal(PROX_MAX, real), soc=int(SOC), penalty_decrease=int(PENALTY_DECREASE),
                polish=POLISH_ITERATIONS)


def inexact_text() -> str:
    """The header's words on the SQP's inexact QPs."""
    return (f"In the first\n * iteration and while the last step exceeded {QP_LOOSE_STEP:g} (relative), the QP's "
            f"interior point stops at\n * relative residuals loosened to {QP_LOOSE['tol_stat']:g} (stationarity), "
            f"{QP_LOOSE['tol_eq']:g} (equalities),\n * {QP_LOOSE['tol_mu']:g} (complementarity), never below its "
            f"own tolerances: an inexact Newton step where a step that\n * large gains nothing from the QP's last "
            f"digits; later QPs are solved to their own tolerances, so the SQP\n * converges to the same point "
            f"(should an inexact step not descend, the iterate is taken again, its QP and\n * every later one "
            f"solved exactly).")
