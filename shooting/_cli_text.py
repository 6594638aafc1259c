"""Command-line text into values for `shooting-codegen`: vectors, weights, model parameters; one-line usage errors.

Pure functions of the text (no numpy, CasADi or argparse): `shooting.cli`
uses them for its options, and every mistake is a `UsageError` whose message
names the option and the fix (the CLI prints it on one line, exit status 2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["UsageError", "model_args", "parse_vector", "parse_weight"]


class UsageError(Exception):
    """A user mistake: reported in one line with exit status 2."""

#: The window of ``estimator --kind mhe`` without --horizon.
MHE_HORIZON = 10


def parse_vector(text: str, n: int, option: str, model_name: str) -> list[float]:
    """``v1,v2,...`` (``pi`` allowed) as n finite numbers, or a UsageError naming `option`."""
    values = []
    for i, token in enumerate(text.split(",")):
        token = token.strip()
        sign, body = (-1.0, token[1:]) if token.startswith("-") else (1.0, token.lstrip("+"))
        try:
            value = sign * math.pi if body.lower() == "pi" else float(token)
        except ValueError:
            raise UsageError(f"{option} entry {i + 1} is {token!r}, not a number: give {n} comma-separated "
                             f"numbers, e.g. {option} {','.join(['0'] * n)}") from None
        if not math.isfinite(value):
            raise UsageError(f"{option} entry {i + 1} is {token!r}: give finite numbers")
        values.append(value)
    if len(values) != n:
        raise UsageError(f"{option} has {len(values)} value(s) but model {model_name} needs {n}: give {n} "
                         f"comma-separated numbers")
    return values


def model_args(pairs: Sequence[str] | None) -> dict[str, object]:
    """``--model-arg NAME=VALUE`` pairs as keyword arguments (ints, floats, ``pi``, true/false, or text)."""
    params: dict[str, object] = {}
    for pair in pairs or ():
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise UsageError(f"--model-arg {pair!r} is not NAME=VALUE (e.g. --model-arg n=5)")
        text = text.strip()
        value: object
        if text.lower() in ("true", "false"):
            value = text.lower() == "true"
        elif text.lower() in ("pi", "-pi"):
            value = math.copysign(math.pi, -1.0 if text.startswith("-") else 1.0)
        else:
            try:
                value = int(text)
            except ValueError:
                try:
                    value = float(text)
                except ValueError:
                    value = text
        params[name] = value
    return params


def parse_weight(text: str, n: int, option: str, model_name: str) -> list[float]:
    """A diagonal weight: n non-negative numbers, or one for all n (a UsageError naming `option` otherwise)."""
    values = parse_vector(text, 1, option, model_name) if "," not in text and n > 1 else \
        parse_vector(text, n, option, model_name)
    if any(v < 0 for v in values):
        raise UsageError(f"{option} entries are the diagonal of a positive semi-definite weight: give numbers "
                         f">= 0, got {text!r}")
    return values * n if len(values) == 1 else values
