"""Real-time iteration (RTI): one Gauss-Newton SQP step per sample.

Diehl, Bock & Schloeder (2005), "A real-time iteration scheme for nonlinear
optimization in optimal feedback control", SIAM J. Control Optim. 43(5).

Around a guess (xb_k, ub_k) of the trajectory, the dynamics are replaced by
their linearisation with the integrator's exact sensitivities

    x_{k+1} = F(xb_k, ub_k) + A_k (x_k - xb_k) + B_k (u_k - ub_k),

and the quadratic cost is kept exactly (for a least-squares cost the
Gauss-Newton Hessian is the cost's own Hessian), giving one sparse QP per
sample. Everything except the initial state is computed before the state
is measured (preparation phase); the feedback phase only sets x_0 and
solves the QP. The solution, shifted one stage, is the next guess.

Time-varying data (references, model parameters per stage, the previous
input of the rate penalty) enter the QP through the parameter vector P. The
preparation for the next sample assumes this sample's data shifted one stage
(exact for constant data); a sample whose data differ from that is prepared
again before its feedback.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting._solver_call import solver_call
from shooting.mpc.controllers import ControlStep
from shooting.mpc.costs import hessians
from shooting.mpc.divergence import prediction_limit
from shooting.mpc.layout import ShootingLayout
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.mpc.rti_library import RTILibraryReport, attach_library
from shooting.mpc.rti_sparse import SparseQP
from shooting.mpc.rti_stage import StageQPBuilder
from shooting.mpc.sqp import COLD_START_ITERATIONS, MAX_SQP_ITERATIONS, SQP_STATUS, SQPResult, SQPStep, sqp
from shooting.options import QP_SOLVERS, ControllerHessian, Hessian, QPSolver
from shooting.qp import StageQP, StageQPResult

__all__ = ["MAX_SQP_ITERATIONS", "STAGE_QP_SOLVERS", "QPPoint", "RTIController"]

#: The `qp_solver` values that keep the QP in stages (`StageQPBuilder`): compiled, or its numpy twin.
STAGE_QP_SOLVERS = ("riccati-ipm", "riccati-ipm-numpy")


def _close(P: npt.NDArray[np.float64], prepared: npt.NDArray[np.float64]) -> bool:
    """``np.allclose(P, prepared, rtol=1e-12, atol=0)`` for finite data, in a fifth of its time (a NaN or an
    infinity reads as a change: the sample is prepared again)."""
    with np.errstate(invalid="ignore"):
        return bool(np.all(np.abs(P - prepared) <= 1e-12 * np.abs(prepared)))


@dataclass(frozen=True)
class QPPoint:
    """A primal-dual point of the RTI's QP, laid out as the OCP's vectors (`ShootingLayout`).

    Parameters
    ----------
    w : ndarray, shape (n_w,)
    lam_a : ndarray, shape (nx + N nx,) or None
        Multipliers of the initial-state and dynamics rows.
    lam_x : ndarray, shape (n_w,) or None
        Multipliers of the bounds.
    """

    w: npt.NDArray[np.float64]
    lam_a: npt.NDArray[np.float64] | None
    lam_x: npt.NDArray[np.float64] | None

    def shifted(self, layout: ShootingLayout) -> QPPoint:
        """One stage ahead: the next sample's linearisation point and multiplier guess.

        (osqp warm-starts from the multipliers; qrqp ignores them: its iteration
        counts on the swing-up are the same with shifted, unshifted or zero ones.)
        """
        return QPPoint(layout.shift_w(self.w), None if self.lam_a is None else layout.shift_g(self.lam_a),
                       None if self.lam_x is None else layout.shift_w(self.lam_x))


class RTIController:
    """Real-time iteration MPC for the problem of a `MultipleShootingOCP`.

    Parameters
    ----------
    ocp : MultipleShootingOCP
        Model, horizon, dt, integrator, weights, references, bounds (soft
        state bounds included: the QP has the same slacks) and extra
        costs (``stage_cost``, ``terminal_cost``: their exact Hessian at the
        linearisation point enters the QP) are taken from it; path and
        terminal constraints are refused.
    qp_solver : {"riccati-ipm", "riccati-ipm-numpy", "qrqp", "osqp"}, default "riccati-ipm"
        "riccati-ipm": the QP kept in stages and solved exactly by the
        interior-point Riccati method of `shooting.qp` (the exported C
        controller's method; converged to rounding in double), its data and
        its solver compiled for this machine once per problem and cached on
        disk (`shooting.mpc.rti_library`; without gcc: the numpy twin, with an
        `RTILibraryWarning`). "riccati-ipm-numpy": the same QP, data from
        CasADi's virtual machine and the solver's numpy twin
        (`shooting.qp.solve_stage_qp`): the reference, equal to rounding.
        "qrqp", "osqp": the whole sparse QP by a solver shipped with CasADi.
    initialize_with_ipopt : bool, default True
        The first guess (after construction or `reset`) is IPOPT's solution
        at the first state; False: every state at the measured one, every
        input at its reference clipped to the bounds (`MultipleShootingOCP.initial_guess`).
    cold_start_iterations : int, default 100
        The first `step` after construction or `reset` iterates SQP (`solve`)
        from that guess to convergence, at most this many iterations
        (the stage-wise solvers only; 0: a plain real-time iteration).
    sqp_iterations : int, default 1
        SQP iterations of every later sample: 1 is the real-time iteration.
    hessian : {"auto", "gauss-newton", "exact"}, default "auto"
        The QPs' Hessian. "auto": the real-time iterations' "exact" where the
        OCP has a stage or terminal cost that is not a least-squares one, else
        "gauss-newton" (`shooting.mpc.costs.automatic_hessian`; the attribute
        `hessian` holds the choice), and the SQP's (`solve`, cold starts)
        "exact" (`sqp_hessian`: see `shooting.mpc.costs.hessians`). The
        costs' (Gauss-Newton for least squares), or
        with "exact" the Lagrangian's: the dynamics' curvature through the
        integrator's second-order step at the dynamics' multipliers and the
        path and terminal constraints' at theirs (`shooting.mpc.curvature`),
        made convex where the reduced Hessian needs it (`convexification`:
        see `shooting.mpc.rti_stage.StageQPBuilder`). Stage-wise solvers only.
    convexification : {"riccati", "stage"}, default "riccati"

    Attributes
    ----------
    ocp : MultipleShootingOCP
    dt : float
    model : Model
    feedback_times, preparation_times : list of float
        Seconds per sample of the two phases.
    last_qp : QPPoint or None
        The last QP's solution.
    qp_library : RTILibraryReport or None
        How the compiled QP was obtained ("riccati-ipm": ``status`` "hit", "built" or "fallback", ``key``,
        ``path``, ``seconds``, ``reason``); None for the other solvers.
    guess : QPPoint or None
        Where the next sample starts: `last_qp` shifted one stage.
    """

    def __init__(self, ocp: MultipleShootingOCP, *, qp_solver: QPSolver = "riccati-ipm",
                 initialize_with_ipopt: bool = True, cold_start_iterations: int = COLD_START_ITERATIONS,
                 sqp_iterations: int = 1, hessian: ControllerHessian = "auto",
                 convexification: str = "riccati") -> None:
        if not isinstance(ocp, MultipleShootingOCP):
            raise ValueError(f"ocp must be a MultipleShootingOCP, got {type(ocp).__name__}")
        qp_solver = _validate.choice(qp_solver, QP_SOLVERS, "qp_solver")
        m = ocp.model
        if np.isfinite(m.z_min).any() or np.isfinite(m.z_max).any():
            raise ValueError(f"RTIController does not impose the bounds on the algebraic states of model {m.name} "
                             f"(z_min/z_max): build the model without them, or use MPCController (IPOPT)")
        stage_wise = qp_solver in STAGE_QP_SOLVERS
        if (ocp.problem.constraints.path_constraints is not None or ocp.layout.nc) and not stage_wise:
            raise ValueError(f"path and terminal constraints need qp_solver='riccati-ipm' (its general rows), "
                             f"not {qp_solver!r}")
        self.ocp, self.model, self.dt = ocp, ocp.model, ocp.dt
        # Scaled variables (shooting.mpc.scaling): everything inside works on the OCP's twin in x / dx, u / du; step
        # and solve take and give the model's units.
        work, self._dx, self._du = ocp.scaled_twin()
        self._work = ocp = work
        self.initialize_with_ipopt = _validate.flag(initialize_with_ipopt, "initialize_with_ipopt")
        self.cold_start_iterations = _validate.integer(cold_start_iterations, "cold_start_iterations", minimum=0,
                                                       maximum=MAX_SQP_ITERATIONS)
        self.sqp_iterations = _validate.integer(sqp_iterations, "sqp_iterations", minimum=1,
                                                maximum=MAX_SQP_ITERATIONS)
        if not stage_wise and sqp_iterations > 1:
            raise ValueError(f"sqp_iterations={sqp_iterations} needs qp_solver='riccati-ipm' (the SQP's line "
                             f"search uses its stage-wise QP)")
        self.feedback_times: list[float] = []
        self.preparation_times: list[float] = []
        self.qp_solver = qp_solver
        # a prediction beyond this times 1 + max|x| has diverged (the C's PREDICTION_LIMIT: shooting.mpc.divergence)
        self._limit = prediction_limit(m.x0, ocp.x_ref, ocp.u_ref, ocp.x_min, ocp.x_max, ocp.u_min, ocp.u_max)
        cost = ocp.problem.cost
        self.hessian, self.sqp_hessian = hessians(hessian, cost.stage_cost, cost.terminal_cost)
        if self.hessian == "exact" and not stage_wise:
            raise ValueError(f"hessian='exact' needs qp_solver='riccati-ipm' or 'riccati-ipm-numpy' (its stage "
                             f"blocks are made positive definite stage by stage), not {qp_solver!r}")
        if not stage_wise:
            self.sqp_hessian = self.hessian  # (no SQP without the stage-wise QP)
        convexification = _validate.choice(convexification, ("riccati", "stage"), "convexification")
        either: Hessian = "exact" if "exact" in (self.hessian, self.sqp_hessian) else "gauss-newton"
        self._stages = StageQPBuilder(ocp, either, convexification) if stage_wise else None
        self.qp_library: RTILibraryReport | None = None
        if self._stages is None:
            self._sparse = SparseQP(ocp, qp_solver)
        elif qp_solver == "riccati-ipm":
            self.qp_library = attach_library(self._stages)
        self.reset()

    @property
    def guess(self) -> QPPoint | None:
        """The linearisation point and multiplier guess of the next sample (None before the first)."""
        return self._guess

    def reset(self) -> None:
        """Forget the trajectory guess and the last input; the next `step` initialises again.

        After a reset the rate penalty's u_{-1} is zero (the OCP's default)
        until a `step` applies an input or is given ``u_prev``.
        """
        self._guess: QPPoint | None = None
        self.last_qp: QPPoint | None = None
        self._prepared: StageQP | tuple[Any, npt.NDArray[np.float64], npt.NDArray[np.float64], Any] | None = None
        self._prepared_P: npt.NDArray[np.float64] | None = None
        self._prepared_bad: str | None = None
        self._cold = True
        self.last_sqp: SQPResult | None = None
        # The stage QP's slacks and multipliers, shifted: the next solve's warm start (as the C's).
        self._qp_warm: StageQPResult | None = None
        self.u_last = np.zeros(self._work.nu)
        self.feedback_times.clear()
        self.preparation_times.clear()

    def _prepare(self, t: float, P: npt.NDArray[np.float64] | None = None) -> float:
        """Linearise at the guess and build the QP for parameters P (default: the OCP's data at `t`).

        Returns the seconds it took (also appended to `preparation_times`).
        """
        assert self._guess is not None
        t_start = time.perf_counter()
        if P is None:
            P = self._work.parameters(np.zeros(self._work.nx), t0=t, u_prev=self.u_last)
        if self._stages is not None:
            L = self._work.layout
            xb, ub = L.unpack_w(self._guess.w)
            d = L.unpack_parameters(np.asarray(P, dtype=float))
            self._prepared = self._stages.build(xb, ub, d["x_ref"], d["u_ref"], d["p"], float(d["t0"]),
                                                d["u_prev"], self._qp_warm if self.hessian == "exact" else None)
        else:
            A, b, g, H = self._sparse.data(self._guess.w, P)
            self._prepared = (A, np.array(b).ravel(), np.array(g).ravel(), H)
        self._prepared_bad = self._nonfinite(self._prepared)
        self._prepared_P = np.array(P, dtype=float)
        elapsed = time.perf_counter() - t_start
        self.preparation_times.append(elapsed)
        return elapsed

    @property
    def horizon(self) -> int:
        """The OCP's number of intervals N."""
        return int(self._work.horizon)

    def step(self, x: npt.ArrayLike, t: float, *, x_ref: npt.ArrayLike | None = None,
             u_ref: npt.ArrayLike | None = None, p: npt.ArrayLike | None = None,
             u_prev: npt.ArrayLike | None = None) -> ControlStep:
        """Feedback for the measured state `x` at time `t`; then prepare the next sample.

        Parameters
        ----------
        x : array_like, shape (nx,)
        t : float
        x_ref : array_like, shape (nx,) or (N+1, nx), optional
            This sample's state reference over the horizon (default the OCP's).
        u_ref : array_like, shape (nu,) or (N, nu), optional
            Input reference (default the OCP's).
        p : array_like, shape (np,) or (N, np), optional
            Model parameters per interval (default ``model.p0``).
        u_prev : array_like, shape (nu,), optional
            u_{-1} of the rate penalty (default: the input this controller
            applied last, zero after `reset`).

        Returns
        -------
        ControlStep
            ``u`` (nu,), ``solve_time`` (feedback + preparation seconds of this
            sample), ``success``, ``status`` (the QP solver's), ``iterations``.
            Non-finite QP data or solution is a failure (``success`` False,
            never a NaN input): the last input is held. After any failed
            sample (a QP that did not solve too, its iterate's first input
            applied) the next one starts afresh from its measured state.
        """
        ocp = self._work
        xv = _validate.vector(x, ocp.nx, "x", broadcast=False) / self._dx
        prev = self.u_last if u_prev is None else self._scaled(u_prev, self._du, 0, "u_prev")
        P = ocp.parameters(np.zeros(ocp.nx), self._scaled(x_ref, self._dx, ocp.horizon + 1, "x_ref"),
                           self._scaled(u_ref, self._du, ocp.horizon, "u_ref"), p, t, prev)
        return self._unscaled(self._step(xv, P, t))

    def _scaled(self, value: npt.ArrayLike | None, scale: npt.NDArray[np.float64], rows: int, what: str) -> Any:
        """An argument in the model's units in the twin's: a vector (`rows` 0) or one row or `rows` rows of
        stages (validated first, so that a wrong shape is named as such); unscaled or None: as given."""
        if value is None or self._work is self.ocp:
            return value
        if rows == 0:
            return _validate.vector(value, scale.size, what, broadcast=False) / scale
        return _validate.stage_rows(value, rows, scale.size, what) / scale

    def _unscaled(self, step: ControlStep) -> ControlStep:
        """A sample's result in the model's units."""
        return step if self._work is self.ocp else dataclasses.replace(step, u=step.u * self._du)

    def _step(self, xv: npt.NDArray[np.float64], P: npt.NDArray[np.float64], t: float) -> ControlStep:
        """`step` in the twin's variables."""
        ocp = self._work
        L = ocp.layout
        prepare = 0.0
        iterate = self.cold_start_iterations if self._cold else self.sqp_iterations
        if self._stages is not None and (iterate > 1 or (self._cold and iterate > 0)):
            # SQP from the guess: to convergence (a cold start, as the C's first feedback) or the sample's
            # iterations; its solution's first input is applied (the C's NAME_mpc_solve).
            return self._sqp_step(xv, P, t, iterate, self._cold)
        if self._guess is None:
            w0 = self._initial_guess(xv, P)
            self._guess = QPPoint(w0, None, None)
            prepare += self._prepare(t, P)
        elif self._prepared_P is None or not _close(P, self._prepared_P):
            # Data other than the preparation assumed (the relative tolerance
            # forgives t0 = k dt computed as (k-1) dt + dt): a new QP.
            prepare += self._prepare(t, P)
        assert self._prepared is not None and self._guess is not None
        if self._prepared_bad is not None:
            # The model's step or its derivatives are not finite at the
            # linearisation point (e.g. dg/dz singular there): no QP to solve.
            return self._failed(prepare, 0.0, "", 0, f"non-finite QP data at {self._prepared_bad} (the model's "
                                                     f"step or its sensitivities are not finite at the "
                                                     f"linearisation point)")
        t_start = time.perf_counter()
        if isinstance(self._prepared, StageQP):
            w, lam_a, lam_x, success, status, iterations = self._feedback_stages(xv, P, self._prepared)
        else:
            w, lam_a, lam_x, success, status, iterations = self._feedback_sparse(xv, self._prepared)
        feedback = time.perf_counter() - t_start
        self.feedback_times.append(feedback)
        if not np.isfinite(w).all():
            return self._failed(prepare, feedback, status, iterations,
                                "non-finite QP solution (the QP's arithmetic overflowed)")
        if not np.abs(w).max(initial=0.0) <= self._limit * (1 + np.abs(xv).max(initial=0.0)):
            # an "optimal" prediction beyond sense (data linearised far off): a failed sample (as the C's)
            return self._failed(prepare, feedback, "diverged", iterations,
                                f"the prediction passes {self._limit:.3g} x (1 + max|x|)")
        u = np.clip(w[L.u_idx[0]], ocp.u_min, ocp.u_max)
        self.u_last = u.copy()
        if not success and status != "budget":  # a QP that failed: afresh from the next measured state (as the C)
            self._guess, self._prepared, self._prepared_P, self._qp_warm = None, None, None, None
            self._cold = True
            return ControlStep(u=u, solve_time=feedback + prepare, success=False, status=status,
                               iterations=iterations)
        # Shift primal and dual values one stage: the next linearisation point
        # and multiplier guess (the QP's rows are the OCP's initial-state and
        # dynamics rows, laid out as in g); the data shift with them.
        self.last_qp = QPPoint(w, lam_a, lam_x)
        self._guess = self.last_qp.shifted(L)
        prepare += self._prepare(t + self.dt, L.shift_parameters(P, self.dt, u))
        return ControlStep(u=u, solve_time=feedback + prepare, success=success, status=status,
                           iterations=iterations)

    def _sqp_step(self, x: npt.NDArray[np.float64], P: npt.NDArray[np.float64], t: float, iterations: int,
                  cold: bool) -> ControlStep:
        """A sample by SQP (`solve`; `cold`: its proximal term): apply its first input, shift its solution."""
        ocp, L = self._work, self._work.layout
        started = time.perf_counter()
        result = self._sqp(x, P, iterations, cold)
        self.last_sqp = result if self._work is self.ocp else \
            dataclasses.replace(result, x=result.x * self._dx, u=result.u * self._du)
        feedback = time.perf_counter() - started
        self.feedback_times.append(feedback)
        u = np.clip(result.u[0], ocp.u_min, ocp.u_max)
        if result.status == 2 or not (np.isfinite(result.x).all() and np.isfinite(result.u).all()):
            # no QP at the first iterate, or an iterate that overflowed: a failed sample (the last input held)
            return self._failed(0.0, feedback, "", result.iterations, result.message or "non-finite SQP iterate")
        self.u_last = u.copy()
        assert self._guess is not None and self._stages is not None
        self.last_qp = self._guess
        self._guess = self.last_qp.shifted(L)
        self._qp_warm = None if self._qp_warm is None else self._stages.shifted(self._qp_warm)  # (as the C's)
        prepare = self._prepare(t + self.dt, L.shift_parameters(P, self.dt, u))
        status = "converged" if result.success else (result.message or SQP_STATUS[result.status])
        return ControlStep(u=u, solve_time=feedback + prepare, success=result.success, status=status,
                           iterations=result.iterations)

    def _feedback_sparse(self, x: npt.NDArray[np.float64], prepared: tuple[Any, ...]
                         ) -> tuple[npt.NDArray[np.float64], Any, Any, bool, str, int]:
        """The whole sparse QP by CasADi's conic solver (qrqp, osqp)."""
        ocp, L = self._work, self._work.layout
        A, b, g, H = prepared
        sparse = self._sparse
        lba, uba = sparse.lba.copy(), sparse.uba.copy()
        lba[sparse.equality] = uba[sparse.equality] = b[sparse.equality]
        lba[L.x0_idx] = x
        uba[L.x0_idx] = x
        guess = self._guess
        assert guess is not None
        self._check_rows(lba, uba)
        args: dict[str, Any] = dict(h=H, g=g, a=A, lba=lba, uba=uba, lbx=ocp.lbx, ubx=ocp.ubx, x0=guess.w)
        if guess.lam_a is not None:
            args.update(lam_a0=guess.lam_a, lam_x0=guess.lam_x)
        with solver_call(capture=False):  # (a capture would cost ~20 us per sample)
            res = sparse.qp(**args)
        stats = sparse.qp.stats()
        return (np.array(res["x"]).ravel(), np.array(res["lam_a"]).ravel(), np.array(res["lam_x"]).ravel(),
                bool(stats.get("success", True)), str(stats.get("return_status", "")),
                int(stats.get("iter_count", 0)))

    def _check_rows(self, lba: npt.NDArray[np.float64], uba: npt.NDArray[np.float64]) -> None:
        """A ValueError naming the rows whose bounds are not finite or cross (CasADi's conic would throw)."""
        bad = np.flatnonzero(~(lba <= uba) | np.isnan(lba) | np.isnan(uba) | (lba == np.inf) | (uba == -np.inf))
        if not bad.size:
            return
        rows = ", ".join(f"{self._row_name(int(r))} [{lba[r]:g}, {uba[r]:g}]" for r in bad[:3])
        more = f" and {bad.size - 3} more" if bad.size > 3 else ""
        raise ValueError(f"the RTI's QP is ill-posed: row bounds cross or are not finite: {rows}{more}; the "
                         f"linearisation at the guess is not finite there (check the model at the guess, or use "
                         f"qp_solver='riccati-ipm')")

    def _row_name(self, row: int) -> str:
        """What row `row` of the sparse QP is, in the OCP's terms."""
        L, names = self._work.layout, self.model.state_names
        for what, idx in (("initial state", L.x0_idx[None, :]), ("dynamics of stage", L.dyn_idx),
                          ("soft lower bound at stage", L.soft_lo_idx), ("soft upper bound at stage", L.soft_hi_idx)):
            hit = np.argwhere(idx == row)
            if hit.size:
                k, j = (int(v) for v in hit[0])
                if what == "initial state":
                    return f"row {row} ({what}, {names[j]})"
                state = names[j] if "dynamics" in what else names[int(self._work.soft_states[j])]
                return f"row {row} ({what} {k + 1 if 'bound' in what else k}, {state})"
        return f"row {row}"

    def _feedback_stages(self, x: npt.NDArray[np.float64], P: npt.NDArray[np.float64], qp: StageQP
                         ) -> tuple[npt.NDArray[np.float64], None, None, bool, str, int]:
        """The stage-wise QP by the interior-point Riccati solver, from the guess."""
        assert self._stages is not None and self._guess is not None
        L = self._work.layout
        u_prev = L.unpack_parameters(P)["u_prev"]
        xb, ub = L.unpack_w(self._guess.w)
        res = self._stages.solve(self._stages.with_state(qp, x, u_prev), x_guess=self._stages.guess(xb, ub, u_prev),
                                 u_guess=ub, warm=self._qp_warm)
        # optimal, or stopped at its iteration limit at an interior iterate the next sample goes on from (the C's
        # budget): warm; anything else, cold
        self._qp_warm = self._stages.shifted(res) if res.status in (0, 1) else None
        xs, us = res.x[:, :self._work.nx], res.u
        w = L.pack_w(xs, us, self._slacks(xs))
        return w, None, None, res.status == 0, "budget" if res.status == 1 else res.message, res.iterations

    def solve(self, x0: npt.ArrayLike, *, max_iter: int = 50, x_ref: npt.ArrayLike | None = None,
              u_ref: npt.ArrayLike | None = None, p: npt.ArrayLike | None = None, t0: float = 0.0,
              u_prev: npt.ArrayLike | None = None) -> SQPResult:
        """SQP from the current guess (after `reset`: the first guess) to a KKT point of the OCP, for state x0.

        The guess becomes the result, so the next `step` continues from it.
        Parameters as for `step`; see `shooting.mpc.sqp` for the iteration.

        Returns
        -------
        SQPResult
            ``u`` (N, nu), ``x`` (N+1, nx), ``iterations``, ``status`` (0 converged).
        """
        if self._stages is None:
            raise ValueError(f"solve needs qp_solver='riccati-ipm' (this controller uses {self.qp_solver!r})")
        ocp = self._work
        xv = _validate.vector(x0, ocp.nx, "x0", broadcast=False) / self._dx
        max_iter = _validate.integer(max_iter, "max_iter", minimum=1, maximum=MAX_SQP_ITERATIONS)
        prev = self.u_last if u_prev is None else self._scaled(u_prev, self._du, 0, "u_prev")
        P = ocp.parameters(np.zeros(ocp.nx), self._scaled(x_ref, self._dx, ocp.horizon + 1, "x_ref"),
                           self._scaled(u_ref, self._du, ocp.horizon, "u_ref"), p, t0, prev)
        result = self._sqp(xv, P, max_iter, True)
        if self._work is not self.ocp:
            result = dataclasses.replace(result, x=result.x * self._dx, u=result.u * self._du)
        self.last_sqp = result
        return result

    def _sqp(self, x0: npt.NDArray[np.float64], P: npt.NDArray[np.float64], max_iter: int, prox: bool) -> SQPResult:
        """`solve` for data P (`prox`: `shooting.mpc.sqp`'s); leaves the result as the guess, the controller warm."""
        assert self._stages is not None
        ocp, L, builder = self._work, self._work.layout, self._stages
        d = L.unpack_parameters(P)
        xr, ur, pp, t0, u_prev = d["x_ref"], d["u_ref"], d["p"], float(d["t0"]), d["u_prev"]
        w = self._initial_guess(x0, P) if self._guess is None else self._guess.w
        x, u = L.unpack_w(w)
        x = np.vstack([x0, x[1:]])
        last: list[StageQPResult | None] = [None]  # the last iteration's QP (its active set: tried first)

        def qp_step(xs: npt.NDArray[np.float64], us: npt.NDArray[np.float64], loose: bool, rho: float = 0.0,
                    scale: float | None = None, states: bool = False, trial: Any = None,
                    elastic: float = 0.0, curvature: bool = True, again: bool = False) -> SQPStep:
            step = builder.sqp_step(xs, us, xr, ur, pp, t0, u_prev, last[0], loose, rho, scale, states, trial,
                                    elastic, curvature, again)
            last[0] = step.qp if step.ok else None  # (a QP that failed leaves no warm start: the C's next is cold)
            return step

        result = sqp(x, u, qp_step,
                     lambda xs, us: ocp.cost(xs, us, x_ref=xr, u_ref=ur, p=pp, t0=t0, u_prev=u_prev),
                     lambda xs, us: builder.defects(xs, us, pp, t0), max_iter=max_iter, prox=prox,
                     reseed=lambda: L.unpack_w(ocp.initial_guess(x0, ur)), newton=self.sqp_hessian == "exact")
        self._guess = QPPoint(L.pack_w(result.x, result.u, self._slacks(result.x)), None, None)
        self._prepared_P = None  # a new guess: the sample's QP is built again
        # the last QP's slacks and multipliers: the next QP's warm start (a line search that failed: cold; as C)
        qp = last[0]
        self._qp_warm = qp if qp is not None and qp.status == 0 and result.status in (0, 1) else None
        self._cold = False
        return result

    def _slacks(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64] | None:
        """The OCP's one slack per soft state bound: what the states exceed it by."""
        if not self._work.layout.ns:
            return None
        j = self._work.soft_states
        xj = x[1:, j]
        return np.maximum(0.0, np.maximum(self._work.x_min[j] - xj, xj - self._work.x_max[j]))

    def _nonfinite(self, prepared: Any) -> str | None:
        """Where the prepared QP's data are not finite ("stage k" or "row r ..."), or None."""
        if isinstance(prepared, StageQP):
            assert self._stages is not None
            return self._stages.nonfinite(prepared)
        A, b, g, H = prepared
        bad = np.flatnonzero(~np.isfinite(np.asarray(b, dtype=float)))
        if bad.size:
            return self._row_name(int(bad[0]))
        finite = all(np.isfinite(np.asarray(v, dtype=float)).all() for v in (g, A.nonzeros(), H.nonzeros()))
        return None if finite else "the QP's gradient or matrices"

    def _failed(self, prepare: float, feedback: float, status: str, iterations: int, why: str) -> ControlStep:
        """A failed sample: hold the last input; the next sample starts afresh from its measured state."""
        ocp = self._work
        self._guess, self._prepared, self._prepared_P, self._qp_warm = None, None, None, None
        self._cold = True
        return ControlStep(u=np.clip(self.u_last, ocp.u_min, ocp.u_max), solve_time=feedback + prepare,
                           success=False, status=f"{status}: {why}" if status else why, iterations=iterations)

    def _initial_guess(self, x: npt.NDArray[np.float64], P: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """The first linearisation point: IPOPT's solution for this sample's data (or the OCP's cold guess)."""
        ocp = self._work
        if not self.initialize_with_ipopt:
            return ocp.initial_guess(x)
        d = ocp.layout.unpack_parameters(P)
        return ocp.solve(x, x_ref=d["x_ref"], u_ref=d["u_ref"], p=d["p"], t0=d["t0"], u_prev=d["u_prev"]).w.copy()
