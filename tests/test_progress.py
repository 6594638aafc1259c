"""One progress convention across the public API (issue 14, item 7).

Every public function with a ``progress`` parameter takes None or False
(silent), True (its default reporter on stderr: lines, or the closed loop's
bar when stderr is a terminal) or a callable ``(str) -> None`` (called with
each message), and refuses anything else with a ValueError naming
``progress``. It used to be a TypeError in `export_controller` for False
("'bool' object is not callable") and a ValueError in `simulate_closed_loop`
for None.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shooting
from shooting.codegen import export_controller, export_integrator
from shooting.mpc import ControlStep, run_scenario

PENDULUM = shooting.load_model("pendulum")


class _Hold:
    """A controller that needs no solver: u = -2 omega."""

    dt = 0.05
    model = PENDULUM

    def step(self, x: np.ndarray, t: float) -> ControlStep:
        return ControlStep(u=np.array([-2.0 * x[1]]), solve_time=1e-4, success=True, status="ok", iterations=0)


def _ocp() -> shooting.MultipleShootingOCP:
    return shooting.MultipleShootingOCP(PENDULUM, 4, dt=0.05, Q=[10.0, 1.0], R=[0.1])


def _integrator(out: Path, progress: object) -> None:
    export_integrator(shooting.build_integrator(PENDULUM, "rk4"), out, progress=progress)


def _controller(out: Path, progress: object) -> None:
    export_controller(_ocp(), out, progress=progress)


def _estimator(out: Path, progress: object) -> None:
    from shooting.codegen import export_estimator

    export_estimator(shooting.EKF(PENDULUM, None, Q=[1e-4, 1e-4], R=[1e-3]), out, progress=progress)


def _closed_loop(out: Path, progress: object) -> None:
    shooting.simulate_closed_loop(_Hold(), [0.3, 0.0], 3, plant_method="rk4", plant_steps=1, progress=progress)


def _scenario(out: Path, progress: object) -> None:
    scenario = shooting.default_scenario(PENDULUM).with_changes(horizon=4, sim_steps=2)
    run_scenario(scenario, out, progress=progress)


def _sweep(out: Path, progress: object) -> None:
    scenario = shooting.default_scenario(PENDULUM).with_changes(horizon=4, sim_steps=2)
    shooting.sweep(scenario, model=PENDULUM, cases=2, workers=1, out_dir=out, progress=progress)


#: How to call each public function that takes ``progress`` (cheaply), and whether True reports on
#: stderr even when it is not a terminal (the closed loop's bar does not).
CALLS: dict[str, tuple[Callable[[Path, object], None], bool]] = {
    "shooting.codegen.export_integrator": (_integrator, True),
    "shooting.controller.export_controller": (_controller, True),
    "shooting.estimate.export_estimator": (_estimator, True),
    "shooting.mpc.simulate_closed_loop": (_closed_loop, False),
    "shooting.mpc.run_scenario": (_scenario, True),
    "shooting.sweeps.sweep": (_sweep, True),
}


def _public_functions_with_progress() -> set[str]:
    found = set()
    for module in (shooting, shooting.codegen, shooting.controller, shooting.mpc, shooting.integrate,
                   shooting.tableaus):
        for name in module.__all__:
            obj: Any = getattr(module, name)
            members = [(name, obj)]
            if inspect.isclass(obj):
                members = [(f"{name}.{m}", f) for m, f in vars(obj).items()
                           if not m.startswith("_") and callable(f)] + [(name, obj.__init__)]
            for label, fn in members:
                try:
                    params = inspect.signature(fn).parameters
                except (TypeError, ValueError):
                    continue
                if "progress" in params:  # named by its subpackage: shooting.codegen.export_integrator
                    found.add(".".join(fn.__module__.split(".")[:2]) + f".{label}")
    return found


def test_every_public_function_with_progress_is_covered_here() -> None:
    assert _public_functions_with_progress() == set(CALLS)


@pytest.mark.parametrize("function", sorted(CALLS))
def test_progress_accepts_none_false_true_and_a_callable(function: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    call, true_reports = CALLS[function]
    for k, value in enumerate((None, False)):
        call(tmp_path / f"silent{k}", value)
        assert capsys.readouterr().err == "", value
    call(tmp_path / "true", True)
    err = capsys.readouterr().err
    assert (err != "") == true_reports
    assert all(line.strip() for line in err.splitlines())
    messages: list[str] = []
    call(tmp_path / "callable", messages.append)
    assert messages and all(isinstance(m, str) and m for m in messages)
    assert capsys.readouterr().err == ""   # a callable replaces the default reporter


@pytest.mark.parametrize("function", sorted(CALLS))
@pytest.mark.parametrize("value", [3, "yes", 1.0, ["x"]])
def test_progress_refuses_anything_else_before_any_work(function: str, value: object, tmp_path: Path) -> None:
    call, _ = CALLS[function]
    with pytest.raises(ValueError, match="progress must be None, False .* True .* or a callable"):
        call(tmp_path / "out", value)
    assert not (tmp_path / "out").exists()


def test_closed_loop_messages_count_the_samples() -> None:
    messages: list[str] = []
    shooting.simulate_closed_loop(_Hold(), [0.3, 0.0], 4, plant_method="rk4", plant_steps=1,
                                  progress=messages.append)
    assert [m.split()[0] for m in messages] == ["1/4", "2/4", "3/4", "4/4"]
    assert all("solve 0.1 ms" in m for m in messages)


def test_run_scenario_checks_its_bar_flag(tmp_path: Path) -> None:
    scenario = shooting.default_scenario(PENDULUM).with_changes(horizon=4, sim_steps=2)
    with pytest.raises(ValueError, match="progress_bar must be True or False"):
        run_scenario(scenario, tmp_path / "out", progress_bar="yes")  # type: ignore[arg-type]
