"""Issue 40, the C controller: tests that catch one-line changes of its SQP the rest of the suite let through.

Each changes the iteration's path more than its fixed point (a merit, a line
search, a penalty weight), so each case is one where the path decides the
outcome, and each test pins what makes it so (a start that violates the
rows, a stale time's defects larger than the start's, a full step that
decreases nothing, a bound whose multiplier is the largest). Truth is
IPOPT on the same NLP, to 1e-12 without bound relaxation, and numbers
computed here from the problem's definition. scripts/check_mutations.py
applies each change to a copy of the repository and runs the test named
for it:

* change 1 (the merit's soft path rows with the wrong sign): a start far
  outside soft rows, IPOPT's optimum with the same rows and weights;
* change 3 (the terminal rows' right-hand side with the wrong sign): a
  curved terminal constraint met as IPOPT meets it;
* change 4 (the line search's defects at the first stage's time): a
  time-varying model from the stored guess;
* change 8 (Armijo's test with the wrong sign): a Gauss-Newton step whose
  full length decreases nothing, which the line search must cut;
* change 9 (the merit's weight without the hard state bounds'
  multipliers): against IPOPT's multiplier of an active hard state bound.
"""

from __future__ import annotations

from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.codegen import export_controller, load_controller
from support import needs_gcc

pytestmark = needs_gcc
TIGHT = {"ipopt.tol": 1e-12, "ipopt.bound_relax_factor": 0.0, "ipopt.constr_viol_tol": 1e-12}


def _agree(u: np.ndarray, truth: np.ndarray, tol: float) -> None:
    err = float(np.abs(u - truth).max() / (1.0 + np.abs(truth).max()))
    assert err < tol, err


def _controller(ocp: shooting.MultipleShootingOCP, out: Path, **kw: object) -> shooting.codegen.HostController:
    report = export_controller(ocp, out, **kw)  # type: ignore[arg-type]
    assert report.ok, report.problems
    return load_controller(out, model=ocp.model)


# ------------------------------------------------------------------------------------------------- soft path rows


def test_c_solve_from_a_violated_soft_path_row_reaches_ipopts_optimum(tmp_path: Path) -> None:
    """The cart held within |p| <= 0.1 by soft path rows (l1 1e3, l2 1), from p = 0.3 held over the horizon: the
    start violates every stage's row by 0.2, IPOPT's optimum (the same soft rows and weights) the first four, as
    it leaves (the penalty's trade-off), and none after. The SQP's steps leave the violation: its merit, which
    adds l1 e + l2 e^2 of each soft row's excess e, falls by 1e3 times what they leave; one that subtracted it
    would rise, and the line search would refuse every step."""
    model = shooting.load_model("cartpole")
    ocp = shooting.MultipleShootingOCP(model, 20, dt=0.05, Q=[3, 8, 0.2, 0.1], R=[0.03], u_min=[-40], u_max=[40],
                                       path_constraints=lambda x, u, p: ca.vertcat(x[0] - 0.1, -x[0] - 0.1),
                                       soft_path_constraints=True, slack_l1=1e3, slack_l2=1.0, solver_options=TIGHT)
    x0 = np.array([0.3, 0.0, 0.0, 0.0])
    truth = ocp.solve(x0)
    assert truth.success
    excess = np.maximum(0.0, ocp.path_values(truth.x, truth.u)).max(axis=1)
    assert (excess[:4] > 1e-3).all() and (excess[5:] < 1e-9).all(), excess  # (soft rows violated, then met)
    assert 20 * 0.2 > 5 * excess.sum()  # (the start's excess, 0.2 at every stage, is five times IPOPT's)
    ctl = _controller(ocp, tmp_path / "c", x0=np.zeros(4), name="soft")
    ctl.reset(x0)
    first = ctl.solve(x0, max_iter=1)  # its first step is taken, and leaves violation (measured 4 -> 3.57)
    assert np.maximum(0.0, ocp.path_values(first.x, first.u)).max(axis=1).sum() < 20 * 0.2 - 0.1
    ctl.reset(x0)
    res = ctl.solve(x0, max_iter=100)
    assert res.status == 0, res.message
    _agree(res.u, truth.u, 1e-6)
    np.testing.assert_allclose(np.maximum(0.0, ocp.path_values(res.x, res.u)).max(axis=1), excess, atol=1e-7)


# ------------------------------------------------------------------------------------------------ terminal rows


def _terminal(x, p):
    """The pole upright with its tip at p + 0.5 sin(theta) = 0.2: curved in theta."""
    return ca.vertcat(x[0] + 0.5 * ca.sin(x[1]) - 0.2, x[1])


