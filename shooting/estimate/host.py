"""`load_estimator`: an exported estimator's C, compiled for this machine, as a Python object (software in the loop).

The C is the update Function of `shooting.estimate.export` in CasADi's calling convention; this object keeps the
estimate and its covariance between samples (in the export's real type, as the C on a board keeps them) and
calls the C once per `update`, as `shooting.EKF.update` evaluates the same Function in Python. Every size comes
from the compiled C (its inputs' and outputs' names and shapes) and the manifest must agree with it.
"""

from __future__ import annotations

import ctypes
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting._tools import build_shared_library, real_dtype
from shooting.codegen.sil_common import (
    check_real,
    dt_field,
    finite_list_field,
    manifest_disagrees,
    name_field,
    pointer,
    private_workdir,
    read_manifest,
    real_field,
)
from shooting.estimate.export import ESTIMATOR_KIND
from shooting.estimate.kalman import EKF_INPUTS, EKF_OUTPUTS
from shooting.estimate.problem import MissingMeasurementWarning, Sample
from shooting.estimate.rt_mhe_c import HostMHE

__all__ = ["ESTIMATOR_MANIFEST", "HostEstimator", "HostRealTimeMHE", "checked_measurement", "load_estimator",
           "prior_of"]

FloatArray = npt.NDArray[np.float64]

#: What `load_estimator` reads from an estimator export's manifest.json (other entries are not read).
ESTIMATOR_MANIFEST: _validate.Schema = {
    "name": name_field, "real": real_field, "kind?": str,
    "estimator?": {"type": str, "nx": int, "nu": int, "np": int, "nz": int, "ny": int, "dt": dt_field,
                  "x0": finite_list_field, "p0": finite_list_field, "z0": finite_list_field,
                  "P0": [finite_list_field], "sensors": [str]},
}

_SHIM = """\
#include "{name}.h"
long shim_real_bytes(void) {{ return (long)sizeof({name}_real); }}
"""


