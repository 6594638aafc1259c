"""`OCPSolution`: what one solve of a multiple-shooting OCP returns, and its shift for the next sample."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from shooting.mpc.layout import ShootingLayout

__all__ = ["OCPSolution"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class OCPSolution:
    """The result of `MultipleShootingOCP.solve` (fields are also the constructor's).

    Parameters
    ----------
    x : ndarray, shape (N+1, nx)
    u : ndarray, shape (N, nu)
    cost : float
    success : bool
    status : str
        The solver's return status (e.g. ``"Solve_Succeeded"``, ``"Infeasible_Problem_Detected"``).
    iterations : int
    solve_time : float
        Wall-clock seconds of the solver call.
    max_violation : float
        Largest violation of the constraints and bounds at the returned point.
    w : ndarray, shape (n_w,)
        The NLP's decision vector (see `ShootingLayout`), in the OCP's scaled
        variables (x / x_scale, u / u_scale; `x`, `u` are in the model's units).
    lam_x : ndarray, shape (n_w,)
        Multipliers of the variable bounds.
    lam_g : ndarray, shape (n_g,)
        Multipliers of the constraints (initial state, dynamics, path, terminal).
    layout : ShootingLayout
        Where everything sits in `w`, `lam_x` and `lam_g`.
    stats : dict
        The solver's own statistics (``t_wall_total``, ...).
    messages : str
        What CasADi printed during the solve (its warnings), kept instead of shown.
    z : ndarray, shape (N, nz)
        For a model with algebraic states, z at x_1..x_N (row k-1 for x_k:
        the step's z output of interval k-1); shape (N, 0) otherwise.
    w_scale : ndarray, shape (n_w,), optional
        What `w` is multiplied by to give the model's units (None: ones).
    """

    x: FloatArray
    u: FloatArray
    cost: float
    success: bool
    status: str
    iterations: int
    solve_time: float
    max_violation: float
    w: FloatArray
    lam_x: FloatArray
    lam_g: FloatArray
    layout: ShootingLayout = field(repr=False, compare=False)
    stats: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    messages: str = field(default="", repr=False, compare=False)
    z: FloatArray = field(default_factory=lambda: np.zeros((0, 0)), repr=False, compare=False)
    w_scale: FloatArray | None = field(default=None, repr=False, compare=False)

    @property
    def slacks(self) -> FloatArray:
        """Slacks of the soft state bounds, shape (N, ns) (row k-1 for x_k; ns = 0 without soft bounds)."""
        return self.layout.slacks(self.w)

    @property
    def dynamics_multipliers(self) -> FloatArray:
        """Multipliers of x_{k+1} = F(x_k, u_k), shape (N, nx)."""
        return self.lam_g[self.layout.dyn_idx]

    def shifted(self) -> OCPSolution:
        """This solution one stage ahead, for the next MPC solve.

        States, inputs and their multipliers move one stage forward; the last
        stage is repeated. Use as ``ocp.solve(x_next, warm_start=sol.shifted())``.
        """
        L = self.layout
        w = L.shift_w(self.w)
        x, u = L.unpack_w(w if self.w_scale is None else w * self.w_scale)
        return replace(self, x=x, u=u, w=w, lam_x=L.shift_w(self.lam_x), lam_g=L.shift_g(self.lam_g))
