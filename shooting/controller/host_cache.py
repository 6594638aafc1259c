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
    interrupted,
    name_by_checksum,
    publish,
    sweep,
    write_record,
)
from shooting._tools import compile_host, first_error_line
from shooting.codegen.host_library import build_shared_library

__all__ = ["CACHE_ENV", "CACHE_FORMAT", "controller_library"]

#: The format of an entry (a change of the layout or the shim's contract bumps it).
CACHE_FORMAT = 1
#: Environment variable: "0" (or "false", "no", "off") compiles every load afresh.
CACHE_ENV = "SHOOTING_CONTROLLER_CACHE"
_PREFIX = "controller"


def _enabled() -> bool:
    return os.environ.get(CACHE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _key(sources: dict[str, str], flags: tuple[str, ...]) -> str:
    from shooting.mpc.nlp_compile import compiler_identity  # (gcc's path, size and time: no process started)

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
    `work`.

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
            root = cache_dir() / "controller"
            key = _key(sources, flags)
            entry = root / key
            if entry.exists():
                try:
                    check_entry(root, entry, key=key, fmt=CACHE_FORMAT, prefix=_PREFIX)
                except ValueError:
                    discard(entry)  # (altered, truncated, not ours: built again)
            if not entry.exists():
                _build_entry(root, entry, key, sources, compiled, flags)
            _, library = check_entry(root, entry, key=key, fmt=CACHE_FORMAT, prefix=_PREFIX)
            shutil.copyfile(library, target)
            return ctypes.CDLL(os.fspath(target.resolve()))
        except (OSError, ValueError) as err:
            if isinstance(err, ValueError) and str(err).startswith("gcc failed"):
                raise  # (the C itself: no other build would compile it)
        except Exception as err:  # noqa: BLE001 - any fault of the cache means: build without it
            if interrupted(err):
                raise
    for name, text in sources.items():  # without the cache: built where it is loaded
        (work / name).write_text(text, encoding="utf-8")
    return build_shared_library([work / name for name in compiled], target, opt="-O2",
                                extra_flags=(f"-I{work.resolve()}", *flags))


def _build_entry(root: Path, entry: Path, key: str, sources: dict[str, str], compiled: tuple[str, ...],
                 flags: tuple[str, ...]) -> None:
    """Compile into a private folder beside `entry`, record it and publish it (a concurrent build's entry wins)."""
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
        publish(tmp, entry, lambda e: check_entry(root, e, key=key, fmt=CACHE_FORMAT, prefix=_PREFIX))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
