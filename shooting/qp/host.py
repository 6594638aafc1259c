"""The stage-wise QP solver's C compiled for this machine and called through ctypes.

Two wrappers around the same rendered C (`shooting.qp.render.ocp_qp_source`):

- `HostOCPQP` compiles ``templates/ocp_qp_host.c.in`` into a folder and
  solves any `StageQP` of its sizes, copying it in and the result out: the
  tests' and benchmarks' C reference.
- `CompiledStageQP` wraps a library built from ``templates/ocp_qp_lib.c.in``
  (the RTI's cached library, `shooting.mpc.rti_library`, links it with the
  QP's data functions). Its data are numpy buffers bound to the C once (`qp`
  is a `StageQP` of views over them: whoever fills the views fills the C's
  data), its memory is owned by the object, and a solve passes only scalars;
  the warm start stays in the C's work memory between solves. It solves as
  `shooting.qp.solve_stage_qp` does (same arguments, same algorithm: the
  numpy function is its twin), in double.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting._c_text import render_from
from shooting._tools import build_shared_library, c_array, real_ctype
from shooting.options import REALS, Real
from shooting.qp.render import TEMPLATES, ocp_qp_source
from shooting.qp.stage_qp import OCP_QP_TOLERANCES, OCPQPSizes, StageQP, StageQPResult, blocks, shifted_result

__all__ = ["LIBRARY_PREFIX", "CompiledStageQP", "HostOCPQP", "library_source"]

FloatArray = npt.NDArray[np.float64]

#: The prefix of the QP's symbols in a library from `library_source`.
LIBRARY_PREFIX = "rtiqp"

_DEFAULT_TOLERANCES = OCP_QP_TOLERANCES["double"]

#: StageQP's array fields in the order ``@{p}_bind`` takes them (the C data struct's).
_FIELDS = ("A", "B", "b", "Q", "S", "R", "Q_N", "q", "r", "lbu", "ubu", "lbx", "ubx", "C", "D", "lg", "ug", "CN",
           "lgN", "ugN", "x0")


class HostOCPQP:
    """The C solver compiled for this machine (ctypes) for one set of sizes.

    Parameters
    ----------
    directory : path
        Where the source and the shared library are written.
    sizes : OCPQPSizes
    real : {"double", "float"}
    """

    def __init__(self, directory: str | os.PathLike[str], sizes: OCPQPSizes, real: Real = "double") -> None:
        self.real = _validate.choice(real, REALS, "real")
        self.sizes = sizes
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"ocp_qp_{real}_{sizes.N}_{sizes.nx}_{sizes.nu}_{sizes.nbx}_{sizes.ng}_{sizes.ngN}"
        code = ocp_qp_source("ocqp", real, sizes)
        source = folder / f"{stem}.c"
        source.write_text(render_from(TEMPLATES, "ocp_qp_host.c.in", work=code.work, functions=code.functions,
                                      p="ocqp", P="OCQP", R=real, N=sizes.N, NX=sizes.nx, NU=sizes.nu,
                                      NSOFT=max(sizes.nsoft, 1)))
        lib = build_shared_library([source], folder / f"{stem}.so",
                                   extra_flags=("-Wdouble-promotion",) if real == "float" else ())
        self._fn = lib.ocp_qp_solve
        self._fn.restype = ctypes.c_int

    def solve(self, qp: StageQP, *, x_guess: npt.ArrayLike | None = None, u_guess: npt.ArrayLike | None = None,
              warm: StageQPResult | None = None, max_iter: int = 100,
              tolerances: dict[str, float] | None = None) -> StageQPResult:
        """Solve `qp` from a primal guess (default: x0 everywhere, inputs zero) or a warm start.

        Returns
        -------
        StageQPResult
        """
        z = self.sizes
        if qp.sizes != z:
            raise ValueError(f"QP sizes {qp.sizes} differ from this solver's {z}")
        N, nx, nu = z.N, z.nx, z.nu
        real = self.real
        c_arrays = [c_array(a, real) for a in _column_major(qp, z)]  # an infinite bound: no side
        idx, flags = _index_and_flags(qp)
        strides = np.array([1, 1, 1, 1], dtype=np.int32)
        tol = c_array(list((tolerances or OCP_QP_TOLERANCES[real]).values()), real)
        x = c_array(np.tile(qp.x0, (N + 1, 1)) if x_guess is None else np.asarray(x_guess, dtype=float), real)
        u = c_array(np.zeros((N, nu)) if u_guess is None else np.asarray(u_guess, dtype=float), real)
        nsoft = max(z.nsoft, 1)
        pi = c_array(np.zeros((N, nx)) if warm is None else warm.pi, real)
        t = c_array(np.zeros(z.nsides) if warm is None else warm.t, real)
        lam = c_array(np.zeros(z.nsides) if warm is None else warm.lam, real)
        s = c_array(np.zeros(nsoft) if warm is None else warm.s, real)
        lam_s = c_array(np.zeros(nsoft) if warm is None else warm.lam_s, real)
        if warm is not None:
            x = c_array(warm.x, real)
            u = c_array(warm.u, real)
        it = ctypes.c_int(0)
        res = c_array(np.zeros(3), real)
        ptr = ctypes.c_void_p

        def p(a: np.ndarray) -> ctypes.c_void_p:
            return a.ctypes.data_as(ptr)

        status = self._fn(*(p(a) for a in c_arrays), p(idx), *(p(f) for f in flags),
                          real_ctype(real)(qp.l1), real_ctype(real)(qp.l2), real_ctype(real)(qp.elastic), p(strides),
                          ctypes.c_int(max_iter),
                          ctypes.c_int(warm is not None), p(tol), p(x), p(u), p(pi), p(t), p(lam), p(s), p(lam_s),
                          ctypes.byref(it), p(res))
        f = float
        return StageQPResult(x.astype(f).reshape(N + 1, nx), u.astype(f).reshape(N, nu),
                             pi.astype(f).reshape(N, nx), t.astype(f), lam.astype(f), s.astype(f), lam_s.astype(f),
                             int(status), int(it.value), (f(res[0]), f(res[1]), f(res[2])))


def _shapes(z: OCPQPSizes) -> dict[str, tuple[int, ...]]:
    """Each of `_FIELDS`' shape as a `StageQP` holds it: (stages, rows, cols) blocks, or (stages, n) vectors."""
    N, nx, nu, nbx, ng, ngN = z.N, z.nx, z.nu, z.nbx, z.ng, z.ngN
    return {"A": (N, nx, nx), "B": (N, nx, nu), "b": (N, nx), "Q": (N, nx, nx), "S": (N, nu, nx), "R": (N, nu, nu),
            "Q_N": (nx, nx), "q": (N + 1, nx), "r": (N, nu), "lbu": (N, nu), "ubu": (N, nu), "lbx": (N, nbx),
            "ubx": (N, nbx), "C": (N, ng, nx), "D": (N, ng, nu), "lg": (N, ng), "ug": (N, ng), "CN": (ngN, nx),
            "lgN": (ngN,), "ugN": (ngN,), "x0": (nx,)}


