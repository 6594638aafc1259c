"""Sweeps (issue 17): real closed loops on real Dask, in this process, on a local cluster and on a scheduler.

Every sweep here is short (Van der Pol, N = 10, 15 samples; the pendulum for the
C export of another model), but real: `simulate_closed_loop` on each case, a
`LocalCluster` of processes, a ``dask scheduler`` and two ``dask worker``
processes started here on 127.0.0.1, a worker process killed with SIGKILL in
the middle of a sweep, a real SIGINT to the CLI. Truth is independent: the
cases are drawn again here from ``SeedSequence(seed).spawn(n)``, three rows
are recomputed with a fresh controller and `simulate_closed_loop` and their
figures with numpy, the C controller is compared with the Python RTI.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import shooting
from shooting.cli import main
from shooting.sweeps.output import JOURNAL

FAST = dict(sim_steps=15, horizon=10)
OPTIONS = dict(cases=6, x0_spread=0.2, p_spread=0.3, noise_std=0.01, seed=7, progress=False)
NUMERIC = ("cost", "final_error", "max_violation")
CLI = ["sweep", "--model", "vanderpol", "--horizon", "10", "--sim-steps", "15", "--x0-spread", "0.2", "--p-spread",
       "0.3", "--noise-std", "0.01", "--seed", "7", "-q", "--no-lint"]
#: The `dask` command of this interpreter (`dask scheduler`, `dask worker`), wherever pip put its scripts.
DASK = [sys.executable, "-m", "dask"]


def _scenario(name: str = "vanderpol") -> shooting.Scenario:
    return shooting.default_scenario(shooting.load_model(name)).with_changes(**FAST)


def _same_rows(a, b, tol: float = 1e-12) -> None:
    """Equal rows: every column but the solve times (wall-clock) to `tol` relative."""
    assert len(a) == len(b)
    for ra, rb in zip(a, b, strict=True):
        assert (ra["case"], ra["seed"], ra["success"], ra["failed_steps"]) == \
            (rb["case"], rb["seed"], rb["success"], rb["failed_steps"]), (ra, rb)
        np.testing.assert_array_equal(ra["x0"], rb["x0"])
        np.testing.assert_array_equal(ra["p"], rb["p"])
        for key in NUMERIC:
            assert abs(ra[key] - rb[key]) <= tol * max(1.0, abs(ra[key])), (key, ra[key], rb[key])


@pytest.fixture(scope="module")
def serial():
    return shooting.sweep(_scenario(), workers=1, **OPTIONS)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    """A ``dask scheduler`` and two ``dask worker`` processes (one thread each) on 127.0.0.1, stopped at the end."""
    folder = tmp_path_factory.mktemp("dask")
    address = f"tcp://127.0.0.1:{_free_port()}"
    host, port = address.rsplit(":", 1)
    procs: list[subprocess.Popen] = []
    try:
        procs.append(subprocess.Popen([*DASK, "scheduler", "--host", "127.0.0.1", "--port", port,
                                       "--no-dashboard"], cwd=folder, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        for _ in range(2):
            procs.append(subprocess.Popen([*DASK, "worker", address, "--nthreads", "1",
                                           "--host", "127.0.0.1", "--no-dashboard", "--local-directory",
                                           str(folder)], cwd=folder, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        from distributed import Client

        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
        yield address, procs
    finally:
        _stop(procs)


def test_rows_are_the_same_serially_on_a_local_cluster_and_on_a_scheduler(serial, remote):
    local = shooting.sweep(_scenario(), workers=2, **OPTIONS)
    assert local.summary["run_on"] == {"where": "local cluster", "workers": 2}
    _same_rows(serial.rows, local.rows)
    on_scheduler = shooting.sweep(_scenario(), scheduler=remote[0], **OPTIONS)
    assert on_scheduler.summary["run_on"]["where"] == remote[0]
    _same_rows(serial.rows, on_scheduler.rows)
    # The spreads did something: distinct starts and plants, and not every row alike.
    assert len({tuple(r["x0"]) for r in serial.rows}) == 6 and len({tuple(r["p"]) for r in serial.rows}) == 6
    assert len({r["cost"] for r in serial.rows}) == 6


def test_cases_are_drawn_from_their_own_child_seeds(serial):
    """x0 uniform in the box x0 +- spread * (1: unbounded states), p = p0 (1 + spread U(-1, 1)): drawn again."""
    model = shooting.load_model("vanderpol")
    scenario = _scenario()
    children = np.random.SeedSequence(7).spawn(6)
    for row, child in zip(serial.rows, children, strict=True):
        assert row["seed"] == int(child.generate_state(1, np.uint32)[0])
        rng = np.random.default_rng(child)
        low, high = scenario.x0 - 0.2, scenario.x0 + 0.2
        np.testing.assert_array_equal(row["x0"], low + (high - low) * rng.uniform(0, 1, 2))
        np.testing.assert_array_equal(row["p"], model.p0 * (1 + 0.3 * rng.uniform(-1, 1, 1)))
    # More cases keep the first ones: case i depends on (seed, i) only.
    more = shooting.sweep(scenario, workers=1, **{**OPTIONS, "cases": 8})
    _same_rows(serial.rows, more.rows[:6])


def test_three_rows_recomputed_with_simulate_closed_loop(serial):
    scenario = _scenario()
    model = shooting.load_model("vanderpol")
    ocp = shooting.build_ocp(scenario, model)
    Q, R = np.diag([1.0, 1.0]), np.diag([0.1])  # the scenario's weights (models/vanderpol.py), written out
    np.testing.assert_array_equal(ocp.Q, Q)
    np.testing.assert_array_equal(ocp.R, R)
    for row in serial.rows[:3]:
        traj = shooting.simulate_closed_loop(shooting.RTIController(ocp), row["x0"], 15, p=row["p"], noise_std=0.01,
                                             seed=row["seed"], progress=False)
        dx, du = traj.x[:-1], traj.u  # references zero
        cost = sum(float(x @ Q @ x) for x in dx) + sum(float(u @ R @ u) for u in du)
        final = float(np.max(np.abs(traj.x[-1])))
        assert row["cost"] == pytest.approx(cost, rel=1e-12)
        assert row["final_error"] == pytest.approx(final, rel=1e-12)
        assert row["failed_steps"] == int((~traj.success).sum()) == 0
        # the distance that does not add units: each state over the nominal start's distance in it, at least 1 of
        # its unit (vanderpol: x0 = (0.5, 0.5) from the origin: scales 1), see shooting.sweeps.cases.state_scale;
        # arrived: within 5 % of it
        scale = np.maximum(np.abs(scenario.x0), 1.0)
        scaled = float(np.max(np.abs(traj.x[-1]) / scale))
        assert row["final_error_scaled"] == pytest.approx(scaled, rel=1e-12)
        assert row["success"] == (scaled <= 0.05)
        assert 0 < row["solve_time_median"] <= row["solve_time_max"]


def test_explicit_cases_and_their_keys():
    model = shooting.load_model("vanderpol")
    given = [{"x0": [0.3, -0.2], "p": [1.5], "seed": 3, "noise_std": 0.02}, {"x0": [0.1, 0.1]}]
    result = shooting.sweep(_scenario(), cases=given, workers=1, progress=False)
    np.testing.assert_array_equal(result.rows[0]["x0"], [0.3, -0.2])
    np.testing.assert_array_equal(result.rows[0]["p"], [1.5])
    assert result.rows[0]["seed"] == 3
    np.testing.assert_array_equal(result.rows[1]["p"], model.p0)
    traj = shooting.simulate_closed_loop(shooting.RTIController(shooting.build_ocp(_scenario(), model)), [0.3, -0.2],
                                         15, p=[1.5], noise_std=0.02, seed=3, progress=False)
    assert result.rows[0]["final_error"] == pytest.approx(float(np.max(np.abs(traj.x[-1]))), rel=1e-12)
    for bad, match in (([{"x0": [0, 0], "mu": 1}], "unknown key"), ([], "empty"), (0, "cases"),
                       ([{"x0": [0.0]}], "x0")):
        with pytest.raises(ValueError, match=match):
            shooting.sweep(_scenario(), cases=bad, workers=1, progress=False)
    with pytest.raises(ValueError, match="x0_spread has no effect"):
        shooting.sweep(_scenario(), cases=given, x0_spread=0.1, workers=1, progress=False)


def test_a_worker_killed_mid_sweep_costs_nothing(remote, tmp_path):
    """SIGKILL to one worker process after the second case: its cases run again, the rows are the same."""
    import psutil

    address, procs = remote
    expected = shooting.sweep(_scenario(), workers=1, **{**OPTIONS, "cases": 12})
    workers = [child.pid for proc in procs[1:] for child in psutil.Process(proc.pid).children(recursive=True)
               if "spawn_main" in " ".join(child.cmdline())]  # the worker processes under the two nannies
    assert len(workers) == 2, workers
    killed = []

    def progress(message: str) -> None:
        if not killed and message.startswith("2/"):
            os.kill(workers[0], signal.SIGKILL)
            killed.append(workers[0])

    result = shooting.sweep(_scenario(), scheduler=address, **{**OPTIONS, "cases": 12, "progress": progress},
                            out_dir=tmp_path / "out")
    assert killed
    with pytest.raises(psutil.NoSuchProcess):
        psutil.Process(killed[0]).status()  # gone (the nanny reaped it and started another)
    _same_rows(expected.rows, result.rows)
    assert result.summary["cases_run"] == 12


def test_the_c_controller_in_the_loop(serial, tmp_path):
    """controller="c" (exported here, compiled in each worker) follows the Python RTI; so does an export's directory."""
    c = shooting.sweep(_scenario(), controller="c", workers=1, **OPTIONS)
    _same_rows(serial.rows, c.rows, tol=1e-6)
    assert c.summary["controller"]["kind"] == "c"
    on_cluster = shooting.sweep(_scenario(), controller="c", workers=2, **OPTIONS)
    _same_rows(c.rows, on_cluster.rows)
    export = tmp_path / "ctrl"
    assert main(["controller", "--model", "vanderpol", "--horizon", "10", "--out", str(export), "-q"]) == 0
    from_dir = shooting.sweep(_scenario(), controller=export, workers=1, **OPTIONS)
    _same_rows(c.rows, from_dir.rows)


