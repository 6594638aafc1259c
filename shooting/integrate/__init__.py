"""Runge-Kutta steps with exact sensitivities: a tableau and a model become one `casadi.Function`.

The only place that turns tableaus and models into CasADi graphs: stages
(explicit recursion, unrolled Newton), one substep with its sensitivities,
and the substep loop (unrolled, or binary doubling).
"""

from shooting.integrate.integrator import StepInfo, build_integrator, step_info
from shooting.integrate.lint import StabilityReport, check_stability

__all__ = ["StabilityReport", "StepInfo", "build_integrator", "check_stability", "step_info"]
