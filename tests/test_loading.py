"""load_model: built-in names, files, import paths, and a clear ValueError for every mistake."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

import shooting
from shooting.loading import load_model, model_names

ROBOT = """
import casadi as ca
import shooting

def make_model(*, k=1.0):
    x = ca.SX.sym("x", 2)
    u = ca.SX.sym("u", 1)
    return shooting.Model("robot", x, u, ca.vertcat(x[1], -k * x[0] + u[0]))

def other(*, k=2.0):
    return make_model(k=k)

def not_a_model():
    return 42

def picky(*, k=1.0):
    if k <= 0:
        raise ValueError(f"robot: k = {k} must be positive")
    return make_model(k=k)

def broken():
    return {}["missing"]

def free_symbol():
    x = ca.SX.sym("x")
    a = ca.SX.sym("a")
    return shooting.Model("bad", x, ca.SX.sym("u"), -a * x)

NUMBER = 3
"""


def write(folder, name: str, text: str):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def rhs(model: shooting.Model, x, u) -> np.ndarray:
    return np.array(model.f(x, u, model.p0, 0.0)).reshape(-1)


# ---------------------------------------------------------------------------
# What works


def test_model_names_are_sorted_builtins():
    assert model_names() == ["cartpole", "dip", "pendulum", "quadrotor", "stiff_chain", "two_link_arm", "vanderpol"]
    assert shooting.loading.model_names is model_names


@pytest.mark.parametrize("name", ["cartpole", "dip", "pendulum", "quadrotor", "stiff_chain", "two_link_arm",
                                  "vanderpol"])
def test_builtin_loads_from_any_directory(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = load_model(name)
    assert isinstance(model, shooting.Model) and model.name == name


def test_params_are_forwarded_to_the_builtin_factory():
    x, u = [0.1, 0.5, -0.3, 1.2], [3.0]
    default, heavy = load_model("cartpole"), load_model("cartpole", M=2.0)
    assert not np.allclose(rhs(default, x, u), rhs(heavy, x, u))
    np.testing.assert_allclose(rhs(heavy, x, u), rhs(load_model("shooting.models.cartpole:make_model", M=2.0), x, u))


def test_file_path_relative_to_the_current_directory(tmp_path, monkeypatch):
    write(tmp_path, "my/dir/robot.py", ROBOT)
    monkeypatch.chdir(tmp_path)
    model = load_model("my/dir/robot.py")
    assert model.name == "robot"
    np.testing.assert_allclose(rhs(model, [1.0, 0.0], [0.0]), [0.0, -1.0])
    np.testing.assert_allclose(rhs(load_model("my/dir/robot.py", k=3.0), [1.0, 0.0], [0.0]), [0.0, -3.0])
    monkeypatch.chdir(tmp_path / "my")
    assert load_model("dir/robot.py").name == "robot"


def test_file_path_with_function_name(tmp_path):
    path = write(tmp_path, "robot.py", ROBOT)
    model = load_model(f"{path}:other")
    np.testing.assert_allclose(rhs(model, [1.0, 0.0], [0.0]), [0.0, -2.0])
    model = load_model(f"{path}:other", k=5.0)
    np.testing.assert_allclose(rhs(model, [1.0, 0.0], [0.0]), [0.0, -5.0])


def test_file_with_module_level_model(tmp_path):
    path = write(
        tmp_path,
        "plain.py",
        """
        import casadi as ca
        from shooting import Model
        x = ca.SX.sym("x")
        model = Model("plain", x, ca.SX.sym("u", 0), -x)
        """,
    )
    assert load_model(str(path)).name == "plain"
    assert load_model(f"{path}:model").name == "plain"
    with pytest.raises(ValueError, match=r"plain.py:model is a Model, not a function, so the parameters k cannot"):
        load_model(str(path), k=1.0)


def test_file_may_import_siblings_and_define_dataclasses(tmp_path):
    write(tmp_path, "pkgdir/helper_consts_for_test.py", "STIFFNESS = 7.0\n")
    path = write(
        tmp_path,
        "pkgdir/robot2.py",
        """
        from dataclasses import dataclass
        import casadi as ca
        import shooting
        from helper_consts_for_test import STIFFNESS

        @dataclass(frozen=True)
        class Params:
            k: float = STIFFNESS  # stiffness [N/m]

        def make_model(**params):
            prm = Params(**params)
            x = ca.SX.sym("x", 2)
            return shooting.Model("robot2", x, ca.SX.sym("u"), ca.vertcat(x[1], -prm.k * x[0]))
        """,
    )
    path_before, modules_before = list(sys.path), set(sys.modules)
    model = load_model(str(path))
    np.testing.assert_allclose(rhs(model, [1.0, 0.0], [0.0]), [0.0, -7.0])
    assert sys.path == path_before
    assert not [m for m in set(sys.modules) - modules_before if "robot2" in m]
    sys.modules.pop("helper_consts_for_test", None)


def test_loading_a_file_twice_runs_it_afresh(tmp_path):
    path = write(tmp_path, "robot.py", ROBOT)
    first = load_model(str(path))
    path.write_text(ROBOT.replace('"robot"', '"robot_v2"'))
    assert first.name == "robot" and load_model(str(path)).name == "robot_v2"


def test_package_module_function():
    model = load_model("shooting.models.cartpole:make_model")
    assert model.name == "cartpole"
    assert load_model("shooting.models.pendulum").name == "pendulum"  # make_model by default


def test_spec_with_surrounding_whitespace():
    assert load_model("  vanderpol ").name == "vanderpol"


# ---------------------------------------------------------------------------
# Every mistake is a one-line ValueError naming the culprit


def one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_unknown_builtin_lists_valid_names_and_close_match():
    with pytest.raises(ValueError, match=r"unknown model 'cartpol' \(did you mean 'cartpole'\?\)") as excinfo:
        load_model("cartpol")
    assert "pendulum" in one_line(excinfo) and "vanderpol" in one_line(excinfo)
    with pytest.raises(ValueError, match=r"unknown model 'zzz': the built-in models are cartpole, dip, pendulum"):
        load_model("zzz")


def test_unknown_builtin_hints_at_a_local_file(tmp_path, monkeypatch):
    write(tmp_path, "robot.py", ROBOT)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"give the path 'robot.py'"):
        load_model("robot")


def test_missing_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"model file 'models/robot.py' not found .*current directory") as excinfo:
        load_model("models/robot.py")
    one_line(excinfo)
    (tmp_path / "adir").mkdir()
    with pytest.raises(ValueError, match=r"'adir/' is a directory"):
        load_model("adir/")
    write(tmp_path, "notes/robot.txt", "hello")
    with pytest.raises(ValueError, match=r"'notes/robot.txt' is not a .py file"):
        load_model("notes/robot.txt")


def test_file_that_raises_on_import(tmp_path, monkeypatch):
    write(tmp_path, "models/robot.py", "import casadi\nfoo\n")
    monkeypatch.chdir(tmp_path)
    modules_before = set(sys.modules)
    with pytest.raises(ValueError) as excinfo:
        load_model("models/robot.py")
    assert one_line(excinfo) == "models/robot.py failed to import: NameError: name 'foo' is not defined"
    assert not [m for m in set(sys.modules) - modules_before if "robot" in m]
    write(tmp_path, "syntax.py", "def f(:\n")
    with pytest.raises(ValueError, match=r"syntax.py failed to import: SyntaxError"):
        load_model("syntax.py")
    write(tmp_path, "exits.py", "import sys\nsys.exit(3)\n")
    with pytest.raises(ValueError, match=r"exits.py failed to import: SystemExit: 3"):
        load_model("exits.py")


def test_missing_function(tmp_path):
    path = write(tmp_path, "robot.py", ROBOT)
    with pytest.raises(ValueError, match=r"robot.py has no function 'make_modle' \(did you mean 'make_model'\?\)"):
        load_model(f"{path}:make_modle")
    empty = write(tmp_path, "empty.py", "X = 1\n")
    with pytest.raises(ValueError, match=r"empty.py defines neither a function make_model nor .* named model"):
        load_model(str(empty))
    with pytest.raises(ValueError, match=r"robot.py:NUMBER is a int, not a function"):
        load_model(f"{path}:NUMBER")


def test_function_that_does_not_return_a_model(tmp_path):
    path = write(tmp_path, "robot.py", ROBOT)
    with pytest.raises(ValueError, match=r"robot.py:not_a_model returned int, not a shooting.Model"):
        load_model(f"{path}:not_a_model")
    with pytest.raises(ValueError, match=r"robot.py:broken raised KeyError: 'missing'"):
        load_model(f"{path}:broken")


def test_bad_params_for_builtin_propagate_the_factory_message():
    unknown = r"^cartpole: unknown parameter 'MM' \(did you mean 'M'\?\); valid parameters: M, m"
    with pytest.raises(ValueError, match=unknown):
        load_model("cartpole", MM=2.0)
    with pytest.raises(ValueError, match=r"^cartpole: parameter m = -1.0 must be a positive number$"):
        load_model("cartpole", m=-1.0)


def test_bad_params_for_a_file_factory(tmp_path):
    path = write(tmp_path, "robot.py", ROBOT)
    # a keyword the signature does not take: Python's TypeError becomes a ValueError
    unknown = r"robot.py:make_model: unknown parameter 'kk' \(did you mean 'k'\?\); valid parameters: k"
    with pytest.raises(ValueError, match=unknown):
        load_model(str(path), kk=1.0)
    # the factory's own ValueError is propagated unchanged
    with pytest.raises(ValueError, match=r"^robot: k = -1.0 must be positive$"):
        load_model(f"{path}:picky", k=-1.0)
    # a TypeError raised inside the factory is reported as a ValueError too
    with pytest.raises(ValueError, match=r"robot.py:make_model rejected the parameters: TypeError"):
        load_model(str(path), k="stiff")


def test_model_with_free_symbol_keeps_the_model_message(tmp_path):
    path = write(tmp_path, "robot.py", ROBOT)
    with pytest.raises(ValueError, match=r"^xdot depends on free symbol\(s\) 'a'"):
        load_model(f"{path}:free_symbol")


@pytest.mark.parametrize("spec", [None, 3, ["cartpole"], b"cartpole"])
def test_spec_must_be_a_string(spec):
    with pytest.raises(ValueError, match=r"model spec must be a string .* got \w+"):
        load_model(spec)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", r"model spec is empty"),
        ("robot.py:", r"ends with ':': name the function after it"),
        ("robot.py:make-model", r"'make-model' after ':' is not a Python identifier"),
        (":make_model", r"has nothing before ':'"),
        ("no_such_pkg_xyz.mod:f", r"cannot import module 'no_such_pkg_xyz.mod': no module named 'no_such_pkg_xyz'"),
        ("cartpole:make_model", r"cannot import module 'cartpole'.*'shooting.models.cartpole:make_model'"),
        ("shooting.models.cartpole:nope", r"shooting.models.cartpole has no function 'nope'"),
        ("1abc.def:f", r"neither a .py path nor a module name"),
    ],
)
def test_malformed_or_unknown_specs(spec, message):
    with pytest.raises(ValueError, match=message) as excinfo:
        load_model(spec)
    one_line(excinfo)


def test_module_that_fails_inside_its_own_imports(tmp_path, monkeypatch):
    write(tmp_path, "brokenpkg_for_test/__init__.py", "")
    write(tmp_path, "brokenpkg_for_test/mod.py", "import not_installed_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ValueError,
        match=r"module 'brokenpkg_for_test.mod' failed to import: ModuleNotFoundError: "
        r"No module named 'not_installed_dependency_xyz'",
    ):
        load_model("brokenpkg_for_test.mod:make_model")
    for name in [m for m in sys.modules if m.startswith("brokenpkg_for_test")]:
        del sys.modules[name]


# ---------------------------------------------------------------------------
# User code that exits or raises: a one-line ValueError naming file and function, never SystemExit

EXITS = """
import sys
import casadi as ca
import shooting

