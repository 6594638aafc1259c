"""The MPC controller as C: the stage-wise QP solver (C template and host twin), and its Riccati structure.

Reads mpc's problem and layout and writes C through codegen's emitter; mpc
never imports it.
"""

from shooting.controller.ocp_qp import HostOCPQP, ocp_qp_source
from shooting.qp import OCPQPSizes, StageQP, StageQPResult

__all__ = ["HostOCPQP", "OCPQPSizes", "StageQP", "StageQPResult", "ocp_qp_source"]
