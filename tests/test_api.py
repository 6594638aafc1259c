"""Walk the public API: docstrings, annotations, keyword names, named Function I/O."""

from __future__ import annotations

import inspect

import pytest

import shooting

PUBLIC = [name for name in shooting.__all__ if not name.startswith("_")]


def test_all_names_exist():
    for name in PUBLIC:
        assert hasattr(shooting, name), name


@pytest.mark.parametrize("name", PUBLIC)
def test_docstring_and_annotations(name):
    obj = getattr(shooting, name)
    doc = inspect.getdoc(obj)
    assert doc and len(doc) > 40, f"{name} needs a docstring"
    if getattr(obj, "_is_protocol", False):
        return  # a typing.Protocol has no constructor of its own
    target = obj.__init__ if inspect.isclass(obj) else obj
    sig = inspect.signature(target)
    params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
    if params:
        assert "Parameters" in doc or "Parameters" in (inspect.getdoc(target) or ""), f"{name}: no Parameters section"
    for p in params:
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and name not in ("load_model",):
            pytest.fail(f"{name} takes *{p.name}: unknown options must be an error, not swallowed")
        assert p.annotation is not inspect.Parameter.empty, f"{name}({p.name}) is not annotated"


def test_contract_signatures():
    """The keyword names users write, exactly as in CONTRACT.md."""
    sig = inspect.signature(shooting.build_integrator)
    assert list(sig.parameters)[:4] == ["model", "method", "steps", "sensitivities"]
    assert sig.parameters["method"].default == "rk4"
    assert sig.parameters["steps"].default == 1
    assert sig.parameters["sensitivities"].default == "forward"
    sig = inspect.signature(shooting.Model)
    assert list(sig.parameters)[:6] == ["name", "x", "u", "xdot", "p", "t"]
    for kw in ("state_names", "input_names", "x0", "x_min", "x_max", "u_min", "u_max"):
        assert sig.parameters[kw].kind is inspect.Parameter.KEYWORD_ONLY
    sig = inspect.signature(shooting.ButcherTableau)
    assert list(sig.parameters)[:3] == ["A", "b", "c"]
    for kw in ("b_hat", "name", "order", "embedded_order"):
        assert sig.parameters[kw].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("model_name", shooting.model_names())
def test_every_function_has_named_io(model_name):
    model = shooting.load_model(model_name)
    z = ["z"] if model.nz else []  # algebraic states: appended last
    assert model.f.name_in() == ["x", "u", "p", "t", *z] and model.f.name_out() == ["xdot"]
    F = shooting.build_integrator(model, "rk4", 8)
    assert F.name_in() == ["x", "u", "p", "t0", "dt", *[n + "0" for n in z]]
    assert F.name_out() == ["x_next", "A", "B", *z]
    assert not F.has_free()
