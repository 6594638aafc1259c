"""Software in the loop for an exported controller: its C, compiled for this machine, called through ctypes.

`load_controller` turns a controller export into an object that
`shooting.simulate_closed_loop` accepts (``step(x, t) -> ControlStep``,
``dt``, ``model``, ``reset()``, ``solve(x0)``), so the generated C runs
against the accurate plant in Python. It compiles the exported ``.c`` with
the host gcc and the strict flags into a shared library in a private
temporary folder (the export directory is only read). The manifest is read
with bounds and checked against `CONTROLLER_MANIFEST`; every size that the
views over C memory depend on is read from the compiled library (a small
shim compiled with the controller's header reports its constants and the
lengths of its memory struct's arrays). A manifest that disagrees is
refused, naming the field.
"""

from __future__ import annotations

import ctypes
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.codegen.host_library import real_ctype, real_dtype
from shooting.codegen.sil_common import (
    check_real,
    count_field,
    horizon_field,
    manifest_disagrees,
    model_args_field,
    name_field,
    positive_field,
    private_workdir,
    read_manifest,
    real_field,
)
from shooting.controller.c_source import MAX_QP_BUDGET
from shooting.controller.host_cache import controller_library
from shooting.loading import load_model
from shooting.model import Model
from shooting.mpc.controllers import ControlStep
from shooting.mpc.sqp import COLD_START_ITERATIONS, MAX_SQP_ITERATIONS, SQPResult
from shooting.options import Real

__all__ = ["CONTROLLER_MANIFEST", "CONTROLLER_STATUS", "HostController", "load_controller"]

#: The status codes of ``NAME_mpc_feedback`` (see the generated header).
CONTROLLER_STATUS = {0: "ok", 1: "QP iteration limit", 2: "QP infeasible", 3: "Hessian not positive definite",
                     4: "non-finite data", 5: "not prepared", 6: "bad argument", 7: "integrator step failed",
                     8: "SQP iteration limit", 9: "line search failed", 10: "budget", 11: "diverged"}


FloatArray = npt.NDArray[np.float64]

#: What `load_controller` reads from a controller export's manifest.json.
CONTROLLER_MANIFEST: _validate.Schema = {
    "name": name_field, "real": real_field, "kind": str, "dt": positive_field, "horizon": horizon_field,
    "model": {"name": str, "nx": count_field, "nu": count_field, "np": count_field},
    "model_spec?": (str, type(None)), "model_args?": model_args_field,
}


