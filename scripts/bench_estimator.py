"""Benchmark: state estimation per built-in model, the EKF's and the real-time MHE's C on the board beside IPOPT's MHE.

For each model, its default sensors (the model file's ``measurement``) along its default scenario: IPOPT's MPC
on the true state drives the plant (dopri5, process noise 3e-3 per state), the sensors add noise of standard
deviation 0.01, and both estimators start from a prior off the truth (P0 = 0.1 I). Printed per model:

- the estimation error (RMS over the states and the run's second half, each state on its own spread) of the
  EKF (Python; its C agrees to rounding, tests/test_estimator_c.py), of the real-time MHE (one Gauss-Newton QP
  step per sample, `shooting.estimate.RealTimeMHE`, the twin of its C, tests/test_rt_mhe.py) and of do-mpc's
  kind of MHE (IPOPT on the full-information cost over the same window, `shooting.MHE`), and the IPOPT MHE's
  median solve time in this process;
- the EKF and the real-time MHE exported in float for the Cortex-M4 (`shooting.codegen.export_estimator`,
  checked on the emulated board): cycles per update (median and largest, by the project's
  cycle model at 168 MHz), flash and RAM.

Run ``python scripts/bench_estimator.py`` (``--quick``: the cart-pole, a short run, no board; ``--models`` to
choose).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import casadi as ca
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shooting  # noqa: E402
from benchkit import add_models_option, selected_models  # noqa: E402
from shooting.codegen import export_estimator  # noqa: E402
from shooting.estimate import RealTimeMHE  # noqa: E402
from shooting.estimate.problem import Sample  # noqa: E402
from shooting.estimate.rt_mhe_c import board_run  # noqa: E402


def sensors(model: shooting.Model) -> int:
    h = shooting.default_measurement(model)
    return int(ca.SX(h(ca.SX.sym("x", model.nx), ca.SX.sym("u", model.nu), ca.SX.sym("p", model.np))).size1())


def discretisation(model: shooting.Model) -> dict[str, object]:
    """The step of the model's default scenario (a stiff model's implicit tableau, its substeps)."""
    problem = shooting.default_scenario(model).problem
    return {"method": problem.method, "steps": problem.steps}


def run(model: shooting.Model, samples: int, horizon: int, seed: int = 3) -> dict[str, object]:
    """Both estimators along the model's default scenario (IPOPT's MPC on the true state, process noise of
    standard deviation 3e-3 per state, the plant dopri5): their RMS errors and the MHE's median solve time."""
    ny = sensors(model)
    step = discretisation(model)
    scenario = shooting.default_scenario(model).with_changes(sim_steps=samples)
    ocp = shooting.build_ocp(scenario, model)
    truth = shooting.simulate_closed_loop(shooting.MPCController(ocp), scenario.x0, samples, noise_std=3e-3,
                                          seed=seed, reference=scenario.reference, progress=False,
                                          plant_method=scenario.plant_method, plant_steps=scenario.plant_steps)
    Q, R, P0 = 1e-5 * np.eye(model.nx), 1e-4 * np.eye(ny), 0.1 * np.eye(model.nx)
    rng = np.random.default_rng(seed)
    prior = np.asarray(scenario.x0, dtype=float) + 0.1 * rng.standard_normal(model.nx)
    ekf = shooting.EKF(model, None, Q=Q, R=R, x0=prior, P0=P0, **step)  # type: ignore[arg-type]
    mhe = shooting.MHE(model, None, horizon, Q=Q, R=R, x0=prior, P0=P0, **step)  # type: ignore[arg-type]
    rt = RealTimeMHE.of(mhe.problem, horizon)
    e_ekf, e_mhe, e_rt, times = [], [], [], []
    samples_of: list[Sample] = []
    for k in range(truth.steps):
        x, u = truth.x[k + 1], truth.u[k]
        y = np.array(ekf.measurement_function(x, u, model.p0), dtype=float).reshape(-1)
        y = y + np.sqrt(np.diag(R)) * rng.standard_normal(ny)
        samples_of.append(Sample(y, np.ones(ny), np.asarray(u, dtype=float), model.p0.copy(), float(truth.t[k])))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            e_ekf.append(ekf.update(y, u, truth.t[k])[0] - x)
            e_rt.append(rt.update(y, u, truth.t[k])[0] - x)
            t0 = time.perf_counter()
            e_mhe.append(mhe.update(y, u, truth.t[k])[0] - x)
            times.append(time.perf_counter() - t0)
    spread = np.maximum(np.ptp(truth.x, axis=0), 1e-3)
    half = truth.steps // 2

    def rms(errors: list[np.ndarray]) -> float:
        return float(np.sqrt(np.mean((np.array(errors[half:]) / spread) ** 2)))

    return {"ekf": rms(e_ekf), "rt": rms(e_rt), "mhe": rms(e_mhe), "mhe_ms": 1e3 * float(np.median(times)),
            "ny": ny, "samples": samples_of}


