"""A sweep's progress: cases done, rate and ETA, as a bar on a terminal or a line per 10 % otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["SweepProgress", "bar_or_lines"]


def bar_or_lines(message: str) -> None:
    """The default reporter of `shooting.sweep` (``progress=True``): see `SweepProgress`."""
    print(message, file=sys.stderr, flush=True)  # (only reached when a caller uses it as a plain reporter)


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class SweepProgress:
    """Reports each finished case.

    Parameters
    ----------
    reporter : callable or None
        None: silent. `bar_or_lines`: a bar redrawn on stderr when it is a
        terminal (at most ~10 times a second), else one line per 10 % of the
        cases. Any other callable gets one message per finished case.
    total : int
        Cases of the sweep.
    already : int
        Cases finished before (resumed).
    stream : file, optional
        Default stderr.
    """

    def __init__(self, reporter: Callable[[str], None] | None, total: int, already: int = 0,
                 stream: Any = None) -> None:
        self.reporter, self.total, self.already, self.done = reporter, total, already, already
        self.stream = sys.stderr if stream is None else stream
        self.default = reporter is bar_or_lines
        self.bar = self.default and bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.perf_counter()
        self.last_draw = 0.0
        self.next_tenth = (10 * already) // max(total, 1) + 1
        self.drawn = False

    def message(self) -> str:
        """``"37/100 cases  2.1 cases/s  ETA 30 s"``."""
        elapsed = time.perf_counter() - self.start
        ran = self.done - self.already
        rate = ran / elapsed if elapsed > 0 else 0.0
        eta = f"ETA {_duration((self.total - self.done) / rate)}" if rate > 0 else "ETA --"
        return f"{self.done}/{self.total} cases  {rate:.3g} cases/s  {eta}"

    def finished(self) -> None:
        """One more case is done."""
        self.done += 1
        if self.reporter is None:
            return
        if not self.default:
            self.reporter(self.message())
            return
        now = time.perf_counter()
        if self.bar:
            if self.done < self.total and now - self.last_draw < 0.1:
                return
            self.last_draw = now
            fill = int(30 * self.done / max(self.total, 1))
            self.stream.write(f"\r[{'#' * fill}{'.' * (30 - fill)}] {self.message()}   ")
            self.stream.flush()
            self.drawn = True
        elif 10 * self.done >= self.next_tenth * self.total:
            self.next_tenth = (10 * self.done) // self.total + 1
            self.stream.write(f"sweep: {self.message()}\n")
            self.stream.flush()

    def close(self) -> None:
        """End the bar's line."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False
