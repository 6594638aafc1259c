"""Generated C, compiled and run on real inputs, against the CasADi Function."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.codegen import export_integrator, generate_c, toolchain, verify
from shooting.codegen.pipeline import install_export
from support import needs_gcc, needs_m4


def _step(model_name: str, method: str = "rk4", steps: int = 1, mode: str = "forward") -> tuple:
    model = shooting.load_model(model_name)
    return model, shooting.build_integrator(model, method, steps, mode)


def test_output_is_deterministic():
    model, F = _step("quadrotor", "dopri5", 3)
    a = generate_c(F, "q", metadata={"m": 1}).files
    b = generate_c(shooting.build_integrator(model, "dopri5", 3), "q", metadata={"m": 1}).files
    assert a == b


@pytest.mark.parametrize("steps", [1, 200])
def test_no_heap_and_documented_header(steps):
    _, F = _step("cartpole", "rk4", steps)
    files = generate_c(F, "cp").files
    for fname in ("cp.c", "cp.h"):
        assert not re.search(r"\b(malloc|calloc|realloc|free)\s*\(", files[fname]), fname
    header = files["cp.h"]
    assert "int cp_step(const cp_real* x, const cp_real* u, const cp_real* p," in header
    assert "typedef double cp_real;" in header
    assert ("NOT reentrant" in header) == (steps > 4) and "Usage:" in header


def test_float_source_is_single_precision():
    _, F = _step("cartpole", "rk4")
    src = generate_c(F, "q", real="float").files["q.c"]
    assert "double" not in src
    assert re.search(r"\b(sin|cos|sqrt|exp|pow)\(", src) is None
    assert "sinf(" in src or "cosf(" in src


def test_code_size_does_not_grow_with_steps():
    _, F1 = _step("cartpole", "rk4", 1)
    _, F200 = _step("cartpole", "rk4", 200)
    one = len(generate_c(F1, "cp").files["cp.c"])
    many = len(generate_c(F200, "cp").files["cp.c"])
    assert many <= 3 * one, (one, many)


# Every built-in model x {euler, rk4, dopri5, gauss2}, but the quadrotor's gauss2
# step (93k instructions, about a minute of gcc) is left to scripts/bench_codegen.py.
MATRIX = [(m, t) for m in shooting.model_names() for t in ("euler", "rk4", "dopri5", "gauss2")
          if (m, t) != ("quadrotor", "gauss2")]


@needs_gcc
@pytest.mark.parametrize("model_name,method", MATRIX)
@pytest.mark.parametrize("real", ["double", "float"])
def test_compiled_step_matches_python(model_name, method, real):
    """-std=c99 -Wall -Wextra -pedantic -Werror (and -Wdouble-promotion for float), run, compare."""
    model, F = _step(model_name, method)
    export = generate_c(F, "s", real=real)
    report = verify.check_host(export, F, verify.make_vectors(F, model, n=4))
    assert report.passed, report.summary() + report.details
    if real == "double":
        assert report.worst_error <= 1e-12


@needs_gcc
@pytest.mark.parametrize("method,steps,mode", [("rk4", 7, "forward"), ("radau2", 6, "ad"), ("bs3", 13, "none"),
                                               ("dopri5", 5, "variational")])
def test_composed_substeps_compile_and_match(method, steps, mode):
    """The MX composition (binary doubling) exports too: calls, slices, scalar arithmetic."""
    model, F = _step("vanderpol", method, steps, mode)
    assert F.is_a("MXFunction")
    for real in ("double", "float"):
        export = generate_c(F, "v", real=real)
        report = verify.check_host(export, F, verify.make_vectors(F, model, n=3))
        assert report.passed, report.summary() + report.details


@needs_gcc
def test_casadi_external_loads_the_host_library(tmp_path):
    """CasADi's calling convention in NAME.c works: casadi.external evaluates it like F."""
    model, F = _step("two_link_arm", "rk4", 2)
    export_integrator(F, tmp_path / "out", name="arm")
    so = tmp_path / "arm.so"
    res = toolchain.compile_host([tmp_path / "out" / "arm.c"], so, extra_flags=("-shared", "-fPIC"))
    assert res.ok, res.stderr
    ext = ca.external("arm", str(so))
    x, u = model.x0 + 0.1, np.array([1.0, -2.0])
    for a, b in zip(ext(x, u, model.p0, 0.3, 0.05), F(x, u, model.p0, 0.3, 0.05), strict=True):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-14, atol=1e-15)


