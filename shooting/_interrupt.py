"""Ctrl-C that always stops a run: one SIGINT handler, re-delivered until the interrupt gets through.

Python turns SIGINT into a KeyboardInterrupt raised wherever the main thread
is. Inside a C extension that polls for signals (CasADi's solvers, Function
evaluations, its DM -> numpy conversion) the exception is caught and turned
into a solver status, a ``SystemError`` or a ``RuntimeError``, or simply
dropped, and the run goes on as if nothing happened. Guarding each call is a
game of whack-a-mole, so the class is fixed here once:

* `install` (the CLI calls it first thing, before the heavy imports) sets a
  handler that records the request and raises KeyboardInterrupt, and starts
  a watchdog thread that re-sends SIGINT to the main thread every
  `REDELIVER_SECONDS` until the top level `acknowledge`\\ s it. A swallowed
  interrupt is therefore raised again at the next opportunity; whichever
  raise reaches Python code first stops the run.
* While an exception is being handled (an ``except``/``finally`` block or a
  context manager's exit is running: cleanup of staging directories, killing
  child processes, restoring file descriptors) and inside `shielded` blocks
  the handler only records: the cleanup of an interrupt already on its way
  is never itself interrupted. `shielded` blocks raise at their end.
* `guard` is for library code without the CLI (a solver call): it installs
  the recording handler for the block if nobody did, and raises the recorded
  interrupt when the block ends, whatever the extension did with it.
* `check` raises a pending interrupt at a safe point (each closed-loop sample).
* A KeyboardInterrupt raised where Python cannot propagate it (a weakref or GC callback, an ``atexit`` handler,
  a finalizer: "unraisable", Python's ``sys.unraisablehook``) would print "Exception ignored in ..." with its
  traceback and stop nothing. While `install` holds, the unraisable hook takes those silently (the request is
  recorded; the watchdog raises it again where it can propagate) and passes every other unraisable exception to
  the hook it replaced.

A process that starts with SIGINT ignored (a shell script's ``cmd &``, or
``nohup``: what protects a background job from the terminal's Ctrl-C) keeps
it ignored, as Python itself does: `defer`, `install` and `guard` leave the
disposition alone. (Overriding it made such a run stop at a Ctrl-C meant for
its script, and lose one that came before `defer`.)
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["REDELIVER_SECONDS", "acknowledge", "check", "defer", "guard", "install", "installed", "requested",
           "shielded", "uninstall"]

#: How often the watchdog re-sends a SIGINT that has not reached the top level yet.
REDELIVER_SECONDS = 0.1


class _State:
    def __init__(self) -> None:
        self.requested = False  # a SIGINT arrived and has not been acknowledged
        self.acknowledged = False  # the top level has it: stop raising
        self.shield = 0  # depth of `shielded` blocks
        self.installed = False  # `install` ran (the CLI): the watchdog is on
        self.previous: Any = None  # the handler `install` replaced
        self.stop = threading.Event()  # ends the watchdog
        self.deferred = False  # `defer` ran: SIGINT is recorded only, until `install`
        self.watchdog: threading.Thread | None = None
        self.ignored = False  # SIGINT was ignored when `defer` or `install` came: it stays ignored
        self.unraisable: Any = None  # the sys.unraisablehook `install` replaced


_state = _State()


def _handler(signum: int, frame: FrameType | None) -> None:
    _state.requested = True
    if _state.acknowledged or _state.shield:
        return
    if sys.exc_info()[1] is not None:
        return  # an exception is being handled (cleanup is running): let it finish, the watchdog retries
    if frame is not None and (frame.f_code.co_name == "__del__"
                              or frame.f_code.co_filename.startswith("<frozen importlib")
                              or frame.f_code.co_filename.endswith(("weakref.py", "_weakrefset.py"))):
        # A finalizer, the import machinery's own callbacks (a module lock's weakref callback was seen) or a
        # weak dictionary's removal callback (seen once in 30 interrupts of `controller --check`) would print
        # "Exception ignored in ..." instead of stopping anything: the watchdog retries
        return
    raise KeyboardInterrupt


def _watchdog(main_id: int, stop: threading.Event) -> None:
    while not stop.wait(REDELIVER_SECONDS):
        if _state.requested and not _state.acknowledged and not _state.shield:
            try:
                signal.pthread_kill(main_id, signal.SIGINT)
            except (ProcessLookupError, RuntimeError, OSError):  # the main thread is gone: nothing to stop
                return


def install() -> bool:
    """Make SIGINT stop this process's run reliably (from the main thread, as early as possible).

    Returns
    -------
    bool
        True when this call installed the handler (pair it with `uninstall`);
        False when it was already installed or this is not the main thread.
    """
    global _state
    if _state.installed or threading.current_thread() is not threading.main_thread():
        return False
    if _state.ignored or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        _state.ignored = True  # (a background job's: see the module docstring)
        return False
    early = _state.requested if _state.deferred else False
    _state = _State()
    _state.requested = early  # a Ctrl-C during the deferred imports: the run stops at its first check
    previous = signal.signal(signal.SIGINT, _handler)
    _state.previous = signal.default_int_handler if previous is _record_only else previous
    _state.installed = True
    _state.watchdog = threading.Thread(target=_watchdog, args=(threading.main_thread().ident, _state.stop),
                                       name="shooting-sigint", daemon=True)
    _state.watchdog.start()
    _state.unraisable = sys.unraisablehook
    sys.unraisablehook = _unraisable
    return True


def _unraisable(info: Any) -> None:
    """`install`'s ``sys.unraisablehook``: an interrupt that landed where it cannot propagate is recorded (the
    watchdog delivers it again), anything else goes to the hook it replaced."""
    if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
        _state.requested = True
        return
    (_state.unraisable or sys.__unraisablehook__)(info)


def uninstall() -> None:
    """Stop the watchdog and give SIGINT back to the handler `install` replaced."""
    if not _state.installed:
        return
    _state.acknowledged = True  # from here on a SIGINT still in flight is only recorded
    _state.stop.set()
    if _state.watchdog is not None:
        _state.watchdog.join()
    # A SIGINT the watchdog sent just before it stopped may still be pending:
    # let our handler take it (Python runs handlers between bytecodes) before
    # the old handler comes back and would raise it in the caller.
    for _ in range(3):
        time.sleep(0)
    _state.installed = False
    signal.signal(signal.SIGINT, _state.previous)
    if sys.unraisablehook is _unraisable:
        sys.unraisablehook = _state.unraisable or sys.__unraisablehook__


def _record_only(signum: int, frame: FrameType | None) -> None:
    _state.requested = True


def defer() -> None:
    """Record SIGINT without raising until `install` (the CLI's own imports, before its main runs)."""
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            _state.ignored = True  # (a background job's: see the module docstring)
            return
        signal.signal(signal.SIGINT, _record_only)
        _state.deferred = True


def installed() -> bool:
    """True when `install` ran in this process."""
    return _state.installed


def requested() -> bool:
    """True when a SIGINT arrived that the top level has not acknowledged."""
    return _state.requested and not _state.acknowledged


def acknowledge() -> None:
    """The top level caught the KeyboardInterrupt: stop re-sending and raising."""
    _state.acknowledged = True


def check() -> None:
    """Raise KeyboardInterrupt when one is pending (a safe point between units of work)."""
    if requested() and not _state.shield:
        raise KeyboardInterrupt


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """A block that an interrupt must not split (a set of renames, restoring a file descriptor).

    The interrupt is recorded and raised when the block ends (not while an
    exception is already leaving it).
    """
    _state.shield += 1
    try:
        yield
    finally:
        _state.shield -= 1
    check()


@contextlib.contextmanager
def guard() -> Iterator[None]:
    """Run a call into a C extension that may swallow KeyboardInterrupt; raise it after the call if it came.

    Without `install` (library use), the recording handler is installed for
    the block only (main thread; elsewhere signals never arrive anyway).
    """
    own = (not _state.installed and threading.current_thread() is threading.main_thread()
           and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN)
    previous = signal.signal(signal.SIGINT, _handler) if own else None
    try:
        yield
    except Exception as exc:  # the extension's own error for the interrupt (SystemError, RuntimeError)
        if requested():
            _consume(own)
            raise KeyboardInterrupt from exc
        raise
    finally:
        if own:
            signal.signal(signal.SIGINT, previous)
    if requested():
        _consume(own)
        raise KeyboardInterrupt


def _consume(own: bool) -> None:
    """Library use: each guarded call reports its own interrupt once (the CLI keeps it until acknowledged)."""
    if own:
        _state.requested = False
