"""The real-time iteration's QP kept in stages: the `StageQP` of one sample, as the exported C builds it.

Around a guess (xb, ub) the dynamics become x_{k+1} = A_k x_k + B_k u_k + b_k
with the integrator's exact A, B and b_k = F(xb_k, ub_k) - A_k xb_k - B_k ub_k.
The OCP's cost in the QP's form 1/2 z'Hz + g'z per stage (no factor 1/2 in the
OCP: H = 2 Q, g = -2 Q x_ref):

    stage k < N:  Hxx = 2 Q,  Huu = 2 R,  q_k = -2 Q xr_k,  r_k = -2 R ur_k
    stage N:      Hxx = 2 Qf, q_N = -2 Qf xr_N

plus, for ``stage_cost``/``terminal_cost``, their second-order expansion at
the guess (exact Hessian and gradient: q += grad - H zb). The rate penalty
sum_k (u_k - u_{k-1})' Rd (u_k - u_{k-1}) couples stages; the state is
augmented with the previous input, x~_k = [x_k; u_{k-1}], so that it becomes
a stage cost: x~_{k+1} = [A x + B u + b; u], Hxx += blkdiag(0, 2 Rd),
Hux = [0, -2 Rd], Huu += 2 Rd, x~_0 = [x0; u_prev]. State bounds are soft
(one slack per side, l1 s + l2 s^2) or hard; input bounds hard.

Path constraints h(x, u, p) <= 0 become general rows linearised at the guess
with their exact Jacobians, C_k x + D_k u <= C_k xb + D_k ub - h(xb, ub)
(soft with `soft_path_constraints`, one slack per row); terminal constraints
c(x_N, p) = 0 the terminal rows C_N x_N = C_N xb_N - c(xb_N) (hard: both sides).

Every array that depends on the guess and the sample's data comes from one
call of one CasADi Function over all stages (`shooting.mpc.rti_data`); only
the convexification of the extra costs' Hessians, a test per stage, is
numpy's. `StageQPBuilder` evaluates it in CasADi's virtual machine and
solves in numpy; after `StageQPBuilder.attach` (the default RTIController's,
`shooting.mpc.rti_library`) both run in C, writing into the solver's buffers.
"""

from __future__ import annotations

import copy
import ctypes
import dataclasses
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting.integrate.integrator import HOST_UNROLL_STEPS, build_integrator
from shooting.mpc.costs import convexify, definite
from shooting.mpc.curvature import curvature_functions, row_multipliers
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.mpc.reduced_convexity import convexify_by_riccati, telescoped, true_multipliers, unshifted
from shooting.mpc.rti_data import (
    DataEvaluator,
    QPData,
    as_blocks,
    constraint_functions,
    convexify_stages,
    cost_expansions,
    cost_values,
    curved_constraints,
    qp_data_function,
)
from shooting.mpc.sqp import SQPStep, qp_tolerances
from shooting.options import Hessian
from shooting.qp import (
    OCP_QP_TOLERANCES,
    StageQP,
    StageQPResult,
    hessian_scale,
    shifted_result,
    solve_stage_qp,
    stage_qp_gradient_scale,
    stage_qp_hard_violation,
    stage_qp_objective,
    stage_qp_stationarity,
    with_input_prox,
    with_prox,
)
from shooting.qp.host import CompiledStageQP

__all__ = ["StageQPBuilder", "constraint_functions", "cost_expansions", "cost_values", "curved_constraints",
           "hard_multiplier", "nonfinite_where"]

FloatArray = npt.NDArray[np.float64]


