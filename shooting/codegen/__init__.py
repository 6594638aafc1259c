"""C for microcontrollers: integrator steps as verified, heap-free C99.

`export_integrator` is the integrator pipeline as one call (C files, host and
emulated Cortex-M4 checks, flash and RAM, manifest, safe install); the
pieces are `generate_c` (text of the files, from `CEmitter`), the toolchain
runners (`shooting.codegen.toolchain`, `shooting.codegen.qemu_mps2`) and the
checks (`shooting.codegen.verify`); `load_step` calls an exported step from
Python (software in the loop). Nothing here knows about tableaus.

The MPC controller as C lives in `shooting.controller`, a layer above this
one (it writes its C through this package's emitter and toolchain). Its
contract names keep this package as an address too
(``from shooting.codegen import export_controller, load_controller``): they
are looked up there on first use; so are the estimator's (`shooting.estimate`:
``export_estimator``, ``load_estimator``).
"""

from __future__ import annotations

from typing import Any

from shooting.codegen.c_files import CExport, generate_c
from shooting.codegen.pipeline import ExportReport, check_export, export_integrator
from shooting.codegen.sil import HostStep, load_step

#: Names of `shooting.controller` that this package also answers to (the contract's first home of them).
CONTROLLER_NAMES = ("HostController", "check_controller_export", "export_controller", "load_controller")
#: Names of `shooting.estimate` that this package also answers to (the contract's home of them).
ESTIMATOR_NAMES = ("HostEstimator", "export_estimator", "load_estimator")

__all__ = ["CExport", "ExportReport", "HostController", "HostEstimator", "HostStep", "check_controller_export",
           "check_export", "export_controller", "export_estimator", "export_integrator", "generate_c",
           "load_controller", "load_estimator", "load_step"]


def __getattr__(name: str) -> Any:
    if name in CONTROLLER_NAMES:
        # The one reference upwards, made on first use only (PEP 562): the controller's contract names.
        import shooting.controller as controller

        value = getattr(controller, name)
        globals()[name] = value
        return value
    if name in ESTIMATOR_NAMES:
        import shooting.estimate as estimate

        value = getattr(estimate, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'shooting.codegen' has no attribute {name!r}")
