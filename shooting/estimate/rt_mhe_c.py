"""The real-time MHE as heap-free C: ``templates/rt_mhe.c.in`` around the stage-wise QP's C and four generated
Functions, compiled for this machine (`HostMHE`) and run on the emulated Cortex-M4 (`board_run`).

An export named NAME is ``NAME.h`` and one ``NAME.c``: the four Functions of
`shooting.estimate.rt_mhe.WindowFunctions` (``NAME_dyn``, ``NAME_meas``, ``NAME_prior``, ``NAME_arrival``, C from
the project's emitter), the stage-wise QP solver rendered with the prefix ``NAME_qp`` (`shooting.qp.render`) and
the update (``templates/rt_mhe.c.in``).
"""

from __future__ import annotations

import ctypes
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting._c_text import literal, render_from
from shooting._tools import build_shared_library, real_dtype
from shooting.codegen import cycles
from shooting.codegen.c_files import generate_c
from shooting.codegen.sil_common import private_workdir
from shooting.codegen.toolchain import ToolchainError, first_error_line
from shooting.estimate.problem import Sample
from shooting.estimate.rt_mhe import FAILED, QP_MAX_ITERATIONS, RealTimeMHE
from shooting.options import Real
from shooting.qp import OCP_QP_TOLERANCES, OCPQPSizes
from shooting.qp.render import ocp_qp_source

__all__ = ["FUNCTION_PARTS", "TEMPLATES", "BoardRun", "HostMHE", "board_run", "rt_mhe_files"]

FloatArray = npt.NDArray[np.float64]

#: The package of the MHE's C templates.
TEMPLATES = "shooting.estimate.templates"

#: The generated Functions' file suffixes (``NAME_dyn.c`` ...).
FUNCTION_PARTS = ("dyn", "meas", "prior", "arrival")

_BIG = 1e30


def _renamed(F: ca.Function, name: str) -> ca.Function:
    ins = F.sx_in()
    return ca.Function(name, ins, [ca.densify(o) for o in F.call(ins)], F.name_in(), F.name_out())


def _values(v: npt.ArrayLike, real: str) -> str:
    return ", ".join(literal(float(x), real) for x in np.ravel(np.asarray(v, dtype=float), order="F")) or "0"


def rt_mhe_files(rt: RealTimeMHE, name: str, real: Real) -> dict[str, str]:
    """The export's C files by name (module docstring)."""
    model, problem, fns = rt.model, rt.problem, rt.functions
    nx, H = model.nx, rt.horizon
    idx = [i for i in range(nx) if np.isfinite(model.x_min[i]) or np.isfinite(model.x_max[i])]
    sizes = OCPQPSizes(N=H + 1, nx=nx, nu=nx, nbx=len(idx))
    qp = ocp_qp_source(f"{name}_qp", real, sizes)
    tol = OCP_QP_TOLERANCES[real]
    values = dict(p=name, P=name.upper(), R=real, f="f" if real == "float" else "", H=H, NX=nx, NU=model.nu,
                  NU1=max(model.nu, 1), NY=rt.ny, NP1=max(model.np, 1), NZ=model.nz, NZ1=max(model.nz, 1),
                  NBX=len(idx), NBX1=max(len(idx), 1))
    files = {
        f"{name}.h": render_from(TEMPLATES, "rt_mhe.h.in", p=name, P=name.upper(), R=real, H=H, NX=nx,
                                 NU=model.nu, NY=rt.ny, NP=model.np, model=model.name, FAILED=FAILED),
        f"{name}.c": render_from(
            TEMPLATES, "rt_mhe.c.in", **values, generated=_generated(rt, name, real), qp_work=qp.work,
            qp_functions=qp.functions,
            G=_values(fns.G, real), x0=_values(problem.x0, real), P0=_values(problem.P0, real),
            p0=_values(model.p0 if model.np else [0.0], real), z0=_values(model.z0 if model.nz else [0.0], real),
            xmin=_values(np.maximum(model.x_min, -_BIG), real), xmax=_values(np.minimum(model.x_max, _BIG), real),
            idxbx=", ".join(str(i) for i in idx) or "0", dt=literal(problem.dt, real), max_iter=QP_MAX_ITERATIONS,
            tol_stat=literal(tol["tol_stat"], real), tol_eq=literal(tol["tol_eq"], real),
            tol_mu=literal(tol["tol_mu"], real)),
    }
    return files


