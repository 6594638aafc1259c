"""The stage-wise QP solver (interior point, Riccati): its C (double and float) and its numpy twin against Clarabel.

Truth: Clarabel (an interior-point solver in Rust, independent of ours) on the
same QP written as one sparse problem with explicit slack variables
(`qp_reference.py`), at tolerances near double rounding; IPOPT for the
cart-pole's RTI fixed point.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import shooting
from qp_reference import random_qp, solve_reference
from shooting.controller.ocp_qp import HostOCPQP
from shooting.mpc.rti_stage import StageQPBuilder
from shooting.qp import OCP_QP_TOLERANCES, OCPQPSizes, StageQP, StageQPResult, shifted_result, solve_stage_qp

SEEDS = range(24)


def _case(seed: int) -> StageQP:
    rng = np.random.default_rng(seed)
    return random_qp(rng, N=[5, 10, 30][seed % 3], nx=3 + seed % 3, nu=1 + seed % 2, general=seed % 2 == 1,
                     unstable=[0.0, 0.1, 0.3][seed % 3])


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("ocp_qp")
    cache: dict[tuple[OCPQPSizes, str], HostOCPQP] = {}

    def get(sizes: OCPQPSizes, real: str) -> HostOCPQP:
        if (sizes, real) not in cache:
            cache[(sizes, real)] = HostOCPQP(folder, sizes, real)  # type: ignore[arg-type]
        return cache[(sizes, real)]

    return get


@pytest.fixture(scope="module")
def feasible() -> list[tuple[StageQP, object]]:
    cases = []
    for seed in SEEDS:
        qp = _case(seed)
        ref = solve_reference(qp)
        if ref.status == "Solved":
            cases.append((qp, ref))
    assert len(cases) >= 15  # (the random hard state bounds make some infeasible: those are tested below)
    return cases


def test_double_c_and_twin_solve_random_qps_exactly(hosts, feasible) -> None:
    """Soft and hard state bounds, general and terminal rows, unstable dynamics: within 1e-7 of Clarabel.

    (Both stop at relative residuals of 1e-10; Clarabel's own tolerance is 1e-12; the inputs are O(1).)
    """
    for qp, ref in feasible:
        twin = solve_stage_qp(qp)
        c = hosts(qp.sizes, "double").solve(qp)
        assert twin.status == 0 and c.status == 0, (qp.sizes, twin.message, c.message)
        np.testing.assert_allclose(twin.u, ref.u, atol=1e-7)
        np.testing.assert_allclose(twin.x, ref.x, atol=1e-7)
        # The same method: the same iterates to rounding.
        assert twin.iterations == c.iterations
        np.testing.assert_allclose(c.u, twin.u, atol=1e-10)


def test_float_c_is_single_precision_accurate(hosts, feasible) -> None:
    """Float within 1e-2 of Clarabel on every random QP, 1e-4 on those without general rows.

    General rows couple inputs and states; their barrier weights lam/t grow like 1/mu and swamp the other
    directions of the Riccati factor in single precision (unit roundoff 6e-8): measured worst 3.1e-3 (general
    rows), 1e-5 (bounds only).
    """
    for qp, ref in feasible:
        f = hosts(qp.sizes, "float").solve(qp)
        assert f.status == 0, f.message
        tol = 1e-2 if qp.sizes.ng else 1e-4
        np.testing.assert_allclose(f.u, ref.u, atol=tol)


def test_cartpole_swing_up_qp_at_long_horizons(hosts) -> None:
    """The RTI QP of an unstable plant at N = 200: double equals IPOPT at the RTI fixed point, float stays
    accurate (the condensed QP of the first controller lost positive definiteness in float from N = 30)."""
    model = shooting.load_model("cartpole")
    scenario = shooting.default_scenario(model).with_changes(horizon=200, soft_x_bounds=True)
    # IPOPT without its default bound relaxation (1e-8 relative: u would end 8e-7 beyond its bound of 80) and
    # to near rounding: its solution is then the RTI's fixed point.
    ocp = shooting.build_ocp(scenario, model, solver_options={"ipopt.bound_relax_factor": 0.0, "ipopt.tol": 1e-12})
    sol = ocp.solve(scenario.x0)
    assert sol.success
    builder = StageQPBuilder(ocp)
    d = ocp.layout.unpack_parameters(ocp.parameters(scenario.x0))
    qp = builder.with_state(builder.build(sol.x, sol.u, d["x_ref"], d["u_ref"], d["p"], 0.0, np.zeros(1)),
                            scenario.x0, np.zeros(1))
    span = float(ocp.u_max[0] - ocp.u_min[0])
    double = hosts(qp.sizes, "double").solve(qp, x_guess=sol.x, u_guess=sol.u)
    assert double.status == 0
    # IPOPT's solution is the fixed point of the RTI: its QP returns it.
    assert np.abs(double.u - sol.u).max() / span < 1e-8
    single = hosts(qp.sizes, "float").solve(qp)
    assert single.status == 0
    assert np.abs(single.u - double.u).max() / span < 1e-5  # measured 1e-6


def test_warm_start_reaches_the_same_solution_in_fewer_iterations(hosts, feasible) -> None:
    saved = 0
    for qp, _ref in feasible[:8]:
        solver = hosts(qp.sizes, "double")
        cold = solver.solve(qp)
        nudged = copy.deepcopy(qp)
        nudged.x0 = qp.x0 + 1e-3  # the next sample: a slightly different state
        warm = solver.solve(nudged, warm=cold)
        again = solver.solve(nudged)
        assert warm.status == 0 and again.status == 0
        np.testing.assert_allclose(warm.u, again.u, atol=1e-8)
        saved += again.iterations - warm.iterations
        # The twin warm-starts as the C does (the Python RTI's closed loop follows the C's to rounding):
        # the same iterations from the same multipliers, also from a start moved one stage ahead.
        twin = solve_stage_qp(nudged, x_guess=cold.x, u_guess=cold.u, warm=cold)
        assert twin.iterations == warm.iterations
        np.testing.assert_allclose(twin.u, warm.u, atol=1e-10)
        ahead = shifted_result(cold, qp.sizes)
        c_ahead, twin_ahead = solver.solve(nudged, warm=ahead), solve_stage_qp(nudged, x_guess=cold.x,
                                                                              u_guess=cold.u, warm=ahead)
        assert c_ahead.status == twin_ahead.status == 0 and c_ahead.iterations == twin_ahead.iterations
        np.testing.assert_allclose(twin_ahead.u, c_ahead.u, atol=1e-10)
    assert saved > 0


def test_shifted_result_moves_every_stage_block_one_ahead() -> None:
    z = OCPQPSizes(N=4, nx=2, nu=1, nbx=2, ng=1, ngN=1)
    t = np.arange(z.nsides, dtype=float)
    s = np.arange(z.nsoft, dtype=float)
    pi = np.arange(z.N * z.nx, dtype=float).reshape(z.N, z.nx)
    res = StageQPResult(np.zeros((5, 2)), np.zeros((4, 1)), pi, t, -t, s, -s, 0, 1, (0.0, 0.0, 0.0))
    out = shifted_result(res, z)
    blocks = [(0, 2), (8, 4), (24, 2)]  # inputs' (2 per stage), states' (4), general rows' (2) sides
    for first, width in blocks:
        got, was = out.t[first:first + 4 * width].reshape(4, width), t[first:first + 4 * width].reshape(4, width)
        np.testing.assert_array_equal(got, np.vstack([was[1:], was[-1:]]))
    np.testing.assert_array_equal(out.t[32:], t[32:])  # the terminal row stays
    np.testing.assert_array_equal(out.lam, -out.t)
    np.testing.assert_array_equal(out.s, [2, 3, 4, 5, 6, 7, 6, 7, 9, 10, 11, 11, 12])
    np.testing.assert_array_equal(out.pi, np.vstack([pi[1:], pi[-1:]]))


def test_infeasible_not_convex_and_non_finite_are_reported(hosts) -> None:
    rng = np.random.default_rng(3)
    qp = random_qp(rng, N=6, nx=3, nu=1)
    # Hard bounds that x0 already violates at x_1 with inputs too weak to help: no feasible point.
    bad = copy.deepcopy(qp)
    bad.soft_bx = [False, False]
    bad.lbx, bad.ubx = [-1e-3, -1e-3], [1e-3, 1e-3]
    bad.x0 = np.array([2.0, 0.0, 2.0])
    assert solve_reference(bad).status != "Solved"
    for result in (solve_stage_qp(bad), hosts(bad.sizes, "double").solve(bad)):
        assert result.status == 2, result.message
    # The same bounds soft: always feasible, never reported infeasible (the C's lock-up began with status 2 on a
    # soft QP), and solved: Clarabel's point
    soft = copy.deepcopy(bad)
    soft.soft_bx = [True, True]
    ref = solve_reference(soft)
    assert ref.status == "Solved"
    for result in (solve_stage_qp(soft), hosts(soft.sizes, "double").solve(soft)):
        assert result.status == 0, result.message
        np.testing.assert_allclose(result.u, ref.u, atol=1e-7)
    concave = copy.deepcopy(qp)
    concave.R = -1e6 * np.eye(1)  # beyond what B'PB can make up: the reduced Hessian is indefinite
    concave.S = np.zeros((1, 3))
    for result in (solve_stage_qp(concave), hosts(concave.sizes, "double").solve(concave)):
        assert result.status == 3, result.message
    broken = copy.deepcopy(qp)
    broken.b = qp.b.copy()
    broken.b[2, 1] = np.nan
    for result in (solve_stage_qp(broken), hosts(broken.sizes, "double").solve(broken)):
        assert result.status in (2, 4, 5), result.message


def test_a_state_nothing_weighs_may_come_out_a_rounding_below_zero(hosts) -> None:
    # (do-mpc's double pendulum: its cart position, weighed by nothing, had the diagonal -8e-22 in a stage's
    # Riccati block after the exact Hessian's telescoping shift, and the QP was refused as "not convex".) A
    # diagonal negative by rounding (1e-20 of the largest) is a zero: solved, at the point of the same QP with it 0
    # (Clarabel); one negative by 1e-3 of the largest is not convex, in C and in numpy alike.
    rng = np.random.default_rng(5)
    qp = random_qp(rng, N=8, nx=3, nu=1)
    assert 1 not in qp.idxbx  # (state 1: no bound either, whose barrier terms would weigh it)
    qp.Q_N[1, :] = qp.Q_N[:, 1] = qp.Q[..., 1, :] = qp.Q[..., :, 1] = qp.S[..., :, 1] = 0.0
    zero = copy.deepcopy(qp)
    ref = solve_reference(zero)
    assert ref.status == "Solved"
    for scale, status in ((1e-20, 0), (1e-3, 3)):
        tiny = copy.deepcopy(qp)
        tiny.Q_N[1, 1] = -scale * float(np.abs(np.diag(qp.Q_N)).max())
        for result in (solve_stage_qp(tiny), hosts(tiny.sizes, "double").solve(tiny)):
            assert result.status == status, (scale, result.message)
            if status == 0:
                np.testing.assert_allclose(result.u, ref.u, atol=1e-7)


def test_soft_bounds_are_exact_penalties(hosts) -> None:
    """With l1 above the bound's multiplier the soft bound holds exactly; with a small l1 it gives way with the
    slack the closed form of a one-state problem predicts."""
    # One integrator x+ = x + u, x0 = 0, minimise sum (x - 1)^2 + 0.1 u^2 subject to x <= 0.5 (soft).
    N = 4
    base = dict(A=np.ones((N, 1, 1)), B=np.ones((N, 1, 1)), b=np.zeros((N, 1)), Q=2 * np.eye(1),
                R=0.2 * np.eye(1), Q_N=2 * np.eye(1), x0=np.zeros(1), q=np.full((N + 1, 1), -2.0),
                r=np.zeros((N, 1)), idxbx=[0], lbx=[-np.inf], ubx=[0.5], soft_bx=[True])
    exact = StageQP(**base, l1=100.0, l2=1.0)
    loose = StageQP(**base, l1=0.0, l2=1.0)
    for qp in (exact, loose):
        ref = solve_reference(qp)
        for result in (solve_stage_qp(qp), hosts(qp.sizes, "double").solve(qp)):
            np.testing.assert_allclose(result.x, ref.x, atol=1e-8)
    assert np.abs(solve_stage_qp(exact).x[1:, 0] - 0.5).max() < 1e-8
    assert solve_stage_qp(loose).x[1:, 0].max() > 0.5 + 1e-3


def _steady(seed: int, general: bool, saturated: bool = False) -> StageQP:
    """A random QP whose solution has no hard state or general side active and soft sides violated: the hard
    state bound wide, the soft state bound (and with `general`, every general row, soft) tight; the input bounds
    wide, or with `saturated` tight enough to bind."""
    qp = random_qp(np.random.default_rng(100 + seed), N=[6, 15][seed % 2], nx=3 + seed % 2, nu=1 + seed % 2,
                   general=general)
    nu = qp.sizes.nu
    qp.lbu, qp.ubu = (-0.3 if saturated else -50) * np.ones(nu), (0.3 if saturated else 50) * np.ones(nu)
    qp.lbx, qp.ubx = [-0.05, -50.0], [0.05, 50.0]
    qp.l1 = 0.05  # (a violated side's multiplier exceeds l1: a small l1 makes most active sides violated)
    if general:
        qp.soft_g, qp.soft_gN = [True, True], [True]
        qp.lg, qp.ug = np.full((qp.sizes.N, 2), -0.05), np.full((qp.sizes.N, 2), 0.05)
    return qp


def _soft_rows(qp: StageQP) -> np.ndarray:
    """Which entries of s are soft rows': state rows [soft, hard] per stage, then the (soft) general rows."""
    z = qp.sizes
    return np.array([j % 2 == 0 if j < z.N * z.nbx else True for j in range(z.nsoft)])


def _shortcut_applies(qp: StageQP, res: StageQPResult) -> bool:
    """Whether `res`'s active set is one the shortcut solves: no hard state side and no soft side held exactly
    at its bound (s = 0 within the exact penalty) active (inputs at a bound are), at most one side of a row."""
    z = qp.sizes
    hard_sides = 2 * z.N * z.nu  # the inputs' sides come first
    active = np.asarray(res.lam) > np.asarray(res.t)
    for j, soft in enumerate(_soft_rows(qp)):
        row = active[hard_sides + 2 * j: hard_sides + 2 * j + 2]
        if row.any() and (not soft or row.all() or not res.s[j] > res.lam_s[j]):
            return False
    return True


@pytest.mark.parametrize("general, saturated", [(False, False), (True, False), (False, True), (True, True)])
def test_warm_start_with_the_right_active_set_is_solved_exactly_in_one_step(hosts, general, saturated) -> None:
    """The warm start's shortcut: with inputs at their bounds (fixed there) and soft sides violated (their
    quadratic penalty), the QP with the predicted active set is one Newton step, and its point is the QP's
    solution to rounding, its multipliers the interior point's.

    Truth: Clarabel. The IPM stops at a relative complementarity of 1e-14; the shortcut's is zero, and the
    C and the twin take it alike (one iteration each)."""
    active, used, fixed = 0, 0, 0
    for seed in range(10):
        qp = _steady(seed, general, saturated)
        ref = solve_reference(qp)
        assert ref.status == "Solved"
        solver = hosts(qp.sizes, "double")
        cold = solver.solve(qp)
        assert cold.status == 0 and cold.iterations > 1
        if not _shortcut_applies(qp, cold):
            assert solver.solve(qp, warm=cold).iterations > 1
            continue
        used += 1
        for warm in (solver.solve(qp, warm=cold), solve_stage_qp(qp, warm=cold)):
            assert warm.status == 0 and warm.iterations == 1, (seed, warm.iterations)
            np.testing.assert_allclose(warm.u, ref.u, atol=1e-8)
            np.testing.assert_allclose(warm.x, ref.x, atol=1e-8)
            assert warm.residuals[2] == 0.0  # complementarity: exactly zero
            # stationarity and equalities to rounding (the shortcut does not test them: a backward stable
            # solve; evaluated here at its point): within the interior point's own tolerances
            assert warm.residuals[0] <= OCP_QP_TOLERANCES["double"]["tol_stat"]
            assert warm.residuals[1] <= OCP_QP_TOLERANCES["double"]["tol_eq"]
            # Each soft row's slack is its violation, the penalty's multiplier on the violated side l1 + 2 l2 s.
            assert np.all(warm.s >= 0) and np.all(warm.t >= 0) and np.all(warm.lam >= 0)
        twin, c = solve_stage_qp(qp, warm=cold), solver.solve(qp, warm=cold)
        np.testing.assert_allclose(c.u, twin.u, atol=1e-12)
        # every multiplier is the interior point's, to the interior point's own error: its stationarity
        # tolerance (1e-10 of 1 + the largest multiplier) times the active rows' conditioning (measured up to
        # 4e-9 here; a wrong sign or a missing term of the stationarity the shortcut reads them from is O(1))
        np.testing.assert_allclose(c.lam, cold.lam, atol=1e-7 * (1 + np.abs(cold.lam).max()))
        np.testing.assert_allclose(twin.lam, c.lam, atol=1e-10 * (1 + np.abs(c.lam).max()))
        fixed += int((np.asarray(c.lam[:2 * qp.sizes.N * qp.sizes.nu]) > 0).sum())
        soft = _soft_rows(qp)
        violated = soft & (c.s > 1e-6)
        active += int(violated.sum())
        np.testing.assert_allclose(c.lam_s[violated], 0.0)
        np.testing.assert_allclose(c.lam_s[soft & ~violated], qp.l1)
        hs = 2 * qp.sizes.N * qp.sizes.nu  # (a row's sides follow the inputs', two per row as s is numbered)
        side_lam = np.asarray(c.lam[hs:]).reshape(-1, 2).max(axis=1)
        np.testing.assert_allclose(side_lam[violated], qp.l1 + 2 * qp.l2 * c.s[violated], rtol=1e-12)
    assert used >= 4 and active > 0  # (the penalty's quadratic was exercised)
    assert (fixed > 0) == saturated  # (and inputs fixed at their bounds)


def test_warm_start_with_the_wrong_active_set_falls_back_to_the_interior_point(hosts) -> None:
    """A prediction the next QP contradicts (a soft side no longer violated, a side newly violated, a hard side
    active) is refused and the interior point solves it from there: Clarabel's solution, C and twin alike."""
    wrong = 0
    for seed in range(4):
        qp = _steady(seed, seed % 2 == 1)
        solver = hosts(qp.sizes, "double")
        cold = solver.solve(qp)
        relaxed = copy.deepcopy(qp)  # the soft state bound wide: predicted violated, no longer
        relaxed.lbx, relaxed.ubx = [-50.0, -50.0], [50.0, 50.0]
        tighter = copy.deepcopy(qp)  # tighter: sides inside before now beyond
        tighter.lbx, tighter.ubx = [-0.01, -50.0], [0.01, 50.0]
        saturated = copy.deepcopy(qp)  # hard input bounds that bind
        saturated.lbu, saturated.ubu = -0.01 * np.ones(qp.sizes.nu), 0.01 * np.ones(qp.sizes.nu)
        at_bounds = solver.solve(saturated)
        cases = [(relaxed, cold), (tighter, cold), (saturated, cold), (qp, at_bounds)]
        for case, warm_from in cases:
            ref = solve_reference(case)
            assert ref.status == "Solved"
            # (the same primal guess for both: HostOCPQP.solve takes the warm start's)
            c = solver.solve(case, warm=warm_from)
            twin = solve_stage_qp(case, warm=warm_from, x_guess=warm_from.x, u_guess=warm_from.u)
            assert c.status == twin.status == 0
            truth = solver.solve(case)
            same = np.array_equal(np.asarray(truth.lam) > np.asarray(truth.t),
                                  np.asarray(warm_from.lam) > np.asarray(warm_from.t))
            # the same iterations, or one apart where the last step lands at the tolerance: the interior point's
            # end game (barrier terms ~1e12) is where the C's and numpy's rounding part (one such case here: the
            # C's 17th step raised stationarity tenfold and was undone, numpy's lowered it)
            assert abs(c.iterations - twin.iterations) <= 1
            if not same:  # (a prediction that happens to hold is taken: one step)
                wrong += 1
                assert c.iterations > 1
            np.testing.assert_allclose(c.u, ref.u, atol=1e-7)
            np.testing.assert_allclose(twin.u, ref.u, atol=1e-7)
    assert wrong >= 8


#: What the controller's header promises for the QP's equalities (relative to the data's scale): the stopping
#: tolerance of each precision, a few hundred unit roundoffs (double 1e-12 ~ 4500 eps, float 2e-6 ~ 17 eps) above
#: what a backward stable Riccati solve leaves. Literal, so that a looser tolerance in the code is seen.
PROMISED_EQ = {"double": 1e-12, "float": 2e-6}


@pytest.mark.parametrize("real", ["double", "float"])
def test_returned_points_meet_the_promised_equality_tolerance(hosts, feasible, real: str) -> None:
    # x_{k+1} = A_k x_k + B_k u_k + b_k and x_0, evaluated in double from the returned point (numpy), relative to
    # the largest of 1, |b|, |A x|, |B u|: the residual the tolerance is stated in.
    assert OCP_QP_TOLERANCES[real]["tol_eq"] == PROMISED_EQ[real]  # type: ignore[index]
    worst = 0.0
    for qp, _ in feasible:
        res = hosts(qp.sizes, real).solve(qp) if real == "float" else solve_stage_qp(qp)
        assert res.status == 0, res.message
        x, u = np.asarray(res.x, dtype=float), np.asarray(res.u, dtype=float)
        for k in range(qp.sizes.N):
            Ax, Bu = qp.A[k] @ x[k], qp.B[k] @ u[k]
            scale = max(1.0, float(np.abs(qp.b[k]).max()), float(np.abs(Ax).max()), float(np.abs(Bu).max()))
            worst = max(worst, float(np.abs(x[k + 1] - Ax - Bu - qp.b[k]).max()) / scale)
        worst = max(worst, float(np.abs(x[0] - qp.x0).max()) / max(1.0, float(np.abs(qp.x0).max())))
    # (float: the residual is evaluated in double from float numbers: their own rounding, 6e-8 relative, is in it)
    assert worst <= PROMISED_EQ[real], worst


@pytest.mark.parametrize("real", ["double", "float"])
def test_a_step_undone_at_the_end_restores_the_dynamics_multipliers(hosts, real: str) -> None:
    # The planar quadrotor's first SQP QP (tests/planar_quadrotor.py, held at x0): in float the interior point's
    # last step made a converged point worse and was undone, but pi (set afresh by each step, not an increment)
    # kept the rejected step's values: 2.4e13 where the solution's are 416, and the SQP's merit weight with it.
    from planar_quadrotor import make_model, scenario
    from shooting.mpc.rti_stage import StageQPBuilder

    model = make_model()
    sc = scenario(model)
    ocp = shooting.build_ocp(sc, model)
    builder = StageQPBuilder(ocp)
    x0 = np.asarray(sc.x0, dtype=float)
    xg, ug = np.tile(x0, (ocp.horizon + 1, 1)), np.tile(model.u0, (ocp.horizon, 1))
    d = ocp.layout.unpack_parameters(ocp.parameters(x0))
    qp = builder.with_state(builder.build(xg, ug, d["x_ref"], d["u_ref"], d["p"], 0.0, np.zeros(2)), x0,
                            np.zeros(2))
    ref = solve_stage_qp(qp, x_guess=xg, u_guess=ug)
    got = hosts(qp.sizes, real).solve(qp, x_guess=xg, u_guess=ug)
    assert got.status == 0 and ref.status == 0
    tol = OCP_QP_TOLERANCES[real]  # type: ignore[index]
    assert got.residuals[0] <= 100 * tol["tol_stat"]  # (what an undone step may leave: see the C)
    scale = float(np.abs(ref.pi).max())
    assert np.abs(np.asarray(got.pi) - ref.pi).max() <= (1e-9 if real == "double" else 1e-3) * scale


@pytest.mark.parametrize("general", [False, True], ids=["state bounds", "general and terminal rows"])
def test_an_elastic_qp_is_feasible_and_an_exact_penalty(hosts, general: bool) -> None:
    # (issue 35) Fletcher's Sl1QP: with `elastic` > 0 every hard state bound, general and terminal row carries a
    # slack priced at that weight (l1 only), so a QP whose hard rows cannot all hold is solved, at Clarabel's point of
    # the same l1-penalised QP (slacks explicit, one per side); where the hard QP is feasible and the weight exceeds
    # its multipliers the point is the hard QP's (an exact penalty). C (double, float) and numpy alike.
    rng = np.random.default_rng(11)
    qp = random_qp(rng, N=8, nx=3, nu=1, general=general)
    qp.soft_bx = [False, False]
    if general:
        qp.soft_g, qp.soft_gN = [False, False], [False]
    bad = copy.deepcopy(qp)
    bad.lbx, bad.ubx = [-1e-3, -1e-3], [1e-3, 1e-3]
    bad.x0 = np.array([2.0, 0.0, 2.0])
    assert solve_reference(bad).status != "Solved"
    for weight in (3.0, 300.0, 3e6):  # (3e6: far above the multipliers, its start must not run away)
        elastic = copy.deepcopy(bad)
        elastic.elastic = weight
        ref = solve_reference(elastic)
        assert ref.status == "Solved"
        res = [solve_stage_qp(elastic), hosts(elastic.sizes, "double").solve(elastic)]
        for result in res:
            assert result.status == 0, result.message
            np.testing.assert_allclose(result.x, ref.x, atol=1e-7)
            np.testing.assert_allclose(result.u, ref.u, atol=1e-7)
        # its own solution as a warm start: the same point (the shortcut, or the interior point from there)
        again = solve_stage_qp(elastic, x_guess=res[0].x, u_guess=res[0].u, warm=res[0])
        np.testing.assert_allclose(again.u, ref.u, atol=1e-7)
        single = hosts(elastic.sizes, "float").solve(elastic)
        assert single.status == 0, single.message
        assert np.abs(single.u - ref.u).max() <= 1e-3 * (1 + np.abs(ref.u).max())
    # a feasible hard QP: elastic at a weight above its multipliers gives the hard QP's solution
    hard = copy.deepcopy(qp)
    truth = solve_reference(hard)
    assert truth.status == "Solved"
    plain = solve_stage_qp(hard)
    weight = 10 * (1 + float(np.abs(plain.lam).max()))
    hard.elastic = weight
    for result in (solve_stage_qp(hard), hosts(hard.sizes, "double").solve(hard)):
        assert result.status == 0, result.message
        np.testing.assert_allclose(result.u, truth.u, atol=1e-7)
        np.testing.assert_allclose(result.x, truth.x, atol=1e-7)
