"""Safe output: a set of files appears in its directory all together or not at all.

A set of files we write into a directory is described by a JSON record among
them (``manifest.json``, ``summary.json``) whose ``"generator"`` is
`GENERATOR` and whose ``"files"`` lists them: `owned_files` reads it back, so a
later run may replace those files and no others. Files we did not write are
never overwritten or deleted.

`install_directory` builds the files in a staging directory on the same
filesystem as the destination (beside a missing one, inside an existing one,
so a mount point works too), then

* a missing destination is created by one rename of the staging directory;
* an existing one is locked (``flock`` on the directory: concurrent runs
  into the same directory are serialised, the later one wins), a journal
  naming the files is written, the files are renamed into place one by one
  (the record last), the files of our earlier set that the new one does not
  have are deleted, and the journal is removed. An interrupt during these
  steps finishes them before it is re-raised; a killed process leaves the
  journal, and the next install (or `recover`) completes them before
  anything else. Either way no reader is left with a record that describes
  other files, and the directory ends with the new set.

A new set replaces our earlier one (the files its record lists), also under
another name or of another kind (a controller over an integrator export):
the directory then holds one set, which its record describes, and the next
run into it is accepted. Keeping the earlier files and listing them in the
new record instead would make the record describe files that belong to
another export (its Makefile and header overwritten, its manifest gone).
Only files an earlier record of ours lists are deleted, never others.

A file named with `RESUME_PREFIX` is a run's record of its progress (a
sweep's journal of finished cases, kept for ``--resume`` when it is
interrupted): an install neither counts it as another's file nor touches it;
the run that wrote it removes it when it has installed its output.

Files get the usual permissions (0o666 minus the umask; mkstemp's own 0o600
would make them private). Every OS error becomes a ValueError naming the path.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from shooting import _interrupt

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock, the journal still protects a single run
    fcntl = None  # type: ignore[assignment]

__all__ = ["GENERATOR", "JOURNAL", "MAX_RECORD_BYTES", "RESUME_PREFIX", "STAGE_PREFIX", "check_destination",
           "compact_json", "install_directory", "owned_files", "read_record", "recover", "umask", "write_atomic"]

#: The ``"generator"`` entry of every JSON record we write beside our files.
GENERATOR = "shooting"
#: Names of our transient entries in a destination directory.
JOURNAL = ".shooting-journal.json"
STAGE_PREFIX = ".shooting-stage-"
#: Files a run keeps in its destination while it works, for a later run to resume from (a sweep's finished
#: cases): ours, never installed, replaced or deleted by an install, and not counted as other files.
RESUME_PREFIX = ".shooting-resume-"

Legacy = Callable[[dict[str, Any]], Iterable[str]]


def compact_json(data: Mapping[str, Any]) -> str:
    """JSON with one top-level key per line and each value compact (rows of numbers stay on one line)."""
    items = [f" {json.dumps(key)}: {json.dumps(value, allow_nan=False)}" for key, value in data.items()]
    return "{\n" + ",\n".join(items) + "\n}\n"


#: Largest JSON record we read back (a manifest with a big tableau is well below 1 MiB).
MAX_RECORD_BYTES = 16 * 1024 * 1024


def read_record(path: str | os.PathLike[str]) -> object:
    """The JSON in the file `path`, read with bounds: a ValueError for anything that is not small, sane JSON.

    Parameters
    ----------
    path : str or path

    Returns
    -------
    object
        The parsed JSON (any JSON value: check its structure with `shooting._validate.record`).

    Raises
    ------
    ValueError
        A missing file or not a regular file, one larger than
        `MAX_RECORD_BYTES`, unreadable, not UTF-8, not JSON, or nested
        deeper than the parser's recursion allows.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} is missing or not a regular file")
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_RECORD_BYTES + 1)
    except OSError as err:
        raise ValueError(f"{path} cannot be read: {err.strerror or err}") from None
    if len(raw) > MAX_RECORD_BYTES:
        raise ValueError(f"{path} is larger than {MAX_RECORD_BYTES // (1024 * 1024)} MiB")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None
    except RecursionError:
        raise ValueError(f"{path} nests arrays or objects deeper than a JSON parser allows") from None


def owned_files(directory: str | os.PathLike[str], record: str, legacy: Legacy | None = None) -> set[str]:
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
        data = read_record(Path(directory) / record)
    except ValueError:
        return set()
    if not isinstance(data, dict) or data.get("generator") != GENERATOR:
        return set()
    listed = data.get("files")
    if isinstance(listed, list):
        names = {str(f) for f in listed if isinstance(f, str) and ("/" not in f or _nested(f)) and
                 f not in (".", "..")}
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


