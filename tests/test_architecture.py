"""The import graph of `shooting` (and its example models), read from the source with `ast`: nothing is imported."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"shooting": ROOT / "shooting", "shooting.models": ROOT / "models"}
# Past ~600 lines a module, past ~80 lines of code (docstring aside) a function, is usually two ideas.
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 600, 80

FOUNDATION = {"shooting._cache", "shooting._c_text", "shooting._cli_text", "shooting._files", "shooting._interrupt",
              "shooting._solver_call", "shooting._text", "shooting._tools", "shooting._validate", "shooting._version",
              "shooting.options"}
ALLOWED = {
    "foundation": set(),
    "tableaus": {"foundation"},
    "model": {"foundation"},
    "qp": {"foundation"},
    "integrate": {"foundation", "tableaus", "model"},
    "mpc": {"foundation", "tableaus", "model", "integrate", "qp"},
    "codegen": {"foundation", "model", "integrate", "mpc", "qp"},
    "estimate": {"foundation", "tableaus", "model", "integrate", "mpc", "qp", "codegen"},
    "controller": {"foundation", "model", "integrate", "mpc", "qp", "codegen", "estimate"},
    "sweeps": {"foundation", "model", "mpc", "codegen", "controller", "estimate"},
    "cli": {"foundation", "tableaus", "model", "integrate", "mpc", "codegen", "controller", "sweeps", "estimate"},
    "models": {"foundation", "model", "mpc"},
}
# The imports against the direction, by design: codegen's package forwards the contract's controller and estimator names
# (``from shooting.codegen import export_controller``, their first home) to the controller on first use.
FORWARDS = {("shooting.codegen", "shooting.controller"), ("shooting.codegen", "shooting.estimate")}


def _layer(module: str) -> str | None:
    if module in FOUNDATION:
        return "foundation"
    if module in {"shooting.model", "shooting.loading"}:
        return "model"
    if module in {"shooting.cli", "shooting._cli_parser"}:
        return "cli"
    for name in ("tableaus", "integrate", "mpc", "codegen", "controller", "qp", "models", "sweeps", "estimate"):
        if module == f"shooting.{name}" or module.startswith(f"shooting.{name}."):
            return name
    return None  # the package root: not a layer


@functools.cache
def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for shooting/ and models/ (installed as shooting.models)."""
    found = {}
    for package, folder in SOURCES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if package == "shooting" and parts[0] == "models":
                continue  # not a module of the installed package
            parts = parts[:-1] if parts[-1] == "__init__" else parts
            found[".".join((package, *parts))] = path
    return found


@dataclass
class _Scan:
    edges: list[tuple[str, str, int]] = field(default_factory=list)  # (importer, imported, line)
    root_imports: list[tuple[str, int]] = field(default_factory=list)  # importers of the package root
    private: list[tuple[str, str, int]] = field(default_factory=list)  # (importer, private name, line)
    casadi: list[tuple[str, int]] = field(default_factory=list)  # every casadi import, TYPE_CHECKING included


