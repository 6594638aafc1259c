"""The stage-wise QP of an optimal control problem and its interior-point Riccati solver, as C text and on the host.

The controller's QP is never condensed: it keeps its stages,

    minimise   sum_{k<N} 1/2 [x_k; u_k]' [Q_k S_k'; S_k R_k] [x_k; u_k] + q_k'x_k + r_k'u_k
               + 1/2 x_N'Q_N x_N + q_N'x_N + sum over soft sides of l1 s + l2 s^2
    subject to x_0 = x0,  x_{k+1} = A_k x_k + B_k u_k + b_k,
               lbu <= u_k <= ubu,  lbx - s <= x_k[idxbx] <= ubx + s (k >= 1),
               lg - s <= C_k x_k + D_k u_k <= ug + s,  lgN - s <= CN x_N <= ugN + s,

and `shooting/qp/templates/ocp_qp.c.in` solves it by Mehrotra's interior-point method
with a Riccati recursion per Newton system: time and memory linear in N and
no powers of A (the dense condensing of the first controller squared the
state transition over the horizon and lost positive definiteness in single
precision on unstable plants from N = 30 on).

`ocp_qp_source` renders the C; `StageQP` holds one problem as numpy arrays;
`HostOCPQP` compiles the same C for this machine (ctypes). Both live in the
qp layer (`shooting.qp.render`, `shooting.qp.host`: the Python RTI compiles
the solver too, and mpc never imports the controller) and are importable
from here, their first home.
"""

from __future__ import annotations

from shooting.qp.host import HostOCPQP
from shooting.qp.render import (
    DIVERGE,
    MU_FLOOR,
    STEP_FRACTION,
    TEMPLATES,
    UNROLL_MAX,
    WARM_PUSH,
    OCPQPSource,
    ocp_qp_source,
)

__all__ = ["DIVERGE", "MU_FLOOR", "STEP_FRACTION", "TEMPLATES", "UNROLL_MAX", "WARM_PUSH", "HostOCPQP",
           "OCPQPSource", "ocp_qp_source"]
