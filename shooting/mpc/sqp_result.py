"""What one QP of an SQP iteration gives (`SQPStep`) and what an SQP run returns (`SQPResult`): `shooting.mpc.sqp`'s
records."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shooting.qp import StageQPResult

__all__ = ["SQPResult", "SQPStep"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SQPStep:
    """What one QP of an SQP iteration gives: its solution, the decrease of the QP's objective from the guess
    to it (the model's predicted decrease of J), the size of the equalities' multipliers."""

    x: FloatArray
    u: FloatArray
    ok: bool
    model_decrease: float
    multiplier: float
    message: str = ""
    qp: StageQPResult | None = None  # the QP's solution (the next iteration's QP tries its active set first)
    stationarity: float = np.inf  # max|H dw| relative: the Lagrangian's gradient at the iterate (`shooting.mpc.sqp`)
    hessian_scale: float = 0.0  # what the proximal term's weight was relative to (see `sqp`'s qp_step)
    status: int = 0  # the QP solver's status (`shooting.qp.OCP_QP_STATUS`: 2 infeasible)
    violation: float = 0.0  # an elastic QP's hard rows' linearised violation at its solution (l1)
    gradient: float = 0.0  # the cost gradient's largest entry at the iterate (the elastic weight's scale)


@dataclass(frozen=True)
class SQPResult:
    """An SQP run.

    Attributes
    ----------
    x : ndarray, shape (N+1, nx)
    u : ndarray, shape (N, nu)
    iterations : int
    status : int
        0 converged, else a key of `SQP_STATUS`.
    step : float
        The last step's size (infinity norm, relative).
    defect : float
        The dynamics' defects at the end (infinity norm, relative).
    message : str
    stationarity : float
        The last exact QP's max|H dw| relative to the cost gradient's terms (see `shooting.mpc.sqp`); inf
        before one.
    merit_weight : float
        The l1 merit's penalty nu on the defects and the hard rows' excess at the end (at least 1.1 times the
        largest multiplier of the dynamics and the hard rows of the last QP; an exact penalty needs nu above
        the KKT point's largest, Nocedal and Wright, Numerical Optimization, 2nd ed., thm. 17.3). 0 where no
        QP was solved.
    infeasibility : float
        The largest violation of a hard row (input and state bounds, path and terminal constraints) at the end,
        in the model's units: 0 at a feasible point; with status 2 by how much the NLP's hard rows cannot be met
        near it.
    """

    x: FloatArray
    u: FloatArray
    iterations: int
    status: int
    step: float
    defect: float
    message: str = ""
    merit_weight: float = 0.0
    stationarity: float = float("inf")
    infeasibility: float = 0.0

    @property
    def success(self) -> bool:
        return self.status == 0