class StageQPBuilder:
    """Builds the `StageQP` of one RTI sample of an OCP (quadratic tracking cost, bounds, extra costs) and solves it.

    The QP's data come from one call of one CasADi Function over all stages (`shooting.mpc.rti_data`),
    evaluated here in CasADi's virtual machine and solved by `shooting.qp.solve_stage_qp` in numpy: the
    reference of `shooting.mpc.rti_library.CompiledStageQPBuilder`, which runs both in C.

    Parameters
    ----------
    ocp : MultipleShootingOCP
    hessian : {"gauss-newton", "exact"}
    convexification : {"riccati", "stage"}
        With "exact": "riccati", `shooting.mpc.reduced_convexity`'s pass and shifted QP (a double export's);
        "stage", each stage's block kept where positive definite, else the cost's where that is, else the sum
        projected (a float export's: the shifted QP is too ill-conditioned for single precision, whose
        interior point then ran out of its budget on the pole-tip cost).

    Attributes
    ----------
    data : QPData
        The data Function and the layout of its outputs.
    linearise : casadi.Function
        ``(xb (nx, N), ub (nu, N), p (np, N), t0) -> (x_next (nx, N), A (nx, N nx), B (nx, N nu))``: every
        stage's discrete step and its sensitivities at the linearisation point, one mapped call.
    template : StageQP
        The QP's sizes and what does not change between samples (bounds, soft flags, slack weights); its
        other arrays are zeros.
    """

    def __init__(self, ocp: MultipleShootingOCP, hessian: Hessian = "gauss-newton",
                 convexification: str = "riccati") -> None:
        self.ocp = ocp
        self.hessian = hessian
        self.convexification = convexification
        N, nx, nu, npar = ocp.horizon, ocp.nx, ocp.nu, ocp.np
        F = build_integrator(ocp.model, ocp.method, ocp.steps, "forward", unroll=HOST_UNROLL_STEPS,
                             name=f"{ocp.model.name}_rti_step")
        Xb, Ub = ca.MX.sym("xb", nx, N), ca.MX.sym("ub", nu, N)
        Pm, t0 = ca.MX.sym("p", npar, N), ca.MX.sym("t0")
        # (algebraic states: Newton on g from the model's z0, as in the OCP)
        z_guess = [ca.repmat(ca.DM(ocp.model.z0), 1, N)] if ocp.model.nz else []
        Fn, A, B = F.map(N).call([Xb, Ub, Pm, t0 + ca.DM(np.arange(N) * ocp.dt).T, ocp.dt, *z_guess])[:3]
        self.linearise = ca.Function("rti_linearise", [Xb, Ub, Pm, t0], [Fn, A, B], ["xb", "ub", "p", "t0"],
                                      ["x_next", "A", "B"])
        self.data: QPData = qp_data_function(ocp, F)
        self._path, self._terminal = constraint_functions(ocp)
        self.rate = bool(ocp.R_delta.any())
        self.bounded = np.flatnonzero(np.isfinite(ocp.x_min) | np.isfinite(ocp.x_max))
        self.template = self._template()
        # the data's outputs, evaluated in CasADi's virtual machine into these buffers (views: `_values`)
        fn = self.data.function
        scratch = {name: np.zeros(fn.nnz_out(i)) for i, name in enumerate(self.data.outputs)}
        self._evaluate = DataEvaluator(self.data, scratch)
        self._values = self.data.arrays(list(scratch.values()))
        self.solver: CompiledStageQP | None = None
        self._curvature: tuple[ca.Function, ca.Function | None] | None = None
        self._phi: FloatArray | None = None  # the last exact QP's shift (`shooting.mpc.reduced_convexity`)
        self._built: tuple[StageQP, FloatArray | None] | None = None  # the last SQP QP as built, and its shift
        if hessian == "exact":
            stage, terminal = curvature_functions(ocp)
            self._curvature = stage.map(N), terminal

    def attach(self, library: ctypes.CDLL) -> None:
        """Build and solve in C from now on: the data Function's and the QP's C in `library`.

        `library` holds ``data.function``'s C (CasADi's) and `shooting.qp.host.library_source` of the QP's
        sizes (`shooting.mpc.rti_library` builds and caches it). The data are then written straight into the
        solver's buffers: `build` returns ``solver.qp`` (the same object every time, overwritten by the next
        `build`), `solve` and `shifted` run in C.
        """
        solver = CompiledStageQP(library, self.template)
        extra = {name: np.zeros(self._evaluate.outputs[name].size) for name in ("M", "M_N")
                 if name in self.data.outputs}
        outputs = {name: extra[name] if name in extra else solver.storage[name] for name in self.data.outputs}
        self._evaluate = DataEvaluator(self.data, outputs, library)
        self._values = self.data.arrays(list(outputs.values()))
        self.solver = solver

    def _template(self) -> StageQP:
        """The QP with its fixed parts (bounds, soft flags, slack weights) and zeros where the data go."""
        ocp, shapes = self.ocp, self.data.shapes
        N = ocp.horizon
        soft = bool(ocp.soft_x_bounds)
        slacks = soft or (self._path is not None and bool(ocp.soft_path_constraints))
        kw: dict[str, Any] = {name: np.zeros(shapes[name]) for name in ("A", "B", "b", "Q", "S", "R", "Q_N", "q",
                                                                          "r")}
        kw.update(lbu=np.tile(ocp.u_min, (N, 1)), ubu=np.tile(ocp.u_max, (N, 1)),
                  idxbx=[int(i) for i in self.bounded], lbx=np.tile(ocp.x_min[self.bounded], (N, 1)),
                  ubx=np.tile(ocp.x_max[self.bounded], (N, 1)), soft_bx=[soft] * self.bounded.size,
                  l1=float(ocp.slack_l1) if slacks else 0.0, l2=float(ocp.slack_l2) if slacks else 1.0)
        if "C" in shapes:
            nh = shapes["C"][1]
            kw.update(C=np.zeros(shapes["C"]), D=np.zeros(shapes["D"]), lg=np.full((N, nh), -np.inf),
                      ug=np.zeros((N, nh)), soft_g=[bool(ocp.soft_path_constraints)] * nh)
        if "CN" in shapes:
            nc = shapes["CN"][0]
            kw.update(CN=np.zeros(shapes["CN"]), lgN=np.zeros(nc), ugN=np.zeros(nc), soft_gN=[False] * nc)
        return StageQP(x0=np.zeros(self.data.nx), **kw)

    def path_violations(self, x: FloatArray, u: FloatArray, p: FloatArray) -> tuple[FloatArray, FloatArray]:
        """max(0, h(x_k, u_k)) per stage and row (N, nh) and |c(x_N)| (nc,) of a trajectory (empty without)."""
        N = self.ocp.horizon
        h = np.zeros((N, 0)) if self._path is None else \
            np.maximum(0.0, np.array(self._path.map(N)(x[:N].T, u.T, p.T)[0], dtype=float).T)
        c = np.zeros(0) if self._terminal is None else \
            np.abs(np.array(self._terminal(x[N], p[N - 1])[0], dtype=float).ravel())
        return h, c

    def build(self, xb: FloatArray, ub: FloatArray, x_ref: FloatArray, u_ref: FloatArray, p: FloatArray,
              t0: float, u_prev: FloatArray, multipliers: StageQPResult | None = None) -> StageQP:
        """The QP of one sample around the guess (xb (N+1, nx), ub (N, nu)); its x0 is set by `with_state`.

        Parameters
        ----------
        x_ref : ndarray, shape (N+1, nx)
        u_ref : ndarray, shape (N, nu)
        p : ndarray, shape (N, np)
            Model parameters per interval.
        t0 : float
        u_prev : ndarray, shape (nu,)
            (Enters through `with_state`.)
        multipliers : StageQPResult, optional
            With ``hessian="exact"``: the multipliers at the guess (a QP's, shifted to this sample), whose
            constraints' curvature (`shooting.mpc.curvature`) joins the Hessian; without them the QP is
            Gauss-Newton's.

        Returns
        -------
        StageQP
            New arrays (this builder keeps no reference to them); after `attach`, ``solver.qp``.
        """
        self._evaluate(xb, ub, p, t0, x_ref, u_ref)
        values = self._values
        if self.solver is not None:
            qp = self.solver.qp
        else:  # new arrays, the template's own copies
            qp = StageQP(**{name: copy.copy(value) for name, value in vars(self.template).items()})
            for name in self.data.outputs:
                if hasattr(qp, name):
                    setattr(qp, name, np.array(values[name]))
        M, M_N = values.get("M"), values.get("M_N")
        self._phi = None
        if self._curvature is not None and multipliers is not None:
            if self.convexification == "stage":
                M, M_N = self._add_stage_curvature(qp, M, M_N, xb, ub, p, t0, multipliers), None
            else:
                # (every block made convex there; or, where its shift is too large, the stages Gauss-Newton's:
                # convexify_stages below, the terminal block the exact one)
                exact_stages = self._add_curvature(qp, M_N, xb, ub, p, t0, multipliers)
                M, M_N = None if exact_stages else M, None
        if M is not None or M_N is not None:
            # where the extra cost (or the constraints' curvature) leaves a stage's Hessian block not positive
            # definite: shifted (in place)
            convexify_stages(qp, M, M_N, xb, ub, self.ocp.nx)
        return qp

    def _curvature_blocks(self, qp: StageQP, xb: FloatArray, ub: FloatArray, p: FloatArray, t0: float,
                          multipliers: StageQPResult) -> tuple[FloatArray, FloatArray]:
        """The constraints' curvature W_k (N, nx + nu, nx + nu) at `multipliers` (`shooting.mpc.curvature`), and
        the terminal rows' multipliers."""
        assert self._curvature is not None
        ocp = self.ocp
        N, nx, n = ocp.horizon, ocp.nx, ocp.nx + ocp.nu
        z = qp.sizes
        mu, nuN = row_multipliers(multipliers.lam, N, z.nu, z.nbx, z.ng, z.ngN)
        times = t0 + ocp.dt * np.arange(N)
        W = as_blocks(self._curvature[0](xb[:N].T, ub.T, p.T, times[None, :], multipliers.pi[:, :nx].T, mu.T),
                      (N, n, n), True)
        return np.array(W), nuN

    def _terminal_curvature(self, qp: StageQP, M_N: FloatArray | None, xb: FloatArray, p: FloatArray,
                            nuN: FloatArray) -> None:
        """The terminal block, in place: M_N + W_N kept where positive definite, else the cost's block where that
        is definite, else the sum projected (as the C); without terminal rows and extra terminal cost, the QP's
        constant block."""
        assert self._curvature is not None and qp.Q_N is not None and qp.q is not None
        terminal, ocp = self._curvature[1], self.ocp
        if terminal is None and M_N is None:
            return
        N, nx = ocp.horizon, ocp.nx
        cost_N = M_N if M_N is not None else 2 * ocp.Q_terminal
        W_N = np.zeros((nx, nx)) if terminal is None else np.array(terminal(xb[N], p[N - 1], nuN), dtype=float)
        projected_N, changed = convexify(cost_N + W_N)
        if changed:
            W_N = np.zeros_like(W_N) if definite(cost_N) else projected_N - cost_N
        qp.Q_N[:nx, :nx] += W_N
        qp.q[N, :nx] -= W_N @ xb[N]

    def _add_curvature(self, qp: StageQP, M_N: FloatArray | None, xb: FloatArray,
                       ub: FloatArray, p: FloatArray, t0: float, multipliers: StageQPResult) -> bool:
        """Add the constraints' curvature W_k, W_N at `multipliers` to the QP in place where the QP stays convex
        (the terminal block first, final: `_terminal_curvature`; then the stages: `convexify_by_riccati`), its
        gradients corrected so that the model's gradient at the guess stays the cost's (q -= W zb). False: the
        pass's shift exceeded `SHIFT_LIMIT`, the stages are left as they were (Gauss-Newton's, once
        `convexify_stages` has made the cost's blocks convex)."""
        N, nu = self.ocp.horizon, qp.sizes.nu
        W, nuN = self._curvature_blocks(qp, xb, ub, p, t0, multipliers)
        self._terminal_curvature(qp, M_N, xb, p, nuN)
        lam, t = np.asarray(multipliers.lam, dtype=float), np.asarray(multipliers.t, dtype=float)
        sides = (lam[:2 * N * nu] > t[:2 * N * nu]).reshape(N, nu, 2)
        a, nbx = 2 * N * nu, qp.sizes.nbx
        states = (lam[a:a + 2 * N * nbx] > t[a:a + 2 * N * nbx]).reshape(N, nbx, 2).any(axis=2)
        states &= ~np.asarray(list(qp.soft_bx) or [False] * nbx, dtype=bool)  # (the hard ones)
        self._phi = convexify_by_riccati(qp, W, np.asarray(sides.any(axis=2)), xb, ub, states)
        return self._phi is not None

    def _add_stage_curvature(self, qp: StageQP, M: FloatArray | None, M_N: FloatArray | None, xb: FloatArray,
                             ub: FloatArray, p: FloatArray, t0: float, multipliers: StageQPResult) -> FloatArray:
        """convexification "stage" (a float export's): add the constraints' curvature W_k, W_N at `multipliers` to
        the QP in place, each block kept where positive definite (else the cost's where that is definite, else the
        sum projected), its gradients corrected so that the model's gradient at the guess stays the cost's
        (q -= W zb); returns the stage blocks (N, n, n) for `convexify_stages`."""
        ocp = self.ocp
        N, nx, nu = ocp.horizon, ocp.nx, ocp.nu
        W, nuN = self._curvature_blocks(qp, xb, ub, p, t0, multipliers)
        base = np.zeros((N, nx + nu, nx + nu))
        base[:, :nx, :nx], base[:, nx:, nx:] = 2 * ocp.Q, 2 * ocp.R
        cost_blocks = M if M is not None else base
        # A stage whose Lagrangian block is not positive definite keeps its cost's block where that is definite
        # (Gauss-Newton's there): projecting the sum instead changes the Newton step it stands for (two_link_arm
        # from IPOPT's optimum: linear convergence at rate 0.98, 100+ iterations, against 17 this way and 17 with
        # Gauss-Newton's). Where the cost's block is singular too (an economic cost, linear in the states: do-mpc's
        # batch reactor) it would leave those directions without curvature, and the SQP's steps run to the bounds
        # (the line search failed after 209 iterations): there the projection of the sum (eigenvalues raised to
        # tau), which keeps the dynamics' curvature (11 iterations to IPOPT's optimum).
        for k in range(N):
            projected, changed = convexify(cost_blocks[k] + W[k])
            if changed:
                W[k] = 0.0 if definite(cost_blocks[k]) else projected - cost_blocks[k]
        Q, S, R, q, r = qp.Q, qp.S, qp.R, qp.q, qp.r
        assert Q is not None and S is not None and R is not None and q is not None and r is not None
        Wxx, Wux, Wuu = W[:, :nx, :nx], W[:, nx:, :nx], W[:, nx:, nx:]
        Q[:, :nx, :nx] += Wxx
        S[:, :, :nx] += Wux
        R += Wuu
        q[:N, :nx] -= np.einsum("kij,kj->ki", Wxx, xb[:N]) + np.einsum("kji,kj->ki", Wux, ub)
        r -= np.einsum("kij,kj->ki", Wux, xb[:N]) + np.einsum("kij,kj->ki", Wuu, ub)
        self._terminal_curvature(qp, M_N, xb, p, nuN)  # (final: convexify_stages leaves it)
        return cost_blocks + W

    def solve(self, qp: StageQP, *, x_guess: FloatArray | None = None, u_guess: FloatArray | None = None,
              max_iter: int = 100, tolerances: dict[str, float] | None = None, warm: StageQPResult | None = None,
              shortcut_only: bool = False) -> StageQPResult:
        """`shooting.qp.solve_stage_qp` (its arguments), in C after `attach`.

        Returns
        -------
        StageQPResult
        """
        if self.solver is not None:
            res = self.solver.solve(qp, x_guess=x_guess, u_guess=u_guess, max_iter=max_iter, tolerances=tolerances,
                                    warm=warm, shortcut_only=shortcut_only)
        else:
            res = solve_stage_qp(qp, x_guess=x_guess, u_guess=u_guess, max_iter=max_iter, tolerances=tolerances,
                                 warm=warm, shortcut_only=shortcut_only)
        if self._phi is not None:  # (the exact Hessian's shifted QP: the unshifted one's dynamics multipliers)
            res = dataclasses.replace(res, pi=true_multipliers(res.pi, self._phi, res.x))
        return res

    def shifted(self, result: StageQPResult) -> StageQPResult:
        """The next sample's warm start: `shooting.qp.shifted_result` (in C after `attach`)."""
        if self.solver is not None:
            return self.solver.shifted(result)
        return shifted_result(result, self.template.sizes)

    def nonfinite(self, qp: StageQP) -> str | None:
        """`nonfinite_where` (after `attach`, of the solver's QP: one test over its buffer first)."""
        if self.solver is not None and qp is self.solver.qp and self.solver.data_finite():
            return None
        return nonfinite_where(qp)

    def with_state(self, qp: StageQP, x0: FloatArray, u_prev: FloatArray) -> StageQP:
        """`qp` for the measured state (and, with the rate penalty, the previous input)."""
        qp.x0[...] = np.concatenate([x0, u_prev]) if self.rate else x0  # (in place: it may be a bound buffer)
        return qp

    def guess(self, xb: FloatArray, ub: FloatArray, u_prev: FloatArray) -> FloatArray:
        """The QP's state guess: the trajectory's (augmented with the previous inputs under a rate penalty)."""
        if not self.rate:
            return xb
        prev = np.vstack([u_prev[None], ub])
        return np.hstack([xb, prev])

    def defects(self, x: FloatArray, u: FloatArray, p: FloatArray, t0: float) -> FloatArray:
        """A trajectory's violations: x_{k+1} - F(x_k, u_k) (N nx entries), then by how much it exceeds the
        hard bounds (the inputs', and the states' unless soft), the hard path constraints' max(0, h) and the
        terminal constraints' |c|, flat."""
        ocp = self.ocp
        N = ocp.horizon
        Fn = np.array(self.linearise(x[:N].T, u.T, p.T, t0)[0], dtype=float)
        parts = [np.ravel(x[1:] - Fn.T), np.maximum(0.0, np.maximum(ocp.u_min - u, u - ocp.u_max)).ravel()]
        if not ocp.soft_x_bounds:
            parts.append(np.maximum(0.0, np.maximum(ocp.x_min - x[1:], x[1:] - ocp.x_max)).ravel())
        h, c = self.path_violations(x, u, p)
        if not ocp.soft_path_constraints:
            parts.append(h.ravel())
        parts.append(c)
        return np.concatenate(parts)

    def sqp_step(self, x: FloatArray, u: FloatArray, x_ref: FloatArray, u_ref: FloatArray, p: FloatArray,
                 t0: float, u_prev: FloatArray, last: StageQPResult | None = None,
                 loose: bool = False, prox: float = 0.0, prox_scale: float | None = None,
                 prox_states: bool = False, trial: tuple[FloatArray, FloatArray] | None = None,
                 elastic: float = 0.0, curvature: bool = True, again: bool = False) -> SQPStep:
        """One SQP iteration's QP: linearise at (x, u) (x[0] the measured state) and solve from there, trying
        the `last` iteration's active set first (`solve_stage_qp`'s shortcut; else a cold start, as the C), to
        the tolerances ``qp_tolerances(loose, ...)`` (False: the QP's own); `prox` > 0 adds the proximal term
        on the inputs about u (`prox_states`: on the states about x too), weighted `prox` times `prox_scale`
        (None: this QP's `shooting.qp.hessian_scale`, returned as the step's ``hessian_scale``;
        `shooting.qp.with_input_prox`, `shooting.qp.with_prox`; the model's decrease and the stationarity are the
        plain QP's). `trial` (x_t, u_t): the QP's constraints corrected to second order for that point
        (`correct`); `elastic` > 0: its hard rows elastic at that weight (`shooting.qp.StageQP.elastic`; the step's
        ``violation`` their linearised violation at its solution); `curvature` False: an exact Hessian's QP
        without the constraints' curvature (Gauss-Newton's); `again` (and with `trial`): the QP this method
        last built, solved again (its Hessian as built: the C solves again what it prepared)."""
        nx = self.ocp.nx
        if trial is None and not again:
            multipliers = last if curvature and not loose else None
            qp = self.with_state(self.build(x, u, x_ref, u_ref, p, t0, u_prev, multipliers), x[0], u_prev)
            where = self.nonfinite(qp)
            if where is not None:
                return SQPStep(x, u, False, 0.0, 0.0, f"non-finite QP data at {where} (the model's step or its "
                                                     f"sensitivities are not finite at the linearisation point)",
                               status=4)
            self._built = (_copied(qp), self._phi)  # (the plain QP: the model, and what a correction starts from)
            model = self._built[0]
        else:  # (this iteration's QP as built: elastic, or its rows corrected to second order)
            assert self._built is not None
            base, self._phi = self._built
            qp = model = _copied(base)
            if trial is not None:
                self.correct(qp, trial[0], trial[1], p, t0)
        start = self.guess(x, u, u_prev)
        scale = hessian_scale(model) if prox_scale is None else prox_scale
        proximal = with_prox(qp, prox * scale, x, u) if prox_states else with_input_prox(qp, prox * scale, u)
        proximal.elastic = elastic
        try:
            res = self.solve(proximal, x_guess=start, u_guess=u, warm=last, shortcut_only=True,
                             tolerances=qp_tolerances(loose, OCP_QP_TOLERANCES["double"]))
        finally:
            proximal.elastic = 0.0  # (the buffers' QP serves the real-time iterations next)
        gradient = stage_qp_gradient_scale(model, start, u)
        if res.status != 0:
            return SQPStep(x, u, False, 0.0, 0.0, res.message, status=res.status, gradient=gradient)
        decrease = stage_qp_objective(model, start, u) - stage_qp_objective(model, res.x, res.u)
        if self._phi is not None:  # (the shift's terms off the dynamics: not the Lagrangian's model)
            decrease -= telescoped(model, self._phi, start, u) - telescoped(model, self._phi, res.x, res.u)
        # (an elastic QP: the plain QP's objective falls by J's model, and its hard rows' penalty by their violation
        # at the iterate less that at the solution; the merit's model takes the second part at its own weight)
        violation = stage_qp_hard_violation(model, res.x, res.u) if elastic > 0 else 0.0
        return SQPStep(res.x[:, :nx], res.u, True, decrease, max(float(np.abs(res.pi).max(initial=0.0)),
                                                                 hard_multiplier(res, model)), qp=res,
                       stationarity=stage_qp_stationarity(model if self._phi is None else unshifted(model, self._phi),
                                                          start, u, res.x, res.u), hessian_scale=scale,
                       violation=violation, gradient=gradient)

    def correct(self, qp: StageQP, xt: FloatArray, ut: FloatArray, p: FloatArray, t0: float) -> None:
        """The second-order correction of `qp` for the trial point (x_t, u_t), in place (the C: ``correct``).

        Each constraint c(w) (the dynamics' x_{k+1} - F(x_k, u_k), the path and terminal rows) keeps its Jacobian
        J and has c(w) replaced by c(w_t) - J (w_t - w) (the second-order correction: Nocedal and Wright,
        Numerical Optimization, 2nd ed., sec. 15.5 and 18.3): the QP's linearised rows then match the
        constraints at the trial point, so that its solution removes their second-order error there. In the QP's
        form each row's offset is taken at the trial point instead of the linearisation point:
        b_k = F(x_t,k, u_t,k) - A_k x_t,k - B_k u_t,k, the path rows' C_k x_t,k + D_k u_t,k - h(x_t,k, u_t,k),
        the terminal rows' C_N x_t,N - c(x_t,N)."""
        ocp = self.ocp
        N, nx = ocp.horizon, ocp.nx
        assert qp.A is not None and qp.B is not None and qp.b is not None
        Ft = np.array(self.linearise(xt[:N].T, ut.T, p.T, t0)[0], dtype=float).T
        qp.b[:, :nx] = Ft - np.einsum("kij,kj->ki", qp.A[:, :nx, :nx], xt[:N]) - \
            np.einsum("kij,kj->ki", qp.B[:, :nx], ut)
        if self._path is not None and qp.C is not None and qp.D is not None and qp.ug is not None:
            ht = np.array(self._path.map(N)(xt[:N].T, ut.T, p.T)[0], dtype=float).T
            qp.ug[...] = np.einsum("kij,kj->ki", qp.C[:, :, :nx], xt[:N]) + np.einsum("kij,kj->ki", qp.D, ut) - ht
        if self._terminal is not None and qp.CN is not None and qp.lgN is not None and qp.ugN is not None:
            ct = np.array(self._terminal(xt[N], p[N - 1])[0], dtype=float).ravel()
            qp.lgN[...] = qp.ugN[...] = qp.CN[:, :nx] @ xt[N] - ct


