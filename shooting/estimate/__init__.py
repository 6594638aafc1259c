"""State estimation from the model's step: the extended Kalman filter and the moving-horizon estimator.

- `EKF`: prediction by the chosen tableau's step and its exact A, correction
  by the sensors' Jacobian in Joseph form; the whole update is one named
  CasADi SX Function (``EKF.update_function``).
- `MHE`: the full-information cost over a moving window, a multiple-shooting
  NLP solved by IPOPT, with bounds on the states and the EKF's arrival cost.
- `default_measurement`: the sensors a model file names beside ``make_model``.
- `RealTimeMHE`: the MHE's cost with one Gauss-Newton QP step per sample, the numpy twin of the MHE's C.
- `export_estimator`, `load_estimator`: the EKF's update or the real-time MHE as checked, heap-free C and back in
  Python (also under `shooting.codegen`).
"""

from shooting.estimate.ekf import EKF
from shooting.estimate.export import export_estimator
from shooting.estimate.host import HostEstimator, HostRealTimeMHE, load_estimator
from shooting.estimate.measurement import default_measurement
from shooting.estimate.mhe import MHE
from shooting.estimate.problem import MissingMeasurementWarning
from shooting.estimate.rt_mhe import RealTimeMHE

__all__ = ["EKF", "MHE", "HostEstimator", "HostRealTimeMHE", "MissingMeasurementWarning", "RealTimeMHE",
           "default_measurement", "export_estimator", "load_estimator"]
