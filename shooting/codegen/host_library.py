"""Generated C as a shared library in this process (ctypes), for software in the loop.

`build_shared_library` compiles C sources with the host gcc and the strict
flags of `shooting.codegen.toolchain` (plus ``-shared -fPIC``) and loads the
result; a compile error is a `ValueError` naming the first error line. These
helpers live in the foundation module `shooting._tools` (the qp and mpc
layers build host libraries too) and are re-exported here, their first home.
"""

from __future__ import annotations

from shooting._tools import build_shared_library, c_array, real_ctype, real_dtype

__all__ = ["build_shared_library", "c_array", "real_ctype", "real_dtype"]
