"""The proximal term on a cold SQP's inputs (shooting.mpc.sqp): the QP it gives, its schedule, and what it buys.

Truth: the QP's objective written out (`stage_qp_objective`, the proximal term added by hand), the plain QP's
solution (a centre at the solution leaves it the solution: the term's gradient vanishes there), IPOPT's optimum,
and the plain SQP's own interior-point count on the same starts.
"""

from __future__ import annotations

import numpy as np
import pytest

import shooting
from qp_reference import random_qp, solve_reference
from shooting.mpc import sqp as sqp_module
from shooting.mpc.rti_stage import StageQPBuilder
from shooting.mpc.sqp import PROX_FLOOR, PROX_START, next_prox
from shooting.qp import hessian_scale, solve_stage_qp, stage_qp_objective, with_input_prox, with_prox


def test_the_proximal_qp_is_the_plain_one_plus_the_term() -> None:
    rng = np.random.default_rng(3)
    qp = random_qp(rng, N=6, nx=3, nu=2)
    weight = 0.7
    c = rng.normal(size=(6, 2))
    prox = with_input_prox(qp, weight, c)
    # its objective at any point: the plain one + weight / 2 |u - c|^2, up to a constant (-weight / 2 |c|^2)
    for _ in range(3):
        x, u = rng.normal(size=(7, 3)), rng.normal(size=(6, 2))
        term = 0.5 * weight * float(np.sum((u - c) ** 2)) - 0.5 * weight * float(np.sum(c ** 2))
        assert stage_qp_objective(prox, x, u) == pytest.approx(stage_qp_objective(qp, x, u) + term, rel=1e-12,
                                                               abs=1e-10)
    assert with_input_prox(qp, 0.0, c) is qp  # (no term: the QP itself)
    # the largest diagonal Hessian entry, by hand
    Q, R = np.broadcast_to(qp.Q, (6, 3, 3)), np.broadcast_to(qp.R, (6, 2, 2))
    diag = [np.diagonal(Q, axis1=1, axis2=2).max(), np.diagonal(R, axis1=1, axis2=2).max(), np.diag(qp.Q_N).max()]
    assert hessian_scale(qp) == max(diag)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_centre_at_the_solution_leaves_the_solution(seed: int) -> None:
    # The term's gradient weight (u - c) vanishes at u = c: the plain QP's solution solves the proximal QP with that
    # centre, inequality sides (active and inactive) included; Clarabel gives the plain solution.
    rng = np.random.default_rng(seed)
    qp = random_qp(rng, N=8, nx=3, nu=2)
    ref = solve_reference(qp)
    assert ref.status == "Solved"
    res = solve_stage_qp(with_input_prox(qp, 5.0 * hessian_scale(qp), ref.u))
    assert res.status == 0
    assert np.abs(res.u - ref.u).max() <= 1e-6 * (1 + np.abs(ref.u).max())
    assert np.abs(res.x - ref.x).max() <= 1e-6 * (1 + np.abs(ref.x).max())


def test_the_states_term_is_the_plain_qp_plus_both_terms_on_the_free_states() -> None:
    # with_prox: the inputs' term and weight / 2 |x_k - a_k|^2 for k = 1..N (x_0 is fixed: no term), written out
    rng = np.random.default_rng(4)
    qp = random_qp(rng, N=5, nx=3, nu=2)
    weight = 0.3
    a, c = rng.normal(size=(6, 3)), rng.normal(size=(5, 2))
    prox = with_prox(qp, weight, a, c)
    for _ in range(3):
        x, u = rng.normal(size=(6, 3)), rng.normal(size=(5, 2))
        term = 0.5 * weight * float(np.sum((u - c) ** 2) + np.sum((x[1:] - a[1:]) ** 2))
        constant = 0.5 * weight * float(np.sum(c ** 2) + np.sum(a[1:] ** 2))
        assert stage_qp_objective(prox, x, u) == pytest.approx(stage_qp_objective(qp, x, u) + term - constant,
                                                               rel=1e-12, abs=1e-10)
    assert with_prox(qp, 0.0, a, c) is qp
    # a rate penalty's augmented states: the term on their leading components (the model's states) only
    lead = with_prox(qp, weight, a[:, :2], c)
    x, u = rng.normal(size=(6, 3)), rng.normal(size=(5, 2))
    term = 0.5 * weight * float(np.sum((u - c) ** 2) + np.sum((x[1:, :2] - a[1:, :2]) ** 2))
    constant = 0.5 * weight * float(np.sum(c ** 2) + np.sum(a[1:, :2] ** 2))
    assert stage_qp_objective(lead, x, u) == pytest.approx(stage_qp_objective(qp, x, u) + term - constant,
                                                           rel=1e-12, abs=1e-10)
    with pytest.raises(ValueError, match=r"state centre must have shape \(N\+1, n\)"):
        with_prox(qp, weight, a[1:], c)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_centre_at_the_solution_leaves_the_solution_states_included(seed: int) -> None:
    rng = np.random.default_rng(seed)
    qp = random_qp(rng, N=8, nx=3, nu=2)
    ref = solve_reference(qp)
    assert ref.status == "Solved"
    res = solve_stage_qp(with_prox(qp, 5.0 * hessian_scale(qp), ref.x, ref.u))
    assert res.status == 0
    assert np.abs(res.u - ref.u).max() <= 1e-6 * (1 + np.abs(ref.u).max())
    assert np.abs(res.x - ref.x).max() <= 1e-6 * (1 + np.abs(ref.x).max())


