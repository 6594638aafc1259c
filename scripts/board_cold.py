"""The exported controller's cold starts on the emulated Cortex-M4 (float): ``NAME_mpc_reset`` then
``NAME_mpc_solve`` from each given state, one program, every solve's executed instructions and cycles
(`shooting.codegen.cycles`: QEMU's trace costed with the Cortex-M4 TRM's timings), its status, SQP iterations,
interior-point iterations (each Riccati factorisation counts one) and first input.

Used by ``bench_controller.py`` (table 9); a library of the scripts, not of shooting.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

import shooting
from shooting.codegen.cycles import marker_functions, trace_on_cortex_m4
from shooting.controller.c_source import controller_spec, generate_controller


@dataclass(frozen=True)
class BoardColdStart:
    """One cold solve on the board."""

    status: int
    iterations: int
    qp_iterations: int
    u0: float
    instructions: int
    cycles: int


def board_cold_starts(ocp: shooting.MultipleShootingOCP, starts: list[np.ndarray], hessian: str, max_iter: int,
                      work: Path) -> list[BoardColdStart]:
    """Reset and solve (at most `max_iter` SQP iterations) from every start, float, on the emulated board.

    Parameters
    ----------
    ocp : MultipleShootingOCP
    starts : list of ndarray, shape (nx,) each
    hessian : str
        "gauss-newton" or "exact".
    max_iter : int
    work : Path
        A folder for the sources and the build.

    Returns
    -------
    list of BoardColdStart
        In the order of `starts`.
    """
    name = "cold"
    spec = controller_spec(ocp, hessian=hessian)  # type: ignore[arg-type]
    export = generate_controller(spec, name, real="float")
    work.mkdir(parents=True, exist_ok=True)
    for file, text in export.files.items():
        (work / file).write_text(text)
    table = ",".join("{" + ",".join(f"{float(v)!r}f" for v in s) + "}" for s in starts)
    (work / "main.c").write_text(f"""#include <stdio.h>
#include "{name}_mpc.h"
{marker_functions("solve", "other")}
static const float starts[{len(starts)}][{ocp.nx}] = {{{table}}};
int main(void) {{
  {name}_mpc_mem* mem = {name}_mpc_default();
  float u[{ocp.nu}];
  int i, st;
  {name}_mpc_init(mem);
  for (i = 0; i < {len(starts)}; ++i) {{
    {name}_mpc_reset(mem, starts[i]);
    shooting_mark_solve();
    st = {name}_mpc_solve(mem, starts[i], u, {max_iter});
    shooting_mark_other();
    printf("s %d %d %d %.9g\\n", st, mem->sqp_iterations, mem->qp_iterations_sample, (double)u[0]);
  }}
  return 0;
}}
""")
    run = trace_on_cortex_m4([work / f"{name}_mpc.c", work / "main.c"], include_dirs=(work,), workdir=work / "build",
                             timeout=3000)
    rows = [line.split()[1:] for line in run.stdout.splitlines() if line.startswith("s ")]
    segments = run.of("solve")
    assert len(rows) == len(segments) == len(starts), (len(rows), len(segments))
    return [BoardColdStart(int(st), int(its), int(qp), float(u0), seg.instructions, seg.cycles)
            for (st, its, qp, u0), seg in zip(rows, segments, strict=True)]