def _walk(node: ast.AST, in_type_checking: bool = False):
    """Every node under `node`, each with whether it lies in the body of an ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        yield child, in_type_checking
        test = getattr(child, "test", None)
        if isinstance(child, ast.If) and "TYPE_CHECKING" in {getattr(test, "id", None), getattr(test, "attr", None)}:
            for stmt in child.body:
                yield stmt, True
                yield from _walk(stmt, True)
            for stmt in child.orelse:
                yield stmt, in_type_checking
                yield from _walk(stmt, in_type_checking)
        else:
            yield from _walk(child, in_type_checking)


@functools.cache
def _scan() -> _Scan:
    modules, scan = _modules(), _Scan()

    def owner(name: str) -> str:  # the longest prefix of `name` that is a module
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        bound: dict[str, str] = {}  # local name -> shooting module it is bound to
        targets: list[tuple[str, int]] = []
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node, type_only in _walk(tree):
            names: list[str] = []  # imported from, for casadi
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
                if node.level:  # relative: resolve against this module's package
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    names = [".".join([*parts, node.module] if node.module else parts)]
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func, arg = node.func, node.args[0].value
                if getattr(func, "attr", getattr(func, "id", None)) in {"import_module", "__import__"}:
                    names = [arg] if isinstance(arg, str) else []
            if any(name == "casadi" or name.startswith("casadi.") for name in names):
                scan.casadi.append((module, node.lineno))
            names = [name for name in names if name == "shooting" or name.startswith("shooting.")]
            if type_only or not names:
                continue
            found: list[str] = []
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    sub = f"{names[0]}.{alias.name}"
                    found.append(sub if sub in modules else names[0])
                    if sub in modules:
                        bound[alias.asname or alias.name] = sub
                    elif alias.name.startswith("_") and not alias.name.startswith("__"):
                        scan.private.append((module, sub, node.lineno))
            else:
                found = [owner(name) for name in names]
                for alias in node.names if isinstance(node, ast.Import) else ():
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else "shooting"
            targets += [(target, node.lineno) for target in found]
            if "shooting" in found and module not in {"shooting", "shooting.cli"}:
                scan.root_imports.append((module, node.lineno))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
                attr, target = node.attr, f"{bound[node.value.id]}.{node.attr}"
                if attr.startswith("_") and not attr.startswith("__") and target not in modules:
                    scan.private.append((module, target, node.lineno))
        scan.edges += [(module, target, line) for target, line in targets if target != module]
    return scan


def import_graph() -> set[tuple[str, str]]:
    """Every (importer, imported) pair among the modules, TYPE_CHECKING-only imports left out."""
    return {(source, target) for source, target, _ in _scan().edges}


def _where(module: str, line: int) -> str:
    return f"{_modules()[module].relative_to(ROOT)}:{line}"


def test_graph_is_not_trivial():
    graph = import_graph()
    assert ("shooting.mpc.ocp", "shooting.integrate.integrator") in graph, sorted(graph)
    assert ("shooting.integrate.integrator", "shooting.tableaus.tableau") in graph, sorted(graph)
    assert ("shooting.models.pendulum", "shooting.models") in graph, sorted(graph)
    assert len(graph) > 50, f"only {len(graph)} import edges found: the parser is missing imports"


def test_no_import_cycles():
    graph: dict[str, set[str]] = {}
    for source, target in import_graph():
        graph.setdefault(source, set()).add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            cycles.extend([sorted(component)] if len(component) > 1 else [])

    for node in sorted(_modules()):
        if node not in index:
            visit(node)
    files = [[str(_modules()[m].relative_to(ROOT)) for m in c] for c in cycles]
    assert not cycles, "import cycles (strongly connected components):\n" + "\n".join(map(str, files))


def test_layers_import_downwards_only():
    bad = []
    for source, target, line in _scan().edges:
        src, dst = _layer(source), _layer(target)
        if (source, target) in FORWARDS:
            continue
        if src is not None and dst is not None and dst != src and dst not in ALLOWED[src]:
            bad.append(f"{source} ({src}) -> {target} ({dst})  at {_where(source, line)}")
    assert not bad, "imports against the layer direction:\n" + "\n".join(sorted(set(bad)))


def test_only_cli_imports_the_package_root():
    bad = [f"{module} imports `shooting`  at {_where(module, line)}" for module, line in _scan().root_imports]
    assert not bad, "the package root is imported from inside the package:\n" + "\n".join(sorted(bad))


def test_no_private_names_imported_across_modules():
    bad = [f"{module} uses {name}  at {_where(module, line)}" for module, name, line in _scan().private]
    assert not bad, "private names used from another module:\n" + "\n".join(sorted(set(bad)))


def test_tableaus_do_not_import_casadi():
    bad = [_where(m, line) for m, line in _scan().casadi if _layer(m) == "tableaus"]
    assert not bad, "casadi imported in the tableau layer:\n" + "\n".join(sorted(bad))


def test_module_and_function_sizes():
    bad = []
    for module, path in _modules().items():
        if path.name == "__init__.py" or module.startswith(("shooting.models", "shooting.codegen.templates",
                                                                 "shooting.controller.templates")):
            continue
        text = path.read_text(encoding="utf-8")
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            bad.append(f"{path.relative_to(ROOT)}: {lines} lines > {MAX_MODULE_LINES}")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body[1:] if ast.get_docstring(node) is not None and len(node.body) > 1 else node.body
                length = node.end_lineno - body[0].lineno + 1
                if length > MAX_FUNCTION_LINES:
                    bad.append(f"{_where(module, node.lineno)} {node.name}(): {length} lines > {MAX_FUNCTION_LINES}")
    assert not bad, "modules or functions over the size limits:\n" + "\n".join(bad)


def _readme_layout() -> set[str]:
    """Paths of the files listed in the documentation's layout block (docs/architecture.md; indentation gives the
    folders)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    listed, folders = set(), []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        entry = line.split()[0]
        folders = folders[:depth]
        if entry.endswith("/"):
            folders.append(entry.rstrip("/"))
        else:
            listed.add("/".join([*folders, entry]))
    return listed


def test_readme_layout_lists_every_module():
    """The documented layout block and the tree agree, module for module."""
    listed = {p for p in _readme_layout() if p.endswith(".py")}
    actual = {str(path.relative_to(ROOT)) for path in _modules().values()}
    actual |= {str(p.relative_to(ROOT)) for p in (ROOT / "shooting").rglob("*.py")}
    assert not actual - listed, f"modules missing from the README's layout: {sorted(actual - listed)}"
    assert not listed - actual, f"README's layout lists modules that do not exist: {sorted(listed - actual)}"


def test_ci_runs_the_readmes_test_command():
    """`.ci/run` runs exactly the README's command 2 (pip's -q aside), and it lints the scripts and tests too."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8").split("# 2.", 1)[1].splitlines()[1].strip()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
          if line.startswith("python3 -m pip install")]
    assert len(ci) == 1, ci
    assert ci[0].replace("pip install -q ", "pip install ") == readme
    assert "ruff check shooting models scripts tests examples &&" in readme and "mypy shooting &&" in readme
