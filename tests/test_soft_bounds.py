"""Soft state bounds: x_min - s <= x_k <= x_max + s, s >= 0, cost slack_l1 sum(s) + slack_l2 sum(s^2).

Independent truths: a start outside the bounds is infeasible hard and solvable
soft; the optimal slack is the smallest one (max(0, x - x_max, x_min - x));
its multiplier obeys the slack's stationarity, lambda = l1 + 2 l2 s (which
tells l1 from l2); with a large l1 the exact penalty returns the hard
solution; one RTI step at the NLP's optimum returns that optimum.
"""

from __future__ import annotations

import numpy as np
import pytest

import shooting
from shooting.mpc.layout import ShootingLayout

INF = np.inf
Q = [1e3, 1e3, 1e-2, 1e-2]


@pytest.fixture(scope="module")
def cartpole() -> shooting.Model:
    return shooting.load_model("cartpole")


def _ocp(model: shooting.Model, **kw: object) -> shooting.MultipleShootingOCP:
    opts: dict[str, object] = dict(dt=0.05, Q=Q, R=[1e-2], x_min=[-0.5, -INF, -INF, -INF],
                                   x_max=[0.5, INF, INF, INF], solver_options={"ipopt.tol": 1e-10})
    opts.update(kw)
    return shooting.MultipleShootingOCP(model, 15, **opts)  # type: ignore[arg-type]


def test_layout_places_slacks_after_the_trajectory_and_soft_rows_last() -> None:
    L = ShootingLayout(3, 2, 1, 0, ns=1)
    assert L.n_w == 4 * 2 + 3 * 1 + 3 * 1
    assert L.s_idx.ravel().tolist() == [11, 12, 13]
    assert L.n_g == 2 + 3 * 2 + 2 * 3
    assert L.soft_lo_idx.ravel().tolist() == [8, 10, 12] and L.soft_hi_idx.ravel().tolist() == [9, 11, 13]
    w = np.arange(L.n_w, dtype=float)
    shifted = L.shift_w(w)
    assert shifted[L.s_idx].ravel().tolist() == [12, 13, 13]
    lam = np.arange(L.n_g, dtype=float)
    assert L.shift_g(lam)[L.soft_hi_idx].ravel().tolist() == [11, 13, 13]


def test_start_outside_the_bounds_is_infeasible_hard_and_solved_soft(cartpole: shooting.Model) -> None:
    x0 = [0.8, 0.2, 0.0, 0.0]  # p = 0.8 > 0.5: x_1 cannot be back inside
    hard = _ocp(cartpole).solve(x0)
    soft_ocp = _ocp(cartpole, soft_x_bounds=True)
    soft = soft_ocp.solve(x0)
    assert not hard.success
    assert soft.success, soft.status
    # The slack is the smallest that makes each state feasible, and positive where p > 0.5.
    s = soft.slacks[:, 0]
    np.testing.assert_allclose(s, np.maximum(0.0, np.abs(soft.x[1:, 0]) - 0.5), atol=1e-7)
    assert s[0] > 0.1
    # The cost is the tracking cost plus l1 sum(s) + l2 sum(s^2), computed here independently.
    tracking = sum(float(x @ np.diag(Q) @ x) for x in soft.x) + 1e-2 * float(np.sum(soft.u ** 2))
    np.testing.assert_allclose(soft.cost, tracking + 1e3 * s.sum() + 1e2 * np.sum(s ** 2), rtol=1e-9)
    np.testing.assert_allclose(soft_ocp.cost(soft.x, soft.u), soft.cost, rtol=1e-7)


@pytest.mark.parametrize(("l1", "l2"), [(1e3, 1e2), (50.0, 7e3)])
def test_slack_multiplier_obeys_stationarity(cartpole: shooting.Model, l1: float, l2: float) -> None:
    ocp = _ocp(cartpole, soft_x_bounds=True, slack_l1=l1, slack_l2=l2)
    sol = ocp.solve([0.8, 0.2, 0.0, 0.0])
    assert sol.success
    s = sol.slacks[:, 0]
    active = s > 1e-4
    assert active.sum() >= 2
    # d/ds [l1 s + l2 s^2 - lam (x - s - x_max)] = 0 on the upper rows: |lam| = l1 + 2 l2 s.
    lam = np.abs(sol.lam_g[ocp.layout.soft_hi_idx[:, 0]])
    np.testing.assert_allclose(lam[active], l1 + 2 * l2 * s[active], rtol=1e-6)


def test_exact_penalty_returns_the_hard_solution_when_it_is_feasible(cartpole: shooting.Model) -> None:
    x0 = [0.0, np.pi, 0.0, 0.0]  # swing-up: the bound |p| <= 0.5 is active on the hard solution
    hard = _ocp(cartpole).solve(x0)
    soft = _ocp(cartpole, soft_x_bounds=True, slack_l1=1e6).solve(x0)
    assert hard.success and soft.success
    assert np.max(np.abs(hard.x[:, 0])) > 0.5 - 1e-6  # the bound binds
    np.testing.assert_allclose(soft.x, hard.x, atol=1e-5)
    np.testing.assert_allclose(soft.u, hard.u, atol=1e-3)
    assert np.max(soft.slacks) < 1e-6


def test_soft_bounds_change_the_optimum_only_where_they_should(cartpole: shooting.Model) -> None:
    # A cheap slack lets the cart cross its bound: the soft optimum is cheaper than the hard one.
    x0 = [0.0, np.pi, 0.0, 0.0]
    hard = _ocp(cartpole).solve(x0)
    soft = _ocp(cartpole, soft_x_bounds=True, slack_l1=1.0, slack_l2=1.0).solve(x0)
    assert soft.cost < hard.cost
    assert np.max(np.abs(soft.x[:, 0])) > 0.6


def test_rti_step_at_the_nlp_optimum_returns_it(cartpole: shooting.Model) -> None:
    x0 = np.array([0.8, 0.2, 0.0, 0.0])
    ocp = _ocp(cartpole, soft_x_bounds=True)
    sol = ocp.solve(x0)
    rti = shooting.RTIController(ocp)
    step = rti.step(x0, 0.0)
    assert step.success
    assert rti.last_qp is not None
    np.testing.assert_allclose(rti.last_qp.w, sol.w, atol=1e-6)
    np.testing.assert_allclose(step.u, sol.u[0], atol=1e-6)


def test_soft_bounds_without_finite_bounds_add_nothing(cartpole: shooting.Model) -> None:
    ocp = shooting.MultipleShootingOCP(cartpole, 5, dt=0.05, x_min=-INF, x_max=INF, soft_x_bounds=True)
    assert ocp.layout.ns == 0 and ocp.soft_states.size == 0


@pytest.mark.parametrize(("kw", "match"), [
    ({"slack_l1": -1.0}, "slack_l1"),
    ({"slack_l2": float("nan")}, "slack_l2"),
    ({"slack_l1": 0.0, "slack_l2": 0.0}, "free"),
    ({"soft_x_bounds": "yes"}, "soft_x_bounds"),
    ({"solver": "fatrop"}, "fatrop"),
])
def test_bad_soft_bound_options_are_named(cartpole: shooting.Model, kw: dict[str, object], match: str) -> None:
    opts: dict[str, object] = {"soft_x_bounds": True, **kw}
    with pytest.raises(ValueError, match=match):
        shooting.MultipleShootingOCP(cartpole, 5, dt=0.05, **opts)  # type: ignore[arg-type]
