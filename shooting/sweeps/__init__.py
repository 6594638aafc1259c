"""Sweeps: closed loops of any controller over many cases, on Dask (a local cluster, or a scheduler by address).

`sweep` draws the cases (`shooting.sweeps.cases`), ships the scenario, the
model and the controller's kind or C sources to the workers
(`shooting.sweeps.worker`, `shooting.sweeps.cluster`), collects one row per
case and writes cases.csv, summary.json and sweep.png
(`shooting.sweeps.output`). It knows controllers only through the
`Controller` protocol and the export directory, and runs each case with
`shooting.simulate_closed_loop`.

(The subpackage is ``sweeps`` so that ``shooting.sweep`` stays the function.)
"""

from shooting.sweeps.api import SweepResult, sweep

__all__ = ["SweepResult", "sweep"]
