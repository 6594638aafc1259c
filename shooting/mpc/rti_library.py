"""The RTI's QP compiled once per problem and kept on disk: the default ``RTIController`` runs in C.

One shared library per problem holds the sample's data Function
(`shooting.mpc.rti_data`, CasADi's C of ``rti_qp_data``) and the stage-wise
QP solver (`shooting.qp.host.library_source`: ``templates/ocp_qp.c.in`` as it
reads at run time, the exported controller's solver), built with the host gcc
and the strict flags (`shooting._tools.HOST_CFLAGS`, warnings are errors; in
CasADi's C only its unused parameters are let pass) at ``-O2`` (no
``-march=native``: an entry may be read by another machine sharing the home
folder; under ``-std=c99`` no multiply-add is contracted, so the results are
those of any build and of CasADi's virtual machine).
`StageQPBuilder.attach` then writes each sample's data straight into the
solver's buffers and solves in C: the same numbers as the numpy twin (the
same Function, the same algorithm) to rounding, at the speed of C.

The library is an entry of the per-user cache (`shooting._cache`:
``$SHOOTING_CACHE_DIR``, else ``$XDG_CACHE_HOME/shooting``, else
``~/.cache/shooting``), under ``rti/<key>/``, where ``<key>`` is the SHA-256
of everything that determines the code: both C sources exactly as compiled
(so any weight, horizon, model, tableau, bound structure or template change
is another entry), the compiler (path, size, modification time) and flags,
the platform and this cache's format. A later process building the same
problem checks the entry (owner and permissions, the library's size and
SHA-256), loads it, checks the solver's sizes and evaluates the data
Function once at a fixed point against CasADi's virtual machine; anything
wrong rebuilds the entry. Anything that prevents compiling (no gcc, a
compiler that fails or runs past ``SHOOTING_TOOL_TIMEOUT``, an unwritable
cache) leaves the controller on the numpy twin with one `RTILibraryWarning`;
a stage of more than `shooting.mpc.nlp_compile.MAX_INSTRUCTIONS` SX
instructions is not compiled (minutes of gcc), without a warning.
Entries are published atomically and never modified afterwards; clear the
cache by deleting the directory.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import platform
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import casadi as ca
import numpy as np

from shooting._cache import (
    cache_dir,
    check_entry,
    interrupted,
    name_by_checksum,
    publish,
    sweep,
    write_record,
)
from shooting._tools import HOST_CFLAGS, ToolchainError, compile_host, first_error_line
from shooting.mpc.nlp_compile import MAX_INSTRUCTIONS, CompileError, compiler_identity
from shooting.mpc.rti_data import DataEvaluator
from shooting.mpc.rti_stage import StageQPBuilder
from shooting.qp.host import CompiledStageQP, library_source

__all__ = ["CACHE_FORMAT", "RTI_CFLAGS", "RTI_O2_MAX", "RTI_OPT", "RTILibrary", "RTILibraryReport",
           "RTILibraryWarning", "attach_library", "rti_opt"]

#: Bumped whenever what an entry holds or how it is made changes: old entries are then ignored.
CACHE_FORMAT = 1
#: Beyond `HOST_CFLAGS`: optimisation and position-independent code. -O2 as the exported controller's host
#: build (-O3 measured no faster there); CasADi's C of the data compiles in 0.1 s (cart-pole) to 2.3 s
#: (the stiff chain's Radau IIA step) at -O2, the QP in 0.7 s.
RTI_OPT, RTI_CFLAGS = "-O2", ("-shared", "-fPIC")
#: Sources larger than this (bytes) compile at -O0: gcc's -O2 (and -O1) on a huge straight-line function grows
#: faster than its size. Measured on this machine: the built-ins' data are 21 kB (cart-pole) to 361 kB (the stiff
#: chain, 2.3 s at -O2); do-mpc's polymerisation reactor in grams is 4.5 MB: 159 s at -O2, 137 s at -O1, 23 s at
#: -O0, its RTI sample 25 % slower at -O0 (20 samples: 4.8 s against 3.9 s).
RTI_O2_MAX = 1_000_000


def rti_opt(sources: dict[str, str]) -> str:
    """The optimisation flag the RTI's library compiles `sources` (file name -> C text) with (`RTI_O2_MAX`)."""
    return RTI_OPT if sum(len(text) for text in sources.values()) <= RTI_O2_MAX else "-O0"
#: Prepended to CasADi's C: its generated functions keep parameters they do not use (the only warning
#: `HOST_CFLAGS` raises on it).
_CASADI_PRAGMAS = '#pragma GCC diagnostic ignored "-Wunused-parameter"\n'
# Agreement required between the compiled data Function and CasADi's virtual machine at the probe point:
# the same operations in the same order, so only rounding (none expected) may differ.
_RTOL = 1e-9


