"""What a newcomer with a gantry crane met (issue 36 items 3-8), each against what the code should say: the Hessian
rule for curved rows, the RTI's first sample, path constraints over a closed loop, the outputs that under-reported,
the CLI's walls.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import casadi as ca
import numpy as np
import pytest
from matplotlib.figure import Figure

import shooting
from shooting.mpc.costs import hessians
from shooting.mpc.rti_data import curved_constraints
from shooting.sweeps.output import success_map

sys.path.insert(0, str(Path(__file__).parent))
import gantry_crane  # noqa: E402

CRANE = str(Path(gantry_crane.__file__))


@pytest.fixture(scope="module")
def crane() -> tuple[shooting.Model, shooting.Scenario]:
    model = gantry_crane.make_model()
    return model, gantry_crane.scenario(model)


def test_curved_rows_choose_the_exact_sqp_in_float(crane) -> None:
    model, scenario = crane
    assert curved_constraints(shooting.build_ocp(scenario, model))  # (l sin theta)^2: curved
    linear = scenario.with_changes(path_constraints=lambda x, u, p: ca.vertcat(x[0] - 2.0, p[0] * u[0] - 3.0))
    assert not curved_constraints(shooting.build_ocp(linear, model))  # (p enters, x and u linearly)
    assert not curved_constraints(shooting.build_ocp(scenario.with_changes(path_constraints=None), model))
    assert hessians("auto", None, None, "float", curved_rows=True) == ("gauss-newton", "exact")
    assert hessians("auto", None, None, "float") == ("gauss-newton", "gauss-newton")
    assert hessians("auto", None, None, "double") == ("gauss-newton", "exact")
    assert hessians("gauss-newton", None, None, "float", curved_rows=True) == ("gauss-newton", "gauss-newton")


def test_the_rti_first_sample_is_a_converged_sqp(crane) -> None:
    # Issue 36 item 4: the RTI's first sample is the cold start's SQP, converged where IPOPT converges.
    model, scenario = crane
    ocp = shooting.build_ocp(scenario, model)
    assert ocp.solve(scenario.x0).success
    traj = shooting.simulate_closed_loop(shooting.RTIController(ocp), scenario.x0, 5, reference=scenario.reference,
                                         progress=False)
    assert traj.status[0] == "converged" and traj.success.all()


def test_path_values_of_a_closed_loop(crane) -> None:
    # acfd672: numpy's raw "shape mismatch" for any other length than the horizon.
    model, scenario = crane
    ocp = shooting.build_ocp(scenario, model)
    traj = shooting.simulate_closed_loop(shooting.MPCController(ocp), scenario.x0, 45, reference=scenario.reference,
                                         progress=False)
    values = ocp.path_values(traj.x, traj.u)
    assert values.shape == (45, 1)
    expected = (model.p0[2] * np.sin(traj.x[:45, 1])) ** 2 - gantry_crane.SWAY**2  # written out
    np.testing.assert_allclose(values[:, 0], expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(traj.path_values, values, rtol=1e-12, atol=1e-15)
    stats = traj.stats()
    assert stats["max_path_violation"] == pytest.approx(max(0.0, float(expected.max())), abs=1e-15)
    assert stats["max_path_violation"] > 1e-3  # (the sway limit broken: a case that tests something)
    with pytest.raises(ValueError, match="x"):
        ocp.path_values(traj.x[:10], traj.u)


def test_a_loaded_controllers_stats_have_every_key(crane, tmp_path: Path) -> None:
    # acfd672: KeyError on max_path_violation and closed_loop_cost for a loaded controller.
    from shooting.codegen import export_controller, load_controller

    model, scenario = crane
    ocp = shooting.build_ocp(scenario, model)
    assert export_controller(ocp, tmp_path / "c").ok
    traj = shooting.simulate_closed_loop(load_controller(tmp_path / "c", model=model), scenario.x0, 5,
                                         reference=scenario.reference, progress=False)
    stats = traj.stats()
    assert stats["max_path_violation"] is None and stats["closed_loop_cost"] is None
    assert traj.stats(ocp.Q, ocp.R)["closed_loop_cost"] > 0


def test_thesuccess_map_shows_the_parameter_that_varied() -> None:
    # acfd672 plotted success over two start states: a sweep over the load's mass drew an empty axis.
    rng = np.random.default_rng(1)
    rows = [{"case": k, "x0": np.zeros(4), "p": np.array([10.0, 5.0 + rng.uniform(-2, 2), 1.0])} for k in range(20)]
    ax = Figure().subplots()
    success_map(ax, rows, np.array([k % 3 != 0 for k in range(20)]), ["p", "theta", "v", "omega"], ["M", "m", "l"])
    assert ax.get_xlabel() == "p m" and ax.get_ylabel() == ""
    rows[0]["x0"] = np.array([0.3, 0, 0, 0])  # a start state that varies too: both, each on its own scale
    ax = Figure().subplots()
    success_map(ax, rows, np.ones(20, bool), ["p", "theta", "v", "omega"], ["M", "m", "l"])
    assert {ax.get_xlabel(), ax.get_ylabel()} == {"p m", "x0 p"}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shooting", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def test_mpc_says_a_broken_soft_limit(tmp_path: Path) -> None:
    run = _cli("mpc", "--model", CRANE, "--sim-steps", "40", "-q", "--out", "run", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "path constraints h(x, u, p) <= 0: the closed loop went past them by up to" in run.stdout
    assert (tmp_path / "run" / "path_constraints.png").stat().st_size > 1000
    assert "path_constraints.png" in run.stdout


def test_cli_walls(tmp_path: Path) -> None:
    described = _cli("list", "--model", CRANE, cwd=tmp_path)
    assert described.returncode == 0 and "theta [rad]" in described.stdout and "F [N]" in described.stdout
    assert "scenarios (--scenario): default" in described.stdout and "l " in described.stdout
    unknown = _cli("controller", "--model", CRANE, "--out", "c", "--bogus", cwd=tmp_path)
    assert unknown.returncode == 2 and "see 'shooting-codegen controller --help'" in unknown.stderr
    slack = _cli("controller", "--model", CRANE, "--slack-l1", "1e4", "-q", "--out", "c", cwd=tmp_path)
    assert slack.returncode == 0, slack.stderr  # (acfd672: refused, "no state bounds", with soft path rows)
    header = (tmp_path / "c" / "gantry_crane_mpc.h").read_text()
    assert "h(x_k, u_k, p) <= 0 at stages 0..N-1 (1 row(s)" in header and "10000 sum(s)" in header


def test_the_integrator_check_covers_the_scenarios_states(tmp_path: Path) -> None:
    # Issue 36 item 1, the integrator's part: its vectors are drawn around where the plant will be, the scenario's
    # start and references in turn (acfd672: around the model's x0 alone, the crane's cart never at 1 m).
    from shooting.codegen import export_integrator
    from shooting.codegen.verify import make_vectors

    model = gantry_crane.make_model()
    F = shooting.build_integrator(model, "rk4", 1)
    centers = np.array([[0.0, 0, 0, 0], [1.0, 0, 0, 0]])
    vectors = make_vectors(F, model, n=40, centers=centers)
    carts = np.array([v[0][0] for v in vectors])
    assert abs(carts[1::2].mean() - 1.0) < 0.2 and abs(carts[0::2].mean()) < 0.2  # (0.3 spread, 20 draws each)
    with pytest.raises(ValueError, match="check_states"):
        export_integrator(F, tmp_path / "bad", check_states=[1.0, 0.0, 0.0])
    run = _cli("integrator", "--model", CRANE, "--check", "-q", "--out", "int", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    import json

    states = json.loads((tmp_path / "int" / "manifest.json").read_text())["check_states"]
    assert [0.0, 0.0, 0.0, 0.0] in states and [1.0, 0.0, 0.0, 0.0] in states


def test_sweep_rows_carry_the_csv_names() -> None:
    # acfd672: SweepResult.rows held x0 and p arrays where cases.csv has x0_theta, p_m.
    model = shooting.load_model("pendulum")
    scenario = shooting.default_scenario(model).with_changes(sim_steps=3, horizon=10)
    result = shooting.sweep(scenario, model=model, cases=2, x0_spread=0.05, progress=False)
    for row in result.rows:
        assert row["x0_theta"] == row["x0"][0] and row["x0_omega"] == row["x0"][1]
    np.testing.assert_array_equal(result.column("x0_theta"), [r["x0_theta"] for r in result.rows])


def test_the_sweep_line_says_samples_not_ok(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    # acfd672's summary line said "25 succeeded" where every case had samples stopped by the budget; the line now
    # counts the cases with samples not ok, by their most frequent reason (a sweep result stands in for the run).
    from shooting import cli
    from shooting.sweeps import SweepResult

    summary = {"cost": {"p50": 1.0}, "final_error": {"p50": 0.01}, "cases": 25, "cases_resumed": 0,
               "run_on": {"where": "this process"}, "succeeded": 25, "success_rate": 1.0, "tolerance": 0.05,
               "wall_time": 1.0, "failed_steps_total": 31,
               "solver_failures": {"cases": 25, "reasons": {"budget": 24, "line search failed": 1}}}
    monkeypatch.setattr("shooting.sweeps.sweep", lambda *a, **k: SweepResult((), (), summary, tmp_path, []))
    assert cli.main(["sweep", "--model", "pendulum", "--cases", "25", "--workers", "1", "-q", "--out",
                     str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert "25 succeeded" in out
    assert "25 of 25 cases had samples that did not end ok (31 samples in all" in out and "budget 24" in out
