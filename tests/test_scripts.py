"""Every script in scripts/ runs, each benchmark over every built-in model: scripts that nobody runs rot.

Each benchmark runs as a subprocess in its short mode over all built-in
models (``--quick --models all``), as a user would: it must exit 0 without a
traceback and print a table row per model, which starts with the model's
name. A model a benchmark's subject does not apply to (the C controller and
a DAE) gets a row that says ``skipped:`` and why.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import shooting
from shooting.controller.c_source import controller_spec

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
#: Imported by the benchmarks; run alone, each prints what it offers.
HELPERS = {"bench_mpc_peers.py", "benchkit.py", "board_cold.py"}
BENCHMARKS = sorted(p.name for p in SCRIPTS.glob("bench_*.py") if p.name not in HELPERS)
ALL_MODELS = ["--quick", "--models", "all"]


def _run(script: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPTS / script), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_every_benchmark_takes_quick_and_models():
    """A benchmark run without --quick would take many minutes inside the suite; --models reaches every model."""
    assert len(BENCHMARKS) >= 6, BENCHMARKS
    for name in BENCHMARKS:
        text = (SCRIPTS / name).read_text()
        assert '"--quick"' in text and "add_models_option(" in text and "selected_models(" in text, name


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.py")))
def test_script_runs(script, tmp_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("demo_out") / "demo"
    if script == "demo.py":
        args = ["--out", str(out)]
    elif script == "bench_mpc_peers.py":
        args = ["--quick"]
    elif script == "check_mutations.py":
        args = ["--dry-run"]  # (its changes' texts and tests checked; the mutation runs themselves take minutes)
    else:
        args = ALL_MODELS if script in BENCHMARKS else []
    proc = _run(script, args, tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in output, output[-3000:]
    assert proc.stdout.strip(), "a script should report what it did"
    assert list(tmp_path.iterdir()) == [], "scripts must not leave files in the working directory"
    if script in BENCHMARKS or script == "benchkit.py":
        for name in shooting.model_names():
            rows = re.findall(rf"^{name}\s.*$", proc.stdout, re.MULTILINE)
            assert rows, f"{script} printed no row for model {name}:\n{proc.stdout[-3000:]}"
            for row in rows:
                if "skipped:" in row:
                    assert len(row.split("skipped:", 1)[1].strip()) > 10, f"a skip without its reason: {row}"
    if script == "demo.py":  # (the main job writes where it says)
        assert (out / "c_float" / "cartpole_step.c").exists() and (out / "mpc_ipopt" / "states.png").exists()
        assert (out / "mpc_rti" / "trajectory.json").exists()
        assert (out / "mpc_c_double" / "cartpole_mpc.c").exists()
        assert (out / "mpc_c_float" / "cartpole_mpc.h").exists()
        assert str(out / "c_float") in proc.stdout and str(out / "mpc_rti") in proc.stdout
    if script == "bench_controller.py":
        # A model the C controller refuses gets a row with the library's own reason, not a traceback or nothing.
        for name in shooting.model_names():
            reason = _c_controller_refusal(name)
            if reason:
                assert f"{name:<13}skipped: {reason}" in proc.stdout, (reason, proc.stdout[-3000:])


def _c_controller_refusal(name: str) -> str | None:
    """The ValueError message of `controller_spec` for a built-in model's default problem, or None if taken."""
    model = shooting.load_model(name)
    problem = shooting.default_scenario(model).problem.with_changes(horizon=2, soft_x_bounds=True)
    try:
        controller_spec(shooting.MultipleShootingOCP.from_problem(model, problem))
    except ValueError as err:
        return " ".join(str(err).split())
    return None


def test_unknown_model_is_a_one_line_usage_error(tmp_path):
    proc = _run("benchkit.py", ["--models", "cartpole,no_such_model"], tmp_path)
    assert proc.returncode == 2
    assert "no_such_model" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("benchkit.py: error: --models")
