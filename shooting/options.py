"""The allowed values of every string option, each defined once.

Each option is a ``typing.Literal`` (for annotations and mypy) and the tuple of
its values (for run-time checks, error messages and the CLI's ``choices``),
derived from the Literal so that the two cannot drift apart. Check a value
with `shooting._validate.choice`.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "CONTROLLER_HESSIANS",
    "HESSIANS",
    "NEWTON_METHODS",
    "NLP_SOLVERS",
    "CONTROLLER_QPS",
    "QP_SOLVERS",
    "REALS",
    "SENSITIVITIES",
    "SWEEP_CONTROLLERS",
    "TARGETS",
    "ControllerHessian",
    "Hessian",
    "NLPSolver",
    "NewtonMethod",
    "ControllerQP",
    "QPSolver",
    "Real",
    "Sensitivities",
    "SweepController",
    "Target",
]

#: How `build_integrator` computes A = dx_next/dx and B = dx_next/du ("forward", "ad", "variational"), or
#: lam' A and lam' B ("adjoint"), or A, B and the Hessian of lam' x_next ("second-order"); "none": x_next only.
Sensitivities = Literal["forward", "ad", "variational", "none", "adjoint", "second-order"]
SENSITIVITIES: tuple[Sensitivities, ...] = get_args(Sensitivities)

#: Newton's method on the stage equations of implicit tableaus.
NewtonMethod = Literal["full", "simplified"]
NEWTON_METHODS: tuple[NewtonMethod, ...] = get_args(NewtonMethod)

#: The C type of every real number in generated code.
Real = Literal["double", "float"]
REALS: tuple[Real, ...] = get_args(Real)

#: Where generated C is compiled and checked.
Target = Literal["host", "cortex-m4"]
TARGETS: tuple[Target, ...] = get_args(Target)

#: Hessian of the OCP's Lagrangian.
Hessian = Literal["exact", "gauss-newton"]
HESSIANS: tuple[Hessian, ...] = get_args(Hessian)

#: The QP Hessian of `RTIController` and the C controller: one of `HESSIANS`, or "auto" (the default): "exact"
#: where the OCP has a stage or terminal cost that is not a least-squares one, else "gauss-newton"
#: (`shooting.mpc.costs.automatic_hessian`).
ControllerHessian = Literal["auto", "exact", "gauss-newton"]
CONTROLLER_HESSIANS: tuple[ControllerHessian, ...] = get_args(ControllerHessian)

#: NLP solvers of `MultipleShootingOCP` (CasADi plugins).
NLPSolver = Literal["ipopt", "fatrop"]
NLP_SOLVERS: tuple[NLPSolver, ...] = get_args(NLPSolver)

#: QP solvers of `RTIController`: the stage-wise interior-point Riccati
#: solver of `shooting.qp` (the C controller's method) compiled for this
#: machine and cached ("riccati-ipm") or its numpy twin ("riccati-ipm-numpy",
#: the same algorithm), or a sparse solver shipped with CasADi.
QPSolver = Literal["riccati-ipm", "riccati-ipm-numpy", "qrqp", "osqp"]
QP_SOLVERS: tuple[QPSolver, ...] = get_args(QPSolver)

#: QP solvers of the generated C controller (`shooting.codegen.export_controller`).
ControllerQP = Literal["riccati-ipm"]
CONTROLLER_QPS: tuple[ControllerQP, ...] = get_args(ControllerQP)

#: The controllers `shooting.sweep` builds by name (besides a controller export's directory): the Python
#: real-time iterations, full IPOPT solves, and the scenario's controller exported to C.
SweepController = Literal["rti", "ipopt", "c"]
SWEEP_CONTROLLERS: tuple[SweepController, ...] = get_args(SweepController)