class RTILibraryWarning(RuntimeWarning):
    """The RTI's QP could not be compiled or cached: the controller runs its numpy twin."""


@dataclass(frozen=True)
class RTILibraryReport:
    """How an `RTIController`'s compiled QP was obtained.

    Attributes
    ----------
    status : {"hit", "built", "fallback"}
        ``"hit"``: loaded from the cache (nothing compiled); ``"built"``: compiled by this process (and
        published, or a concurrent process's identical entry used); ``"fallback"``: not compiled, the numpy
        twin runs (see `reason`).
    key : str
        The entry's key (SHA-256, hex); empty when it could not be computed.
    path : pathlib.Path or None
        The loaded shared library.
    seconds : float
        Time spent in the cache: generating C, checking and loading, plus compiling when built.
    reason : str
        Why the entry was built (``"no entry"``, ``"library size ... differs ..."``) or why it fell back;
        empty on a hit.
    """

    status: Literal["hit", "built", "fallback"]
    key: str
    path: Path | None
    seconds: float
    reason: str = ""


def _casadi_source(fn: ca.Function) -> str:
    """CasADi's C of `fn` (double, 64-bit integers), as one translation unit."""
    gen = ca.CodeGenerator(f"{fn.name()}.c", {"with_header": False, "casadi_real": "double",
                                             "casadi_int": "long long int"})
    gen.add(fn)
    return _CASADI_PRAGMAS + gen.dump()


