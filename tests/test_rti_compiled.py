"""The RTIController's compiled QP (the default, `shooting.mpc.rti_library`) against its numpy twin and the C.

Truth: the numpy twin (`shooting.qp.solve_stage_qp`, itself checked against
Clarabel in test_ocp_qp.py) on the same QPs, CasADi's virtual machine for the
QP's data, and the exported C controller (`export_controller`,
`load_controller`) in closed loop. The compiled solver is the same algorithm
as the twin, so it must take the same iterations to the same point: its
iterates differ only by the order of summation (numpy's vectorised sums, the
C's loops), i.e. by rounding amplified by the QP's conditioning. The allowed
1e-10 (relative to the solution's size) is the interior point's own
stationarity tolerance, `OCP_QP_TOLERANCES["double"]["tol_stat"]`: beyond
it the two would stop at different points. Measured: up to 6e-11 on the
random QPs (unstable dynamics, general rows, N = 30), 1e-13 on the RTI's.
A wrong datum, sign or shift is O(1) away.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from qp_reference import random_qp
from shooting._tools import build_shared_library
from shooting.codegen import export_controller, load_controller
from shooting.mpc import rti_library
from shooting.mpc.rti_library import RTILibraryWarning, attach_library
from shooting.mpc.rti_stage import StageQPBuilder
from shooting.qp import OCP_QP_TOLERANCES, OCPQPSizes, StageQP, StageQPResult, shifted_result, solve_stage_qp
from shooting.qp.host import CompiledStageQP, library_source
from support import needs_gcc

pytestmark = needs_gcc

#: See the module docstring: the interior point's stationarity tolerance.
ROUNDING = OCP_QP_TOLERANCES["double"]["tol_stat"]
INF = np.inf


def _close(a: np.ndarray, b: np.ndarray) -> float:
    """Largest difference relative to 1 + the solution's size."""
    return float(np.abs(np.asarray(a) - np.asarray(b)).max(initial=0.0) / (1.0 + np.abs(b).max(initial=0.0)))


@pytest.fixture(scope="module")
def solvers(tmp_path_factory: pytest.TempPathFactory):
    """A compiled solver per QP, its library built once per set of sizes."""
    folder = tmp_path_factory.mktemp("compiled_qp")
    libraries: dict[OCPQPSizes, object] = {}

    def get(qp: StageQP) -> CompiledStageQP:
        z = qp.sizes
        if z not in libraries:
            source = folder / f"qp{len(libraries)}.c"
            source.write_text(library_source(z))
            libraries[z] = build_shared_library([source], folder / f"qp{len(libraries)}.so")
        return CompiledStageQP(libraries[z], qp)  # type: ignore[arg-type]

    return get


def _assert_same(c: StageQPResult, twin: StageQPResult, what: str) -> None:
    assert c.status == twin.status and c.iterations == twin.iterations, (what, c.status, twin.status,
                                                                          c.iterations, twin.iterations)
    if twin.status == 0:
        assert _close(c.u, twin.u) <= ROUNDING and _close(c.x, twin.x) <= ROUNDING, (what, _close(c.u, twin.u))


def test_compiled_qp_is_the_numpy_twin_cold_warm_and_shortcut_alone(solvers) -> None:
    """Random QPs: soft and hard state bounds, general and terminal rows, unstable dynamics. Cold; warm from the
    last solve moved one stage ahead for the next state (the RTI's feedback); the shortcut alone from the last
    solve, else cold from the guess (an SQP iteration's QP, C warm = 2). Same statuses, iterations, points."""
    solved = 0
    for seed in range(12):
        rng = np.random.default_rng(seed)
        qp = random_qp(rng, N=[5, 10, 30][seed % 3], nx=3 + seed % 3, nu=1 + seed % 2, general=seed % 2 == 1,
                       unstable=[0.0, 0.1, 0.3][seed % 3])
        solver = solvers(qp)
        cold, twin = solver.solve(), solve_stage_qp(qp)
        _assert_same(cold, twin, f"cold {seed}")
        if twin.status != 0:
            continue
        solved += 1
        # the warm start shifted in C is numpy's shifted_result
        ahead, ahead_twin = solver.shifted(cold), shifted_result(twin, qp.sizes)
        for name in ("pi", "t", "lam", "s", "lam_s"):
            assert _close(getattr(ahead, name), getattr(ahead_twin, name)) <= ROUNDING, name
        nudged = copy.deepcopy(qp)
        nudged.x0 = qp.x0 + 1e-3
        for warm, warm_twin, only in ((ahead, ahead_twin, False), (cold, twin, True)):
            if only:
                solver.solve(qp)  # (the work memory then holds another solve: `warm` is copied in)
            c = solver.solve(nudged, x_guess=cold.x, u_guess=cold.u, warm=warm, shortcut_only=only)
            t = solve_stage_qp(nudged, x_guess=twin.x, u_guess=twin.u, warm=warm_twin, shortcut_only=only)
            _assert_same(c, t, f"{'shortcut alone' if only else 'warm'} {seed}")
    assert solved >= 5


