"""Exports into one of our own export directories replace our earlier set (issue 14, item 8, output directories).

An integrator export, then a controller over it, then an integrator under
another name used to succeed but leave the earlier files unlisted in the new
manifest, so the next run into the directory was refused ("not written by
shooting"). Now every run succeeds, the directory holds exactly what its
manifest lists (plus the user's own files, untouched), and an interrupt or a
kill at any instant of the installation leaves the old set or the new one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import shooting
from shooting import _files
from shooting.codegen import export_controller, export_integrator

PENDULUM = shooting.load_model("pendulum")


def _listed(out: Path) -> set[str]:
    return set(json.loads((out / "manifest.json").read_text())["files"])


def _present(out: Path) -> set[str]:
    return {p.name for p in out.iterdir()}


def _user_files(out: Path) -> dict[str, tuple[bytes, int]]:
    out.mkdir()
    (out / "notes.txt").write_text("my notes\n")
    (out / "step_a_old.c").write_text("/* mine, named like generated C */\n")
    (out / "data").mkdir()
    (out / "data" / "log.csv").write_text("t,x\n0,1\n")
    return {name: ((out / name).read_bytes(), (out / name).stat().st_mtime_ns)
            for name in ("notes.txt", "step_a_old.c", "data/log.csv")}


def _ocp() -> shooting.MultipleShootingOCP:
    return shooting.MultipleShootingOCP(PENDULUM, 5, dt=0.05, Q=[10.0, 1.0], R=[0.1])


def test_integrator_controller_integrator_into_one_directory_beside_user_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    mine = _user_files(out)
    F = shooting.build_integrator(PENDULUM, "rk4")
    runs: list[Callable[[], object]] = [
        lambda: export_integrator(F, out, name="step_a", force=True),
        lambda: export_controller(_ocp(), out, force=True),
        lambda: export_integrator(F, out, name="step_b", force=True),
        lambda: export_integrator(F, out, name="step_b", force=True),
        lambda: export_controller(_ocp(), out, name="other", force=True),
    ]
    for run in runs:
        report = run()
        assert report.ok  # type: ignore[attr-defined]
        assert _present(out) == _listed(out) | {"notes.txt", "step_a_old.c", "data"}
    assert _listed(out) == {"other_mpc.c", "other_mpc.h", "manifest.json", "Makefile"}
    for name, (content, mtime) in mine.items():
        assert (out / name).read_bytes() == content and (out / name).stat().st_mtime_ns == mtime


def test_the_cli_sequence_of_the_issue_succeeds_every_time(tmp_path: Path) -> None:
    out = tmp_path / "out"
    runs = [["integrator", "--model", "pendulum"], ["controller", "--model", "pendulum", "--horizon", "5"],
            ["integrator", "--model", "pendulum", "--name", "other"], ["integrator", "--model", "pendulum"],
            ["controller", "--model", "pendulum", "--horizon", "5"]]
    for args in runs:
        proc = subprocess.run([sys.executable, "-m", "shooting.cli", *args, "--out", str(out), "-q", "--no-lint"],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (args, proc.stderr)
        assert _present(out) == _listed(out)
    assert _listed(out) == {"pendulum_mpc.c", "pendulum_mpc.h", "manifest.json", "Makefile"}


def test_an_mpc_run_never_deletes_an_export_it_was_forced_beside(tmp_path: Path) -> None:
    """Each record owns only what it lists: a run with another record (summary.json) leaves the export alone."""
    out = tmp_path / "out"
    assert export_integrator(shooting.build_integrator(PENDULUM, "rk4"), out).ok
    before = _present(out)
    scenario = shooting.default_scenario(PENDULUM).with_changes(horizon=4, sim_steps=2)
    with pytest.raises(ValueError, match="not written by shooting"):
        shooting.mpc.run_scenario(scenario, out)
    assert shooting.mpc.run_scenario(scenario, out, force=True).ok
    assert before <= _present(out)
    assert export_integrator(shooting.build_integrator(PENDULUM, "rk4"), out, name="next", force=True).ok
    assert "trajectory.json" in _present(out) and "pendulum_rk4.c" not in _present(out)


class _Cut(BaseException):
    """The simulated interrupt or kill."""


def _install_cut_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, k: int, kill: bool) -> tuple[Path, set, set]:
    """Integrator export, then a controller export into it, cut before the k-th file operation in the directory.

    Before every operation a reader's view is checked: a manifest, when there is one, lists only files that
    are present. With `kill`, nothing runs after the cut (the process died): the journal is left behind.
    """
    out = tmp_path / f"out{k}{kill}"
    assert export_integrator(shooting.build_integrator(PENDULUM, "rk4"), out).ok
    old = _present(out)
    real_replace, real_unlink = os.replace, os.unlink
    count = [0]
    dead = [False]

    def reader_view_is_whole() -> None:
        record = out / "manifest.json"
        if record.exists():
            assert _listed(out) <= _present(out)

    def guarded(real: Callable[..., None]) -> Callable[..., None]:
        def op(*args: str | os.PathLike[str], **kwargs: object) -> None:
            if dead[0]:
                raise _Cut  # nothing runs after a kill (the staging directory's cleanup neither)
            target = Path(args[-1])
            if not kwargs and target.parent == out:
                reader_view_is_whole()
                if count[0] == k:
                    dead[0] = kill
                    count[0] += 1
                    raise _Cut
                count[0] += 1
            real(*args, **kwargs)
        return op

    monkeypatch.setattr(_files.os, "replace", guarded(real_replace))
    monkeypatch.setattr(_files.os, "unlink", guarded(real_unlink))
    try:
        export_controller(_ocp(), out)
    except _Cut:
        pass
    finally:
        monkeypatch.undo()
    count.append(count[0])
    return out, old, {"pendulum_mpc.c", "pendulum_mpc.h", "manifest.json", "Makefile"}


@pytest.mark.parametrize("kill", [False, True])
def test_a_cut_at_any_instant_leaves_the_old_set_or_the_new_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               kill: bool) -> None:
    outcomes = []
    for k in range(12):
        out, old, new = _install_cut_at(tmp_path, monkeypatch, k, kill)
        if kill:
            _files.recover(out)  # what the next run into the directory does first, under the lock
        present = _present(out)
        assert present in (old, new), (k, present)
        assert _listed(out) == present
        outcomes.append(present == new)
    # The cut fell before the journal (old set), inside the moves and deletions (completed: new set), and after.
    assert outcomes[0] is False and outcomes[-1] is True


def test_a_killed_install_with_deletions_pending_does_not_block_the_next_run(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed after the new manifest was moved in but before the earlier files were deleted."""
    out, _, new = _install_cut_at(tmp_path, monkeypatch, 5, kill=True)
    assert (out / _files.JOURNAL).exists() and "pendulum_rk4.c" in _present(out)
    # The early check (no lock, before any long work) accepts the directory: the journal names those files.
    _files.check_destination(out, [], "manifest.json")
    assert export_controller(_ocp(), out).ok
    assert _present(out) == new