class RTILibrary:
    """The cache entry of one RTI problem's compiled QP: its key, loading it, building it.

    Parameters
    ----------
    builder : StageQPBuilder
        The problem (its data Function and the QP's sizes).

    Attributes
    ----------
    report : RTILibraryReport or None
        Filled in by `load` (a hit), `build` or `fallback`.
    """

    def __init__(self, builder: StageQPBuilder) -> None:
        self._t0 = time.perf_counter()
        self.builder = builder
        self.report: RTILibraryReport | None = None
        self._miss = "no entry"
        self.sources: dict[str, str] = {}
        self.key = ""
        self.root = cache_dir() / "rti"

    def _compute_key(self) -> bool:
        """The entry's key; False (with the fallback reported) when there is no usable compiler."""
        try:
            compiler = compiler_identity()
        except CompileError as err:
            self.fallback(str(err))
            return False
        try:
            data = _casadi_source(self.builder.data.function)
        except Exception as err:  # noqa: BLE001 - a Function CasADi cannot generate C for: the numpy twin
            if interrupted(err):
                raise
            self.fallback(f"generating the RTI's C failed: {str(err).strip().splitlines()[-1][:200]}")
            return False
        self.sources = {"qp.c": library_source(self.builder.template.sizes), "data.c": data}
        flags = [*HOST_CFLAGS, rti_opt(self.sources), *RTI_CFLAGS]
        material = json.dumps({"format": CACHE_FORMAT, "compiler": compiler, "flags": flags,
                               "platform": [sys.platform, platform.machine()]}, sort_keys=True)
        digest = hashlib.sha256(material.encode())
        for name, text in sorted(self.sources.items()):
            digest.update(f"\0{name}\0".encode())
            digest.update(text.encode())
        self.key = digest.hexdigest()
        return True

    @property
    def entry(self) -> Path:
        """The entry's directory (``<cache>/rti/<key>``)."""
        return self.root / self.key

    def load(self) -> ctypes.CDLL | None:
        """The library from the cache, checked; None on a miss (see `report`)."""
        if not self._compute_key() or not self.entry.exists():
            return None
        try:
            library = self._open(self.entry)
        except Exception as err:  # noqa: BLE001 - any fault of an entry means: rebuild it
            if interrupted(err):
                raise
            self._miss = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            return None
        self._done("hit", self.entry, "")
        return library

    def _open(self, entry: Path) -> ctypes.CDLL:
        """Load the entry's library after checking it; check the QP's sizes and the data at the probe point."""
        _, path = check_entry(self.root, entry, key=self.key, fmt=CACHE_FORMAT, prefix="rti")
        library = ctypes.CDLL(str(path.resolve()))
        CompiledStageQP(library, self.builder.template)  # (checks the sizes compiled in)
        data = self.builder.data
        fn = data.function
        probe = []
        for name in ("vm", "c"):
            outputs = {out: np.zeros(fn.nnz_out(i)) for i, out in enumerate(data.outputs)}
            evaluate = DataEvaluator(data, outputs, library if name == "c" else None)
            for i, array in enumerate(evaluate.inputs.values()):  # input i, entry k: 0.2 + 0.6 frac(...)
                k = np.arange(array.size, dtype=float)
                array.flat[:] = 0.2 + 0.6 * np.mod((k + 1) * 0.6180339887498949 + i * 1.4142135623730951, 1.0)
            evaluate.evaluate()
            probe.append(outputs)
        for out in data.outputs:
            got, want = probe[1][out], probe[0][out]
            scale = float(np.nanmax(np.abs(want), initial=0.0)) + 1e-300
            if not np.allclose(got, want, rtol=_RTOL, atol=_RTOL * scale, equal_nan=True):
                raise ValueError(f"the library's {out} differs from this problem's at the probe point")
        return library

    def build(self) -> ctypes.CDLL | None:
        """Compile the sources, publish and load the entry; None after a fallback (see `report`)."""
        if not self.key and not self._compute_key():
            return None
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            sweep(self.root)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root))
        except OSError as err:
            self.fallback(f"cannot write the cache directory {self.root} ({err.strerror or err})")
            return None
        try:
            try:
                self._write_entry(tmp)
            except (CompileError, ToolchainError) as err:
                self.fallback(str(err).splitlines()[0])
                return None
            final = publish(tmp, self.entry, self._open)
            try:  # unpublished: used from the temporary copy, by this process only
                library = self._open(final if final is not None else tmp)
            except Exception as err:  # noqa: BLE001
                if interrupted(err):
                    raise
                self.fallback(f"the compiled QP does not load: {str(err).strip().splitlines()[0][:200]}")
                return None
            reason = self._miss if final is not None else f"{self._miss}; not cached (the entry cannot be written)"
            self._done("built", final if final is not None else None, reason)
            return library
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _write_entry(self, tmp: Path) -> None:
        """Compile the sources into ``tmp/rti-<sha>.so`` and record it in ``tmp/entry.json``."""
        t = time.perf_counter()
        for name, text in self.sources.items():
            (tmp / name).write_text(text, encoding="utf-8")
        built = tmp / "rti.so"
        opt = rti_opt(self.sources)
        result = compile_host([tmp / name for name in self.sources], built, extra_flags=RTI_CFLAGS, opt=opt)
        if not result.ok:
            raise CompileError(f"gcc failed on the RTI's C: {first_error_line(result.stderr)}")
        for name in self.sources:
            (tmp / name).unlink()
        path, sha = name_by_checksum(built, "rti")
        write_record(path, sha, key=self.key, fmt=CACHE_FORMAT, extra={
            "compiler": " ".join([result.command[0], *HOST_CFLAGS, opt, *RTI_CFLAGS]),
            "casadi": ca.CasadiMeta.version(),
            "sizes": list(vars(self.builder.template.sizes).values()), "model": self.builder.ocp.model.name,
            "compile_seconds": round(time.perf_counter() - t, 3)})

    def fallback(self, reason: str) -> None:
        """Record (and warn once) that the numpy twin is used, and why."""
        self._done("fallback", None, reason)
        warnings.warn(f"the RTI's QP runs in numpy (not compiled): {reason}", RTILibraryWarning, stacklevel=4)

    def _done(self, status: Literal["hit", "built", "fallback"], entry: Path | None, reason: str) -> None:
        path = None
        if entry is not None:
            record = json.loads((entry / "entry.json").read_text(encoding="utf-8"))
            path = entry / record["library"]
        self.report = RTILibraryReport(status, self.key, path, time.perf_counter() - self._t0, reason)


def attach_library(builder: StageQPBuilder) -> RTILibraryReport:
    """Load `builder`'s compiled QP from the cache, or build and cache it, and `StageQPBuilder.attach` it.

    Parameters
    ----------
    builder : StageQPBuilder

    Returns
    -------
    RTILibraryReport
        ``status == "fallback"`` (after one `RTILibraryWarning`): nothing attached, `builder` stays numpy.
    """
    entry = RTILibrary(builder)
    size = builder.data.instructions
    if size > MAX_INSTRUCTIONS:  # a documented limit, not a fault: reported, no warning (as the compiled NLP's)
        entry.report = RTILibraryReport("fallback", "", None, 0.0, f"too large to compile ({size} SX instructions "
                                                                     f"per stage, limit {MAX_INSTRUCTIONS})")
        return entry.report
    library = entry.load()
    if library is None and (entry.report is None or entry.report.status != "fallback"):
        library = entry.build()
    if library is not None:
        builder.attach(library)
    assert entry.report is not None
    return entry.report
