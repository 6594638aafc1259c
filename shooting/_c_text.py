"""C text: template files with ``@{key}`` placeholders, and C literals of floating-point values.

Generic helpers of every layer that writes C (the QP solver's C in `shooting.qp`,
the integrator's and the controller's in `shooting.codegen` and
`shooting.controller`). A placeholder is ``@{key}`` (a sequence that neither C
nor make uses); every placeholder must be given a value and every value must
be used, so a template and its caller cannot drift apart silently.
"""

from __future__ import annotations

import re
from importlib import resources

import numpy as np

__all__ = ["literal", "render_from"]

_PLACEHOLDER = re.compile(r"@\{(\w+)\}")


def render_from(package: str, template: str, /, **values: object) -> str:
    """The template file `template` of the package `package` with every ``@{key}`` replaced by ``str(values[key])``.

    Parameters
    ----------
    package : str
        The package whose folder holds the template (``"shooting.qp.templates"``).
    template : str
        File name, e.g. ``"ocp_qp.c.in"``.
    **values
        One value per placeholder.

    Returns
    -------
    str

    Raises
    ------
    KeyError
        A placeholder without a value, or a value without a placeholder
        (a bug in the generator, not a user error).
    """
    text = resources.files(package).joinpath(template).read_text(encoding="utf-8")
    keys = set(_PLACEHOLDER.findall(text))
    missing, unused = keys - set(values), set(values) - keys
    if missing or unused:
        raise KeyError(f"template {template}: no value for {sorted(missing)}, no placeholder for {sorted(unused)}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), text)


def literal(value: float, real: str) -> str:
    """A C literal for `value` in the real type ``"double"`` or ``"float"`` (shortest round-trip digits).

    Parameters
    ----------
    value : float
    real : {"double", "float"}

    Returns
    -------
    str
        E.g. ``"0.995"``, ``"1e-06f"``, ``"(-INFINITY)"``, ``"NAN"``; a negative one in parentheses.
    """
    v = float(value)
    if np.isnan(v):
        return "NAN"
    if np.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    if real == "float":
        text = np.format_float_scientific(np.float32(v), unique=True, trim="0", exp_digits=1) + "f"
    else:
        text = repr(v)
        if "e" not in text and "." not in text:
            text += ".0"
    return f"({text})" if text.startswith("-") else text
