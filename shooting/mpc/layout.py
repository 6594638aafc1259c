"""Where every number sits in a multiple-shooting NLP: decision, constraint and parameter vectors.

One object, shared by the OCP, the real-time iteration and the controller
export, so that none of them re-slices a vector by hand::

    w = [x_0, u_0, x_1, u_1, ..., x_{N-1}, u_{N-1}, x_N,        (interleaved: banded KKT matrix)
         s_1, ..., s_N,                                          slacks of soft state bounds (ns each)
         sh_0, ..., sh_{N-1}]                                    slacks of soft path constraints (nsh each)
    g = [x_0 - x0,                                               initial state   (nx)
         x_1 - F(x_0, u_0), h(x_0, u_0) - [sh_0; 0],             stage 0         (nx + nh)
         ...,
         x_N - F(x_{N-1}, u_{N-1}), h(x_{N-1}, u_{N-1}),         stage N-1
         c(x_N),                                                 terminal        (nc)
         x_1[j] + s_1, x_1[j] - s_1, ..., x_N[j] - s_N]          soft bounds     (2 ns per stage 1..N)
    P = [x0, x_ref_0, ..., x_ref_N, u_ref_0, ..., u_ref_{N-1},
         p_0, ..., p_{N-1}, t0, u_prev]                          (p_k: model parameters of interval k;
                                                                  u_prev: u_{-1} of the rate penalty)

`pack_*` builds a vector from arrays shaped per stage, `unpack_*` splits one
(numpy arrays or CasADi expressions alike), and `shift_*` moves a solution
(or the per-stage data) one stage ahead for the next MPC sample (the last
stage is repeated).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

import casadi as ca
import numpy as np
import numpy.typing as npt

__all__ = ["ShootingLayout"]

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
_V = TypeVar("_V")


def _shift_rows(values: FloatArray, idx: IntArray) -> None:
    """In place: rows ``idx[k]`` take the values of rows ``idx[k+1]``; the last row keeps its own."""
    if idx.size:
        rows = values[idx].copy()
        values[idx] = np.vstack([rows[1:], rows[-1:]])


@dataclass(frozen=True)
class ShootingLayout:
    """The vector layout of a multiple-shooting OCP with `horizon` intervals.

    Parameters
    ----------
    horizon : int
        N, the number of shooting intervals.
    nx, nu, np : int
        States, inputs, model parameters.
    nh : int, default 0
        Path constraints per stage (rows h(x_k, u_k, p) <= 0, k < N).
    nc : int, default 0
        Terminal equality constraints c(x_N, p) = 0.
    ns : int, default 0
        Softened state bounds: one slack per bounded state and stage 1..N
        (``x_min - s <= x <= x_max + s``, ``s >= 0``).
    nsh : int, default 0
        Softened path constraints: one slack per row for the first `nsh` of
        the nh rows of every stage k < N (``h_i - sh_i <= 0``, ``sh >= 0``).

    Attributes
    ----------
    x_idx : ndarray of int, shape (N+1, nx)
        Positions of the states in `w`.
    u_idx : ndarray of int, shape (N, nu)
        Positions of the inputs in `w`.
    n_w : int
    x0_idx : ndarray of int, shape (nx,)
        Rows of ``x_0 - x0`` in `g`.
    dyn_idx : ndarray of int, shape (N, nx)
        Rows of ``x_{k+1} - F(x_k, u_k)`` in `g`.
    path_idx : ndarray of int, shape (N, nh)
    term_idx : ndarray of int, shape (nc,)
    s_idx : ndarray of int, shape (N, ns)
        Positions of the slacks of stages 1..N in `w`.
    sh_idx : ndarray of int, shape (N, nsh)
        Positions of the path constraints' slacks of stages 0..N-1 in `w`.
    soft_lo_idx, soft_hi_idx : ndarray of int, shape (N, ns)
        Rows ``x_k[j] + s_k >= x_min[j]`` and ``x_k[j] - s_k <= x_max[j]`` in `g`.
    n_g : int
    n_p : int
        Length of the parameter vector P: ``nx + (N+1) nx + N nu + N np + 1 + nu``.
    """

    horizon: int
    nx: int
    nu: int
    np: int
    nh: int = 0
    nc: int = 0
    ns: int = 0
    nsh: int = 0
    # Derived from the sizes above (which alone decide equality).
    x_idx: IntArray = field(init=False, repr=False, compare=False)
    u_idx: IntArray = field(init=False, repr=False, compare=False)
    x0_idx: IntArray = field(init=False, repr=False, compare=False)
    dyn_idx: IntArray = field(init=False, repr=False, compare=False)
    path_idx: IntArray = field(init=False, repr=False, compare=False)
    term_idx: IntArray = field(init=False, repr=False, compare=False)
    s_idx: IntArray = field(init=False, repr=False, compare=False)
    sh_idx: IntArray = field(init=False, repr=False, compare=False)
    soft_lo_idx: IntArray = field(init=False, repr=False, compare=False)
    soft_hi_idx: IntArray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        N, nx, nu, nh = self.horizon, self.nx, self.nu, self.nh
        stride = nx + nu
        put = object.__setattr__
        put(self, "x_idx", np.arange(N + 1)[:, None] * stride + np.arange(nx)[None, :])
        put(self, "u_idx", np.arange(N)[:, None] * stride + nx + np.arange(nu)[None, :])
        put(self, "x0_idx", np.arange(nx))
        rows = nx + nh  # rows per stage in g
        put(self, "dyn_idx", nx + np.arange(N)[:, None] * rows + np.arange(nx)[None, :])
        put(self, "path_idx", nx + np.arange(N)[:, None] * rows + nx + np.arange(nh)[None, :])
        put(self, "term_idx", nx + N * rows + np.arange(self.nc))
        ns = self.ns
        put(self, "s_idx", (N + 1) * nx + N * nu + np.arange(N)[:, None] * ns + np.arange(ns)[None, :])
        put(self, "sh_idx", (N + 1) * nx + N * (nu + ns) + np.arange(N)[:, None] * self.nsh
            + np.arange(self.nsh)[None, :])
        soft = nx + N * rows + self.nc + np.arange(N)[:, None] * 2 * ns + np.arange(ns)[None, :]
        put(self, "soft_lo_idx", soft)
        put(self, "soft_hi_idx", soft + ns)

    # ------------------------------------------------------------------ sizes
    @property
    def n_w(self) -> int:
        """Length of the decision vector w: ``(N+1) nx + N (nu + ns + nsh)``."""
        return (self.horizon + 1) * self.nx + self.horizon * (self.nu + self.ns + self.nsh)

    @property
    def n_g(self) -> int:
        """Length of the constraint vector g: ``nx + N (nx + nh) + nc + 2 N ns``."""
        return self.nx + self.horizon * (self.nx + self.nh + 2 * self.ns) + self.nc

    @property
    def n_p(self) -> int:
        """Length of the parameter vector P: ``nx + (N+1) nx + N nu + N np + 1 + nu``."""
        return self.nx + (self.horizon + 1) * self.nx + self.horizon * (self.nu + self.np) + 1 + self.nu

    # ------------------------------------------------------------ decision w
    def pack_w(self, x: FloatArray, u: FloatArray, s: FloatArray | None = None,
               sh: FloatArray | None = None) -> FloatArray:
        """The decision vector of states `x` (N+1, nx), inputs `u` (N, nu), slacks `s` (N, ns) and path slacks
        `sh` (N, nsh) (slacks default 0)."""
        w = np.zeros(self.n_w)
        w[self.x_idx] = x
        w[self.u_idx] = u
        if s is not None:
            w[self.s_idx] = s
        if sh is not None:
            w[self.sh_idx] = sh
        return w

    def unpack_w(self, w: FloatArray) -> tuple[FloatArray, FloatArray]:
        """States (N+1, nx) and inputs (N, nu) of the decision vector `w`."""
        w = np.asarray(w, dtype=float)
        return w[self.x_idx], w[self.u_idx]

    def slacks(self, w: FloatArray) -> FloatArray:
        """Slacks of the soft state bounds in `w`, shape (N, ns): row k-1 belongs to x_k."""
        return np.asarray(w, dtype=float)[self.s_idx]

    def states(self, w: _V) -> list[_V]:
        """``[x_0, ..., x_N]`` as slices of `w` (numpy or CasADi)."""
        return [w[self.x_idx[k]] for k in range(self.horizon + 1)]  # type: ignore[index]

    def inputs(self, w: _V) -> list[_V]:
        """``[u_0, ..., u_{N-1}]`` as slices of `w` (numpy or CasADi)."""
        return [w[self.u_idx[k]] for k in range(self.horizon)]  # type: ignore[index]

    # ---------------------------------------------------------- parameters P
    def pack_parameters(self, x0: FloatArray, x_ref: FloatArray, u_ref: FloatArray, p: FloatArray,
                        t0: float, u_prev: FloatArray | None = None) -> FloatArray:
        """The parameter vector P.

        Parameters
        ----------
        x0 : ndarray, shape (nx,)
        x_ref : ndarray, shape (N+1, nx)
        u_ref : ndarray, shape (N, nu)
        p : ndarray, shape (N, np), or (np,) for every interval
            Row k: the model parameters of interval k.
        t0 : float
        u_prev : ndarray, shape (nu,), optional
            The input before u_0 (for the rate penalty); default zeros.

        Returns
        -------
        ndarray, shape (n_p,)
        """
        arr = np.asarray(p, dtype=float)
        rows = np.broadcast_to(arr if arr.ndim == 2 else arr.reshape(1, self.np), (self.horizon, self.np))
        prev = np.zeros(self.nu) if u_prev is None else np.ravel(u_prev)
        return np.concatenate([np.ravel(x0), np.ravel(x_ref), np.ravel(u_ref), np.ravel(rows), [float(t0)],
                               prev])

    def unpack_parameters(self, P: Any) -> dict[str, Any]:
        """Split P (numpy or a CasADi column) into its parts.

        Returns
        -------
        dict
            ``x0`` (nx), ``x_ref`` (nx, N+1: one column per stage), ``u_ref``
            (nu, N), ``p`` (np, N: one column per interval), ``t0`` (scalar),
            ``u_prev`` (nu). For numpy input ``x_ref``, ``u_ref`` and ``p``
            are returned row per stage, (N+1, nx), (N, nu) and (N, np).
        """
        N, nx, nu, n_p = self.horizon, self.nx, self.nu, self.np
        a, b = nx, nx + nx * (N + 1)
        c = b + nu * N
        d = c + n_p * N
        if isinstance(P, np.ndarray):
            return {"x0": P[:a], "x_ref": P[a:b].reshape(N + 1, nx), "u_ref": P[b:c].reshape(N, nu),
                    "p": P[c:d].reshape(N, n_p), "t0": float(P[d]), "u_prev": P[d + 1:d + 1 + nu]}
        return {"x0": P[:a], "x_ref": ca.reshape(P[a:b], nx, N + 1), "u_ref": ca.reshape(P[b:c], nu, N),
                "p": ca.reshape(P[c:d], n_p, N), "t0": P[d], "u_prev": P[d + 1:d + 1 + nu]}

    # ----------------------------------------------------------------- shifts
    def shift_parameters(self, P: FloatArray, dt: float, u_prev: FloatArray | None = None) -> FloatArray:
        """The parameter vector of the next sample: per-stage rows one stage ahead, ``t0 + dt``.

        References and model parameters move one stage (the last one
        repeated: the guess of the next sample's data when it is sampled on
        the same time grid); `u_prev`, when given, replaces u_{-1} (the input
        just applied). x0 is kept.

        Parameters
        ----------
        P : ndarray, shape (n_p,)
        dt : float
        u_prev : ndarray, shape (nu,), optional

        Returns
        -------
        ndarray, shape (n_p,)
        """
        parts = self.unpack_parameters(np.asarray(P, dtype=float))
        rows = {key: np.vstack([parts[key][1:], parts[key][-1:]]) for key in ("x_ref", "u_ref", "p")}
        return self.pack_parameters(parts["x0"], rows["x_ref"], rows["u_ref"], rows["p"], parts["t0"] + dt,
                                    parts["u_prev"] if u_prev is None else u_prev)

    def shift_w(self, w: FloatArray) -> FloatArray:
        """A decision vector (or its bound multipliers) one stage ahead; the last stage repeated."""
        out = np.array(w, dtype=float)
        _shift_rows(out, self.x_idx)
        _shift_rows(out, self.u_idx)
        _shift_rows(out, self.s_idx)
        _shift_rows(out, self.sh_idx)
        return out

    def shift_g(self, lam_g: FloatArray) -> FloatArray:
        """Constraint multipliers one stage ahead: dynamics, path and soft rows move; x0 and terminal rows stay."""
        out = np.array(lam_g, dtype=float)
        _shift_rows(out, self.dyn_idx)
        _shift_rows(out, self.path_idx)
        _shift_rows(out, self.soft_lo_idx)
        _shift_rows(out, self.soft_hi_idx)
        return out