def test_c_solve_meets_a_terminal_constraint_as_ipopt_does(tmp_path: Path) -> None:
    """The cart-pole from a lean, c(x_N) = 0 hard (curved): the start (held) misses it by 0.35, IPOPT's optimum
    meets it with multipliers of order one (the constraint binds: without it x_N is elsewhere). The C's QP
    linearises c about the iterate, C_N dx = -c(x_N): its SQP must end where IPOPT does, c(x_N) = 0."""
    model = shooting.load_model("cartpole")
    ocp = shooting.MultipleShootingOCP(model, 20, dt=0.05, Q=[1, 1, 0.1, 0.1], R=[0.01], u_min=[-80], u_max=[80],
                                       terminal_constraints=_terminal, solver_options=TIGHT)
    c = ca.Function("c", [model.x], [_terminal(model.x, None)])
    x0 = np.array([0.1, 0.35, 0.0, 0.0])
    truth = ocp.solve(x0)
    assert truth.success and np.abs(np.array(c(truth.x[-1]))).max() < 1e-10
    assert np.abs(truth.lam_g[-2:]).min() > 0.1  # (both rows bind)
    assert np.abs(np.array(c(x0))).max() > 0.3
    ctl = _controller(ocp, tmp_path / "c", x0=np.zeros(4), name="term")
    ctl.reset(x0)
    first = ctl.solve(x0, max_iter=1)  # one step: c(x_N) linearised and met, what its curvature leaves (7e-3)
    assert np.abs(np.array(c(first.x[-1]))).max() < 0.1 * np.abs(np.array(c(x0))).max()
    ctl.reset(x0)
    res = ctl.solve(x0, max_iter=100)
    assert res.status == 0, res.message
    assert np.abs(np.array(c(res.x[-1]))).max() < 1e-9
    _agree(res.u, truth.u, 1e-6)


# ------------------------------------------------------------------------------------------- a time-varying model

CLOCK_N, CLOCK_DT = 10, 0.1


def _clock() -> shooting.Model:
    """x' = u + sin(3 t): the dynamics move with the clock."""
    x, u, t = ca.SX.sym("x"), ca.SX.sym("u"), ca.SX.sym("t")
    return shooting.Model("clock", x, u, u + ca.sin(3 * t), t=t, x0=[1.0], u_min=[-5.0], u_max=[5.0])


def test_c_solve_of_a_time_varying_model_reaches_ipopts_optimum(tmp_path: Path) -> None:
    """From the stored guess (IPOPT's optimum at x0 = 1), solved again at x0 = 1.05: the guess's only defect is
    the first stage's, 0.05. Each stage's step is taken over its own interval, t_k = t0 + k dt: the forcing's
    integral over [t0, t0 + dt] instead differs by about 0.5 in all (computed here in closed form), ten times the
    start's defect, so a line search that evaluated its trial points at t0 would see every step, however short,
    raise the merit's defects. The SQP must end at IPOPT's optimum from x0 = 1.05."""
    ocp = shooting.MultipleShootingOCP(_clock(), CLOCK_N, dt=CLOCK_DT, Q=[5.0], R=[1.0], solver_options=TIGHT)
    t = CLOCK_DT * np.arange(CLOCK_N)
    forcing = (np.cos(3 * t) - np.cos(3 * (t + CLOCK_DT))) / 3  # int sin(3 s) ds over stage k's interval
    stale = float(np.abs(forcing[1:] - forcing[0]).sum())
    assert stale > 10 * 0.05, stale
    ctl = _controller(ocp, tmp_path / "c", x0=[1.0], name="clock")
    start = [1.05]
    truth = ocp.solve(start)
    assert truth.success and np.abs(truth.u).max() < 4.0  # (inputs inside their bounds)
    ctl.reset()
    first = ctl.solve(start, max_iter=1)
    # The dynamics are linear in (x, u): the QP is the problem itself, its step ends at the optimum and the line
    # search must take it whole (a first QP solved loosely: measured 1e-14 from IPOPT's, a step refused 3e-2).
    _agree(first.u, truth.u, 1e-6)
    ctl.reset()
    res = ctl.solve(start, max_iter=50)
    assert res.status == 0, res.message
    _agree(res.u, truth.u, 1e-8)


# --------------------------------------------------------------------------------------------------- Armijo's test

U0, R_EVEN, W_EVEN, N_EVEN = 0.04, 0.01, 1.0, 3
#: c of the residual u^2 + c: Gauss-Newton's step from U0 lands on -U0 (see the test).
C_EVEN = 3 * U0**2 + R_EVEN / (2 * W_EVEN)


def _even_cost(u: np.ndarray) -> np.ndarray:
    return W_EVEN * (u**2 + C_EVEN) ** 2 + R_EVEN * u**2


