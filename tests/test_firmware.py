"""Firmware for an STM32F405 (``--firmware stm32f405``): built by its own Makefile with arm-none-eabi-gcc and run
on QEMU's netduinoplus2 exactly as shared/CONTRACT.md states.

Independent truth: the same export's C run on the host (ctypes) in the same closed loop (the check's plant), and
the check's own allowance for the float controller against the double reference.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import shooting
from shooting.cli import main
from shooting.codegen import load_controller, qemu_mps2
from shooting.controller.board import PLANT_METHOD, PLANT_STEPS
from shooting.controller.firmware import NETDUINOPLUS2_ARGS
from support import CI

pytestmark = pytest.mark.skipif(
    not (qemu_mps2.have_cortex_m4_toolchain() and qemu_mps2.have_qemu() and shutil.which("make")) and not CI,
    reason="needs arm-none-eabi-gcc, newlib, make and qemu-system-arm")

STEPS = 30


def _run_firmware(out: Path) -> tuple[list[list[float]], str]:
    build = subprocess.run(["make", "-C", str(out / "firmware")], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    elf = out / "firmware" / "firmware.elf"
    assert elf.is_file()
    run = subprocess.run(["qemu-system-arm", *NETDUINOPLUS2_ARGS, "-kernel", str(elf)], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-1000:] + run.stderr[-1000:]
    rows = [line.split() for line in run.stdout.splitlines()]
    samples = [[float(v) for v in r] for r in rows if r and r[0].isdigit()]
    return samples, run.stdout


@pytest.mark.parametrize("model, real", [("cartpole", "float"), ("vanderpol", "double")])
def test_firmware_runs_on_netduinoplus2_and_matches_the_host(model: str, real: str, tmp_path: Path) -> None:
    out = tmp_path / "ctl"
    assert main(["controller", "--model", model, "--real", real, "--check", "--check-steps", str(STEPS),
                 "--firmware", "stm32f405", "--out", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["firmware"]["board"] == "stm32f405"
    assert {"firmware/Makefile", "firmware/main.c", "firmware/stm32f405.ld",
            "firmware/startup_stm32f405.S"} <= set(manifest["files"])
    samples, text = _run_firmware(out)
    m = shooting.load_model(model)
    assert len(samples) == STEPS, text[-500:]
    assert [int(s[0]) for s in samples] == list(range(STEPS))  # "k u_1 ... u_nu status qp_iterations cycles"
    u_board = np.array([s[1:1 + m.nu] for s in samples])
    assert all(int(s[1 + m.nu]) == 0 for s in samples), text[-500:]  # every sample ok
    scenario = shooting.default_scenario(m)
    host = shooting.simulate_closed_loop(load_controller(out), scenario.x0, STEPS, plant_method=PLANT_METHOD,
                                         plant_steps=PLANT_STEPS, progress=False)
    span = m.u_max - m.u_min if np.all(np.isfinite(m.u_max - m.u_min)) else np.maximum(np.abs(host.u).max(0), 1)
    error = np.abs(u_board - host.u) / span
    # the first samples within the check's own allowance (the float controller against the double reference); the
    # whole loop within ten times it (a closed loop carries the differences on)
    allowed = manifest["check_host"]["input_tolerance"]
    assert error[:5].max() <= allowed, (error[:5].max(), allowed)
    assert error.max() <= 10 * allowed
    assert "done" in text and "clock" in text


def test_firmware_is_ours_to_replace_and_never_a_users(tmp_path: Path) -> None:
    out = tmp_path / "ctl"
    args = ["controller", "--model", "vanderpol", "--out", str(out), "--quiet"]
    assert main([*args, "--firmware", "stm32f405"]) == 0
    (out / "firmware" / "notes.txt").write_text("mine")
    assert main(args) == 0  # without firmware: ours go, the user's file and its folder stay
    assert sorted(p.name for p in (out / "firmware").iterdir()) == ["notes.txt"]
    (out / "firmware" / "main.c").write_text("/* mine */")
    assert main([*args, "--firmware", "stm32f405"]) == 2  # a user's main.c is never overwritten
    assert (out / "firmware" / "main.c").read_text() == "/* mine */"


@pytest.mark.parametrize("model, real, noise", [("cartpole", "float", 0.01), ("vanderpol", "double", 0.05)])
def test_firmware_with_an_ekf_is_the_hosts_output_feedback_loop(model: str, real: str, noise: float,
                                                                tmp_path: Path) -> None:
    """``--estimator ekf``: the board's controller sees the EKF's estimate from noisy sensors. Independent truth:
    the same export's controller in the host's output-feedback loop (`simulate_closed_loop` with the Python EKF
    of the manifest's Q, R and prior, the same noise stream), not the firmware's C."""
    out = tmp_path / "ctl"
    assert main(["controller", "--model", model, "--real", real, "--check", "--check-steps", str(STEPS),
                 "--firmware", "stm32f405", "--estimator", "ekf", "--measurement-noise", str(noise),
                 "--out", str(out), "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    est = manifest["firmware"]["estimator"]
    assert est["type"] == "ekf" and est["measurement_noise"] == [noise] * len(est["sensors"])
    assert {"firmware/shooting_sensors.c", f"firmware/{model}_ekf.c"} <= set(manifest["files"])
    samples, text = _run_firmware(out)
    m = shooting.load_model(model)
    assert len(samples) == STEPS, text[-500:]
    assert all(int(s[1 + m.nu]) == 0 for s in samples), text[-500:]
    ekf = shooting.EKF(m, None, Q=np.array(est["Q"]), R=np.array(est["R"]), x0=est["x0"], P0=np.array(est["P0"]))
    host = shooting.simulate_closed_loop(load_controller(out), est["x0"], STEPS, estimator=ekf,
                                         measurement_noise=noise, seed=est["seed"], plant_method=PLANT_METHOD,
                                         plant_steps=PLANT_STEPS, progress=False)
    u_board = np.array([s[1:1 + m.nu] for s in samples])
    x_hat_board = np.array([s[4 + m.nu:4 + m.nu + m.nx] for s in samples])
    span = m.u_max - m.u_min
    allowed = manifest["check_host"]["input_tolerance"]
    # each line's estimate is the one the controller was given; the first differs from the host's by rounding only
    # (9 printed digits in double; the float EKF's rounding in float), the loop carries it on as above
    scale = np.maximum(np.abs(host.x_hat[:STEPS]).max(0), 1.0)
    digits = 1e-8 if real == "double" else 1e-4
    assert (np.abs(x_hat_board - host.x_hat[:STEPS]) / scale).max() <= digits
    error = np.abs(u_board - host.u) / span
    assert error[:5].max() <= max(allowed, 1e-8), (error[:5].max(), allowed)
    assert error.max() <= 10 * max(allowed, 1e-8)
    # the estimate is not the state: the sensors see part of it, with noise
    assert np.abs(host.x_hat - host.x).max() > 10 * noise / 100


def test_firmware_estimator_options_are_refused_with_one_line(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ctl"
    base = ["controller", "--model", "vanderpol", "--out", str(out), "--quiet"]
    assert main([*base, "--estimator", "ekf"]) == 2  # no firmware to run it
    assert "--firmware" in capsys.readouterr().err
    assert main([*base, "--firmware", "stm32f405", "--measurement-noise", "0.1"]) == 2  # noise without an estimator
    assert "--estimator" in capsys.readouterr().err
    assert not out.exists()
    m = shooting.load_model("vanderpol")
    ocp = shooting.build_ocp(shooting.default_scenario(m), m)
    mhe = shooting.MHE(m, None, 5, Q=1e-4 * np.eye(2), R=1e-4 * np.eye(1))
    with pytest.raises(ValueError, match="EKF"):
        shooting.codegen.export_controller(ocp, out, firmware="stm32f405", estimator=mhe)
    slow = shooting.EKF(m, None, Q=1e-4 * np.eye(2), R=1e-4 * np.eye(1), dt=2 * ocp.dt)
    with pytest.raises(ValueError, match="dt"):
        shooting.codegen.export_controller(ocp, out, firmware="stm32f405", estimator=slow)
    ekf = shooting.EKF(m, None, Q=1e-4 * np.eye(2), R=1e-4 * np.eye(1))
    with pytest.raises(ValueError, match="firmware"):
        shooting.codegen.export_controller(ocp, out, estimator=ekf)
    with pytest.raises(ValueError, match="measurement_noise"):
        shooting.codegen.export_controller(ocp, out, firmware="stm32f405", estimator=ekf, measurement_noise=-1.0)
    assert not out.exists()