def _copied(qp: StageQP) -> StageQP:
    """A copy of `qp` whose arrays are its own (a compiled solver's QP is views of its buffers)."""
    arrays: dict[str, Any] = {name: np.array(v) for name, v in vars(qp).items() if isinstance(v, np.ndarray)}
    return dataclasses.replace(qp, **arrays)



def nonfinite_where(qp: StageQP) -> str | None:
    """Where a stage QP's data are not finite: "stage k" (its dynamics), "the cost's expansion", or None."""
    arrays = (qp.A, qp.B, qp.b, qp.Q, qp.S, qp.R, qp.Q_N, qp.q, qp.r)
    if all(np.isfinite(v).all() for v in arrays if v is not None):  # (the common case, at once)
        return None
    for k in range(qp.sizes.N):
        if not all(np.isfinite(np.asarray(v[k], dtype=float)).all() for v in (qp.A, qp.B, qp.b)):
            return f"stage {k}"
    return "the cost's expansion"


def hard_multiplier(res: StageQPResult, qp: StageQP) -> float:
    """The largest multiplier of a hard inequality side (input bounds, hard state bounds and general rows,
    terminal rows): with the dynamics' multipliers, what the l1 merit's weight must exceed."""
    z = qp.sizes
    N = z.N
    lam = np.abs(np.asarray(res.lam, dtype=float))
    a = 2 * N * z.nu
    b = a + 2 * N * z.nbx
    c = b + 2 * N * z.ng
    parts = [lam[:a], lam[c:c + 2 * z.ngN]]
    if not any(qp.soft_bx or []):
        parts.append(lam[a:b])
    if not any(qp.soft_g or []):
        parts.append(lam[b:c])
    return float(max((float(v.max(initial=0.0)) for v in parts), default=0.0))
