"""The C check as a judge: tolerances from the arithmetic, diverging references, and toolchain faults."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.codegen import emitter, export_integrator, pipeline, toolchain, verify
from shooting.codegen.rounding import rounding_spread
from support import needs_gcc, needs_m4

needs_arm = needs_m4


def _step(model: str = "cartpole", method: str = "rk4", steps: int = 1) -> tuple[shooting.Model, ca.Function]:
    m = shooting.load_model(model)
    return m, shooting.build_integrator(m, method, steps)


def test_rounding_spread_scales_with_the_unit_roundoff():
    """The Monte-Carlo estimate is about u times the output: 2^29 larger in float than in double."""
    model, F = _step()
    vectors = verify.make_vectors(F, model, n=3)
    single = rounding_spread(F, vectors, "float")
    double = rounding_spread(F, vectors, "double")
    assert single is not None and double is not None
    for s, d in zip(single, double, strict=True):
        for a, b in zip(s, d, strict=True):
            assert 1e7 < a / b < 1e10  # 2^29 = 5.4e8, up to the luck of 8 samples
    x_next = np.array(F(*vectors[0])[0]).ravel()
    assert 1e-8 < single[0][0] / np.abs(x_next).max() < 1e-5  # a few units of 6e-8


@needs_gcc
@pytest.mark.parametrize("real", ["float", "double"])
def test_allowed_error_follows_from_the_arithmetic(real):
    model, F = _step("vanderpol", "dopri5", 3)
    export = shooting.codegen.generate_c(F, "s", real=real)
    report = verify.check_host(export, F, verify.make_vectors(F, model, n=4))
    assert report.passed and 0 <= report.margin <= 1
    u = 2.0**-24 if real == "float" else 2.0**-53
    for name in ("x_next", "A", "B"):
        assert report.allowed[name] < 1e4 * u  # not a fixed 1e-3 / 1e-12
        assert report.worst[name] <= report.allowed[name] or report.margin <= 1
    # err = x_next - x_hat, on its own scale: cancellation makes its relative rounding far larger.
    assert report.allowed["err"] > 10 * report.allowed["x_next"]


@needs_gcc
def test_rounded_float_literals_are_caught(monkeypatch):
    """Literals cut to four significant digits: a 1e-4 relative error the old 1e-3 tolerance let through."""
    model, F = _step("cartpole", "rk4")
    vectors = verify.make_vectors(F, model, n=4)
    good = verify.check_host(shooting.codegen.generate_c(F, "s", real="float"), F, vectors)
    assert good.passed
    exact_literal = emitter.literal
    monkeypatch.setattr(emitter, "literal", lambda v, real: exact_literal(float(f"{float(v):.4g}"), real))
    bad = verify.check_host(shooting.codegen.generate_c(F, "s", real="float"), F, vectors)
    assert not bad.passed and bad.margin > 1 and "MISMATCH" in bad.summary()
    assert max(bad.worst.values()) < 1e-3  # what the fixed tolerance would have accepted


def _diverging_model() -> shooting.Model:
    x, u = ca.SX.sym("x"), ca.SX.sym("u")
    return shooting.Model("cubic", x, u, -x**3 + u, x0=[3.0], dt=20.0)


@needs_gcc
def test_non_finite_reference_is_reported_as_such(tmp_path):
    """Explicit Euler far outside its stability region overflows in CasADi itself: not a C mismatch."""
    F = shooting.build_integrator(_diverging_model(), "euler", 20)
    report = export_integrator(F, tmp_path / "out", check=True)
    assert not report.ok and not (tmp_path / "out").exists()
    assert "CasADi's own result is not finite" in report.problems[0] and "not the C" in report.problems[0]
    assert "MISMATCH" not in report.problems[0]


def _fake_tools(folder: Path, **scripts: str) -> dict[str, str]:
    """Executables in `folder` that shadow the real ones on PATH; returns the environment to use."""
    folder.mkdir(exist_ok=True)
    for name, body in scripts.items():
        path = folder / name.replace("_", "-")
        path.write_text("#!/bin/sh\n" + body + "\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def _cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shooting.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@needs_gcc
def test_compiler_that_writes_nothing(tmp_path):
    env = _fake_tools(tmp_path / "bin", gcc="exit 0")
    proc = _cli(["integrator", "--model", "pendulum", "--check", "--out", "out", "-q"], tmp_path, env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "gcc: error: exited 0 but wrote no" in proc.stderr and "nothing written" in proc.stderr
    assert not (tmp_path / "out").exists()


@needs_arm
def test_failing_size_tool_is_one_line(tmp_path):
    env = _fake_tools(tmp_path / "bin", arm_none_eabi_size="echo 'size: error: corrupt object' >&2; exit 3")
    proc = _cli(["integrator", "--model", "pendulum", "--target", "cortex-m4", "--out", "out", "-q"], tmp_path, env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = [s for s in proc.stderr.splitlines() if "arm-none-eabi-size" in s]
    assert line and "corrupt object" in line[0] and "measuring" in line[0]
    assert not (tmp_path / "out").exists()


@needs_gcc
def test_compile_timeout_kills_the_whole_process_group(tmp_path):
    """A compiler that hangs (and has a child, like cc1): killed with its children, one line, exit 1."""
    marker = f"sleep {90000 + os.getpid() % 9999}"
    env = _fake_tools(tmp_path / "bin", gcc=f"{marker} &\nwait")
    env["SHOOTING_TOOL_TIMEOUT"] = "2"
    start = time.monotonic()
    proc = _cli(["integrator", "--model", "pendulum", "--check", "--out", "out", "-q"], tmp_path, env)
    assert time.monotonic() - start < 60
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "gcc timed out" in proc.stderr and "killed with its child processes" in proc.stderr
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == [], f"orphaned child processes: {left}"


def test_first_error_line_skips_context():
    text = ("/tmp/x.s: Assembler messages:\n/tmp/x.s:12: Error: bad instruction `foo'\n"
            "x.c: In function 'f':\nx.c:3:5: note: declared here\n")
    assert toolchain.first_error_line(text) == "/tmp/x.s:12: Error: bad instruction `foo'"
    assert toolchain.first_error_line("") == "no diagnostics"
    assert pipeline.MAX_VECTORS == 1000


@needs_gcc
def test_cli_exits_1_on_a_mismatch_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """A wrong constant injected into the generated C: exit status 1, MISMATCH, no output directory."""
    from shooting import cli

    generate = pipeline.generate_c

    def broken(*args, **kwargs):
        export = generate(*args, **kwargs)
        text = export.files[f"{export.name}.c"].replace("0.16666666666666666", "0.1666666", 1)
        return type(export)(export.name, {**export.files, f"{export.name}.c": text}, export.manifest,
                            export.call_graph)

    monkeypatch.setattr(pipeline, "generate_c", broken)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["integrator", "--model", "pendulum", "--check", "--out", "out", "-q"]) == 1
    captured = capsys.readouterr()
    assert "MISMATCH" in captured.err and "nothing written" in captured.err  # (a failed check on stderr)
    assert not (tmp_path / "out").exists()