def _generated(rt: RealTimeMHE, name: str, real: Real) -> str:
    """The four Functions' C (header, then source without its own include) as one text."""
    fns, parts = rt.functions, []
    for part, F in zip(FUNCTION_PARTS, (fns.dyn, fns.meas, fns.prior, fns.arrival), strict=True):
        stem = f"{name}_{part}"
        export = generate_c(_renamed(F, stem), stem, real=real)
        parts += [export.files[f"{stem}.h"], export.files[f"{stem}.c"].replace(f'#include "{stem}.h"\n', "")]
    return "\n".join(parts)


class HostMHE:
    """The MHE's C compiled for this machine: ``update(y, u, t=0.0, p=None) -> (x_hat, P)``, ``reset()``.

    Parameters
    ----------
    directory : path
        Holds the export's C files (`rt_mhe_files`).
    name : str
    real : {"double", "float"}
    nx, nu, ny, np : int
    workdir : path, optional
        Where the library is built (default a private folder removed at exit, as the other loaders').
    """

    def __init__(self, directory: str | os.PathLike[str], name: str, real: Real, nx: int, nu: int, ny: int,
                 np_: int, workdir: str | os.PathLike[str] | None = None) -> None:
        folder = Path(directory)
        self.name, self.real, self.nx, self.nu, self.ny, self.np = name, real, nx, nu, ny, np_
        out = Path(workdir) if workdir is not None else private_workdir()
        self._lib = build_shared_library([folder / f"{name}.c"], out / f"{name}.so",
                                         extra_flags=("-Wdouble-promotion",) if real == "float" else ())
        self._dtype = real_dtype(real)
        rt = ctypes.c_float if real == "float" else ctypes.c_double
        default = self._lib[f"{name}_default"]  # (each lookup is a new function object: set it up once)
        default.restype = ctypes.c_void_p
        self._mem = ctypes.c_void_p(default())
        self._update = self._lib[f"{name}_update"]
        self._update.argtypes = [ctypes.c_void_p, *[ctypes.c_void_p] * 4, rt, ctypes.c_void_p, ctypes.c_void_p]
        self._reset = self._lib[f"{name}_reset"]
        self._reset.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self._iterations = self._lib[f"{name}_qp_iterations"]
        self._iterations.argtypes = [ctypes.c_void_p]
        self.x_hat = np.zeros(nx)
        self.P = np.zeros((nx, nx))
        self.last_status = 0
        self.reset()  # (the export's prior; the caller that knows it passes it to see it in x_hat and P)

    def _buffer(self, values: npt.ArrayLike, n: int) -> npt.NDArray[Any]:
        return np.ascontiguousarray(np.resize(np.asarray(values, dtype=self._dtype).reshape(-1), max(n, 1)))

    def reset(self, x0: npt.ArrayLike | None = None, P0: npt.ArrayLike | None = None) -> None:
        """The export's prior, or `x0` (nx,), `P0` (nx, nx)."""
        xb = None if x0 is None else self._buffer(x0, self.nx)
        Pb = None if P0 is None else self._buffer(np.asarray(P0, dtype=float).reshape(-1, order="F"), self.nx ** 2)
        self._reset(self._mem, None if xb is None else xb.ctypes.data, None if Pb is None else Pb.ctypes.data)
        if x0 is not None:
            self.x_hat = np.asarray(x0, dtype=float).reshape(-1).copy()
        if P0 is not None:
            self.P = np.asarray(P0, dtype=float).reshape(self.nx, self.nx).copy()

    def update_sample(self, sample: Sample) -> tuple[FloatArray, FloatArray]:
        """`update` on a checked sample (`shooting.estimate.problem.Sample`)."""
        y, valid = self._buffer(sample.y, self.ny), self._buffer(sample.valid, self.ny)
        u, p = self._buffer(sample.u, self.nu), self._buffer(sample.p, self.np)
        x_hat, P = np.zeros(self.nx, dtype=self._dtype), np.zeros(self.nx ** 2, dtype=self._dtype)
        self.last_status = int(self._update(self._mem, y.ctypes.data, valid.ctypes.data, u.ctypes.data,
                                            p.ctypes.data if self.np else None, sample.t, x_hat.ctypes.data,
                                            P.ctypes.data))
        self.x_hat = x_hat.astype(float)
        self.P = P.astype(float).reshape(self.nx, self.nx, order="F")
        return self.x_hat.copy(), self.P.copy()

    @property
    def last_iterations(self) -> int:
        return int(self._iterations(self._mem))


