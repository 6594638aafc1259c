"""The RTI controller exported as C, run on this machine and on the emulated Cortex-M4.

Independent truth: the Python `RTIController` (the numpy interior point on
the stage-wise QP, itself checked against Clarabel and IPOPT in
test_ocp_qp.py) on the same OCP, from the same IPOPT guess, against the same
plant; the C builds and solves its QP on its own, so a wrong weight, a
dropped shift, a sign error in the linearisation, a mishandled soft bound or
reference makes the inputs differ far beyond rounding (1e-8 double; float:
1e-3 over the first samples, where the check itself derives a tighter bound).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.cli import main
from shooting.codegen import export_controller, export_integrator, load_controller, load_step, toolchain
from shooting.controller.c_source import controller_spec, generate_controller
from shooting.controller.check import board_loop, compare_inputs, host_loop, reference_loop
from support import needs_gcc, needs_m4

# Under CI=true a missing tool fails the tests instead of skipping them.
pytestmark = needs_gcc

INF = np.inf


@pytest.fixture(scope="module")
def cartpole() -> shooting.Model:
    return shooting.load_model("cartpole")


@pytest.fixture(scope="module")
def swingup(cartpole: shooting.Model) -> shooting.MultipleShootingOCP:
    problem = shooting.default_scenario(cartpole).problem.with_changes(soft_x_bounds=True)
    return shooting.MultipleShootingOCP.from_problem(cartpole, problem)


@pytest.fixture(scope="module")
def swingup_reference(swingup: shooting.MultipleShootingOCP, cartpole: shooting.Model) -> tuple[np.ndarray, ...]:
    return reference_loop(swingup, cartpole.x0, 80)


@pytest.mark.parametrize("real", ["double", "float"])
def test_swing_up_in_the_loop_matches_the_python_rti(swingup: shooting.MultipleShootingOCP, cartpole: shooting.Model,
                                                     swingup_reference: tuple[np.ndarray, ...], real: str) -> None:
    spec = controller_spec(swingup)
    run = host_loop(generate_controller(spec, "cartpole", real=real), spec, cartpole.x0, 80)
    x_ref, u_ref = swingup_reference
    assert all(s == "ok" for s in run.status)
    if real == "double":
        # The same QP solved to rounding at every sample of the whole swing-up.
        assert compare_inputs(run.u, u_ref, 80) < 1e-8
        np.testing.assert_allclose(run.x, x_ref, atol=1e-8)
    else:
        assert compare_inputs(run.u, u_ref, 5) < 1e-3
    # Upright and centred at the end, as the Python controller.
    assert abs(run.x[-1, 1]) < 0.02 and abs(run.x[-1, 0]) < 0.05
    assert np.max(np.abs(run.u)) <= 80.0


def _host(ocp: shooting.MultipleShootingOCP, x0: object, steps: int, real: str = "double") -> tuple[object, ...]:
    spec = controller_spec(ocp, x0=x0)
    run = host_loop(generate_controller(spec, ocp.model.name, real=real), spec, np.asarray(x0, float), steps)
    return run, reference_loop(ocp, np.asarray(x0, float), steps)


def test_regulation_with_hard_bounds_and_stage_references(cartpole: shooting.Model) -> None:
    # Stage-varying reference (the cart walks to p = 0.5), hard |p| <= 0.4 that binds, Q_terminal != Q.
    N = 15
    x_ref = np.zeros((N + 1, 4))
    x_ref[:, 0] = np.linspace(0.0, 0.35, N + 1)
    ocp = shooting.MultipleShootingOCP(cartpole, N, dt=0.05, Q=[10, 50, 1, 0.1], R=[0.05], Q_terminal=[100, 100, 5, 1],
                                       x_ref=x_ref, x_min=[-0.4, -INF, -INF, -INF], x_max=[0.4, INF, INF, INF],
                                       u_min=[-20], u_max=[25])
    run, (xs, us) = _host(ocp, [0.3, 0.3, 0.0, 0.0], 30)
    assert compare_inputs(run.u, us, 30) < 1e-8
    assert np.max(run.x[:, 0]) <= 0.4 + 1e-6  # the hard bound holds in closed loop


def test_rate_penalty_matches_the_python_rti(cartpole: shooting.Model) -> None:
    """R_delta in the condensed Hessian (4 Rd / 2 Rd on the diagonal, -2 Rd below it) and u_prev in the
    gradient: a wrong factor, a dropped coupling or a stale u_prev moves the inputs far beyond 1e-8."""
    N = 15
    common = dict(dt=0.05, Q=[10, 50, 1, 0.1], R=[0.01], u_min=[-20], u_max=[20])
    rated = shooting.MultipleShootingOCP(cartpole, N, R_delta=[0.5], **common)
    run, (xs, us) = _host(rated, [0.2, 0.3, 0.0, 0.0], 30)
    assert all(s == "ok" for s in run.status)
    assert compare_inputs(run.u, us, 30) < 1e-8
    plain_run, _ = _host(shooting.MultipleShootingOCP(cartpole, N, **common), [0.2, 0.3, 0.0, 0.0], 30)
    # the penalty matters here: the largest input step shrinks
    assert np.abs(np.diff(run.u[:, 0])).max() < 0.7 * np.abs(np.diff(plain_run.u[:, 0])).max()


def test_soft_bounds_keep_the_controller_alive_outside_them(cartpole: shooting.Model) -> None:
    base = dict(dt=0.05, Q=[10, 50, 1, 0.1], R=[0.05], x_min=[-0.5, -INF, -INF, -INF], x_max=[0.5, INF, INF, INF])
    x0 = [0.8, 0.2, 0.0, 0.0]  # outside |p| <= 0.5
    soft = shooting.MultipleShootingOCP(cartpole, 15, soft_x_bounds=True, slack_l1=50.0, slack_l2=20.0, **base)
    run, (xs, us) = _host(soft, x0, 25)
    assert all(s == "ok" for s in run.status)
    assert compare_inputs(run.u, us, 25) < 1e-8
    # Hard bounds: the C reports an infeasible QP instead of failing silently, and still gives an input.
    hard = shooting.MultipleShootingOCP(cartpole, 15, **base)
    spec = controller_spec(hard, guess=(np.tile(x0, (16, 1)), np.zeros((15, 1))))
    run = host_loop(generate_controller(spec, "cartpole", real="double"), spec, np.array(x0), 2)
    assert run.status[0] == "QP infeasible" and np.isfinite(run.u).all()


def test_model_parameters_and_float_on_another_model() -> None:
    model = shooting.load_model("vanderpol")
    assert model.np == 1
    ocp = shooting.MultipleShootingOCP(model, 12, dt=0.1, Q=[5, 1], R=[0.1], method="dopri5", steps=2)
    run, (xs, us) = _host(ocp, [1.5, -0.5], 25)
    assert compare_inputs(run.u, us, 25) < 1e-8
    run_f, _ = _host(ocp, [1.5, -0.5], 25, real="float")
    assert compare_inputs(run_f.u, us, 5) < 1e-3


@pytest.mark.parametrize("u_ref", [[3.0], np.linspace(-2.0, 4.0, 12)[:, None]], ids=["constant", "per-stage"])
def test_input_reference_enters_the_exported_controller_like_the_python_rti(cartpole: shooting.Model,
                                                                          tmp_path: Path, u_ref: object) -> None:
    """A nonzero u_ref (the gradient's -2 R u_ref term of the condensed QP) through the whole host path: the
    controller exported, compiled and loaded by load_controller, against the Python RTI on the same OCP and
    the same states, sample by sample to 1e-8. A wrong sign or factor on the term moves the inputs by ~1."""
    common = dict(dt=0.05, Q=[10, 50, 1, 0.1], R=[0.5], u_min=[-20], u_max=[20])
    ocp = shooting.MultipleShootingOCP(cartpole, 12, u_ref=u_ref, **common)
    x0 = np.array([0.1, 0.2, 0.0, 0.0])
    assert export_controller(ocp, tmp_path / "c", x0=x0).ok
    ctl, rti = load_controller(tmp_path / "c"), shooting.RTIController(ocp)  # both start from IPOPT at x0
    plant = shooting.build_integrator(cartpole, "rk4", 2, "none")
    plain = shooting.RTIController(shooting.MultipleShootingOCP(cartpole, 12, **common))
    x, gap = x0, 0.0
    for k in range(15):
        c, p, q = ctl.step(x, 0.05 * k), rti.step(x, 0.05 * k), plain.step(x, 0.05 * k)
        assert c.success and p.success
        np.testing.assert_allclose(c.u, p.u, atol=1e-8, err_msg=f"sample {k}")
        gap = max(gap, float(np.abs(p.u - q.u).max()))
        x = np.array(plant(x, c.u, [], 0.05 * k, 0.05)).ravel()
    assert gap > 0.5  # the reference matters here: without it the inputs are elsewhere


def test_set_reference_moves_the_target_like_the_python_ocp(cartpole: shooting.Model, tmp_path: Path) -> None:
    ocp = shooting.MultipleShootingOCP(cartpole, 10, dt=0.05, Q=[10, 50, 1, 0.1], R=[0.05])
    report = export_controller(ocp, tmp_path / "c", x0=[0.0, 0.1, 0.0, 0.0])
    assert report.ok
    ctl = load_controller(tmp_path / "c")
    target = np.array([0.3, 0.0, 0.0, 0.0])
    for k in range(11):
        ctl.set_reference(k, target, [0.0])
    moved = shooting.MultipleShootingOCP(cartpole, 10, dt=0.05, Q=[10, 50, 1, 0.1], R=[0.05], x_ref=target)
    rti = shooting.RTIController(moved)
    rti._guess = shooting.mpc.rti.QPPoint(ocp.solve([0.0, 0.1, 0.0, 0.0]).w, None, None)  # the C's guess
    rti._prepare(0.0)
    x = np.array([0.0, 0.1, 0.0, 0.0])
    for k in range(15):
        c, p = ctl.step(x, 0.05 * k), rti.step(x, 0.05 * k)
        np.testing.assert_allclose(c.u, p.u, atol=1e-8)
        x = x + 0.05 * np.array([x[2], x[3], c.u[0], 0.0])  # any plant: both see the same states


def test_c_interface_status_codes_and_no_heap(swingup: shooting.MultipleShootingOCP, tmp_path: Path) -> None:
    report = export_controller(swingup, tmp_path / "c", real="float", name="cp")
    assert report.ok
    out = tmp_path / "c"
    assert sorted(p.name for p in out.iterdir()) == ["Makefile", "cp_mpc.c", "cp_mpc.h", "manifest.json"]
    (tmp_path / "main.c").write_text("""
#include <stdio.h>
#include "cp_mpc.h"
static cp_mpc_mem mine;   /* a struct the caller owns */
int main(void) {
  cp_real x[CP_MPC_NX] = {0.0f, 3.14159265f, 0.0f, 0.0f}, u[CP_MPC_NU], xr[CP_MPC_NX] = {0};
  int bad = 0;
  bad |= cp_mpc_init(&mine) != CP_MPC_OK;
  bad |= cp_mpc_set_reference(&mine, CP_MPC_N + 1, xr, 0) != CP_MPC_BAD_ARGUMENT;
  bad |= cp_mpc_set_reference(&mine, -1, xr, 0) != CP_MPC_BAD_ARGUMENT;
  bad |= cp_mpc_feedback(&mine, 0, u) != CP_MPC_BAD_ARGUMENT;
  bad |= cp_mpc_solve(&mine, x, u, 0) != CP_MPC_BAD_ARGUMENT;
  bad |= cp_mpc_solve(&mine, x, u, CP_MPC_MAX_SQP_ITER + 1) != CP_MPC_BAD_ARGUMENT;
  bad |= cp_mpc_reset(0, x) != CP_MPC_BAD_ARGUMENT;
  x[1] = 0.0f / 0.0f;
  bad |= cp_mpc_reset(&mine, x) != CP_MPC_NONFINITE;
  bad |= cp_mpc_solve(&mine, x, u, 5) != CP_MPC_NONFINITE;
  x[1] = 3.14159265f;
  /* after init (and reset) the first feedback iterates to convergence by itself, prepared or not */
  bad |= cp_mpc_feedback(&mine, x, u) != CP_MPC_OK;
  bad |= mine.qp_iterations < 1 || mine.status != CP_MPC_OK || mine.sqp_iterations < 1 || mine.cold;
  bad |= mine.sqp_step > CP_MPC_SQP_TOL_STEP || mine.sqp_defect > CP_MPC_SQP_TOL_DEFECT;
  bad |= mine.u_prev[0] != u[0];                        /* feedback remembers the input it returned */
  bad |= cp_mpc_set_previous_input(&mine, 0) != CP_MPC_BAD_ARGUMENT;
  xr[0] = 2.5f;
  bad |= cp_mpc_set_previous_input(&mine, xr) != CP_MPC_OK || mine.u_prev[0] != 2.5f;
  xr[0] = 0.0f;
  {  /* a feedback that finds its guess not prepared prepares it (status 5 used to hold the old input for good) */
    static cp_mpc_mem other;
    cp_real ua[CP_MPC_NU], ub[CP_MPC_NU];
    other = mine;  /* (a copy: the same guess) */
    bad |= cp_mpc_shift(&mine) != CP_MPC_OK || cp_mpc_shift(&other) != CP_MPC_OK || cp_mpc_prepare(&other) != CP_MPC_OK;
    bad |= cp_mpc_feedback(&mine, x, ua) != CP_MPC_OK;
    bad |= cp_mpc_feedback(&other, x, ub) != CP_MPC_OK || ua[0] != ub[0];
  }
  x[0] = 0.0f / 0.0f;
  bad |= cp_mpc_prepare(&mine) != CP_MPC_OK;
  bad |= cp_mpc_feedback(&mine, x, u) != CP_MPC_NONFINITE;
  printf("%d %g\\n", bad, (double)u[0]);
  return bad;
}
""")
    build = toolchain.compile_host([out / "cp_mpc.c", tmp_path / "main.c"], tmp_path / "prog",
                                   extra_flags=(f"-I{out}", "-Wdouble-promotion", "-Wno-div-by-zero"))
    assert build.ok, build.stderr
    run = subprocess.run([str(tmp_path / "prog")], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout
    assert np.isfinite(float(run.stdout.split()[1]))  # a failed feedback still writes a finite input
    obj = tmp_path / "cp.o"
    assert toolchain.compile_host([out / "cp_mpc.c"], obj, link=False, extra_flags=("-Wdouble-promotion",)).ok
    heap = {"malloc", "calloc", "realloc", "free"} & set(toolchain.undefined_symbols(obj))
    assert not heap
    header = (out / "cp_mpc.h").read_text()
    for needle in ("cp_mpc_init", "cp_mpc_set_parameters", "typedef struct cp_mpc_mem cp_mpc_mem", "Reentrant",
                   "at most", "seeds the trajectory guess"):
        assert needle in header


def test_what_the_c_cannot_do_is_refused(cartpole: shooting.Model, tmp_path: Path) -> None:
    z = ca.SX.sym("z")
    bounded_z = shooting.Model("zb", cartpole.x, cartpole.u, cartpole.xdot + ca.vertcat(0, 0, 0, z), z=z,
                               alg=z - cartpole.x[0], z0=[0.0], z_min=[-1.0], x0=cartpole.x0)
    with pytest.raises(ValueError, match="algebraic states.*z_min/z_max"):
        export_controller(shooting.MultipleShootingOCP(bounded_z, 5, dt=0.05), tmp_path / "a")
    singular = shooting.MultipleShootingOCP(cartpole, 5, dt=0.05, R=[0.0])
    with pytest.raises(ValueError, match=r"R \+ R_delta must be positive definite"):
        export_controller(singular, tmp_path / "b")
    l1_only = shooting.MultipleShootingOCP(cartpole, 5, dt=0.05, soft_x_bounds=True, slack_l2=0.0)
    with pytest.raises(ValueError, match="slack_l2"):
        export_controller(l1_only, tmp_path / "c")
    soft_path_l1 = shooting.MultipleShootingOCP(cartpole, 5, dt=0.05, slack_l2=0.0, soft_path_constraints=True,
                                                path_constraints=lambda x, u, p: u[0] * x[2] - 100.0)
    with pytest.raises(ValueError, match="soft path constraints.*slack_l2 > 0"):  # (one rule for every soft row)
        export_controller(soft_path_l1, tmp_path / "c")
    with pytest.raises(ValueError, match="real"):
        export_controller(l1_only, tmp_path / "d", real="half")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="MultipleShootingOCP"):
        export_controller("cartpole", tmp_path / "e")  # type: ignore[arg-type]
    assert not any((tmp_path / d).exists() for d in "abcde")


def test_a_failed_check_writes_nothing_and_exits_1(swingup: shooting.MultipleShootingOCP, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                                                   ) -> None:
    import shooting.controller.check as check

    monkeypatch.setattr(check, "TOLERANCE_SAFETY", 0.0)  # nothing can pass
    monkeypatch.setitem(check.TOLERANCE_FLOOR, "double", 0.0)
    monkeypatch.setitem(check.SQP_ALLOWANCE, "double", 0.0)
    monkeypatch.setattr(check, "TERMINATION_SAFETY", 0.0)  # (the solvers' measured stopping moves too)
    report = export_controller(swingup, tmp_path / "out", check=True, check_steps=3)
    assert not report.ok and report.files == [] and not (tmp_path / "out").exists()
    assert main(["controller", "--model", "cartpole", "--check", "--check-steps", "3", "--out",
                 str(tmp_path / "cli"), "-q"]) == 1
    assert "nothing written" in capsys.readouterr().err
    assert not (tmp_path / "cli").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--real", "half"], "invalid choice"),
    (["--slack-l2", "0"], "positive number"),
    (["--horizon", "0"], "integer"),
    (["--x0", "1,2"], "needs 4"),
    (["--qp", "osqp"], "invalid choice"),
])
def test_cli_bad_options_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                             message: str) -> None:
    assert main(["controller", "--model", "cartpole", "--out", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]


def test_cli_writes_the_contract_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["controller", "--model", "cartpole", "--real", "float", "--check", "--check-steps", "5", "--out",
                 str(tmp_path / "o"), "-q"]) == 0
    names = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert names == ["Makefile", "cartpole_mpc.c", "cartpole_mpc.h", "manifest.json"]
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert manifest["kind"] == "controller" and manifest["qp"]["soft_x_bounds"] is True
    assert manifest["check_host"]["passed"] is True
    ctl = load_controller(tmp_path / "o")  # the model is rebuilt from the manifest
    assert ctl.model.name == "cartpole" and ctl.real == "float"


def test_load_step_is_the_exported_integrator(tmp_path: Path) -> None:
    model = shooting.load_model("cartpole")
    F = shooting.build_integrator(model, "rk4", 2)
    assert export_integrator(F, tmp_path / "rk4", name="cp_rk4").ok
    step = load_step(tmp_path / "rk4")
    rng = np.random.default_rng(0)
    for _ in range(5):
        x, u = model.x0 + rng.normal(size=4), rng.uniform(-80, 80, size=1)
        x_next, A, B = step(x, u, None, 0.3, 0.05)
        ref = [np.array(v) for v in F(x, u, [], 0.3, 0.05)]
        np.testing.assert_allclose(x_next, ref[0].ravel(), rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(A, ref[1], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(B, ref[2], rtol=1e-12, atol=1e-13)
    with pytest.raises(ValueError, match="entries"):
        step([1.0, 2.0], [0.0])
    with pytest.raises(ValueError, match="controller"):
        load_controller(tmp_path / "rk4")
    with pytest.raises(ValueError, match="manifest"):
        load_step(tmp_path)


def test_sample_times_are_the_controllers_own(swingup: shooting.MultipleShootingOCP, tmp_path: Path) -> None:
    """A loaded controller's step runs feedback, shift and prepare in one call and times them in C: each
    solve_time is positive and within the wall time of its step (a time the C does not write reads 0; one
    that includes Python's exceeds nothing here but is caught by the first), and the prediction is the
    feedback's, taken before the shift (it starts at the measured state)."""
    assert export_controller(swingup, tmp_path / "c", force=True).ok
    ctl = load_controller(tmp_path / "c")
    x = np.array(swingup.model.x0, dtype=float)
    for _ in range(6):
        t0 = time.perf_counter()
        step = ctl.step(x)
        wall = time.perf_counter() - t0
        assert step.success and 0.0 < step.solve_time <= wall
        assert step.solve_time == pytest.approx(ctl.feedback_times[-1] + ctl.preparation_times[-1], rel=1e-12)
        assert ctl.feedback_times[-1] > 0 and ctl.preparation_times[-1] > 0
        assert ctl.x_pred is not None and ctl.u_pred is not None
        np.testing.assert_allclose(ctl.x_pred[0], x, rtol=0, atol=1e-12)
        np.testing.assert_allclose(ctl.u_pred[0], step.u, rtol=0, atol=1e-12)
        x = ctl.x_pred[1]


@needs_m4
@pytest.mark.parametrize("real", ["float", "double"])
def test_swing_up_on_the_emulated_cortex_m4(swingup: shooting.MultipleShootingOCP, cartpole: shooting.Model,
                                            swingup_reference: tuple[np.ndarray, ...], real: str) -> None:
    spec = controller_spec(swingup)
    run = board_loop(generate_controller(spec, "cartpole", real=real), spec, cartpole.x0, 80)
    tol = 1e-8 if real == "double" else 1e-3
    assert compare_inputs(run.u, swingup_reference[1], 5) < tol
    assert all(s == "ok" for s in run.status)
    assert abs(run.x[-1, 1]) < 0.02 and abs(run.x[-1, 0]) < 0.05  # upright, on the board
    instructions = run.sample_instructions
    assert instructions is not None and np.all(instructions > 1000)


@needs_m4
def test_cortex_m4_export_fits_the_budget(swingup: shooting.MultipleShootingOCP, tmp_path: Path) -> None:
    report = export_controller(swingup, tmp_path / "m4", real="float", target="cortex-m4", check=True,
                               check_steps=20)
    assert report.ok, report.problems
    assert report.flash is not None and report.flash <= 64 * 1024
    assert report.ram is not None and report.ram <= 16 * 1024
    assert not report.double_symbols
    manifest = json.loads((tmp_path / "m4" / "manifest.json").read_text())
    m4 = manifest["check_cortex_m4"]
    assert m4["passed"] and m4["instructions_per_sample_median"] > 0
    assert "RAM" in (tmp_path / "m4" / "cartpole_mpc.h").read_text()


@needs_m4
def test_quadrotor_point_to_point_on_the_board() -> None:
    model = shooting.load_model("quadrotor")
    ocp = shooting.MultipleShootingOCP.from_problem(
        model, shooting.default_scenario(model).problem.with_changes(horizon=20))
    spec = controller_spec(ocp)
    _, u_ref = reference_loop(ocp, model.x0, 20)
    run = board_loop(generate_controller(spec, "quadrotor", real="float"), spec, model.x0, 20)
    assert compare_inputs(run.u, u_ref, 5) < 1e-3
    assert np.linalg.norm(run.x[-1, :3]) < np.linalg.norm(model.x0[:3])  # on its way to the origin


def test_input_errors_are_measured_on_the_input_range() -> None:
    """Where every input sits at a zero bound (a fed-batch feed, a heat pump off), an error of 5e-13 is 5e-13 of
    the range, not 1.0 of the (vanishing) largest input."""
    from shooting.controller.check import input_scale

    model = shooting.load_model("cartpole")
    ocp = shooting.MultipleShootingOCP(model, 5, dt=0.05, u_min=[0.0], u_max=[40.0])
    spec = controller_spec(ocp, guess=(np.zeros((6, 4)), np.zeros((5, 1))))
    scale = input_scale(spec)
    assert scale.tolist() == [40.0]
    u_ref = np.zeros((5, 1))
    u = u_ref + 5e-13
    assert compare_inputs(u, u_ref, 5, scale) == pytest.approx(5e-13 / 40)
    assert compare_inputs(u, u_ref, 5) > 0.1  # the old measure, relative to the largest input


def test_loaded_controller_final_error_is_against_its_reference(tmp_path: Path) -> None:
    # The quadrotor's target has qw = 1: measured from zero, a loop that arrived reported 1.0 (issue 25 item 7).
    m = shooting.load_model("quadrotor")
    scenario = shooting.default_scenario(m).with_changes(horizon=10)
    ocp = shooting.build_ocp(scenario.with_changes(soft_x_bounds=True), m)
    assert export_controller(ocp, tmp_path / "q").ok
    ctl = load_controller(tmp_path / "q")
    assert np.array_equal(ctl.target_state, ocp.x_ref[-1] if ocp.x_ref.ndim > 1 else ocp.x_ref)
    traj = shooting.simulate_closed_loop(ctl, scenario.x0, 60, progress=False)
    assert traj.final_error() == pytest.approx(float(np.linalg.norm(traj.x[-1] - ctl.target_state)), abs=0)
    assert traj.final_error() < 0.1
    moved = np.array(ctl.target_state)
    moved[0] = 0.5
    ctl.set_reference(ocp.horizon, moved)  # the terminal stage's reference is the target
    assert ctl.target_state is not None and ctl.target_state[0] == 0.5
