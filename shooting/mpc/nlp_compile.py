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
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import casadi as ca

from shooting._tools import kill_group

__all__ = ["MAX_INSTRUCTIONS", "NLP_CFLAGS", "CompileError", "compile_library", "compiler_identity", "instructions"]

#: Optimisation of the compiled NLP functions. The cart-pole's Hessian of the
#: Lagrangian evaluates 2.8x faster than in CasADi's SX virtual machine at
#: N = 20 and 40, 1.5x at N = 80 (straight-line code of megabytes runs at
#: the speed of fetching it); -O2 is no faster and compiles 1.5x longer;
#: -O0 is 2x faster at N = 20 but 1.3x slower than the virtual machine at
#: N = 80, so it is never used.
NLP_CFLAGS = ("-O1", "-fPIC")
#: An NLP of more SX instructions (all its functions) is not compiled: gcc
#: -O1 takes 70 us (the cart-pole) to 370 us (the double pendulum, whose
#: register allocation grows with the values alive at once) of CPU and about
#: 4.6 kB of memory per instruction, so up to 3 minutes and 2.3 GB here (the
#: double pendulum's default scenario, 3.3M instructions, ran past 10 minutes
#: and 3 GB before this limit).
MAX_INSTRUCTIONS = 500_000
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
    return f"{path} {size} {mtime_ns} {' '.join(NLP_CFLAGS)}"


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


@dataclass
class _Job:
    """One compiler run: its command, weight (instructions), process and log."""

    cmd: list[str]
    weight: int
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def start(self, cwd: Path, n: int) -> None:
        self.log = cwd / f"{n}.log"
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(self.cmd, cwd=cwd, stdin=subprocess.DEVNULL, stdout=err,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        if self.proc is not None:
            kill_group(self.proc)  # gcc with its cc1 and as, all gone before the folder is removed

    def error(self) -> str:
        assert self.log is not None and self.proc is not None
        text = self.log.read_text(encoding="utf-8", errors="replace")
        lines = [line for line in text.splitlines() if "error" in line.lower()] or text.splitlines()
        return lines[0].strip()[:200] if lines else f"exit status {self.proc.returncode}"


def _run_all(jobs: list[_Job], cwd: Path, timeout: float) -> None:
    """Run `jobs` to completion, all within `timeout` seconds.

    The heaviest start first; more run at once while their weights total at
    most `PARALLEL_INSTRUCTIONS` (one runs alone whatever its weight), up to
    `MAX_JOBS` and the CPUs.

    Raises
    ------
    CompileError
        A command that fails (with the first error line) or the time running out.
    """
    deadline = time.monotonic() + timeout
    pending = sorted(jobs, key=lambda job: -job.weight)
    running: list[_Job] = []
    slots = max(1, min(MAX_JOBS, os.cpu_count() or 1))
    try:
        while pending or running:
            while pending and len(running) < slots and (
                    not running or sum(job.weight for job in running) + pending[0].weight <= PARALLEL_INSTRUCTIONS):
                running.append(pending.pop(0))
                running[-1].start(cwd, len(pending) + len(running))
            for job in list(running):
                assert job.proc is not None
                if job.proc.poll() is None:
                    continue
                running.remove(job)
                if job.proc.returncode != 0:
                    raise CompileError(f"gcc failed on the NLP's C: {job.error()}")
            if time.monotonic() > deadline:
                raise CompileError(f"gcc timed out after {timeout:g} s compiling the NLP (killed; "
                                   f"SHOOTING_TOOL_TIMEOUT sets the limit)")
            time.sleep(0.01)
    finally:  # an error, a timeout or Ctrl-C: no compiler outlives the call
        for job in running:
            job.kill()


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
    _run_all([_Job([gcc, "-c", *NLP_CFLAGS, source, "-o", source[:-2] + ".o"], n) for source, n in sources],
             folder, timeout)
    objects = [s[:-2] + ".o" for s, _ in sources]
    _run_all([_Job([gcc, "-shared", *NLP_CFLAGS, *objects, "-o", library.name, "-lm"], 0)], folder,
             max(1.0, timeout - (time.monotonic() - start)))
    for name in (*(s for s, _ in sources), *objects, *(p.name for p in folder.glob("*.log"))):
        with contextlib.suppress(OSError):
            (folder / name).unlink()
    return f"{_version(gcc)} {' '.join(NLP_CFLAGS)}"