@needs_gcc
def test_check_detects_a_wrong_constant():
    """The check can fail: perturb one constant of the generated code."""
    model, F = _step("pendulum", "rk4")
    export = generate_c(F, "pd")
    src = export.files["pd.c"]
    match = re.search(r"= (0\.16666666666666666);", src)
    assert match, "expected the rk4 weight 1/6 in the code"
    broken = src.replace(match.group(0), "= 0.1666666;", 1)
    bad = type(export)(export.name, {**export.files, "pd.c": broken}, export.manifest, export.call_graph)
    report = verify.check_host(bad, F, verify.make_vectors(F, model, n=3))
    assert not report.passed and report.worst_error > 1e-9


needs_arm = needs_m4


@needs_arm
@pytest.mark.parametrize("model_name", shooting.model_names())
def test_cortex_m4_float_object_has_no_double_precision(model_name, tmp_path):
    """arm-none-eabi-nm -u: no __aeabi_d* helper, no double libm function; -Wdouble-promotion clean."""
    _, F = _step(model_name, "rk4", 2)
    export = generate_c(F, "s", real="float")
    install_export(export, tmp_path / "o")
    res, size = toolchain.compile_cortex_m4(tmp_path / "o" / "s.c", tmp_path / "s.o",
                                          extra_flags=("-Werror",), call_graph=export.call_graph)
    assert res.ok, res.stderr
    undefined = toolchain.undefined_symbols(tmp_path / "s.o")
    assert toolchain.double_precision_symbols(undefined) == [], undefined
    assert size.flash > 0 and size.stack > 0
    double = generate_c(F, "s", real="double")
    install_export(double, tmp_path / "d")
    toolchain.compile_cortex_m4(tmp_path / "d" / "s.c", tmp_path / "d.o", call_graph=double.call_graph)
    if model_name in ("cartpole", "pendulum"):  # the check can fail: a double build needs soft double
        assert toolchain.double_precision_symbols(toolchain.undefined_symbols(tmp_path / "d.o"))


@needs_arm
def test_makefile_builds_cortex_m4_object(tmp_path):
    _, F = _step("cartpole")
    export_integrator(F, tmp_path / "cp", name="cp", real="float")
    proc = subprocess.run(["make", "-s", "cortex-m4"], cwd=tmp_path / "cp", capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cp" / "build" / "cortex-m4" / "cp.o").exists()


def test_install_never_touches_foreign_files(tmp_path):
    _, F = _step("pendulum")
    export = generate_c(F, "pd")
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not empty"):
        install_export(export, foreign)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    install_export(export, foreign, force=True)
    assert (foreign / "notes.txt").read_text() == "keep me" and (foreign / "pd.c").exists()
    (tmp_path / "clash").mkdir()
    (tmp_path / "clash" / "pd.c").write_text("user code")
    with pytest.raises(ValueError, match="refusing to overwrite"):
        install_export(export, tmp_path / "clash", force=True)
    assert (tmp_path / "clash" / "pd.c").read_text() == "user code"
    # our own earlier export is replaced in place; nothing else is left behind
    install_export(export, tmp_path / "new")
    install_export(export, tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clash", "mine", "new"]


def test_bad_export_arguments():
    _, F = _step("pendulum")
    with pytest.raises(ValueError, match="identifier"):
        generate_c(F, "not valid")
    with pytest.raises(ValueError, match="real"):
        generate_c(F, "pd", real="half")


@needs_gcc
def test_makefile_builds_host_object(tmp_path):
    _, F = _step("cartpole")
    export_integrator(F, tmp_path / "cp", name="cp")
    proc = subprocess.run(["make", "-s", "host"], cwd=tmp_path / "cp", capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "cp" / "build" / "host" / "cp.o").exists()


def test_vectors_respect_bounds():
    model, F = _step("cartpole")
    for vec in verify.make_vectors(F, model, n=20):
        assert np.all(vec[1] >= model.u_min) and np.all(vec[1] <= model.u_max)
        assert vec[4][0] == model.dt


def test_emitter_rejects_unsupported_operations():
    x = ca.MX.sym("x", 3, 3)
    G = ca.Function("g", [x], [ca.inv(x)])
    with pytest.raises(ValueError, match="cannot export"):
        generate_c(G, "g")
    Path(".")  # keep the import used
