"""A tampered manifest.json is refused with a ValueError, never trusted (issue 14, item 8, memory safety).

`load_controller` used to size its numpy views over the C memory by the
manifest's ``horizon``: horizon + 1 made the prediction's last row the
struct's next array, 100000 read 1.6 MB past the struct and returned values
like 7e97. Sizes now come from the compiled library; a manifest that
disagrees, or is malformed (null fields, wrong types, missing keys, a deep
nesting, not an object), is a ValueError naming the field. A faithful
manifest still loads, and the C it loads agrees with the Python twin.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shooting
from shooting.codegen import export_controller, export_integrator, load_controller, load_step
from shooting.mpc import RTIController
from support import needs_gcc

pytestmark = needs_gcc

PENDULUM = shooting.load_model("pendulum")
DEEP = 100_000


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    ocp = shooting.MultipleShootingOCP(PENDULUM, 6, dt=0.05, Q=[10.0, 1.0], R=[0.1], soft_x_bounds=True)
    assert export_controller(ocp, root / "controller").ok
    assert export_integrator(shooting.build_integrator(PENDULUM, "rk4"), root / "step").ok
    toy = _toy_dae()
    assert export_integrator(shooting.build_integrator(toy, "radau2"), root / "dae").ok
    return {"controller": root / "controller", "step": root / "step", "dae": root / "dae"}


def _toy_dae() -> shooting.Model:
    import casadi as ca

    x, z, u = ca.SX.sym("x", 2), ca.SX.sym("z"), ca.SX.sym("u")
    return shooting.Model("toy", x, u, ca.vertcat(x[1], z - x[0]), z=z, alg=ca.exp(z) + z - x[0] - u, z0=[0.0],
                          dt=0.1)


def _tampered(source: Path, target: Path, change: Callable[[Any], Any] | str) -> Path:
    """A copy of the export `source` whose manifest is `change(manifest)` (or the text `change`)."""
    shutil.copytree(source, target)
    path = target / "manifest.json"
    data = change if isinstance(change, str) else change(json.loads(path.read_text()))
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return target


def _with(**fields: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(manifest: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(manifest)
        for dotted, value in fields.items():
            *parents, last = dotted.split("__")
            node = out
            for key in parents:
                node = node[key]
            if value is _DELETE:
                del node[last]
            else:
                node[last] = value
        return out
    return change


_DELETE = object()
_DEEP_VALUE = "[" * DEEP + "]" * DEEP

CONTROLLER_TAMPERING: dict[str, tuple[Callable[[Any], Any] | str, str]] = {
    "horizon + 1": (lambda m: {**m, "horizon": m["horizon"] + 1}, "horizon is 7 but the compiled C says 6"),
    "horizon - 1": (lambda m: {**m, "horizon": m["horizon"] - 1}, "horizon is 5 but the compiled C says 6"),
    "horizon 100000": (_with(horizon=100_000), "horizon is 100000"),
    "horizon null": (_with(horizon=None), "horizon must be an integer"),
    "horizon string": (_with(horizon="6"), "horizon must be an integer"),
    "horizon float": (_with(horizon=6.0), "horizon must be an integer"),
    "horizon true": (_with(horizon=True), "horizon must be an integer"),
    "horizon 0": (_with(horizon=0), "horizon must be an integer in 1"),
    "horizon missing": (_with(horizon=_DELETE), "horizon is missing"),
    "model null": (_with(model=None), "model must be a JSON object"),
    "model list": (_with(model=[1, 2]), "model must be a JSON object"),
    "model.nx + 1": (_with(model__nx=3), "model.nx is 3 but the compiled C says 2"),
    "model.nu 0": (_with(model__nu=0), "model.nu is 0 but the compiled C says 1"),
    "model.np 2": (_with(model__np=2), "model.np is 2"),
    "model.nx null": (_with(model__nx=None), "model.nx must be an integer"),
    "model.nx missing": (_with(model__nx=_DELETE), "model.nx is missing"),
    "name null": (_with(name=None), "name must be a string"),
    "name path": (_with(name="../../etc/x"), "name '../../etc/x' is not an identifier"),
    "name other": (_with(name="cartpole"), "cartpole_mpc.c is missing"),
    "real null": (_with(real=None), "real must be one of"),
    "real swapped": (_with(real="float"), "real is 'float' but the compiled C says a 8-byte real"),
    "dt null": (_with(dt=None), "dt must be"),
    "dt negative": (_with(dt=-0.05), "dt must be"),
    "dt string": (_with(dt="0.05"), "dt must be"),
    "kind missing": (_with(kind=_DELETE), "not a controller export"),
    "model_args list": (_with(model_args=[1]), "model_args must be an object"),
    "model_spec number": (_with(model_spec=3), "model_spec must be a string or null"),
    "model_spec unknown": (_with(model_spec="no_such_model"), "cannot rebuild model 'no_such_model'"),
    "model_spec too long": (_with(model_spec="a" * 300), "cannot rebuild model"),
    "model_spec other model": (_with(model_spec="cartpole"), "model cartpole has nx=4"),
    "top level list": (lambda m: [m], "the top level must be a JSON object, got an array"),
    "top level null": ("null", "the top level must be a JSON object, got null"),
    "top level number": ("3", "the top level must be a JSON object"),
    "deep nesting": ('{"horizon": ' + _DEEP_VALUE + "}", "nests arrays or objects deeper"),
    "deep top level": (_DEEP_VALUE, "nests arrays or objects deeper"),
    "truncated": ('{"name": "pendulum", "horiz', "not valid JSON"),
    "empty": ("", "not valid JSON"),
    "not utf-8": ("\udcff", "not UTF-8"),
}

STEP_TAMPERING: dict[str, tuple[Callable[[Any], Any] | str, str]] = {
    "inputs.x + 1": (_with(inputs__x=[3, 1]), "inputs.x is [3, 1] but the compiled C says [2, 1]"),
    "inputs.x - 1": (_with(inputs__x=[1, 1]), "inputs.x is [1, 1]"),
    "inputs.u 1000": (_with(inputs__u=[1000, 1]), "inputs.u is [1000, 1]"),
    "inputs.x null": (_with(inputs__x=None), "inputs.x must be a shape"),
    "inputs.x short": (_with(inputs__x=[2]), "inputs.x must be a shape"),
    "inputs.x negative": (_with(inputs__x=[-2, 1]), "inputs.x must be a shape"),
    "inputs null": (_with(inputs=None), "inputs must be a JSON object"),
    "inputs missing": (_with(inputs=_DELETE), "inputs is missing"),
    "inputs.z0 added": (_with(inputs__z0=[1, 1]), "inputs.z0 is [1, 1] but the compiled C says absent"),
    "outputs.A wrong": (_with(outputs__A=[3, 3]), "outputs.A is [3, 3]"),
    "outputs.A removed": (_with(outputs__A=_DELETE), "outputs.A is 'absent'"),
    "outputs string": (_with(outputs="x_next"), "outputs must be a JSON object"),
    "step_function other": (_with(step_function="system"), "step_function is 'system'"),
    "step_function null": (_with(step_function=None), "step_function must be a string"),
    "name null": (_with(name=None), "name must be a string"),
    "name int": (_with(name=5), "name must be a string"),
    "real swapped": (_with(real="float"), "real is 'float'"),
    "dt zero": (_with(dt=0), "dt must be"),
    "kind controller": (_with(kind="controller"), "not an integrator export"),
    "top level string": ('"manifest"', "the top level must be a JSON object, got a string"),
    "deep nesting": ('{"inputs": {"x": ' + _DEEP_VALUE + "}}", "nests arrays or objects deeper"),
}

DAE_TAMPERING: dict[str, tuple[Callable[[Any], Any] | str, str]] = {
    "inputs.z0 + 1": (_with(inputs__z0=[2, 1]), "inputs.z0 is [2, 1] but the compiled C says [1, 1]"),
    "inputs.z0 removed": (_with(inputs__z0=_DELETE), "inputs.z0 is 'absent'"),
    "z0 too long": (_with(z0=[0.0, 0.0, 0.0]), "z0 is '3 values'"),
    "z0 not numbers": (_with(z0=["a"]), "z0 must be numbers"),
    "z0 NaN": ('{"z0": [NaN]}', "z0"),
}


@pytest.mark.parametrize("case", sorted(CONTROLLER_TAMPERING))
def test_tampered_controller_manifest_is_a_value_error(exports: dict[str, Path], tmp_path: Path, case: str) -> None:
    change, message = CONTROLLER_TAMPERING[case]
    if isinstance(change, str) and change == "\udcff":
        target = _tampered(exports["controller"], tmp_path / "t", "{}")
        (target / "manifest.json").write_bytes(b'{"name": "\xff"}')
    else:
        target = _tampered(exports["controller"], tmp_path / "t", change)
    with pytest.raises(ValueError, match=_escaped(message)):
        load_controller(target)


@pytest.mark.parametrize("case", sorted(STEP_TAMPERING))
def test_tampered_step_manifest_is_a_value_error(exports: dict[str, Path], tmp_path: Path, case: str) -> None:
    change, message = STEP_TAMPERING[case]
    with pytest.raises(ValueError, match=_escaped(message)):
        load_step(_tampered(exports["step"], tmp_path / "t", change))


@pytest.mark.parametrize("case", sorted(DAE_TAMPERING))
def test_tampered_dae_step_manifest_is_a_value_error(exports: dict[str, Path], tmp_path: Path, case: str) -> None:
    change, message = DAE_TAMPERING[case]
    if isinstance(change, str):  # a field replaced in the faithful manifest's text
        text = (exports["dae"] / "manifest.json").read_text()
        manifest = json.loads(text)
        manifest["z0"] = "PLACEHOLDER"
        change = json.dumps(manifest).replace('"PLACEHOLDER"', "[NaN]")
    with pytest.raises(ValueError, match=_escaped(message)):
        load_step(_tampered(exports["dae"], tmp_path / "t", change))


def _escaped(message: str) -> str:
    return "".join("\\" + c if c in ".[]()*+?^$|{}\\" else c for c in message)


def test_a_faithful_manifest_loads_and_the_c_runs(exports: dict[str, Path]) -> None:
    ctrl = load_controller(exports["controller"])
    assert ctrl.horizon == 6 and ctrl.mem_bytes > 0
    ocp = shooting.MultipleShootingOCP(PENDULUM, 6, dt=0.05, Q=[10.0, 1.0], R=[0.1], soft_x_bounds=True)
    x0 = PENDULUM.x0
    c_traj = shooting.simulate_closed_loop(ctrl, x0, 5, progress=False)
    py_traj = shooting.simulate_closed_loop(RTIController(ocp), x0, 5, progress=False)
    np.testing.assert_allclose(c_traj.u, py_traj.u, rtol=1e-8, atol=1e-8 * np.abs(py_traj.u).max())
    assert ctrl.x_pred is not None and ctrl.x_pred.shape == (7, 2) and np.isfinite(ctrl.x_pred).all()
    step = load_step(exports["step"])
    F = shooting.build_integrator(PENDULUM, "rk4")
    x_next, A, B = step([0.3, -0.2], [1.5], None, 0.0, 0.05)
    ref = [np.array(v) for v in F([0.3, -0.2], 1.5, [], 0.0, 0.05)]
    np.testing.assert_allclose(x_next, ref[0].ravel(), rtol=1e-14)
    np.testing.assert_allclose(A, ref[1], rtol=1e-13, atol=1e-15)
    dae = load_step(exports["dae"])
    assert dae.nz == 1 and len(dae([1.0, 0.5], [0.3], None, 0.0, 0.1, [0.0])) == 4


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every field of a JSON value (objects and arrays, recursively), as key paths."""
    paths = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            paths += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node[:3]):
            paths += _paths(value, (*prefix, i))
    return paths


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False)
                     | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)


