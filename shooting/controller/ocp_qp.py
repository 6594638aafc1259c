"""The stage-wise QP of an optimal control problem and its interior-point Riccati solver, as C text and on the host.

The controller's QP is never condensed: it keeps its stages,

    minimise   sum_{k<N} 1/2 [x_k; u_k]' [Q_k S_k'; S_k R_k] [x_k; u_k] + q_k'x_k + r_k'u_k
               + 1/2 x_N'Q_N x_N + q_N'x_N + sum over soft sides of l1 s + l2 s^2
    subject to x_0 = x0,  x_{k+1} = A_k x_k + B_k u_k + b_k,
               lbu <= u_k <= ubu,  lbx - s <= x_k[idxbx] <= ubx + s (k >= 1),
               lg - s <= C_k x_k + D_k u_k <= ug + s,  lgN - s <= CN x_N <= ugN + s,

and `templates/ocp_qp.c.in` solves it by Mehrotra's interior-point method
with a Riccati recursion per Newton system: time and memory linear in N and
no powers of A (the dense condensing of the first controller squared the
state transition over the horizon and lost positive definiteness in single
precision on unstable plants from N = 30 on).

`ocp_qp_source` renders the C; `StageQP` holds one problem as numpy arrays;
`HostOCPQP` compiles the same C for this machine (ctypes): the Python
`RTIController`'s exact QP solver, and the reference of the tests.
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
from shooting.codegen.templates import render_from
from shooting.options import REALS, Real
from shooting.qp.stage_qp import OCP_QP_TOLERANCES, OCPQPSizes, StageQP, StageQPResult, blocks

__all__ = ["HostOCPQP", "OCPQPSource", "ocp_qp_source"]

FloatArray = npt.NDArray[np.float64]

#: The package of the solver's C templates (beside its numpy twin).
TEMPLATES = "shooting.qp.templates"

#: Fraction of the distance to the boundary a step may cover, and the
#: smallest slack and multiplier a warm start keeps.
STEP_FRACTION = {"double": 0.995, "float": 0.99}

#: A Riccati pivot lost to the barrier terms once complementarity is below
#: this (relative) ends the solve as converged: the precision is exhausted.
MU_FLOOR = {"double": 1e-12, "float": 1e-7}
WARM_PUSH = {"double": 1e-4, "float": 1e-3}

#: Multipliers this many times their size at the start, with the equalities
#: still violated: the hard constraints cannot be met (reported, not iterated on).
DIVERGE = {"double": 1e12, "float": 1e8}


#: The largest NX + NU whose kernels are unrolled completely (see the template's hints). The cart-pole's
#: (5): a Riccati stage 2x fewer instructions on a Cortex-M4 for 1.5x the code; the quadrotor's (16) would
#: take 2.4x the flash and 3.5x the stack.
UNROLL_MAX = 8


@dataclass(frozen=True)
class OCPQPSource:
    """The solver's C in two parts: ``work`` (status macros, data and work structs) and ``functions``."""

    work: str
    functions: str


