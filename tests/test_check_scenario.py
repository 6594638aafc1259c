"""The controller's check runs what the user will run (issue 36 item 1): the scenario's start and its time-varying
reference sample by sample, `check_x0` and `check_steps` when given, and the manifest says what was checked; a loop
that barely moves is said, not passed silently.

The model is our own gantry crane (tests/gantry_crane.py): its load moved 1 m and back along a reference, its sway
a soft nonlinear path constraint. Independent truth: IPOPT's MPC (`MPCController`) in a closed loop along the same
reference on the same plant.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import shooting
from shooting.codegen import export_controller
from shooting.controller.board import PLANT_METHOD, PLANT_STEPS
from shooting.controller.export import STILL

sys.path.insert(0, str(Path(__file__).parent))
import gantry_crane  # noqa: E402

STEPS = 40


@pytest.fixture(scope="module")
def crane() -> tuple[shooting.Model, shooting.Scenario]:
    model = gantry_crane.make_model()
    return model, gantry_crane.scenario(model).with_changes(sim_steps=STEPS)


@pytest.fixture(scope="module")
def ipopt_loop(crane: tuple[shooting.Model, shooting.Scenario]) -> shooting.Trajectory:
    """IPOPT's MPC along the scenario's reference, the check's plant."""
    model, scenario = crane
    ocp = shooting.build_ocp(scenario, model)
    return shooting.simulate_closed_loop(shooting.MPCController(ocp), scenario.x0, STEPS, reference=scenario.reference,
                                         plant_method=PLANT_METHOD, plant_steps=PLANT_STEPS, progress=False)


def test_the_check_follows_the_scenarios_reference(crane, ipopt_loop, tmp_path: Path) -> None:
    # On acfd672 the check ran 40 samples from x0 towards the OCP's constant reference (zero): nothing moved and it
    # passed with errors of 1e-14. Here the scenario's reference moves the load to 1 m: the checked loop's states
    # span what IPOPT's MPC spans along the same reference (the C follows it, or its cart would stay at 0).
    model, scenario = crane
    ocp = shooting.build_ocp(scenario, model)
    report = export_controller(ocp, tmp_path / "c", check=True, check_steps=STEPS, x0=scenario.x0,
                               reference=scenario.reference)
    assert report.ok, report.problems
    checked = report.manifest["check_host"]
    assert checked["reference"] == "scenario" and checked["samples"] == STEPS and checked["moved"] is True
    assert checked["x0"] == [0.0, 0.0, 0.0, 0.0]
    span = np.ptp(ipopt_loop.x, axis=0)
    assert span[0] > 0.5  # (the load moved: 1 m reference)
    # the RTI loop and IPOPT's differ by the RTI's one QP per sample: a few per cent of the motion, not all of it
    np.testing.assert_allclose(checked["state_range"], span, rtol=0.1)
    assert "along the scenario's reference" in report.lines[0]
    on_disk = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert on_disk["check_host"]["state_range"] == checked["state_range"]


def test_check_x0_and_a_constant_reference(crane, tmp_path: Path) -> None:
    # An OCP (no scenario): its constant reference; the check starts where it is told (1 m off, the cart brought
    # back to the origin), and says so.
    model, scenario = crane
    ocp = shooting.build_ocp(scenario, model)
    report = export_controller(ocp, tmp_path / "c", check=True, check_x0=[1.0, 0.0, 0.0, 0.0], check_steps=30)
    assert report.ok, report.problems
    checked = report.manifest["check_host"]
    assert checked["x0"] == [1.0, 0.0, 0.0, 0.0] and checked["reference"] == "none" and checked["samples"] == 30
    assert checked["state_range"][0] > 0.5 and checked["moved"] is True
    assert "from x0 = [1, 0, 0, 0] towards the origin" in report.lines[0]


def test_a_loop_at_rest_is_said(crane, tmp_path: Path) -> None:
    # The OCP's reference is zero and so is its start: the loop cannot move. The check says so (a line, a
    # UserWarning, the manifest's moved = False) instead of a silent "ok".
    model, scenario = crane
    ocp = shooting.build_ocp(scenario, model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = export_controller(ocp, tmp_path / "c", check=True, check_steps=10)
    checked = report.manifest["check_host"]
    assert checked["moved"] is False and max(checked["state_range"]) <= STILL
    said = [str(w.message) for w in caught if "barely moved" in str(w.message)]
    assert said and "check_x0" in said[0]
    assert any("barely moved" in line for line in report.lines)


def test_bad_check_options(crane, tmp_path: Path) -> None:
    model, scenario = crane
    ocp = shooting.build_ocp(scenario, model)
    with pytest.raises(ValueError, match="check_x0"):
        export_controller(ocp, tmp_path / "a", check=True, check_x0=[1.0, 0.0])
    with pytest.raises(ValueError, match="reference must be a function"):
        export_controller(ocp, tmp_path / "b", check=True, reference=[1.0, 0, 0, 0])
    with pytest.raises(ValueError, match=r"reference\(t\)"):
        export_controller(ocp, tmp_path / "c", check=True, reference=lambda t: (np.zeros(3), None))
    assert not any((tmp_path / d).exists() for d in "abc")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shooting", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=600)


def test_cli_check_x0(tmp_path: Path) -> None:
    crane_file = str(Path(gantry_crane.__file__))
    refused = _cli("controller", "--model", crane_file, "--check-x0", "1,0,0,0", "--out", "c", cwd=tmp_path)
    assert refused.returncode == 2 and "--check-x0" in refused.stderr and "Traceback" not in refused.stderr
    bad = _cli("controller", "--model", crane_file, "--check", "--check-x0", "1,0", "--out", "c", cwd=tmp_path)
    assert bad.returncode == 2 and "--check-x0" in bad.stderr and "Traceback" not in bad.stderr
    run = _cli("controller", "--model", crane_file, "--check", "--check-x0", "0.5,0,0,0", "--check-steps", "20",
               "-q", "--out", "c", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    checked = json.loads((tmp_path / "c" / "manifest.json").read_text())["check_host"]
    assert checked["x0"] == [0.5, 0.0, 0.0, 0.0] and checked["samples"] == 20 and checked["reference"] == "scenario"
    assert "from x0 = [0.5, 0, 0, 0] along the scenario's reference" in run.stdout
