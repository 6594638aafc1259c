"""Messages on one line: the text helpers every error and progress line goes through."""

from __future__ import annotations

import sys

import numpy as np
import numpy.typing as npt

__all__ = ["one_line", "stderr_lines", "vector_text"]


def one_line(text: object) -> str:
    """`text` on one line: its lines stripped and joined by spaces (a message from CasADi or numpy may wrap)."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def stderr_lines(message: str) -> None:
    """The default progress reporter: `message` as one line on stderr (internal newlines collapsed)."""
    print(one_line(message), file=sys.stderr, flush=True)


def vector_text(values: npt.ArrayLike, digits: int = 4) -> str:
    """A vector for a message, on one line: ``[3, 0.1235, -2]`` (numpy's own text wraps long vectors)."""
    flat = np.asarray(values, dtype=float).reshape(-1)
    return "[" + ", ".join(f"{v:.{digits}g}" for v in flat) + "]"
