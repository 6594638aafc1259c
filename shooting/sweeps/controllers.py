"""Which controller a sweep runs, resolved once where the sweep starts.

"rti" and "ipopt" are built from the scenario by each worker process.
"c" exports the scenario's controller to C here (`export_controller`, into a
private temporary folder) and ships the text of its files; a directory is a
``shooting-codegen controller`` export, checked here (its manifest names a
controller of this model and sampling time, its sources are there) and
shipped the same way. Each worker compiles the C once, in its own folder.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shooting import _files
from shooting.model import Model
from shooting.mpc.ocp import MultipleShootingOCP
from shooting.mpc.scenarios import Scenario
from shooting.options import SWEEP_CONTROLLERS

__all__ = ["ControllerChoice", "choose_controller"]


@dataclass(frozen=True)
class ControllerChoice:
    """A sweep's controller.

    Attributes
    ----------
    kind : str
        "rti", "ipopt" or "c" (a C controller, from the scenario or a directory).
    files : dict of str to str
        The C controller's files (name -> text); empty for "rti" and "ipopt".
    identity : str
        Tells two runs' controllers apart (the kind, or a hash of the C).
    describe : dict
        For summary.json.
    """

    kind: str
    files: dict[str, str] = field(default_factory=dict)
    identity: str = ""
    describe: dict[str, Any] = field(default_factory=dict)


def _digest(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    return h.hexdigest()[:16]


def _read(folder: Path, names: list[str]) -> dict[str, str]:
    files = {}
    for name in names:
        path = folder / name
        if not path.is_file():
            raise ValueError(f"{folder} has no {name}: it is not a complete controller export (export it again "
                             f"with 'shooting-codegen controller')")
        try:
            files[name] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"cannot read {path}: {err}") from None
    return files


def _exported(ocp: MultipleShootingOCP, scenario: Scenario) -> ControllerChoice:
    from shooting.controller import export_controller

    folder = Path(tempfile.mkdtemp(prefix="shooting_sweep_c_"))
    try:
        report = export_controller(ocp, folder / "export", x0=scenario.x0)
        files = {path.name: path.read_text(encoding="utf-8") for path in report.files if path.suffix in (".c", ".h")
                 or path.name == "manifest.json"}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    digest = _digest(files)
    return ControllerChoice("c", files, f"c:{digest}", {"kind": "c", "from": "the scenario", "name": report.name,
                                                        "sources": digest})


def _directory(folder: Path, scenario: Scenario, model: Model) -> ControllerChoice:
    hint = "give the directory of a 'shooting-codegen controller' export of this model"
    manifest = _files.read_record(folder / "manifest.json") if (folder / "manifest.json").is_file() else None
    if not isinstance(manifest, dict) or manifest.get("generator") != _files.GENERATOR or \
            manifest.get("kind") != "controller":
        raise ValueError(f"controller {folder} is not a controller export (no manifest.json of kind 'controller'): "
                         f"{hint}")
    info = manifest.get("model")
    name = manifest.get("name")
    if not isinstance(info, dict) or not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{folder / 'manifest.json'} has no model or name entry: {hint}")
    theirs = (info.get("name"), info.get("nx"), info.get("nu"), info.get("np"))
    if theirs != (model.name, model.nx, model.nu, model.np):
        raise ValueError(f"controller {folder} was exported for model {theirs[0]} (nx={theirs[1]}, nu={theirs[2]}, "
                         f"np={theirs[3]}), not {model.name} (nx={model.nx}, nu={model.nu}, np={model.np}): {hint}")
    dt, ours = manifest.get("dt"), scenario.problem.dt
    if not isinstance(dt, (int, float)) or not math.isclose(float(dt), ours, rel_tol=1e-12):
        raise ValueError(f"controller {folder} samples every {dt!r:.20} but the scenario every {ours:g}: export it "
                         f"with --dt {ours:g}, or give the sweep that dt")
    files = _read(folder, ["manifest.json", f"{name}_mpc.c", f"{name}_mpc.h"])
    digest = _digest(files)
    return ControllerChoice("c", files, f"c:{digest}", {"kind": "c", "from": str(folder.resolve()), "name": name,
                                                        "real": manifest.get("real"), "sources": digest})


def choose_controller(controller: object, scenario: Scenario, model: Model,
                      ocp: MultipleShootingOCP) -> ControllerChoice:
    """Resolve the `controller` option of `shooting.sweep` (see the module docstring).

    Raises
    ------
    ValueError
        An unknown name, a path that is not a controller export of `model`
        with the scenario's dt, or an OCP the C controller cannot solve.
    """
    if isinstance(controller, str) and controller in SWEEP_CONTROLLERS:
        if controller == "c":
            return _exported(ocp, scenario)
        return ControllerChoice(controller, {}, controller, {"kind": controller})
    if isinstance(controller, (str, os.PathLike)) and Path(controller).is_dir():
        return _directory(Path(controller), scenario, model)
    raise ValueError(f"controller must be one of {', '.join(repr(c) for c in SWEEP_CONTROLLERS)} or the directory of "
                     f"a 'shooting-codegen controller' export, got {controller!r:.80}")
