"""The documentation site builds strictly (``mkdocs build --strict``, as the README says) and covers every public
name and every command-line option."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import shooting
from shooting._cli_parser import build_parser
from support import CI

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("mkdocs") is None and not CI:
        pytest.skip("needs the docs extra: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_reference_covers_every_public_name(site: Path) -> None:
    html = (site / "reference" / "index.html").read_text(encoding="utf-8")
    for name in shooting.__all__:
        if name.startswith("_") or not callable(getattr(shooting, name)):
            continue
        assert re.search(rf'id="shooting\.[\w.]*\b{name}"', html), name  # (its own heading, by its path)
    for name in ("export_controller", "export_integrator", "load_controller", "load_step"):
        assert name in html


def test_every_verb_has_a_page_with_every_option(site: Path) -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for verb, command in sub.choices.items():
        page = (site / "cli" / verb / "index.html").read_text(encoding="utf-8")
        for action in command._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert option in page, (verb, option)


def test_a_public_name_without_a_docstring_fails_the_build() -> None:
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    saved = shooting.build_integrator.__doc__
    try:
        shooting.build_integrator.__doc__ = None
        with pytest.raises(Exception, match="build_integrator"):
            hooks.reference_page()
    finally:
        shooting.build_integrator.__doc__ = saved


def test_the_gallery_shows_the_examples_figures(site: Path) -> None:
    page = (site / "examples" / "index.html").read_text(encoding="utf-8")
    figures = sorted((site / "gallery").glob("*.png"))
    assert len(figures) >= 4 and all(f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in figures)
    for figure in figures:
        assert f"gallery/{figure.name}" in page
