"""The firmware's estimator: an EKF's C beside the controller, fed by the sensors of the board's plant.

With ``export_controller(..., firmware="stm32f405", estimator=ekf)`` (``controller --firmware stm32f405
--estimator ekf``) the firmware's closed loop is output feedback, as `shooting.simulate_closed_loop` runs it
with ``estimator=ekf, measurement_noise=S, seed=s``: at t_0 the controller gets the EKF's prior; after each plant
step the sensors measure the new state, y_{k+1} = h(x_{k+1}, u_k, p) + v_{k+1} (h in double, the noise v drawn
here from `shooting.mpc.feedback.measurement_noise_stream` (s), the host loop's stream, and stored as a table), the
EKF's C (the controller's real type) updates its estimate with (y_{k+1}, u_k, t_k) and the controller sees that.
Each sample's line ends with the estimate the controller was given.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting._c_text import literal
from shooting.codegen.c_files import generate_c
from shooting.controller.board import NOISE_SEED
from shooting.estimate.ekf import EKF
from shooting.estimate.export import estimator_function
from shooting.estimate.measurement import sensor_count
from shooting.estimate.mhe import MHE
from shooting.model import Model
from shooting.mpc.feedback import measurement_noise_stream
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.options import Real

__all__ = ["SENSORS_NAME", "FirmwareEstimator", "board_ekf", "board_estimator", "firmware_estimator"]

FloatArray = npt.NDArray[np.float64]

#: The C name (and file stem) of the board's sensors, h(x, u, p) in double.
SENSORS_NAME = "shooting_sensors"

_DECLARATIONS = """\
/* The EKF ({ekf}.c, {real}) and the sensors ({sensors}.c, double): y_(k+1) = h(x_(k+1), u_k, p) + v_(k+1), the
 * noise v drawn by the export (shooting.mpc.feedback.measurement_noise_stream({seed}), std {std}). */
static const double meas_noise[{steps}][{ny}] = {{
  {noise}}};
static {R} ekf_x[{nx}] = {{{x0}}};
static {R} ekf_P[{nx2}] = {{{P0}}};
static {R} ekf_z[{nz1}] = {{{z0}}};
static {R} ekf_xn[{nx}], ekf_Pn[{nx2}], ekf_e[{ny}], ekf_S[{ny2}], ekf_zn[{nz1}];
static const {R} ekf_valid[{ny}] = {{{ones}}};
static const {R} ekf_p[{np1}] = {{{p}}};

