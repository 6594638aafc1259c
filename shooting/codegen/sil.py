"""Software in the loop for an exported integrator step: its C called from Python through ctypes.

`load_step` turns an integrator export into a plain callable
``step(x, u, p, t0, dt) -> (x_next, A, B)``: it compiles the exported ``.c``
with the host gcc and the strict flags into a shared library in a private
temporary folder (the export directory is only read). The manifest is data
that may have been edited: it is read with bounds and checked against
`STEP_MANIFEST`, and every size the buffers depend on is read from the
compiled library (CasADi's calling convention of a step). A manifest that
disagrees is refused, naming the field. (A controller's counterpart is
`shooting.controller.host`.)
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.codegen.c_files import DAE_STEP_INPUTS, STEP_INPUTS
from shooting.codegen.host_library import build_shared_library, real_ctype, real_dtype
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
    shape_field,
)
from shooting.options import Real

__all__ = ["STEP_MANIFEST", "HostStep", "load_step"]


FloatArray = npt.NDArray[np.float64]


#: What `load_step` reads from an integrator export's manifest.json (other entries are not read).
STEP_MANIFEST: _validate.Schema = {
    "name": name_field, "real": real_field, "step_function": str, "dt?": dt_field, "z0?": finite_list_field,
    "kind?": str,
    "inputs": {"x": shape_field, "u": shape_field, "p": shape_field, "t0": shape_field, "dt": shape_field,
               "z0?": shape_field},
    "outputs": {"x_next": shape_field, "A?": shape_field, "B?": shape_field, "err?": shape_field,
                "z?": shape_field},
}


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
        folder, manifest = read_manifest(directory, False, STEP_MANIFEST)
        self.name: str = manifest["name"]
        self.real: Real = manifest["real"]
        path = folder / "manifest.json"
        if manifest["step_function"] != f"{self.name}_step":
            raise manifest_disagrees(path, "step_function", manifest["step_function"], f"{self.name}_step (from name)")
        source = folder / f"{self.name}.c"
        if not source.is_file():
            raise ValueError(f"{source} is missing: export again")
        work = private_workdir()
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
        check_real(lib, self.real, path)
        for field, compiled, recorded in (("inputs", ins, manifest["inputs"]), ("outputs", outs, manifest["outputs"])):
            for key in sorted(set(compiled) | set(recorded)):
                shape = list(compiled[key][:2]) if key in compiled else "absent"
                if recorded.get(key, "absent") != shape:
                    raise manifest_disagrees(path, f"{field}.{key}", recorded.get(key, "absent"), shape)
        self.nx, self.nu, self.np = ins["x"][2], ins["u"][2], ins["p"][2]
        self.nz = ins["z0"][2] if "z0" in ins else 0
        z0 = manifest.get("z0")
        if z0 is not None and len(z0) != self.nz:
            raise manifest_disagrees(path, "z0", f"{len(z0)} values", f"nz = {self.nz}")
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
        self._ptrs = [pointer(a) for a in (self._x, self._u, self._p, self._xn, self._A, self._B)]

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
            status = self._fn(px, pu, pp, t0, step, pointer(self._z0), pxn, pA, pB, pointer(self._z))
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