def test_compiled_qp_reports_what_the_twin_reports(solvers) -> None:
    """Infeasible and not convex: the same statuses; non-finite data: a failure either way (the C may read the
    NaN as a divergence first, as in test_ocp_qp.py)."""
    qp = random_qp(np.random.default_rng(3), N=6, nx=3, nu=1)
    bad = copy.deepcopy(qp)
    bad.soft_bx, bad.lbx, bad.ubx = [False, False], [-1e-3, -1e-3], [1e-3, 1e-3]
    bad.x0 = np.array([2.0, 0.0, 2.0])
    concave = copy.deepcopy(qp)
    concave.R, concave.S = -1e6 * np.eye(1), np.zeros((1, 3))
    broken = copy.deepcopy(qp)
    broken.b = qp.b.copy()
    broken.b[2, 1] = np.nan
    solver = solvers(qp)
    for case in (bad, concave):
        c, twin = solver.solve(case), solve_stage_qp(case)
        assert c.status == twin.status != 0, (c.message, twin.message)
    assert solver.solve(broken).status in (2, 4) and solve_stage_qp(broken).status in (2, 4)


def _ocps() -> dict[str, shooting.MultipleShootingOCP]:
    """The RTI's problem kinds: soft state bounds; extra costs made convex (stage and terminal) under a rate
    penalty; path and terminal constraints; a DAE."""
    cp = shooting.load_model("cartpole")
    common = dict(dt=0.05, Q=[10, 50, 1, 0.1], R=[0.05], u_min=[-20], u_max=[20])
    dip = shooting.load_model("dip")
    return {
        "soft bounds": shooting.MultipleShootingOCP(cp, 10, x_min=[-0.5, -INF, -INF, -INF],
                                                    x_max=[0.5, INF, INF, INF], soft_x_bounds=True, **common),
        "concave costs, rate": shooting.MultipleShootingOCP(
            cp, 10, stage_cost=lambda x, u, p: -60 * x[1] ** 2, terminal_cost=lambda x, p: -500 * x[0] ** 2,
            R_delta=[0.3], **common),
        "path, terminal": shooting.MultipleShootingOCP(
            cp, 10, path_constraints=lambda x, u, p: ca.vertcat(u[0] * x[2] - 20, -u[0] * x[2] - 20),
            soft_path_constraints=True, terminal_constraints=lambda x, p: x[1:3], **common),
        "DAE": shooting.build_ocp(shooting.default_scenario(dip).with_changes(horizon=8), dip),
    }


@pytest.mark.parametrize("kind", list(_ocps()))
def test_compiled_data_are_the_virtual_machines_and_the_qp_the_twins(kind: str) -> None:
    """The sample's data Function compiled: bitwise CasADi's virtual machine (the same operations, no contracted
    multiply-add under -std=c99), the convexification's shifts included; the QP solved alike."""
    ocp = _ocps()[kind]
    N, nx, nu = ocp.horizon, ocp.nx, ocp.nu
    twin, compiled = StageQPBuilder(ocp), StageQPBuilder(ocp)
    assert attach_library(compiled).status in ("built", "hit")
    rng = np.random.default_rng(7)
    x0 = np.asarray(ocp.model.x0, dtype=float)
    xb, ub = x0 + 0.05 * rng.standard_normal((N + 1, nx)), 0.5 * rng.standard_normal((N, nu))
    d = ocp.layout.unpack_parameters(ocp.parameters(x0))
    up = np.full(nu, 0.3)
    args = (xb, ub, d["x_ref"], d["u_ref"], d["p"], 0.1, up)
    a = twin.with_state(twin.build(*args), x0, up)
    b = compiled.with_state(compiled.build(*args), x0, up)
    for name in ("A", "B", "b", "Q", "S", "R", "Q_N", "q", "r", "lbu", "ubu", "lbx", "ubx", "C", "D", "lg", "ug",
                 "CN", "lgN", "ugN", "x0"):
        if getattr(a, name) is not None:
            np.testing.assert_array_equal(getattr(b, name), getattr(a, name), err_msg=name)
    if kind.startswith("concave"):  # (the rule shifted the blocks: theta's -120 + 2 Q, p's -1000 + 2 Qf)
        assert a.Q[:, 1, 1].min() > 0 and np.linalg.eigvalsh(a.Q_N[:nx, :nx]).min() > 0
    start = twin.guess(xb, ub, up)
    _assert_same(compiled.solve(b, x_guess=start, u_guess=ub), twin.solve(a, x_guess=start, u_guess=ub), kind)


