"""Calling a CasADi solver: Ctrl-C is not lost, and what CasADi prints is kept, not shown.

CasADi's solvers poll for Python signals; a KeyboardInterrupt raised there is
caught by CasADi, which ends the solve with a status such as
``NonIpopt_Exception_Thrown`` and returns normally, so the interrupt is lost
and a closed loop simply goes on. `solver_call` runs the call under
`shooting._interrupt.guard`: the signal is recorded (and still raised inside
the solver so that it stops at once) and KeyboardInterrupt is raised again
when the call returns.

A failing solve also makes CasADi print ``WARNING(...)`` lines on the
process's stderr (C++, below Python's ``sys.stderr``). `solver_call`
redirects file descriptor 2 to a temporary file for the call and hands the
text back (`SolverOutput.text`), so a caller reports failures its own way.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from shooting import _interrupt

__all__ = ["SolverOutput", "solver_call"]


@dataclass
class SolverOutput:
    """What CasADi printed on stderr during a `solver_call` (filled in when the block ends)."""

    text: str = ""


@contextlib.contextmanager
def _captured_stderr(output: SolverOutput) -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable fd 2 (embedded interpreter): leave it alone
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as sink:
        # (the redirection inside the try: a Ctrl-C landing just after it must still see fd 2 restored, or
        # the CLI's "interrupted" goes into the temporary file and the run ends with exit 130 and no word)
        try:
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            # fd 2 back first, before any Python-level call (a signal handler runs at a call's entry: one
            # landing in `shielded`'s own entry once left stderr in the file, and the CLI's "interrupted" too)
            os.dup2(saved, 2)
            with _interrupt.shielded():
                os.close(saved)
                sink.seek(0)
                output.text = sink.read().decode("utf-8", "replace")


@contextlib.contextmanager
def solver_call(*, capture: bool = True) -> Iterator[SolverOutput]:
    """Run the block (a CasADi solver call): a Ctrl-C during it raises KeyboardInterrupt after it.

    Parameters
    ----------
    capture : bool
        Keep what CasADi prints on stderr in the yielded `SolverOutput`
        instead of showing it.

    Yields
    ------
    SolverOutput
    """
    output = SolverOutput()
    with _interrupt.guard(), _captured_stderr(output) if capture else contextlib.nullcontext():
        yield output
