"""`export_estimator`: an estimator's update as heap-free C, checked on this machine and the emulated Cortex-M4.

The EKF's whole update is one CasADi SX Function (`shooting.estimate.kalman`); its C comes from the project's
emitter (`shooting.codegen.generate_c`: single precision throughout for float, no heap), and the checks are the
integrator's (`shooting.codegen.pipeline.check_and_install`): the C against CasADi's evaluation of the same
Function, on the host and on QEMU's MPS2 AN386, with allowances derived from the precision's rounding of each
output, then flash, RAM and a float object free of double routines. Its check vectors are the states,
covariances, inputs and measurements of a run of the Python EKF on a simulated plant (`check_vectors`): a
covariance that is symmetric positive definite, as the C will meet it, not random numbers.

`shooting.estimate.host.load_estimator` calls the exported C from Python with the estimate kept between
samples, as the Python `EKF` does.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.codegen.c_files import generate_c
from shooting.codegen.pipeline import ExportReport, check_and_install, check_export
from shooting.codegen.toolchain import ToolchainError
from shooting.estimate.board import update_cycles
from shooting.estimate.ekf import EKF
from shooting.estimate.export_mhe import export_mhe
from shooting.estimate.mhe import MHE
from shooting.estimate.rt_mhe import RealTimeMHE
from shooting.options import REALS, TARGETS, Real, Target

__all__ = ["CHECK_SAMPLES", "COSTED", "ESTIMATOR_KIND", "check_vectors", "estimator_description", "estimator_function",
           "export_estimator"]

FloatArray = npt.NDArray[np.float64]

#: Samples of the simulated run whose EKF inputs become the check's vectors (every fifth of them is a vector).
CHECK_SAMPLES = 100

#: How many of the check's updates are costed cycle by cycle on the board (each traced instruction by instruction:
#: the slow part of the board check; an update's cost hardly varies, its branches are few).
COSTED = 5

#: The manifest's ``kind`` of an estimator export.
ESTIMATOR_KIND = "estimator"


def estimator_function(ekf: EKF, name: str) -> ca.Function:
    """The EKF's update Function named `name`, its outputs dense (the C writes every entry, column-major)."""
    F = ekf.update_function
    ins = F.sx_in()
    outs = [ca.densify(o) for o in F.call(ins)]
    return ca.Function(name, ins, outs, F.name_in(), F.name_out())


def check_vectors(ekf: EKF, samples: int = CHECK_SAMPLES, seed: int = 0, every: int = 5) -> list[list[FloatArray]]:
    """The update Function's inputs at every `every`-th sample of a run of `ekf` (a copy of its state) on the
    plant its own step simulates from its prior, with process and sensor noise drawn from Q and R and inputs
    around ``model.u0`` within the bounds; one sensor missing every seventh sample (the mask's path too).

    Returns
    -------
    list of list of ndarray
        In the Function's input order (`shooting.estimate.kalman.EKF_INPUTS`, ``z0`` last for a DAE).
    """
    model, problem = ekf.model, ekf.problem
    x_hat, P = problem.x0.copy(), problem.P0.copy()
    z = model.z0.copy() if model.nz else None
    vectors: list[list[FloatArray]] = []
    for k, s in enumerate(problem.simulated_run(samples, seed)):
        args = [x_hat, P.reshape(-1, order="F"), s.u, s.y, s.valid, s.p.copy(), np.array([s.t]),
                np.array([problem.dt]), *([z] if z is not None else [])]
        if k % every == every - 1:
            vectors.append([np.asarray(a, dtype=float).reshape(-1) for a in args])
        out = ekf.update_function(*[ca.DM(a) for a in (x_hat, P, s.u, s.y, s.valid, s.p, s.t, problem.dt,
                                                        *([z] if z is not None else []))])
        x_hat = np.array(out[0], dtype=float).reshape(-1)
        P = np.array(out[1], dtype=float)
        if z is not None:
            z = np.array(out[-1], dtype=float).reshape(-1)
        if not np.isfinite(x_hat).all():
            break
    if not vectors:
        raise problem.unstable_run("its first check vector")
    return vectors


