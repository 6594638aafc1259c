"""Atomic file output: a temporary file beside the target, then one rename.

A reader never sees a half-written file, a failure leaves nothing behind,
and the result has the usual permissions (0o666 minus the umask; mkstemp's
own 0o600 would make it private).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["umask", "write_atomic"]


def umask() -> int:
    """The process umask (read without changing it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` atomically; create the parent directory if needed.

    Parameters
    ----------
    path : str or path
    data : bytes

    Returns
    -------
    Path
        `path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
