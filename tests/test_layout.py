"""ShootingLayout and OCPProblem: the vectors of the NLP, and the problem as grouped data."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.mpc.problem import problem_fields


def test_layout_indices_interleave_and_partition():
    L = shooting.ShootingLayout(3, 2, 1, 1, nh=2, nc=1)
    # w = [x0 (2), u0 (1), x1, u1, x2, u2, x3]: written out by hand.
    np.testing.assert_array_equal(L.x_idx, [[0, 1], [3, 4], [6, 7], [9, 10]])
    np.testing.assert_array_equal(L.u_idx, [[2], [5], [8]])
    assert L.n_w == 11 and sorted(np.concatenate([L.x_idx.ravel(), L.u_idx.ravel()])) == list(range(11))
    # g = [x0 rows (2), per stage: dynamics (2) + path (2), terminal (1)].
    np.testing.assert_array_equal(L.x0_idx, [0, 1])
    np.testing.assert_array_equal(L.dyn_idx, [[2, 3], [6, 7], [10, 11]])
    np.testing.assert_array_equal(L.path_idx, [[4, 5], [8, 9], [12, 13]])
    np.testing.assert_array_equal(L.term_idx, [14])
    assert L.n_g == 15 and L.n_p == 2 + 4 * 2 + 3 * 1 + 3 * 1 + 1 + 1  # x0, x_ref, u_ref, p per interval, t0, u_prev


def test_layout_pack_unpack_round_trip_numeric_and_symbolic():
    N, nx, nu, np_ = 4, 3, 2, 2
    L = shooting.ShootingLayout(N, nx, nu, np_)
    rng = np.random.default_rng(0)
    x, u = rng.normal(size=(N + 1, nx)), rng.normal(size=(N, nu))
    xx, uu = L.unpack_w(L.pack_w(x, u))
    np.testing.assert_array_equal(xx, x)
    np.testing.assert_array_equal(uu, u)
    x0, xr, ur, p = rng.normal(size=nx), rng.normal(size=(N + 1, nx)), rng.normal(size=(N, nu)), rng.normal(size=np_)
    P = L.pack_parameters(x0, xr, ur, p, 0.7)  # one p for every interval
    parts = L.unpack_parameters(P)
    for key, want in (("x0", x0), ("x_ref", xr), ("u_ref", ur), ("p", np.tile(p, (N, 1))), ("u_prev", np.zeros(nu))):
        np.testing.assert_array_equal(parts[key], want)
    assert parts["t0"] == 0.7
    p = rng.normal(size=(N, np_))  # one row per interval
    prev = rng.normal(size=nu)
    P = L.pack_parameters(x0, xr, ur, p, 0.7, prev)
    parts = L.unpack_parameters(P)
    np.testing.assert_array_equal(parts["p"], p)
    np.testing.assert_array_equal(parts["u_prev"], prev)
    # The symbolic split picks the same entries: x_ref column k is stage k.
    Ps = ca.SX.sym("P", L.n_p)
    sym = L.unpack_parameters(Ps)
    f = ca.Function("f", [Ps], [sym["x_ref"], sym["u_ref"], sym["p"], sym["t0"], sym["u_prev"]])
    got = [np.array(v) for v in f(P)]
    np.testing.assert_array_equal(got[0], xr.T)
    np.testing.assert_array_equal(got[1], ur.T)
    np.testing.assert_array_equal(got[2], p.T)  # column k: interval k
    assert got[3].item() == 0.7
    np.testing.assert_array_equal(got[4].ravel(), prev)
    # The next sample's data: every per-stage row one stage ahead, the last repeated; t0 + dt; u_prev replaced.
    nxt = L.unpack_parameters(L.shift_parameters(P, 0.1, np.ones(nu)))
    np.testing.assert_array_equal(nxt["x_ref"], np.vstack([xr[1:], xr[-1:]]))
    np.testing.assert_array_equal(nxt["p"], np.vstack([p[1:], p[-1:]]))
    np.testing.assert_array_equal(nxt["u_prev"], np.ones(nu))
    assert nxt["t0"] == pytest.approx(0.8)


def test_layout_shifts_move_stages_and_keep_the_rest():
    L = shooting.ShootingLayout(3, 2, 1, 0, nh=1, nc=2)
    w = np.arange(L.n_w, dtype=float)
    s = L.shift_w(w)
    x, u = L.unpack_w(w)
    sx, su = L.unpack_w(s)
    np.testing.assert_array_equal(sx[:-1], x[1:])
    np.testing.assert_array_equal(sx[-1], x[-1])
    np.testing.assert_array_equal(su[:-1], u[1:])
    np.testing.assert_array_equal(su[-1], u[-1])
    lam = np.arange(L.n_g, dtype=float)
    sl = L.shift_g(lam)
    np.testing.assert_array_equal(sl[L.x0_idx], lam[L.x0_idx])  # the initial-state rows stay
    np.testing.assert_array_equal(sl[L.term_idx], lam[L.term_idx])  # so do the terminal rows
    np.testing.assert_array_equal(sl[L.dyn_idx[:-1]], lam[L.dyn_idx[1:]])
    np.testing.assert_array_equal(sl[L.dyn_idx[-1]], lam[L.dyn_idx[-1]])
    np.testing.assert_array_equal(sl[L.path_idx[:-1]], lam[L.path_idx[1:]])
    assert w[0] == 0.0 and lam[0] == 0.0  # the inputs are not modified in place


def test_ocp_solution_sits_where_the_layout_says():
    model = shooting.load_model("vanderpol")
    ocp = shooting.MultipleShootingOCP(model, 6, dt=0.1, path_constraints=lambda x, u, p: x[:1] - 2.0,
                                       terminal_constraints=lambda x, p: x[1:2])
    sol = ocp.solve([1.0, 0.0])
    L = ocp.layout
    assert (L.nh, L.nc) == (1, 1) and sol.w.size == L.n_w and sol.lam_g.size == L.n_g
    np.testing.assert_array_equal(sol.x, sol.w[L.x_idx])
    np.testing.assert_allclose(sol.x[-1, 1], 0.0, atol=1e-7)  # the terminal row is where the layout says
    # x_{k+1} = F(x_k, u_k) row by row, with the OCP's own step.
    F = ocp.step_function
    for k in range(6):
        nxt = np.array(F(sol.x[k], sol.u[k], model.p0, 0.1 * k, 0.1)).ravel()
        np.testing.assert_allclose(sol.x[k + 1], nxt, atol=1e-8)


def test_problem_groups_and_with_changes():
    problem = shooting.OCPProblem(horizon=10, dt=0.1, cost=shooting.QuadraticCost(Q=[1.0, 2.0], R=[0.5]))
    changed = problem.with_changes(horizon=12, Q=[3.0, 4.0], u_max=1.0, hessian="gauss-newton", jit=False)
    assert changed.horizon == 12 and problem.horizon == 10  # a copy
    np.testing.assert_array_equal(changed.cost.Q, np.diag([3.0, 4.0]))
    np.testing.assert_array_equal(changed.cost.R, [[0.5]])  # untouched fields stay
    assert changed.constraints.u_max.tolist() == [1.0] and changed.solver.hessian == "gauss-newton"
    with pytest.raises(ValueError, match="unknown OCP field"):
        problem.with_changes(horizn=3)
    with pytest.raises(ValueError, match="hessian must be one of"):
        problem.with_changes(hessian="newton")
    with pytest.raises(ValueError, match="Q must be symmetric"):
        shooting.QuadraticCost(Q=[[1.0, 2.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="unknown tableau"):
        shooting.OCPProblem(horizon=3, dt=0.1, method="rk5")
    # The groups' fields are exactly the constructor's keywords: nothing is lost between the two forms.
    import inspect

    keywords = set(inspect.signature(shooting.MultipleShootingOCP).parameters) - {"model"}
    assert problem_fields() == keywords


def test_from_problem_equals_the_flat_constructor():
    model = shooting.load_model("pendulum")
    kw = dict(dt=0.05, Q=[10.0, 0.1], R=[0.01], Q_terminal=[20.0, 0.2], x_ref=[0.1, 0.0], u_max=5.0, u_min=-5.0)
    flat = shooting.MultipleShootingOCP(model, 15, **kw)
    problem = shooting.OCPProblem(
        horizon=15, dt=0.05,
        cost=shooting.QuadraticCost(Q=[10.0, 0.1], R=[0.01], Q_terminal=[20.0, 0.2], x_ref=[0.1, 0.0]),
        constraints=shooting.Constraints(u_max=5.0, u_min=-5.0))
    grouped = shooting.MultipleShootingOCP.from_problem(model, problem)
    a, b = flat.solve([0.5, 0.0]), grouped.solve([0.5, 0.0])
    assert a.success and b.success
    np.testing.assert_allclose(a.w, b.w, atol=1e-9)
    assert a.cost == pytest.approx(b.cost, rel=1e-12)
    with pytest.raises(TypeError):
        shooting.MultipleShootingOCP(model, 15, 0.05)  # keyword-only beyond model and horizon
