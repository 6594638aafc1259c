"""The NLP's functions compiled once per problem and kept on disk, reused by later processes.

A `MultipleShootingOCP` built with ``compile_nlp=True`` solves with the
functions its NLP solver evaluates (``nlp_f, nlp_g, nlp_grad_f, nlp_jac_g,
nlp_hess_l``, plus the oracle ``nlp: (x, p) -> (f, g)``) compiled by gcc into
one shared library. The library is an entry of a per-user cache directory
(`cache_dir`: ``$SHOOTING_CACHE_DIR``, else ``$XDG_CACHE_HOME/shooting``,
else ``~/.cache/shooting``), under ``nlp/<key>/``, where ``<key>`` is the
SHA-256 of everything that determines the compiled code: the NLP itself
(``Function.serialize()`` of the oracle: constants such as the weights,
sizes, every operation), the Hessian choice, the solver plugin and its
CasADi-level options, CasADi's version, the compiler (its path, size and
modification time) and flags, the platform and this cache's format.

A later process that builds the same problem skips CasADi's symbolic
derivatives and the compiler: it checks the entry (owner and permissions,
the library's size and SHA-256 recorded in ``entry.json``), loads it with
``casadi.external`` and evaluates it once at a fixed point: the oracle's
(f, g) against the SX expressions of this process, every derivative
function against the values the SX functions gave when the entry was built.
Anything wrong (no entry, a truncated or altered library, a wrong problem)
rebuilds the entry; anything that prevents compiling (an unwritable cache
directory, no gcc, a compiler that fails or runs past
``SHOOTING_TOOL_TIMEOUT``) leaves the caller on its uncompiled SX solver
with one `NLPCacheWarning`.

Entries are published atomically: compiled in a private temporary directory
beside them, then renamed into place (a directory rename either succeeds
whole or finds the entry of a process that won the race, which is then
used). Entries are never modified after publication; clear the cache by
deleting the directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import casadi as ca
import numpy as np

from shooting._cache import (
    CACHE_DIR_ENV,
    cache_dir,
    check_entry,
    interrupted,
    name_by_checksum,
    publish,
    sweep,
    write_record,
)
from shooting.mpc.nlp_compile import MAX_INSTRUCTIONS, CompileError, compile_library, compiler_identity, instructions

__all__ = [
    "CACHE_DIR_ENV",
    "COMPILE_ENV",
    "NLPCache",
    "NLPCacheReport",
    "NLPCacheWarning",
    "cache_dir",
    "compile_nlp_default",
]

#: Environment variable giving the default of ``compile_nlp`` (``1``/``0``, ``on``/``off``).
COMPILE_ENV = "SHOOTING_COMPILE_NLP"
#: Bumped whenever what an entry holds or how it is made changes: old entries are then ignored.
CACHE_FORMAT = 1
#: Top-level nlpsol options that change no Function the solver evaluates (left out of the key).
_NEUTRAL_OPTIONS = frozenset({
    "print_time", "record_time", "error_on_fail", "verbose", "verbose_init", "warn_initial_bounds",
    "bound_consistency", "min_lam", "inputs_check", "iteration_callback", "iteration_callback_step",
    "iteration_callback_ignore_errors", "print_in", "print_out", "dump_in", "dump_out",
})
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
# Agreement required between the compiled functions and CasADi's SX virtual
# machine: the same operations in the same order, so only a contracted
# multiply-add (a machine with FMA) can differ, by rounding.
_RTOL = 1e-9


class NLPCacheWarning(RuntimeWarning):
    """The NLP could not be compiled or cached: the solve goes on with the uncompiled functions."""


@dataclass(frozen=True)
class NLPCacheReport:
    """How an OCP's compiled NLP functions were obtained.

    Attributes
    ----------
    status : {"hit", "built", "fallback"}
        ``"hit"``: loaded from the cache (no derivatives generated, nothing
        compiled); ``"built"``: compiled by this process (and published, or
        the identical entry of a concurrent process used); ``"fallback"``:
        not compiled, the uncompiled SX functions are used (see `reason`).
    key : str
        The entry's key (SHA-256, hex); empty when it could not be computed.
    path : pathlib.Path or None
        The loaded shared library.
    seconds : float
        Time spent in the cache: checking and loading, plus generating C and
        compiling when built.
    reason : str
        Why the entry was built (``"no entry"``, ``"library size ... differs
        ..."``) or why the build fell back; empty on a hit.
    """

    status: Literal["hit", "built", "fallback"]
    key: str
    path: Path | None
    seconds: float
    reason: str = ""


def compile_nlp_default(default: bool) -> bool:
    """The ``compile_nlp`` to use when none is given: ``$SHOOTING_COMPILE_NLP``, else `default`.

    Parameters
    ----------
    default : bool
        The caller's own default (False in the library, True in the CLI).

    Returns
    -------
    bool

    Raises
    ------
    ValueError
        A value of the variable other than 1/0, true/false, yes/no, on/off.
    """
    text = os.environ.get(COMPILE_ENV, "").strip().lower()
    if not text:
        return default
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ValueError(f"{COMPILE_ENV}={text!r} is not understood: set it to 1 (compile the NLP and cache it) or 0 "
                     f"(never), or unset it")


def _options_key(options: Mapping[str, object], solver: str) -> str:
    """The solver's CasADi-level options that may change which functions it evaluates, as canonical JSON.

    The plugin's own numerical options (``ipopt.tol``, the ``fatrop`` dict)
    change none of them and are left out, so tuning them reuses the entry.
    """
    kept = {k: v for k, v in options.items()
            if k not in _NEUTRAL_OPTIONS and k != solver and not k.startswith(f"{solver}.")}
    return json.dumps(kept, sort_keys=True, default=lambda v: type(v).__name__)


def _probe(fn: ca.Function) -> list[ca.DM]:
    """A fixed evaluation point for `fn`: input i, nonzero k = 0.2 + 0.6 frac((k + 1) phi + i sqrt 2)."""
    args = []
    for i in range(fn.n_in()):
        k = np.arange(fn.nnz_in(i), dtype=float)
        values = 0.2 + 0.6 * np.mod((k + 1) * 0.6180339887498949 + i * 1.4142135623730951, 1.0)
        args.append(ca.DM(fn.sparsity_in(i), values))
    return args


def _outputs(fn: ca.Function) -> list[np.ndarray]:
    """The nonzeros of each output of `fn` at the probe point."""
    return [np.array(ca.DM(out).nonzeros(), dtype=float) for out in fn.call(_probe(fn))]


def _fingerprint(values: np.ndarray) -> list[float]:
    """[nnz, sum(w v), sum |v|] with fixed weights w of mixed signs: two numbers that change with any value."""
    w = np.cos(0.7 * np.arange(values.size) + 0.3)
    return [float(values.size), float(w @ values), float(np.abs(values).sum())]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal to rounding, NaN where the other is NaN."""
    if a.shape != b.shape:
        return False
    scale = float(np.nanmax(np.abs(b), initial=0.0)) + 1e-300
    return bool(np.allclose(a, b, rtol=_RTOL, atol=_RTOL * scale, equal_nan=True))


def _same_fingerprint(got: list[float], recorded: list[float]) -> bool:
    if len(got) != 3 or len(recorded) != 3 or got[0] != recorded[0]:
        return False
    if any(np.isnan(got[1:])) or any(np.isnan(recorded[1:])):
        return bool(np.array_equal(np.isnan(got), np.isnan(recorded)))
    tol = _RTOL * (abs(recorded[2]) + 1e-300)
    return abs(got[1] - recorded[1]) <= tol and abs(got[2] - recorded[2]) <= tol


class NLPCache:
    """The cache entry of one NLP: its key, loading it, building it.

    Parameters
    ----------
    oracle : casadi.Function
        ``nlp: (x, p) -> (f, g)`` in SX, named inputs and outputs.
    solver : str
        The nlpsol plugin (``"ipopt"``, ``"fatrop"``).
    hessian : str
        ``"exact"`` or ``"gauss-newton"``.
    options : mapping
        The nlpsol options the solver is built with.

    Attributes
    ----------
    report : NLPCacheReport or None
        Filled in by `load` (a hit), `build` or `fallback`.
    """

    def __init__(self, oracle: ca.Function, *, solver: str, hessian: str, options: Mapping[str, object]) -> None:
        self.oracle = oracle
        self.report: NLPCacheReport | None = None
        self._t0 = time.perf_counter()
        self._miss = "no entry"
        self._material = {
            "format": CACHE_FORMAT, "solver": solver, "hessian": hessian,
            "options": _options_key(options, solver), "casadi": [ca.CasadiMeta.version(), ca.CasadiMeta.git_revision()],
            "platform": [sys.platform, platform.machine()],
        }
        self.key = ""
        self.root = cache_dir() / "nlp"

    # ------------------------------------------------------------------ key
    def _compute_key(self) -> bool:
        """The entry's key; False (with the fallback reported) when there is no usable compiler."""
        try:
            compiler = compiler_identity()
        except CompileError as err:
            self.fallback(str(err))
            return False
        material = json.dumps({**self._material, "compiler": compiler}, sort_keys=True)
        digest = hashlib.sha256(material.encode())
        digest.update(self.oracle.serialize().encode())
        self.key = digest.hexdigest()
        return True

    @property
    def entry(self) -> Path:
        """The entry's directory (``<cache>/nlp/<key>``)."""
        return self.root / self.key

    # ------------------------------------------------------------------ load
    def load(self) -> ca.Function | None:
        """The compiled oracle from the cache, checked and validated; None on a miss (see `report`).

        Returns
        -------
        casadi.Function or None
            An External ``nlp: (x, p) -> (f, g)`` whose library holds every
            function the solver needs (CasADi finds them by name).
        """
        if not self._compute_key():
            return None
        if not self.entry.exists():
            return None
        try:
            fn, library = self._open(self.entry)
        except Exception as err:  # noqa: BLE001 - any fault of an entry means: rebuild it
            if interrupted(err):
                raise
            self._miss = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            return None
        self._done("hit", library, "")
        return fn

    def _check(self, entry: Path) -> tuple[dict[str, Any], Path]:
        """The entry's record and library, after checking ownership, size and checksum (ValueError naming the fault).

        The library is named after its checksum (``nlp-<sha256[:16]>.so``):
        a process that loaded a faulty library and rebuilt it loads the new
        one under another name, not the faulty one the dynamic loader keeps.
        """
        return check_entry(self.root, entry, key=self.key, fmt=CACHE_FORMAT, prefix="nlp")

    def _open(self, entry: Path) -> tuple[ca.Function, Path]:
        """Load the entry's oracle and check every function of it at the probe point."""
        record, path = self._check(entry)
        library = str(path)
        oracle = ca.external("nlp", library)
        for got, want in zip(_outputs(oracle), _outputs(self.oracle), strict=True):
            if not _same(got, want):
                raise ValueError("the library's (f, g) differ from this problem's at the probe point")
        prints = record.get("fingerprints")
        if not isinstance(prints, dict) or "nlp" not in prints:
            raise ValueError("entry.json has no fingerprints")
        for name, recorded in prints.items():
            if name == "nlp":
                continue
            outs = _outputs(ca.external(str(name), library))
            if not isinstance(recorded, list) or len(recorded) != len(outs) or not all(
                    _same_fingerprint(_fingerprint(v), r) for v, r in zip(outs, recorded, strict=True)):
                raise ValueError(f"the library's {name} differs from the values recorded at its build")
        return oracle, path

    # ------------------------------------------------------------------ build
    def build(self, functions: Mapping[str, ca.Function]) -> ca.Function | None:
        """Compile `functions` (the SX solver's, by name) and the oracle; publish and load the entry.

        Parameters
        ----------
        functions : mapping of str to casadi.Function
            Every function the solver evaluates, named as CasADi names them
            (``solver.get_function(name)`` for ``name in solver.get_function()``).

        Returns
        -------
        casadi.Function or None
            The compiled oracle, or None after a fallback (see `report`).
        """
        if not self.key and not self._compute_key():
            return None
        size = sum(instructions(fn) for fn in (self.oracle, *functions.values()))
        if size > MAX_INSTRUCTIONS:  # a documented limit, not a fault: reported, no warning
            self._done("fallback", None, f"too large to compile ({size} SX instructions, limit {MAX_INSTRUCTIONS})")
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
                self._write_entry(tmp, {"nlp": self.oracle, **functions})
            except CompileError as err:
                self.fallback(str(err))
                return None
            except Exception as err:  # noqa: BLE001 - CasADi's codegen or a write failing: fall back
                if interrupted(err):
                    raise
                self.fallback(f"generating the NLP's C failed: {str(err).strip().splitlines()[-1][:200]}")
                return None
            final = self._publish(tmp)
            try:  # unpublished: used from the temporary copy, by this process only
                oracle, library = self._open(final if final is not None else tmp)
            except Exception as err:  # noqa: BLE001
                if interrupted(err):
                    raise
                self.fallback(f"the compiled NLP does not load: {str(err).strip().splitlines()[0][:200]}")
                return None
            reason = self._miss if final is not None else f"{self._miss}; not cached (the entry cannot be written)"
            self._done("built", None if final is None else library, reason)
            return oracle
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _write_entry(self, tmp: Path, functions: Mapping[str, ca.Function]) -> None:
        """Compile `functions` into ``tmp/nlp-<sha>.so``, check it against them, record it in ``tmp/entry.json``."""
        t = time.perf_counter()
        compiler = compile_library(functions, tmp / "nlp.so")
        path, sha = name_by_checksum(tmp / "nlp.so", "nlp")
        prints: dict[str, list[list[float]]] = {}
        library = str(path)
        for name, fn in functions.items():
            want = _outputs(fn)
            got = _outputs(ca.external(name, library))
            if len(got) != len(want) or not all(_same(g, w) for g, w in zip(got, want, strict=True)):
                raise CompileError(f"the compiled {name} disagrees with CasADi's at the probe point: not used")
            prints[name] = [_fingerprint(w) for w in want]
        write_record(path, sha, key=self.key, fmt=CACHE_FORMAT, extra={
            "fingerprints": prints, "compiler": compiler, "casadi": ca.CasadiMeta.version(),
            "instructions": sum(f.n_instructions() for f in functions.values()),
            "compile_seconds": round(time.perf_counter() - t, 3)})

    def _publish(self, tmp: Path) -> Path | None:
        """Rename `tmp` to the entry; if a valid entry is already there (a concurrent build), use that one.

        Returns None when the entry cannot be published (the caller then uses `tmp`).
        """
        return publish(tmp, self.entry, self._open)

    # ------------------------------------------------------------------ outcome
    def fallback(self, reason: str) -> None:
        """Record (and warn once) that the uncompiled functions are used, and why."""
        self._done("fallback", None, reason)
        warnings.warn(f"the NLP is solved without compiled functions: {reason}", NLPCacheWarning, stacklevel=4)

    def _done(self, status: Literal["hit", "built", "fallback"], path: Path | None, reason: str) -> None:
        self.report = NLPCacheReport(status, self.key, path, time.perf_counter() - self._t0, reason)
