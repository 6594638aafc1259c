"""`shooting-codegen`, run as users run it: a subprocess, its exit status, its files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shooting.codegen import toolchain
from support import needs_gcc, needs_m4


def run(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "shooting.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, env=env)


def test_console_script_is_installed(tmp_path):
    proc = subprocess.run(["shooting-codegen", "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0 and "integrator" in proc.stdout


@pytest.mark.parametrize("sub", ["list", "tableau", "integrator"])
def test_help(sub, tmp_path):
    proc = run(sub, "--help", cwd=tmp_path)
    assert proc.returncode == 0 and "usage:" in proc.stdout


def test_list(tmp_path):
    proc = run("list", cwd=tmp_path)
    assert proc.returncode == 0
    for word in ("cartpole", "quadrotor", "stiff_chain", "rk4", "dopri5", "radau3"):
        assert word in proc.stdout


def test_tableau_and_plot(tmp_path):
    proc = run("tableau", "gauss2", "--plot", "region.png", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "verified order 4" in proc.stdout and "A-stable True, L-stable False" in proc.stdout
    assert (tmp_path / "region.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["region.png"]


def test_tableau_from_json(tmp_path):
    (tmp_path / "heun.json").write_text(json.dumps({"A": [[0, 0], [1, 0]], "b": ["1/2", "1/2"]}))
    proc = run("tableau", "heun.json", cwd=tmp_path)
    assert proc.returncode == 0 and "verified order 2" in proc.stdout


@needs_gcc
def test_integrator_check_writes_manifest(tmp_path):
    proc = run("integrator", "--model", "vanderpol", "--method", "dopri5", "--steps", "3", "--out", "out",
               "--check", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["Makefile", "manifest.json", "vanderpol_dopri5.c",
                                                      "vanderpol_dopri5.h"]
    m = json.loads((out / "manifest.json").read_text())
    assert m["model"]["name"] == "vanderpol" and m["tableau"]["name"] == "dopri5" and m["steps"] == 3
    assert m["dt"] == 0.1 and m["sensitivities"] == "forward" and m["real"] == "double"
    assert m["model"]["nx"] == 2 and len(m["model"]["expression_sha256"]) == 64
    assert m["check_host"]["passed"] and m["check_host"]["worst_relative_error"]["A"] <= 1e-12
    assert "relative error x_next" in proc.stdout and "(allowed " in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "no temporary directory left behind"


@needs_gcc
def test_integrator_from_tableau_file_and_model_file(tmp_path):
    (tmp_path / "ralston.json").write_text(json.dumps({"A": [[0, 0], ["2/3", 0]], "b": ["1/4", "3/4"],
                                                       "name": "ralston_json"}))
    (tmp_path / "robot.py").write_text(
        "import casadi as ca\nimport shooting\n\n"
        "def make_model():\n"
        "    x, u = ca.SX.sym('x', 2), ca.SX.sym('u')\n"
        "    return shooting.Model('robot', x, u, ca.vertcat(x[1], -ca.sin(x[0]) + u), dt=0.02)\n")
    proc = run("integrator", "--model", "robot.py:make_model", "--tableau-file", "ralston.json", "--out", "o",
               "--name", "robot_step", "--real", "float", "--check", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert m["name"] == "robot_step" and m["real"] == "float" and m["tableau"]["name"] == "ralston_json"
    assert set(m["float_vs_double_error"]) == {"x_next", "A", "B"}


@pytest.mark.parametrize(
    "args,match",
    [
        (["--model", "nope"], "unknown model"),
        (["--model", "cartpole", "--steps", "0"], "--steps"),
        (["--model", "cartpole", "--steps", "two"], "--steps"),
        (["--model", "cartpole", "--dt", "-0.1"], "--dt"),
        (["--model", "cartpole", "--dt", "nan"], "--dt"),
        (["--model", "cartpole", "--method", "rk99"], "rk99"),
        (["--model", "missing.py"], "not found"),
        (["--model", "broken.py"], "RuntimeError"),
        (["--model", "free.py"], "free symbol"),
        (["--model", "cartpole", "--name", "bad name"], "identifier"),
        (["--model", "cartpole", "--tableau-file", "nope.json"], "nope.json"),
        (["--model", "cartpole", "--method", "rk4", "--tableau-file", "t.json"], "either"),
        (["--model", "cartpole", "--real", "half"], "--real"),
    ],
)
def test_user_mistakes_are_one_line_exit_2_and_write_nothing(args, match, tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    (tmp_path / "free.py").write_text(
        "import casadi as ca\nimport shooting\nx, u, k = ca.SX.sym('x'), ca.SX.sym('u'), ca.SX.sym('k')\n"
        "def make_model():\n    return shooting.Model('m', x, u, -k * x + u)\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = run("integrator", *args, "--out", "out", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and match in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_foreign_directory_is_refused_and_untouched(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("precious")
    proc = run("integrator", "--model", "cartpole", "--out", "mine", cwd=tmp_path)
    assert proc.returncode == 2 and "--force" in proc.stderr
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["keep.txt"]
    proc = run("integrator", "--model", "cartpole", "--out", "mine", "--force", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "mine" / "keep.txt").read_text() == "precious"


def test_missing_compiler_is_a_usage_error(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path / "empty")}
    proc = run("integrator", "--model", "cartpole", "--out", "o", "--check", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "gcc not found" in proc.stderr
    proc = run("integrator", "--model", "cartpole", "--out", "o", "--target", "cortex-m4", cwd=tmp_path, env=env)
    assert proc.returncode == 2 and "arm-none-eabi-gcc" in proc.stderr
    assert not (tmp_path / "o").exists()


@needs_m4
@pytest.mark.parametrize("real", ["double", "float"])
def test_cortex_m4_check_runs_on_the_emulator(real, tmp_path):
    proc = run("integrator", "--model", "cartpole", "--method", "rk4", "--out", "m4", "--real", real,
               "--target", "cortex-m4", "--check", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    m = json.loads((tmp_path / "m4" / "manifest.json").read_text())
    assert m["check_cortex_m4"]["passed"] and m["check_cortex_m4"]["vectors"] == 8
    size = m["cortex_m4"]
    assert size["flash"] == size["text"] + size["data"] > 0 and size["stack"] > 0
    if real == "float":
        assert not toolchain.double_precision_symbols(size["undefined"]), size["undefined"]
        assert m["check_cortex_m4"]["worst_relative_error"]["A"] < 1e-4
    else:
        assert m["check_cortex_m4"]["worst_relative_error"]["A"] <= 1e-12
