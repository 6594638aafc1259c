"""The stage-wise QP of an optimal control problem and its interior-point Riccati solver.

`StageQP` holds one problem as numpy arrays; `solve_stage_qp` is the solver
in numpy (the numpy twin, the tests' reference); ``templates/`` hold the same
method as C, which `shooting.qp.render` renders for the exported controller
and `shooting.qp.host` compiles for this machine (the Python `RTIController`'s
default QP, `CompiledStageQP`).
The two are the same algorithm, named alike, checked against each other and
against Clarabel by the tests. Lower than mpc and controller: both use it.
"""

from shooting.qp.ipm import WARM_PUSH, solve_stage_qp
from shooting.qp.stage_qp import (
    OCP_QP_STATUS,
    OCP_QP_TOLERANCES,
    OCPQPSizes,
    StageQP,
    StageQPResult,
    hessian_scale,
    shifted_result,
    stage_qp_gradient_scale,
    stage_qp_hard_violation,
    stage_qp_objective,
    stage_qp_stationarity,
    with_input_prox,
    with_prox,
)

__all__ = ["OCP_QP_STATUS", "OCP_QP_TOLERANCES", "OCPQPSizes", "StageQP", "StageQPResult", "WARM_PUSH",
           "hessian_scale", "shifted_result", "solve_stage_qp", "stage_qp_gradient_scale",
           "stage_qp_hard_violation", "stage_qp_objective",
           "stage_qp_stationarity", "with_input_prox", "with_prox"]