@pytest.mark.parametrize("kind", ["controller", "step"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_mutated_field_loads_correctly_or_is_a_value_error(exports: dict[str, Path], tmp_path_factory:
                                                               pytest.TempPathFactory, kind: str,
                                                               data: st.DataObject) -> None:
    source = exports[kind]
    manifest = json.loads((source / "manifest.json").read_text())
    paths = _paths(manifest)
    path = data.draw(st.sampled_from(paths))
    mutation = data.draw(st.sampled_from(["replace", "delete", "nest"]))
    mutated = copy.deepcopy(manifest)
    node = mutated
    for key in path[:-1]:
        node = node[key]
    if mutation == "delete":
        del node[path[-1]]
    elif mutation == "nest":
        node[path[-1]] = [node[path[-1]]]
    else:
        node[path[-1]] = data.draw(_JSON)
    target = _tampered(source, tmp_path_factory.mktemp("fuzz") / "t", lambda _: mutated)
    try:
        loaded = load_controller(target) if kind == "controller" else load_step(target)
    except ValueError:
        return
    # Loaded: then what it reads from the C is the truth, whatever the manifest says elsewhere.
    if kind == "controller":
        assert isinstance(loaded, shooting.codegen.HostController)
        loaded.step(PENDULUM.x0, 0.0)
        assert loaded.horizon == 6 and loaded.x_pred is not None and loaded.x_pred.shape == (7, 2)
        assert np.isfinite(loaded.x_pred).all() and np.abs(loaded.x_pred).max() < 1e3
    else:
        assert isinstance(loaded, shooting.codegen.HostStep)
        assert (loaded.nx, loaded.nu, loaded.np) == (2, 1, 0)
        x_next = loaded([0.3, -0.2], [1.5], None, 0.0, 0.05)[0]
        assert x_next is not None and x_next.shape == (2,) and np.isfinite(x_next).all()


def test_an_output_directory_with_a_deep_manifest_is_refused_not_a_crash(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text(_DEEP_VALUE)
    F = shooting.build_integrator(PENDULUM, "rk4")
    with pytest.raises(ValueError, match="not written by shooting"):
        export_integrator(F, out)
