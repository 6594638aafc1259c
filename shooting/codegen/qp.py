"""The embedded QP solver: a dual active-set method for dense QPs with soft rows, as C text.

The controller export condenses the real-time iteration's QP into a dense
one in the inputs and solves it with this solver (`templates/qp.c.in`):

    minimise    1/2 u'Hu + h'u + sum_r (l1 s_r + l2 s_r^2)
    subject to  lb <= u <= ub,   lo_r - s_r <= c_r'u <= hi_r + s_r,   s >= 0

(s_r = 0 for hard rows). It is the dual active-set method of Arnstrom,
Bemporad and Axehill (2022) in least-distance form, with the soft rows'
exact L1 + L2 penalty handled in the dual (see the template's header), so
a soft state bound costs no variable. Every array is sized at generation
time; nothing calls malloc; ``float`` builds use only single precision.

`qp_source` renders it; `QP_STATUS` names its return codes; `HostQP` compiles
it for this machine (ctypes) for the tests and benchmarks.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.codegen.emitter import literal
from shooting.codegen.host_library import build_shared_library, c_array, real_ctype
from shooting.codegen.templates import render
from shooting.options import REALS, Real

__all__ = ["QP_STATUS", "SOFT_MODE", "TOLERANCES", "HostQP", "QPResult", "QPSource", "qp_source"]

#: Return codes of the solver, as in the C.
QP_STATUS = {0: "optimal", 1: "iteration limit", 2: "infeasible", 3: "Hessian not positive definite",
             4: "non-finite data"}

#: Flag of a working-set entry whose soft row is in soft mode (its slack positive).
SOFT_MODE = 0x40000000

#: Tolerances per real type: Cholesky pivot (relative to the largest diagonal
#: of H), linear dependence of a new row (relative pivot of the LDL'),
#: primal feasibility (relative to 1 + |bound|) and dual feasibility
#: (relative to 1 + |multiplier|). Each is a small multiple of what the
#: arithmetic loses on well-scaled data (unit roundoff 1.1e-16 / 6e-8).
TOLERANCES: dict[Real, dict[str, float]] = {
    "double": {"tol_pd": 1e-14, "tol_piv": 1e-10, "tol_primal": 1e-9, "tol_dual": 1e-12},
    "float": {"tol_pd": 1e-6, "tol_piv": 1e-5, "tol_primal": 2e-5, "tol_dual": 1e-6},
}


@dataclass(frozen=True)
class QPSource:
    """The solver's C in two parts.

    Attributes
    ----------
    work : str
        Status macros and the work struct ``PREFIX_work`` (for a header).
    functions : str
        The static functions ``PREFIX_factor``, ``PREFIX_solve`` and their helpers.
    """

    work: str
    functions: str


def qp_source(prefix: str, real: Real, nv: int, nr: int, na: int | None = None) -> QPSource:
    """The solver's C for a prefix, a real type and the largest sizes.

    Parameters
    ----------
    prefix : str
        C identifier prefix of every symbol (``PREFIX_solve`` ...).
    real : {"double", "float"}
    nv, nr : int
        Largest number of variables and general rows (at least 1 each).
    na : int, optional
        Largest working set (default ``nv + nr``, which is never exceeded).

    Returns
    -------
    QPSource
    """
    prefix = _validate.identifier(prefix, "prefix")
    real = _validate.choice(real, REALS, "real")
    nv = _validate.integer(nv, "nv", minimum=1)
    nr = max(_validate.integer(nr, "nr", minimum=0), 1)
    # The working set never holds more than nv + nr rows; at least nv (its scratch vector serves a column).
    na = nv + nr if na is None else max(_validate.integer(na, "na", minimum=1), nv)
    tol = {k: literal(v, real) for k, v in TOLERANCES[real].items()}
    names = dict(p=prefix, P=prefix.upper(), R=real)
    return QPSource(render("qp_work.h.in", **names, NV=nv, NR=nr, NA=na),
                    render("qp.c.in", **names, f="f" if real == "float" else "", NV=nv, NR=nr, NA=na, **tol))


@dataclass(frozen=True)
class QPResult:
    """One solve of `HostQP`.

    Attributes
    ----------
    u : ndarray, shape (nv,)
    lam_bounds : ndarray, shape (nv,)
        Multipliers of the variable bounds (positive: upper bound active, negative: lower).
    lam_rows : ndarray, shape (nr,)
        Multipliers of the rows (same sign convention; a soft row's is at most
        `l1` in size while its slack is zero, and ``l1 + 2 l2 s`` beyond).
    status : int
        0 optimal, else a key of `QP_STATUS`.
    iterations : int
    working_set : list of int
        The rows of the final working set (``2 i`` / ``2 i + 1``: upper / lower bound of
        u_i; ``2 (nv + r)`` / ``2 (nv + r) + 1``: upper / lower side of row r), plus
        `SOFT_MODE` for a soft row with a positive slack: pass as ``warm`` to the next solve.
    """

    u: npt.NDArray[np.float64]
    lam_bounds: npt.NDArray[np.float64]
    lam_rows: npt.NDArray[np.float64]
    status: int
    iterations: int
    working_set: list[int]

    @property
    def message(self) -> str:
        """The status in words."""
        return QP_STATUS.get(self.status, f"status {self.status}")


class HostQP:
    """The C solver compiled for this machine (ctypes), for tests and benchmarks.

    Parameters
    ----------
    directory : path
        Where the C source and the shared library are written.
    real : {"double", "float"}
    nv, nr : int
        Largest problem sizes the library accepts.
    """

    def __init__(self, directory: str | os.PathLike[str], real: Real = "double", nv: int = 64,
                 nr: int = 128) -> None:
        self.real = _validate.choice(real, REALS, "real")
        self.nv_max, self.nr_max = nv, max(nr, 1)
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        source = folder / f"qp_host_{real}.c"
        code = qp_source("shqp", real, nv, nr)
        source.write_text(render("qp_host.c.in", qp=code.work + "\n" + code.functions, p="shqp", P="SHQP", R=real,
                                 NV=nv, NR=self.nr_max))
        lib = build_shared_library([source], folder / f"qp_host_{real}.so",
                                   extra_flags=("-Wdouble-promotion",) if real == "float" else ())
        self._fn = lib.qp_dense
        self._fn.restype = ctypes.c_int

    def solve(self, H: npt.ArrayLike, h: npt.ArrayLike, lb: npt.ArrayLike, ub: npt.ArrayLike,
              C: npt.ArrayLike | None = None, lo: npt.ArrayLike | None = None, hi: npt.ArrayLike | None = None,
              soft: npt.ArrayLike | None = None, l1: float = 0.0, l2: float = 1.0, *, max_iter: int = 1000,
              warm: list[int] | None = None) -> QPResult:
        """Solve one QP (shapes as in the module docstring; C is (nr, nv)).

        Returns
        -------
        QPResult
        """
        real = self.real
        Hm = np.asarray(H, dtype=float)
        nv = Hm.shape[0]
        Cm = np.zeros((0, nv)) if C is None else np.asarray(C, dtype=float).reshape(-1, nv)
        nr = Cm.shape[0]
        if nv > self.nv_max or nr > self.nr_max:
            raise ValueError(f"QP of {nv} variables and {nr} rows exceeds this library's {self.nv_max} and "
                             f"{self.nr_max}")
        soft_b = np.zeros(max(nr, 1), dtype=np.uint8)
        if soft is not None and nr:
            soft_b[:nr] = np.asarray(soft, dtype=bool)
        warm_a = np.asarray(warm or [0], dtype=np.int32)
        u, lam = c_array(np.zeros(nv), real), c_array(np.zeros(nv + nr), real)
        W = np.zeros(nv + nr + 1, dtype=np.int32)
        nW, iters = ctypes.c_int(0), ctypes.c_int(0)
        args = [c_array(Hm.T, real), c_array(h, real, nv), c_array(lb, real, nv), c_array(ub, real, nv),
                c_array(Cm, real), c_array(np.zeros(0) if lo is None else lo, real),
                c_array(np.zeros(0) if hi is None else hi, real)]
        status = self._fn(ctypes.c_int(nv), ctypes.c_int(nr), *(a.ctypes.data_as(ctypes.c_void_p) for a in args),
                          soft_b.ctypes.data_as(ctypes.c_void_p), real_ctype(real)(l1), real_ctype(real)(l2),
                          ctypes.c_int(max_iter), warm_a.ctypes.data_as(ctypes.c_void_p),
                          ctypes.c_int(0 if warm is None else len(warm)), u.ctypes.data_as(ctypes.c_void_p),
                          lam.ctypes.data_as(ctypes.c_void_p), W.ctypes.data_as(ctypes.c_void_p),
                          ctypes.byref(nW), ctypes.byref(iters))
        lam64 = lam.astype(float)
        return QPResult(u.astype(float)[:nv], lam64[:nv], lam64[nv:nv + nr], int(status), int(iters.value),
                        W[:nW.value].tolist())
