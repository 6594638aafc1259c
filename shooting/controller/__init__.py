"""The MPC controller as verified, heap-free C: a room of its own above `shooting.codegen`.

`export_controller` turns a `MultipleShootingOCP` into ``NAME_mpc.c/.h``
(real-time iterations and SQP with a merit line search; the stage-wise QP by
an interior point whose Newton systems are Riccati recursions; path and
terminal constraints, general costs, algebraic states), checks it in closed
loop on the host and the emulated Cortex-M4, and installs it all or nothing;
`load_controller` runs an export from Python (software in the loop).

Modules: `export` (the pipeline: refusals, guess, files, checks, install),
`c_source` (the C text: `ControllerSpec`, the templates in ``templates/``),
`ocp_qp` (the stage-wise QP's C, rendered from `shooting.qp`'s templates, and
its host build `HostOCPQP`), `check` (closed loops of the C against the
Python `RTIController` and IPOPT, tolerances derived from the precision),
`host` (`HostController`, `load_controller`). The QP's numpy twin stays in
`shooting.qp`, below `shooting.mpc`, whose `RTIController` solves with it.
It reads mpc's problem and layout and writes C through codegen's emitter;
neither mpc nor codegen imports it (codegen only forwards the contract's
names on first use).
"""

from shooting.controller.export import check_controller_export, export_controller
from shooting.controller.host import CONTROLLER_STATUS, HostController, load_controller

__all__ = ["CONTROLLER_STATUS", "HostController", "check_controller_export", "export_controller", "load_controller"]
