"""Hostile input, one class at a time: every case is a ValueError (library) or exit 2 with one line (CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.integrate.integrator import MAX_STEPS


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shooting.cli", *args], cwd=tmp, capture_output=True, text=True,
                          timeout=300)


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("name", ["a__b", "_x", "x_", "int", "sin", "main", "printf", "for", "1abc", "a-b", ""])
def test_names_c_or_casadi_cannot_take(name):
    model = shooting.load_model("pendulum")
    with pytest.raises(ValueError, match="name"):
        shooting.build_integrator(model, "rk4", name=name)
    x, u = ca.SX.sym("x"), ca.SX.sym("u")
    with pytest.raises(ValueError, match="model name"):
        shooting.Model(name, x, u, -x)


@pytest.mark.parametrize("name, fragment", [("a__b", "double or trailing underscore"), ("int", "reserved name"),
                                            ("_priv", "not an identifier")])
def test_cli_names_are_bad_input_before_any_check(tmp_path, name, fragment):
    proc = _cli(tmp_path, "integrator", "--model", "pendulum", "--name", name, "--check", "--out", "o")
    _one_line_exit_2(proc, fragment)
    assert not (tmp_path / "o").exists()


def test_tableau_names_are_sanitised_into_valid_c(tmp_path):
    (tmp_path / "heun.json").write_text(json.dumps({"A": [[0, 0], [1, 0]], "b": ["1/2", "1/2"], "name": "Heun (2)"}))
    F = shooting.build_integrator(shooting.load_model("pendulum"), shooting.load_tableau(tmp_path / "heun.json"))
    assert F.name() == "pendulum_Heun_2"


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(x0=[np.inf, 0.0]), "x0 contains inf"),
    (dict(u0=[np.nan]), "u0 contains NaN"),
    (dict(dt="0.05"), "dt must be a finite number > 0"),
    (dict(dt=-1.0), "dt must be a finite number > 0"),
    (dict(p=ca.SX.sym("k")), "has 1 parameter(s) (k) but no p0"),
    (dict(x_min=[1.0, 0.0], x_max=[0.0, 1.0]), "x_min[0] = 1 exceeds x_max[0] = 0"),
    (dict(time_unit=""), "time_unit must be a short unit name"),
])
def test_model_refuses_what_would_break_later(kwargs, fragment):
    x, u = ca.SX.sym("x", 2), ca.SX.sym("u")
    p = kwargs.pop("p", None)
    xdot = ca.vertcat(x[1], -x[0] * (p if p is not None else 1) + u)
    with pytest.raises(ValueError) as err:
        shooting.Model("m", x, u, xdot, p, **kwargs)
    assert fragment in str(err.value)


@pytest.mark.parametrize("content, fragment", [
    ('{"A": [[0]], "b": ["1e400"]}', "decimal exponent beyond"),
    ('{"A": [[0]], "b": [1e400]}', "not a finite float"),
    ('{"A": [[0]], "b": [1], "tolerance": 1' + "0" * 400 + "}", "integer of 401 digits"),
    ('{"A": ' + "[" * 50000 + "]" * 50000 + ', "b": [1]}', "deeper than"),
    ('{"A": [[0]], "b": ["1e100000000"]}', "decimal exponent beyond"),
    ('{"A": [[0]], "b": [NaN]}', "NaN is not a number"),
    ('{"A": [[0]], "b": [Infinity]}', "Infinity is not a number"),
])
def test_tableau_json_is_parsed_within_bounds(tmp_path, content, fragment):
    path = tmp_path / "t.json"
    path.write_text(content)
    start = time.monotonic()
    with pytest.raises(ValueError) as err:
        shooting.load_tableau(path)
    assert fragment in str(err.value) and time.monotonic() - start < 10
    _one_line_exit_2(_cli(tmp_path, "tableau", "t.json"), fragment)


def test_endless_file_is_not_read_to_the_end(tmp_path):
    with pytest.raises(ValueError, match="larger than"):
        shooting.load_tableau("/dev/zero")


@pytest.mark.parametrize("args, fragment", [
    (["--steps", str(MAX_STEPS + 1)], f"expected an integer in 1..{MAX_STEPS}"),
    (["--steps", "99999999999999999999999999999"], f"expected an integer in 1..{MAX_STEPS}"),
    (["--vectors", "100000", "--check"], "expected an integer in 1..1000"),
    (["--newton-iterations", "1000", "--method", "radau2"], "expected an integer in 1..100"),
])
def test_absurd_sizes_are_refused(tmp_path, args, fragment):
    _one_line_exit_2(_cli(tmp_path, "integrator", "--model", "pendulum", "--out", "o", *args), fragment)
    with pytest.raises(ValueError, match="steps must be an integer in 1..1048576"):
        shooting.build_integrator(shooting.load_model("pendulum"), "rk4", 10**30)


def test_doubling_is_logarithmic_without_parameters():
    """2^20 substeps of a model without parameters build like 2^4 (it took seconds when the empty p input
    made every CasADi call walk the whole call tree)."""
    model = shooting.load_model("pendulum")
    assert model.np == 0
    start = time.perf_counter()
    F = shooting.build_integrator(model, "rk4", MAX_STEPS)
    assert time.perf_counter() - start < 1.0
    x = np.array(F(model.x0, 0.0, model.p0, 0.0, 1e-3)[0]).ravel()  # and it still integrates
    ref = np.array(shooting.build_integrator(model, "rk4", 4)(model.x0, 0.0, model.p0, 0.0, 1e-3)[0]).ravel()
    np.testing.assert_allclose(x, ref, rtol=1e-9)


def test_warm_start_from_another_ocp_and_seed(tmp_path):
    model = shooting.load_model("vanderpol")
    plain = shooting.MultipleShootingOCP(model, 5, dt=0.1)
    constrained = shooting.MultipleShootingOCP(model, 5, dt=0.1, path_constraints=lambda x, u, p: x[:1] - 3.0)
    with pytest.raises(ValueError, match="warm_start is a solution of another OCP"):
        constrained.solve([1.0, 0.0], warm_start=plain.solve([1.0, 0.0]))
    start = time.monotonic()
    _one_line_exit_2(_cli(tmp_path, "mpc", "--model", "vanderpol", "--seed=-1", "--out", "o"),
                     "expected a non-negative integer")
    assert time.monotonic() - start < 30  # refused before the first solve
