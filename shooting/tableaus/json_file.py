"""Reading a tableau's JSON file: one JSON object, or a ValueError naming the file and the problem.

Parsing is bounded, since a tableau file may come from anywhere: at most
`MAX_BYTES` are read (``/dev/zero`` is not read to the end), nesting deeper
than `MAX_DEPTH` is refused before the parser recurses, JSON numbers must be
finite floats or integers of at most `MAX_INT_DIGITS` digits, and
``NaN``/``Infinity`` are refused. Coefficient strings are bounded by
`shooting.tableaus.coefficients.to_fraction`.
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_INT_DIGITS", "read_json_object"]

#: Largest tableau file. What `ButcherTableau.to_dict` writes must read back:
#: at most 40 stages (40^2 + 3 * 40 coefficients, see
#: `shooting.tableaus.coefficients`) of at most 2470 characters plus quotes and
#: a separator is 4.3 MB, and the three labels at most 3 x 4096 characters
#: (6 bytes each when escaped) another 74 kB; a 30-stage tableau of 300-bit
#: fractions is ~600 kB.
MAX_BYTES = 8 * 1024 * 1024
#: Deepest nesting of arrays and objects (a tableau needs 3: object, A, row).
MAX_DEPTH = 8
#: Longest JSON integer (a coefficient or an order, not a bignum).
MAX_INT_DIGITS = 100


def _depth(text: str) -> int:
    """Deepest nesting of ``[`` and ``{`` outside strings."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits; numbers must be moderate (at most {MAX_INT_DIGITS} "
                         f"digits)")
    return int(text)


def _float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {text[:40]} is not a finite float; write it exactly as a string such as "
                         f"\"1/3\" or give a finite number")
    return number


def _constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a tableau can hold: give finite numbers")


def read_json_object(path: str, origin: str) -> dict[str, Any]:
    """The JSON object in the file `path`.

    Parameters
    ----------
    path : str
    origin : str
        How messages name the file, e.g. ``"tableau file 'rk.json'"``.

    Returns
    -------
    dict

    Raises
    ------
    ValueError
        A missing or unreadable file, a directory, a file larger than
        `MAX_BYTES`, nesting deeper than `MAX_DEPTH`, invalid JSON or UTF-8,
        non-finite or huge numbers, or JSON that is not an object.
    """
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ValueError(f"{origin} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"{origin} is a directory, not a JSON file") from None
    except OSError as err:
        raise ValueError(f"{origin} cannot be read: {err.strerror or err}") from None
    if len(raw) > MAX_BYTES:
        raise ValueError(f"{origin} is larger than {MAX_BYTES // (1024 * 1024)} MiB: not a tableau file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{origin} is not UTF-8 text: {err}") from None
    if _depth(text) > MAX_DEPTH:
        raise ValueError(f"{origin} nests arrays or objects deeper than {MAX_DEPTH} levels: a tableau is an "
                         f"object with a matrix A and vectors")
    try:
        data = json.loads(text, parse_int=_integer, parse_float=_float, parse_constant=_constant)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{origin} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}"
        ) from None
    except ValueError as err:
        raise ValueError(f"{origin}: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{origin} must contain a JSON object, got {type(data).__name__}")
    return data
