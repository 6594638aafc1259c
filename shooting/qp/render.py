"""The stage-wise QP solver as C text: ``templates/ocp_qp.c.in`` rendered for a prefix, a real type and sizes.

The exported controller (`shooting.controller`) and the host libraries
(`shooting.qp.host`, the RTI's cached library) compile this same text, so the
numpy twin (`shooting.qp.ipm`) is checked against exactly the C they run.
"""

from __future__ import annotations

from dataclasses import dataclass

from shooting import _validate
from shooting._c_text import literal, render_from
from shooting.options import REALS, Real
from shooting.qp.shortcut import SHORTCUT_ATTEMPTS
from shooting.qp.stage_qp import OCPQPSizes

__all__ = ["DIVERGE", "MU_FLOOR", "STEP_FRACTION", "TEMPLATES", "UNROLL_MAX", "WARM_PUSH", "OCPQPSource",
           "ocp_qp_source"]

#: The package of the solver's C templates (beside its numpy twin).
TEMPLATES = "shooting.qp.templates"

#: Fraction of the distance to the boundary a step may cover, and the
#: smallest slack and multiplier a warm start keeps.
STEP_FRACTION = {"double": 0.995, "float": 0.99}

#: A Riccati pivot lost to the barrier terms once complementarity is below
#: this (relative) ends the solve as converged: the precision is exhausted.
MU_FLOOR = {"double": 1e-12, "float": 1e-7}
WARM_PUSH = {"double": 1e-4, "float": 1e-3}

#: Multipliers this many times their size at the start, with the equalities
#: still violated: the hard constraints cannot be met (reported, not iterated on).
DIVERGE = {"double": 1e12, "float": 1e8}

#: The largest NX + NU whose kernels are unrolled completely (see the template's hints). The cart-pole's
#: (5): a Riccati stage 2x fewer instructions on a Cortex-M4 for 1.5x the code; the quadrotor's (16) would
#: take 2.4x the flash and 3.5x the stack.
UNROLL_MAX = 8


@dataclass(frozen=True)
class OCPQPSource:
    """The solver's C in two parts: ``work`` (status macros, data and work structs) and ``functions``."""

    work: str
    functions: str


def ocp_qp_source(prefix: str, real: Real, sizes: OCPQPSizes) -> OCPQPSource:
    """The solver's C for a prefix, a real type and the problem's sizes.

    Parameters
    ----------
    prefix : str
        C identifier prefix of every symbol.
    real : {"double", "float"}
    sizes : OCPQPSizes

    Returns
    -------
    OCPQPSource
    """
    prefix = _validate.identifier(prefix, "prefix")
    real = _validate.choice(real, REALS, "real")
    names = dict(p=prefix, P=prefix.upper(), R=real, N=sizes.N, NX=sizes.nx, NU=sizes.nu, NBX=sizes.nbx,
                 NG=sizes.ng, NGN=sizes.ngN)
    nxp, nup = sizes.nx * (sizes.nx + 1) // 2, sizes.nu * (sizes.nu + 1) // 2  # packed triangles
    unroll = int(sizes.nx + sizes.nu <= UNROLL_MAX)
    # (unrolled, the Riccati step's [B'; A'] L is a local array the compiler keeps in registers: no work array)
    work = render_from(TEMPLATES, "ocp_qp_work.h.in", **names, NSOFT=max(sizes.nsoft, 1), NXP=nxp, NUP=nup,
                       BAL_LEN=1 if unroll else (sizes.nu + sizes.nx) * sizes.nx)
    functions = render_from(TEMPLATES, "ocp_qp.c.in", **names, f="f" if real == "float" else "",
                            NU_1=max(sizes.nu, 1), NBX_1=max(sizes.nbx, 1), NG_1=max(sizes.ng, 1), NXP=nxp, NUP=nup,
                            tol_pd=literal(1e-14 if real == "double" else 1e-6, real),
                            tau=literal(STEP_FRACTION[real], real), warm_push=literal(WARM_PUSH[real], real),
                            mu_floor=literal(MU_FLOOR[real], real), diverge=literal(DIVERGE[real], real),
                            unroll=unroll, unroll_max=UNROLL_MAX,
                            attempts=SHORTCUT_ATTEMPTS)
    return OCPQPSource(work, functions)
