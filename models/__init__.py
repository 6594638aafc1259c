"""Built-in example models (installed as `shooting.models`).

Each module ``shooting.models.<name>`` defines ``make_model(**params) ->
shooting.Model``, whose physical constants are the fields of a frozen
dataclass (defaults commented with units, acados style), and
``scenario(model) -> shooting.Scenario``, its default closed-loop experiment.
``load_model(name)`` finds them by the names in
`shooting.loading.BUILTIN_MODELS`.

The helpers below are what those factories share: `parse_params` turns keyword
arguments into the dataclass (an unknown keyword is a ValueError listing the
valid ones) and `check_numbers` validates fields in ``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from collections.abc import Iterable, Mapping
from typing import TypeVar

__all__ = ["check_numbers", "parse_params"]

_P = TypeVar("_P")


def parse_params(cls: type[_P], params: Mapping[str, object], model: str) -> _P:
    """Build the parameter dataclass `cls` from keyword arguments.

    Parameters
    ----------
    cls : dataclass type
        The model's frozen parameter dataclass; its fields are the valid keywords.
    params : mapping of str to object
        Keyword arguments given to ``make_model``.
    model : str
        Model name used in error messages.

    Returns
    -------
    instance of `cls`

    Raises
    ------
    ValueError
        An unknown keyword (the message lists the valid ones and a close match),
        or whatever the dataclass' ``__post_init__`` rejects.
    """
    valid = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = [name for name in params if name not in valid]
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, valid, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ValueError(f"{model}: unknown parameter '{name}'{hint}; valid parameters: {', '.join(valid)}")
    return cls(**params)


def _is_real(value: object, allow_inf: bool = False) -> bool:
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or math.isnan(float(value)):
        return False
    return allow_inf or math.isfinite(float(value))


def check_numbers(
    obj: object,
    model: str,
    *,
    positive: Iterable[str] = (),
    nonnegative: Iterable[str] = (),
    allow_inf: Iterable[str] = (),
) -> None:
    """Check that the named fields of `obj` are finite real numbers of the right sign.

    Parameters
    ----------
    obj : dataclass instance
        The parameter record being validated.
    model : str
        Model name used in error messages.
    positive, nonnegative : iterable of str
        Field names that must be > 0, respectively >= 0.
    allow_inf : iterable of str
        Fields among those that may also be ``+inf`` (e.g. "no bound").

    Raises
    ------
    ValueError
        Naming the field, its value and what it must be.
    """
    infinite_ok = set(allow_inf)
    for names, ok, what in (
        (positive, lambda v: v > 0, "a positive number"),
        (nonnegative, lambda v: v >= 0, "a non-negative number"),
    ):
        for name in names:
            value = getattr(obj, name)
            if not _is_real(value, name in infinite_ok) or not ok(float(value)):
                extra = " (or inf)" if name in infinite_ok else ""
                raise ValueError(f"{model}: parameter {name} = {value!r} must be {what}{extra}")
