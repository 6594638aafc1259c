"""Every message the CLI prints on stderr is one line, a failed solve's too (issue 14, item 7).

The model here has twelve states, so that numpy's text of its state wraps
(at 75 characters), and IPOPT gets one iteration, so that the first solve
fails with IPOPT's own status.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import shooting
from shooting.cli import main
from shooting.codegen import export_controller

MODEL = '''
import casadi as ca
import shooting
from shooting import OCPProblem, QuadraticCost, Scenario, SolverSettings


def make_model():
    x, u = ca.SX.sym("x", 12), ca.SX.sym("u")
    xdot = ca.vertcat(*[x[i + 1] for i in range(11)], ca.sin(x[0]) + u)
    return shooting.Model("chain12", x, u, xdot, x0=[3.0] + [0.1234567] * 11, u_min=[-1], u_max=[1], dt=0.05)


def scenario(model):
    return Scenario(model=model.name, x0=model.x0, sim_steps=3,
                    problem=OCPProblem(horizon=10, dt=0.05, cost=QuadraticCost(Q=[1.0] * 12, R=[0.1]),
                                       solver=SolverSettings(solver_options={"ipopt.max_iter": 1})))
'''


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "chain12.py"
    path.write_text(MODEL)
    return path


def test_controller_whose_guess_solve_fails_says_it_in_one_whole_line(model_file: Path, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["controller", "--model", str(model_file), "--out", str(tmp_path / "c"), "-q", "--no-lint"])
    err = capsys.readouterr().err
    # A failed solve (exit 1, like mpc's first solve), not bad input; each message a whole line.
    assert status == 1 and not (tmp_path / "c").exists()
    lines = err.splitlines()
    assert len(lines) == 2, err
    # The whole message: the state, IPOPT's status and the fix (the old CLI cut it at numpy's line break).
    assert "Maximum_Iterations_Exceeded" in lines[0] and "pass x0=" in lines[0] and "0.1235" in lines[0]
    assert lines[1] == f"failed: nothing written to {tmp_path / 'c'}"


def test_the_library_message_of_a_failed_guess_solve_has_no_line_break(model_file: Path, tmp_path: Path) -> None:
    model = shooting.load_model(str(model_file))
    ocp = shooting.build_ocp(shooting.default_scenario(model), model)
    report = export_controller(ocp, tmp_path / "c")
    assert not report.ok and not (tmp_path / "c").exists()
    assert len(report.problems) == 1 and "Maximum_Iterations_Exceeded" in report.problems[0]
    assert "\n" not in report.problems[0]


def test_mpc_whose_first_solve_fails_prints_one_line_per_message(model_file: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["mpc", "--model", str(model_file), "--out", str(tmp_path / "m"), "-q", "--no-lint"])
    captured = capsys.readouterr()
    assert status == 1 and not (tmp_path / "m").exists()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("shooting-codegen: the first OCP solve failed"), captured.err
    assert "(Maximum_Iterations_Exceeded)" in lines[0] and lines[0].endswith(f"nothing written to {tmp_path / 'm'}")


def test_a_multi_line_error_is_printed_whole_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI's printing helper collapses a message's line breaks (it used to print the first line only)."""
    path = tmp_path / "negative.py"
    path.write_text('def make_model():\n    raise ValueError("the mass is negative:\\n  m = -1\\ngive m > 0")\n')
    status = main(["integrator", "--model", str(path), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("shooting-codegen: error: ") and err.count("\n") == 1
    assert "the mass is negative: m = -1 give m > 0" in err
