"""Why a controller check failed, in one line a user can act on.

A check compares the generated C's closed loop with the Python reference
(`shooting.controller.check`): the first samples' inputs within an allowance,
the first sample's whole prediction against a verified optimum, and every
sample's status. `explain` names the first thing that failed (which sample,
which input, its error against its allowance) and the likely cause, read from
what the two loops reported:

- a sample of the C that did not end "ok" (its status says why: a cold start
  that ran out of iterations, a QP that failed, a line search that found no
  descent);
- the reference's own sample that did not end "ok";
- both converged and an error within `ROUNDING_LIKE` times the allowance: the
  precision (rounding amplified by the problem's conditioning);
- both converged and a larger error: two different local solutions, or a C
  that is wrong (keep the export with ``keep_failed`` to look).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["ROUNDING_LIKE", "explain", "first_excess", "status_hint"]

FloatArray = npt.NDArray[np.float64]

#: An error up to this many times its allowance, with every sample converged, reads as rounding.
ROUNDING_LIKE = 100.0

#: What each of the C's statuses (`shooting.controller.host.CONTROLLER_STATUS`) most likely means in a check.
_HINTS = {
    "SQP iteration limit": "its cold start did not converge within the SQP budget (raise max_sqp_iterations, or "
                           "start from a better guess)",
    "QP iteration limit": "a QP stopped at its iteration limit (raise max_qp_iterations)",
    "budget": "the export's budget stopped the sample, as it would on the board (the check runs at that budget: "
              "raise it with export_controller's max_qp_iterations / max_sqp_iterations, the CLI's "
              "--max-qp-iterations / --max-sqp-iterations)",
    "line search failed": "the SQP's line search found no descent (often a stall next to a solution: compare with "
                          "IPOPT, or export in double)",
    "QP infeasible": "a QP with hard rows was infeasible (soften the state bounds: soft_x_bounds=True)",
    "Hessian not positive definite": "a stage Hessian was not positive definite (check the weights and the cost)",
    "diverged": "the prediction diverged (the guess or the model is far from the state: check the start state)",
    "non-finite data": "a non-finite value appeared (check the model at this state)",
    "integrator step failed": "the integrator's step failed (check the model at this state)",
    "not prepared": "a sample was not prepared",
}


def status_hint(status: str) -> str:
    """The likely meaning of a sample's `status` in words (empty for "ok")."""
    if status in ("ok", "optimal", "converged"):
        return ""
    return _HINTS.get(status, f"status {status!r}")


def first_excess(u: FloatArray, u_ref: FloatArray, scale: FloatArray, allowed: float
                 ) -> tuple[int, int, float] | None:
    """The first (sample, input) whose difference on its `scale` exceeds `allowed`: (k, j, error), else None."""
    n = min(u.shape[0], u_ref.shape[0])
    error = np.abs(u[:n] - u_ref[:n]) / scale
    over = np.argwhere(error > allowed)
    if over.size == 0:
        return None
    k, j = (int(v) for v in over[0])
    return k, j, float(error[k, j])


def explain(quantity: str, u: FloatArray, u_ref: FloatArray, scale: FloatArray, allowed: float,
            status: Sequence[str], ref_status: Sequence[str], input_names: Sequence[str],
            reference: str = "the Python RTIController", real: str = "double") -> str:
    """One line: which sample and input of `quantity` exceeded its allowance, by how much, and the likely cause.

    Parameters
    ----------
    quantity : str
        What is compared ("input", "first prediction").
    u, u_ref : ndarray, shape (K, nu)
        The C's values and the reference's.
    scale : ndarray, shape (nu,)
        Each input's scale (its bound range).
    allowed : float
    status, ref_status : sequence of str
        Each sample's status of the C and of the reference (for a prediction: the first sample's only).
    input_names : sequence of str
    reference : str
        The reference's name in the message.
    real : {"double", "float"}
        The C's precision (what to advise).

    Returns
    -------
    str
        Empty when nothing exceeds the allowance.
    """
    hit = first_excess(u, u_ref, scale, allowed)
    if hit is None:
        return ""
    k, j, error = hit
    where = "stage" if quantity == "first prediction" else "sample"
    name = input_names[j] if j < len(input_names) else f"u[{j}]"
    text = (f"{quantity} at {where} {k}, input {name}: C {u[k, j]:.10g}, {reference} {u_ref[k, j]:.10g}, "
            f"error {error:.1e} of its range > allowed {allowed:.1e}")
    sample = k if quantity != "first prediction" else 0
    own = status[sample] if sample < len(status) else "ok"
    theirs = ref_status[sample] if sample < len(ref_status) else "ok"
    if status_hint(own):
        cause = f"the C's sample {sample} ended '{own}': {status_hint(own)}"
    elif status_hint(theirs):
        cause = f"the reference's sample {sample} ended '{theirs}': {status_hint(theirs)}"
    elif error <= ROUNDING_LIKE * allowed:
        cause = ("both converged, close to the allowance: the precision (rounding amplified by the problem's "
                 "conditioning); " + ("export in double or rescale the problem" if real == "float" else
                                      "rescale the problem (states, inputs and weights of similar sizes)"))
    else:
        cause = ("both converged, far apart: two different local solutions or a wrong C; keep the export "
                 "(keep_failed / --keep-failed) to compare")
    return f"{text}; likely cause: {cause}"