@contextlib.contextmanager
def _os_errors(path: Path, doing: str) -> Iterator[None]:
    """Turn an OSError into a one-line ValueError naming `path`."""
    try:
        yield
    except OSError as err:
        reason = err.strerror or str(err)
        if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            reason += " (read-only, immutable or not yours)"
        raise ValueError(f"cannot {doing} {path}: {reason}: choose another output location") from None


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

    Raises
    ------
    ValueError
        `path` is a directory, or cannot be written.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a directory: give a file name inside it, e.g. {path / 'out.png'}")
    with _os_errors(path, "write"):
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


def _transient(name: str) -> bool:
    return name == JOURNAL or name.startswith((STAGE_PREFIX, RESUME_PREFIX))


def check_destination(out: str | os.PathLike[str], names: Iterable[str], record: str, *, force: bool = False,
                      legacy: Legacy | None = None) -> None:
    """Raise ValueError unless `install_directory` may write `names` into `out`.

    `out` may be missing (its nearest existing ancestor must be a directory),
    empty, or hold only files of an earlier run of ours (named by its
    `record`); a directory of other files is refused unless `force`, and even
    then none of them is ever overwritten.

    Parameters
    ----------
    out : str or path
    names : iterable of str
        The file names about to be written.
    record : str
        The name of the JSON record among them.
    force : bool
    legacy : callable, optional
        See `owned_files`.
    """
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise ValueError(f"output {out} is a symbolic link to {os.readlink(out)}, which does not exist: "
                         f"create its target or choose another --out")
    if out.exists() and not out.is_dir():
        raise ValueError(f"output {out} is a file, not a directory: choose another --out")
    if not out.exists():
        ancestor = out.absolute().parent
        while not ancestor.exists():
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise ValueError(f"cannot create {out}: {ancestor} is a file, not a directory")
        return
    with _os_errors(out, "read"):
        present = {p.name for p in out.iterdir() if not _transient(p.name)}
    _, moving, removing = _journal(out)  # an install that was killed: `recover` will finish it
    owned = owned_files(out, record, legacy)
    folders = {n.split("/")[0] for n in owned | set(names) if _nested(n)}  # (our one-level folders: firmware/)
    foreign = present - owned - folders - set(moving) - set(removing)
    if foreign and not force:
        raise ValueError(
            f"output directory {out} is not empty and was not written by shooting "
            f"({len(foreign)} other file(s), e.g. {sorted(foreign)[0]}): choose an empty or new --out, "
            f"or pass --force to add our files beside them"
        )
    clobbered = sorted((foreign & set(names)) | {n for n in names if _nested(n) and n not in owned and
                                                 (out / n).exists()})
    if clobbered:
        raise ValueError(f"refusing to overwrite {out / clobbered[0]}, which shooting did not write")


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive lock on `directory` (flock on its descriptor), held for the block."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _nested(name: str) -> bool:
    """A name one folder deep (``firmware/main.c``): the only nested names we write, move and delete."""
    parts = name.split("/")
    return len(parts) == 2 and all(p and p not in (".", "..") for p in parts)


def _move_all(out: Path, stage: Path, order: list[str]) -> None:
    """Rename ``stage/name`` to ``out/name`` for every name still in `stage`, in `order` (a nested name's folder
    created when missing)."""
    for name in order:
        if (stage / name).exists():
            if _nested(name):
                (out / name).parent.mkdir(exist_ok=True)
            os.replace(stage / name, out / name)


def recover(out: str | os.PathLike[str]) -> None:
    """Finish an install that was killed while moving files into `out` (or deleting the earlier set's).

    Stale staging directories are removed too.

    Call with the directory lock held (`install_directory` does).
    """
    out = Path(out)
    journal = out / JOURNAL
    if journal.exists():
        stage, order, remove = _journal(out)
        if stage is not None and stage.is_dir():
            _move_all(out, stage, order)
        if order and all((out / name).exists() for name in order):  # the new set is whole: the earlier one goes
            _remove_all(out, remove)
        journal.unlink()
    for path in out.iterdir():
        if path.name.startswith(STAGE_PREFIX) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def _remove_all(out: Path, names: Iterable[str]) -> None:
    """Delete ``out/name`` for each name that is still there as a file or a symbolic link (never a directory)."""
    for name in names:
        path = out / name
        if ("/" not in name or _nested(name)) and not _transient(name) and (path.is_symlink() or path.is_file()):
            os.unlink(path)
            if _nested(name):
                with contextlib.suppress(OSError):  # (our folder, once empty; a user's file in it keeps it)
                    path.parent.rmdir()