class HostEstimator:
    """An exported EKF, compiled for this machine: ``update(y, u, t=0.0, p=None) -> (x_hat, P)``, ``reset()``.

    Attributes
    ----------
    name, real : str
    nx, nu, np, nz, ny : int
    dt : float
    sensors : tuple of str
    x_hat : ndarray, shape (nx,)
        The current estimate (float64 copy of the C's real type).
    P : ndarray, shape (nx, nx)
    last_corrected : bool
        Whether the last update used every sensor.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        folder, manifest = read_manifest(directory, False, ESTIMATOR_MANIFEST)
        path = folder / "manifest.json"
        if manifest.get("kind") != ESTIMATOR_KIND or "estimator" not in manifest:
            raise ValueError(f"{folder} is not an estimator export (its manifest's kind is "
                             f"{manifest.get('kind', 'an integrator step')!r}): give the folder export_estimator "
                             f"wrote (load_step and load_controller load the others)")
        self.name: str = manifest["name"]
        self.real = manifest["real"]
        est = manifest["estimator"]
        source = folder / f"{self.name}.c"
        if not source.is_file():
            raise ValueError(f"{source} is missing: export again")
        work = private_workdir()
        (work / "shim.c").write_text(_SHIM.format(name=self.name))
        lib = build_shared_library([source, work / "shim.c"], work / f"lib{self.name}.so",
                                   extra_flags=(f"-I{folder.resolve()}",))
        check_real(lib, self.real, path)
        self.nx, self.nu, self.np, self.nz, self.ny = (int(est[k]) for k in ("nx", "nu", "np", "nz", "ny"))
        self.dt = float(est["dt"])
        self.sensors = tuple(est["sensors"])
        self._check_interface(lib, path)
        fn = getattr(lib, self.name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        fn.restype = ctypes.c_int
        self._fn = fn
        dtype = real_dtype(self.real)
        sizes_in = {"x": self.nx, "P": self.nx * self.nx, "u": self.nu, "y": self.ny, "valid": self.ny,
                    "p": self.np, "t": 1, "dt": 1, "z0": self.nz}
        sizes_out = {"x_hat": self.nx, "P_hat": self.nx * self.nx, "e": self.ny, "S": self.ny * self.ny,
                     "z": self.nz}
        self._in = {k: np.zeros(max(sizes_in[k], 1), dtype=dtype) for k in self._inputs}
        self._out = {k: np.zeros(max(sizes_out[k], 1), dtype=dtype) for k in self._outputs}
        self._arg = (ctypes.c_void_p * len(self._inputs))(*[pointer(self._in[k]) for k in self._inputs])
        self._res = (ctypes.c_void_p * len(self._outputs))(*[pointer(self._out[k]) for k in self._outputs])
        self._x0, self._P0, self._p0 = prior_of(est, path, self.nx, self.np)
        self._z0 = np.asarray(est["z0"], dtype=float)
        self.reset()

    @property
    def _inputs(self) -> tuple[str, ...]:
        return (*EKF_INPUTS, *(("z0",) if self.nz else ()))

    @property
    def _outputs(self) -> tuple[str, ...]:
        return (*EKF_OUTPUTS, *(("z",) if self.nz else ()))

    def _check_interface(self, lib: ctypes.CDLL, path: Path) -> None:
        """The compiled C's inputs and outputs by name and size against the manifest's sizes."""
        expected_in = {"x": self.nx, "P": self.nx * self.nx, "u": self.nu, "y": self.ny, "valid": self.ny,
                       "p": self.np, "t": 1, "dt": 1, **({"z0": self.nz} if self.nz else {})}
        expected_out = {"x_hat": self.nx, "P_hat": self.nx * self.nx, "e": self.ny, "S": self.ny * self.ny,
                        **({"z": self.nz} if self.nz else {})}
        for side, expected in (("in", expected_in), ("out", expected_out)):
            count, names, sparsity = (getattr(lib, f"{self.name}_{what}_{side}") for what in ("n", "name",
                                                                                               "sparsity"))
            count.restype, count.argtypes = ctypes.c_longlong, []
            names.restype, names.argtypes = ctypes.c_char_p, [ctypes.c_longlong]
            sparsity.restype, sparsity.argtypes = ctypes.POINTER(ctypes.c_longlong), [ctypes.c_longlong]
            compiled = {}
            for i in range(int(count())):
                sp = sparsity(i)
                rows, cols = int(sp[0]), int(sp[1])
                nnz = int(sp[2 + cols])
                if nnz != rows * cols:
                    raise manifest_disagrees(path, f"{side}put {i}", "dense", f"{nnz} of {rows * cols} entries")
                compiled[(names(i) or b"").decode()] = nnz
            if compiled != expected:
                raise manifest_disagrees(path, "estimator", f"sizes {expected}", f"{side}puts {compiled}")

    def reset(self, x0: npt.ArrayLike | None = None, P0: npt.ArrayLike | None = None) -> None:
        """Start again from a prior: `x0`, `P0`, or the export's where not given.

        Parameters
        ----------
        x0 : array_like, shape (nx,), optional
        P0 : array_like, shape (nx, nx) or (nx,), optional
        """
        x = self._x0 if x0 is None else _validate.vector(x0, self.nx, "x0", broadcast=False)
        P = self._P0 if P0 is None else _validate.covariance(P0, self.nx, "P0", meaning="the prior's covariance")
        self._in["x"][:self.nx] = x
        self._in["P"][:] = np.asarray(P, dtype=float).reshape(-1, order="F")
        if self.nz:
            self._in["z0"][:] = self._z0
        self.last_corrected = True

    @property
    def x_hat(self) -> FloatArray:
        """The current estimate, shape (nx,)."""
        return self._in["x"][:self.nx].astype(np.float64)

    @property
    def P(self) -> FloatArray:
        """Its covariance, shape (nx, nx)."""
        return self._in["P"].astype(np.float64).reshape(self.nx, self.nx, order="F")

    def update(self, y: npt.ArrayLike, u: npt.ArrayLike, t: float = 0.0,
               p: npt.ArrayLike | None = None) -> tuple[FloatArray, FloatArray]:
        """One sample of the C: predict with `u` over [t, t + dt], correct with `y` (NaN entries skipped, with a
        `MissingMeasurementWarning`), as `shooting.EKF.update`.

        Returns
        -------
        x_hat : ndarray, shape (nx,)
        P : ndarray, shape (nx, nx)

        Raises
        ------
        ValueError
            Wrong sizes, an infinite y, a non-finite u, or a non-finite result (the estimate is left as it was).
        """
        yv, missing = checked_measurement(self.name, y, self.sensors, t)
        self._in["u"][:self.nu] = _validate.vector(u, self.nu, f"{self.name}.update: u", broadcast=False)
        self._in["p"][:self.np] = self._p0 if p is None else _validate.vector(p, self.np, "p", broadcast=False)
        self._in["y"][:self.ny] = np.where(missing, 0.0, yv)
        self._in["valid"][:self.ny] = (~missing).astype(float)
        self._in["t"][0] = _validate.real(t, "t")
        self._in["dt"][0] = self.dt
        status = self._fn(ctypes.addressof(self._arg), ctypes.addressof(self._res), None, None, 0)
        x_hat, P_hat = self._out["x_hat"][:self.nx], self._out["P_hat"]
        if status or not (np.isfinite(x_hat).all() and np.isfinite(P_hat).all()):
            raise ValueError(f"{self.name}.update at t = {float(t):g}: the estimate became non-finite (status "
                             f"{status}): check the input and dt, or reset the estimator")
        self._in["x"][:self.nx] = x_hat
        self._in["P"][:] = P_hat
        if self.nz:
            self._in["z0"][:] = self._out["z"]
        self.last_corrected = not missing.any()
        return self.x_hat, self.P


def prior_of(est: dict[str, Any], path: Path, nx: int, np_: int) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The manifest's prior (x0, P0) and parameters p0, their sizes checked against nx and np.

    Raises
    ------
    ValueError
        A size that disagrees.
    """
    x0, P0, p0 = (np.asarray(est[k], dtype=float) for k in ("x0", "P0", "p0"))
    if x0.size != nx or P0.shape != (nx, nx) or p0.size != np_:
        raise manifest_disagrees(path, "estimator.x0/P0/p0", "their sizes", f"nx = {nx}, np = {np_}")
    return x0, P0, p0


