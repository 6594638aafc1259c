"""C for microcontrollers: any CasADi step Function becomes verified, heap-free C99.

`export_integrator` is the whole pipeline as one call (C files, host and
emulated Cortex-M4 checks, flash and RAM, manifest, safe install); the
pieces are `generate_c` (text of the files, from `CEmitter`), the toolchain
runners (`shooting.codegen.toolchain`, `shooting.codegen.qemu_mps2`) and the
checks (`shooting.codegen.verify`). Nothing here knows about tableaus.
"""

from shooting.codegen.c_files import CExport, generate_c
from shooting.codegen.pipeline import ExportReport, check_export, export_integrator

__all__ = ["CExport", "ExportReport", "check_export", "export_integrator", "generate_c"]
