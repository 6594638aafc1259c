"""shooting: Runge-Kutta integrators with exact sensitivities on CasADi.

Layers (data flows one way): `Model` and `ButcherTableau` -> `build_integrator`
-> a `casadi.Function` (x, u, p, t0, dt) -> (x_next, A, B[, err]) -> C export
(`shooting.export`) and multiple-shooting MPC (`MultipleShootingOCP`,
`RTIController`).
"""

from shooting.catalogue import get_tableau, rk2, rk3, tableau_names
from shooting.closed_loop import ControlStep, MPCController, Trajectory, simulate_closed_loop
from shooting.collocation import gauss_legendre, radau_iia
from shooting.integrator import build_integrator
from shooting.loading import load_model, model_names
from shooting.model import Model
from shooting.ocp import MultipleShootingOCP, OCPSolution
from shooting.rti import RTIController
from shooting.scenarios import Scenario, build_ocp, default_scenario
from shooting.stability import plot_stability_region
from shooting.tableau import ButcherTableau, load_tableau

__version__ = "0.1.0"

__all__ = [
    "ButcherTableau",
    "ControlStep",
    "MPCController",
    "Model",
    "MultipleShootingOCP",
    "OCPSolution",
    "RTIController",
    "Scenario",
    "Trajectory",
    "build_integrator",
    "build_ocp",
    "default_scenario",
    "gauss_legendre",
    "get_tableau",
    "load_model",
    "load_tableau",
    "model_names",
    "plot_stability_region",
    "radau_iia",
    "rk2",
    "rk3",
    "simulate_closed_loop",
    "tableau_names",
    "__version__",
]
