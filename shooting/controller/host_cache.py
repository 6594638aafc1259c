"""The host build of an exported controller, kept in the per-user cache: a controller loaded again is not compiled
again.

`load_controller` compiles the export's C with a small shim (`shooting.controller.host`) for this machine. The
same files give the same library: the entry's key is the SHA-256 of every source's text, the flags, the compiler's
identity and the platform (`shooting._cache` for the entry's layout, its checks and its atomic publication). An
export checked and then loaded, a sweep's workers, a test that loads one export several times: one compilation.
Every load gets its own copy of the library (in a private folder): a controller's memory is the library's static
instance, and two controllers must not share it.

``SHOOTING_CONTROLLER_CACHE=0`` turns the cache off (every load compiles, as before).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import re
import shutil
import sys
import tempfile
from pathlib import Path

from shooting._cache import (
    cache_dir,
    check_entry,
    discard,
    name_by_checksum,
    publish,
    sweep,
    write_record,
)
from shooting._tools import compile_host, first_error_line
from shooting.codegen.host_library import build_shared_library
from shooting.mpc.nlp_compile import compiler_identity  # (gcc's path, size and time: no process started)

__all__ = ["CACHE_ENV", "CACHE_FORMAT", "controller_library"]

#: The format of an entry (a change of the layout or the shim's contract bumps it).
CACHE_FORMAT = 1
#: Environment variable: "0" (or "false", "no", "off") compiles every load afresh.
CACHE_ENV = "SHOOTING_CONTROLLER_CACHE"
_PREFIX = "controller"


def _enabled() -> bool:
    return os.environ.get(CACHE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _key(sources: dict[str, str], flags: tuple[str, ...]) -> str:
    material = json.dumps({"format": CACHE_FORMAT, "compiler": compiler_identity(), "flags": list(flags),
                           "platform": [sys.platform, platform.machine(), platform.node()]}, sort_keys=True)
    digest = hashlib.sha256(material.encode())
    for name, text in sorted(sources.items()):
        digest.update(f"\0{name}\0".encode())
        digest.update(_code(text).encode())
    return digest.hexdigest()


def _code(text: str) -> str:
    """The C without its comments: the key of what compiles. An export is generated twice, the second time with
    its measurements in the header's comments; the generated C has no ``__LINE__``, ``assert`` or string that holds
    a comment's marks, so the two compile to the same library (measured: byte for byte)."""
    return _COMMENT.sub(" ", text)


_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)


def controller_library(sources: dict[str, str], compiled: tuple[str, ...], flags: tuple[str, ...], work: Path,
                       stem: str) -> ctypes.CDLL:
    """The library of `sources` (file name -> text; `compiled` the ones given to gcc, the others included) built
    with `flags` (``-O2`` and an include path for the sources' folder are added), loaded from a private copy in
    `work`. A cache that cannot be read or written (a file system fault) is passed by: built in `work`.

    Raises
    ------
    ValueError
        The C does not compile (its first error line).
    ToolchainError
        gcc is missing or hangs.
    """
    target = work / f"lib{stem}.so"
    if _enabled():
        try:
            shutil.copyfile(_entry_library(sources, compiled, flags), target)
            return ctypes.CDLL(os.fspath(target.resolve()))
        except OSError:
            pass  # (no usable cache: built where it is loaded)
    for name, text in sources.items():
        (work / name).write_text(text, encoding="utf-8")
    return build_shared_library([work / name for name in compiled], target, opt="-O2",
                                extra_flags=(f"-I{work.resolve()}", *flags))


def _entry_library(sources: dict[str, str], compiled: tuple[str, ...], flags: tuple[str, ...]) -> Path:
    """The cached library of `sources`, checked; an entry missing or faulty (altered, truncated, not ours) is built
    again and published. OSError: the cache cannot be used."""
    root = cache_dir() / "controller"
    key = _key(sources, flags)
    entry = root / key

    def checked(folder: Path) -> Path:
        return check_entry(root, folder, key=key, fmt=CACHE_FORMAT, prefix=_PREFIX)[1]

    if entry.exists():
        try:
            return checked(entry)
        except ValueError:
            discard(entry)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    sweep(root)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    try:
        for name, text in sources.items():
            (tmp / name).write_text(text, encoding="utf-8")
        built = tmp / f"{_PREFIX}.so"
        result = compile_host([tmp / name for name in compiled], built, opt="-O2",
                              extra_flags=("-shared", "-fPIC", f"-I{tmp.resolve()}", *flags))
        if not result.ok:
            raise ValueError(f"gcc failed building {built.name}: {first_error_line(result.stderr)}")
        for name in sources:
            (tmp / name).unlink()
        path, sha = name_by_checksum(built, _PREFIX)
        write_record(path, sha, key=key, fmt=CACHE_FORMAT, extra={"flags": list(flags)})
        if publish(tmp, entry, checked) is None:
            raise OSError(f"the cache entry {entry} cannot be written")
        try:
            return checked(entry)
        except ValueError as err:  # (a concurrent writer's faulty entry, found in place: no cache this time)
            raise OSError(str(err)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
