"""Entries of the per-user cache of compiled libraries: where it is, what may be loaded, atomic publication.

An entry is a directory ``<cache>/<kind>/<key>/`` (``<key>`` the SHA-256 of
everything that determines the code) holding one shared library named after
its own checksum, ``<prefix>-<sha256[:16]>.so``, and ``entry.json`` recording
the format, the key, the library's name, size and SHA-256. Entries are built
in a private temporary directory beside them and renamed into place whole
(`publish`); a faulty one is renamed aside before it is deleted (`discard`),
so no process ever sees half an entry. Before anything is loaded, `check_entry`
verifies the owner and permissions (nothing writable by others), the record,
and the library's size and checksum, raising `ValueError` with the fault.

Used by the compiled NLP (`shooting.mpc.nlp_cache`, kind ``nlp``) and the
RTI's compiled QP (`shooting.mpc.rti_library`, kind ``rti``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["CACHE_DIR_ENV", "cache_dir", "check_entry", "discard", "interrupted", "name_by_checksum", "publish",
           "sha256_file", "sweep", "untrusted", "write_record"]

#: Environment variable naming the cache directory (overrides the XDG location).
CACHE_DIR_ENV = "SHOOTING_CACHE_DIR"


def cache_dir() -> Path:
    """The per-user cache directory of `shooting`.

    ``$SHOOTING_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/shooting`` (an
    absolute ``XDG_CACHE_HOME``), else ``~/.cache/shooting``. Compiled NLPs
    live in its ``nlp/`` folder, the RTI's compiled QPs in ``rti/``.

    Returns
    -------
    pathlib.Path
    """
    override = os.environ.get(CACHE_DIR_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "shooting"
    return Path.home() / ".cache" / "shooting"


def interrupted(err: BaseException) -> bool:
    """Whether a KeyboardInterrupt is in `err`'s cause/context chain (a Ctrl-C that surfaced through CasADi)."""
    seen: set[int] = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


def untrusted(path: Path) -> str | None:
    """Why `path` is not safe to load code from (not ours, or writable by others); None if it is."""
    if os.name != "posix":
        return None
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to another user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by other users"
    return None


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_entry(root: Path, entry: Path, *, key: str, fmt: int, prefix: str) -> tuple[dict[str, Any], Path]:
    """The entry's record and library, after checking ownership, the record, size and checksum.

    Parameters
    ----------
    root : pathlib.Path
        The kind's folder (``<cache>/nlp``).
    entry : pathlib.Path
        The entry's folder.
    key : str
        The key the record must name.
    fmt : int
        The cache format the record must name.
    prefix : str
        The library's name before ``-<sha256[:16]>.so``.

    Returns
    -------
    record : dict
    library : pathlib.Path

    Raises
    ------
    ValueError
        Naming the fault: a missing or untrusted file, a record of another key or format, a size or
        checksum that differs from the record's.
    """
    for path in (root, entry, entry / "entry.json"):
        if not path.exists():
            raise ValueError(f"{path.name} missing from the cache entry")
        if (why := untrusted(path)) is not None:
            raise ValueError(f"untrusted cache entry: {why}")
    try:
        record = json.loads((entry / "entry.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"unreadable entry.json ({type(err).__name__})") from None
    if not isinstance(record, dict) or record.get("format") != fmt or record.get("key") != key:
        raise ValueError("entry.json belongs to another key or format")
    sha = record.get("sha256")
    if not isinstance(sha, str) or len(sha) != 64 or record.get("library") != f"{prefix}-{sha[:16]}.so":
        raise ValueError("entry.json names no library")
    library = entry / record["library"]
    if not library.exists():
        raise ValueError(f"{library.name} missing from the cache entry")
    if (why := untrusted(library)) is not None:
        raise ValueError(f"untrusted cache entry: {why}")
    size = library.stat().st_size
    if size != record.get("size"):
        raise ValueError(f"library size {size} differs from the recorded {record.get('size')} (truncated?)")
    if sha256_file(library) != sha:
        raise ValueError("library checksum differs from the recorded one (altered?)")
    return record, library


def name_by_checksum(built: Path, prefix: str) -> tuple[Path, str]:
    """Rename the library `built` after its checksum, ``<prefix>-<sha256[:16]>.so`` beside it, mode 0o755.

    A process that loaded a faulty library and rebuilt it loads the new one
    under another name, not the faulty one the dynamic loader keeps.

    Returns
    -------
    path : pathlib.Path
    sha256 : str
    """
    sha = sha256_file(built)
    path = built.parent / f"{prefix}-{sha[:16]}.so"
    os.rename(built, path)
    os.chmod(path, 0o755)  # whatever the umask: an entry writable by others is never loaded
    return path, sha


def write_record(library: Path, sha: str, *, key: str, fmt: int, extra: dict[str, Any]) -> None:
    """Record `library` (named by `name_by_checksum`) in ``entry.json`` beside it, with `extra` fields."""
    record = {"format": fmt, "key": key, "library": library.name, "size": library.stat().st_size, "sha256": sha,
              **extra, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (library.parent / "entry.json").write_text(json.dumps(record, indent=1), encoding="utf-8")
    os.chmod(library.parent / "entry.json", 0o644)


def publish(tmp: Path, entry: Path, check: Callable[[Path], object]) -> Path | None:
    """Rename `tmp` to `entry`; if a valid entry is already there (a concurrent build), use that one.

    Parameters
    ----------
    tmp : pathlib.Path
        The built entry, beside `entry`.
    entry : pathlib.Path
    check : callable
        ``check(entry)`` raises when an entry found in place is faulty (it is then discarded and replaced).

    Returns
    -------
    pathlib.Path or None
        `entry`, or None when it cannot be published (the caller then uses `tmp`).
    """
    for _ in range(3):
        with contextlib.suppress(OSError):
            os.rename(tmp, entry)
            return entry
        if not entry.exists():
            return None  # the rename failed for another reason (permissions, ...)
        try:
            check(entry)
            return entry  # a concurrent process won the race with the same key
        except Exception as err:  # noqa: BLE001 - the faulty entry this build replaces
            if interrupted(err):
                raise
            discard(entry)  # moved aside, then replaced
    return None


def sweep(root: Path) -> None:
    """Delete what killed processes left in `root`: temporary builds older than a day (no build runs that long)."""
    old = time.time() - 86400
    for path in root.glob(".t*-*"):
        with contextlib.suppress(OSError):
            if path.name.startswith((".tmp-", ".trash-")) and path.lstat().st_mtime < old:
                shutil.rmtree(path, ignore_errors=True)


def discard(entry: Path) -> None:
    """Remove a faulty entry: renamed aside first (beside it), so no process ever sees it half-deleted."""
    with contextlib.suppress(OSError):
        aside = Path(tempfile.mkdtemp(prefix=".trash-", dir=entry.parent))
        os.rename(entry, aside / "entry")
        shutil.rmtree(aside, ignore_errors=True)
