"""The exported controller's cold starts on the emulated Cortex-M4 (float): ``NAME_mpc_reset`` then
``NAME_mpc_solve`` from each given state, one program, every solve's executed instructions and cycles
(`shooting.codegen.cycles`: QEMU's trace costed with the Cortex-M4 TRM's timings), its status, SQP iterations,
interior-point iterations (each Riccati factorisation counts one) and first input.

Used by ``bench_controller.py`` (table 9); a library of the scripts, not of shooting. Run alone, it solves from
a few far cart-pole starts and prints a row per solve:

    python scripts/board_cold.py [--starts 4] [--hessian gauss-newton]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import shooting
from shooting.codegen import qemu_mps2
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=4, help="how many far cart-pole starts (default 4)")
    parser.add_argument("--hessian", default="gauss-newton", choices=("gauss-newton", "exact"))
    args = parser.parse_args(argv)
    if not (qemu_mps2.have_cortex_m4_toolchain() and qemu_mps2.have_qemu()):
        print("the board's cold starts: skipped (no arm-none-eabi-gcc or qemu-system-arm)")
        return 0
    model = shooting.load_model("cartpole")
    ocp = shooting.build_ocp(shooting.default_scenario(model), model)
    rng = np.random.default_rng(23)  # (bench_controller.far_starts' first starts)
    low, high = np.array([-1.0, -np.pi, -1.0, -2.0]), np.array([1.0, np.pi, 1.0, 2.0])
    starts = [rng.uniform(low, high) for _ in range(args.starts)]
    with tempfile.TemporaryDirectory(prefix="board_cold_") as tmp:
        runs = board_cold_starts(ocp, starts, args.hessian, 100, Path(tmp))
    print(f"cart-pole far cold starts, float C on the emulated Cortex-M4, {args.hessian}, 100 SQP iterations at most")
    print(f"{'start':<34} {'status':>6} {'SQP its':>7} {'QP its':>6} {'instr M':>8} {'cycles M':>8} {'u0':>9}")
    for x0, run in zip(starts, runs, strict=True):
        print(f"{np.array2string(x0, precision=2, separator=','):<34} {run.status:>6} {run.iterations:>7} "
              f"{run.qp_iterations:>6} {run.instructions / 1e6:>8.2f} {run.cycles / 1e6:>8.2f} {run.u0:>9.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