def ocp_qp_source(prefix: str, real: Real, sizes: OCPQPSizes) -> OCPQPSource:
    """The solver's C for a prefix, a real type and the problem's sizes.

    Parameters
    ----------
    prefix : str
        C identifier prefix of every symbol.
    real : {"double", "float"}
    sizes : OCPQPSizes

    Returns
    -------
    OCPQPSource
    """
    prefix = _validate.identifier(prefix, "prefix")
    real = _validate.choice(real, REALS, "real")
    names = dict(p=prefix, P=prefix.upper(), R=real, N=sizes.N, NX=sizes.nx, NU=sizes.nu, NBX=sizes.nbx,
                 NG=sizes.ng, NGN=sizes.ngN)
    nxp, nup = sizes.nx * (sizes.nx + 1) // 2, sizes.nu * (sizes.nu + 1) // 2  # packed triangles
    work = render_from(TEMPLATES, "ocp_qp_work.h.in", **names, NSOFT=max(sizes.nsoft, 1), NXP=nxp, NUP=nup)
    functions = render_from(TEMPLATES, "ocp_qp.c.in", **names, f="f" if real == "float" else "",
                            NU_1=max(sizes.nu, 1), NXP=nxp, NUP=nup, NSOFT=max(sizes.nsoft, 1),
                       tol_pd=literal(1e-14 if real == "double" else 1e-6, real),
                       tau=literal(STEP_FRACTION[real], real), warm_push=literal(WARM_PUSH[real], real),
                       mu_floor=literal(MU_FLOOR[real], real), diverge=literal(DIVERGE[real], real),
                       unroll=int(sizes.nx + sizes.nu <= UNROLL_MAX), unroll_max=UNROLL_MAX)
    return OCPQPSource(work, functions)


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
        source.write_text(render_from(TEMPLATES, "ocp_qp_host.c.in", work=code.work, functions=code.functions, p="ocqp",
                                 P="OCQP", R=real, N=sizes.N, NX=sizes.nx, NU=sizes.nu, NSOFT=max(sizes.nsoft, 1)))
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
        N, nx, nu, nbx, ng, ngN = z.N, z.nx, z.nu, z.nbx, z.ng, z.ngN
        real = self.real

        def cm(blocks: FloatArray) -> FloatArray:  # column-major blocks
            return np.ascontiguousarray(np.swapaxes(blocks, -1, -2))

        inf = np.inf
        arrays = [
            cm(blocks(qp.A, N, (nx, nx), "A")), cm(blocks(qp.B, N, (nx, nu), "B")), blocks(qp.b, N, (nx,), "b"),
            cm(blocks(qp.Q, N, (nx, nx), "Q")), cm(blocks(qp.S, N, (nu, nx), "S")),
            cm(blocks(qp.R, N, (nu, nu), "R")), cm(np.asarray(qp.Q_N, dtype=float).reshape(nx, nx)),
            blocks(qp.q, N + 1, (nx,), "q"), blocks(qp.r, N, (nu,), "r"),
            blocks(-inf if qp.lbu is None else qp.lbu, N, (nu,), "lbu"),
            blocks(inf if qp.ubu is None else qp.ubu, N, (nu,), "ubu"),
            blocks(-inf if qp.lbx is None else qp.lbx, N, (nbx,), "lbx"),
            blocks(inf if qp.ubx is None else qp.ubx, N, (nbx,), "ubx"),
            cm(blocks(qp.C, N, (ng, nx), "C")), cm(blocks(qp.D, N, (ng, nu), "D")),
            blocks(-inf if qp.lg is None else qp.lg, N, (ng,), "lg"),
            blocks(inf if qp.ug is None else qp.ug, N, (ng,), "ug"),
            cm(np.zeros((ngN, nx)) if qp.CN is None else np.asarray(qp.CN, dtype=float).reshape(ngN, nx)),
            np.full(ngN, -inf) if qp.lgN is None else np.asarray(qp.lgN, dtype=float),
            np.full(ngN, inf) if qp.ugN is None else np.asarray(qp.ugN, dtype=float),
            np.asarray(qp.x0, dtype=float).reshape(nx),
        ]
        c_arrays = [c_array(a, real) for a in arrays]  # an infinite bound: no side
        idx = np.asarray(qp.idxbx or [0], dtype=np.int32)
        flags = [np.asarray([bool(v) for v in f] or [False], dtype=np.uint8)
                 for f in (qp.soft_bx, qp.soft_g, qp.soft_gN)]
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
                          real_ctype(real)(qp.l1), real_ctype(real)(qp.l2), p(strides), ctypes.c_int(max_iter),
                          ctypes.c_int(warm is not None), p(tol), p(x), p(u), p(pi), p(t), p(lam), p(s), p(lam_s),
                          ctypes.byref(it), p(res))
        f = float
        return StageQPResult(x.astype(f).reshape(N + 1, nx), u.astype(f).reshape(N, nu),
                             pi.astype(f).reshape(N, nx), t.astype(f), lam.astype(f), s.astype(f), lam_s.astype(f),
                             int(status), int(it.value), (f(res[0]), f(res[1]), f(res[2])))
