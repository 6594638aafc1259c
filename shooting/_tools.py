"""External tools on this machine: finding them, running them safely, and gcc building C for the host.

Generic helpers (standard library, numpy and ctypes only) of every layer that
compiles C: the QP solver's host library (`shooting.qp.host`), the RTI's
cached library (`shooting.mpc.rti_library`), the integrator's and the
controller's exports (`shooting.codegen`, which re-exports these names from
`shooting.codegen.toolchain` and `shooting.codegen.host_library`, their first
homes).

- `find_tool`, `run_tool`: a tool on ``PATH`` (a missing one raises
  `ToolchainError` naming the Debian package), run in its own process group
  and killed with its children on a timeout or Ctrl-C.
- `compile_host`: ``gcc`` with strict warnings (`HOST_CFLAGS`).
- `build_shared_library`: C sources into a shared library, loaded with ctypes;
  `c_array`, `real_ctype`, `real_dtype` for calling it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shooting import _validate
from shooting.options import Real

__all__ = [
    "ARM_PACKAGES",
    "HOST_CFLAGS",
    "CompileResult",
    "ToolchainError",
    "build_shared_library",
    "c_array",
    "compile_host",
    "find_tool",
    "first_error_line",
    "have_host_compiler",
    "kill_group",
    "real_ctype",
    "real_dtype",
    "run_tool",
    "tool_timeout",
]

#: Host compiler flags: strict C99, every warning an error.
HOST_CFLAGS = ("-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror")

#: Debian packages of the Cortex-M4 cross compiler and its C library.
ARM_PACKAGES = "gcc-arm-none-eabi libnewlib-arm-none-eabi"

#: Debian/Ubuntu packages that provide each tool.
_APT_PACKAGES = {
    "gcc": "gcc",
    "nm": "binutils",
    "arm-none-eabi-gcc": ARM_PACKAGES,
    "arm-none-eabi-size": "binutils-arm-none-eabi",
    "arm-none-eabi-nm": "binutils-arm-none-eabi",
    "qemu-system-arm": "qemu-system-arm",
}


class ToolchainError(Exception):
    """A compiler or the emulator is missing, failed to build, or timed out.

    The first line of the message names the tool and, for a missing tool,
    the ``apt-get install`` command that provides it.
    """


def find_tool(name: str) -> str:
    """Return the path of an executable on ``PATH``.

    Parameters
    ----------
    name : str
        Executable name, e.g. ``"arm-none-eabi-gcc"``.

    Returns
    -------
    str
        Absolute path of the executable.

    Raises
    ------
    ToolchainError
        If it is not on ``PATH``; the message names the package to install.
    """
    path = shutil.which(name)
    if path is None:
        package = _APT_PACKAGES.get(name)
        fix = f"apt-get install {package}" if package else "install it and put it on PATH"
        raise ToolchainError(f"{name} not found: {fix}")
    return path


def tool_timeout(default: float) -> float:
    """Seconds a tool may run: `default`, or ``SHOOTING_TOOL_TIMEOUT`` (see `shooting._validate.tool_timeout`)."""
    return _validate.tool_timeout(os.environ.get("SHOOTING_TOOL_TIMEOUT", ""), default)


# Lines of compiler output that are headers or context, not the error itself.
_NOISE = re.compile(r"(Assembler messages:|In function|In file included from|At top level:|compilation terminated"
                    r"|^\s*\||^\s*\d+\s*\||^\s*\^|: note: |^\s*$)")


def first_error_line(text: str) -> str:
    """The first line of tool output that says what went wrong (an ``error:`` line if there is one)."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not _NOISE.search(line)]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no diagnostics"])[0]


