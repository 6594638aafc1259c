"""The exact Hessian's Riccati pass and shifted QP (shooting.mpc.reduced_convexity) against a dense KKT solve.

Truth: the unshifted QP (the pass's blocks without the telescoping terms), solved as one dense equality-constrained
problem with the shifted QP's active input bounds as equalities (numpy.linalg.solve on the KKT matrix): the shifted
QP's solution and its dynamics multipliers given back (`true_multipliers`) must be that problem's, and the shift's
value off the dynamics (`telescoped`) the difference of the two objectives.
"""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest

import shooting
from shooting.mpc import rti_stage
from shooting.mpc.reduced_convexity import telescoped, unshifted
from shooting.qp import StageQP, StageQPResult, stage_qp_objective, with_input_prox, with_prox


def _dense(qp: StageQP, res: StageQPResult) -> tuple[np.ndarray, np.ndarray]:
    """(u (N, nu), pi (N, nx)) of the equality-constrained QP: the dynamics and the inputs `res` holds at a bound."""
    N, nx, nu = qp.sizes.N, qp.sizes.nx, qp.sizes.nu
    nz = N * (nx + nu)  # x_1..x_N, then u_0..u_{N-1}

    def ix(k: int) -> slice:
        return slice((k - 1) * nx, k * nx)

    def iu(k: int) -> slice:
        return slice(N * nx + k * nu, N * nx + (k + 1) * nu)

    H, g = np.zeros((nz, nz)), np.zeros(nz)
    for k in range(N):
        H[iu(k), iu(k)] += qp.R[k]
        g[iu(k)] += qp.r[k]
        if k == 0:
            g[iu(0)] += qp.S[0] @ qp.x0
        else:
            H[ix(k), ix(k)] += qp.Q[k]
            H[iu(k), ix(k)] += qp.S[k]
            H[ix(k), iu(k)] += qp.S[k].T
            g[ix(k)] += qp.q[k]
    H[ix(N), ix(N)] += qp.Q_N
    g[ix(N)] += qp.q[N]
    rows, rhs = [], []
    for k in range(N):
        C = np.zeros((nx, nz))
        C[:, ix(k + 1)] = np.eye(nx)
        C[:, iu(k)] = -qp.B[k]
        if k > 0:
            C[:, ix(k)] = -qp.A[k]
        rows.append(C)
        rhs.append(qp.b[k] + (qp.A[0] @ qp.x0 if k == 0 else 0.0))
    lo, hi = np.broadcast_to(qp.lbu, (N, nu)), np.broadcast_to(qp.ubu, (N, nu))
    for k in range(N):
        for j in range(nu):
            for bound in (lo[k, j], hi[k, j]):
                if abs(res.u[k, j] - bound) <= 1e-7 * (1.0 + abs(bound)):
                    C = np.zeros((1, nz))
                    C[0, iu(k).start + j] = 1.0
                    rows.append(C)
                    rhs.append(np.array([bound]))
    A = np.vstack(rows)
    K = np.block([[H, A.T], [A, np.zeros((A.shape[0], A.shape[0]))]])
    sol = np.linalg.solve(K, np.concatenate([-g, np.concatenate(rhs)]))
    # (the KKT system's multipliers y of x_{k+1} - A x_k - B u_k = b_k are -pi_k in the QP's convention)
    return sol[N * nx:nz].reshape(N, nu), -sol[nz:nz + N * nx].reshape(N, nx)