/* The EKF's update after sample k's plant step: 0, or 1 when the sensors or the update fail. */
static int estimate(int k, const double* x_next, const double* ud, const double* p) {{
  double y[{ny}];
  const double* sarg[3];
  double* sres[1];
  const {R}* arg[{n_in}];
  {R}* res[{n_out}];
  {R} yr[{ny}], ur[{nu1}], t = ({R})({dt} * k), dt = ({R}){dt};
  int i;
  sarg[0] = x_next;
  sarg[1] = ud;
  sarg[2] = p;
  sres[0] = y;
  if ({sensors}(sarg, sres, 0, 0, 0)) return 1;
  for (i = 0; i < {ny}; ++i) yr[i] = ({R})(y[i] + meas_noise[k][i]);
  for (i = 0; i < {nu}; ++i) ur[i] = ({R})ud[i];
  arg[0] = ekf_x;
  arg[1] = ekf_P;
  arg[2] = ur;
  arg[3] = yr;
  arg[4] = ekf_valid;
  arg[5] = ekf_p;
  arg[6] = &t;
  arg[7] = &dt;
  res[0] = ekf_xn;
  res[1] = ekf_Pn;
  res[2] = ekf_e;
  res[3] = ekf_S;
{dae_args}  if ({ekf}(arg, res, 0, 0, 0)) return 1;
  for (i = 0; i < {nx}; ++i) ekf_x[i] = ekf_xn[i];
  for (i = 0; i < {nx2}; ++i) ekf_P[i] = ekf_Pn[i];
  for (i = 0; i < {nz}; ++i) ekf_z[i] = ekf_zn[i];
  return 0;
}}
"""


@dataclass(frozen=True)
class FirmwareEstimator:
    """What the firmware's main.c and Makefile take from its estimator.

    Attributes
    ----------
    files : dict of str to str
        The EKF's and the sensors' C and headers, by file name (in ``firmware/``).
    includes, declarations : str
        main.c's ``#include`` lines; its tables, the estimate's state and ``estimate(k, x_next, ud, p)``.
    sources : str
        The Makefile's extra sources.
    description : dict
        The manifest's ``firmware.estimator`` entry.
    """

    files: dict[str, str]
    includes: str
    declarations: str
    sources: str
    description: dict[str, object]


def firmware_estimator(ekf: EKF, name: str, real: Real, steps: int, noise: FloatArray, seed: int,
                       p: FloatArray) -> FirmwareEstimator:
    """The firmware's EKF (`name` ``_ekf``, in `real`) and sensors for a loop of `steps` samples.

    Parameters
    ----------
    ekf : EKF
        Its prior (x0, P0), step, sensors, Q and R become the C's.
    name : str
        The controller's prefix.
    real : {"double", "float"}
    steps : int
    noise : ndarray, shape (ny,)
        The sensors' standard deviations.
    seed : int
        The noise's seed (`measurement_noise_stream`).
    p : ndarray, shape (np,)
        The plant's parameters (the sensors' and the EKF's p).
    """
    model, problem = ekf.model, ekf.problem
    stem = f"{name}_ekf"
    F = estimator_function(ekf, stem)
    R = f"{stem}_real"
    xs, us, ps = ca.SX.sym("x", model.nx), ca.SX.sym("u", model.nu), ca.SX.sym("p", model.np)
    h = ca.Function(SENSORS_NAME, [xs, us, ps], [ca.densify(ekf.measurement_function(xs, us, ps))],
                    ["x", "u", "p"], ["y"])
    files = {f: t for f, t in generate_c(F, stem, real=real).files.items() if f.endswith((".c", ".h"))}
    files.update({f: t for f, t in generate_c(h, SENSORS_NAME, real="double").files.items()
                  if f.endswith((".c", ".h"))})
    rng = measurement_noise_stream(seed)
    draws = np.array([noise * rng.standard_normal(ekf.ny) for _ in range(steps)]).reshape(steps, ekf.ny)
    z0 = model.z0 if model.nz else np.zeros(1)

    def values(v: npt.ArrayLike, kind: str = real) -> str:
        return ", ".join(literal(float(x), kind) for x in np.ravel(v, order="F")) or "0"

    dae = ("  arg[8] = ekf_z;\n  res[4] = ekf_zn;\n" if model.nz else "")
    declarations = _DECLARATIONS.format(
        ekf=stem, sensors=SENSORS_NAME, R=R, real=real, seed=seed, std=values(noise, "double"), steps=steps,
        ny=ekf.ny, ny2=ekf.ny ** 2, nx=model.nx, nx2=model.nx ** 2, nz=model.nz, nz1=max(model.nz, 1),
        nu=model.nu, nu1=max(model.nu, 1), np1=max(model.np, 1),
        noise=",\n  ".join("{" + values(row, "double") + "}" for row in draws),
        x0=values(problem.x0), P0=values(problem.P0), z0=values(z0), ones=values(np.ones(ekf.ny)),
        p=values(p if model.np else np.zeros(1)), n_in=F.n_in(), n_out=F.n_out(), dt=literal(problem.dt, "double"),
        dae_args=dae)
    description: dict[str, object] = {
        "type": "ekf", "name": stem, "sensors": list(ekf.sensors), "measurement_noise": noise.tolist(),
        "seed": seed, "x0": problem.x0.tolist(), "P0": problem.P0.tolist(), "Q": problem.Q.tolist(),
        "R": problem.R.tolist(), "dt": problem.dt, "real": real}
    return FirmwareEstimator(files, f'#include "{stem}.h"\n#include "{SENSORS_NAME}.h"\n', declarations,
                             f" {stem}.c {SENSORS_NAME}.c", description)


def board_estimator(estimator: object, noise: npt.ArrayLike, firmware: str | None, ocp: MultipleShootingOCP,
                    name: str, real: Real, steps: int) -> FirmwareEstimator | None:
    """The firmware's estimator of `export_controller` (``estimator=``, ``measurement_noise=``), checked against
    the controller and the options (None without one).

    Raises
    ------
    ValueError
        Noise without an estimator, an MHE or another object, no firmware, a model or dt other than the
        controller's, a bad noise.
    """
    if estimator is None:
        if not (np.ndim(noise) == 0 and float(np.asarray(noise, dtype=float)) == 0.0):
            raise ValueError("measurement_noise is given without an estimator: pass estimator=shooting.EKF(...) "
                             "with firmware='stm32f405', or drop measurement_noise")
        return None
    if isinstance(estimator, MHE):
        raise ValueError("the firmware runs an EKF beside the controller: pass shooting.EKF(...) of the same model "
                         "and sensors (the MHE runs on the host: shooting.MHE, export_estimator)")
    if not isinstance(estimator, EKF):
        raise ValueError(f"estimator must be a shooting.EKF, got {type(estimator).__name__}")
    if firmware is None:
        raise ValueError("estimator= runs on the board's firmware: add firmware='stm32f405' (--firmware "
                         "stm32f405), or use simulate_closed_loop(..., estimator=) on the host")
    model = ocp.model
    if (estimator.model.nx, estimator.model.nu) != (model.nx, model.nu):
        raise ValueError(f"the estimator's model has nx={estimator.model.nx}, nu={estimator.model.nu} but the "
                         f"controller's {model.name} nx={model.nx}, nu={model.nu}: they must match")
    if abs(estimator.dt - ocp.dt) > 1e-12 * ocp.dt:
        raise ValueError(f"the estimator samples every dt = {estimator.dt:g} but the controller every "
                         f"{ocp.dt:g}: build the EKF with dt={ocp.dt:g}")
    std = _validate.vector(noise, estimator.ny, "measurement_noise")
    if not (np.isfinite(std).all() and (std >= 0).all()):
        raise ValueError(f"measurement_noise must be standard deviations >= 0 (one, or {estimator.ny}: one per "
                         f"sensor), got {noise!r}")
    return firmware_estimator(estimator, name, real, steps, std, NOISE_SEED, model.p0)


def board_ekf(model: Model, dt: float, x0: npt.ArrayLike, noise: float) -> EKF:
    """The firmware's EKF of ``controller --estimator ekf``: the model's default sensors, Q = 1e-4 I, R the
    noise's variance (at least 1e-6), the prior the loop's start `x0` with P0 = 1e-4 I."""
    ny = sensor_count(model)
    return EKF(model, None, Q=1e-4 * np.eye(model.nx), R=max(noise**2, 1e-6) * np.eye(ny), x0=x0,
               P0=1e-4 * np.eye(model.nx), dt=dt)
