"""A sweep: the Van der Pol controller's closed loop from 8 start states spread around x0, with process noise,
on a local Dask cluster of 2 workers (pip install 'shooting[sweep]'; WORKERS=1 runs in this process).

    python examples/sweep.py [OUT_DIR]
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import shooting


def main(out: Path) -> None:
    model = shooting.load_model("vanderpol")
    scenario = shooting.default_scenario(model).with_changes(sim_steps=40)
    result = shooting.sweep(scenario, controller="rti", cases=8, x0_spread=0.3, noise_std=0.01, seed=1,
                            workers=int(os.environ.get("WORKERS", "2")), out_dir=out / "sweep", progress=False)
    print(f"{len(result.rows)} cases, success rate {result.success_rate:.2f}")
    print({k: v for k, v in result.summary.items() if not isinstance(v, (dict, list))})


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="shooting_example_"))
    target.mkdir(parents=True, exist_ok=True)
    main(target)