def test_c_line_search_cuts_a_full_step_that_does_not_decrease_the_merit(tmp_path: Path) -> None:
    """Each stage's cost W (u^2 + c)^2 + R u^2 (a least-squares cost and the input's weight, the reference 0) is
    even in u; its state is at rest (x' = -x from x = 0: no defects, the merit is the cost). Gauss-Newton's QP
    at U0 has Hessian 2 R + 8 W U0^2 and gradient 2 R U0 + 4 W U0 (U0^2 + c): with c = 3 U0^2 + R / (2 W) its
    step is -2 U0 exactly, to -U0, where the cost is the start's. A full step that decreases nothing fails
    Armijo's test (a decrease of at least 1e-4 of the predicted one): the line search must cut it (half of it
    is the optimum, u = 0). One that accepted it would step between U0 and -U0 for ever. The start's step,
    2 U0 = 0.08, is a small one of the trajectory's scale: the SQP takes it plainly (no proximal term)."""
    H = 2 * R_EVEN + 8 * W_EVEN * U0**2
    g = 2 * R_EVEN * U0 + 4 * W_EVEN * U0 * (U0**2 + C_EVEN)
    full = U0 - g / H
    assert full == pytest.approx(-U0, rel=1e-12)
    assert _even_cost(np.array(full)) == pytest.approx(_even_cost(np.array(U0)), rel=1e-12)  # (the case: no decrease)
    x, u = ca.SX.sym("x"), ca.SX.sym("u")
    model = shooting.Model("even", x, u, -x, x0=[0.0])
    ocp = shooting.MultipleShootingOCP(model, N_EVEN, dt=0.1, Q=[1.0], R=[R_EVEN], u_ref=[U0],
                                       stage_cost=shooting.least_squares(lambda x, u, p: u[0] ** 2 + C_EVEN, [W_EVEN]),
                                       solver_options=TIGHT)
    x0 = np.zeros(1)
    truth = ocp.solve(x0, u_ref=[0.0])
    assert truth.success
    np.testing.assert_allclose(truth.u, 0.0, atol=1e-9)
    # Gauss-Newton's Hessian in the SQP too; the export's reference U0, so that reset holds the inputs there
    ctl = _controller(ocp, tmp_path / "c", x0=x0, name="even", hessian="gauss-newton")

    def from_u0(max_iter: int) -> shooting.SQPResult:
        ctl.reset(x0)  # x = 0, u = U0 (the export's reference)
        for k in range(N_EVEN + 1):
            ctl.set_reference(k, [0.0], [0.0] if k < N_EVEN else None)  # the reference 0: the cost even in u
        return ctl.solve(x0, max_iter=max_iter)

    first = from_u0(1)
    assert first.iterations == 1
    moved = first.u.ravel() - U0
    assert (moved < 0).all() and (np.abs(moved) < 0.9 * 2 * U0).all(), first.u  # the step cut ...
    assert (_even_cost(first.u.ravel()) < _even_cost(np.array(U0)) - 1e-6).all()  # ... to a lower merit
    res = from_u0(50)
    assert res.status == 0, res.message
    np.testing.assert_allclose(res.u, truth.u, atol=1e-8)


# --------------------------------------------------------------------------------------------- the merit's weight


def test_c_merit_weight_exceeds_ipopts_multiplier_of_an_active_hard_state_bound(tmp_path: Path) -> None:
    """The cart held at |p| <= 0.25 (hard) with its reference at p = 1: at the optimum the cart rests against the
    bound, whose multiplier (IPOPT's, ~450) exceeds every other (the dynamics' ~130, the inputs' 0: inactive).
    The l1 merit is exact only with its weight above every multiplier of what it penalises (Nocedal and Wright,
    thm. 17.3), the hard bounds' included. From the stored guess (IPOPT's optimum: no earlier, larger
    multipliers in the weight) the C's SQP ends there with a weight above the bound's multiplier."""
    model = shooting.load_model("cartpole")
    Q = np.diag([3.0, 8.0, 0.2, 0.1])
    with pytest.warns(shooting.ReferenceBeyondBoundsWarning):
        ocp = shooting.MultipleShootingOCP(model, 20, dt=0.05, Q=Q, R=[0.03],
                                           Q_terminal=np.diag([300.0, 80.0, 2.0, 1.0]), x_ref=[1.0, 0.0, 0.0, 0.0],
                                           u_min=[-40.0], u_max=[40.0], x_min=[-0.25, -np.inf, -np.inf, -np.inf],
                                           x_max=[0.25, np.inf, np.inf, np.inf], x_scale=1.0, u_scale=1.0,
                                           solver_options=TIGHT)  # (unscaled: the C's multipliers are IPOPT's)
    x0 = np.array([0.25, 0.05, 0.0, 0.0])
    truth = ocp.solve(x0)
    assert truth.success
    layout, nx = ocp.layout, model.nx
    bound = float(np.abs(np.array(layout.states(truth.lam_x))[1:, 0]).max())
    others = max(float(np.abs(layout.inputs(truth.lam_x)).max()), float(np.abs(truth.lam_g[nx:]).max()))
    assert np.abs(truth.x[1:, 0]).max() > 0.25 - 1e-9  # (the bound is active)
    assert bound > 2 * others, (bound, others)  # (and its multiplier the largest)
    ctl = _controller(ocp, tmp_path / "c", x0=x0, name="nu")
    ctl.reset()  # the stored guess: IPOPT's optimum
    res = ctl.solve(x0, max_iter=50)
    assert res.status == 0, res.message
    _agree(res.u, truth.u, 1e-7)
    assert res.merit_weight >= bound, (res.merit_weight, bound, others)
