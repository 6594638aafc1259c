"""Model predictive control on multiple shooting: the OCP, real-time iterations, the closed loop.

Everything here consumes the step Function of `shooting.integrate` through
one public layout (`ShootingLayout`: pack, unpack and shift of the decision,
constraint and parameter vectors) shared by the OCP and the RTI.
"""

from shooting._validate import ReferenceBeyondBoundsWarning
from shooting.mpc.controllers import Controller, ControlStep, MPCController, StageData, sample_horizon
from shooting.mpc.costs import LeastSquares, least_squares
from shooting.mpc.feedback import Estimator
from shooting.mpc.layout import ShootingLayout
from shooting.mpc.ocp import MultipleShootingOCP, OCPSolution
from shooting.mpc.problem import Constraints, OCPProblem, QuadraticCost, SolverSettings
from shooting.mpc.rti import RTIController
from shooting.mpc.run import ScenarioRun, run_scenario
from shooting.mpc.scenarios import Scenario, build_ocp, default_scenario
from shooting.mpc.simulate import simulate_closed_loop
from shooting.mpc.tracking import named_scenario, scenario_names
from shooting.mpc.trajectory import Trajectory

__all__ = [
    "Constraints",
    "ControlStep",
    "Controller",
    "Estimator",
    "LeastSquares",
    "MPCController",
    "MultipleShootingOCP",
    "OCPProblem",
    "OCPSolution",
    "QuadraticCost",
    "RTIController",
    "ReferenceBeyondBoundsWarning",
    "Scenario",
    "ScenarioRun",
    "ShootingLayout",
    "SolverSettings",
    "StageData",
    "Trajectory",
    "build_ocp",
    "default_scenario",
    "least_squares",
    "named_scenario",
    "run_scenario",
    "sample_horizon",
    "scenario_names",
    "simulate_closed_loop",
]