def checked_measurement(name: str, y: npt.ArrayLike, sensors: tuple[str, ...], t: float
                        ) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """A loaded estimator's measurement, checked: (y with 0 where missing, the missing mask); a NaN entry is a
    missing sensor, said by a `MissingMeasurementWarning`.

    Raises
    ------
    ValueError
        Not one number per sensor, or an infinite entry.
    """
    try:
        yv = np.array(y, dtype=float).reshape(-1) if not isinstance(y, (str, bytes)) else np.zeros(0)
    except (TypeError, ValueError):
        yv = np.zeros(0)
    if yv.size != len(sensors):
        raise ValueError(f"{name}.update: y has {yv.size} entries but the sensors measure {len(sensors)} "
                         f"({', '.join(sensors)}): give one value per sensor (NaN: not measured)")
    if np.isinf(yv).any():
        raise ValueError(f"{name}.update: y contains inf: give finite numbers (NaN for a missing sensor)")
    missing = np.isnan(yv)
    if missing.any():
        which = [int(i) for i in np.flatnonzero(missing)]
        warnings.warn(f"{name} at t = {float(t):g}: the measurement of y{which} is NaN: its correction is skipped, "
                      f"the estimate is predicted only", MissingMeasurementWarning, stacklevel=3)
    return np.where(missing, 0.0, yv), missing


def load_estimator(directory: str | os.PathLike[str]) -> HostEstimator | HostRealTimeMHE:
    """The estimator exported into `directory` (`shooting.codegen.export_estimator`), compiled for this machine.

    Returns
    -------
    HostEstimator or HostRealTimeMHE
        ``update(y, u, t=0.0, p=None) -> (x_hat, P)`` and ``reset(x0=None, P0=None)``, as `shooting.EKF` (an
        EKF's export) or `shooting.estimate.rt_mhe.RealTimeMHE` (an MHE's).

    Raises
    ------
    ValueError
        Not an estimator export, its C does not compile here, or its manifest disagrees with the compiled C.
    """
    folder, manifest = read_manifest(directory, False, ESTIMATOR_MANIFEST)
    if manifest.get("kind") == ESTIMATOR_KIND and manifest.get("estimator", {}).get("type") == "mhe":
        return HostRealTimeMHE(folder, manifest)
    return HostEstimator(directory)


