"""Text templates of the controller's C (the stage-wise QP solver), rendered like codegen's."""

from __future__ import annotations

from shooting.codegen.templates import render_from

__all__ = ["render"]


def render(template: str, **values: object) -> str:
    """The template file `template` (in this folder) with every ``@{key}`` replaced (see `render_from`)."""
    return render_from(__name__, template, **values)
