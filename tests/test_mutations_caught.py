"""Issue 40, the Python side: tests that catch one-line changes the rest of the suite let through.

Each test checks behaviour against independent truth and pins what makes
its case hard, so that it keeps failing on its change after later edits
(scripts/check_mutations.py applies each change to a copy of the repository
and runs the test named for it; tests/test_mutations_caught_c.py holds the
C controller's):

* change 2 (the least-squares cost's Gauss-Newton Hessian halved): the RTI's
  QP Hessian and gradient against CasADi's Hessian and gradient of the same
  stage and terminal costs, residuals linear in (x, u) so that Gauss-Newton's
  Hessian is the cost's own;
* change 5 (``--resume`` trusting a journal row drawn otherwise): a journal of
  a sweep with other explicit cases, whose fingerprint is the same, refused
  by name;
* change 6 (SIGINT raising inside cleanup) and change 7 (a SIGINT during the
  CLI's deferred imports forgotten): real signals to this process, each at
  the instant that matters.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting import _interrupt
from shooting.mpc.rti_stage import StageQPBuilder
from shooting.sweeps.output import JOURNAL

# ---------------------------------------------------------------------------------------- the least-squares Hessian


def _stage_residual(x, u, p):
    """Linear in (x, u), both in each row: Gauss-Newton's 2 J' W J is the cost's exact Hessian, with cross terms."""
    return ca.vertcat(x[0] + 0.5 * u[0] - 0.3, x[1] - 2.0 * x[0] + 0.2 * u[0])


def _terminal_residual(x, p):
    return ca.vertcat(x[0] + x[1] - 0.1)


W_STAGE = np.array([[4.0, 1.0], [1.0, 2.0]])
W_TERMINAL = np.array([[3.0]])