class HostRealTimeMHE:
    """An exported real-time MHE compiled for this machine: ``update(y, u, t=0.0, p=None) -> (x_hat, P)``,
    ``reset(x0=None, P0=None)``, as `shooting.estimate.rt_mhe.RealTimeMHE`.

    Attributes
    ----------
    name, real : str
    nx, nu, np, ny, horizon : int
    dt : float
    sensors : tuple of str
    x_hat : ndarray, shape (nx,)
    P : ndarray, shape (nx, nx)
        The arrival cost's covariance.
    last_status, last_iterations : int
        The last update's status (0, or the QP's: 1 its iteration limit, whose last iterate is taken) and QP
        iterations.
    last_corrected : bool
    """

    def __init__(self, folder: Path, manifest: dict[str, object]) -> None:
        est = manifest["estimator"]
        assert isinstance(est, dict)
        self.name, self.real = str(manifest["name"]), manifest["real"]
        self.nx, self.nu, self.np, self.nz, self.ny = (int(est[k]) for k in ("nx", "nu", "np", "nz", "ny"))
        self.horizon = int(est.get("horizon", 1))
        self.dt, self.sensors = float(est["dt"]), tuple(est["sensors"])
        if len(self.sensors) != self.ny:
            raise manifest_disagrees(folder / "manifest.json", "estimator.sensors", f"{self.ny} sensors",
                                     f"{len(self.sensors)} names")
        if not (folder / f"{self.name}.c").is_file():
            raise ValueError(f"{folder / (self.name + '.c')} is missing: export again")
        self._x0, self._P0, self._p0 = prior_of(est, folder / "manifest.json", self.nx, self.np)
        self._c = HostMHE(folder, self.name, self.real, self.nx, self.nu, self.ny, self.np)  # type: ignore[arg-type]
        self.reset()

    @property
    def x_hat(self) -> FloatArray:
        return self._c.x_hat.copy()

    @property
    def P(self) -> FloatArray:
        return self._c.P.copy()

    @property
    def last_iterations(self) -> int:
        return self._c.last_iterations

    def reset(self, x0: npt.ArrayLike | None = None, P0: npt.ArrayLike | None = None) -> None:
        """Start again from a prior: `x0`, `P0`, or the export's where not given."""
        x = self._x0 if x0 is None else _validate.vector(x0, self.nx, "x0", broadcast=False)
        P = self._P0 if P0 is None else _validate.covariance(P0, self.nx, "P0", meaning="the prior's covariance")
        self._c.reset(x, P)
        self.last_corrected, self.last_status = True, 0

    def update(self, y: npt.ArrayLike, u: npt.ArrayLike, t: float = 0.0,
               p: npt.ArrayLike | None = None) -> tuple[FloatArray, FloatArray]:
        """One sample of the C (NaN entries of y: missing sensors, with a `MissingMeasurementWarning`).

        Returns
        -------
        x_hat : ndarray, shape (nx,)
        P : ndarray, shape (nx, nx)

        Raises
        ------
        ValueError
            Wrong sizes, an infinite y, a non-finite u, p or t.
        """
        yv, missing = checked_measurement(self.name, y, self.sensors, t)
        uv = _validate.vector(u, self.nu, f"{self.name}.update: u", broadcast=False)
        pv = self._p0 if p is None else _validate.vector(p, self.np, f"{self.name}.update: p", broadcast=False)
        sample = Sample(yv, (~missing).astype(float), uv, pv, _validate.real(t, f"{self.name}.update: t"))
        x_hat, P = self._c.update_sample(sample)
        self.last_status = self._c.last_status
        self.last_corrected = not missing.any()
        return x_hat, P