def _journal(out: Path) -> tuple[Path | None, list[str], list[str]]:
    """The staging directory, the files to move and the files to delete named by `out`'s journal."""
    try:
        data = read_record(out / JOURNAL)
        if not isinstance(data, dict):
            raise ValueError
        stage = str(data["stage"])
        order, remove = [str(n) for n in data["files"]], [str(n) for n in data.get("remove", [])]
    except (ValueError, KeyError, TypeError):
        return None, [], []
    if "/" in stage or not stage.startswith(STAGE_PREFIX):
        return None, [], []
    return out / stage, [n for n in order if "/" not in n], [n for n in remove if "/" not in n]


def _commit(out: Path, stage: Path, names: set[str], record: str, stale: set[str]) -> None:
    """Move the staged files into `out` under a journal, the record last, then delete our `stale` files."""
    order = sorted(names - {record}) + ([record] if record in names else [])
    remove = sorted(stale - names)
    # The journal is written in the staging directory and renamed into place:
    # a kill at any instant leaves no temporary file of ours among the user's.
    (stage / JOURNAL).write_text(json.dumps({"stage": stage.name, "files": order, "remove": remove}))
    os.replace(stage / JOURNAL, out / JOURNAL)
    try:
        with _interrupt.shielded():  # the CLI's Ctrl-C waits for the renames and deletions
            _move_all(out, stage, order)
            _remove_all(out, remove)
            os.unlink(out / JOURNAL)
    except BaseException:
        # Interrupted (Ctrl-C) between renames or deletions: finish them, so
        # the new set is whole, then let the interrupt through. (An OS error
        # here leaves the journal for `recover`.)
        if isinstance(stage, Path) and stage.is_dir():
            with contextlib.suppress(OSError):
                _move_all(out, stage, order)
                _remove_all(out, remove)
                os.unlink(out / JOURNAL)
        raise


@contextlib.contextmanager
def _staging(parent: Path) -> Iterator[Path]:
    """A new staging directory in `parent`, removed when the block ends; no interrupt can leak it."""
    stage: Path | None = None
    try:
        with _os_errors(parent, "write into"), _interrupt.shielded():
            stage = Path(tempfile.mkdtemp(prefix=STAGE_PREFIX, dir=parent))
        yield stage
    finally:
        if stage is not None:
            with _interrupt.shielded():
                shutil.rmtree(stage, ignore_errors=True)


def install_directory(out: str | os.PathLike[str], write: Callable[[Path], None], names: Iterable[str],
                      record: str, *, force: bool = False, legacy: Legacy | None = None) -> Path:
    """Let ``write(stage)`` fill a staging directory, then install its files in `out`, all or nothing.

    Parameters
    ----------
    out : str or path
        The destination directory (created when missing).
    write : callable ``(Path) -> None``
        Writes exactly the files `names` into the directory it is given.
    names : iterable of str
        The new set. Files of our earlier set in `out` (listed by its
        `record`) that are not among them are deleted after the new record
        is in place; no other file is touched.
    record : str
        The JSON record among `names` that lists them (written last).
    force : bool
        Add our files to a directory that holds other files.
    legacy : callable, optional
        See `owned_files`.

    Returns
    -------
    Path
        `out`.

    Raises
    ------
    ValueError
        A refused destination (see `check_destination`) or an OS error
        (read-only, immutable, full), naming the path.
    """
    out = Path(out)
    names = set(names)
    check_destination(out, names, record, force=force, legacy=legacy)
    if not out.exists():
        parent = out.absolute().parent
        with _os_errors(parent, "write into"):
            parent.mkdir(parents=True, exist_ok=True)
        with _staging(parent) as stage:
            os.chmod(stage, 0o777 & ~umask())  # mkdtemp makes it private (0700)
            write(stage)
            try:
                os.rename(stage, out)  # the whole set appears at once
                return out
            except OSError as err:
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR):
                    raise ValueError(f"cannot create {out}: {err.strerror}") from None
            # A concurrent run created `out` meanwhile: install into it like into any existing directory.
            with _os_errors(out, "write into"), _locked(out):
                recover(out)
                check_destination(out, names, record, force=force, legacy=legacy)
                _commit(out, stage, names, record, owned_files(out, record, legacy))
            return out
    with _os_errors(out, "write into"), _locked(out):
        recover(out)
        check_destination(out, names, record, force=force, legacy=legacy)  # again, under the lock
        stale = owned_files(out, record, legacy)  # our earlier set: what the new one does not replace goes
        with _staging(out) as stage:
            write(stage)
            _commit(out, stage, names, record, stale)
    return out
