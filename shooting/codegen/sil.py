"""Software in the loop: generated C called from Python through ctypes.

`load_step` turns an integrator export into a plain callable
``step(x, u, p, t0, dt) -> (x_next, A, B)``; `load_controller` turns a
controller export into an object that `shooting.simulate_closed_loop`
accepts (``step(x, t) -> ControlStep``, ``dt``, ``model``, ``reset()``), so
the generated C runs against the accurate plant in Python. Both compile the
exported ``.c`` with the host gcc and the strict flags into a shared library
in a private temporary folder (the export directory is only read).

The manifest is data that may have been edited: it is read with bounds
(`shooting._files.read_record`) and checked against a schema
(`STEP_MANIFEST`, `CONTROLLER_MANIFEST`), and every size that buffers or
views over C memory depend on is read from the compiled library (CasADi's
calling convention of a step; a small shim compiled with a controller's
header reports its constants and the lengths of its memory struct's
arrays). A manifest that disagrees is refused, naming the field.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shooting import _files, _validate
from shooting.codegen.c_files import DAE_STEP_INPUTS, STEP_INPUTS
from shooting.codegen.host_library import build_shared_library, real_ctype, real_dtype
from shooting.loading import load_model
from shooting.model import Model
from shooting.mpc.controllers import ControlStep
from shooting.mpc.sqp import COLD_START_ITERATIONS, MAX_SQP_ITERATIONS, SQPResult
from shooting.options import REALS, Real

__all__ = ["CONTROLLER_STATUS", "HostController", "HostStep", "load_controller", "load_step"]

#: The status codes of ``NAME_mpc_feedback`` (see the generated header).
CONTROLLER_STATUS = {0: "ok", 1: "QP iteration limit", 2: "QP infeasible", 3: "Hessian not positive definite",
                     4: "non-finite data", 5: "not prepared", 6: "bad argument", 7: "integrator step failed",
                     8: "SQP iteration limit", 9: "line search failed"}

FloatArray = npt.NDArray[np.float64]


def _shape(value: object, where: str) -> None:
    """A matrix shape as the manifest records it: [rows, columns], non-negative integers."""
    if not (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1 << 24 for v in value)):
        raise ValueError(f"{where} must be a shape [rows, columns] of non-negative integers, got {value!r:.60}")


def _name(value: object, where: str) -> None:
    _validate.identifier(value, where)


def _real(value: object, where: str) -> None:
    _validate.choice(value, REALS, where)


def _dt(value: object, where: str) -> None:
    if value is not None:
        _validate.positive_real(value, where)


def _positive(value: object, where: str) -> None:
    _validate.positive_real(value, where)


def _count(value: object, where: str) -> None:
    _validate.integer(value, where, minimum=0, maximum=1 << 24)


def _horizon(value: object, where: str) -> None:
    _validate.integer(value, where, minimum=1, maximum=1 << 24)


def _model_args(value: object, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and k.isidentifier() and isinstance(v, (int, float, str, bool)) for k, v in
            value.items()):
        raise ValueError(f"{where} must be an object of parameter names and numbers, strings or booleans")


def _finite_list(value: object, where: str) -> None:
    if value is not None:
        _validate.array(value, where)


#: What `load_step` reads from an integrator export's manifest.json (other entries are not read).
STEP_MANIFEST: _validate.Schema = {
    "name": _name, "real": _real, "step_function": str, "dt?": _dt, "z0?": _finite_list, "kind?": str,
    "inputs": {"x": _shape, "u": _shape, "p": _shape, "t0": _shape, "dt": _shape, "z0?": _shape},
    "outputs": {"x_next": _shape, "A?": _shape, "B?": _shape, "err?": _shape, "z?": _shape},
}
#: What `load_controller` reads from a controller export's manifest.json.
CONTROLLER_MANIFEST: _validate.Schema = {
    "name": _name, "real": _real, "kind": str, "dt": _positive, "horizon": _horizon,
    "model": {"name": str, "nx": _count, "nu": _count, "np": _count},
    "model_spec?": (str, type(None)), "model_args?": _model_args,
}


def _manifest(directory: str | os.PathLike[str], controller: bool) -> tuple[Path, dict[str, Any]]:
    """The export's manifest.json, checked against its schema (ValueError naming the field that is wrong)."""
    folder = Path(directory)
    path = folder / "manifest.json"
    if not path.exists():
        raise ValueError(f"{folder} holds no manifest.json: give the directory of an export of shooting")
    suffix = "not the manifest of an export of shooting as written; export again"
    try:
        manifest = _files.read_record(path)
    except ValueError as err:
        raise ValueError(f"{err}: {suffix}") from None
    if isinstance(manifest, dict) and (manifest.get("kind") == "controller") != controller:
        raise ValueError(f"{folder} is not a controller export (an integrator? use load_step)" if controller
                         else f"{folder} is not an integrator export with NAME_step (a controller? use "
                              f"load_controller)")
    try:
        _validate.record(manifest, CONTROLLER_MANIFEST if controller else STEP_MANIFEST, str(path))
    except ValueError as err:
        raise ValueError(f"{err}: {suffix}") from None
    assert isinstance(manifest, dict)
    return folder, manifest


