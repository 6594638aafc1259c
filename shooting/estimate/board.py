"""What one estimator update costs on the emulated Cortex-M4: cycles by the project's cycle model.

A program on QEMU's MPS2 AN386 calls the exported update on each check vector (the updates of a simulated run,
`shooting.estimate.export.check_vectors`), each call a segment between markers, and the execution trace is
costed by `shooting.codegen.cycles` (Cortex-M4F at 168 MHz with flash wait states; its assumptions are recorded
with the figures).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from shooting.codegen import cycles
from shooting.codegen.c_files import CExport
from shooting.codegen.emitter import literal
from shooting.codegen.toolchain import ToolchainError, first_error_line

__all__ = ["update_cycles"]

FloatArray = npt.NDArray[np.float64]

_MAIN = """\
/* Each check vector through {name} once, every call a costed segment. */
#include <stdio.h>
#include "{name}.h"
{markers}
{tables}
int main(void) {{
  const {name}_real* arg[{n_in}];
  {name}_real* res[{n_out}];
  {outputs}
  int k, st = 0;
  for (k = 0; k < {count}; ++k) {{
{arguments}    shooting_mark_update();
    st |= {name}(arg, res, 0, 0, 0);
    shooting_mark_other();
  }}
  printf("done %d\\n", st);
  return st;
}}
"""


def update_cycles(export: CExport, vectors: list[list[FloatArray]], real: str) -> dict[str, Any]:
    """The update's cost per call on the emulated Cortex-M4 over `vectors`: instructions and cycles (median and
    largest), milliseconds at the model's clock, and the cycle model's assumptions.

    Raises
    ------
    ToolchainError
        A missing tool, a failed build, a run that faults or returns an error.
    """
    name = export.name
    ins = export.manifest["inputs"]
    outs = export.manifest["outputs"]
    tables = []
    arguments = []
    for i, (key, vec) in enumerate(zip(ins, zip(*vectors, strict=True), strict=True)):
        rows = ",\n  ".join("{" + ", ".join(literal(float(v), real) for v in np.atleast_1d(row)) + "}" for row in vec)
        width = max(np.atleast_1d(vec[0]).size, 1)
        tables.append(f"static const {name}_real in_{key}[{len(vec)}][{width}] = {{\n  {rows}}};")
        arguments.append(f"    arg[{i}] = in_{key}[k];\n")
    outputs = " ".join(f"static {name}_real out_{key}[{max(r * c, 1)}]; res[{j}] = out_{key};"
                       for j, (key, (r, c)) in enumerate(outs.items()))
    main = _MAIN.format(name=name, markers=cycles.marker_functions("update", "other"), tables="\n".join(tables),
                        n_in=len(ins), n_out=len(outs), outputs=outputs, count=len(vectors),
                        arguments="".join(arguments))
    with tempfile.TemporaryDirectory(prefix="shooting_est_m4_") as tmp:
        d = Path(tmp)
        for fname, text in export.files.items():
            (d / fname).write_text(text)
        (d / "main.c").write_text(main)
        run = cycles.trace_on_cortex_m4([d / f"{name}.c", d / "main.c"], include_dirs=(d,), workdir=d)
    if run.exit_code != 0:
        raise ToolchainError(f"the estimator's updates on the emulated Cortex-M4 exited with {run.exit_code}: "
                             f"{first_error_line(run.stdout + run.stderr)}")
    calls = [seg for seg in run.segments if seg.marker == "update"]
    if len(calls) != len(vectors):
        raise ToolchainError(f"the trace holds {len(calls)} updates, the program made {len(vectors)}")
    counted = np.array([seg.cycles for seg in calls], dtype=float)
    instructions = np.array([seg.instructions for seg in calls], dtype=float)
    hz = float(run.model.as_dict().get("clock_hz", 168e6))  # type: ignore[arg-type]
    return {"updates": len(calls), "cycles_per_update_median": float(np.median(counted)),
            "cycles_per_update_max": float(counted.max()),
            "instructions_per_update_median": float(np.median(instructions)),
            "ms_median": float(np.median(counted) / hz * 1e3), "ms_max": float(counted.max() / hz * 1e3),
            "cycle_model": run.model.as_dict()}
