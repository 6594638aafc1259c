"""Find a model by name, file or import path: `load_model` and `model_names`.

A model spec is one of:

- a built-in name, ``"cartpole"`` (see `model_names`);
- a path to a Python file, ``"my/dir/robot.py"`` (relative to the current
  directory), optionally with the attribute to use, ``"robot.py:make_robot"``;
- an importable module with the attribute, ``"package.module:function"``
  (without ``":attribute"``, a dotted name is imported too).

Without an explicit attribute the module's ``make_model`` function is used, or
else a module-level ``model`` that is a `shooting.Model`. A function is called
with the keyword parameters given to `load_model` and must return a Model.
Every mistake raises ValueError with a one-line message naming the culprit.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import inspect
import itertools
import re
import sys
import weakref
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TypeVar

from shooting.model import Model

__all__ = ["BUILTIN_MODELS", "builtin_name", "load_model", "measurement_factory", "model_names", "scenario_factory",
           "user_call"]

#: Names of the built-in models: one module each in `shooting.models`
#: (installed from the folder ``models/``), defining ``make_model`` and
#: ``scenario``.
BUILTIN_MODELS: tuple[str, ...] = (
    "cartpole",
    "dip",
    "pendulum",
    "quadrotor",
    "stiff_chain",
    "two_link_arm",
    "vanderpol",
)

_T = TypeVar("_T")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_counter = itertools.count()

# The `scenario` function of the module each loaded model came from (weakly
# keyed by the model): a model file's default closed-loop experiment.
_SCENARIOS: weakref.WeakKeyDictionary[Model, Callable[[Model], object]] = weakref.WeakKeyDictionary()

# The `measurement(x, u, p)` function of the module each loaded model came
# from (weakly keyed by the model): the model's default sensors.
_MEASUREMENTS: weakref.WeakKeyDictionary[Model, Callable[..., object]] = weakref.WeakKeyDictionary()

# The module each loaded model came from (its ``__name__``): built-ins are
# ``shooting.models.<name>``.
_ORIGINS: weakref.WeakKeyDictionary[Model, str] = weakref.WeakKeyDictionary()
_BUILTIN_PACKAGE = "shooting.models."


def scenario_factory(model: Model) -> Callable[[Model], object] | None:
    """The ``scenario(model)`` function of the file or module `model` was loaded from, if it has one.

    What the function raises (and a ``sys.exit``) reaches the caller as a
    one-line ValueError naming the file (see `user_call`).

    Parameters
    ----------
    model : Model

    Returns
    -------
    callable or None
    """
    return _SCENARIOS.get(model)


def measurement_factory(model: Model) -> Callable[..., object] | None:
    """The ``measurement(x, u, p)`` function of the file or module `model` was loaded from, if it has one.

    A model file names its default sensors by defining ``measurement(x, u, p)``
    beside ``make_model`` (an SX column of the measured quantities, as
    ``path_constraints`` are written). What the function raises reaches the
    caller as a one-line ValueError naming the file (see `user_call`).

    Parameters
    ----------
    model : Model

    Returns
    -------
    callable or None
    """
    return _MEASUREMENTS.get(model)


def model_names() -> list[str]:
    """Names of the built-in models, sorted.

    Returns
    -------
    list of str
        ``cartpole, pendulum, quadrotor, stiff_chain, two_link_arm, vanderpol``.
    """
    return sorted(BUILTIN_MODELS)


def load_model(spec: str, **params: object) -> Model:
    """Load a model from a built-in name, a Python file or an importable module.

    Parameters
    ----------
    spec : str
        ``"cartpole"`` (built-in), ``"path/to/robot.py"`` or
        ``"path/to/robot.py:function"``, or ``"package.module:function"``.
    **params
        Keyword arguments for the model's factory function, e.g.
        ``load_model("cartpole", M=2.0)``.

    Returns
    -------
    Model

    Raises
    ------
    ValueError
        Unknown built-in name (with the valid names and a close match), missing
        file or module, a module that fails to import, a missing attribute, a
        factory rejecting the parameters, or a result that is not a Model.
    """
    if not isinstance(spec, str):
        raise ValueError(
            f"model spec must be a string (a built-in name, a .py path or 'package.module:function'), "
            f"got {type(spec).__name__}"
        )
    spec = spec.strip()
    if not spec:
        raise ValueError(f"model spec is empty: give a built-in name ({', '.join(model_names())}) or a .py path")
    target, attr = _split(spec)
    if _is_path(target):
        module = _import_file(target)
    elif attr is not None or "." in target:
        module = _import_module(target)
    else:
        module = _builtin_module(target)
    return _call(module, target, attr, params)


def _split(spec: str) -> tuple[str, str | None]:
    """Split ``"target:attr"``; a colon inside a Windows path (``C:\\...``) is not a separator."""
    if ":" not in spec:
        return spec, None
    head, tail = spec.rsplit(":", 1)
    if not tail:
        raise ValueError(f"model spec '{spec}' ends with ':': name the function after it, e.g. '{head}:make_model'")
    if "/" in tail or "\\" in tail:
        return spec, None
    if not _IDENT.match(tail):
        raise ValueError(f"model spec '{spec}': '{tail}' after ':' is not a Python identifier")
    if not head:
        raise ValueError(f"model spec '{spec}' has nothing before ':': give a .py path or a module name")
    return head, tail


def _is_path(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target or target.startswith("~")


def _builtin_module(name: str) -> ModuleType:
    names = model_names()
    if name not in names:
        close = difflib.get_close_matches(name.lower(), names, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        local = f"; to load ./{name}.py give the path '{name}.py'" if Path(f"{name}.py").is_file() else ""
        raise ValueError(
            f"unknown model '{name}'{hint}: the built-in models are {', '.join(names)}, "
            f"or give a .py path or 'package.module:function'{local}"
        )
    return importlib.import_module(f"{_BUILTIN_PACKAGE}{name}")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _import_file(target: str) -> ModuleType:
    path = Path(target).expanduser()
    if not path.is_absolute():
        path = Path.cwd() / path
    if path.is_dir():
        raise ValueError(f"model file '{target}' is a directory: give the path of a .py file inside it")
    if not path.is_file():
        raise ValueError(
            f"model file '{target}' not found (looked for {path}): check the path; "
            f"relative paths are relative to the current directory"
        )
    if path.suffix != ".py":
        raise ValueError(f"model file '{target}' is not a .py file: models are Python files defining make_model()")
    stem = re.sub(r"\W", "_", path.stem)
    name = f"_shooting_model_{stem}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - .py files always get a loader
        raise ValueError(f"model file '{target}' cannot be imported by Python")
    module = importlib.util.module_from_spec(spec)
    # While the file runs it is a registered module (dataclasses and pickling
    # look it up) and its directory is importable (sibling helper modules);
    # both are undone afterwards so repeated loads do not accumulate.
    folder = str(path.parent)
    sys.modules[name] = module
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        raise ValueError(f"{target} failed to import: {_one_line(exc)}") from exc
    finally:
        sys.modules.pop(name, None)
        try:
            sys.path.remove(folder)
        except ValueError:  # the file removed it itself
            pass
    return module


def _import_module(target: str) -> ModuleType:
    if not _DOTTED.match(target):
        raise ValueError(
            f"model spec '{target}' is neither a .py path nor a module name like 'package.module': check the spelling"
        )
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (target == missing or target.startswith(missing + ".")):
            hint = ""
            if target in model_names():
                hint = f" (the built-in is loaded as '{target}' or 'shooting.models.{target}:make_model')"
            raise ValueError(
                f"cannot import module '{target}': no module named '{missing}'{hint}; "
                f"check the name, install the package, or give a .py path"
            ) from exc
        raise ValueError(f"module '{target}' failed to import: {_one_line(exc)}") from exc
    except (Exception, SystemExit) as exc:
        raise ValueError(f"module '{target}' failed to import: {_one_line(exc)}") from exc


def _call(module: ModuleType, target: str, attr: str | None, params: dict[str, object]) -> Model:
    if attr is None:
        if callable(getattr(module, "make_model", None)):
            attr = "make_model"
        elif isinstance(getattr(module, "model", None), Model):
            attr = "model"
        else:
            raise ValueError(
                f"{target} defines neither a function make_model nor a module-level Model named model: "
                f"add def make_model(**params) -> shooting.Model, or name the function as '{target}:function'"
            )
    where = f"{target}:{attr}"
    if not hasattr(module, attr):
        public = [n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n))]
        close = difflib.get_close_matches(attr, public, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise ValueError(f"{target} has no function '{attr}'{hint}: define it or name an existing one")
    obj = getattr(module, attr)
    if isinstance(obj, Model):
        _remember_scenario(module, target, obj)
        if params:
            raise ValueError(
                f"{where} is a Model, not a function, so the parameters {', '.join(sorted(params))} "
                f"cannot be applied: expose a factory function make_model(**params)"
            )
        return obj
    if not callable(obj) or inspect.isclass(obj):
        raise ValueError(f"{where} is a {type(obj).__name__}, not a function returning a shooting.Model")
    _check_keywords(obj, where, params)

    def call() -> object:
        try:
            return obj(**params)
        except TypeError as exc:
            raise ValueError(f"{where} rejected the parameters: {_one_line(exc)}") from exc

    result = user_call(where, call)
    if not isinstance(result, Model):
        raise ValueError(
            f"{where} returned {type(result).__name__}, not a shooting.Model: make it return shooting.Model(...)"
        )
    _remember_scenario(module, target, result)
    return result


def user_call(where: str, function: Callable[..., _T], *args: object, **kwargs: object) -> _T:
    """Call a function of the user's model file; what it raises becomes a one-line ValueError naming `where`.

    A ValueError passes unchanged (it already speaks to the user); any other
    exception, and ``SystemExit`` (a ``sys.exit()`` in the file would
    otherwise end the program with its status and no message, or with 0: a
    false success), becomes ``ValueError("<where> raised <Type>: <message>")``.
    ``KeyboardInterrupt`` propagates.

    Parameters
    ----------
    where : str
        ``"file.py:function"``, for the message.
    function : callable
    *args, **kwargs
        Its arguments.

    Returns
    -------
    object
        What `function` returned.
    """
    try:
        return function(*args, **kwargs)
    except ValueError:
        raise
    except SystemExit as exc:
        raise ValueError(f"{where} raised SystemExit({exc.code!r}): functions of a model file must return (or raise "
                         f"an exception), not exit the program") from None
    except Exception as exc:
        raise ValueError(f"{where} raised {_one_line(exc)}") from exc


def _remember_scenario(module: ModuleType, target: str, model: Model) -> None:
    factory = getattr(module, "scenario", None)
    if callable(factory):
        _SCENARIOS[model] = functools.partial(user_call, f"{target}:scenario", factory)
    sensors = getattr(module, "measurement", None)
    if callable(sensors):
        _MEASUREMENTS[model] = functools.partial(user_call, f"{target}:measurement", sensors)
    _ORIGINS[model] = module.__name__


def builtin_name(model: Model) -> str | None:
    """The built-in `model` is, or None: a user's model named like a built-in is not that built-in.

    A model `load_model` returned is a built-in when it came from a built-in's
    module (a model file named like a built-in is not). A model made another
    way (the built-in's ``make_model`` called directly, perhaps with other
    parameters) counts as the built-in of its name when its states, inputs
    and description are that built-in's.

    Parameters
    ----------
    model : Model

    Returns
    -------
    str or None
    """
    origin = _ORIGINS.get(model)
    if origin is not None:
        name = origin.removeprefix(_BUILTIN_PACKAGE)
        return name if origin.startswith(_BUILTIN_PACKAGE) and name in BUILTIN_MODELS else None
    if model.name not in BUILTIN_MODELS:
        return None
    nominal = load_model(model.name)
    same = (nominal.state_names, nominal.input_names, nominal.algebraic_names, nominal.description) == \
        (model.state_names, model.input_names, model.algebraic_names, model.description)
    return model.name if same else None


def _check_keywords(func: object, where: str, params: dict[str, object]) -> None:
    """Reject keywords the factory's signature cannot take, naming the valid ones."""
    try:
        signature = inspect.signature(func)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        return
    try:
        signature.bind(**params)
    except TypeError:
        kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        valid = [n for n, p in signature.parameters.items() if p.kind in kinds]
        unknown = [n for n in params if n not in valid]
        missing = [
            n for n, p in signature.parameters.items() if p.kind in kinds and p.default is p.empty and n not in params
        ]
        if unknown:
            close = difflib.get_close_matches(unknown[0], valid, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            listing = ", ".join(valid) if valid else "none"
            raise ValueError(f"{where}: unknown parameter '{unknown[0]}'{hint}; valid parameters: {listing}") from None
        if missing:
            raise ValueError(f"{where} needs the parameter(s) {', '.join(missing)}: pass them to load_model") from None
        raise ValueError(f"{where} cannot be called with keyword parameters {sorted(params)}") from None