_SHIM = """\
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <time.h>
#include "{stem}.h"
static double shim_now(void) {{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}}
/* One closed-loop sample as step() takes it: feedback, the prediction copied out (xs, us), then shift and
 * prepare; the two parts timed here, in C (seconds[0], seconds[1]), so that the times are the controller's
 * and not the Python call's. */
int shim_step({stem}_mem* m, const {name}_real* x, {name}_real* u, {name}_real* xs, {name}_real* us,
              double* seconds) {{
  double t0 = shim_now(), t1, t2;
  int i, st = {stem}_feedback(m, x, u);
  t1 = shim_now();
  seconds[0] = t1 - t0;
  for (i = 0; i < ({NAME}_MPC_N + 1) * {NAME}_MPC_NX; ++i) xs[i] = m->x[i];
  for (i = 0; i < {NAME}_MPC_N * {NAME}_MPC_NU; ++i) us[i] = m->u[i];
  t1 = shim_now();
  (void){stem}_shift(m);
  (void){stem}_prepare(m);
  t2 = shim_now();
  seconds[1] = t2 - t1;
  return st;
}}
/* This sample's data before its feedback, timed with it (seconds[0]): the references of every stage (their
 * gradient terms only: the preparation stays valid) when xr (and ur) are given, the parameters when p is given
 * and differs from the controller's (then the QP is prepared again: the parameters enter the linearisation). */
int shim_data({stem}_mem* m, const {name}_real* xr, const {name}_real* ur, const {name}_real* p, double* seconds) {{
  double t0 = shim_now();
  int k, i, st = 0, same = 1;
  if (xr)
    for (k = 0; k <= {NAME}_MPC_N && !st; ++k)
      st = {stem}_set_reference(m, k, xr + k * {NAME}_MPC_NX, ur && k < {NAME}_MPC_N ? ur + k * {NAME}_MPC_NU : 0);
  if (p && !st) {{
    for (i = 0; i < {NAME}_MPC_NP; ++i) same &= m->p[i] == p[i];
    if (!same && !(st = {stem}_set_parameters(m, p))) st = {stem}_prepare(m);
  }}
  seconds[0] = shim_now() - t0;
  return st;
}}
int shim_qp_iterations_sample(const {stem}_mem* m) {{ return m->qp_iterations_sample; }}
int shim_status(const {stem}_mem* m) {{ return m->status; }}
int shim_qp_iterations(const {stem}_mem* m) {{ return m->qp_iterations; }}
int shim_sqp_iterations(const {stem}_mem* m) {{ return m->sqp_iterations; }}
int shim_cold(const {stem}_mem* m) {{ return m->cold; }}
double shim_sqp_step(const {stem}_mem* m) {{ return (double)m->sqp_step; }}
double shim_sqp_defect(const {stem}_mem* m) {{ return (double)m->sqp_defect; }}
double shim_merit_weight(const {stem}_mem* m) {{ return (double)m->merit_weight; }}
double shim_sqp_stationarity(const {stem}_mem* m) {{ return (double)m->sqp_stationarity; }}
double shim_sqp_infeasibility(const {stem}_mem* m) {{ return (double)m->sqp_infeasibility; }}
{name}_real* shim_x({stem}_mem* m) {{ return m->x; }}
{name}_real* shim_u({stem}_mem* m) {{ return m->u; }}
/* The sizes compiled in: the header's constants, and the length of each array of the
 * memory struct that Python reads or writes (sizeof, not evaluated). */
#define SHIM_LEN(member) (long)(sizeof(((const {stem}_mem*)0)->member) / sizeof({name}_real))
long shim_real_bytes(void) {{ return (long)sizeof({name}_real); }}
void shim_sizes(long* out) {{
  out[0] = {NAME}_MPC_N; out[1] = {NAME}_MPC_NX; out[2] = {NAME}_MPC_NU; out[3] = {NAME}_MPC_NP;
  out[4] = SHIM_LEN(x); out[5] = SHIM_LEN(u); out[6] = SHIM_LEN(p); out[7] = SHIM_LEN(u_prev);
  out[8] = (long)sizeof({stem}_mem);
}}
"""

#: What `shim_sizes` reports, in order.
_SIZE_NAMES = ("N", "NX", "NU", "NP", "x", "u", "p", "u_prev", "mem")


def _controller_sizes(lib: ctypes.CDLL, manifest: dict[str, Any], path: Path) -> dict[str, int]:
    """N, NX, NU, NP of the compiled controller, checked against its memory struct and the manifest."""
    out = (ctypes.c_long * len(_SIZE_NAMES))()
    lib.shim_sizes.restype, lib.shim_sizes.argtypes = None, [ctypes.c_void_p]
    lib.shim_sizes(out)
    size = dict(zip(_SIZE_NAMES, (int(v) for v in out), strict=True))
    N, nx, nu, npar = size["N"], size["NX"], size["NU"], size["NP"]
    expected = {"x": (N + 1) * nx, "u": N * nu, "p": max(npar, 1), "u_prev": nu}
    if min(N, nx, nu) < 1 or npar < 0 or any(size[k] != v for k, v in expected.items()):
        raise ValueError(f"{path.parent}: the controller's header and its memory struct disagree ({size}): export "
                         f"again")
    for field, recorded, compiled in (("horizon", manifest["horizon"], N), ("model.nx", manifest["model"]["nx"], nx),
                                      ("model.nu", manifest["model"]["nu"], nu),
                                      ("model.np", manifest["model"]["np"], npar)):
        if recorded != compiled:
            raise manifest_disagrees(path, field, recorded, compiled)
    return size


