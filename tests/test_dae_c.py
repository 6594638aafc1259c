"""Algebraic states in the C export: NAME_step with z0 and z, checked on the host and the emulated Cortex-M4."""

from __future__ import annotations

import json

import numpy as np
import pytest

import shooting
from shooting.cli import main
from shooting.codegen import export_integrator, load_step
from support import needs_gcc, needs_m4


@needs_gcc
@pytest.mark.parametrize("method, real", [("rk4", "double"), ("implicit_euler", "float")])
def test_dae_step_in_c_matches_casadi(tmp_path, method, real):
    m = shooting.load_model("dip")
    F = shooting.build_integrator(m, method, 2)
    report = export_integrator(F, tmp_path / "out", real=real, check=True)
    assert report.ok, report.problems
    assert set(report.errors) == {"x_next", "A", "B", "z"}
    header = (tmp_path / "out" / f"{F.name()}.h").read_text()
    assert f"#define {F.name().upper()}_NZ 3" in header
    assert "const dip_" in header and "z0," in header and "* z);" in header
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["z0"] == [0.0, 0.0, 0.0] and manifest["algebraic_names"] == ["dds", "ddtheta1", "ddtheta2"]

    step = load_step(tmp_path / "out")
    x, u = m.x0 + np.array([0.1, -0.05, 0.02, 0.3, -0.2, 0.1]), 2.0
    x_next, A, B, z = step(x, [u], None, 0.0, 0.02, z0=[0.5, -3.0, 4.0])
    ref = F(x=x, u=u, p=[], t0=0.0, dt=0.02, z0=[0.5, -3.0, 4.0])
    # double: the same operations (a few ulps); float: rounding of ~1e3 operations of size ~|z| ~ 10-100.
    tol = 1e-12 if real == "double" else 2e-4
    for got, key in ((x_next, "x_next"), (A, "A"), (B, "B"), (z, "z")):
        want = np.array(ref[key])
        assert np.abs(got.reshape(want.shape) - want).max() <= tol * max(1.0, np.abs(want).max()), key
    with pytest.raises(ValueError, match="z0 must have 3"):
        step(x, [u], None, 0.0, 0.02, z0=[1.0])


@needs_m4
def test_dae_step_on_cortex_m4_float(tmp_path):
    m = shooting.load_model("dip")
    F = shooting.build_integrator(m, "rk4", 2)
    report = export_integrator(F, tmp_path / "m4", real="float", target="cortex-m4", check=True, vectors=4)
    assert report.ok, report.problems
    assert [c.target for c in report.checks] == ["host", "cortex-m4"]
    assert report.flash and report.flash > 0 and report.ram and report.ram > 0
    assert not report.double_symbols


@needs_gcc
def test_cli_exports_the_dae_model(tmp_path, capsys):
    assert main(["integrator", "--model", "dip", "--method", "rk4", "--check", "--out",
                 str(tmp_path / "cli"), "-q"]) == 0
    assert (tmp_path / "cli" / "manifest.json").is_file()
    # a Newton variant the DAE builder does not offer: one line, exit 2, nothing written
    assert main(["integrator", "--model", "dip", "--method", "radau2", "--newton", "simplified", "--out",
                 str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "algebraic states" in err and "Traceback" not in err
    assert not (tmp_path / "bad").exists()
