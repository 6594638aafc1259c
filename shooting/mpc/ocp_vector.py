"""The decision vector of a `MultipleShootingOCP`'s NLP, in scaled variables: its bounds, packing and unpacking.

IPOPT's vector w holds x_k / x_scale and u_k / u_scale (`shooting.mpc.scaling`), the slacks in the model's units;
everything a user passes or reads is in the model's units, and these convert.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from shooting.model import Model
from shooting.mpc.layout import ShootingLayout

__all__ = ["ScaledVector"]

FloatArray = npt.NDArray[np.float64]


class ScaledVector:
    """The vector methods of `MultipleShootingOCP` (a mixin: the attributes below are the OCP's)."""

    layout: ShootingLayout
    horizon: int
    x_scale: FloatArray
    u_scale: FloatArray
    x_min: FloatArray
    x_max: FloatArray
    u_min: FloatArray
    u_max: FloatArray
    soft_states: npt.NDArray[np.int_]
    soft_algebraic: npt.NDArray[np.int_]
    model: Model

    def variable_bounds(self) -> tuple[FloatArray, FloatArray]:
        """Lower and upper bounds of the decision vector: inputs at every stage, states from x_1 on.

        In the NLP's scaled variables (x / x_scale, u / u_scale; slacks in the model's units).

        Returns
        -------
        lbx, ubx : ndarray, shape (n_w,)
        """
        L = self.layout
        lbx, ubx = np.full(L.n_w, -np.inf), np.full(L.n_w, np.inf)
        x_min, x_max = self.x_min.copy(), self.x_max.copy()
        x_min[self.soft_states], x_max[self.soft_states] = -np.inf, np.inf  # soft: rows of g instead
        lbx[L.x_idx[1:]], ubx[L.x_idx[1:]] = x_min / self.x_scale, x_max / self.x_scale
        lbx[L.u_idx], ubx[L.u_idx] = self.u_min / self.u_scale, self.u_max / self.u_scale
        lbx[L.s_idx] = 0.0
        lbx[L.sh_idx] = 0.0
        return lbx, ubx

    def pack(self, x: FloatArray, u: FloatArray, s: FloatArray | None = None,
             sh: FloatArray | None = None) -> FloatArray:
        """The NLP's decision vector (scaled variables) of states x (N+1, nx) and inputs u (N, nu) in the model's
        units, slacks s (N, ns) and sh (N, nsh) (default 0), shape (n_w,)."""
        return self.layout.pack_w(np.asarray(x, dtype=float) / self.x_scale, np.asarray(u, dtype=float) / self.u_scale,
                                  s, sh)

    def unpack(self, w: FloatArray) -> tuple[FloatArray, FloatArray]:
        """States (N+1, nx) and inputs (N, nu), in the model's units, of the NLP's decision vector `w`."""
        x, u = self.layout.unpack_w(w)
        return x * self.x_scale, u * self.u_scale

    @property
    def w_scale(self) -> FloatArray:
        """What the decision vector is multiplied by to give the model's units, shape (n_w,)."""
        N, L = self.horizon, self.layout
        return L.pack_w(np.tile(self.x_scale, (N + 1, 1)), np.tile(self.u_scale, (N, 1)), np.ones((N, L.ns)),
                        np.ones((N, L.nsh)))

    def _soft_bounds(self) -> tuple[FloatArray, FloatArray]:
        """Lower and upper bounds of the softened quantities (states, then algebraic states), shape (ns,) each."""
        m = self.model
        return (np.concatenate([self.x_min[self.soft_states], m.z_min[self.soft_algebraic]]),
                np.concatenate([self.x_max[self.soft_states], m.z_max[self.soft_algebraic]]))

    def minimal_slacks(self, x: FloatArray, z: FloatArray | None = None) -> FloatArray:
        """The smallest slacks that make states `x` (N+1, nx) satisfy the soft bounds, shape (N, ns).

        With soft bounds on algebraic states, `z` (N, nz) is z at x_1..x_N (`OCPSolution.z`).
        """
        xs = np.asarray(x, dtype=float)[1:, self.soft_states]
        if self.soft_algebraic.size:
            if z is None:
                raise ValueError("the OCP has soft bounds on algebraic states: pass z (N, nz), e.g. sol.z")
            xs = np.hstack([xs, np.asarray(z, dtype=float).reshape(self.horizon, -1)[:, self.soft_algebraic]])
        lo, hi = self._soft_bounds()
        return np.maximum(0.0, np.maximum(lo - xs, xs - hi))