class HostController:
    """An exported controller, compiled for this machine, as a closed-loop controller.

    At the first `step` (and after `reset`) the C starts from the guess stored
    at generation: ``init``, ``set_time(t)``, ``prepare``. Every `step` then
    runs ``feedback`` on the measured state, ``shift`` and ``prepare`` for the
    next sample, as `RTIController` does.

    Attributes
    ----------
    name : str
    real : str
    model : Model
    dt : float
    horizon : int
    feedback_times, preparation_times : list of float
        Seconds per sample of the two C calls.
    qp_iterations : list of int
        Per sample, every QP iteration it took (a cold start's over all its SQP iterations).
    x_pred, u_pred : ndarray or None
        The prediction of the last feedback, shapes (N+1, nx) and (N, nu).
    mem_bytes : int
        sizeof of the memory struct on this machine.
    """

    def __init__(self, directory: str | os.PathLike[str], model: Model | None = None) -> None:
        folder, manifest = read_manifest(directory, True, CONTROLLER_MANIFEST)
        self.name: str = manifest["name"]
        self.real: Real = manifest["real"]
        self.dt = float(manifest["dt"])
        stem = f"{self.name}_mpc"
        source = folder / f"{stem}.c"
        if not source.is_file():
            raise ValueError(f"{source} is missing: export again")
        sources = _sources(folder, stem, self.name)
        # For this machine's processor (-march=native: the build runs where it is made). The results are those
        # of any build: without -ffast-math, and with -std=c99 no multiply-add is contracted. -O2, not -O3:
        # measured, the cart-pole's RTI sample 5.8 -> 5.4 us and its cold swing-up 3.2 -> 2.9 ms (-O3's extra
        # unrolling on top of the QP's own); -march=native then 5.3 us and 2.6 ms. Kept in the per-user cache
        # (shooting.controller.host_cache): the same files load without compiling again.
        lib = controller_library(sources, (source.name, "shim.c"),
                                 ("-march=native", *(("-Wdouble-promotion",) if self.real == "float" else ())),
                                 private_workdir(), stem)
        # The numpy views over the C memory are sized by the compiled library,
        # never by the manifest: it must agree or the load is refused.
        path = folder / "manifest.json"
        check_real(lib, self.real, path)
        sizes = _controller_sizes(lib, manifest, path)
        self.horizon = sizes["N"]
        self.model = self._model(manifest, model)
        R = real_ctype(self.real)
        vp = ctypes.c_void_p
        self._lib = lib
        self._fn = {}
        try:
            for call, args in (("init", [vp]), ("prepare", [vp]), ("shift", [vp]), ("feedback", [vp, vp, vp]),
                               ("set_time", [vp, R]), ("set_reference", [vp, ctypes.c_int, vp, vp]),
                               ("set_parameters", [vp, vp]), ("reset", [vp, vp]),
                               ("solve", [vp, vp, vp, ctypes.c_int]), ("set_budget", [vp, ctypes.c_int, ctypes.c_int])):
                fn = getattr(lib, f"{stem}_{call}")
                fn.argtypes, fn.restype = args, ctypes.c_int
                self._fn[call] = fn
            getattr(lib, f"{stem}_default").restype = vp
            self._mem = getattr(lib, f"{stem}_default")()
        except AttributeError as err:
            raise ValueError(f"{source} does not define the functions of a controller export ({err}): export "
                             f"again") from None
        lib.shim_step.argtypes, lib.shim_step.restype = [vp, vp, vp, vp, vp, vp], ctypes.c_int
        lib.shim_data.argtypes, lib.shim_data.restype = [vp, vp, vp, vp, vp], ctypes.c_int
        for fname, restype in (("shim_status", ctypes.c_int), ("shim_qp_iterations", ctypes.c_int),
                               ("shim_qp_iterations_sample", ctypes.c_int),
                               ("shim_sqp_iterations", ctypes.c_int), ("shim_cold", ctypes.c_int),
                               ("shim_sqp_step", ctypes.c_double),
                               ("shim_sqp_defect", ctypes.c_double), ("shim_merit_weight", ctypes.c_double),
                               ("shim_sqp_stationarity", ctypes.c_double),
                               ("shim_sqp_infeasibility", ctypes.c_double),
                               ("shim_x", vp), ("shim_u", vp)):
            getattr(lib, fname).restype = restype
            getattr(lib, fname).argtypes = [vp]
        self.mem_bytes = sizes["mem"]
        recorded = manifest.get("reference", {})
        target = recorded.get("x_terminal") if isinstance(recorded, dict) else None
        #: The terminal stage's state reference (the export's, then the last set_reference at stage N): what a
        #: closed loop's final error is measured against. None for an export that did not record it.
        self.target_state: npt.NDArray[np.float64] | None = None if target is None else \
            _validate.vector(target, self.model.nx, "manifest reference x_terminal", broadcast=False)
        dtype = real_dtype(self.real)
        nx, nu, N = self.model.nx, self.model.nu, self.horizon
        # The C keeps its trajectory in the scaled variables (shooting.mpc.scaling): predictions multiplied back
        self._x_scale, self._u_scale = _manifest_scales(manifest, nx, nu, path)
        self._x_mem = np.ctypeslib.as_array(ctypes.cast(lib.shim_x(self._mem), ctypes.POINTER(R)), (sizes["x"],))
        self._u_mem = np.ctypeslib.as_array(ctypes.cast(lib.shim_u(self._mem), ctypes.POINTER(R)), (sizes["u"],))
        assert self._x_mem.size == (N + 1) * nx and self._u_mem.size == N * nu
        self._xbuf = np.zeros(nx, dtype=dtype)
        self._ubuf = np.zeros(nu, dtype=dtype)
        self._seconds = np.zeros(2)
        self._xs = np.zeros((N + 1) * nx, dtype=dtype)  # (the prediction, copied out before the shift)
        self._us = np.zeros(N * nu, dtype=dtype)
        self.feedback_times: list[float] = []
        self.preparation_times: list[float] = []
        self.x_pred: FloatArray | None = None
        self.u_pred: FloatArray | None = None
        self.qp_iterations: list[int] = []
        self._budget = (0, 0)  # (the export's)
        self._data_seconds = np.zeros(1)
        self.reset()

    @staticmethod
    def _model(manifest: dict[str, Any], model: Model | None) -> Model:
        info = manifest.get("model", {})
        if model is None:
            spec = manifest.get("model_spec") or info.get("name")
            try:
                model = load_model(str(spec), **dict(manifest.get("model_args") or {}))
            except (ValueError, OSError) as err:  # (OSError: a tampered spec such as a 300-character path)
                raise ValueError(f"cannot rebuild model {spec!r:.80} of this controller ({err}): pass model=") \
                    from None
        if not isinstance(model, Model):
            raise ValueError(f"model must be a shooting.Model, got {type(model).__name__}")
        if (model.nx, model.nu, model.np) != (info.get("nx"), info.get("nu"), info.get("np")):
            raise ValueError(f"model {model.name} has nx={model.nx}, nu={model.nu}, np={model.np} but the controller "
                             f"was generated for nx={info.get('nx')}, nu={info.get('nu')}, np={info.get('np')}")
        return model

    def reset(self, x0: npt.ArrayLike | None = None) -> None:
        """Back to the generation-time guess (``init``), or with `x0` a guess at that state
        (``NAME_mpc_reset``: x0 held over the horizon, the input references clipped to the bounds); the next
        `step` cold-starts (iterates to convergence)."""
        x = None if x0 is None else _validate.vector(x0, self.model.nx, "x0", broadcast=False)
        self._call("init")
        self._call("set_budget", *self._budget)
        if x is not None:
            self._xbuf[:] = x
            self._call("reset", self._xbuf.ctypes.data)
        self._started = False
        self.feedback_times.clear()
        self.preparation_times.clear()
        self.qp_iterations.clear()
        self.x_pred = self.u_pred = None

    def set_budget(self, max_qp_iterations: int | None = None, max_sqp_iterations: int | None = None) -> None:
        """The budget of every later sample (``NAME_mpc_set_budget``; kept by `reset`).

        Parameters
        ----------
        max_qp_iterations : int, optional
            Iterations per QP (each Riccati factorisation counts one: the shortcut's and every interior-point
            iteration); None: the export's default (``NAME_MPC_MAX_ITER``, the manifest's ``budget``).
        max_sqp_iterations : int, optional
            SQP iterations per sample, a cold start's included (one that needs more goes on at the next
            samples); None: the export's default (``NAME_MPC_COLD_ITERATIONS``).

        Notes
        -----
        A sample the budget stops returns ``status == "budget"`` with the best input it reached (finite,
        within the input bounds); the next sample goes on from there.
        """
        qp = 0 if max_qp_iterations is None else \
            _validate.integer(max_qp_iterations, "max_qp_iterations", minimum=1, maximum=MAX_QP_BUDGET)
        sqp = 0 if max_sqp_iterations is None else \
            _validate.integer(max_sqp_iterations, "max_sqp_iterations", minimum=1, maximum=MAX_SQP_ITERATIONS)
        self._budget = (qp, sqp)
        self._call("set_budget", qp, sqp)

    def solve(self, x0: npt.ArrayLike, max_iter: int = COLD_START_ITERATIONS, t: float | None = None) -> SQPResult:
        """SQP (``NAME_mpc_solve``) from the current guess to a KKT point of the OCP for the state `x0`.

        The solution stays the guess: a `step` at the same state then applies its first input.

        Parameters
        ----------
        x0 : array_like, shape (nx,)
        max_iter : int, default 50
            1..`MAX_SQP_ITERATIONS`.
        t : float, optional
            The time of stage 0 (``set_time``; default: the controller's, 0 after `reset`).

        Returns
        -------
        SQPResult
            ``u`` (N, nu), ``x`` (N+1, nx), ``iterations``, ``status`` (0 converged; else the C's code:
            `CONTROLLER_STATUS`), ``step``, ``defect`` (relative), ``message``, ``merit_weight`` (the l1 merit's
            penalty at the end), ``stationarity`` (its last exact QP's, inf before one).
        """
        xv = _validate.vector(x0, self.model.nx, "x0", broadcast=False)
        max_iter = _validate.integer(max_iter, "max_iter", minimum=1, maximum=MAX_SQP_ITERATIONS)
        if t is not None:
            self._call("set_time", _validate.real(t, "t"))
        self._xbuf[:] = xv
        status = self._call("solve", self._xbuf.ctypes.data, self._ubuf.ctypes.data, max_iter)
        stat = float(self._lib.shim_sqp_stationarity(self._mem))
        self._started = True
        #: Interior-point iterations (Riccati factorisations) over every QP of the last `solve`.
        self.solve_qp_iterations = int(self._lib.shim_qp_iterations_sample(self._mem))
        nx, nu = self.model.nx, self.model.nu
        self.x_pred = self._x_mem.astype(np.float64).reshape(self.horizon + 1, nx) * self._x_scale
        self.u_pred = self._u_mem.astype(np.float64).reshape(self.horizon, nu) * self._u_scale
        infeasibility = float(self._lib.shim_sqp_infeasibility(self._mem))
        message = "" if status == 0 else CONTROLLER_STATUS.get(status, f"status {status}")
        if status == 2:
            message = f"infeasible: the hard rows cannot be met near this point (violated by up to {infeasibility:.3g})"
        return SQPResult(self.x_pred.copy(), self.u_pred.copy(), int(self._lib.shim_sqp_iterations(self._mem)),
                         status, float(self._lib.shim_sqp_step(self._mem)),
                         float(self._lib.shim_sqp_defect(self._mem)), message,
                         float(self._lib.shim_merit_weight(self._mem)), math.inf if stat < 0 else stat, infeasibility)

    def _call(self, what: str, *args: object) -> int:
        return int(self._fn[what](self._mem, *args))

    def set_reference(self, k: int, x_ref: npt.ArrayLike | None, u_ref: npt.ArrayLike | None = None) -> None:
        """References of stage k = 0..N (``u_ref`` ignored at N): written into the prepared QP's gradients
        (``NAME_mpc_set_reference``; no new preparation). For a reference that changes every sample pass
        ``x_ref``/``u_ref`` to `step` instead: written in one call, timed with the sample."""
        dtype = real_dtype(self.real)
        xr = None if x_ref is None else np.ascontiguousarray(
            _validate.vector(x_ref, self.model.nx, "x_ref", broadcast=False), dtype=dtype)
        ur = None if u_ref is None else np.ascontiguousarray(
            _validate.vector(u_ref, self.model.nu, "u_ref", broadcast=False), dtype=dtype)
        k = _validate.integer(k, "k", minimum=0, maximum=self.horizon)
        if k == self.horizon and xr is not None:
            self.target_state = np.array(xr, dtype=float)
        self._call("set_reference", k, None if xr is None else xr.ctypes.data, None if ur is None else ur.ctypes.data)

    def _data(self, x_ref: npt.ArrayLike | None, u_ref: npt.ArrayLike | None, p: npt.ArrayLike | None
              ) -> tuple[Any, Any, Any]:
        """This sample's references (every stage) and parameters as C arrays, None where not given."""
        dtype = real_dtype(self.real)
        N, nx, nu, npar = self.horizon, self.model.nx, self.model.nu, self.model.np
        if u_ref is not None and x_ref is None:
            raise ValueError("u_ref needs x_ref (give the state reference too)")
        xr = None if x_ref is None else _validate.stage_rows(x_ref, N + 1, nx, "x_ref")
        ur = None if u_ref is None else _validate.stage_rows(u_ref, N, nu, "u_ref")
        pv = None
        if p is not None and npar:
            rows = _validate.stage_rows(p, N, npar, "p")
            if not np.all(rows == rows[0]):
                raise ValueError("an exported controller takes one parameter vector per sample (the C's "
                                 "set_parameters), not one per stage: give p of shape (np,)")
            pv = rows[0]
        return tuple(None if a is None else np.ascontiguousarray(a, dtype=dtype).reshape(-1)
                     for a in (xr, ur, pv))  # type: ignore[return-value]

    def step(self, x: npt.ArrayLike, t: float = 0.0, *, x_ref: npt.ArrayLike | None = None,
             u_ref: npt.ArrayLike | None = None, p: npt.ArrayLike | None = None) -> ControlStep:
        """Feedback for the measured state `x` at time `t`, then shift and prepare the next sample.

        Parameters
        ----------
        x : array_like, shape (nx,)
        t : float
        x_ref : array_like, shape (nx,) or (N+1, nx), optional
            This sample's state reference (every stage), written into the prepared QP's gradients before the
            feedback (no new preparation) and timed with it.
        u_ref : array_like, shape (nu,) or (N, nu), optional
            Its input reference (with `x_ref`).
        p : array_like, shape (np,), optional
            The model's parameters; when they change the QP is prepared again (timed with the sample).

        Returns
        -------
        ControlStep
            ``status`` is the C's status in words (`CONTROLLER_STATUS`: "ok", "budget", ...); ``iterations`` the
            QP's (a cold start's: the SQP's); ``solve_time`` the controller's own time (the data, feedback,
            shift and preparation, timed in C).
        """
        xv = _validate.vector(x, self.model.nx, "x", broadcast=False)
        xr, ur, pv = self._data(x_ref, u_ref, p)
        if not self._started:
            self._call("set_time", float(t))
            t0 = time.perf_counter()
            self._call("prepare")
            self.preparation_times.append(time.perf_counter() - t0)
            self._started = True
        data = 0.0
        if xr is not None or pv is not None:
            def ptr(a: Any) -> Any:
                return None if a is None else a.ctypes.data
            self._lib.shim_data(self._mem, ptr(xr), ptr(ur), ptr(pv), self._data_seconds.ctypes.data)
            data = float(self._data_seconds[0])
        self._xbuf[:] = xv
        cold = bool(self._lib.shim_cold(self._mem))  # (this feedback iterates SQP)
        # feedback, shift and prepare in one call, timed in C (the Python call's own cost is not counted)
        status = int(self._lib.shim_step(self._mem, self._xbuf.ctypes.data, self._ubuf.ctypes.data,
                                         self._xs.ctypes.data, self._us.ctypes.data, self._seconds.ctypes.data))
        feedback, prepare = data + float(self._seconds[0]), float(self._seconds[1])
        u = self._ubuf.astype(np.float64)
        nx, nu = self.model.nx, self.model.nu
        self.x_pred = self._xs.astype(np.float64).reshape(self.horizon + 1, nx) * self._x_scale
        self.u_pred = self._us.astype(np.float64).reshape(self.horizon, nu) * self._u_scale
        iterations = int(self._lib.shim_sqp_iterations(self._mem) if cold else self._lib.shim_qp_iterations(self._mem))
        self.qp_iterations.append(int(self._lib.shim_qp_iterations_sample(self._mem)))
        self.feedback_times.append(feedback)
        self.preparation_times.append(prepare)
        return ControlStep(u=u, solve_time=feedback + prepare, success=status == 0,
                           status=CONTROLLER_STATUS.get(status, f"status {status}"), iterations=iterations)