@dataclass(frozen=True)
class BoardRun:
    """The MHE's C over a run's samples on the emulated Cortex-M4.

    Attributes
    ----------
    x_hat : ndarray, shape (K, nx)
    status : ndarray, shape (K,)
    cycles : ndarray, shape (K,)
        Each update's cycles by the cycle model.
    model : dict
        The cycle model's assumptions.
    """

    x_hat: FloatArray
    status: npt.NDArray[np.int64]
    cycles: FloatArray
    model: dict[str, Any]


_MAIN = """\
/* Each sample through {name}_update once, every call a costed segment; then each estimate printed. */
#include <stdio.h>
#include "{name}.h"
{markers}
{tables}
static {R} x_out[{K}][{nx}];
static int st_out[{K}];
int main(void) {{
  {name}_mem* m = {name}_default();
  {R} P[{nx} * {nx}];
  int k, i;
  {name}_reset(m, 0, 0);
  for (k = 0; k < {K}; ++k) {{
    shooting_mark_update();
    st_out[k] = {name}_update(m, in_y[k], in_v[k], in_u[k], {p_arg}, in_t[k], x_out[k], P);
    shooting_mark_other();
  }}
  for (k = 0; k < {K}; ++k) {{
    printf("x %d %d", k, st_out[k]);
    for (i = 0; i < {nx}; ++i) printf(" %.9g", (double)x_out[k][i]);
    printf("\\n");
  }}
  return 0;
}}
"""


def board_run(files: dict[str, str], name: str, real: Real, samples: list[Sample], nx: int) -> BoardRun:
    """Run the export's `files` over `samples` on QEMU's MPS2 AN386, every update costed.

    Raises
    ------
    ToolchainError
        A missing tool, a failed build, a run that faults or prints fewer estimates than samples.
    """
    def table(key: str, rows: list[FloatArray]) -> str:
        width = max(max((np.size(r) for r in rows), default=1), 1)
        body = ",\n  ".join("{" + _values(np.resize(np.asarray(r, dtype=float), width), real) + "}" for r in rows)
        return f"static const {real} in_{key}[{len(rows)}][{width}] = {{\n  {body}}};"

    tables = [table("y", [s.y for s in samples]), table("v", [s.valid for s in samples]),
              table("u", [s.u for s in samples]), table("p", [s.p if s.p.size else np.zeros(1) for s in samples]),
              f"static const {real} in_t[{len(samples)}] = {{{_values([s.t for s in samples], real)}}};"]
    main = _MAIN.format(name=name, R=real, markers=cycles.marker_functions("update", "other"),
                        tables="\n".join(tables), K=len(samples), nx=nx,
                        p_arg="in_p[k]" if samples and samples[0].p.size else "0")
    with tempfile.TemporaryDirectory(prefix="shooting_mhe_m4_") as tmp:
        d = Path(tmp)
        for fname, text in files.items():
            (d / fname).write_text(text)
        (d / "main.c").write_text(main)
        sources = [d / f for f in sorted(files) if f.endswith(".c")] + [d / "main.c"]
        run = cycles.trace_on_cortex_m4(sources, include_dirs=(d,), workdir=d)
    rows = [line.split() for line in run.stdout.splitlines() if line.startswith("x ")]
    if run.exit_code != 0 or len(rows) != len(samples):
        raise ToolchainError(f"the MHE's updates on the emulated Cortex-M4 exited with {run.exit_code} after "
                             f"{len(rows)} of {len(samples)} estimates: {first_error_line(run.stdout + run.stderr)}")
    calls = [seg.cycles for seg in run.segments if seg.marker == "update"]
    return BoardRun(np.array([[float(v) for v in r[3:]] for r in rows]), np.array([int(r[2]) for r in rows]),
                    np.array(calls, dtype=float), run.model.as_dict())
