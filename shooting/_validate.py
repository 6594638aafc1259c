"""Validation of user input, in one place: every check raises ValueError naming the culprit and the fix.

`what` is the name the user wrote (``"steps"``, ``"Scenario.Q"``); messages
read ``"<what> must be ..., got <value>"``. Everything returns a normalised
copy (a plain ``int``/``float``, a new float64 array), never the caller's
object.
"""

from __future__ import annotations

import keyword
import math
import numbers
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from ._text import one_line, stderr_lines, vector_text

__all__ = ["C_RESERVED", "MAX_NAME_LENGTH", "MAX_PREFIX_LENGTH", "MAX_TOOL_TIMEOUT", "MAX_WEIGHT", "ProgressReporter",
           "ReferenceBeyondBoundsWarning", "Schema", "array", "bounds", "choice", "covariance", "flag", "identifier",
           "integer", "names", "one_line", "positive_real", "progress", "real", "record", "references_beyond_bounds",
           "sanitized_identifier", "stage_rows", "stderr_lines", "tool_timeout", "vector", "vector_text", "weight"]

FloatArray = npt.NDArray[np.float64]
_S = TypeVar("_S", bound=str)

#: Names a generated C symbol must not take: the C99 keywords and the names
#: of the C library that generated code or its harness may see (math.h,
#: stdio.h, stdlib.h, string.h, stdint.h), since NAME becomes a C function,
#: file and macro prefix.
C_RESERVED = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int "
    "long register restrict return short signed sizeof static struct switch typedef union unsigned void "
    "volatile while _Bool _Complex _Imaginary "
    "main printf fprintf sprintf snprintf puts putchar scanf exit abort malloc calloc realloc free memcpy "
    "memset memmove strlen strcmp stdin stdout stderr errno assert NULL FILE size_t int8_t int16_t int32_t "
    "int64_t uint8_t uint16_t uint32_t uint64_t "
    "acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp2 expm1 fabs fdim "
    "floor fma fmax fmin fmod frexp hypot ldexp lgamma log log10 log1p log2 modf nan pow remainder round "
    "sin sinh sqrt tan tanh tgamma trunc".split()
)

_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")

#: Longest name a generated file or C symbol may take. A name becomes file
#: names with suffixes of up to 10 characters (``lib{name}_mpc.so``); file
#: systems allow 255 bytes per file name (ext4, xfs, tmpfs, APFS) or 143
#: (eCryptfs), so 128 leaves room on all of them.
MAX_NAME_LENGTH = 128
#: Longest name that prefixes names derived from it with suffixes of up to 16
#: characters: a model's (``NAME_rti_step``, ``NAME_plant``), a controller's
#: (``NAME_mpc_qp``, ``libNAME_mpc.so``).
MAX_PREFIX_LENGTH = MAX_NAME_LENGTH - 16