def test_the_rti_qp_of_a_least_squares_cost_is_casadis_hessian_and_gradient() -> None:
    """The RTI's QP (the C's data come from the same Function) models each stage's cost by its Hessian block
    [Q S'; S R] and its gradient at the guess, H zb + [q; r]. Truth: CasADi's Hessian and gradient of the stage
    cost itself, (x - xr)' Qw (x - xr) + (u - ur)' Rw (u - ur) + r' W r, here with a residual linear in (x, u)."""
    model = shooting.load_model("pendulum")
    nx, nu, N = model.nx, model.nu, 6
    Qw, Rw, Qf = np.diag([0.3, 0.1]), np.array([[0.05]]), np.diag([1.0, 0.5])
    x_ref, u_ref = np.array([0.2, -0.1]), np.array([0.4])
    ocp = shooting.MultipleShootingOCP(model, N, dt=0.05, Q=np.diag(Qw), R=np.diag(Rw), Q_terminal=np.diag(Qf),
                                       x_ref=x_ref, u_ref=u_ref, x_scale=1.0, u_scale=1.0,
                                       stage_cost=shooting.least_squares(_stage_residual, W_STAGE),
                                       terminal_cost=shooting.least_squares(_terminal_residual, W_TERMINAL))
    rng = np.random.default_rng(40)
    xb, ub = rng.uniform(-1.0, 1.0, (N + 1, nx)), rng.uniform(-3.0, 3.0, (N, nu))
    qp = StageQPBuilder(ocp, hessian="gauss-newton").build(xb, ub, np.tile(x_ref, (N + 1, 1)),
                                                            np.tile(u_ref, (N, 1)), np.zeros((N, 0)), 0.0,
                                                            np.zeros(nu))
    xs, us = ca.SX.sym("x", nx), ca.SX.sym("u", nu)
    ex, eu = xs - ca.DM(x_ref), us - ca.DM(u_ref)
    r, rN = _stage_residual(xs, us, None), _terminal_residual(xs, None)
    stage = ca.bilin(ca.DM(Qw), ex, ex) + ca.bilin(ca.DM(Rw), eu, eu) + ca.bilin(ca.DM(W_STAGE), r, r)
    terminal = ca.bilin(ca.DM(Qf), ex, ex) + ca.bilin(ca.DM(W_TERMINAL), rN, rN)
    z = ca.vertcat(xs, us)
    H, g = ca.hessian(stage, z)
    HN, gN = ca.hessian(terminal, xs)
    stage_fn = ca.Function("stage", [xs, us], [H, g])
    terminal_fn = ca.Function("terminal", [xs], [HN, gN])
    assert np.abs(np.array(ca.evalf(ca.hessian(ca.bilin(ca.DM(W_STAGE), r, r), z)[0]))).max() > 1.0  # (its share)
    for k in range(N):
        Hk, gk = (np.array(v, dtype=float) for v in stage_fn(xb[k], ub[k]))
        block = np.block([[qp.Q[k], qp.S[k].T], [qp.S[k], qp.R[k]]])
        np.testing.assert_allclose(block, Hk, rtol=1e-12, atol=1e-12)
        zk = np.concatenate([xb[k], ub[k]])
        np.testing.assert_allclose(block @ zk + np.concatenate([qp.q[k], qp.r[k]]), gk.ravel(), rtol=1e-12,
                                   atol=1e-12)
    HNv, gNv = (np.array(v, dtype=float) for v in terminal_fn(xb[N]))
    np.testing.assert_allclose(qp.Q_N, HNv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(qp.Q_N @ xb[N] + qp.q[N], gNv.ravel(), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------------- sweep --resume


class _Stop(Exception):
    """Raised by the progress callable after the first finished case: the sweep ends there, its journal kept."""


def _stop_after_first(message: str) -> None:
    raise _Stop(message)


def test_resume_refuses_the_journal_of_a_sweep_with_other_cases(tmp_path: Path) -> None:
    """Two sweeps of explicit cases with the same options have the same fingerprint (the cases' values are not
    in it): only the journal's rows, each checked against the case drawn now (seed, x0, p), tell them apart. A
    journal of the first must be refused by the second, naming the case, and taken by the first."""
    scenario = shooting.default_scenario(shooting.load_model("vanderpol")).with_changes(sim_steps=15, horizon=10)
    ours = [{"x0": [0.5, 0.0]}, {"x0": [-0.5, 0.2]}]
    theirs = [{"x0": [0.6, 0.0]}, {"x0": [-0.5, 0.2]}]  # (case 0 moved, case 1 the same)
    options = dict(workers=1, seed=3, noise_std=0.0)
    out = tmp_path / "out"
    with pytest.raises(_Stop):
        shooting.sweep(scenario, cases=ours, out_dir=out, progress=_stop_after_first, **options)
    lines = (out / JOURNAL).read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["case"] == 0  # the header and case 0's row
    journal = (out / JOURNAL).read_bytes()

    with pytest.raises(ValueError, match=r"case 0 of the journal in .* was drawn differently .*another sweep"):
        shooting.sweep(scenario, cases=theirs, out_dir=out, resume=True, progress=False, **options)
    assert sorted(p.name for p in out.iterdir()) == [JOURNAL] and (out / JOURNAL).read_bytes() == journal

    # The same sweep takes its own journal: case 0 resumed, its row as journalled (the refusal above was the rows'
    # check, not the fingerprint's).
    done = shooting.sweep(scenario, cases=ours, out_dir=out, resume=True, progress=False, **options)
    assert done.summary["cases_resumed"] == 1 and done.summary["cases_run"] == 1
    row = json.loads(lines[1])
    assert done.rows[0]["cost"] == row["cost"] and list(done.rows[0]["x0"]) == row["x0"] == ours[0]["x0"]


# ----------------------------------------------------------------------------------------------------------- Ctrl-C


@pytest.fixture
def fresh_interrupts(monkeypatch: pytest.MonkeyPatch):
    """A fresh interrupt state for the test (restored after it) and SIGINT's handler put back; the watchdog's
    re-sending slowed to a minute, so that no SIGINT of its own lands after the test."""
    monkeypatch.setattr(_interrupt, "_state", _interrupt._State())
    monkeypatch.setattr(_interrupt, "REDELIVER_SECONDS", 60.0)
    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_during_cleanup_lets_the_cleanup_finish_then_stops(fresh_interrupts) -> None:
    """A guarded call (`shooting._interrupt.guard`, its handler installed for the block) whose work failed: a
    SIGINT landing while its cleanup runs (a context manager's exit, the exception on its way) must not cut the
    cleanup short; the interrupt is raised when the guarded block ends."""
    steps = []

    class Staging:
        def __enter__(self) -> Staging:
            return self

        def __exit__(self, *exc: object) -> bool:
            assert sys.exc_info()[1] is not None  # (the case: an exception is being handled)
            steps.append("cleanup started")
            signal.raise_signal(signal.SIGINT)  # (Python runs the handler here, inside the cleanup)
            steps.append("cleanup finished")
            return False

    with pytest.raises(KeyboardInterrupt):
        with _interrupt.guard():
            try:
                with Staging():
                    raise RuntimeError("the work failed")
            except RuntimeError:
                steps.append("error handled")
            steps.append("after the cleanup")
    assert steps == ["cleanup started", "cleanup finished", "error handled", "after the cleanup"]


def test_a_ctrl_c_during_the_deferred_imports_stops_the_run(fresh_interrupts, capfd) -> None:
    """The CLI defers SIGINT while it imports (`shooting._interrupt.defer`: recorded, not raised); `main` then
    installs its handler and must stop at once with exit 130 and its one line, the command never run."""
    from shooting import cli

    _interrupt.defer()
    signal.raise_signal(signal.SIGINT)  # during the imports: recorded only
    assert _interrupt.requested()
    code = cli.main(["list"])
    out, err = capfd.readouterr()
    assert (code, out, err) == (130, "", "shooting-codegen: interrupted\n")
