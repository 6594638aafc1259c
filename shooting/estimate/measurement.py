"""The measurement model: a user's ``measurement(x, u, p)`` (or the model's default sensors) as one CasADi Function.

A measurement is written as `path_constraints` are: a Python function of SX
symbols ``x (nx), u (nu), p (np)`` returning an SX column of the ``ny``
measured quantities, ``y = h(x, u, p)``. It is called once, with fresh
symbols, and becomes ``h(x, u, p) -> y`` (`measurement_function`), whose
Jacobian ``H = dh/dx`` the EKF uses and whose residuals the MHE weighs.

Default sensors: a model file (or module) may define ``measurement(x, u, p)``
beside ``make_model``; `shooting.load_model` remembers it and
`default_measurement` finds it. Every built-in model names its sensors so
(cart-pole: cart position and pole angle; pendulum: the angle; quadrotor:
position and attitude quaternion; ...).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import casadi as ca
import numpy as np

from shooting.loading import builtin_name, measurement_factory, user_call
from shooting.model import Model

__all__ = ["MeasurementFunction", "default_measurement", "measurement_function", "sensor_count", "sensor_names"]

#: ``measurement(x, u, p) -> SX column (ny)``: the measured quantities as a function of the state, the input
#: held over the last interval and the model parameters.
MeasurementFunction = Callable[[ca.SX, ca.SX, ca.SX], Any]


def default_measurement(model: Model) -> MeasurementFunction:
    """The default sensors of `model`: the ``measurement(x, u, p)`` of the file or module it came from.

    Parameters
    ----------
    model : Model
        A built-in model (however it was made) or one loaded by `shooting.load_model` from a file or module
        that defines ``measurement(x, u, p)`` beside ``make_model``.

    Returns
    -------
    callable ``(x, u, p) -> casadi.SX``
        ``x`` (nx, 1), ``u`` (nu, 1), ``p`` (np, 1) symbols in; an SX column (ny, 1) out.

    Raises
    ------
    ValueError
        The model names no sensors.
    """
    if not isinstance(model, Model):
        raise ValueError(f"model must be a shooting.Model (see shooting.load_model), got {type(model).__name__}")
    found = measurement_factory(model)
    if found is not None:
        return found
    builtin = builtin_name(model)
    if builtin is not None:
        # A built-in made without load_model: its module by name (the models sit above this layer's imports).
        sensors = getattr(importlib.import_module(f"shooting.models.{builtin}"), "measurement", None)
        if callable(sensors):
            return sensors
    raise ValueError(f"model {model.name} names no sensors: pass measurement(x, u, p) -> SX column (e.g. "
                     f"lambda x, u, p: x[0]), or define measurement(x, u, p) beside make_model in its file")


def sensor_count(model: Model) -> int:
    """How many quantities the model's default sensors measure."""
    h = default_measurement(model)
    return int(ca.SX(h(ca.SX.sym("x", model.nx), ca.SX.sym("u", model.nu), ca.SX.sym("p", model.np))).size1())


def measurement_function(model: Model, measurement: MeasurementFunction | None) -> ca.Function:
    """``h(x, u, p) -> y``: the measurement as a named CasADi Function, checked.

    Parameters
    ----------
    model : Model
    measurement : callable ``(x, u, p) -> casadi.SX`` or None
        An SX column (ny >= 1) in its arguments only; None: `default_measurement`.

    Returns
    -------
    casadi.Function
        Inputs ``x (nx), u (nu), p (np)``, output ``y (ny)``; no free symbols.

    Raises
    ------
    ValueError
        Not callable, not an SX column (MX, a matrix, empty), symbols other than its arguments (the model's own
        ``model.x`` included: write it in the arguments it is given), or not finite at the model's nominal point.
    """
    if measurement is None:
        measurement = default_measurement(model)
    if not callable(measurement):
        raise ValueError(f"measurement must be a function (x, u, p) -> SX column or None (the model's default "
                         f"sensors), got {type(measurement).__name__}")
    x, u, p = ca.SX.sym("x", model.nx), ca.SX.sym("u", model.nu), ca.SX.sym("p", model.np)
    y = _column(user_call("measurement", measurement, x, u, p))
    allowed = {s.element_hash() for v in (x, u, p) for s in ca.symvar(v)}
    free = [s.name() for s in ca.symvar(y) if s.element_hash() not in allowed]
    if free:
        raise ValueError(f"measurement depends on symbol(s) {', '.join(repr(n) for n in free[:5])} that are not its "
                         f"arguments x, u, p: write it in the symbols it is given, e.g. lambda x, u, p: "
                         f"ca.vertcat(x[0], x[1])")
    h = ca.Function("h", [x, u, p], [y], ["x", "u", "p"], ["y"])
    value = np.array(h(model.x0, model.u0, model.p0), dtype=float).reshape(-1)
    if not np.isfinite(value).all():
        rows = ", ".join(f"y[{i}]" for i in np.flatnonzero(~np.isfinite(value))[:5])
        raise ValueError(f"measurement is not finite at the model's nominal point (x0, u0, p0): {rows}; write "
                         f"sensors that are defined there")
    return h


def _column(expr: object) -> ca.SX:
    """A measurement's value as a dense SX column, or ValueError saying what it is instead."""
    if isinstance(expr, (list, tuple)):
        try:
            expr = ca.vertcat(*expr)
        except Exception:  # noqa: BLE001 - anything casadi rejects is a user error here
            raise ValueError("measurement returned a list that casadi cannot stack: return an SX column "
                             "(ca.vertcat(...))") from None
    if isinstance(expr, ca.MX):
        raise ValueError("measurement returned a casadi.MX expression: write it in the SX symbols it is given")
    if isinstance(expr, (ca.DM, np.ndarray, int, float)):
        expr = ca.SX(ca.DM(expr))
    if not isinstance(expr, ca.SX):
        raise ValueError(f"measurement must return a casadi.SX column, got {type(expr).__name__}")
    if expr.size2() != 1 or expr.size1() < 1:
        raise ValueError(f"measurement must return an SX column of at least one row, got shape {expr.shape}: "
                         f"stack the sensors with ca.vertcat(...)")
    return ca.densify(expr)


def sensor_names(model: Model, h: ca.Function) -> tuple[str, ...]:
    """A label per measured row: the state's name where the row is a state itself (``theta``), else ``y<i>``.

    Parameters
    ----------
    model : Model
    h : casadi.Function
        From `measurement_function`.

    Returns
    -------
    tuple of str, length ny
    """
    x = h.sx_in(0)
    y = h(x, h.sx_in(1), h.sx_in(2))
    states = {x[i].element_hash(): model.state_names[i] for i in range(model.nx)}
    names = []
    for i in range(y.size1()):
        row = y[i]
        names.append(states.get(row.element_hash(), f"y{i}") if row.is_symbolic() else f"y{i}")
    return tuple(names)
