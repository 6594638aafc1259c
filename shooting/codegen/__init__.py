"""C for microcontrollers: integrator steps and whole MPC controllers as verified, heap-free C99.

`export_controller` turns a `MultipleShootingOCP` into a real-time-iteration
controller in C (linearisation, the stage-wise QP by an interior point with a Riccati recursion; see
`shooting.codegen.controller`); `load_step` and `load_controller` call the
generated C from Python (software in the loop). `export_integrator` is the
integrator pipeline as one call (C files, host and
emulated Cortex-M4 checks, flash and RAM, manifest, safe install); the
pieces are `generate_c` (text of the files, from `CEmitter`), the toolchain
runners (`shooting.codegen.toolchain`, `shooting.codegen.qemu_mps2`) and the
checks (`shooting.codegen.verify`). Nothing here knows about tableaus.
"""

from shooting.codegen.c_files import CExport, generate_c
from shooting.codegen.controller import check_controller_export, export_controller
from shooting.codegen.pipeline import ExportReport, check_export, export_integrator
from shooting.codegen.sil import HostController, HostStep, load_controller, load_step

__all__ = ["CExport", "ExportReport", "HostController", "HostStep", "check_controller_export", "check_export",
           "export_controller", "export_integrator", "generate_c", "load_controller", "load_step"]
