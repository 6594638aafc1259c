"""The integrator export as one library call: C files, checks, sizes, manifest, safe install.

`export_integrator` chains: generate the C (`generate_c`) -> compile and run it
on test vectors on the host (`check_host`) -> cross-compile for a Cortex-M4,
measure flash/RAM and prove a float build free of double precision -> run on
the emulated board (`check_cortex_m4`) -> record everything in the manifest
-> install into the output directory. A failed check writes nothing.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting import _files, _validate
from shooting.codegen import qemu_mps2, toolchain
from shooting.codegen.c_files import CExport, export_files, generate_c
from shooting.codegen.toolchain import M4Size
from shooting.codegen.verify import CheckReport, check_cortex_m4, check_host, make_vectors
from shooting.integrate.integrator import step_info
from shooting.model import Model
from shooting.options import REALS, TARGETS, Real, Target

FloatArray = npt.NDArray[np.float64]

__all__ = ["ExportReport", "ExportRuns", "check_and_install", "check_export", "export_integrator", "install_export",
           "owned_export_files", "require_tools"]

Progress = Callable[[str], None]

#: Most test vectors per check: each is compiled into the harness as constants.
MAX_VECTORS = 1000


@dataclass(frozen=True)
class ExportReport:
    """What `export_integrator` did.

    Attributes
    ----------
    ok : bool
        Every requested check passed and the files were written.
    name : str
        The C prefix and file stem.
    out_dir : pathlib.Path
    files : list of pathlib.Path
        The files written (empty when not `ok`: a failed check writes nothing).
    errors : dict of str to float
        Worst normwise relative error per output over all checks run (empty
        when nothing was run).
    checks : tuple of CheckReport
        The host and Cortex-M4 runs, in order.
    flash, ram : int or None
        Cortex-M4 bytes (``--target cortex-m4`` only): flash = text + data,
        RAM = data + bss + worst call-chain stack.
    size : M4Size or None
        The full Cortex-M4 measurement.
    double_symbols : tuple of str
        Double-precision routines a float Cortex-M4 object needs (a failure).
    manifest : dict
        The content of ``manifest.json`` (with the measurements).
    lines : tuple of str
        The report, one line per check or measurement.
    problems : tuple of str
        One line per reason the export is not `ok`.
    """

    ok: bool
    name: str
    out_dir: Path
    files: list[Path]
    errors: dict[str, float]
    checks: tuple[CheckReport, ...] = ()
    flash: int | None = None
    ram: int | None = None
    size: M4Size | None = None
    double_symbols: tuple[str, ...] = ()
    manifest: dict[str, Any] = field(default_factory=dict)
    lines: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()


def _legacy(manifest: dict[str, Any]) -> list[str]:
    """The files of a manifest written before they were listed in it."""
    return export_files(str(manifest.get("name", "")))


def owned_export_files(directory: str | os.PathLike[str]) -> set[str]:
    """Files an earlier export of ours wrote into `directory` (named by its manifest)."""
    return _files.owned_files(directory, "manifest.json", _legacy)


def install_export(export: CExport, out_dir: str | os.PathLike[str], *, force: bool = False) -> list[Path]:
    """Write the files of `export` into `out_dir` through a temporary directory (see `shooting._files`).

    Returns
    -------
    list of pathlib.Path
        The files written.
    """
    def write(tmp: Path) -> None:
        for fname, text in export.files.items():
            (tmp / fname).write_text(text)

    out = _files.install_directory(out_dir, write, set(export.files), "manifest.json", force=force, legacy=_legacy)
    return [out / fname for fname in export.files]


def check_export(out_dir: str | os.PathLike[str], name: str | None = None, *, real: Real = "double",
                 target: Target = "host", check: bool = False, force: bool = False) -> None:
    """Raise ValueError now if `export_integrator` would refuse these options (before any long work).

    Checks the name, the output directory, the option values and that the
    tools the export needs are installed.

    Parameters
    ----------
    out_dir : str or path
    name : str, optional
        The C name to be used; None checks the directory for any name.
    real, target, check, force
        As for `export_integrator`.
    """
    real = _validate.choice(real, REALS, "real")
    target = _validate.choice(target, TARGETS, "target")
    names = [] if name is None else export_files(_validate.identifier(name, "name"))
    _files.check_destination(out_dir, names, "manifest.json", force=_validate.flag(force, "force"), legacy=_legacy)
    require_tools(target, _validate.flag(check, "check"))


def _check_dict(report: CheckReport) -> dict[str, Any]:
    return {"target": report.target, "real": report.real, "vectors": report.vectors,
            "worst_relative_error": {k: float(v) for k, v in report.worst.items()},
            "allowed_relative_error": {k: float(v) for k, v in report.allowed.items()},
            "decisive_relative_error": {k: float(v) for k, v in report.decisive.items()},
            "passed": report.passed, **({"details": report.details} if report.details else {})}


def _step_metadata(F: ca.Function) -> dict[str, Any]:
    info = step_info(F)
    if info is None:
        return {}
    model, tab = info.model, info.tableau
    return {
        "model": {"name": model.name, "nx": model.nx, "nu": model.nu, "np": model.np,
                  "state_names": list(model.state_names), "input_names": list(model.input_names),
                  "expression_sha256": model.expression_hash},
        "tableau": {"name": tab.name, "order": tab.order, "stages": tab.stages, "explicit": bool(tab.explicit),
                    **tab.to_dict()},
        "steps": info.steps, "sensitivities": info.sensitivities,
        "newton": info.newton, "newton_iterations": info.newton_iterations,
        **({"z0": [float(v) for v in model.z0], "algebraic_names": list(model.algebraic_names)}
           if model.nz else {}),
    }


def require_tools(target: Target, check: bool) -> None:
    """ValueError naming the package to install when a tool that `target` and `check` need is missing.

    Also checks ``SHOOTING_TOOL_TIMEOUT`` when a tool will run (before any long work).
    """
    if check or target == "cortex-m4":
        toolchain.tool_timeout(600.0)
    if check and not toolchain.have_host_compiler():
        raise ValueError("gcc not found: the check compiles on the host; install gcc (apt-get install gcc)")
    if target == "cortex-m4":
        if not qemu_mps2.have_cortex_m4_toolchain():
            raise ValueError(f"arm-none-eabi-gcc with newlib not found: apt-get install {toolchain.ARM_PACKAGES}")
        if check and not qemu_mps2.have_qemu():
            raise ValueError("qemu-system-arm (machine mps2-an386) not found: apt-get install qemu-system-arm")


class ExportRuns:
    """The checks and measurements of one export (integrator or controller), collected as they run.

    Attributes
    ----------
    lines, problems : list of str
        What to print, and what makes the export fail.
    checks : list of CheckReport
    measured : dict
        Manifest entries.
    size : M4Size or None
        Set by `cross_compile`.
    doubles : list of str
        Double-precision routines a float build calls.
    """

    def __init__(self, export: CExport, say: Progress) -> None:
        self.export, self.say = export, say
        self.lines: list[str] = []
        self.problems: list[str] = []
        self.checks: list[CheckReport] = []
        self.measured: dict[str, Any] = {}
        self.size: M4Size | None = None
        self.doubles: list[str] = []

    def cross_compile(self, call_graph: Any, instance: str | None = None) -> bool:
        """Compile the export for the Cortex-M4 and record flash, RAM and its double-precision calls.

        Parameters
        ----------
        call_graph : mapping or "auto"
            For the worst-case stack (`toolchain.compile_cortex_m4`).
        instance : str, optional
            A static symbol whose size is reported as the memory struct's.

        Returns
        -------
        bool
            False when it does not compile (the failure is in `problems`).
        """
        export = self.export
        with tempfile.TemporaryDirectory(prefix="shooting_m4_") as tmp:
            for fname, text in export.files.items():
                (Path(tmp) / fname).write_text(text)
            obj = Path(tmp) / f"{export.name}.o"
            result, size = toolchain.compile_cortex_m4(Path(tmp) / f"{export.name}.c", obj, call_graph=call_graph)
            if not result.ok or size is None:
                self.problems.append(f"arm-none-eabi-gcc failed compiling {export.name}.c: "
                                     f"{toolchain.first_error_line(result.stderr)}")
                return False
            undefined = toolchain.undefined_symbols(obj)
            mem = toolchain.symbol_sizes(obj).get(instance) if instance else None
        self.size = size
        self.measured["cortex_m4"] = {"flash": size.flash, "ram": size.ram, "text": size.text, "data": size.data,
                                      "bss": size.bss, "stack": size.stack, "undefined": undefined,
                                      **({"mem_bytes": mem} if instance else {})}
        ram = (f"(data {size.data} + bss {size.bss}, of which the memory struct {mem} B, + worst stack "
               f"{size.stack} B)" if instance else f"(data {size.data} + bss {size.bss} + worst stack {size.stack})")
        self.lines.append(f"cortex-m4: flash {size.flash} B (text {size.text} + data {size.data}), RAM {size.ram} B "
                          + ram)
        if export.manifest["real"] == "float":
            self.doubles = toolchain.double_precision_symbols(undefined)
            if self.doubles:
                self.problems.append(f"float build uses double precision: {', '.join(self.doubles)}")
        return True


class _Runs(ExportRuns):
    """The checks of one integrator export: host and board against CasADi on test vectors."""

    def __init__(self, export: CExport, F: ca.Function, vectors: list[list[Any]], say: Progress) -> None:
        super().__init__(export, say)
        self.F, self.vectors = F, vectors

    def record(self, report: CheckReport, key: str, required: bool) -> None:
        self.checks.append(report)
        self.lines.append(report.summary())
        self.measured[key] = _check_dict(report)
        if required and not report.passed:
            self.problems.append(report.summary())

    def run(self, real: Real, target: Target, check: bool) -> None:
        if check or (real == "float" and toolchain.have_host_compiler()):
            self.say("compiling and running on the host")
            report = check_host(self.export, self.F, self.vectors)
            self.record(report, "check_host", required=check)
            if real == "float":
                self.measured["float_vs_double_error"] = report.worst
        if target != "cortex-m4":
            return
        self.say("cross-compiling for Cortex-M4")
        if not self.cross_compile(self.export.call_graph):
            return
        if check:
            self.say("running on an emulated Cortex-M4 (qemu mps2-an386)")
            self.record(check_cortex_m4(self.export, self.F, self.vectors), "check_cortex_m4", required=True)


def _check_states(check_states: object, model: Model | None) -> FloatArray | None:
    """`export_integrator`'s ``check_states`` as rows of the model's states, validated (None: not given)."""
    if check_states is None:
        return None
    if model is None:
        raise ValueError("check_states needs the step's model: a build_integrator step, or give model=")
    rows = _validate.array(check_states, "check_states")
    if rows.size == 0 or rows.size % model.nx:
        raise ValueError(f"check_states must be states of model {model.name}, shape (m, {model.nx}); got "
                         f"{rows.size} numbers")
    return rows.reshape(-1, model.nx)


def export_integrator(
    F: ca.Function,
    out_dir: str | os.PathLike[str],
    *,
    real: Real = "double",
    target: Target = "host",
    check: bool = False,
    vectors: int = 8,
    force: bool = False,
    name: str | None = None,
    model: Model | None = None,
    dt: float | None = None,
    metadata: Mapping[str, object] | None = None,
    progress: bool | Progress | None = None,
    check_states: object = None,
) -> ExportReport:
    """Export a step Function as C into `out_dir`, optionally checked on the host and an emulated Cortex-M4.

    Parameters
    ----------
    F : casadi.Function
        A `build_integrator` step (inputs ``x, u, p, t0, dt``) or any SX
        Function, or MX Function of SX calls.
    out_dir : str or path
        Created if missing; an existing directory may hold only files of an
        earlier export of ours, unless `force` (files we did not write are
        never overwritten or deleted).
    real : {"double", "float"}
        The C real type; "float" is single precision throughout.
    target : {"host", "cortex-m4"}
        "cortex-m4" also cross-compiles, measures flash and RAM, and refuses
        a float object that needs double-precision routines.
    check : bool
        Compile and run the C on `vectors` test vectors (host gcc with
        ``-Werror``; with "cortex-m4" also on QEMU's mps2-an386) and compare
        with CasADi: double to 1e-12, float to 1e-3 (normwise relative).
        A float export is always run on the host when gcc is present, to
        record its float-vs-double error in the manifest.
    vectors : int
        Test vectors: states around the model's nominal state, inputs inside
        its bounds, several start times.
    force : bool
        Add our files to a directory that holds other files.
    name : str, optional
        C prefix and file stem (default: the Function's name).
    model : Model, optional
        For the test vectors and the manifest; default: the model `F` was
        built from (`shooting.integrate.step_info`).
    dt : float, optional
        Interval length of the test vectors (default: the model's ``dt``).
    metadata : mapping, optional
        Extra manifest entries.
    progress : bool or callable ``(str) -> None``, optional
        One line before each stage: None or False silent (the default), True
        on stderr, a callable is called with each line.
    check_states : array_like, shape (m, nx), optional
        The states the check's vectors are drawn around, in turn (default the
        model's ``x0``): where the plant will be (a scenario's start and its
        references; the CLI passes its model's default scenario's). Recorded
        in the manifest.

    Returns
    -------
    ExportReport
        ``ok`` False (and nothing written) when a check failed.

    Raises
    ------
    ValueError
        Bad options, a refused output directory, a Function the emitter
        cannot translate, or a missing compiler or emulator for what was asked.
    """
    reporter = _validate.progress(progress)

    def say(message: str) -> None:
        if reporter is not None:
            reporter(message)

    if not isinstance(F, ca.Function):
        raise ValueError(f"F must be a casadi.Function (see shooting.build_integrator), got {type(F).__name__}")
    real = _validate.choice(real, REALS, "real")
    target = _validate.choice(target, TARGETS, "target")
    check = _validate.flag(check, "check")
    force = _validate.flag(force, "force")
    n_vectors = _validate.integer(vectors, "vectors", minimum=1, maximum=MAX_VECTORS)
    name = _validate.identifier(F.name() if name is None else name, "name")
    info = step_info(F)
    if model is None and info is not None:
        model = info.model
    if model is not None and not isinstance(model, Model):
        raise ValueError(f"model must be a shooting.Model, got {type(model).__name__}")
    if dt is None and model is not None:
        dt = model.dt
    dt = None if dt is None else _validate.positive_real(dt, "dt")
    out = Path(out_dir)
    check_export(out, name, real=real, target=target, check=check, force=force)

    centers = _check_states(check_states, model)
    say(f"generating C ({real}, {F.n_instructions()} CasADi instructions)")
    meta = {**_step_metadata(F), "dt": dt, **dict(metadata or {})}
    if centers is not None:
        meta["check_states"] = centers.tolist()
    export = generate_c(F, name, real=real, metadata=meta)
    test_vectors = make_vectors(F, model, n=n_vectors, dt=dt, centers=centers)

    return check_and_install(export, F, test_vectors, out, real=real, target=target, check=check, force=force,
                             say=say)


def check_and_install(export: CExport, F: ca.Function, vectors: list[list[Any]], out: Path, *, real: Real,
                      target: Target, check: bool, force: bool, say: Progress) -> ExportReport:
    """The checks of `export` (the C of `F`) on `vectors` against CasADi, on the host and for ``target`` on the
    emulated Cortex-M4 (flash, RAM, double-free float), then the install of its files into `out`, all or nothing;
    nothing is written when a check fails. `export_integrator`'s and `shooting.estimate.export_estimator`'s
    last half."""
    runs = _Runs(export, F, vectors, say)
    try:
        runs.run(real, target, check)
    except toolchain.ToolchainError as err:  # a tool that crashed, hung or wrote nothing: one line
        runs.problems.append(str(err).splitlines()[0])
    lines, problems, checks, measured = runs.lines, runs.problems, runs.checks, runs.measured
    size, doubles = runs.size, runs.doubles

    errors: dict[str, float] = {}
    for report in checks:
        for key, value in report.worst.items():
            errors[key] = max(errors.get(key, 0.0), float(value))
    export = export.with_manifest(**measured)
    common = dict(name=export.name, out_dir=out, errors=errors, checks=tuple(checks),
                  flash=None if size is None else size.flash, ram=None if size is None else size.ram, size=size,
                  double_symbols=tuple(doubles), manifest=export.manifest, lines=tuple(lines))
    if problems:
        return ExportReport(ok=False, files=[], problems=tuple(problems), **common)  # type: ignore[arg-type]
    files = install_export(export, out, force=force)
    say(f"wrote {', '.join(sorted(export.files))} to {out}")
    return ExportReport(ok=True, files=files, **common)  # type: ignore[arg-type]
