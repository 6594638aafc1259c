"""Every script in scripts/ runs (quick mode where it has one): scripts that nobody runs rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
QUICK_ARGS = {"bench_integrators.py": ["--quick"], "bench_codegen.py": ["--quick"], "bench_mpc.py": ["--quick"],
              "bench_mpc_peers.py": ["--quick"], "bench_rti.py": ["--quick"], "bench_controller.py": ["--quick"],
              "bench_dae.py": ["--quick"]}


def test_every_benchmark_has_a_quick_mode():
    """A benchmark run without --quick would take many minutes inside the suite."""
    for script in SCRIPTS.glob("bench_*.py"):
        assert QUICK_ARGS.get(script.name) == ["--quick"], script.name
        assert "--quick" in script.read_text(), script.name


@pytest.mark.parametrize("script", sorted(p.name for p in SCRIPTS.glob("*.py")))
def test_script_runs(script, tmp_path, tmp_path_factory):
    extra = ["--out", str(tmp_path_factory.mktemp("demo_out"))] if script == "demo.py" else []
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / script), *QUICK_ARGS.get(script, []), *extra],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip(), "a script should report what it did"
    assert list(tmp_path.iterdir()) == [], "scripts must not leave files in the working directory"


def test_demo_writes_where_it_says(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "demo.py"), "--out", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (out / "c_float" / "cartpole_step.c").exists() and (out / "mpc_ipopt" / "states.png").exists()
    assert (out / "mpc_rti" / "trajectory.json").exists()
    assert (out / "mpc_c_double" / "cartpole_mpc.c").exists() and (out / "mpc_c_float" / "cartpole_mpc.h").exists()
    assert str(out / "c_float") in proc.stdout and str(out / "mpc_rti") in proc.stdout