def export_estimator(
    estimator: EKF | MHE,
    out_dir: str | os.PathLike[str],
    *,
    real: Real = "double",
    target: Target = "host",
    check: bool = False,
    force: bool = False,
    name: str | None = None,
    metadata: Mapping[str, object] | None = None,
    progress: bool | Callable[[str], None] | None = None,
) -> ExportReport:
    """Export an estimator's update as C into `out_dir`, optionally checked.

    Writes ``NAME.c``, ``NAME.h`` (CasADi's calling convention: ``NAME(arg, res, iw, w, mem)`` with the inputs
    ``x, P, u, y, valid, p, t, dt[, z0]`` and outputs ``x_hat, P_hat, e, S[, z]``, dense and column-major),
    ``manifest.json`` (the estimator's sizes, sensors, Q, R, prior and dt under ``estimator``) and a
    ``Makefile``; `shooting.codegen.load_estimator` runs it from Python.

    Parameters
    ----------
    estimator : EKF, MHE or RealTimeMHE
        The estimator to export (its step, sensors, Q, R and prior are constants of the C). An EKF's C is its
        update Function (below). An MHE's is the real-time MHE of the same cost and window
        (`shooting.estimate.rt_mhe`: one Gauss-Newton step per sample on the stage-wise QP, the state bounds
        kept; `shooting.estimate.export_mhe`): ``NAME.c`` and ``NAME.h`` with ``NAME_default``,
        ``NAME_reset``, ``NAME_update``, checked against its numpy twin within derived allowances.
    out_dir : str or path
        Created if missing; files we did not write are never touched.
    real : {"double", "float"}
    target : {"host", "cortex-m4"}
        "cortex-m4" also cross-compiles, measures flash and RAM and proves a float object free of double
        routines.
    check : bool
        Run the C on the updates of a simulated run (`check_vectors`) on the host (and on the emulated
        Cortex-M4 for that target) against CasADi's evaluation, within allowances derived from the precision's
        rounding of each output; a failure writes nothing. On the Cortex-M4 each update's cycles are counted by
        the cycle model over the first `COSTED` of them (`shooting.estimate.board.update_cycles`; the manifest's
        ``cortex_m4_cycles``).
    force : bool
        Add our files to a directory that holds other files.
    name : str, optional
        C prefix and file stem (default ``<model>_ekf`` or ``<model>_mhe``).
    metadata : mapping, optional
        Extra manifest entries.
    progress : bool or callable ``(str) -> None``, optional
        One line before each stage (True: on stderr).

    Returns
    -------
    ExportReport
        ``ok``, ``files``, ``errors`` (worst relative error per output), ``flash``, ``ram``, ``lines``.

    Raises
    ------
    ValueError
        Not an EKF, bad options, a refused directory, a missing tool.
    """
    if not isinstance(estimator, (EKF, MHE, RealTimeMHE)):
        raise ValueError(f"estimator must be a shooting.EKF or shooting.MHE, got {type(estimator).__name__}")
    reporter = _validate.progress(progress)

    def say(message: str) -> None:
        if reporter is not None:
            reporter(message)

    model = estimator.model
    real = _validate.choice(real, REALS, "real")
    target = _validate.choice(target, TARGETS, "target")
    check = _validate.flag(check, "check")
    force = _validate.flag(force, "force")
    kind = "ekf" if isinstance(estimator, EKF) else "mhe"
    name = _validate.sanitized_identifier(f"{model.name}_{kind}") if name is None else \
        _validate.identifier(name, "name", maximum=_validate.MAX_PREFIX_LENGTH)
    out = Path(out_dir)
    check_export(out, name, real=real, target=target, check=check, force=force)
    if not isinstance(estimator, EKF):
        rt = estimator if isinstance(estimator, RealTimeMHE) else RealTimeMHE.of(estimator.problem, estimator.horizon)
        return export_mhe(rt, out, name, real=real, target=target, check=check, force=force,
                          metadata=metadata, say=say)
    F = estimator_function(estimator, name)
    say(f"generating the EKF's C ({real}, {F.n_instructions()} CasADi instructions)")
    meta = {"kind": ESTIMATOR_KIND, "estimator": estimator_description(estimator), **dict(metadata or {})}
    export = generate_c(F, name, real=real, metadata=meta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vectors = check_vectors(estimator) if check or real == "float" else []
    line = ""
    if check and target == "cortex-m4":
        say(f"costing {COSTED} updates on the emulated Cortex-M4 (qemu mps2-an386, cycle model)")
        try:
            cost = update_cycles(export, vectors[:COSTED], real)
        except ToolchainError as err:
            return ExportReport(ok=False, name=name, out_dir=out, files=[], errors={},
                                problems=(str(err).splitlines()[0],))
        export = export.with_manifest(cortex_m4_cycles=cost)
        line = (f"cortex-m4 {real}: one update {cost['cycles_per_update_median']:.0f} cycles median, "
                f"{cost['cycles_per_update_max']:.0f} at most over {cost['updates']} updates = "
                f"{cost['ms_max']:.4f} ms at {cost['cycle_model'].get('clock_hz', 168e6) / 1e6:g} MHz")
    report = check_and_install(export, F, vectors, out, real=real, target=target, check=check, force=force, say=say)
    return dataclasses.replace(report, lines=(*report.lines, line)) if line else report


def estimator_description(ekf: EKF) -> dict[str, Any]:
    """The manifest's ``estimator`` entry: what `load_estimator` needs besides the compiled C."""
    model, problem = ekf.model, ekf.problem
    method = problem.method if isinstance(problem.method, str) else (problem.method.name or "custom")
    return {"type": "ekf", "model": model.name, "nx": model.nx, "nu": model.nu, "np": model.np, "nz": model.nz,
            "ny": ekf.ny, "dt": problem.dt, "method": method, "steps": problem.steps,
            "state_names": list(model.state_names), "sensors": list(ekf.sensors),
            "x0": problem.x0.tolist(), "P0": problem.P0.tolist(), "Q": problem.Q.tolist(), "R": problem.R.tolist(),
            "p0": model.p0.tolist(), "z0": model.z0.tolist()}
