#!/usr/bin/env python3
"""Shared pieces of the benchmarks: the --models option, a model's nominal call, the row of a skipped model.

Every benchmark takes ``--models all`` (every built-in model), a comma-separated
list of built-in names or model files (anything `shooting.load_model` takes),
and combines it with ``--quick``. Each per-model table starts its rows with
the model's name; where a benchmark's subject does not apply to a model (the
C controller and a DAE, a peer tool and a DAE), the row says so and why
(``skipped: <reason>``) instead of failing.

Run alone it prints the built-in models with their sizes (what ``--models all``
covers):

    python scripts/benchkit.py
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

import shooting

#: Width of the model column of every per-model table.
NAME_WIDTH = 13


def add_models_option(parser: argparse.ArgumentParser, default: str = "all", quick_default: str = "cartpole") -> None:
    """Add ``--models``: 'all', or comma-separated model names or files (default `default`; with --quick
    `quick_default`)."""
    parser.add_argument("--models", metavar="LIST",
                        help=f"'all' (every built-in model) or comma-separated model names or files "
                             f"(default: {default}; with --quick: {quick_default})")
    parser.set_defaults(_models_defaults=(default, quick_default))


def selected_models(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[shooting.Model]:
    """The models named by ``--models`` (loaded); an unknown one is a one-line usage error (exit 2)."""
    default, quick_default = args._models_defaults
    spec = args.models or (quick_default if getattr(args, "quick", False) else default)
    names = shooting.model_names() if spec.strip() == "all" else [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        parser.error("--models: give 'all' or at least one model name")
    models = []
    for name in names:
        try:
            models.append(shooting.load_model(name))
        except ValueError as err:
            parser.error(f"--models: {err}")
    return models


def nominal_dt(model: shooting.Model) -> float:
    """The model's dt, or 0.1 (as shooting's generic scenario) for a model without one."""
    return float(model.dt or 0.1)


def nominal_args(model: shooting.Model) -> list:
    """Positional inputs of an integrator Function of `model` at its nominal point: (x, u, p, t0, dt[, z0])."""
    return [model.x0, model.u0, model.p0, 0.0, nominal_dt(model), *([model.z0] if model.nz else [])]


def skip_row(name: str, reason: str) -> str:
    """The row of a model a table does not apply to: its name, then ``skipped: <reason>`` on one line."""
    return f"{name:<{NAME_WIDTH}}skipped: {' '.join(str(reason).split())}"


class Skip(Exception):
    """Raised inside `model_rows` to print a skip row for the current model and go on with the next."""


@contextlib.contextmanager
def model_rows(name: str) -> Iterator[None]:
    """Turn a `Skip` (the model cannot be taken, with the reason) into a skip row; anything else propagates."""
    try:
        yield
    except Skip as err:
        print(skip_row(name, str(err)), flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_models_option(parser)
    models = selected_models(parser, parser.parse_args(argv))
    print(f"{'model':<{NAME_WIDTH}}{'nx':>4}{'nu':>4}{'np':>4}{'nz':>4}{'dt':>7}  kind")
    for model in models:
        kind = f"DAE ({model.nz} algebraic states: z0 input, z output)" if model.nz else "ODE"
        sizes = f"{model.nx:>4}{model.nu:>4}{model.np:>4}{model.nz:>4}{nominal_dt(model):>7g}"
        print(f"{model.name:<{NAME_WIDTH}}{sizes}  {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