@pytest.fixture(scope="module")
def shifted_qps() -> list[tuple[StageQP, StageQPResult, np.ndarray]]:
    """Shifted QPs (with Phi != 0) of two_link_arm's exact SQP, their solutions and Phi."""
    captured: list[tuple[StageQP, StageQPResult, np.ndarray]] = []
    original = rti_stage.StageQPBuilder.sqp_step

    def capture(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        step = original(self, *args, **kwargs)
        bound = inspect.signature(original).bind(self, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        plain = a["trial"] is None and not a["again"] and a["elastic"] == 0.0
        if plain and step.ok and self._phi is not None and np.abs(self._phi).max() > 0:
            qp = copy.deepcopy(self._built[0])  # (the QP as built; solved with a cold solve's proximal term)
            weight = a["prox"] * step.hessian_scale
            x, u = a["x"], a["u"]
            qp = with_prox(qp, weight, x, u) if a["prox_states"] else with_input_prox(qp, weight, u)
            captured.append((qp, step.qp, self._phi.copy()))
        return step

    m = shooting.load_model("two_link_arm")
    scenario = shooting.default_scenario(m)
    ocp = shooting.build_ocp(scenario, m)
    rti_stage.StageQPBuilder.sqp_step = capture  # type: ignore[method-assign]
    try:
        result = shooting.RTIController(ocp, hessian="exact").solve(scenario.x0, max_iter=100)
    finally:
        rti_stage.StageQPBuilder.sqp_step = original  # type: ignore[method-assign]
    assert result.status == 0
    assert captured
    return captured


def test_the_shifted_qp_has_the_unshifted_qps_solution_and_multipliers(shifted_qps) -> None:
    for qp, res, phi in shifted_qps[:3]:
        u, pi = _dense(unshifted(qp, phi), res)
        scale = 1.0 + np.abs(u).max()
        assert np.abs(res.u - u).max() <= 1e-9 * scale
        # (pi ~ 3e3 on this problem; the dense solve's conditioning grows with Phi's size, ~1e5)
        assert np.abs(res.pi - pi).max() <= 1e-9 * (1.0 + np.abs(pi).max())


def test_the_shift_is_its_telescoped_value_off_the_dynamics(shifted_qps) -> None:
    rng = np.random.default_rng(3)
    for qp, res, phi in shifted_qps[:3]:
        plain = unshifted(qp, phi)
        x, u = res.x + rng.normal(size=res.x.shape), res.u + rng.normal(size=res.u.shape)
        x[0] = qp.x0
        # (the QP's objective has no constant: its 1/2 b_k' Phi_{k+1} b_k are not in it, and cancel in a decrease)
        constant = 0.5 * np.einsum("ki,kij,kj->", qp.b, phi[1:], qp.b)
        gap = stage_qp_objective(qp, x, u) - stage_qp_objective(plain, x, u)
        assert gap == pytest.approx(telescoped(qp, phi, x, u) - constant, rel=1e-9)
        # on the dynamics the terms telescope to -1/2 x0' Phi_0 x0
        on = stage_qp_objective(qp, res.x, res.u) - stage_qp_objective(plain, res.x, res.u)
        assert on == pytest.approx(-0.5 * qp.x0 @ phi[0] @ qp.x0 - constant, rel=1e-9)


def test_a_shift_beyond_the_limit_gives_gauss_newtons_stages() -> None:
    # do-mpc's double pendulum from hanging (tests/dip_swing.py): the pass mirrors every T_uu along the energy
    # cost's negative curvature and its shift exceeds SHIFT_LIMIT times the blocks at once. Such an iteration's QP
    # has Gauss-Newton's stages (the same point's QP without multipliers), the exact terminal block, no shift;
    # with no limit the same point's QP is the shifted one, of another solution (the rule is what decides).
    from dip_swing import X0, make_ocp
    from shooting.mpc import reduced_convexity

    ocp = make_ocp()
    calls: list[tuple[tuple, StageQP, object]] = []
    original = rti_stage.StageQPBuilder.build

    def capture(self, *args):  # type: ignore[no-untyped-def]
        qp = original(self, *args)
        if args[-1] is not None:
            calls.append((args, copy.deepcopy(qp), self._phi))
        return qp

    rti_stage.StageQPBuilder.build = capture  # type: ignore[method-assign]
    try:
        controller = shooting.RTIController(ocp, hessian="exact", initialize_with_ipopt=False)
        controller.solve(X0, max_iter=4)
    finally:
        rti_stage.StageQPBuilder.build = original  # type: ignore[method-assign]
    assert calls, "no exact iteration in the first four"
    args, qp, phi = calls[0]
    assert phi is None
    builder = controller._stages
    assert builder is not None
    gauss_newton = copy.deepcopy(builder.build(*args[:-1], None))  # (the builder's own buffers: copied)
    for name in ("Q", "S", "R", "r"):
        np.testing.assert_array_equal(getattr(qp, name), getattr(gauss_newton, name), err_msg=name)
    np.testing.assert_array_equal(qp.q[:-1], gauss_newton.q[:-1])
    limit = reduced_convexity.SHIFT_LIMIT
    reduced_convexity.SHIFT_LIMIT = np.inf
    try:
        shifted = copy.deepcopy(builder.build(*args))
    finally:
        reduced_convexity.SHIFT_LIMIT = limit
    assert builder._phi is not None and np.abs(builder._phi).max() > limit * 1e3
    assert not np.allclose(shifted.R, gauss_newton.R)
