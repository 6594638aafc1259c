"""Text templates of the generated files, rendered by `render`.

A placeholder is ``@{key}`` (a sequence that neither C nor make uses). Every
placeholder must be given a value and every value must be used, so a template
and its caller cannot drift apart silently. `render_from` (a template of
another package's folder) lives in `shooting._c_text` and is importable from
here too.
"""

from __future__ import annotations

from shooting._c_text import render_from

__all__ = ["render", "render_from"]


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
