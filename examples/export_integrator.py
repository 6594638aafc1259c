"""An integrator exported as C: the Van der Pol oscillator's RK4 step with A and B, in single precision,
compiled and checked against CasADi on the host (and on an emulated Cortex-M4 when its tools are installed).

    python examples/export_integrator.py [OUT_DIR]
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import shooting
from shooting.codegen import export_integrator, load_step


def main(out: Path) -> None:
    model = shooting.load_model("vanderpol")
    step = shooting.build_integrator(model, "rk4", steps=2, name="vdp_step")
    board = shutil.which("arm-none-eabi-gcc") and shutil.which("qemu-system-arm")
    report = export_integrator(step, out / "vdp", real="float", target="cortex-m4" if board else "host",
                               check=True, model=model, force=True)
    for line in report.lines:
        print(line)
    if not report.ok:
        raise SystemExit(f"export failed: {report.problems}")
    c_step = load_step(out / "vdp")  # the generated C in this process
    print("C step at x0:", c_step(model.x0, model.u0, model.p0, 0.0, 0.05)[0])


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="shooting_example_"))
    target.mkdir(parents=True, exist_ok=True)
    main(target)