#: The fields that are matrices (each block stored column-major), and the default of the bounds left out.
_MATRICES = frozenset({"A", "B", "Q", "S", "R", "Q_N", "C", "D", "CN"})
_ABSENT = {"lbu": -np.inf, "ubu": np.inf, "lbx": -np.inf, "ubx": np.inf, "lg": -np.inf, "ug": np.inf,
           "lgN": -np.inf, "ugN": np.inf}


def _values(qp: StageQP, z: OCPQPSizes) -> dict[str, FloatArray]:
    """The QP's arrays by field, each in its `_shapes` shape (a shared block repeated, an absent bound infinite)."""
    out = {}
    for name, shape in _shapes(z).items():
        value = getattr(qp, name)
        if value is None:
            value = _ABSENT.get(name, 0.0)
        if name in ("Q_N", "CN", "lgN", "ugN", "x0"):
            out[name] = np.broadcast_to(np.asarray(value, dtype=float), shape).reshape(shape)
        else:
            out[name] = blocks(value, shape[0], shape[1:], name)
    return out


def _column_major(qp: StageQP, z: OCPQPSizes) -> list[FloatArray]:
    """The QP's arrays in `_FIELDS` order as the C reads them: every stage its own block, blocks column-major."""
    values = _values(qp, z)
    return [np.ascontiguousarray(np.swapaxes(values[name], -1, -2)) if name in _MATRICES else values[name]
            for name in _FIELDS]