#: Largest entry of a cost weight (Q, R, Q_terminal, R_delta, slack_l1,
#: slack_l2). The QP multiplies two Hessian entries (condensing B' Q B, Schur
#: complements, its factorisation) and each by squared deviations: with
#: weights up to 1e150 and deviations up to 1e4, w^2 e^2 <= 1e308 stays below
#: the double range (1.8e308); above it (measured: 1e160) the RTI's QP
#: overflows to NaN. Float exports have a tighter bound of their own.
MAX_WEIGHT = 1e150


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def integer(value: object, what: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer in [minimum, maximum] (bools are not integers).

    Parameters
    ----------
    value : object
    what : str
        The name the user wrote, for the message.
    minimum, maximum : int, optional
        Inclusive limits.

    Returns
    -------
    int
    """
    if not _is_int(value):
        raise ValueError(f"{what} must be an integer{_range(minimum, maximum)}, got {_show(value)}")
    result = int(value)  # type: ignore[call-overload]
    if (minimum is not None and result < minimum) or (maximum is not None and result > maximum):
        raise ValueError(f"{what} must be an integer{_range(minimum, maximum)}, got {_show(value)}")
    return result


def _range(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in {minimum}..{maximum}"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""


def real(value: object, what: str, *, minimum: float | None = None, maximum: float | None = None,
         positive: bool = False, allow_inf: bool = False) -> float:
    """A real number (int, float, numpy scalar; not bool, not str), finite unless `allow_inf`.

    Parameters
    ----------
    value : object
    what : str
    minimum, maximum : float, optional
        Inclusive limits.
    positive : bool
        Require ``value > 0``.
    allow_inf : bool
        Accept +-inf (never NaN).

    Returns
    -------
    float
    """
    need = ("a number" if allow_inf else "a finite number") + (" > 0" if positive else "") + (
        f" in [{minimum:g}, {maximum:g}]" if minimum is not None and maximum is not None
        else f" >= {minimum:g}" if minimum is not None else f" <= {maximum:g}" if maximum is not None else "")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{what} must be {need}, got {_show(value)} ({type(value).__name__})")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{what} must be {need}, got a number too large for a float") from None
    if math.isnan(number) or (math.isinf(number) and not allow_inf) or (positive and not number > 0) \
            or (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise ValueError(f"{what} must be {need}, got {_show(value)}")
    return number


def positive_real(value: object, what: str) -> float:
    """A finite number > 0 (a step, a sampling time, a tolerance)."""
    return real(value, what, positive=True)


def flag(value: object, what: str) -> bool:
    """A bool (``True``/``False``; numpy bools too)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{what} must be True or False, got {_show(value)}")
    return bool(value)


def choice(value: object, allowed: tuple[_S, ...], what: str) -> _S:
    """One of the `allowed` strings (see `shooting.options`).

    Returns
    -------
    str
        `value`, typed as the option's Literal.
    """
    for option in allowed:
        if value == option and isinstance(value, str):
            return option
    raise ValueError(f"{what} must be one of {', '.join(repr(a) for a in allowed)}, got {_show(value)}")


def identifier(name: object, what: str, *, maximum: int = MAX_NAME_LENGTH) -> str:
    """A name that is valid for CasADi, for C and as a file stem.

    Rule: an ASCII letter, then letters, digits and single underscores (no
    ``__``, which C reserves and CasADi rejects, no trailing ``_``), not a C
    keyword, not a name of the C library (`C_RESERVED`), not a Python keyword,
    at most `maximum` characters (default `MAX_NAME_LENGTH`).

    Returns
    -------
    str
    """
    if not isinstance(name, str):
        raise ValueError(f"{what} must be a string, got {_show(name)}")
    if len(name) > maximum:
        raise ValueError(f"{what} {_show(name)} has {len(name)} characters; names become file names and C symbols, "
                         f"at most {maximum} characters: choose a shorter one")
    fix = "use letters, digits and single underscores, starting with a letter"
    if not _IDENTIFIER.match(name):
        raise ValueError(f"{what} {name!r} is not an identifier: {fix}")
    if "__" in name or name.endswith("_"):
        raise ValueError(f"{what} {name!r} has a double or trailing underscore, which C reserves "
                         f"and CasADi rejects: {fix}")
    if name in C_RESERVED or keyword.iskeyword(name):
        raise ValueError(f"{what} {name!r} is a reserved name in C or Python: choose another, "
                         f"e.g. {name}_model")
    return name


def sanitized_identifier(text: str) -> str:
    """`text` made into an `identifier`: runs of other characters become one ``_``.

    ``"cartpole_rk2(alpha=1/2)"`` gives ``"cartpole_rk2_alpha_1_2"``; a result
    that starts with a digit gets the prefix ``f_``, and a reserved one the
    suffix ``_fn``; a longer one than `MAX_NAME_LENGTH` is cut to it.
    """
    name = re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_") or "f"
    if not name[0].isalpha():
        name = f"f_{name}"
    name = name[:MAX_NAME_LENGTH - 3].rstrip("_")  # (room for "_fn")
    if name in C_RESERVED or keyword.iskeyword(name):
        name = f"{name}_fn"
    return identifier(name, "name")


def vector(value: object, n: int, what: str, *, default: float | None = None,
           allow_inf: bool = False, broadcast: bool = True) -> FloatArray:
    """A float vector of length `n`; with `broadcast`, a single number is repeated `n` times.

    Parameters
    ----------
    value : array_like, shape (n,) or scalar, or None
        None gives ``default`` repeated (an error when `default` is None).
    n : int
    what : str
    default : float, optional
    allow_inf : bool
        Accept +-inf entries (bounds); NaN is always refused.
    broadcast : bool
        Repeat a single number (bounds, nominal values); False for a state,
        which must be given whole.

    Returns
    -------
    ndarray, shape (n,)
    """
    if value is None:
        if default is None:
            raise ValueError(f"{what} is required: give {n} number(s)")
        return np.full(n, float(default))
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{what} must be {n} number(s), got the string {_show(value)}")
    try:
        arr = np.array(value, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be {n} number(s), got {_show(value)}") from None
    if broadcast and arr.size == 1 and n != 1:
        arr = np.full(n, float(arr[0]))
    if arr.size != n:
        raise ValueError(f"{what} has {arr.size} entries but needs {n}")
    if np.isnan(arr).any():
        raise ValueError(f"{what} contains NaN: give numbers" + (" (use +-inf for no bound)" if allow_inf else ""))
    if not allow_inf and not np.isfinite(arr).all():
        raise ValueError(f"{what} contains inf: give finite numbers")
    return arr


def stage_rows(value: object, rows: int, n: int, what: str) -> FloatArray:
    """Per-stage values: one vector for every stage, or one row per stage.

    Parameters
    ----------
    value : array_like, shape (n,), (1, n) or (rows, n), or None (zeros)
    rows, n : int
    what : str

    Returns
    -------
    ndarray, shape (rows, n)
    """
    if value is None:
        return np.zeros((rows, n))
    try:
        arr = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be numbers of shape ({n},) or ({rows}, {n}), got {_show(value)}") from None
    given = arr.shape
    if given in ((n,), (1, n)):
        arr = np.tile(arr.reshape(1, n), (rows, 1))
    if arr.shape != (rows, n) or not np.isfinite(arr).all():
        raise ValueError(f"{what} must be finite numbers of shape ({n},) or ({rows}, {n}), got shape {given}")
    return arr


def weight(value: object, n: int | None, what: str, *, default: float | None = None) -> FloatArray:
    """A symmetric positive semi-definite (n, n) weight; a vector of n entries is its diagonal.

    Parameters
    ----------
    value : array_like, shape (n, n) or (n,), or None
        None gives ``default * I`` (an error when `default` is None).
    n : int or None
        None: taken from `value` (before the dimensions of a model are known).
    what : str
    default : float, optional

    Returns
    -------
    ndarray, shape (n, n)
    """
    if value is None:
        if default is None or n is None:
            raise ValueError(f"{what} is required: give an (n, n) matrix or n diagonal entries")
        return np.eye(n) * float(default)
    try:
        W = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a square matrix or its diagonal entries, got {_show(value)}") from None
    if n is None:
        n = int(W.size if W.ndim <= 1 else W.shape[0])
    given = W.shape
    if W.ndim <= 1 and W.size == n:
        W = np.diag(W.reshape(-1))
    if W.shape != (n, n) or not np.isfinite(W).all():
        raise ValueError(f"{what} must be a finite ({n}, {n}) matrix or {n} diagonal entries, got shape {given}")
    if np.abs(W).max(initial=0.0) > MAX_WEIGHT:
        raise ValueError(f"{what} has an entry of {np.abs(W).max():.3g}: weights must lie within +-{MAX_WEIGHT:g}, "
                         f"beyond which the QP's products of weights overflow double precision; rescale the "
                         f"cost (divide every weight by the same factor)")
    scale = max(1.0, float(np.abs(W).max(initial=0.0)))
    if not np.allclose(W, W.T, rtol=0.0, atol=1e-12 * scale):
        raise ValueError(f"{what} must be symmetric")
    if n and np.linalg.eigvalsh((W + W.T) / 2).min() < -1e-12 * scale:
        raise ValueError(f"{what} must be positive semi-definite (it has a negative eigenvalue)")
    return (W + W.T) / 2


def covariance(value: object, n: int, what: str, *, definite: bool = True, meaning: str = "") -> FloatArray:
    """A covariance: an (n, n) finite symmetric matrix (a vector: its diagonal; a number when n == 1), positive
    definite (a Cholesky factor exists), or with ``definite=False`` semi-definite (eigenvalues >= -1e-12 of the
    largest entry); `meaning` says what it is in messages. Returns ``(value + value.T) / 2``, shape (n, n)."""
    about = f" ({meaning})" if meaning else ""
    need = f"a finite ({n}, {n}) matrix or {n} diagonal entries{about}"
    try:
        C = np.array(value, dtype=float) if not isinstance(value, (str, bytes, type(None))) else np.array([])
    except (TypeError, ValueError):
        C = np.array([])
    given, C = C.shape, np.diag(C.reshape(-1)) if C.ndim <= 1 and C.size == n else C
    if C.shape != (n, n):
        raise ValueError(f"{what} must be {need}, got {_show(value) if given == (0,) else f'shape {given}'}")
    if not np.isfinite(C).all():
        raise ValueError(f"{what} contains NaN or inf: give finite numbers{about}")
    asym, scale = np.abs(C - C.T), float(np.abs(C).max(initial=0.0))
    if asym.max(initial=0.0) > 1e-10 * max(scale, 1e-300):
        i, j = np.unravel_index(int(np.argmax(asym)), asym.shape)
        raise ValueError(f"{what} must be symmetric: {what}[{i}, {j}] = {C[i, j]:g} but {what}[{j}, {i}] = "
                         f"{C[j, i]:g}; give ({what} + {what}.T) / 2")
    C = (C + C.T) / 2
    low = float(np.linalg.eigvalsh(C).min()) if n else 0.0
    if definite and not (low > 0 and np.all(np.isfinite(np.linalg.cholesky(C)))):
        raise ValueError(f"{what} must be positive definite{about}, but its smallest eigenvalue is {low:.3g}: "
                         f"give every direction a variance > 0 (e.g. a diagonal of positive variances)")
    if not definite and low < -1e-12 * scale:
        raise ValueError(f"{what} must be positive semi-definite{about}, but it has the negative eigenvalue "
                         f"{low:.3g}: give variances >= 0 (e.g. a diagonal)")
    return C

def array(value: object, what: str, *, allow_inf: bool = False) -> FloatArray:
    """A float array of any shape (a copy), without NaN, finite unless `allow_inf`."""
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{what} must be numbers, got the string {_show(value)}")
    try:
        arr = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be numbers, got {_show(value)}") from None
    if np.isnan(arr).any() or (not allow_inf and not np.isfinite(arr).all()):
        raise ValueError(f"{what} contains {'NaN' if allow_inf else 'NaN or inf'}: give finite numbers"
                         + (" (+-inf for no bound)" if allow_inf else ""))
    return arr


def bounds(lower: FloatArray, upper: FloatArray, what: str) -> None:
    """Refuse ``lower[i] > upper[i]``, naming the first such entry.

    Parameters
    ----------
    lower, upper : ndarray, shape (n,)
    what : str
        The bounded quantity, e.g. ``"x"`` (message: ``x_min[1] = 2 exceeds x_max[1] = 1``).
    """
    bad = np.nonzero(np.asarray(lower) > np.asarray(upper))[0]
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"{what}_min[{i}] = {lower[i]:g} exceeds {what}_max[{i}] = {upper[i]:g}: "
                         f"no value satisfies both; swap or fix the bounds")


#: Longest a tool may run, whatever ``SHOOTING_TOOL_TIMEOUT`` says: a day is
#: far beyond any compile or emulation we run, and far below what the OS's
#: waits take (`threading.TIMEOUT_MAX`, ~292 years; ``inf`` overflows them).
MAX_TOOL_TIMEOUT = 86_400.0


def tool_timeout(text: str, default: float) -> float:
    """Seconds from the text of ``SHOOTING_TOOL_TIMEOUT`` (`default` when empty), clamped to `MAX_TOOL_TIMEOUT`.

    Raises
    ------
    ValueError
        Text that is not a number, NaN, zero or negative.
    """
    text = text.strip()
    if not text:
        return min(default, MAX_TOOL_TIMEOUT)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0:  # (NaN too)
        raise ValueError(f"SHOOTING_TOOL_TIMEOUT={text[:40]!r} is not a positive number of seconds: set it to e.g. "
                         f"600 (at most {MAX_TOOL_TIMEOUT:g}; larger values are clamped) or unset it")
    return min(value, MAX_TOOL_TIMEOUT)


class ReferenceBeyondBoundsWarning(UserWarning):
    """A weighted reference lies beyond a bound: the optimum stops at the bound, as close as it can get.

    Issued by `MultipleShootingOCP` (once per reference entry and OCP) where
    the entry's row of Q, Q_terminal or R is nonzero; filter it with
    ``warnings.filterwarnings("ignore", category=shooting.ReferenceBeyondBoundsWarning)``.

    Parameters
    ----------
    message : str
        Names the entry, its value, the bounds and the weight.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)


def references_beyond_bounds(rows: npt.ArrayLike, lower: npt.ArrayLike, upper: npt.ArrayLike,
                             weights: Sequence[tuple[str, npt.ArrayLike, Sequence[int]]], labels: Sequence[str],
                             what: str) -> list[tuple[int, str]]:
    """The entries (index, one-line message) of a reference `rows` (stages, n) beyond `lower`, `upper` (n,) where a
    weight pulls towards them (only there does the optimum differ from tracking it).

    `weights`: (name, W (n, n), stages) that multiply those rows (``("Q", Q, range(N))``); entry i is weighted
    where row i of W is nonzero. `labels` (n): the entries' names; `what`: ``"x_ref"`` or ``"u_ref"``. A message
    names the first stage, the bounds and the weight.
    """
    ref = np.atleast_2d(np.asarray(rows, dtype=float))
    lo, hi = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    beyond = (ref < lo) | (ref > hi)
    found: list[tuple[int, str]] = []
    for i in (int(i) for i in np.flatnonzero(beyond.any(axis=0))):
        for name, matrix, stages in weights:
            row = np.asarray(matrix, dtype=float)[i]
            ks = [k for k in stages if beyond[k, i]]
            if not ks or not row.any():
                continue
            k, j = ks[0], i if row[i] != 0 else int(np.flatnonzero(row)[0])
            varies = bool(np.any(ref[:, i] != ref[0, i]))
            more = f" (and {len(ks) - 1} more stage{'s' if len(ks) > 2 else ''})" if len(ks) > 1 and varies else ""
            found.append((i, f"{what}[{k}][{i}] ({labels[i]}) = {ref[k, i]:g}{more} lies beyond the bounds "
                                  f"[{lo[i]:g}, {hi[i]:g}] with nonzero weight {name}[{i}, {j}] = {row[j]:g}: the "
                                  f"controller stops at the bound, as close as it can get; move the reference inside "
                                  f"the bounds or set its weight to zero to silence this"))
            break
    return found



def names(values: Iterable[object] | None, n: int, prefix: str, what: str) -> tuple[str, ...]:
    """Labels, one non-empty string per entry (default ``prefix0, prefix1, ...``).

    Returns
    -------
    tuple of str, length n
    """
    if values is None:
        return tuple(f"{prefix}{i}" for i in range(n))
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{what} must be a sequence of {n} strings, got the string {_show(values)}")
    result = tuple(values)
    if len(result) != n:
        raise ValueError(f"{what} has {len(result)} entries but the model has {n}: give one name per entry")
    for label in result:
        if not isinstance(label, str) or not label:
            raise ValueError(f"{what} must be non-empty strings, got {label!r}")
    return result  # type: ignore[return-value]


def units(values: Iterable[object] | None, n: int, what: str) -> tuple[str, ...]:
    """Units of measurement (tuple of n short strings, "" for none; default all "")."""
    result = ("",) * n if values is None else (values,) if isinstance(values, (str, bytes)) else tuple(values)
    if len(result) != n or any(not isinstance(u, str) or len(u) > 16 or any(c in u for c in "\n\r,[]")
                               for u in result):
        raise ValueError(f"{what} must be {n} short strings, one unit per entry ('' for none; at most 16 "
                         f"characters, no newline, comma or bracket), got {values!r}")
    return tuple(str(u).strip() for u in result)


#: The type of `progress` in the public API (see `progress`).
ProgressReporter = Callable[[str], None]


def progress(value: object, default: ProgressReporter = stderr_lines,
             what: str = "progress") -> ProgressReporter | None:
    """The progress convention of the whole public API.

    ``None`` or ``False``: silent; ``True``: the function's default reporter
    (`default`: lines on stderr, or the closed loop's bar); a callable
    ``(str) -> None``: called with each progress message.

    Returns
    -------
    callable or None
        What to call with each message; None for silence.
    """
    if value is None or (isinstance(value, (bool, np.bool_)) and not value):
        return None
    if isinstance(value, (bool, np.bool_)):
        return default
    if callable(value):
        return value
    raise ValueError(f"{what} must be None, False (silent), True (report on stderr) or a callable taking one "
                     f"message string, got {_show(value)}")


#: A schema for `record`: a type or tuple of types (``int`` excludes bool, ``float`` takes ints, finite
#: only), a dict of key -> schema (a key ending in "?" is optional; other keys are allowed), a one-item
#: list ``[schema]`` (a list of such items), or a callable ``(value, what) -> None`` raising ValueError.
Schema = Any


def record(value: object, schema: Schema, what: str) -> None:
    """Check data read from a file (JSON) against `schema`; ValueError naming the first field that differs.

    Parameters
    ----------
    value : object
        Parsed JSON.
    schema : Schema
        See `Schema`: e.g. ``{"name": str, "horizon": int, "model": {"nx": int}, "dt?": float}``.
    what : str
        The record's name for messages (``"manifest.json"``); fields are named ``what: model.nx``.
    """
    _record(value, schema, what, "")


def _record(value: object, schema: Schema, what: str, field: str) -> None:
    where = f"{what}: {field or 'the top level'}"
    if isinstance(schema, dict):
        if not isinstance(value, dict):
            raise ValueError(f"{where} must be a JSON object, got {_json_type(value)}")
        for key, sub in schema.items():
            name = key.rstrip("?")
            path = f"{field}.{name}" if field else name
            if name not in value:
                if key.endswith("?"):
                    continue
                raise ValueError(f"{what}: {path} is missing")
            _record(value[name], sub, what, path)
    elif isinstance(schema, list):
        if not isinstance(value, list):
            raise ValueError(f"{where} must be a JSON array, got {_json_type(value)}")
        for i, item in enumerate(value):
            _record(item, schema[0], what, f"{field}[{i}]")
    elif isinstance(schema, (type, tuple)):
        types = schema if isinstance(schema, tuple) else (schema,)
        if not any(_is_json_type(value, t) for t in types):
            expected = " or ".join(_JSON_NAMES.get(t, t.__name__) for t in types)
            raise ValueError(f"{where} must be {expected}, got {_json_type(value)} {_show(value)}")
    else:
        try:
            schema(value, where)
        except (TypeError, AttributeError, OverflowError):
            raise ValueError(f"{where} is malformed: {_show(value)}") from None


_JSON_NAMES = {int: "an integer", float: "a finite number", str: "a string", bool: "true or false",
               type(None): "null", list: "an array", dict: "an object"}


def _is_json_type(value: object, kind: type) -> bool:
    if kind is int:
        return _is_int(value)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, kind)


def _json_type(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)



def scale(value: object, n: int | None, what: str) -> FloatArray | None:
    """A variable scaling (`shooting.mpc.scaling`): None for "auto" (or None), else positive numbers ((n,) if given)."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return None
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{what} must be 'auto' or positive numbers (one per variable), got {_show(value)}")
    arr = array(value, what).reshape(-1) if n is None else vector(value, n, what)
    if not (arr > 0).all():
        raise ValueError(f"{what} must be positive (a scale divides its variable), got {_show(value)}")
    return arr