@pytest.fixture(scope="module")
def pendulum_export(tmp_path_factory):
    out = tmp_path_factory.mktemp("pendulum") / "ctrl"
    assert main(["controller", "--model", "pendulum", "--horizon", "10", "--out", str(out), "-q"]) == 0
    return out


def _unreachable() -> str:
    return f"tcp://127.0.0.1:{_free_port()}"


@pytest.mark.parametrize("extra, says", [
    (["--controller", "lqr"], "controller must be one of"),
    (["--controller", "{not_export}"], "not a controller export"),
    (["--controller", "{pendulum}"], "exported for model pendulum"),
    (["--x0-spread", "nan"], "--x0-spread"),
    (["--p-spread", "-0.1"], "--p-spread"),
    (["--noise-std", "inf"], "--noise-std"),
    (["--cases", "0"], "--cases"),
    (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "--workers has no effect"),
    (["--scheduler", "{unreachable}"], "cannot reach the Dask scheduler at tcp://127.0.0.1:"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(extra, says, tmp_path, capsys, pendulum_export):
    not_export = tmp_path / "plain"
    not_export.mkdir()
    (not_export / "notes.txt").write_text("hello")
    extra = [e.format(not_export=not_export, pendulum=pendulum_export, unreachable=_unreachable()) for e in extra]
    out = tmp_path / "out"
    start = time.monotonic()
    assert main([*CLI, "--cases", "3", *extra, "--out", str(out)]) == 2
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("shooting-codegen: error: ") and says in err, err
    assert not out.exists()
    if "--scheduler" in extra:
        assert elapsed < 10, elapsed  # the contract's bound on an unreachable scheduler, not a speed figure


def test_a_blackholed_scheduler_address_is_refused_within_ten_seconds(tmp_path, capsys):
    """An address nobody answers (TEST-NET-1, RFC 5737): the connection times out, one line naming it."""
    start = time.monotonic()
    assert main([*CLI, "--cases", "2", "--scheduler", "tcp://192.0.2.1:8786", "--out", str(tmp_path / "o")]) == 2
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "192.0.2.1:8786" in err, err


def _marked(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _journal_rows(out: Path) -> int:
    try:
        return max(0, len((out / JOURNAL).read_text().splitlines()) - 1)
    except OSError:
        return 0


def test_ctrl_c_keeps_the_journal_and_resume_runs_only_the_missing_cases(serial, tmp_path):
    marker = uuid.uuid4().hex
    env = {**os.environ, "SHOOTING_TEST_MARKER": marker}
    out = tmp_path / "out"
    args = [sys.executable, "-m", "shooting.cli", *CLI, "--cases", "12", "--workers", "2", "--out", str(out)]
    # Its own process group, signalled as a terminal's Ctrl-C is: the CLI and the local cluster's workers get SIGINT
    # (the workers ignore it: no traceback of theirs on the shared stderr; the CLI stops them).
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while _journal_rows(out) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and err == "shooting-codegen: interrupted\n", err
    assert sorted(p.name for p in out.iterdir()) == [JOURNAL]
    finished = _journal_rows(out)
    assert 3 <= finished < 12
    deadline = time.monotonic() + 10
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _marked(marker), "a worker process outlived the interrupted sweep"

    # Without --resume the journal is not overwritten; with it, only the missing cases run.
    assert main([*CLI, "--cases", "12", "--workers", "1", "--out", str(out)]) == 2
    assert main([*CLI, "--cases", "12", "--workers", "1", "--resume", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cases_resumed"] == finished and summary["cases_run"] == 12 - finished
    assert sorted(p.name for p in out.iterdir()) == ["cases.csv", "summary.json", "sweep.png"]
    whole = shooting.sweep(_scenario(), workers=1, **{**OPTIONS, "cases": 12})
    with open(out / "cases.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0])[:9] == ["case", "seed", "success", "failed_steps", "cost", "final_error", "max_violation",
                                 "solve_time_median", "solve_time_max"]
    assert list(rows[0])[9:] == ["outcome", "failure_reason", "final_error_scaled", "x0_x1", "x0_x2", "p_mu"]
    for text, row in zip(rows, whole.rows, strict=True):
        assert int(text["case"]) == row["case"] and int(text["seed"]) == row["seed"]
        assert (text["success"] == "true") == row["success"]
        for key in NUMERIC:
            assert float(text[key]) == row[key]  # repr in the CSV: the same double
    # Resuming with other options is refused (the journal would mix two sweeps).
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / JOURNAL).write_text(json.dumps({"generator": "shooting", "fingerprint": {"seed": 1}}) + "\n")
    assert main([*CLI, "--cases", "12", "--workers", "1", "--resume", "--out", str(partial)]) == 2
    assert sorted(p.name for p in partial.iterdir()) == [JOURNAL]


def test_outputs_and_summary(serial, tmp_path):
    out = tmp_path / "out"
    result = shooting.sweep(_scenario(), workers=1, out_dir=out, **OPTIONS)
    assert sorted(p.name for p in out.iterdir()) == ["cases.csv", "summary.json", "sweep.png"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cases"] == 6 and summary["succeeded"] == sum(r["success"] for r in serial.rows)
    assert summary["worst_recomputed_match"] is True
    costs = sorted(r["cost"] for r in serial.rows)
    assert summary["cost"]["p50"] == costs[2] and summary["cost"]["p100"] == costs[-1]
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    np.testing.assert_array_equal(result.column("x0_x1"), [r["x0"][0] for r in serial.rows])


def test_a_case_that_arrives_despite_failed_samples_succeeded_and_says_why_they_failed() -> None:
    # (issue 25: "success" was false after any single failed solve, 40 of 50 reported although all 50 arrived)
    import dataclasses

    from shooting.sweeps.cases import Case, measure, target_of

    model = shooting.load_model("vanderpol")
    scenario = shooting.default_scenario(model).with_changes(sim_steps=60)
    ocp = shooting.build_ocp(scenario, model)
    target = target_of(scenario, ocp)
    traj = shooting.simulate_closed_loop(shooting.RTIController(ocp), scenario.x0, 60, progress=False)
    case = Case(0, np.asarray(scenario.x0, dtype=float), model.p0.copy(), 0.0, 1)
    clean = measure(case, traj, target, 60)
    assert clean["success"] and clean["outcome"] == "reached" and clean["failure_reason"] == ""
    success = traj.success.copy()
    success[[3, 4, 9]] = False
    status = list(traj.status)
    status[3] = status[4] = "budget"
    status[9] = "line search failed: merit 3.2"
    bumpy = measure(case, dataclasses.replace(traj, success=success, status=tuple(status)), target, 60)
    assert bumpy["success"] and bumpy["outcome"] == "reached"
    assert bumpy["failed_steps"] == 3 and bumpy["failure_reason"] == "budget"
    far = dataclasses.replace(traj, x=traj.x + 10.0 * target.tolerance)
    missed = measure(case, far, target, 60)
    assert not missed["success"] and missed["outcome"] == "missed"


def test_arrival_is_judged_on_each_states_own_scale() -> None:
    # (issue 25: the distance mixed m, rad, m/s and rad/s) the cart-pole swing-up starts pi from upright: one
    # max-norm tolerance of 5 % of that, 0.157, let the cart end 0.1 m off; on each state's scale (the start's
    # distance in it, at least 1 of its unit) the cart may miss by 0.05 m and the angle by 0.157 rad.
    import dataclasses

    from shooting.sweeps.cases import Case, measure, target_of

    model = shooting.load_model("cartpole")
    scenario = shooting.default_scenario(model).with_changes(sim_steps=3)
    ocp = shooting.build_ocp(scenario, model)
    target = target_of(scenario, ocp)
    np.testing.assert_allclose(target.scale, [1.0, np.pi, 1.0, 1.0])
    traj = shooting.simulate_closed_loop(shooting.RTIController(ocp), scenario.x0, 3, progress=False)
    case = Case(0, np.asarray(scenario.x0, dtype=float), model.p0.copy(), 0.0, 1)

    def ending_at(offset: list[float]) -> dict:
        x = traj.x.copy()
        x[-1] = target.x_ref + np.array(offset)
        return measure(case, dataclasses.replace(traj, x=x), target, 3)

    for offset, arrived in (([0.1, 0.0, 0.0, 0.0], False), ([0.04, 0.0, 0.0, 0.0], True),
                            ([0.0, 0.15, 0.0, 0.0], True), ([0.0, 0.16, 0.0, 0.0], False),
                            ([0.0, 0.0, 0.0, 0.1], False), ([0.04, -0.15, 0.04, -0.04], True)):
        row = ending_at(offset)
        assert row["success"] == arrived and row["outcome"] == ("reached" if arrived else "missed"), (offset, row)
        assert row["final_error"] == pytest.approx(np.abs(offset).max(), abs=1e-12)
    # A scenario's own tolerance is in the states' units, on the max-norm, as documented.
    given = target_of(scenario.with_changes(final_tolerance=0.2), ocp)
    row = measure(case, dataclasses.replace(traj, x=np.vstack([traj.x[:-1], target.x_ref + [0.1, 0.15, 0, 0]])),
                  given, 3)
    assert row["success"]


def test_max_violation_counts_the_path_constraints() -> None:
    # (issue 25: max_violation saw the bounds only) the cart-pole's power |F v| <= 20 W, soft: exceeded during the
    # swing-up; the column is the largest h = |F v| - 20 over the loop, recomputed here from the trajectory.
    import casadi as ca

    from shooting.sweeps.cases import Case, measure, target_of

    model = shooting.load_model("cartpole")

    def power(x: ca.SX, u: ca.SX, p: ca.SX) -> ca.SX:
        return ca.vertcat(u[0] * x[2] - 20.0, -u[0] * x[2] - 20.0)

    scenario = shooting.default_scenario(model).with_changes(path_constraints=power, soft_path_constraints=True,
                                                              sim_steps=30, horizon=20)
    ocp = shooting.build_ocp(scenario, model)
    traj = shooting.simulate_closed_loop(shooting.RTIController(ocp), scenario.x0, 30, progress=False)
    row = measure(Case(0, np.asarray(scenario.x0, dtype=float), model.p0.copy(), 0.0, 1), traj,
                  target_of(scenario, ocp), 30)
    excess = float(np.max(np.abs(traj.u[:, 0] * traj.x[:-1, 2]) - 20.0))
    assert excess > 0  # (soft: the swing-up pushes through it)
    assert row["max_violation"] == pytest.approx(excess, rel=1e-12)
