"""SQP on the stage-wise QP, globalised by an exact-penalty merit line search: the RTI iterated to convergence.

One iteration (Nocedal and Wright, Numerical Optimization, 2nd ed., alg. 18.3):
linearise at the guess w = (x, u) and solve the stage-wise QP from it (the
same QP as a real-time iteration), giving the step dw = w_qp - w; then
backtrack along dw on the l1 merit function

    phi(w) = J(w) + nu V(w),   V(w) = sum_k |x_{k+1} - F(x_k, u_k)|_1 + the hard bounds' violations,

J the OCP's objective (soft bounds' penalties included) and nu at least 1.1
times the largest multiplier of the QP's equalities (so that dw is a descent
direction of phi; nu never decreases). A step a in (0, 1] is accepted when
phi(w + a dw) <= max_j phi(w_j) - eta a pred over the last `NONMONOTONE`
iterates w_j (this one included; each phi at today's nu): the nonmonotone line
search of Grippo, Lampariello and Lucidi (SIAM J. Numer. Anal. 23, 1986),
which lets a full step through the dynamics' curvature raise phi for a few
iterations (the cart-pole swing-up from hanging: 56 -> 32 iterations; 8 of 10
random starts reach IPOPT's optimum either way), and pred = m(w) - m(w_qp) + nu V(w) >= 0 the
decrease the QP model m predicts, m(w) - m(w_qp) (m = J for a quadratic
cost; its second-order expansion for extra costs). Converged when the step and the
dynamics' defects are below the tolerances relative to the trajectory's size,
or, with an exact QP at the iterate w, when w's defects are and the QP finds
w stationary: the Lagrangian's gradient at w with the QP's multipliers,
grad L(w, lam) = -H dw exactly (the QP's own stationarity;
`shooting.qp.stage_qp_stationarity`), relative to the terms of the cost's
gradient, and the QP's predicted decrease (the complementarity of w's active
sides) relative to |J| are below the stationarity tolerance (0: the test is
off, as in float): the KKT conditions themselves, which
a step along a direction of almost no curvature (a force in newtons weighted
1e-8) can satisfy while the step itself stays above its tolerance by rounding
(a single-track vehicle: the right answer, its step stuck at 1.5e-8).
A line search that fails on a feasible iterate whose plain QP step is
within the "floor" of `SQP_TOLERANCES` (1e-6 in double) also ends converged:
a descent step that small changes the merit by less than its rounding.
A converged point is a KKT point of the OCP's NLP whatever the QP's Hessian
(Gauss-Newton here), so it equals IPOPT's solution to the tolerances.

Far from the solution the QPs are solved inexactly (an inexact Newton
method: Dembo, Eisenstat and Steihaug, SIAM J. Numer. Anal. 19, 1982): in the
first iteration and while the last step exceeded `QP_LOOSE_STEP` (relative),
an iteration's interior point stops at the relative residuals `QP_LOOSE`
(never below the QP's own tolerances, `qp_tolerances`), where the QP's last
digits do not improve a step that large. Once the steps are smaller the QPs
are solved to their own tolerances, so the SQP converges as before and to the
same point; should an inexact QP's step not descend, the iterate is taken
again with its QP, and every later one, solved exactly. (A tolerance that
shrinks with the step instead, as a forcing term, made the SQP cycle on a
problem with an active hard state bound: 16 -> 83 iterations.) The swing-up
from hanging: 265 -> 160 interior-point iterations over its cold solve.

From a fresh guess (``prox=True``: a cold solve) whose first, plain QP steps
farther than `QP_LOOSE_STEP` of the trajectory's scale (a far start), that QP
is solved again, from its own active set, with a proximal term on the inputs,
rho / 2 |u - u_w|^2 about the iterate's inputs u_w (a Levenberg-Marquardt
regularisation of the inputs' Hessian block, the proximal point damping of
Rockafellar, SIAM J. Control Optim. 14(5), 1976; acados' SQP offers it as
``levenberg_marquardt``), and so are the QPs after it while rho > 0. Far from
the solution the plain QP's inputs swing between their bounds from one
linearisation to the next (a swing-up's bang-bang arcs): the line search cuts
such steps to a quarter, and every QP's active set is new, an interior
point's dozen factorisations instead of the warm active set's one or two.
rho = `PROX_START` times the first QP's largest diagonal Hessian entry (the
cost's own scale) at first; after a full step it is multiplied by
`PROX_DOWN`, or by `PROX_FAST` where the merit fell by at least `PROX_GAIN`
of the model's prediction (a trust region's gain ratio, Nocedal and Wright,
sec. 4.1) or the step was at most `PROX_SMALL`; after a step of at most
`PROX_SHORT` that is not small by `PROX_UP` (at least `PROX_FLOOR` times its
start); below `PROX_OFF` times its start it is 0. Where the first plain QP's
state step exceeds `PROX_STATES_STEP` (20) times the trajectory's scale, the
term covers the states too until the first full step, rho / 2 |x - x_w|^2 on
x_1..x_N (`shooting.qp.with_prox`): a cold guess (the measured state at every node) is
inconsistent with the dynamics, and on an unstable plant the inputs' term
alone leaves the QP's states to the linearised dynamics, which amplify the
step (the double pendulum on a cart from a fall: its first QP moved the angles
by 66 rad; the merit's weight followed the multipliers to 2e8 and the line
search failed); a full step is the first sign that the model holds, so the
inputs' term goes on alone. The step and stationarity
tests apply to the plain QP only (a small proximal step ends the term first),
so the SQP ends at a KKT point as before. The cart-pole's 22 far starts (the
C, host): exact Hessian, double, 3708 -> 1321 interior-point iterations, all
22 converged either way, the longest 133 -> 110 SQP iterations; Gauss-Newton,
float, 3831 -> 1519, the same 19 converged. A near start (from IPOPT's
optimum) keeps plain QPs.

The exported C runs the same iteration (``NAME_mpc_solve``); `SQPResult`
is what both report.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from shooting.mpc.sqp_result import SQPResult, SQPStep

__all__ = ["ARMIJO", "COLD_START_ITERATIONS", "CURVATURE_STEP", "ELASTIC_START", "ELASTIC_STEER", "ELASTIC_TRIES",
           "POLISH_ITERATIONS",
           "MAX_SQP_ITERATIONS", "MIN_STEP", "NONMONOTONE", "PENALTY_DECREASE",
           "PROX_DOWN", "PROX_MAX", "RESEED_STEP",
           "PROX_FAST", "PROX_FLOOR", "PROX_GAIN", "PROX_OFF", "PROX_SHORT", "PROX_SMALL", "PROX_START",
           "PROX_STATES_STEP", "PROX_UP",
           "QP_LOOSE", "QP_LOOSE_STEP", "SOC", "SQP_ROUNDING", "SQP_STATUS", "SQP_TOLERANCES", "STALL",
           "WATCHDOG_DECREASE",
           "SQPResult", "SQPStep", "merit_noise", "next_prox", "qp_tolerances", "sqp"]

FloatArray = npt.NDArray[np.float64]

#: Statuses of an SQP run in Python. (Not the C's: its NAME_MPC_* codes say the iteration limit with 8, the line
#: search with 9, a failed QP with the QP's own code; issue 38 asks for one table of both.)
SQP_STATUS = {0: "converged", 1: "iteration limit", 2: "QP failed", 3: "line search failed"}

#: Step and defect tolerances, relative to 1 + the trajectory's largest entry. "floor": a plain QP's step (relative)
#: up to which a line search that fails on a feasible iterate (defects within tolerance) ends converged, not failed:
#: near a stationary point a descent step s changes the merit by O(s^2), below its rounding (1e-14 relative) for s
#: under about 1e-7, so the merit cannot verify it. Gauss-Newton's steps shrink linearly and reached it next to
#: IPOPT's optimum: do-mpc's double pendulum (step 1.1e-7, inputs 2e-8 of their range from IPOPT's) and table 9's
#: cart-pole start 0 (1.4e-7, 3e-17 defects) ended in "line search failed". Likewise where the QP model's predicted
#: decrease of the merit is below the merit's own rounding (`merit_noise`: nu V's, from the defects' rounding, is
#: the larger near a solution): TUM's single-track vehicle, its force weighted 1e-8, ended with the QP predicting
#: 2e-11 against a rounding of 1e-9 (inputs 1e-8 of their range from IPOPT's). Float's floor is 0 (off:
#: FLOOR_STALL), its merit's rounding ("rounding", `SQP_ROUNDING`) 1e-6: a float line search that stalls below it
#: next to a KKT point ends converged too (a planar quadrotor past an obstacle: "line search failed" at sample 0
#: with its prediction 8e-8 of the range from IPOPT's).
#: The stationarity test is double's only (0: off): a float QP holds an active bound mu / lam inside it, an error
#: H dw does not see (the planar quadrotor past its obstacle: stationarity 5e-7 where the inputs were still 5e-3
#: of their range from IPOPT's, against 7e-4 when the step test ends it).
SQP_TOLERANCES = {"double": {"step": 1e-8, "defect": 1e-9, "stationarity": 1e-10, "floor": 1e-6, "rounding": 1e-14},
                  "float": {"step": 2e-5, "defect": 2e-5, "stationarity": 0.0, "floor": 0.0, "rounding": 1e-6}}

#: Armijo's sufficient-decrease fraction, the backtracking factor, the smallest step, and the merit's rounding
#: (relative) the test forgives.
ARMIJO, BACKTRACK, MIN_STEP = 1e-4, 0.5, 1.0 / 1024
#: How many iterates' merits the nonmonotone line search compares with (1: the monotone Armijo rule).
NONMONOTONE = 5
#: The watchdog: after STALL iterations without phi falling below its best by WATCHDOG_DECREASE (relative), the
#: line search is monotone (see `sqp`). In float 100 times the merit's rounding (`SQP_ROUNDING`): at 1e-6 the
#: rounding alone made the planar quadrotor's cold solve monotone early: 165 iterations, stopping 4.6e-3 of an
#: input's range from IPOPT's optimum, against 56 and 7e-4 with this.
STALL, WATCHDOG_DECREASE = 20, {"double": 1e-6, "float": 1e-4}
SQP_ROUNDING = {"double": 1e-14, "float": 1e-6}
ROUNDING = SQP_ROUNDING["double"]

#: Inexact SQP: the relative residuals an iteration's QP stops at while the steps are larger than
#: QP_LOOSE_STEP (see the module's docstring and `qp_tolerances`).
QP_LOOSE = {"tol_stat": 1e-4, "tol_eq": 1e-6, "tol_mu": 1e-6}
QP_LOOSE_STEP = 0.1

#: The proximal term on the inputs of a cold solve's QPs (see the module's docstring): its start relative to the
#: QP's largest diagonal Hessian entry, its factor after a full step, after a short one (at most PROX_SHORT), its
#: floor when raised, and where it ends (both relative to the start). On the cart-pole's far starts a start of
#: 3e-3 to 3e-2 did alike; raising it back to the start itself after a short step (no floor) made it cycle near
#: the solution (one start of 22 at the iteration limit).
PROX_START, PROX_DOWN, PROX_UP, PROX_SHORT, PROX_FLOOR, PROX_OFF = 1e-2, 0.5, 4.0, 0.25, 0.1, 1e-4
#: After a full step whose merit fell by at least PROX_GAIN of the QP model's prediction (the model holds: a
#: trust region's gain ratio, Nocedal and Wright, sec. 4.1), or one of at most PROX_SMALL (relative: where the
#: ratio is rounding's), the proximal term shrinks by PROX_FAST instead.
PROX_GAIN, PROX_SMALL, PROX_FAST = 0.9, 1e-2, 0.1
#: The proximal term's largest weight (relative, as PROX_START): raised without bound after every short step, it
#: reached 4e4 times the cost's scale on the double pendulum from a fall, its QPs' multipliers 1e11 and the merit's
#: weight with them.
PROX_MAX = 100.0
#: A cold solve's first QP whose step exceeds this (relative) tries the guess held at the measured state too.
RESEED_STEP = 0.1
#: The Lagrangian's curvature (an exact Hessian's) at the last QP's multipliers enters a QP only where that QP's
#: step, before the line search, was at most this (relative): far from a solution its multipliers are not the
#: solution's (two_link_arm from the stored swing-up guess: 1.2e4, the next QP's step 25 with multipliers 9e7).
CURVATURE_STEP = 0.1
#: An exact SQP that ends at its stationarity test, or at the merit's resolution, with its last QP step above the
#: step tolerance goes on with Gauss-Newton's QPs (curvature off) for at most this many iterations, to the step
#: tolerance: an exact Hessian made positive definite by its active inputs' stiffness (100 times the cost-to-go's
#: blocks, `shooting.mpc.reduced_convexity`) leaves its QP's interior point 1e-7 inside an active bound and its
#: stationarity test relative to those blocks (the cart-pole with a soft power limit, every problem class at once:
#: inputs 2.6e-4 from IPOPT's at tol 1e-12 where Gauss-Newton's QPs, a few more iterations, end 1.5e-7 from them).
#: Where they do not reach it (a Gauss-Newton stall) the SQP ends converged there all the same: its exact end was a
#: KKT point to its tolerances.
POLISH_ITERATIONS = 10
#: The proximal term covers the states as well, until the first full step, where the first plain QP's state step
#: exceeds this (relative to the trajectory's scale; inf: never): a linear model that predicts an excursion of 20
#: times the trajectory's size is meaningless there (see the module's docstring). The built-in double pendulum's 10
#: starts about its scenario's (the states' spread 0.3 (1 + |x0|), seed 23): 39 to 61 at the 4 that failed, 1.1
#: to 9 at the others; the cart-pole's 44 far starts of two seeds at most 9.8, the quadrotor's at most 3.3. On every
#: far start instead, the cart-pole lost one of 88 (seed 7's start 14, to the iteration limit: any state term in
#: its first QPs, even a tenth of the weight, led it elsewhere); for the whole solve, do-mpc's swing-up from
#: hanging needed 1000+ SQP iterations instead of 342.
PROX_STATES_STEP = 20.0

#: The elastic QP (Fletcher's Sl1QP; SNOPT's elastic mode): where an iteration's QP cannot meet its hard rows
#: (state bounds, hard path and terminal constraints: its linearisation at a poor iterate is infeasible, not the
#: NLP), it is solved again with each hard row's violation priced at a weight (`shooting.qp.StageQP.elastic`):
#: the QP is then always feasible and its step descends on the l1 merit at that weight. The weight starts at the
#: merit's and at least ELASTIC_START times 1 + the cost gradient's largest entry (a hard row's multiplier where it
#: binds is of that size), and is raised by ELASTIC_STEER, at most ELASTIC_TRIES times, while that more than halves
#: the linearised violation (Byrd, Nocedal and Waltz's steering, SIAM J. Optim. 19, 2008, simplified). An elastic
#: step that vanishes with the violation positive is a stationary point of the merit where the NLP's hard rows are
#: locally infeasible: status 2, `SQPResult.infeasibility` the largest violation.
ELASTIC_START, ELASTIC_STEER, ELASTIC_TRIES = 10.0, 100.0, 2
#: The second-order correction of a full step the merit refuses (see `_line_search`).
SOC = True
#: The merit's weight may decrease (Powell's rule, see `_merit_weight`): a far start's QPs have multipliers many
#: orders above the solution's (the double pendulum on a cart: 1e7 to 6e9 against 1e4), and a weight that kept
#: them made the merit measure feasibility alone.
PENALTY_DECREASE = True

#: The cold start's iteration limit (RTIController and the C's first feedback), and the most of any solve.
COLD_START_ITERATIONS, MAX_SQP_ITERATIONS = 100, 1000


def qp_tolerances(loose: bool, tight: dict[str, float]) -> dict[str, float]:
    """An SQP iteration's QP tolerances: ``max(tight, QP_LOOSE)`` each when `loose`, else `tight`.

    Parameters
    ----------
    loose : bool
        Whether the QP may be solved inexactly (the first iteration, or a last step above `QP_LOOSE_STEP`).
    tight : dict
        The QP's own tolerances (``tol_stat``, ``tol_eq``, ``tol_mu``).
    """
    return {key: max(value, QP_LOOSE[key]) if loose else value for key, value in tight.items()}


def next_prox(rho: float, alpha: float, held: bool, small: bool) -> float:
    """The proximal term's next relative weight after a step of length `alpha` (of the QP's step); `held`: the
    merit fell by at least `PROX_GAIN` times the QP model's prediction; `small`: the QP's step was at most
    `PROX_SMALL` (see the module's docstring)."""
    if alpha == 1.0:
        rho *= PROX_FAST if held or small else PROX_DOWN
        return 0.0 if rho < PROX_OFF * PROX_START else rho
    if alpha <= PROX_SHORT and not small:
        return min(max(PROX_UP * rho, PROX_FLOOR * PROX_START), PROX_MAX)
    return rho


def merit_noise(J: float, nu: float, x: FloatArray, rounding: float = ROUNDING) -> float:
    """The l1 merit's rounding at an iterate: J's, ``rounding (1 + |J|)``, and that of nu V, whose defects
    x_{k+1} - F(x_k, u_k) each carry the rounding of |x_{k+1}|: ``rounding nu sum_k |x_{k+1}|_1`` (`rounding`:
    `SQP_ROUNDING` of the precision)."""
    return rounding * (1.0 + abs(J) + nu * float(np.abs(x[1:]).sum()))


def _first_qp(qp_step: Callable[..., SQPStep], s: _Iterate, loose: bool,
              reseed: Callable[[], tuple[FloatArray, FloatArray]] | None) -> SQPStep:
    """A fresh guess's first QP, plain; for a far start (its step above `QP_LOOSE_STEP` of the trajectory's scale)
    solved again with the proximal term at `PROX_START` (its scale this QP's; ``s.damp``: the term's rule applies;
    ``s.states``: the term covers the states too, where the plain QP's state step is above `PROX_STATES_STEP`). A
    plain QP that cannot meet its hard rows, or whose iterates diverge, is a far start's too, the states' term
    included. Where the guess is that far off (its QP unsolved, or its step beyond `RESEED_STEP`), the iteration
    goes on from `reseed` (a guess held at the measured state) instead, where that guess's QP is solved: a
    trajectory stored for another state is inconsistent with the dynamics from this one; on an unstable plant its
    linearisation predicts an excursion no row can hold (the double pendulum on a cart fallen, about its upright
    guess: states 1e5 times the cart's bound, multipliers 1e12), and where its QP solves it leads the iteration
    through another manoeuvre's basin (the cart-pole with the pole at -3.06 rad from the swing-up stored for +pi:
    298 iterations against 14 held; two_link_arm near rest from its swing-up: 4 of 12 failed, none held). Measured
    on far starts of the built-in models, choosing by the first QP's step or its predicted cost instead kept the
    stored guess in those cases."""
    qp, state_step, step = _plain(qp_step, s.x, s.u, loose)
    if reseed is not None and (not qp.ok or step > RESEED_STEP):
        x, u = reseed()
        if not (np.array_equal(x, s.x) and np.array_equal(u, s.u)):  # (already held: nothing else to try)
            held, held_state, held_step = _plain(qp_step, x, u, loose)
            if held.ok:
                s.x, s.u, qp, state_step, step = x, u, held, held_state, held_step
            else:  # (the guess's QP again: what the C, which solves in place, does)
                qp, state_step, step = _plain(qp_step, s.x, s.u, loose)
    s.damp = PROX_START > 0 and ((qp.ok and step > QP_LOOSE_STEP) or qp.status in (2, 5))
    s.states = s.damp and bool(not qp.ok or state_step > PROX_STATES_STEP)
    s.rho = PROX_START if s.damp else 0.0
    return qp_step(s.x, s.u, loose, PROX_START, None, s.states) if s.damp else qp


def _plain(qp_step: Callable[..., SQPStep], x: FloatArray, u: FloatArray, loose: bool
           ) -> tuple[SQPStep, float, float]:
    """The plain QP at (x, u), its state step and its whole step (relative to the trajectory's scale)."""
    scale = 1.0 + max(np.abs(x).max(initial=0.0), np.abs(u).max(initial=0.0))
    qp = qp_step(x, u, loose, 0.0, None)
    if not qp.ok:
        return qp, np.inf, np.inf
    state_step = float(np.abs(qp.x - x).max(initial=0.0)) / scale
    return qp, state_step, max(state_step, float(np.abs(qp.u - u).max(initial=0.0)) / scale)


def _watchdog(best: tuple[float, float] | None, stall: int, history: deque[tuple[float, float]], J: float, V: float,
              nu_pen: float) -> tuple[tuple[float, float], int, deque[tuple[float, float]]]:
    """`sqp`'s watchdog: the best (J, V) so far, the iterations since, and the line search's history with (J, V)
    appended (of length 1, monotone, once `STALL` iterations brought no decrease by WATCHDOG_DECREASE)."""
    phi = J + nu_pen * V
    if best is None or phi < best[0] + nu_pen * best[1] - WATCHDOG_DECREASE["double"] * (1.0 + abs(phi)):
        best, stall = (J, V), 0
    else:
        stall += 1
        if stall >= STALL and history.maxlen != 1:
            history = deque(maxlen=1)
    history.append((J, V))
    return best, stall, history


@dataclass
class _Iterate:
    """`sqp`'s state between iterations (see its body)."""

    x: FloatArray
    u: FloatArray
    nu: float = 0.0  # the l1 merit's weight
    step: float = np.inf  # the last QP's step (relative), times the line search's length
    stationarity: float = np.inf
    exact: bool = False  # the QPs exact for good (an inexact QP's step did not descend)
    rho: float = 0.0  # the proximal term's weight (relative)
    damp: bool = False  # its rule applies (a far start's)
    states: bool = False  # the term on the states too (until the first full step)
    prox_scale: float | None = None
    proposed: float = np.inf  # the last QP's step before the line search (relative)
    newton: bool = False  # the QPs' Hessian is the Lagrangian's (see `sqp`)
    curved: bool = False  # this iteration's QP carries the curvature
    polish: int = -1  # Gauss-Newton iterations after an exact end (see POLISH_ITERATIONS; -1: none yet)
    elastic: float = 0.0  # the last QP's elastic weight (0: not elastic)
    violation: float = 0.0  # its hard rows' linearised violation at its solution (l1)


def _elastic_weight(it: _Iterate, qp: SQPStep) -> float:
    """The first elastic weight of an iteration whose QP cannot meet its hard rows: above the merit's weight and
    `ELASTIC_START` times the cost gradient's scale (the size a hard row's multiplier has where the rows bind)."""
    return max(it.nu, ELASTIC_START * (1.0 + qp.gradient))


def _solve_qp(state: _Iterate, k: int, qp_step: Callable[..., SQPStep], loose: bool, prox: bool,
              reseed: Callable[[], tuple[FloatArray, FloatArray]] | None) -> SQPStep:
    """Iteration k's QP: plain, or with the proximal term (a cold solve's, see the module docstring); where it
    cannot meet its hard rows (infeasible), elastic (see `ELASTIC_START`): its weight raised by `ELASTIC_STEER`
    while that more than halves the hard rows' linearised violation, at most `ELASTIC_TRIES` times."""
    if prox and k == 0:
        qp = _first_qp(qp_step, state, loose, reseed)
    else:
        state.curved = _curved(state)
        qp = _call(qp_step, prox, state, loose)
        if state.curved and not qp.ok and qp.status in (3, 4, 5):
            # the Lagrangian's curvature at these multipliers made the QP fail (not convex after the
            # regularisation, or its iterates overflowed: multipliers of 3e8 on the double pendulum fallen):
            # this iteration's QP Gauss-Newton's
            state.curved = False
            qp = _call(qp_step, prox, state, loose, curvature=False)
    state.elastic, state.violation = 0.0, 0.0
    if qp.ok or qp.status != 2:
        return qp
    weight = _elastic_weight(state, qp)
    qp = _call(qp_step, prox, state, loose, elastic=weight, again=True)
    for _ in range(ELASTIC_TRIES):
        if not qp.ok or qp.violation <= 0.0:
            break
        more = _call(qp_step, prox, state, loose, elastic=ELASTIC_STEER * weight, again=True)
        if not (more.ok and more.violation < 0.5 * qp.violation):
            break
        qp, weight = more, ELASTIC_STEER * weight
    state.elastic, state.violation = (weight, qp.violation) if qp.ok else (0.0, 0.0)
    return qp


def _curved(state: _Iterate) -> bool:
    """Whether the next QP carries the Lagrangian's curvature: with an exact Hessian after a QP step of at most
    `CURVATURE_STEP`."""
    return state.newton and state.polish < 0 and state.proposed <= CURVATURE_STEP


def _call(qp_step: Callable[..., SQPStep], prox: bool, state: _Iterate, loose: bool, **extra: object) -> SQPStep:
    """`qp_step` at the iterate (with `prox`, the proximal term's arguments)."""
    extra.setdefault("curvature", _curved(state) or not state.newton)
    if prox:
        return qp_step(state.x, state.u, loose, state.rho, state.prox_scale, state.states, **extra)
    return qp_step(state.x, state.u, loose, **extra)


def _infeasibility(x: FloatArray, u: FloatArray, defects: Callable[[FloatArray, FloatArray], FloatArray]) -> float:
    """The largest violation of a hard row (bounds, path and terminal constraints) at (x, u): `defects` after the
    dynamics' (N nx entries)."""
    n = (x.shape[0] - 1) * x.shape[1]
    return float(np.abs(defects(x, u)[n:]).max(initial=0.0))


def sqp(x: FloatArray, u: FloatArray, qp_step: Callable[..., SQPStep],
        objective: Callable[[FloatArray, FloatArray], float],
        defects: Callable[[FloatArray, FloatArray], FloatArray], *, max_iter: int = 50,
        tolerances: dict[str, float] | None = None, prox: bool = False,
        reseed: Callable[[], tuple[FloatArray, FloatArray]] | None = None, newton: bool = False) -> SQPResult:
    """Iterate from the guess (x, u) (x[0] the measured state) to a KKT point.

    Parameters
    ----------
    x, u : ndarray, shapes (N+1, nx), (N, nu)
    qp_step : callable ``(x, u, loose, *, trial=None, elastic=0.0, curvature=True, again=False) -> SQPStep``,
              with `prox` ``(x, u, loose, rho, scale, states, *, ...) -> SQPStep``
        Linearise at (x, u) and solve the QP from there, to the tolerances ``qp_tolerances(loose, ...)``; with
        ``rho > 0`` its cost has ``rho scale / 2 |u - u_w|^2`` added, u_w the iterate's inputs (`states`: and
        ``rho scale / 2 |x - x_w|^2``, x_1..x_N); `scale` None
        (the first QP): the QP's own largest diagonal Hessian entry, returned as the step's ``hessian_scale``
        and passed to every later QP (the first QP's, Gauss-Newton's: later ones may hold curvature).
        ``trial`` (x_t, u_t): the second-order correction of the QP for that trial point (its constraints shifted
        by their linearisation's error there); ``elastic`` > 0: the QP elastic at that weight
        (`shooting.qp.StageQP.elastic`); ``curvature`` False: without the Lagrangian's curvature (see
        `CURVATURE_STEP`); ``again``: the QP last built at (x, u) solved again (elastic).
    objective : callable ``(x, u) -> float``
        The OCP's objective J.
    defects : callable ``(x, u) -> ndarray``
        The constraints' violations: x_{k+1} - F(x_k, u_k) (the first N nx entries), then by how much the hard
        rows (bounds, path and terminal constraints) are exceeded.
    max_iter : int
    tolerances : dict, optional
        ``step``, ``defect``, ``stationarity`` (default `SQP_TOLERANCES["double"]`).
    prox : bool
        A proximal term on the inputs (from a fresh guess: see the module's docstring).
    reseed : callable ``() -> (x, u)``, optional
        With `prox`: a guess held at the measured state, taken where the given guess's first QP is far off
        (see `_first_qp`).
    newton : bool
        The QPs carry the Lagrangian's curvature (an exact Hessian): its line search corrects a refused full
        step to second order (`SOC`) and the merit's weight may fall (`PENALTY_DECREASE`). Gauss-Newton's steps
        converge linearly, at a rate above 1 where the multipliers are large, and both then let such steps
        through (the cart-pole's 22 far starts: 21 converged without, 18 with either).

    Returns
    -------
    SQPResult
    """
    tol = {**SQP_TOLERANCES["double"], **(tolerances or {})}
    best: tuple[float, float] | None = None  # (J, V) of the lowest phi so far, and the iterations since
    stall = 0
    s = _Iterate(np.array(x, dtype=float), np.array(u, dtype=float), newton=newton)
    history: deque[tuple[float, float]] = deque(maxlen=NONMONOTONE)  # (J, V) of the last NONMONOTONE iterates

    def result(k: int, status: int, message: str = "", at: tuple[FloatArray, FloatArray] | None = None
               ) -> SQPResult:
        xs, us = (s.x, s.u) if at is None else at
        return SQPResult(xs, us, k, status, s.step, defect, message, s.nu, s.stationarity,
                         _infeasibility(xs, us, defects))

    for it in range(max_iter + 1):
        scale, defect = _measured(s, defects)
        if s.step <= tol["step"] and s.elastic > 0 and s.violation > 0 and defect > tol["defect"]:
            # a stationary point of the merit at which the hard rows' linearisation cannot be met: the NLP is
            # locally infeasible (the elastic QP's step vanishes with its slacks positive)
            return result(it, 2, f"infeasible: the hard rows cannot be met near this point (violated by up to "
                                 f"{_infeasibility(s.x, s.u, defects):.3g})")
        if s.step <= tol["step"] and defect <= tol["defect"]:
            if s.rho == 0.0:
                return result(it, 0)
            s.rho = 0.0  # (a small proximal step: the plain QP decides)
        if _polished(s):  # (the exact end stands: see POLISH_ITERATIONS)
            return result(it, 0)
        if it == max_iter:
            return result(it, 1, SQP_STATUS[1])
        loose = not s.exact and s.step > QP_LOOSE_STEP
        qp = _solve_qp(s, it, qp_step, loose, prox, reseed)
        if not qp.ok:
            return result(it, 2, f"{SQP_STATUS[2]}: {qp.message}")
        if it == 0:  # (the first QP may have re-seeded the guess)
            scale, defect = _measured(s, defects)
        dx, du = qp.x - s.x, qp.u - s.u
        if prox and s.prox_scale is None:
            s.prox_scale = qp.hessian_scale
        s.step = s.proposed = max(np.abs(dx).max(initial=0.0), np.abs(du).max(initial=0.0)) / scale
        s.nu = _merit_weight(s.nu, qp.multiplier, s.elastic, s.newton)
        V = float(np.abs(defects(s.x, s.u)).sum())
        J = objective(s.x, s.u)
        if not loose and tol["stationarity"] > 0 and s.rho == 0.0 and s.elastic == 0.0:
            s.stationarity = qp.stationarity
            if s.stationarity <= tol["stationarity"] and defect <= tol["defect"] and \
                    abs(qp.model_decrease) <= tol["stationarity"] * (1.0 + abs(J)):
                # (the full step, a Newton step from a KKT point to the tolerances: the QP's solution, which a
                # feedback at this state solves for again)
                if not _polish(s, tol):
                    return result(it + 1, 0, at=(qp.x, qp.u))
                s.x, s.u = qp.x, qp.u
                continue
        phi = J + s.nu * V
        # The watchdog (Chamberlain, Powell, Lemarechal and Pedersen, Math. Prog. Study 16, 1982, in the
        # nonmonotone form of Grippo et al.): once phi has not fallen below its best by WATCHDOG_DECREASE
        # (relative) for STALL iterations, the line search turns monotone for good. The nonmonotone reference can
        # otherwise keep accepting a cycle of full steps near the optimum (the cart-pole from table 9's start 0:
        # 300 iterations with its cost within 0.6 % of IPOPT's and defects of 1e-3 to 4e-2).
        best, stall, history = _watchdog(best, stall, history, J, V, s.nu)
        reference = max(Jh + s.nu * Vh for Jh, Vh in history)
        # the decrease the QP's model predicts: of J, and of nu V to the elastic rows' linearised violation
        pred = max(qp.model_decrease + s.nu * (V - s.violation), 0.0)
        found = _line_search(s, qp, qp_step, prox, loose, objective, defects, reference, pred, phi)
        if found is None:  # (no step of at least MIN_STEP descends)
            if s.step <= tol["step"]:  # a step at the precision's floor: as converged as it gets
                found = (MIN_STEP, s.x + MIN_STEP * dx, s.u + MIN_STEP * du, phi)
            elif loose:  # an inexact QP's step that does not descend: again, exactly from now on
                s.exact = True
                continue  # (this iterate again)
            elif s.rho == 0.0 and s.elastic == 0.0 and defect <= tol["defect"] and (
                    s.step <= tol["floor"] or pred <= merit_noise(J, s.nu, s.x, tol["rounding"])):
                if not _polish(s, tol):
                    return result(it, 0)  # (the merit's resolution: see SQP_TOLERANCES; w stays, converged)
                continue  # (this iterate again)
            else:
                return result(it, 3, f"{SQP_STATUS[3]} (merit {phi:.6g})")
        alpha, s.x, s.u, phi_t = found
        if s.damp:
            s.rho = next_prox(s.rho, alpha, pred > 0 and phi - phi_t >= PROX_GAIN * pred, s.step <= PROX_SMALL)
            s.states = s.states and alpha < 1.0
        s.step *= alpha
    raise AssertionError("unreachable")  # pragma: no cover


def _measured(s: _Iterate, defects: Callable[[FloatArray, FloatArray], FloatArray]) -> tuple[float, float]:
    """The iterate's scale, 1 + its largest entry, and its defects' largest relative to it."""
    scale = 1.0 + max(np.abs(s.x).max(initial=0.0), np.abs(s.u).max(initial=0.0))
    return scale, float(np.abs(defects(s.x, s.u)).max(initial=0.0)) / scale


def _polished(s: _Iterate) -> bool:
    """Counts a polishing iteration (see `POLISH_ITERATIONS`); whether they are all spent."""
    if s.polish >= 0:
        s.polish += 1
    return s.polish > POLISH_ITERATIONS


def _polish(s: _Iterate, tol: dict[str, float]) -> bool:
    """At an exact SQP's end short of the step tolerance, whether it goes on with Gauss-Newton's QPs (see
    `POLISH_ITERATIONS`); counts those iterations."""
    if not s.newton or s.polish >= 0 or s.proposed <= tol["step"] or not s.curved:
        return False
    s.polish = 0
    return True


def _merit_weight(nu: float, multiplier: float, elastic: float, newton: bool) -> float:
    """The l1 merit's weight after a QP whose largest multiplier is `multiplier` (an elastic QP's weight
    `elastic`): at least 1.1 times it (its step then descends on the merit: Nocedal and Wright, thm. 18.2) and the
    elastic weight; with `PENALTY_DECREASE` and `newton` it may fall, halfway to that at a time (Powell's rule,
    Math. Prog. 14, 1978, sec. 3), else it never decreases."""
    floor = max(1.1 * multiplier, elastic)
    return max(floor, 0.5 * (nu + floor)) if PENALTY_DECREASE and newton else max(nu, floor)


def _line_search(s: _Iterate, qp: SQPStep, qp_step: Callable[..., SQPStep], prox: bool, loose: bool,
                 objective: Callable[[FloatArray, FloatArray], float],
                 defects: Callable[[FloatArray, FloatArray], FloatArray], reference: float, pred: float,
                 phi: float) -> tuple[float, FloatArray, FloatArray, float] | None:
    """The step along the QP's (alpha, x, u, phi there) that the nonmonotone Armijo test accepts, or None.

    A full step that fails it is first corrected (`SOC`: the second-order correction, Nocedal and Wright,
    sec. 15.5 and 18.3: the QP again with its constraints shifted by their linearisation's error at the trial
    point, c(w + d) - J d in place of c(w), which removes the second-order growth of the defects that makes an
    l1 merit refuse a Newton step near a solution, the Maratos effect); taken when the test accepts it."""
    dx, du = qp.x - s.x, qp.u - s.u
    slack = ROUNDING * (1.0 + abs(phi))  # (rounding in phi itself, so that a step at the precision's floor passes)

    def merit(xt: FloatArray, ut: FloatArray) -> float:
        return objective(xt, ut) + s.nu * float(np.abs(defects(xt, ut)).sum())

    alpha = 1.0
    while alpha >= MIN_STEP:
        xt, ut = s.x + alpha * dx, s.u + alpha * du
        phi_t = merit(xt, ut)
        if np.isfinite(phi_t) and phi_t <= reference - ARMIJO * alpha * pred + slack:
            return alpha, xt, ut, phi_t
        if alpha == 1.0 and SOC and s.newton:
            corrected = _call(qp_step, prox, s, loose, trial=(xt, ut), elastic=s.elastic)
            if corrected.ok:
                phi_c = merit(corrected.x, corrected.u)
                if np.isfinite(phi_c) and phi_c <= reference - ARMIJO * pred + slack:
                    return 1.0, corrected.x, corrected.u, phi_c
        alpha *= BACKTRACK
    return None