def _sources(folder: Path, stem: str, name: str) -> dict[str, str]:
    """The texts of the export's C and header and of the shim, by file name."""
    source, header = folder / f"{stem}.c", folder / f"{stem}.h"
    if not header.is_file():
        raise ValueError(f"{header} is missing: export again")
    return {source.name: source.read_text(encoding="utf-8"), header.name: header.read_text(encoding="utf-8"),
            "shim.c": _SHIM.format(stem=stem, name=name, NAME=name.upper())}


def _manifest_scales(manifest: dict[str, Any], nx: int, nu: int, path: Path) -> tuple[FloatArray, FloatArray]:
    """The export's x_scale (nx,) and u_scale (nu,) (its manifest's ``scaling``; none recorded: 1)."""
    entry = manifest.get("scaling")
    scaling: dict[str, Any] = entry if isinstance(entry, dict) else {}
    x_scale = _validate.scale(scaling.get("x_scale", 1.0), nx, f"{path}: scaling x_scale")
    u_scale = _validate.scale(scaling.get("u_scale", 1.0), nu, f"{path}: scaling u_scale")
    return (np.ones(nx) if x_scale is None else x_scale), (np.ones(nu) if u_scale is None else u_scale)


def load_controller(directory: str | os.PathLike[str], model: Model | None = None) -> HostController:
    """The controller exported into `directory`, compiled for this machine, as a closed-loop controller.

    Parameters
    ----------
    directory : path
        An `export_controller` output.
    model : Model, optional
        The controller's model (default: rebuilt from the manifest's model
        name or spec; needed for a model from your own file).

    Returns
    -------
    HostController
        Usable by `shooting.simulate_closed_loop`.

    Raises
    ------
    ValueError
        Not a controller export, its C does not compile here, its model
        cannot be rebuilt, or its manifest.json is malformed or disagrees
        with the compiled C (horizon, model.nx, model.nu, model.np, real):
        the sizes of the views over the C memory come from the compiled
        library, never from the manifest.
    """
    return HostController(directory, model)
