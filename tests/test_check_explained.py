"""A controller check that explains a refusal, keeps the rejected export on request, and a verified reference.

The failure paths are reached with the real export, compiled and run: the check's allowance is lowered below
what any compiled controller can meet (a module constant, `MAX_TOLERANCE`), so the comparison itself fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shooting
import shooting.controller.check as check
from shooting.controller import export_controller
from shooting.controller.diagnosis import explain, first_excess
from support import needs_m4


@pytest.fixture(scope="module")
def pendulum_ocp() -> shooting.MultipleShootingOCP:
    m = shooting.load_model("pendulum")
    return shooting.build_ocp(shooting.default_scenario(m), m)


def test_explain_names_sample_input_error_allowance_and_cause() -> None:
    u_ref = np.array([[1.0, 0.0], [2.0, 0.5], [3.0, -0.5]])
    u = u_ref.copy()
    u[1, 1] += 0.02
    u[2, 0] += 0.5
    scale = np.array([10.0, 1.0])
    assert first_excess(u, u_ref, scale, 0.01) == (1, 1, pytest.approx(0.02))
    ok = ["ok"] * 3
    text = explain("input", u, u_ref, scale, 0.01, ok, ok, ["F", "M"])
    assert "sample 1, input M" in text and "error 2.0e-02" in text and "allowed 1.0e-02" in text
    assert "the precision" in text  # (both converged, twice the allowance)
    far = explain("input", u, u_ref, scale, 1e-5, ok, ok, ["F", "M"])
    assert "different local solutions" in far  # (2000x the allowance)
    cold = explain("input", u, u_ref, scale, 0.01, ["ok", "SQP iteration limit", "ok"], ok, ["F", "M"])
    assert "the C's sample 1 ended 'SQP iteration limit'" in cold and "max_sqp_iterations" in cold
    theirs = explain("input", u, u_ref, scale, 0.01, ok, ["ok", "line search failed", "ok"], ["F", "M"])
    assert "the reference's sample 1 ended 'line search failed'" in theirs
    assert explain("input", u, u_ref, scale, 1.0, ok, ok, ["F", "M"]) == ""


def test_a_failed_check_says_why_and_writes_nothing(tmp_path: Path, pendulum_ocp, monkeypatch) -> None:
    monkeypatch.setitem(check.MAX_TOLERANCE, "double", 1e-15)
    monkeypatch.setitem(check.TOLERANCE_FLOOR, "double", 1e-16)
    report = export_controller(pendulum_ocp, tmp_path / "out", check=True)
    assert not report.ok and not (tmp_path / "out").exists()
    (problem,) = report.problems
    assert "MISMATCH" in problem and "likely cause" in problem
    assert " at s" in problem and "input tau" in problem and "> allowed 1.0e-15" in problem


def test_keep_failed_installs_the_rejected_export_beside_a_note(tmp_path: Path, pendulum_ocp, monkeypatch) -> None:
    monkeypatch.setitem(check.MAX_TOLERANCE, "double", 1e-15)
    monkeypatch.setitem(check.TOLERANCE_FLOOR, "double", 1e-16)
    out = tmp_path / "out"
    report = export_controller(pendulum_ocp, out, check=True, keep_failed=True)
    assert not report.ok
    assert {p.name for p in report.files} == {"pendulum_mpc.c", "pendulum_mpc.h", "manifest.json", "Makefile",
                                              "CHECK_FAILED.txt"}
    note = (out / "CHECK_FAILED.txt").read_text()
    assert "FAILED its check" in note and "likely cause" in note
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["check_failed"] == list(report.problems)
    assert "CHECK_FAILED.txt" in manifest["files"]
    # a later export that passes replaces everything, the note included (it is ours)
    monkeypatch.undo()
    again = export_controller(pendulum_ocp, out, check=True)
    assert again.ok and not (out / "CHECK_FAILED.txt").exists()
    assert "check_failed" not in json.loads((out / "manifest.json").read_text())


def test_cli_keep_failed(tmp_path: Path) -> None:
    code = ("import sys, shooting.controller.check as c; c.MAX_TOLERANCE['double'] = 1e-15; "
            "c.TOLERANCE_FLOOR['double'] = 1e-16; from shooting.cli import main; sys.exit(main(sys.argv[1:]))")
    args = ["controller", "--model", "pendulum", "--check", "--out", str(tmp_path / "out")]
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "likely cause" in proc.stderr and "--keep-failed" in proc.stderr
    assert not (tmp_path / "out").exists()
    proc = subprocess.run([sys.executable, "-c", code, *args, "--keep-failed"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 1 and "beside CHECK_FAILED.txt" in proc.stderr
    assert (tmp_path / "out" / "CHECK_FAILED.txt").exists()


def test_the_first_prediction_is_compared_with_a_verified_optimum(pendulum_ocp) -> None:
    m = pendulum_ocp.model
    from shooting.controller.c_source import controller_spec

    spec = controller_spec(pendulum_ocp, x0=m.x0)
    tol = check.input_tolerance(pendulum_ocp, spec, np.asarray(m.x0, float), "double", 5)
    assert tol.first_reference.startswith("IPOPT") and tol.first_u is not None
    # IPOPT at its default tolerance (the spec's guess) is farther from the verified optimum than the
    # verified optimum's own accuracy: the reference is tighter than what it checks
    default = pendulum_ocp.solve(m.x0)
    assert default.success
    assert np.abs(tol.first_u - check.verified_optimum(pendulum_ocp, np.asarray(m.x0, float))).max() == 0.0
    assert tol.applied <= check.MAX_TOLERANCE["double"] and tol.prediction <= check.MAX_TOLERANCE["double"]


@needs_m4
def test_a_float_controller_with_a_nonlinear_constraint_passes_its_board_check(tmp_path: Path) -> None:
    # The planar quadrotor past a round obstacle (tests/planar_quadrotor.py; exact penalty weight 1e3). Its float
    # interior point ends at complementarity 1e-7 of that weight, where a thrust whose bound multiplier is 0.016
    # stays 4e-3 of its range inside the bound: the first prediction is IPOPT's only to that accuracy, which the
    # allowance now measures (check.termination_move) instead of refusing the controller. The closed loop's
    # inputs (the shortcut's: exact active sets) keep the rounding allowance.
    from planar_quadrotor import make_model, scenario

    model = make_model()
    sc = scenario(model)
    ocp = shooting.build_ocp(sc, model)
    x0 = np.asarray(sc.x0, dtype=float)
    report = export_controller(ocp, tmp_path / "obs", real="float", target="cortex-m4", check=True, x0=x0)
    assert report.ok, report.problems
    host, board = report.checks[0], report.checks[-1]
    assert host.target == "host" and board.target == "cortex-m4" and board.passed
    from shooting.controller.c_source import controller_spec

    tol = check.input_tolerance(ocp, controller_spec(ocp, x0=x0), x0, "float", 5)
    # the stopping point's move is what allows the prediction, and it is measured, not assumed
    assert 1e-4 < tol.termination < check.MAX_TOLERANCE["float"] / check.TERMINATION_SAFETY
    assert tol.prediction == pytest.approx(check.TERMINATION_SAFETY * tol.termination)
    assert tol.applied < 1e-4 and host.worst["u"] <= tol.applied == host.allowed["u"]
    # the C's first prediction is farther from IPOPT's than rounding allows, nearer than the stopping point's move
    assert 10 * check.TOLERANCE_FLOOR["float"] < host.worst["u_pred"] <= tol.prediction