def _swing_up(horizon: int = 20) -> shooting.MultipleShootingOCP:
    model = shooting.load_model("cartpole")
    problem = shooting.default_scenario(model).problem.with_changes(horizon=horizon, soft_x_bounds=True)
    return shooting.MultipleShootingOCP.from_problem(model, problem)


def test_closed_loop_equals_the_numpy_twin_and_the_exported_c(tmp_path: Path) -> None:
    """The cart-pole's swing-up at N = 20 (cold SQP start, then real-time iterations across the bounds'
    activity changes): the default RTIController's inputs equal the numpy twin's and the exported C
    controller's (double) to 1e-10 of the input range at every sample."""
    ocp = _swing_up()
    x0 = np.asarray(ocp.model.x0, dtype=float)
    compiled = shooting.RTIController(ocp)
    assert compiled.qp_library is not None and compiled.qp_library.status in ("built", "hit")
    report = export_controller(ocp, tmp_path / "c", x0=x0, force=True)
    assert report.ok, report.problems
    steps = 40
    runs = {name: shooting.simulate_closed_loop(ctrl, x0, steps, progress=False)
            for name, ctrl in (("compiled", compiled), ("C", load_controller(tmp_path / "c")),
                               ("numpy", shooting.RTIController(ocp, qp_solver="riccati-ipm-numpy")))}
    span = float(ocp.u_max[0] - ocp.u_min[0])
    assert all(runs["compiled"].success)
    for other in ("C", "numpy"):
        assert np.abs(runs["compiled"].u - runs[other].u).max() / span <= ROUNDING, other
    assert np.abs(runs["compiled"].u).max() > 0.99 * ocp.u_max[0]  # (the bounds were active)


def test_rate_penalty_and_path_rows_in_closed_loop_equal_the_twin() -> None:
    """Augmented state, general rows (soft), terminal rows: the closed loops of both backends agree."""
    ocp = _ocps()["path, terminal"]
    x0 = np.array([0.2, 0.3, 0.0, 0.0])
    loops = [shooting.simulate_closed_loop(shooting.RTIController(ocp, qp_solver=q), x0, 15, progress=False)
             for q in ("riccati-ipm", "riccati-ipm-numpy")]
    assert np.abs(loops[0].u - loops[1].u).max() / 40.0 <= ROUNDING


def test_controllers_of_one_problem_side_by_side_keep_their_own_memory() -> None:
    """Two controllers of one problem load the same library; each owns its data, work and warm start, so
    stepping them in turn from different states gives, bit for bit, what each gives alone."""
    ocp = _swing_up(10)
    plant = shooting.build_integrator(ocp.model, "rk4", 20)

    def run(controllers: list[shooting.RTIController], starts: list[np.ndarray]) -> list[np.ndarray]:
        xs, us = [x0.copy() for x0 in starts], [[] for _ in starts]
        for k in range(6):
            for i, ctrl in enumerate(controllers):
                u = ctrl.step(xs[i], k * ocp.dt).u
                us[i].append(u)
                xs[i] = np.asarray(plant(xs[i], u, [], k * ocp.dt, ocp.dt)[0]).ravel()
        return [np.array(u) for u in us]

    starts = [np.array([0.0, 0.3, 0.0, 0.0]), np.array([0.1, -0.2, 0.0, 0.1])]
    alone = run([shooting.RTIController(ocp, initialize_with_ipopt=False)], starts[1:])[0]
    pair = [shooting.RTIController(ocp, initialize_with_ipopt=False) for _ in starts]
    assert pair[0].qp_library is not None and pair[1].qp_library is not None
    assert pair[0].qp_library.path == pair[1].qp_library.path
    np.testing.assert_array_equal(run(pair, starts)[1], alone)


# ----------------------------------------------------------------------------------------------------- the cache

_CHILD = """
import json, sys, warnings
import shooting
model = shooting.load_model("cartpole")
problem = shooting.default_scenario(model).problem.with_changes(horizon=6, soft_x_bounds=True)
ocp = shooting.MultipleShootingOCP.from_problem(model, problem)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ctrl = shooting.RTIController(ocp, initialize_with_ipopt=False)
rep = ctrl.qp_library
u = ctrl.step(model.x0, 0.0).u.tolist()
print(json.dumps({"status": rep.status, "reason": rep.reason, "key": rep.key, "path": str(rep.path),
                  "seconds": rep.seconds, "u": u, "warnings": [str(w.message) for w in caught]}))
"""