def test_the_schedule() -> None:
    rho = PROX_START
    assert next_prox(rho, 1.0, False, False) == sqp_module.PROX_DOWN * rho  # a full step: smaller
    assert next_prox(rho, 1.0, True, False) == sqp_module.PROX_FAST * rho  # the model held: much smaller
    assert next_prox(rho, 1.0, False, True) == sqp_module.PROX_FAST * rho  # a small step: much smaller
    assert next_prox(rho, 0.5, False, False) == rho  # a half step: as it is
    assert next_prox(rho, 0.25, False, False) == sqp_module.PROX_UP * rho  # a short step: larger
    assert next_prox(0.0, 0.25, False, False) == PROX_FLOOR * PROX_START  # (from nothing: its floor)
    assert next_prox(rho, 0.25, False, True) == rho  # a short step that is small: local, left alone
    tiny = 0.9 * sqp_module.PROX_OFF * PROX_START / sqp_module.PROX_FAST
    assert next_prox(tiny, 1.0, True, False) == 0.0  # below its end: gone


def _far_starts(count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    low, high = np.array([-1.0, -np.pi, -1.0, -2.0]), np.array([1.0, np.pi, 1.0, 2.0])
    return [rng.uniform(low, high) for _ in range(count)]


@pytest.mark.slow
def test_far_cold_solves_reach_a_kkt_point_with_fewer_interior_point_iterations(monkeypatch) -> None:
    # The cart-pole swing-up from 22 far starts (positions, angles all round, rates), exact Hessian, double: with and
    # without the term every solve converges; no more of them end at another local minimum than IPOPT's with the
    # term than without (here 3 and 5; over 88 starts of four seeds 7 and 6); the term takes at most half the
    # interior-point iterations (measured 0.31 on these starts; 0.34, 0.37 and 0.36 on three other seeds).
    model = shooting.load_model("cartpole")
    ocp = shooting.build_ocp(shooting.default_scenario(model), model)
    starts = _far_starts(22, 5)
    truths = [ocp.solve(x0) for x0 in starts]
    counted = [0]
    original = StageQPBuilder.sqp_step

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        step = original(self, *args, **kwargs)
        counted[0] += 0 if step.qp is None else step.qp.iterations
        return step

    monkeypatch.setattr(StageQPBuilder, "sqp_step", counting)
    totals, elsewhere = {}, {}
    for start in (PROX_START, 0.0):
        monkeypatch.setattr(sqp_module, "PROX_START", start)
        counted[0] = 0
        elsewhere[start] = 0
        for x0, truth in zip(starts, truths, strict=True):
            res = shooting.RTIController(ocp, initialize_with_ipopt=False, hessian="exact").solve(x0, max_iter=300)
            assert res.status == 0, (start, x0, res.message)
            elsewhere[start] += bool(np.abs(res.u - truth.u).max() > 1e-4 * float(ocp.u_max[0] - ocp.u_min[0]))
        totals[start] = counted[0]
    assert elsewhere[PROX_START] <= elsewhere[0.0], elsewhere
    assert totals[PROX_START] <= 0.5 * totals[0.0], totals


def _pendulum_starts(x0: np.ndarray, count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [x0 + rng.normal(0.0, 0.3, size=x0.shape) * (1 + np.abs(x0)) for _ in range(count)]


@pytest.mark.slow
def test_the_states_term_brings_the_double_pendulum_back_from_far_starts(tmp_path, monkeypatch) -> None:
    # The built-in double pendulum on a cart, its scenario's start spread by 0.3 (1 + |x0|) (seed 23): from starts
    # 0 and 3 (a fall, the cart at its 2 m bound in IPOPT's solutions) the cold SQP with the inputs' term alone
    # ended in "line search failed" and "QP failed" (its first QP moved the angles by 66 rad). With the states'
    # term until the first full step, the exact Hessian's SQP converges, Python and C with equal iterations and
    # inputs, to IPOPT's solution (IPOPT's inputs exceed their bounds by its bound relaxation, 2e-7 of 20 N).
    from shooting.controller import export_controller, load_controller

    model = shooting.load_model("dip")
    scenario = shooting.default_scenario(model)
    ocp = shooting.build_ocp(scenario, model)
    span = float(ocp.u_max[0] - ocp.u_min[0])
    starts = _pendulum_starts(np.asarray(scenario.x0, dtype=float), 10, 23)
    assert export_controller(ocp, tmp_path / "c", name="dipf", hessian="exact").ok
    ctl = load_controller(tmp_path / "c")
    iterations = {}
    for index in (0, 3):
        x0 = starts[index]
        truth = ocp.solve(x0)
        assert truth.success
        py = shooting.RTIController(ocp, hessian="exact", initialize_with_ipopt=False).solve(x0, max_iter=300)
        ctl.reset(x0)
        c = ctl.solve(x0, max_iter=300)
        for res in (py, c):
            assert res.status == 0, (index, res.message)
            assert np.abs(res.u - truth.u).max() <= 1e-6 * span, index
        assert c.iterations == py.iterations
        assert np.abs(c.u - py.u).max() <= 1e-9 * span
        iterations[index] = py.iterations
    # without the states' term (the inputs' alone) the same starts failed ("line search failed", "QP failed") before
    # the elastic QP and the second-order correction; now they converge, but take four to seven times as many
    # iterations (measured 161 and 104 against 24 and 20)
    monkeypatch.setattr(sqp_module, "PROX_STATES_STEP", np.inf)
    for index in (0, 3):
        res = shooting.RTIController(ocp, hessian="exact", initialize_with_ipopt=False).solve(starts[index],
                                                                                               max_iter=300)
        assert res.status != 0 or res.iterations > 3 * iterations[index], (index, res.iterations)