def make_model():
    x, u = ca.SX.sym("x"), ca.SX.sym("u")
    return shooting.Model("one", x, u, -x + u, x0=[1.0], dt=0.1)

def quits():
    sys.exit(0)

def fails():
    sys.exit(4)

def interrupted():
    raise KeyboardInterrupt

def scenario(model):
    {body}
"""


@pytest.mark.parametrize("function, shown", [("quits", "SystemExit(0)"), ("fails", "SystemExit(4)")])
def test_a_factory_that_calls_sys_exit_is_a_value_error(tmp_path, function, shown):
    path = write(tmp_path, "exits.py", EXITS.format(body="return None"))
    with pytest.raises(ValueError) as excinfo:
        load_model(f"{path}:{function}")
    assert one_line(excinfo).startswith(f"{path}:{function} raised {shown}: functions of a model file must return")
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C is not a user error
        load_model(f"{path}:interrupted")


@pytest.mark.parametrize("body, shown", [
    ("raise RuntimeError('no scenario today')", "RuntimeError: no scenario today"),
    ("sys.exit(0)", "SystemExit(0)"),
    ("sys.exit('bye')", "SystemExit('bye')"),
    ("return {}['x']", "KeyError: 'x'"),
])
def test_a_scenario_function_that_raises_or_exits_is_a_value_error(tmp_path, body, shown):
    path = write(tmp_path, "exits.py", EXITS.format(body=body))
    model = load_model(str(path))
    with pytest.raises(ValueError) as excinfo:
        shooting.default_scenario(model)
    assert one_line(excinfo).startswith(f"{path}:scenario raised {shown}")


def test_reference_and_parameter_functions_that_raise_are_value_errors():
    model = load_model("vanderpol")

    def reference(t):
        raise ZeroDivisionError("t = 0")

    with pytest.raises(ValueError, match=r"^reference\(t\) at t = 0 raised ZeroDivisionError: t = 0$"):
        shooting.sample_horizon(model, 0.0, 0.1, 3, reference=reference)
    with pytest.raises(ValueError, match=r"^parameters\(t\) at t = 0 raised SystemExit\(2\)"):
        shooting.sample_horizon(model, 0.0, 0.1, 3, parameters=lambda t: sys.exit(2))


@pytest.mark.parametrize("command", ["mpc", "controller"])
@pytest.mark.parametrize("make, scen", [("sys.exit(0)", "return None"), ("sys.exit(3)", "return None"),
                                        ("return one()", "raise RuntimeError('boom')"),
                                        ("return one()", "sys.exit(0)")])
def test_cli_model_files_that_exit_or_raise_exit_2_in_one_line_and_write_nothing(tmp_path, command, make, scen):
    import subprocess
    text = (f"import sys\nimport casadi as ca\nimport shooting\n\ndef one():\n"
            f"    x, u = ca.SX.sym('x'), ca.SX.sym('u')\n"
            f"    return shooting.Model('one', x, u, -x + u, x0=[1.0], dt=0.1)\n\ndef make_model():\n    {make}\n\n"
            f"def scenario(model):\n    {scen}\n")
    (tmp_path / "user.py").write_text(text)
    proc = subprocess.run([sys.executable, "-m", "shooting.cli", command, "--model", "user.py", "--out", "out", "-q"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shooting-codegen: error: user.py:"), proc.stderr
    assert ("make_model raised SystemExit" in lines[0]) if "exit" in make else ("scenario raised" in lines[0])
    assert not (tmp_path / "out").exists()
