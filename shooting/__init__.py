"""shooting: Runge-Kutta integrators with exact sensitivities on CasADi, C for microcontrollers, and MPC.

The flat public API over subpackages that import in one direction,
``tableaus -> integrate -> {codegen, qp -> mpc} -> {estimate, controller} -> sweeps -> cli``:

- `shooting.tableaus`: exact, verified Butcher tableaus (no CasADi);
- `shooting.integrate`: `build_integrator`, a tableau and a `Model` become one
  `casadi.Function` (x, u, p, t0, dt) -> (x_next, A, B[, err]);
- `shooting.codegen`: that Function as verified, heap-free C
  (`shooting.codegen.export_integrator`);
- `shooting.qp`: the stage-wise QP and its interior-point Riccati solver (numpy);
- `shooting.mpc`: multiple-shooting OCPs, real-time iterations, closed loops;
- `shooting.controller`: the MPC controller as verified C (`export_controller`,
  `load_controller`, also reachable as `shooting.codegen.export_controller`);
- `shooting.estimate`: state estimation from the model's step, `EKF` and `MHE`;
- `shooting.sweeps`: `sweep`, many closed loops over drawn cases on Dask.

Names load on first use (PEP 562): ``import shooting`` is cheap, and the CLI
takes over Ctrl-C before CasADi, numpy and matplotlib are imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shooting import codegen as codegen
    from shooting import controller as controller
    from shooting import estimate as estimate
    from shooting import integrate as integrate
    from shooting import mpc as mpc
    from shooting import tableaus as tableaus
    from shooting._version import VERSION as __version__
    from shooting.estimate import EKF, MHE, MissingMeasurementWarning, default_measurement
    from shooting.integrate import StabilityReport, StepInfo, build_integrator, check_stability, step_info
    from shooting.loading import load_model, model_names
    from shooting.model import Model
    from shooting.mpc import (
        Constraints,
        Controller,
        ControlStep,
        LeastSquares,
        MPCController,
        MultipleShootingOCP,
        OCPProblem,
        OCPSolution,
        QuadraticCost,
        ReferenceBeyondBoundsWarning,
        RTIController,
        Scenario,
        ShootingLayout,
        SolverSettings,
        StageData,
        Trajectory,
        build_ocp,
        default_scenario,
        least_squares,
        named_scenario,
        sample_horizon,
        scenario_names,
        simulate_closed_loop,
    )
    from shooting.sweeps import SweepResult, sweep
    from shooting.tableaus import (
        ButcherTableau,
        gauss_legendre,
        get_tableau,
        load_tableau,
        plot_stability_region,
        radau_iia,
        rk2,
        rk3,
        tableau_names,
    )

# Where each public name lives: `__getattr__` imports it on first use.
_SUBPACKAGES = ("codegen", "controller", "estimate", "integrate", "mpc", "tableaus")
_HOMES = {
    **{name: "shooting.integrate" for name in ("StabilityReport", "StepInfo", "build_integrator", "check_stability",
                                               "step_info")},
    **{name: "shooting.loading" for name in ("load_model", "model_names")},
    "Model": "shooting.model",
    **{name: "shooting.mpc" for name in ("Constraints", "Controller", "ControlStep", "LeastSquares", "MPCController",
                                         "MultipleShootingOCP", "OCPProblem", "OCPSolution", "QuadraticCost",
                                         "ReferenceBeyondBoundsWarning", "RTIController", "Scenario",
                                         "ShootingLayout", "SolverSettings", "StageData", "Trajectory", "build_ocp",
                                         "default_scenario", "least_squares", "named_scenario", "sample_horizon",
                                         "scenario_names", "simulate_closed_loop")},
    **{name: "shooting.tableaus" for name in ("ButcherTableau", "gauss_legendre", "get_tableau", "load_tableau",
                                              "plot_stability_region", "radau_iia", "rk2", "rk3", "tableau_names")},
    **{name: "shooting.sweeps" for name in ("SweepResult", "sweep")},
    **{name: "shooting.estimate" for name in ("EKF", "MHE", "MissingMeasurementWarning", "default_measurement")},
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = importlib.import_module("shooting._version").VERSION
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"shooting.{name}")
    elif name in _HOMES:
        value = getattr(importlib.import_module(_HOMES[name]), name)
    else:
        raise AttributeError(f"module 'shooting' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBPACKAGES})


__all__ = [
    "ButcherTableau",
    "Constraints",
    "ControlStep",
    "Controller",
    "EKF",
    "LeastSquares",
    "MHE",
    "MPCController",
    "MissingMeasurementWarning",
    "Model",
    "MultipleShootingOCP",
    "OCPProblem",
    "OCPSolution",
    "QuadraticCost",
    "RTIController",
    "ReferenceBeyondBoundsWarning",
    "Scenario",
    "ShootingLayout",
    "SolverSettings",
    "StabilityReport",
    "StageData",
    "StepInfo",
    "SweepResult",
    "Trajectory",
    "__version__",
    "build_integrator",
    "build_ocp",
    "check_stability",
    "default_measurement",
    "default_scenario",
    "gauss_legendre",
    "least_squares",
    "get_tableau",
    "load_model",
    "load_tableau",
    "model_names",
    "named_scenario",
    "plot_stability_region",
    "radau_iia",
    "rk2",
    "rk3",
    "sample_horizon",
    "scenario_names",
    "simulate_closed_loop",
    "step_info",
    "sweep",
    "tableau_names",
]
