"""Generated C as a shared library in this process (ctypes), for software in the loop.

`build_shared_library` compiles C sources with the host gcc and the strict
flags of `shooting.codegen.toolchain` (plus ``-shared -fPIC``) and loads the
result; a compile error is a `ValueError` naming the first error line.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shooting.codegen import toolchain
from shooting.options import Real

__all__ = ["build_shared_library", "c_array", "real_ctype", "real_dtype"]


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
    shooting.codegen.toolchain.ToolchainError
        gcc is missing or hangs.
    """
    flags = ("-shared", "-fPIC", *(f"-D{d}" for d in defines), *extra_flags)
    result = toolchain.compile_host([Path(s) for s in sources], Path(output), extra_flags=flags, opt=opt)
    if not result.ok:
        raise ValueError(f"gcc failed building {Path(output).name}: {toolchain.first_error_line(result.stderr)}")
    return ctypes.CDLL(os.fspath(Path(output).resolve()))
