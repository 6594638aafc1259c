"""Text templates of the generated files, rendered by `render`.

A placeholder is ``@{key}`` (a sequence that neither C nor make uses). Every
placeholder must be given a value and every value must be used, so a template
and its caller cannot drift apart silently.
"""

from __future__ import annotations

import re
from importlib import resources

__all__ = ["render", "render_from"]

_PLACEHOLDER = re.compile(r"@\{(\w+)\}")


def render(template: str, **values: object) -> str:
    """The template file `template` (in this folder) with every ``@{key}`` replaced by ``str(values[key])``.

    Parameters
    ----------
    template : str
        File name, e.g. ``"step.h.in"``.
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
    return render_from(__name__, template, **values)


def render_from(package: str, template: str, /, **values: object) -> str:
    """`render` for a template file of another package's folder (``shooting.qp.templates``)."""
    text = resources.files(package).joinpath(template).read_text(encoding="utf-8")
    keys = set(_PLACEHOLDER.findall(text))
    missing, unused = keys - set(values), set(values) - keys
    if missing or unused:
        raise KeyError(f"template {template}: no value for {sorted(missing)}, no placeholder for {sorted(unused)}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), text)