def _index_and_flags(qp: StageQP) -> tuple[npt.NDArray[np.int32], list[npt.NDArray[np.uint8]]]:
    """idxbx (int) and the soft flags of the state, general and terminal rows (bytes: 1 soft, 2 elastic, 0 hard;
    an elastic QP's hard rows are 2), at least one entry each."""
    idx = np.asarray(qp.idxbx or [0], dtype=np.int32)
    z = qp.sizes
    hard = 2 if qp.elastic > 0 else 0
    flags = [np.asarray([1 if v else hard for v in (list(f) if f else [False] * n)] or [0], dtype=np.uint8)
             for f, n in ((qp.soft_bx, z.nbx), (qp.soft_g, z.ng), (qp.soft_gN, z.ngN))]
    return idx, flags


def library_source(sizes: OCPQPSizes) -> str:
    """The C of a `CompiledStageQP` library's QP (double, prefix `LIBRARY_PREFIX`): solver and bindings.

    Parameters
    ----------
    sizes : OCPQPSizes

    Returns
    -------
    str
    """
    code = ocp_qp_source(LIBRARY_PREFIX, "double", sizes)
    return render_from(TEMPLATES, "ocp_qp_lib.c.in", work=code.work, functions=code.functions, p=LIBRARY_PREFIX,
                       P=LIBRARY_PREFIX.upper(), R="double", N=sizes.N, NX=sizes.nx, NU=sizes.nu, NBX=sizes.nbx,
                       NG=sizes.ng, NGN=sizes.ngN, NSOFT=max(sizes.nsoft, 1))





