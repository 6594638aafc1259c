"""MkDocs hooks: the command line's pages from its argument parser and the API reference from the public names.

Generated at each build, so that neither can go stale: one page per verb of ``shooting-codegen`` (its
description, usage and every option with its help, choices and default), and ``reference.md`` with one
mkdocstrings block per public name of ``shooting``, ``shooting.codegen`` and ``shooting.controller``. A public
class or function without a docstring fails the build (strict).
"""

from __future__ import annotations

import argparse
import inspect
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

VERBS = ("list", "tableau", "integrator", "mpc", "controller", "estimator", "sweep")
PACKAGES = ("shooting", "shooting.codegen", "shooting.controller")


def _option_row(action: argparse.Action) -> str:
    names = ", ".join(f"`{s}`" for s in action.option_strings)
    if action.metavar and action.nargs != 0:
        names += f" `{action.metavar}`"
    text = (action.help or "").replace("|", "\\|").replace("%%", "%")
    if action.choices:
        text += " Choices: " + ", ".join(f"`{c}`" for c in action.choices) + "."
    if action.default not in (None, False, argparse.SUPPRESS) and action.nargs != 0:
        text += f" Default: `{action.default}`."
    return f"| {names} | {text} |"


def cli_pages() -> dict[str, str]:
    """``cli/VERB.md`` for each verb and ``cli/index.md``, from `shooting._cli_parser.build_parser`."""
    from shooting._cli_parser import DESCRIPTION, build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    pages = {"cli/index.md": "# The command line\n\n" + DESCRIPTION + "\n\n"
             "`shooting-codegen COMMAND [options]`, or `python -m shooting COMMAND [options]`; "
             "`shooting-codegen --version`. Bad input is one line on stderr and exit status 2; Ctrl-C exits 130.\n\n"
             + "\n".join(f"- [`{verb}`]({verb}.md): {next(c.help for c in sub._choices_actions if c.dest == verb)}"
                         for verb in VERBS) + "\n"}
    for verb in VERBS:
        command = sub.choices[verb]
        rows = [_option_row(a) for a in command._actions if a.option_strings and a.dest != "help"]
        usage = command.format_usage().replace("usage: ", "").strip()
        pages[f"cli/{verb}.md"] = (f"# shooting-codegen {verb}\n\n{command.description or ''}\n\n"
                                   f"```text\n{usage}\n```\n\n| option | what |\n|---|---|\n"
                                   + "\n".join(rows) + "\n")
    return pages


def _public(package: str) -> list[tuple[str, Any]]:
    import importlib

    module = importlib.import_module(package)
    names = [n for n in getattr(module, "__all__", []) if not n.startswith("_")]
    return [(n, getattr(module, n)) for n in names]


def reference_page() -> str:
    """``reference.md``: one mkdocstrings block per public class and function (constants are listed)."""
    seen: set[str] = set()
    parts = ["# Reference\n\nGenerated from the docstrings of every public name (numpydoc).\n"]
    missing = []
    for package in PACKAGES:
        parts.append(f"\n## `{package}`\n")
        constants = []
        for name, obj in _public(package):
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                constants.append(name)
                continue
            path = f"{obj.__module__}.{obj.__qualname__}"
            if not inspect.getdoc(obj):
                missing.append(f"{package}.{name}")
            if path in seen:
                parts.append(f"\n`{package}.{name}`: see `{path}` above.\n")
                continue
            seen.add(path)
            parts.append(f"\n::: {path}\n    options:\n      heading_level: 3\n      show_root_full_path: false\n")
        if constants:
            parts.append("\nConstants: " + ", ".join(f"`{package}.{c}`" for c in constants) + ".\n")
    if missing:
        raise PluginError(f"public names without a docstring: {', '.join(missing)}")
    return "".join(parts)


#: The examples whose figures the gallery shows (each runs in a second or two).
GALLERY = {"own_model": ("own_model.png",), "mpc_path_constraint": ("states.png", "path_constraints.png"),
           "dae": ("states.png",)}


def gallery_figures() -> dict[str, bytes]:
    """``gallery/EXAMPLE_FIGURE.png``: the figures of the `GALLERY` examples, run at build time."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    figures = {}
    with tempfile.TemporaryDirectory(prefix="shooting_gallery_") as tmp:
        for example, names in GALLERY.items():
            out = Path(tmp) / example
            done = subprocess.run([sys.executable, str(root / "examples" / f"{example}.py"), str(out)],
                                  capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                raise PluginError(f"examples/{example}.py failed: {done.stderr.strip().splitlines()[-1:]}")
            for name in names:
                figures[f"gallery/{example}_{name}"] = (out / name).read_bytes()
    return figures


def on_files(files: Files, config: Any) -> Files:
    for name, text in {**cli_pages(), "reference.md": reference_page()}.items():
        files.append(File.generated(config, name, content=text))
    for name, data in gallery_figures().items():
        files.append(File.generated(config, name, content=data))
    return files
