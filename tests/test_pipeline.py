"""The library calls behind the CLI: export_integrator (C pipeline) and run_scenario (mpc run)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import shooting
from shooting.codegen import export_integrator, pipeline
from shooting.mpc import run_scenario
from shooting.mpc.run import RUN_FILES
from support import needs_gcc, needs_m4


@needs_gcc
def test_export_integrator_checks_and_reports(tmp_path):
    model = shooting.load_model("vanderpol")
    F = shooting.build_integrator(model, "radau2", 2, newton="simplified")
    report = export_integrator(F, tmp_path / "out", check=True, vectors=5)
    assert report.ok and not report.problems
    assert sorted(p.name for p in report.files) == sorted(["vanderpol_radau2.c", "vanderpol_radau2.h",
                                                           "manifest.json", "Makefile"])
    assert all(p.exists() for p in report.files)
    assert set(report.errors) == {"x_next", "A", "B"} and max(report.errors.values()) <= 1e-12
    assert report.flash is None and report.ram is None  # host only
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    # What build_integrator was given reaches the manifest without the caller repeating it.
    assert manifest["model"]["name"] == "vanderpol" and manifest["tableau"]["name"] == "radau2"
    assert manifest["steps"] == 2 and manifest["newton"] == "simplified" and manifest["newton_iterations"] == 8
    assert manifest["check_host"]["passed"] and manifest["check_host"]["vectors"] == 5
    assert sorted(manifest["files"]) == sorted(p.name for p in report.files)


@needs_gcc
def test_export_integrator_failed_check_writes_nothing(tmp_path, monkeypatch):
    """A wrong constant in the C (fault injected into the generated text): ok False, nothing written."""
    model = shooting.load_model("pendulum")
    F = shooting.build_integrator(model, "rk4")
    generate = pipeline.generate_c

    def broken(*args, **kwargs):
        export = generate(*args, **kwargs)
        name = export.name
        text = export.files[f"{name}.c"].replace("0.16666666666666666", "0.1666666", 1)
        assert text != export.files[f"{name}.c"]
        return type(export)(name, {**export.files, f"{name}.c": text}, export.manifest, export.call_graph)

    monkeypatch.setattr(pipeline, "generate_c", broken)
    report = export_integrator(F, tmp_path / "out", check=True)
    assert not report.ok and report.files == [] and report.problems
    assert report.errors["x_next"] > 1e-9
    assert not (tmp_path / "out").exists()


@needs_m4
def test_export_integrator_on_cortex_m4_float(tmp_path):
    model = shooting.load_model("cartpole")
    F = shooting.build_integrator(model, "rk4", 6)  # composed substeps (binary doubling), on the board
    report = export_integrator(F, tmp_path / "m4", real="float", target="cortex-m4", check=True, vectors=4)
    assert report.ok, report.problems
    assert [c.target for c in report.checks] == ["host", "cortex-m4"]
    assert report.flash and report.ram and report.double_symbols == ()
    assert max(report.errors.values()) < 1e-3


def test_export_integrator_refuses_bad_input_before_work(tmp_path):
    model = shooting.load_model("pendulum")
    F = shooting.build_integrator(model, "rk4")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("keep")
    for kwargs, match in ((dict(real="half"), "real must be one of"), (dict(target="avr"), "target must be one of"),
                          (dict(name="int"), "reserved"), (dict(vectors=0), "vectors must be an integer in 1..1000"),
                          (dict(name="a__b"), "double or trailing underscore")):
        with pytest.raises(ValueError, match=match):
            export_integrator(F, tmp_path / "new", **kwargs)
    with pytest.raises(ValueError, match="not empty"):
        export_integrator(F, tmp_path / "theirs")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs"]
    assert [p.name for p in (tmp_path / "theirs").iterdir()] == ["notes.txt"]


def test_run_scenario_writes_its_files_and_replaces_its_own(tmp_path):
    model = shooting.load_model("vanderpol")
    scenario = shooting.default_scenario(model).with_changes(horizon=8, sim_steps=15)
    run = run_scenario(scenario, tmp_path / "run", rti=True)
    assert run.ok and sorted(p.name for p in run.files) == sorted(RUN_FILES)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["controller"] == "rti" and summary["scenario"]["horizon"] == 8
    data = json.loads((tmp_path / "run" / "trajectory.json").read_text())
    assert len(data["t"]) == 16 and np.allclose(data["x"][0], model.x0)
    again = run_scenario(scenario, tmp_path / "run")  # our own earlier run is replaced
    assert again.ok and sorted(p.name for p in (tmp_path / "run").iterdir()) == sorted(RUN_FILES)
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "data.csv").write_text("1,2")
    with pytest.raises(ValueError, match="not empty"):
        run_scenario(scenario, tmp_path / "theirs")


def test_failed_closed_loop_solves_are_visible(tmp_path, capfd):
    """Hard state bounds and process noise: infeasible solves are counted, listed and not ok."""
    model = shooting.load_model("vanderpol")
    scenario = shooting.default_scenario(model).with_changes(x_min=[-1.0, -1.0], x_max=[1.0, 1.0], sim_steps=40,
                                                             horizon=10)
    run = run_scenario(scenario, tmp_path / "noisy", noise_std=0.25, seed=0)
    assert not run.ok and run.failed_steps and run.files  # written, to show what happened
    summary = json.loads((tmp_path / "noisy" / "summary.json").read_text())
    assert summary["failed_steps"] == list(run.failed_steps)
    data = json.loads((tmp_path / "noisy" / "trajectory.json").read_text())
    assert [k for k, ok in enumerate(data["success"]) if not ok] == list(run.failed_steps)
    assert any(p.startswith(f"warning: {len(run.failed_steps)} of 40 closed-loop solves failed") for p in run.problems)
    assert "WARNING" not in capfd.readouterr().err  # CasADi's own lines are kept in the solutions, not shown
