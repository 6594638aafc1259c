"""An option that would have no effect is refused, not ignored (issue 14, item 8, options silently ignored).

`--check-steps` without `--check` and `--slack-l1/--slack-l2` with
`--hard-x-bounds` used to run (and write files) as if they had not been
given; so did the others of the class below. Each is now exit 2 with one
line "OPTION has no effect WHY: FIX or drop OPTION", before any output is
written, like any other usage error. Given where they do act, the same
options are accepted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shooting.cli import main

REFUSED = [
    (["controller", "--model", "pendulum", "--check-steps", "5"], "--check-steps has no effect without --check"),
    (["controller", "--model", "pendulum", "--hard-x-bounds", "--slack-l1", "5"],
     "--slack-l1 has no effect with --hard-x-bounds"),
    (["controller", "--model", "pendulum", "--slack-l2", "5", "--hard-x-bounds"],
     "--slack-l2 has no effect with --hard-x-bounds"),
    (["controller", "--model", "vanderpol", "--slack-l1", "5"],
     "--slack-l1 has no effect here: the OCP of vanderpol has neither state bounds nor soft path constraints"),
    (["integrator", "--model", "pendulum", "--vectors", "3"], "--vectors has no effect without --check"),
    (["integrator", "--model", "pendulum", "--method", "rk4", "--newton", "full"],
     "--newton has no effect with the explicit tableau rk4"),
    (["integrator", "--model", "pendulum", "--method", "dopri5", "--newton-iterations", "3"],
     "--newton-iterations has no effect with the explicit tableau dopri5"),
    (["mpc", "--model", "pendulum", "--seed", "3"], "--seed has no effect without --noise"),
    (["mpc", "--model", "pendulum", "--seed", "3", "--noise", "0"], "--seed has no effect without --noise"),
    (["mpc", "--model", "cartpole", "--scenario", "tracking", "--x-ref", "0,0,0,0"],
     "--x-ref has no effect with --scenario tracking"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_an_option_without_effect_is_exit_2_in_one_line(args: list[str], message: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    status = main([*args, "--out", str(out), "-q", "--no-lint"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"shooting-codegen: error: {message}") and " or " in err and "drop" in err
    assert not out.exists()


ACCEPTED = [
    ["integrator", "--model", "pendulum", "--vectors", "3", "--check"],
    ["integrator", "--model", "pendulum", "--vectors", "3", "--real", "float"],
    ["integrator", "--model", "pendulum", "--method", "radau2", "--newton-iterations", "6", "--newton", "full"],
    ["integrator", "--model", "dip", "--method", "rk4", "--newton-iterations", "6"],  # Newton on z
    ["controller", "--model", "pendulum", "--horizon", "5", "--slack-l1", "5", "--slack-l2", "3"],
    ["controller", "--model", "pendulum", "--horizon", "5", "--hard-x-bounds"],
    ["mpc", "--model", "pendulum", "--horizon", "5", "--sim-steps", "2", "--noise", "0.001", "--seed", "3"],
]


@pytest.mark.parametrize("args", ACCEPTED, ids=[" ".join(a) for a in ACCEPTED])
def test_the_same_options_where_they_act_are_accepted(args: list[str], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    status = main([*args, "--out", str(tmp_path / "out"), "-q", "--no-lint"])
    assert status == 0, capsys.readouterr().err
    assert (tmp_path / "out" / ("summary.json" if args[0] == "mpc" else "manifest.json")).exists()


def test_check_steps_with_check_sets_the_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["controller", "--model", "pendulum", "--horizon", "5", "--check", "--check-steps", "7",
                 "--out", str(out), "-q", "--no-lint"]) == 0
    assert "closed loop of 7 samples" in capsys.readouterr().out
