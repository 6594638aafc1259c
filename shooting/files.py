"""Safe output: files and directories are written beside the target, then renamed into place.

A reader never sees a half-written file, a failure leaves nothing behind,
and the result has the usual permissions (0o666 minus the umask; mkstemp's
own 0o600 would make it private).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["check_destination", "install_directory", "umask", "write_atomic"]


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


def check_destination(out: str | os.PathLike[str], names: Iterable[str], owned: Iterable[str], *,
                      force: bool = False) -> None:
    """Raise ValueError unless `install_directory` may write `names` into `out`.

    `out` may be missing, empty, or hold only files in `owned` (written by an
    earlier run of ours); a directory of other files is refused unless
    `force`, and even then none of them is ever overwritten.

    Parameters
    ----------
    out : str or path
    names : iterable of str
        The file names about to be written.
    owned : iterable of str
        The names in `out` that an earlier run of ours wrote.
    force : bool
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"output {out} is a file, not a directory: choose another --out")
    if not out.is_dir():
        return
    foreign = {p.name for p in out.iterdir()} - set(owned)
    if foreign and not force:
        raise ValueError(
            f"output directory {out} is not empty and was not written by shooting "
            f"({len(foreign)} other file(s), e.g. {sorted(foreign)[0]}): choose an empty or new --out, "
            f"or pass --force to add our files beside them"
        )
    clobbered = sorted(foreign & set(names))
    if clobbered:
        raise ValueError(f"refusing to overwrite {out / clobbered[0]}, which shooting did not write")


def install_directory(out: str | os.PathLike[str], write: Callable[[Path], None], names: Iterable[str],
                      owned: Iterable[str], *, force: bool = False) -> Path:
    """Let ``write(tmp)`` fill a temporary directory beside `out`, then move its files into `out`.

    A missing `out` is created by one rename of the finished directory; an
    existing one (see `check_destination`) receives the files one rename each.
    Nothing is left behind on failure.

    Returns
    -------
    Path
        `out`.
    """
    out = Path(out)
    names = set(names)
    check_destination(out, names, owned, force=force)
    parent = out.parent if out.parent != Path("") else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    os.chmod(tmp, 0o777 & ~umask())  # mkdtemp makes it private (0700)
    try:
        write(tmp)
        if not out.exists():
            os.replace(tmp, out)
            return out
        for path in tmp.iterdir():
            os.replace(path, out / path.name)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out
