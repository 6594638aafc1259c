"""What a user installs and runs first: the version, ``python -m shooting``, the extras, the licence, the repository.

Independent truth: the installed distribution's metadata (importlib.metadata), a subprocess of the interpreter,
git's own list of tracked files.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import shooting
from shooting.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_the_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.split() == ["shooting-codegen", importlib.metadata.version("shooting")]
    assert shooting.__version__ == importlib.metadata.version("shooting")


def test_python_dash_m_shooting_is_the_cli() -> None:
    done = subprocess.run([sys.executable, "-m", "shooting", "list"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT / "tests")
    assert done.returncode == 0, done.stderr
    assert "cartpole" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "shooting", "integrator", "--model", "vanderpol", "--real", "half"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def test_abbreviated_options_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # (argparse's default takes --sens for --sensitivities: an abbreviation that breaks with tomorrow's option)
    assert main(["integrator", "--model", "vanderpol", "--sens", "none", "--out", str(tmp_path / "i")]) == 2
    assert "--sens" in capsys.readouterr().err
    assert not (tmp_path / "i").exists()


def test_every_cli_option_has_help() -> None:
    import argparse

    from shooting._cli_parser import build_parser
    parser = build_parser()
    missing = [(name, action.option_strings) for sub in parser._actions
               if isinstance(sub, argparse._SubParsersAction) for name, command in sub.choices.items()
               for action in command._actions if action.option_strings and not action.help]
    assert not missing


def test_noise_is_spelled_the_same_in_mpc_and_sweep() -> None:
    from shooting._cli_parser import build_parser
    parser = build_parser()
    new = parser.parse_args(["mpc", "--model", "vanderpol", "--noise-std", "0.1", "--out", "o"])
    old = parser.parse_args(["mpc", "--model", "vanderpol", "--noise", "0.1", "--out", "o"])
    assert new.noise == old.noise == 0.1
    assert parser.parse_args(["sweep", "--model", "vanderpol", "--noise-std", "0.1", "--out", "o"]).noise_std == 0.1


def test_sweep_is_an_extra_and_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    requires = importlib.metadata.requires("shooting") or []
    assert not any(r.startswith("dask") and "extra" not in r for r in requires)  # not a run-time dependency
    assert any(r.startswith("dask") and 'extra == "sweep"' in r for r in requires)
    from shooting.sweeps import cluster

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "distributed" else real(name, *a))
    with pytest.raises(ValueError, match=r"pip install 'shooting\[sweep\]'"):
        cluster.open_pool(None, 2, 10)
    cluster.open_pool(None, 1, 10)  # (one worker: in this process, no Dask needed)
    # and a whole sweep in this process runs with neither dask nor distributed importable
    for name in ("dask", "distributed"):
        monkeypatch.setitem(sys.modules, name, None)  # (an import of it now raises ImportError)
    model = shooting.load_model("vanderpol")
    scenario = shooting.default_scenario(model).with_changes(sim_steps=5)
    result = shooting.sweep(scenario, cases=2, workers=1, progress=False)
    assert len(result.rows) == 2


def test_licence_and_changelog_are_shipped() -> None:
    licence = (ROOT / "LICENSE").read_text()
    assert "MIT License" in licence
    assert importlib.metadata.metadata("shooting")["License"] == "MIT"
    assert (ROOT / "CHANGELOG.md").read_text().startswith("# Changelog")


def test_no_tracked_file_passes_one_megabyte() -> None:
    done = subprocess.run(["git", "ls-files", "-z"], capture_output=True, cwd=ROOT, timeout=60)
    if done.returncode != 0:
        pytest.skip("not a git checkout")
    files = [f for f in done.stdout.decode().split("\0") if f]
    big = [f for f in files if (ROOT / f).is_file() and (ROOT / f).stat().st_size > 1_000_000]
    assert not big


@pytest.mark.slow
def test_an_editable_install_is_seen_by_a_type_checker(tmp_path: Path) -> None:
    # (issue 25: after `pip install -e .` a user's mypy could not find `shooting`: setuptools installed an import
    # hook, which type checkers do not run, because the models were mapped from models/ to shooting.models) the
    # README's install in a fresh virtual environment, then mypy on a user's file that imports the package and a
    # model: no missing import, and a deliberate type error found through shooting's own annotations.
    import shutil
    import venv

    src = tmp_path / "src"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "build", "codegen_out", "site", "*.egg-info", "__pycache__", ".mypy_cache", ".ruff_cache"))
    env = tmp_path / "venv"
    venv.create(env, system_site_packages=True, with_pip=True)  # (casadi, numpy and mypy from this environment)
    python = str(env / "bin" / "python")
    done = subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "-e", str(src)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    user = tmp_path / "user"
    user.mkdir()
    (user / "app.py").write_text(
        "import shooting\nfrom shooting.models import cartpole\n\n"
        "model: shooting.Model = shooting.load_model('cartpole')\nn: int = model.nx\n"
        "wrong: str = model.nx\nprint(cartpole.__name__)\n")
    found = subprocess.run([python, "-c", "import shooting.models; print(shooting.models.__file__)"],
                           capture_output=True, text=True, cwd=user, timeout=120)
    assert Path(found.stdout.strip()).resolve().is_relative_to(src.resolve()), found
    checked = subprocess.run([python, "-m", "mypy", "--no-incremental", "app.py"], capture_output=True, text=True,
                             cwd=user, timeout=600)
    assert "import-not-found" not in checked.stdout and "import-untyped" not in checked.stdout, checked.stdout
    assert checked.returncode == 1 and checked.stdout.count("error:") == 1, checked.stdout
    assert 'app.py:6: error: Incompatible types in assignment (expression has type "int"' in checked.stdout