def _child(cache: Path, path: str | None = None) -> dict:
    env = {**os.environ, "SHOOTING_CACHE_DIR": str(cache)}
    if path is not None:
        env["PATH"] = path
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _library(cache: Path) -> Path:
    [entry] = [p for p in (cache / "rti").iterdir() if not p.name.startswith(".")]
    return entry / json.loads((entry / "entry.json").read_text())["library"]


def _truncate(library: Path) -> None:
    library.write_bytes(library.read_bytes()[:1000])


def _alter(library: Path) -> None:  # same size, a few bytes of code changed
    data = bytearray(library.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 64):
        data[i] ^= 0x5A
    library.write_bytes(bytes(data))


def test_a_second_process_loads_the_entry_and_a_corrupt_one_is_rebuilt(tmp_path: Path) -> None:
    """Built once; a new process loads it (no compile: a fraction of the build's time); a truncated, altered or
    missing library is rebuilt by the next process, which gets the same inputs, and is loaded again after."""
    cache = tmp_path / "cache"
    first = _child(cache)
    assert first["status"] == "built" and first["reason"] == "no entry" and not first["warnings"]
    assert Path(first["path"]) == _library(cache)
    assert oct(_library(cache).stat().st_mode & 0o777) == "0o755"
    second = _child(cache)
    assert second["status"] == "hit" and second["reason"] == "" and second["key"] == first["key"]
    assert second["seconds"] < first["seconds"] / 3  # (no gcc run: the build's time is gcc's)
    assert second["u"] == first["u"]
    for damage, why in ((_truncate, "size"), (_alter, "checksum"), (Path.unlink, "missing")):
        damage(_library(cache))
        again = _child(cache)
        assert again["status"] == "built" and why in again["reason"] and not again["warnings"], again
        assert again["u"] == first["u"]
    assert _child(cache)["status"] == "hit"


def test_no_gcc_warns_once_and_runs_the_numpy_twin(tmp_path: Path) -> None:
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    got = _child(tmp_path / "cache", path=str(empty))
    assert got["status"] == "fallback" and "gcc not found" in got["reason"]
    assert len(got["warnings"]) == 1 and "runs in numpy" in got["warnings"][0]
    assert not (tmp_path / "cache" / "rti").exists()
    built = _child(tmp_path / "cache")
    assert np.abs(np.array(got["u"]) - np.array(built["u"])).max() <= ROUNDING * 40.0


def test_an_unwritable_cache_falls_back_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SHOOTING_CACHE_DIR", str(blocker / "cache"))
    ocp = _swing_up(6)
    with pytest.warns(RTILibraryWarning, match="cannot write the cache directory"):
        ctrl = shooting.RTIController(ocp, initialize_with_ipopt=False)
    assert ctrl.qp_library is not None and ctrl.qp_library.status == "fallback"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        twin = shooting.RTIController(ocp, qp_solver="riccati-ipm-numpy", initialize_with_ipopt=False)
    assert twin.qp_library is None
    x0 = np.asarray(ocp.model.x0, dtype=float)
    assert np.array_equal(ctrl.step(x0, 0.0).u, twin.step(x0, 0.0).u)


def test_a_stage_too_large_to_compile_runs_the_twin_without_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rti_library, "MAX_INSTRUCTIONS", 100)  # the limit, scaled down to the cart-pole's 573
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ctrl = shooting.RTIController(_swing_up(6), initialize_with_ipopt=False)
    assert ctrl.qp_library is not None and ctrl.qp_library.status == "fallback"
    assert "too large to compile" in ctrl.qp_library.reason


@pytest.mark.parametrize("model", shooting.model_names())
def test_every_built_in_models_qp_compiles_under_the_strict_flags(model: str) -> None:
    # gcc's flow analysis differs with the stage sizes (a model without state bounds, without inputs' rate
    # rows, ...): a warning there is an error under HOST_CFLAGS and would silently send the RTI to numpy.
    m = shooting.load_model(model)
    problem = shooting.default_scenario(m).problem
    for changes in ({}, {"horizon": 7, "soft_x_bounds": True}):
        ocp = shooting.MultipleShootingOCP.from_problem(m, problem.with_changes(**changes))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RTILibraryWarning)
            controller = shooting.RTIController(ocp)
        assert controller.qp_library is not None
