"""State estimation from the model's step: the extended Kalman filter and the moving-horizon estimator.

- `EKF`: prediction by the chosen tableau's step and its exact A, correction
  by the sensors' Jacobian in Joseph form; the whole update is one named
  CasADi SX Function (``EKF.update_function``).
- `MHE`: the full-information cost over a moving window, a multiple-shooting
  NLP solved by IPOPT, with bounds on the states and the EKF's arrival cost.
- `default_measurement`: the sensors a model file names beside ``make_model``.
- `export_estimator`, `load_estimator`: the EKF's update as checked, heap-free C and back in Python (also
  under `shooting.codegen`).
"""

from shooting.estimate.ekf import EKF
from shooting.estimate.export import export_estimator
from shooting.estimate.host import HostEstimator, load_estimator
from shooting.estimate.measurement import default_measurement
from shooting.estimate.mhe import MHE
from shooting.estimate.problem import MissingMeasurementWarning

__all__ = ["EKF", "MHE", "HostEstimator", "MissingMeasurementWarning", "default_measurement", "export_estimator",
           "load_estimator"]
