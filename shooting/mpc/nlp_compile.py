"""CasADi Functions to one shared library with the host gcc: C per function, compiled in parallel, linked.

Used by `shooting.mpc.nlp_cache`. Each Function gets its own C file (CasADi's
code generator; every helper in it is static), so the files compile in
parallel processes, and the slowest one, usually the Hessian of the
Lagrangian, sets the wall time. Compilers run in their own process groups:
on a timeout (``SHOOTING_TOOL_TIMEOUT``, default 600 s) or a Ctrl-C they are
killed with their children (``cc1``, ``as``), never left running.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import casadi as ca

__all__ = ["MAX_INSTRUCTIONS", "NLP_CFLAGS", "CompileError", "compile_library", "compiler_identity", "instructions"]

#: Optimisation of the compiled NLP functions. The NLP of the cart-pole at
#: N = 20 evaluates its Hessian 7x faster than CasADi's SX virtual machine at
#: -O1 and 2x at -O0; -O2 is no faster than -O1 and compiles 1.5x longer.
NLP_CFLAGS = ("-O1", "-fPIC")
#: A function of more SX instructions is compiled at -O0 instead: gcc -O1
#: takes about 70 us and -O0 about 28 us of CPU per instruction (the
#: cart-pole's Hessian at N = 80, 117k instructions: 8.3 s and 3.3 s), and
#: about 4.6 kB of memory at either level.
O1_LIMIT = 150_000
#: An NLP of more instructions (all its functions) is not compiled at all:
#: gcc would need minutes and gigabytes (the double pendulum's default
#: scenario, 3.3M instructions, ran past 10 minutes and 3 GB).
MAX_INSTRUCTIONS = 600_000
#: Compilers run at once only while their functions total at most this many
#: instructions (about 1.4 GB of compiler memory), and never more than `MAX_JOBS`.
PARALLEL_INSTRUCTIONS = 300_000
MAX_JOBS = 4
#: Seconds a compilation may take (``SHOOTING_TOOL_TIMEOUT`` overrides it).
DEFAULT_TIMEOUT = 600.0


class CompileError(Exception):
    """No compiler, or the compiler failed or timed out; the message says which, in one line."""


def _timeout() -> float:
    """``SHOOTING_TOOL_TIMEOUT`` if it is a finite positive number of seconds, else the default."""
    try:
        value = float(os.environ.get("SHOOTING_TOOL_TIMEOUT", "").strip() or DEFAULT_TIMEOUT)
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if math.isfinite(value) and value > 0 else DEFAULT_TIMEOUT


def _gcc() -> str:
    path = shutil.which("gcc")
    if path is None:
        raise CompileError("gcc not found (apt-get install gcc)")
    return path


@functools.cache
def _identity(path: str, size: int, mtime_ns: int) -> str:
    return f"{path} {size} {mtime_ns} {' '.join(NLP_CFLAGS)} -O0 above {O1_LIMIT}"


def instructions(fn: ca.Function) -> int:
    """SX instructions of `fn` (what gcc's time and memory scale with); 0 for a Function without them."""
    try:
        return int(fn.n_instructions())
    except RuntimeError:
        return 0


def compiler_identity() -> str:
    """What identifies the compiler and flags in a cache key: gcc's resolved path, size, mtime, the flags.

    A compiler upgrade replaces the binary (new size or time), so entries
    built by the old one are not reused. No process is started.

    Raises
    ------
    CompileError
        When there is no gcc on ``PATH``.
    """
    real = os.path.realpath(_gcc())
    st = os.stat(real)
    return _identity(real, st.st_size, st.st_mtime_ns)


def _kill(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    for proc in procs:
        proc.wait()


def _run_all(commands: list[tuple[list[str], int]], cwd: Path, timeout: float) -> None:
    """Run `commands` (each with its weight: instructions) to completion, all within `timeout` seconds.

    The heaviest start first; more run at once while their weights total at
    most `PARALLEL_INSTRUCTIONS` (one runs alone whatever its weight), up to
    `MAX_JOBS` and the CPUs.

    Raises
    ------
    CompileError
        A command that fails (with the first error line) or the time running out.
    """
    deadline = time.monotonic() + timeout
    pending = sorted(commands, key=lambda c: -c[1])
    running: list[tuple[subprocess.Popen[bytes], Path, int]] = []
    jobs = max(1, min(MAX_JOBS, os.cpu_count() or 1))
    try:
        while pending or running:
            while pending and len(running) < jobs and (
                    not running or sum(r[2] for r in running) + pending[0][1] <= PARALLEL_INSTRUCTIONS):
                cmd, weight = pending.pop(0)
                log = cwd / f"{len(pending)}.log"
                with open(log, "wb") as err:
                    running.append((subprocess.Popen(cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=err,
                                                     stderr=subprocess.STDOUT, start_new_session=True), log, weight))
            for proc, log, weight in list(running):
                if proc.poll() is None:
                    continue
                running.remove((proc, log, weight))
                if proc.returncode != 0:
                    text = log.read_text(encoding="utf-8", errors="replace")
                    lines = [line for line in text.splitlines() if "error" in line.lower()] or text.splitlines()
                    first = lines[0].strip()[:200] if lines else f"exit status {proc.returncode}"
                    raise CompileError(f"gcc failed on the NLP's C: {first}")
            if time.monotonic() > deadline:
                raise CompileError(f"gcc timed out after {timeout:g} s compiling the NLP (killed; "
                                   f"SHOOTING_TOOL_TIMEOUT sets the limit)")
            time.sleep(0.01)
    finally:  # an error, a timeout or Ctrl-C: no compiler outlives the call
        _kill([proc for proc, _, _ in running])


def _version(gcc: str) -> str:
    try:
        out = subprocess.run([gcc, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return gcc
    return (out.stdout.splitlines() or [gcc])[0]


def compile_library(functions: Mapping[str, ca.Function], library: Path) -> str:
    """Generate C for each Function and compile them all into the shared library `library`.

    Parameters
    ----------
    functions : mapping of str to casadi.Function
        The library's symbols: each Function is exported under the key's
        name (``casadi.external(name, library)`` loads it).
    library : pathlib.Path
        The ``.so`` to write; its folder holds the C and object files
        meanwhile (deleted afterwards).

    Returns
    -------
    str
        The compiler's version line and the flags, for the record.

    Raises
    ------
    CompileError
        No gcc, a compile error, or the time limit.
    """
    gcc = _gcc()
    folder = library.parent
    sources: list[tuple[str, int]] = []
    for i, (name, fn) in enumerate(functions.items()):
        source = f"f{i}.c"
        gen = ca.CodeGenerator(source, {"with_header": False})
        assert fn.name() == name, f"{fn.name()} exported as {name}"  # the symbol CasADi's solvers look up
        gen.add(fn)
        gen.generate(str(folder) + os.sep)
        sources.append((source, instructions(fn)))
    timeout = _timeout()
    start = time.monotonic()
    _run_all([([gcc, "-c", *NLP_CFLAGS, *(["-O0"] if n > O1_LIMIT else []), s, "-o", s[:-2] + ".o"], n)
              for s, n in sources], folder, timeout)
    objects = [s[:-2] + ".o" for s, _ in sources]
    _run_all([([gcc, "-shared", *NLP_CFLAGS, *objects, "-o", library.name, "-lm"], 0)], folder,
             max(1.0, timeout - (time.monotonic() - start)))
    for name in (*(s for s, _ in sources), *objects, *(p.name for p in folder.glob("*.log"))):
        with contextlib.suppress(OSError):
            (folder / name).unlink()
    return f"{_version(gcc)} {' '.join(NLP_CFLAGS)}"