def _disagree(path: Path, field: str, manifest_value: object, compiled: object) -> ValueError:
    return ValueError(f"{path}: {field} is {manifest_value!r:.40} but the compiled C says {compiled}: the manifest "
                      f"does not describe this C (edited or mixed up); export again")


def _workdir() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="shooting_sil_"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _pointer(array: npt.NDArray[Any]) -> int:
    return int(array.ctypes.data)


class HostStep:
    """An exported integrator step, compiled for this machine.

    ``step(x, u, p=None, t0=0.0, dt=None)`` returns new arrays ``x_next``
    (nx,), ``A`` (nx, nx) and ``B`` (nx, nu) in float64 (computed in the
    export's real type; ``A`` and ``B`` are None for an export without
    sensitivities). `dt` defaults to the export's. Calling it costs a few
    microseconds (see ``scripts/bench_controller.py``).

    For a model with algebraic states the call is
    ``step(x, u, p=None, t0=0.0, dt=None, z0=None)`` and returns a fourth
    array, ``z`` (nz,), the algebraic state consistent with ``x_next``;
    `z0` is the guess of z at x (default the model's z0 recorded in the
    manifest, else zeros).

    Attributes
    ----------
    name, real : str
    nx, nu, np, nz : int
    dt : float or None
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        folder, manifest = _manifest(directory, controller=False)
        self.name: str = manifest["name"]
        self.real: Real = manifest["real"]
        path = folder / "manifest.json"
        if manifest["step_function"] != f"{self.name}_step":
            raise _disagree(path, "step_function", manifest["step_function"], f"{self.name}_step (from name)")
        source = folder / f"{self.name}.c"
        if not source.is_file():
            raise ValueError(f"{source} is missing: export again")
        work = _workdir()
        (work / "shim.c").write_text(_STEP_SHIM.format(name=self.name))
        lib = build_shared_library([source, work / "shim.c"], work / f"lib{self.name}.so",
                                   extra_flags=(f"-I{folder.resolve()}",
                                                *(("-Wdouble-promotion",) if self.real == "float" else ())))
        # Every size comes from the compiled C (CasADi's calling convention
        # in NAME.c: names and sparsity of each input and output); the
        # manifest must agree, since the buffers the C writes are sized here.
        try:
            ins, outs = _step_interface(lib, self.name, path)
            fn = getattr(lib, f"{self.name}_step")
        except AttributeError as err:
            raise ValueError(f"{source} does not define the functions of a step export ({err}): export again") \
                from None
        _check_real(lib, self.real, path)
        for field, compiled, recorded in (("inputs", ins, manifest["inputs"]), ("outputs", outs, manifest["outputs"])):
            for key in sorted(set(compiled) | set(recorded)):
                shape = list(compiled[key][:2]) if key in compiled else "absent"
                if recorded.get(key, "absent") != shape:
                    raise _disagree(path, f"{field}.{key}", recorded.get(key, "absent"), shape)
        self.nx, self.nu, self.np = ins["x"][2], ins["u"][2], ins["p"][2]
        self.nz = ins["z0"][2] if "z0" in ins else 0
        z0 = manifest.get("z0")
        if z0 is not None and len(z0) != self.nz:
            raise _disagree(path, "z0", f"{len(z0)} values", f"nz = {self.nz}")
        self.z0 = np.asarray(z0 if z0 is not None else np.zeros(self.nz), dtype=float)
        self.dt = manifest.get("dt")
        self.sensitivities = "A" in outs
        R = real_ctype(self.real)
        fn.argtypes = [ctypes.c_void_p] * 3 + [R, R] + [ctypes.c_void_p] * (5 if self.nz else 3)
        fn.restype = ctypes.c_int
        self._fn = fn
        dtype = real_dtype(self.real)
        self._x, self._u, self._p = (np.zeros(max(n, 1), dtype=dtype) for n in (self.nx, self.nu, self.np))
        self._xn = np.zeros(self.nx, dtype=dtype)
        self._A = np.zeros(self.nx * self.nx, dtype=dtype)
        self._B = np.zeros(max(self.nx * self.nu, 1), dtype=dtype)
        self._z0, self._z = np.zeros(max(self.nz, 1), dtype=dtype), np.zeros(max(self.nz, 1), dtype=dtype)
        self._ptrs = [_pointer(a) for a in (self._x, self._u, self._p, self._xn, self._A, self._B)]

    def __call__(self, x: npt.ArrayLike, u: npt.ArrayLike, p: npt.ArrayLike | None = None, t0: float = 0.0,
                 dt: float | None = None, z0: npt.ArrayLike | None = None) -> tuple[FloatArray | None, ...]:
        """One step of the C: (x_next, A, B) as float64 arrays, and z for a model with algebraic states.

        Raises
        ------
        ValueError
            Wrong sizes, or a status other than 0 from the C.
        """
        try:
            self._x[:self.nx] = x
            self._u[:self.nu] = u
            if self.np:
                if p is None:
                    raise ValueError(f"{self.name}: the model has {self.np} parameters: pass p")
                self._p[:] = p
        except ValueError:
            raise ValueError(f"{self.name}: x must have {self.nx} entries, u {self.nu} and p {self.np}") from None
        step = self.dt if dt is None else dt
        if step is None:
            raise ValueError(f"{self.name}: this export has no nominal dt: pass dt")
        px, pu, pp, pxn, pA, pB = self._ptrs
        if self.nz:
            guess = self.z0 if z0 is None else np.asarray(z0, dtype=float).ravel()
            if guess.size != self.nz:
                raise ValueError(f"{self.name}: z0 must have {self.nz} entries, got {guess.size}")
            self._z0[:self.nz] = guess
            status = self._fn(px, pu, pp, t0, step, _pointer(self._z0), pxn, pA, pB, _pointer(self._z))
        else:
            status = self._fn(px, pu, pp, t0, step, pxn, pA, pB)
        if status:
            raise ValueError(f"{self.name}_step returned {status}")
        x_next = self._xn.astype(np.float64)
        A = B = None
        if self.sensitivities:
            A = self._A.astype(np.float64).reshape(self.nx, self.nx, order="F")
            B = self._B[:self.nx * self.nu].astype(np.float64).reshape(self.nx, self.nu, order="F")
        if self.nz:
            return x_next, A, B, self._z[:self.nz].astype(np.float64)
        return x_next, A, B


_STEP_SHIM = """\
#include "{name}.h"
long shim_real_bytes(void) {{ return (long)sizeof({name}_real); }}
"""


def _check_real(lib: ctypes.CDLL, real: Real, path: Path) -> None:
    """The manifest's real type against the C's (the buffers' dtype follows the manifest)."""
    lib.shim_real_bytes.restype = ctypes.c_long
    lib.shim_real_bytes.argtypes = []
    size = int(lib.shim_real_bytes())
    if size != np.dtype(real_dtype(real)).itemsize:
        raise _disagree(path, "real", real, f"a {size}-byte real")


def _step_interface(lib: ctypes.CDLL, name: str,
                    path: Path) -> tuple[dict[str, tuple[int, int, int]], dict[str, tuple[int, int, int]]]:
    """Inputs and outputs of a step in the compiled C: name -> (rows, columns, nonzeros), in order."""
    sides = []
    for side, expected in (("in", (STEP_INPUTS, DAE_STEP_INPUTS)), ("out", None)):
        count = getattr(lib, f"{name}_n_{side}")
        names = getattr(lib, f"{name}_name_{side}")
        sparsity = getattr(lib, f"{name}_sparsity_{side}")
        count.restype, count.argtypes = ctypes.c_longlong, []
        names.restype, names.argtypes = ctypes.c_char_p, [ctypes.c_longlong]
        sparsity.restype, sparsity.argtypes = ctypes.POINTER(ctypes.c_longlong), [ctypes.c_longlong]
        entries = {}
        for i in range(int(count())):
            sp = sparsity(i)
            rows, cols = int(sp[0]), int(sp[1])
            entries[(names(i) or b"").decode()] = (rows, cols, int(sp[2 + cols]))  # colind[cols] = nonzeros
        if expected is not None and list(entries) not in expected:
            raise ValueError(f"{path}: the compiled C has inputs {', '.join(entries)}, not those of an integrator "
                             f"step: export again")
        sides.append(entries)
    ins, outs = sides
    nx, nu = ins["x"][2], ins["u"][2]
    dense = {"x_next": nx, "A": nx * nx, "B": nx * nu, "err": nx, "z": ins.get("z0", (0, 0, 0))[2]}
    wrong = [k for k, (rows, cols, nnz) in outs.items() if k in dense and (nnz != dense[k] or rows * cols != nnz)]
    if "x_next" not in outs or wrong or ins["t0"][2] != 1 or ins["dt"][2] != 1 or ("z0" in ins) != ("z" in outs):
        raise ValueError(f"{path}: the compiled C's outputs ({', '.join(outs)}) are not those of a dense integrator "
                         f"step for nx = {nx}, nu = {nu}: export again")
    return ins, outs


def load_step(directory: str | os.PathLike[str]) -> HostStep:
    """The integrator step exported into `directory`, as a Python callable (host build, ctypes).

    ``step(x, u, p, t0, dt) -> (x_next, A, B)`` with numpy arrays; see `HostStep`.

    Raises
    ------
    ValueError
        Not an integrator export, its C does not compile here, or its
        manifest.json is malformed (a field missing, null or of the wrong
        type, not an object, nested too deeply) or disagrees with the
        compiled C, from which every size is read (inputs, outputs, the real
        type): the message names the field.
    """
    return HostStep(directory)


_SHIM = """\
#include "{stem}.h"
int shim_status(const {stem}_mem* m) {{ return m->status; }}
int shim_qp_iterations(const {stem}_mem* m) {{ return m->qp_iterations; }}
int shim_sqp_iterations(const {stem}_mem* m) {{ return m->sqp_iterations; }}
int shim_cold(const {stem}_mem* m) {{ return m->cold; }}
double shim_sqp_step(const {stem}_mem* m) {{ return (double)m->sqp_step; }}
double shim_sqp_defect(const {stem}_mem* m) {{ return (double)m->sqp_defect; }}
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
            raise _disagree(path, field, recorded, compiled)
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
    x_pred, u_pred : ndarray or None
        The prediction of the last feedback, shapes (N+1, nx) and (N, nu).
    mem_bytes : int
        sizeof of the memory struct on this machine.
    """

    def __init__(self, directory: str | os.PathLike[str], model: Model | None = None) -> None:
        folder, manifest = _manifest(directory, controller=True)
        self.name: str = manifest["name"]
        self.real: Real = manifest["real"]
        self.dt = float(manifest["dt"])
        stem = f"{self.name}_mpc"
        source = folder / f"{stem}.c"
        if not source.is_file():
            raise ValueError(f"{source} is missing: export again")
        work = _workdir()
        (work / "shim.c").write_text(_SHIM.format(stem=stem, name=self.name, NAME=self.name.upper()))
        lib = build_shared_library([source, work / "shim.c"], work / f"lib{stem}.so",
                                   extra_flags=(f"-I{folder.resolve()}",
                                                *(("-Wdouble-promotion",) if self.real == "float" else ())))
        # The numpy views over the C memory are sized by the compiled library,
        # never by the manifest: it must agree or the load is refused.
        path = folder / "manifest.json"
        _check_real(lib, self.real, path)
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
                               ("solve", [vp, vp, vp, ctypes.c_int])):
                fn = getattr(lib, f"{stem}_{call}")
                fn.argtypes, fn.restype = args, ctypes.c_int
                self._fn[call] = fn
            getattr(lib, f"{stem}_default").restype = vp
            self._mem = getattr(lib, f"{stem}_default")()
        except AttributeError as err:
            raise ValueError(f"{source} does not define the functions of a controller export ({err}): export "
                             f"again") from None
        for fname, restype in (("shim_status", ctypes.c_int), ("shim_qp_iterations", ctypes.c_int),
                               ("shim_sqp_iterations", ctypes.c_int), ("shim_cold", ctypes.c_int),
                               ("shim_sqp_step", ctypes.c_double),
                               ("shim_sqp_defect", ctypes.c_double), ("shim_x", vp), ("shim_u", vp)):
            getattr(lib, fname).restype = restype
            getattr(lib, fname).argtypes = [vp]
        self.mem_bytes = sizes["mem"]
        dtype = real_dtype(self.real)
        nx, nu, N = self.model.nx, self.model.nu, self.horizon
        self._x_mem = np.ctypeslib.as_array(ctypes.cast(lib.shim_x(self._mem), ctypes.POINTER(R)), (sizes["x"],))
        self._u_mem = np.ctypeslib.as_array(ctypes.cast(lib.shim_u(self._mem), ctypes.POINTER(R)), (sizes["u"],))
        assert self._x_mem.size == (N + 1) * nx and self._u_mem.size == N * nu
        self._xbuf = np.zeros(nx, dtype=dtype)
        self._ubuf = np.zeros(nu, dtype=dtype)
        self.feedback_times: list[float] = []
        self.preparation_times: list[float] = []
        self.x_pred: FloatArray | None = None
        self.u_pred: FloatArray | None = None
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
        if x is not None:
            self._xbuf[:] = x
            self._call("reset", self._xbuf.ctypes.data)
        self._started = False
        self.feedback_times.clear()
        self.preparation_times.clear()
        self.x_pred = self.u_pred = None

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
            `CONTROLLER_STATUS`), ``step``, ``defect`` (relative), ``message``.
        """
        xv = _validate.vector(x0, self.model.nx, "x0", broadcast=False)
        max_iter = _validate.integer(max_iter, "max_iter", minimum=1, maximum=MAX_SQP_ITERATIONS)
        if t is not None:
            self._call("set_time", _validate.real(t, "t"))
        self._xbuf[:] = xv
        status = self._call("solve", self._xbuf.ctypes.data, self._ubuf.ctypes.data, max_iter)
        self._started = True
        nx, nu = self.model.nx, self.model.nu
        self.x_pred = self._x_mem.astype(np.float64).reshape(self.horizon + 1, nx)
        self.u_pred = self._u_mem.astype(np.float64).reshape(self.horizon, nu)
        return SQPResult(self.x_pred.copy(), self.u_pred.copy(), int(self._lib.shim_sqp_iterations(self._mem)),
                         status, float(self._lib.shim_sqp_step(self._mem)),
                         float(self._lib.shim_sqp_defect(self._mem)),
                         "" if status == 0 else CONTROLLER_STATUS.get(status, f"status {status}"))

    def _call(self, what: str, *args: object) -> int:
        return int(self._fn[what](self._mem, *args))

    def set_reference(self, k: int, x_ref: npt.ArrayLike | None, u_ref: npt.ArrayLike | None = None) -> None:
        """References of stage k = 0..N (``u_ref`` ignored at N); call before the next preparation."""
        dtype = real_dtype(self.real)
        xr = None if x_ref is None else np.ascontiguousarray(
            _validate.vector(x_ref, self.model.nx, "x_ref", broadcast=False), dtype=dtype)
        ur = None if u_ref is None else np.ascontiguousarray(
            _validate.vector(u_ref, self.model.nu, "u_ref", broadcast=False), dtype=dtype)
        k = _validate.integer(k, "k", minimum=0, maximum=self.horizon)
        self._call("set_reference", k, None if xr is None else xr.ctypes.data, None if ur is None else ur.ctypes.data)
        if self._started:
            self._call("prepare")

    def step(self, x: npt.ArrayLike, t: float = 0.0) -> ControlStep:
        """Feedback for the measured state `x` at time `t`, then shift and prepare the next sample.

        Returns
        -------
        ControlStep
            ``status`` is the C's status in words; ``iterations`` the QP's (a cold start's: the SQP's).
        """
        xv = _validate.vector(x, self.model.nx, "x", broadcast=False)
        if not self._started:
            self._call("set_time", float(t))
            t0 = time.perf_counter()
            self._call("prepare")
            self.preparation_times.append(time.perf_counter() - t0)
            self._started = True
        self._xbuf[:] = xv
        cold = bool(self._lib.shim_cold(self._mem))  # (this feedback iterates to convergence: SQP)
        t0 = time.perf_counter()
        status = self._call("feedback", self._xbuf.ctypes.data, self._ubuf.ctypes.data)
        feedback = time.perf_counter() - t0
        u = self._ubuf.astype(np.float64)
        nx, nu = self.model.nx, self.model.nu
        self.x_pred = self._x_mem.astype(np.float64).reshape(self.horizon + 1, nx)
        self.u_pred = self._u_mem.astype(np.float64).reshape(self.horizon, nu)
        iterations = int(self._lib.shim_sqp_iterations(self._mem) if cold else self._lib.shim_qp_iterations(self._mem))
        t0 = time.perf_counter()
        self._call("shift")
        self._call("prepare")
        prepare = time.perf_counter() - t0
        self.feedback_times.append(feedback)
        self.preparation_times.append(prepare)
        return ControlStep(u=u, solve_time=feedback + prepare, success=status == 0,
                           status=CONTROLLER_STATUS.get(status, f"status {status}"), iterations=iterations)


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