class CompiledStageQP:
    """The solver of a loaded library (`library_source`'s C), its data bound once to numpy buffers.

    Parameters
    ----------
    library : ctypes.CDLL
        A library holding `library_source` of the QP's sizes (checked: ``@{p}_layout``).
    template : StageQP
        The sizes, and the data the buffers start with (bounds, soft flags, slack weights: what stays).

    Attributes
    ----------
    qp : StageQP
        Views over the buffers the C reads: fill them and `solve` without arguments solves that QP.
    storage : dict of str to ndarray
        The same buffers by field, flat: matrix blocks column-major one after the other, vectors stage after
        stage (where a CasADi Function's outputs can be written in place); slices of one array, ``buffer``.
    sizes : OCPQPSizes
    """

    def __init__(self, library: ctypes.CDLL, template: StageQP) -> None:
        z = self.sizes = template.sizes
        p = LIBRARY_PREFIX
        layout = np.zeros(11, dtype=np.int64)
        library[f"{p}_layout"](layout.ctypes.data_as(ctypes.c_void_p))
        want = [z.N, z.nx, z.nu, z.nbx, z.ng, z.ngN, z.nsides, max(z.nsoft, 1)]
        if list(layout[2:10]) != want:
            raise ValueError(f"the library's QP sizes {list(layout[2:10])} differ from the problem's {want}")
        self._state = np.zeros(int(layout[10]))  # (the C copies the warm-start state here: pi, t, lam, s, lams)
        a = z.N * z.nx
        self._slices = (a, a + z.nsides, a + 2 * z.nsides, a + 2 * z.nsides + max(z.nsoft, 1))
        self._pi_shape = (z.N, z.nx)
        # the C structs' memory (8-byte aligned), owned here
        self._data_mem = np.zeros(int(layout[0]) // 8 + 1, dtype=np.float64)
        self._work_mem = np.zeros(int(layout[1]) // 8 + 1, dtype=np.float64)
        # every field in one buffer, in `_FIELDS` order: the data a preparation computes (A .. r) first
        shapes = _shapes(z)
        sizes = [int(np.prod(shapes[name])) for name in _FIELDS]
        self.buffer = np.zeros(sum(sizes) + 1)  # (+1: an address even for an empty field at the end)
        self._computed = sum(sizes[:_FIELDS.index("r") + 1])
        self.storage: dict[str, FloatArray] = {}
        views: dict[str, FloatArray] = {}
        offset = 0
        for name, size in zip(_FIELDS, sizes, strict=True):
            shape = shapes[name]
            stored = (*shape[:-2], shape[-1], shape[-2]) if name in _MATRICES else shape
            self.storage[name] = self.buffer[offset:offset + size]
            block = self.storage[name].reshape(stored)
            views[name] = np.swapaxes(block, -1, -2) if name in _MATRICES else block
            offset += size
        self.x = np.zeros((z.N + 1, z.nx))
        self.u = np.zeros((z.N, z.nu))
        self._idx, self._flags = _index_and_flags(template)
        self.qp = StageQP(**views, idxbx=list(template.idxbx), soft_bx=list(template.soft_bx),
                          soft_g=list(template.soft_g), soft_gN=list(template.soft_gN), l1=float(template.l1),
                          l2=float(template.l2), elastic=float(template.elastic))
        self._tol = np.zeros(3)
        self._iter = ctypes.c_int(0)
        self._res = np.zeros(3)
        ptr = ctypes.c_void_p
        self._pd, self._pw = (ptr(m.ctypes.data) for m in (self._data_mem, self._work_mem))
        self._ptol, self._pres = ptr(self._tol.ctypes.data), ptr(self._res.ctypes.data)
        self._pstate = ptr(self._state.ctypes.data)
        self._piter = ctypes.byref(self._iter)
        self._lib = library
        self._run, self._shift, self._save, self._load = (library[f"{p}_{f}"] for f in ("run", "shift", "save",
                                                                                        "load"))
        self._residuals_at = library[f"{p}_residuals_at"]
        self._held: StageQPResult | None = None  # the result whose warm-start state the work memory holds
        self.load(template)

    def _bind(self) -> None:
        p = self.qp
        arrays = (ctypes.c_void_p * len(_FIELDS))(*(self.storage[name].ctypes.data for name in _FIELDS))
        ptr = ctypes.c_void_p
        self._lib[f"{LIBRARY_PREFIX}_bind"](self._pd, self._pw, arrays, ptr(self._idx.ctypes.data),
                                            *(ptr(f.ctypes.data) for f in self._flags), ctypes.c_double(p.l1),
                                            ctypes.c_double(p.l2), ctypes.c_double(p.elastic),
                                            ptr(self.x.ctypes.data), ptr(self.u.ctypes.data))
        self._bound_elastic = p.elastic

    def load(self, qp: StageQP) -> None:
        """Copy a `StageQP` of these sizes into the buffers (`qp`'s views), flags and slack weights included."""
        if qp.sizes != self.sizes:
            raise ValueError(f"QP sizes {qp.sizes} differ from this solver's {self.sizes}")
        for name, value in _values(qp, self.sizes).items():
            getattr(self.qp, name)[...] = value
        idx, flags = _index_and_flags(qp)
        self._idx[...] = idx
        for mine, theirs in zip(self._flags, flags, strict=True):
            mine[...] = theirs
        self.qp.idxbx, self.qp.soft_bx = list(qp.idxbx), list(qp.soft_bx)
        self.qp.soft_g, self.qp.soft_gN = list(qp.soft_g), list(qp.soft_gN)
        self.qp.l1, self.qp.l2, self.qp.elastic = float(qp.l1), float(qp.l2), float(qp.elastic)
        self._bind()

    def solve(self, qp: StageQP | None = None, *, x_guess: npt.ArrayLike | None = None,
              u_guess: npt.ArrayLike | None = None, max_iter: int = 100, tolerances: dict[str, float] | None = None,
              warm: StageQPResult | None = None, shortcut_only: bool = False) -> StageQPResult:
        """`shooting.qp.solve_stage_qp` in C: the same arguments, the same algorithm, the same result.

        Parameters
        ----------
        qp : StageQP, optional
            Copied into the buffers first (`load`); default (or `qp` itself): the QP the buffers hold.
        x_guess, u_guess, max_iter, tolerances, warm, shortcut_only
            As `shooting.qp.solve_stage_qp`. A `warm` that is this solver's last result (or its `shifted`) is
            read where the C keeps it; any other is copied in.

        Returns
        -------
        StageQPResult
            Its ``residuals`` are the interior point's last (zeros after the shortcut: not evaluated, see the C).
        """
        if qp is not None and qp is not self.qp:
            self.load(qp)
        elif self.qp.elastic != self._bound_elastic:  # (the buffers' QP made elastic, or no longer: its flags)
            self._idx[...], flags = _index_and_flags(self.qp)
            for mine, theirs in zip(self._flags, flags, strict=True):
                mine[...] = theirs
            self._bind()
        self._guess(x_guess, u_guess)
        tol = _DEFAULT_TOLERANCES if tolerances is None else {**OCP_QP_TOLERANCES["double"], **tolerances}
        self._tol[0], self._tol[1], self._tol[2] = tol["tol_stat"], tol["tol_eq"], tol["tol_mu"]
        if warm is None:
            status = self._run(self._pd, self._pw, 0, max_iter, self._ptol, self._piter, self._pres)
        else:
            if warm is not self._held:
                self._load(self._pw, c_array(np.concatenate([np.ravel(warm.pi), warm.t, warm.lam, warm.s,
                                                             warm.lam_s]), "double").ctypes.data_as(ctypes.c_void_p))
            status = self._run(self._pd, self._pw, 2 if shortcut_only else 1, max_iter, self._ptol, self._piter,
                               self._pres)
            if shortcut_only and status != 0:  # the shortcut did not apply: a cold start from the guess
                self._guess(x_guess, u_guess)
                status = self._run(self._pd, self._pw, 0, max_iter, self._ptol, self._piter, self._pres)
        return self._result(int(status), int(self._iter.value), (float(self._res[0]), float(self._res[1]),
                                                                   float(self._res[2])))

    def _guess(self, x_guess: npt.ArrayLike | None, u_guess: npt.ArrayLike | None) -> None:
        if x_guess is None:
            self.x[...] = self.qp.x0
        else:
            self.x[...] = np.asarray(x_guess, dtype=float).reshape(self.x.shape)
        if u_guess is None:
            self.u[...] = 0.0
        else:
            self.u[...] = np.asarray(u_guess, dtype=float).reshape(self.u.shape)

    def _result(self, status: int, iterations: int, residuals: tuple[float, float, float],
                primal: tuple[FloatArray, FloatArray] | None = None) -> StageQPResult:
        """The iterate (or `primal`) and the warm-start state (copies), remembered as what the work memory holds."""
        self._save(self._pw, self._pstate)
        state = self._state.copy()
        a, b, c, d = self._slices
        x, u = (self.x.copy(), self.u.copy()) if primal is None else primal
        result = StageQPResult(x, u, state[:a].reshape(self._pi_shape), state[a:b], state[b:c], state[c:d], state[d:],
                               status, iterations, residuals)
        self._held = result
        return result

    def shifted(self, result: StageQPResult) -> StageQPResult:
        """`shooting.qp.shifted_result`: this solver's last result shifted where the C keeps it, else in numpy.

        Returns
        -------
        StageQPResult
        """
        if result is not self._held:
            return shifted_result(result, self.sizes)
        self._shift(self._pw)
        return self._result(result.status, result.iterations, result.residuals, (result.x, result.u))

    def data_finite(self) -> bool:
        """Whether the dynamics' and the cost's arrays (A, B, b, Q, S, R, Q_N, q, r) are all finite: one test."""
        return bool(np.isfinite(self.buffer[:self._computed]).all())

    def residuals(self) -> tuple[float, float, float]:
        """The KKT residuals (stationarity, equalities, complementarity) at the last solve's point, in C."""
        self._residuals_at(self._pd, self._pw, self._pres)
        return float(self._res[0]), float(self._res[1]), float(self._res[2])
