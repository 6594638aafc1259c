"""Safe output: files and directories are written beside the target, then renamed into place.

A reader never sees a half-written file, a failure leaves nothing behind,
and the result has the usual permissions (0o666 minus the umask; mkstemp's
own 0o600 would make it private). A set of files we write into a directory
is described by a JSON record among them (``manifest.json``,
``summary.json``) whose ``"generator"`` is `GENERATOR` and whose ``"files"``
lists them: `owned_files` reads it back, so a later run may replace those
files and no others.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["GENERATOR", "check_destination", "compact_json", "install_directory", "owned_files", "umask",
           "write_atomic"]

#: The ``"generator"`` entry of every JSON record we write beside our files.
GENERATOR = "shooting"


def compact_json(data: Mapping[str, Any]) -> str:
    """JSON with one top-level key per line and each value compact (rows of numbers stay on one line)."""
    items = [f" {json.dumps(key)}: {json.dumps(value, allow_nan=False)}" for key, value in data.items()]
    return "{\n" + ",\n".join(items) + "\n}\n"


def owned_files(directory: str | os.PathLike[str], record: str,
                legacy: Callable[[dict[str, Any]], Iterable[str]] | None = None) -> set[str]:
    """The files an earlier run of ours wrote into `directory`, from its JSON `record`.

    Parameters
    ----------
    directory : str or path
    record : str
        The record's file name (``"manifest.json"``); it is owned too.
    legacy : callable, optional
        Names for a record without a ``"files"`` list (older versions).

    Returns
    -------
    set of str
        Empty when the record is missing, unreadable or not ours.
    """
    try:
        data = json.loads((Path(directory) / record).read_text())
    except (OSError, ValueError):
        return set()
    if not isinstance(data, dict) or data.get("generator") != GENERATOR:
        return set()
    listed = data.get("files")
    if isinstance(listed, list):
        names = {str(f) for f in listed if isinstance(f, str) and "/" not in f and f not in (".", "..")}
    elif legacy is not None:
        names = set(legacy(data))
    else:
        names = set()
    return names | {record}


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