def board(model: shooting.Model, kind: str, horizon: int, samples: list[Sample]) -> dict[str, float] | str:
    """The float C of the EKF or the real-time MHE on the emulated Cortex-M4: cycles per update, flash, RAM (or
    why not). The MHE's cycles are counted along the scenario's run (`samples`, the first three windows), the
    first update (cold, the window empty) apart; the EKF's on the check's updates (one update's cost hardly
    varies)."""
    ny = sensors(model)
    options = dict(Q=1e-5 * np.eye(model.nx), R=1e-4 * np.eye(ny), P0=0.1 * np.eye(model.nx), **discretisation(model))
    estimator = shooting.EKF(model, None, **options) if kind == "ekf" else \
        shooting.MHE(model, None, horizon, **options)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as tmp:
        report = export_estimator(estimator, Path(tmp) / "c", real="float", target="cortex-m4", check=True)
        files = {f.name: f.read_text() for f in report.files if f.suffix in (".c", ".h")}
    if not report.ok:
        return "check failed: " + "; ".join(report.problems)[:120]
    cost = report.manifest["cortex_m4_cycles"]
    sizes = {"flash": float(report.flash or 0), "ram": float(report.ram or 0)}
    if kind == "ekf":
        return {"median": cost["cycles_per_update_median"], "max": cost["cycles_per_update_max"],
                "ms": cost["ms_max"], **sizes}
    run = board_run(files, report.name, "float", samples[:3 * horizon], model.nx)
    hz = float(run.model.get("clock_hz", 168e6))
    later = run.cycles[1:]
    return {"median": float(np.median(later)), "max": float(later.max()), "ms": float(later.max() / hz * 1e3),
            "first": float(run.cycles[0]), **sizes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the cart-pole, a short run, no board")
    add_models_option(parser)
    args = parser.parse_args()
    models = selected_models(parser, args)
    samples, horizon = (30, 5) if args.quick else (200, 10)
    print(f"Estimation error: one seeded run of {samples} samples per model, MHE window {horizon}")
    print(f"{'model':<13}{'nx':>3}{'ny':>4}{'EKF rms':>10}{'RT-MHE rms':>12}{'IPOPT MHE rms':>15}{'IPOPT ms':>10}")
    stats_of: dict[str, list[Sample]] = {}
    for model in models:
        try:
            stats = run(model, samples, horizon)
            stats_of[model.name] = stats["samples"]  # type: ignore[assignment]
        except ValueError as err:
            print(f"{model.name:<13}skipped: the simulated run failed: {str(err)[:150]}", flush=True)
            continue
        print(f"{model.name:<13}{model.nx:>3}{int(stats['ny']):>4}{stats['ekf']:>10.3g}{stats['rt']:>12.3g}"
              f"{stats['mhe']:>15.3g}{stats['mhe_ms']:>10.1f}", flush=True)
    print("rms: the estimation error over the run's second half, each state over its spread in the run")
    if args.quick:
        return 0
    print(f"\nThe float C on the emulated Cortex-M4 (cycle model, 168 MHz), MHE window {horizon}: cycles per update "
          f"(MHE: along the run above, its first {3 * horizon} samples, the first update apart)")
    print(f"{'model':<13}{'EKF med':>9}{'max':>8}{'ms':>8}{'flash B':>9}{'RAM B':>7}"
          f"{'MHE med':>10}{'max':>9}{'ms':>8}{'flash B':>9}{'RAM B':>7}{'first':>10}")
    for model in models:
        if model.name not in stats_of:
            continue
        row = f"{model.name:<13}"
        for kind, width in (("ekf", 9), ("mhe", 10)):
            cost = board(model, kind, horizon, stats_of[model.name])
            row += (f"{'  ' + cost:>{width}}" if isinstance(cost, str) else
                    f"{cost['median']:>{width}.0f}{cost['max']:>{8 + (kind == 'mhe')}.0f}{cost['ms']:>8.3f}"
                    f"{cost['flash']:>9.0f}{cost['ram']:>7.0f}" + (f"{cost['first']:>10.0f}" if kind == "mhe" else ""))
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