def run_tool(cmd: list[str], tool: str, timeout: float, cwd: Path | None = None,
             step: str = "") -> subprocess.CompletedProcess[str]:
    """Run a command to completion in its own process group, turning launch failures and timeouts into `ToolchainError`.

    On a timeout the whole process group is killed (a compiler driver's
    ``cc1`` or ``as`` would otherwise run on as an orphan).

    Parameters
    ----------
    cmd : list of str
    tool : str
        The tool's name for messages.
    timeout : float
        Seconds (``SHOOTING_TOOL_TIMEOUT`` in the environment overrides it).
    cwd : pathlib.Path, optional
    step : str, optional
        What the tool was doing, for messages (``"compiling the check harness"``).

    Returns
    -------
    subprocess.CompletedProcess
    """
    timeout = tool_timeout(timeout)
    doing = f" {step}" if step else ""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        raise ToolchainError(f"{tool} could not be started{doing}: {exc.strerror or exc}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as exc:  # a timeout, or Ctrl-C: no child may outlive us
        kill_group(proc)
        if isinstance(exc, subprocess.TimeoutExpired):
            raise ToolchainError(f"{tool} timed out{doing} after {timeout:g} s (killed with its child "
                                 f"processes)") from None
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


#: How long a killed process group may take to be gone (a loaded machine schedules the dying late).
GROUP_EXIT_WAIT = 5.0


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """Kill `proc`, started with ``start_new_session=True``, with its whole process group, and wait until
    they are gone.

    SIGKILL reaches each member when it next runs; the leader is reaped here
    (its pipes drained), an orphaned ``cc1`` or ``as`` by init after it dies,
    so the group is polled until empty (at most `GROUP_EXIT_WAIT` s: a loaded
    machine schedules the dying late).

    Parameters
    ----------
    proc : subprocess.Popen
        The group's leader (its pid is the group id).
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    deadline = time.monotonic() + GROUP_EXIT_WAIT
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.01)


# --------------------------------------------------------------------------- availability


def have_host_compiler() -> bool:
    """Whether a host C compiler (``gcc``) is on ``PATH``.

    Returns
    -------
    bool
    """
    return shutil.which("gcc") is not None


# --------------------------------------------------------------------------- host


@dataclass(frozen=True)
class CompileResult:
    """Outcome of one compiler invocation.

    Attributes
    ----------
    ok : bool
        The compiler exited with status 0 (warnings may still be in `stderr`).
    command : list of str
        The command line that was run.
    stderr : str
        The compiler's diagnostics.
    seconds : float
        Wall-clock time of the compilation.
    """

    ok: bool
    command: list[str]
    stderr: str
    seconds: float

    @property
    def warnings(self) -> list[str]:
        """Lines of `stderr` that are compiler warnings (``...: warning: ...``)."""
        return [line for line in self.stderr.splitlines() if ": warning: " in line]


def compile_host(
    sources: list[Path],
    output: Path,
    *,
    extra_flags: tuple[str, ...] = (),
    link: bool = True,
    opt: str = "-O2",
) -> CompileResult:
    """Compile C sources with the host ``gcc`` and `HOST_CFLAGS` (warnings are errors).

    Parameters
    ----------
    sources : list of pathlib.Path
        C files; exactly one when ``link`` is false.
    output : pathlib.Path
        Executable (``link=True``, linked with ``-lm``) or object file
        (``link=False``, compiled with ``-c``). Its folder is created.
    extra_flags : tuple of str, optional
        Appended after `HOST_CFLAGS` and ``opt`` (e.g. ``-I`` folders, ``-D``).
    link : bool, optional
        Produce an executable (default) or an object file.
    opt : str, optional
        Optimisation flag, default ``"-O2"``.

    Returns
    -------
    CompileResult
        ``ok`` is false on a compile error, with the diagnostics in ``stderr``;
        compile errors never raise.

    Raises
    ------
    ToolchainError
        If ``gcc`` is missing or does not finish within 10 minutes.
    ValueError
        If ``link`` is false and there is not exactly one source.
    """
    sources = [Path(s) for s in sources]
    if not link and len(sources) != 1:
        raise ValueError(f"compile_host(link=False) takes exactly one source, got {len(sources)}")
    gcc = find_tool("gcc")
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    cmd = [gcc, *HOST_CFLAGS, opt, *extra_flags]
    if link:
        cmd += [*map(str, sources), "-o", str(output), "-lm"]
    else:
        cmd += ["-c", str(sources[0]), "-o", str(output)]
    start = time.perf_counter()
    proc = run_tool(cmd, "gcc", timeout=600.0, step=f"compiling {sources[0].name}")
    ok = proc.returncode == 0
    stderr = proc.stderr
    if ok and not output.exists():
        ok, stderr = False, f"gcc: error: exited 0 but wrote no {output.name} (a broken compiler?)\n{stderr}"
    return CompileResult(ok, cmd, stderr, time.perf_counter() - start)


# --------------------------------------------------------------------------- ctypes


def real_dtype(real: Real) -> type[np.floating]:
    """The numpy type of a C real: float64 for "double", float32 for "float"."""
    return np.float64 if real == "double" else np.float32


def real_ctype(real: Real) -> type[ctypes.c_double] | type[ctypes.c_float]:
    """The ctypes type of a C real."""
    return ctypes.c_double if real == "double" else ctypes.c_float


def c_array(values: npt.ArrayLike, real: Real, n: int | None = None) -> npt.NDArray[np.floating]:
    """A contiguous copy in the C real type (at least one element, so that it has an address).

    Always a copy: the C may write into it, and the caller's array (a warm start, a guess) must not change.
    """
    arr = np.array(values, dtype=real_dtype(real), order="C", copy=True).reshape(-1)
    if n is not None and arr.size != n:
        raise ValueError(f"expected {n} values, got {arr.size}")
    return arr if arr.size else np.zeros(1, dtype=real_dtype(real))


def build_shared_library(sources: list[Path], output: Path, *, defines: tuple[str, ...] = (),
                         extra_flags: tuple[str, ...] = (), opt: str = "-O2") -> ctypes.CDLL:
    """Compile `sources` into the shared library `output` (gcc `opt` -shared -fPIC, warnings are errors) and load it.

    Parameters
    ----------
    sources : list of pathlib.Path
    output : pathlib.Path
        The ``.so`` to write (its folder is created).
    defines : tuple of str, optional
        ``-D`` definitions without the ``-D``.
    extra_flags : tuple of str, optional
    opt : str, optional
        The optimisation flag (default ``-O2``).

    Returns
    -------
    ctypes.CDLL

    Raises
    ------
    ValueError
        The C does not compile (first error line).
    ToolchainError
        gcc is missing or hangs.
    """
    flags = ("-shared", "-fPIC", *(f"-D{d}" for d in defines), *extra_flags)
    result = compile_host([Path(s) for s in sources], Path(output), extra_flags=flags, opt=opt)
    if not result.ok:
        raise ValueError(f"gcc failed building {Path(output).name}: {first_error_line(result.stderr)}")
    return ctypes.CDLL(os.fspath(Path(output).resolve()))
