"""Output is all or nothing: unwritable places, symlinks, mount points, interrupts, killed and concurrent runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import shooting
from shooting import _files
from shooting.codegen import export_integrator


def _export(tmp: Path, model: str = "pendulum", name: str = "step", **kw):
    F = shooting.build_integrator(shooting.load_model(model), "rk4", name=name)
    return export_integrator(F, tmp, **kw)


def _consistent(directory: Path, *, installing: bool = False) -> None:
    """The manifest names exactly the files present, and describes the C beside it.

    `installing`: during an install, besides our journal and staging directory.
    """
    manifest = json.loads((directory / "manifest.json").read_text())
    present = {p.name for p in directory.iterdir()
               if not (installing and (p.name == _files.JOURNAL or p.name.startswith(_files.STAGE_PREFIX)))}
    assert present == set(manifest["files"]), (present, manifest["files"])
    nx = manifest["model"]["nx"]
    header = (directory / f"{manifest['name']}.h").read_text()
    assert re.search(rf"#define {manifest['name'].upper()}_NX {nx}\n", header), "manifest and header disagree"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shooting.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_immutable_directory_is_a_one_line_error(tmp_path):
    target = tmp_path / "locked"
    target.mkdir()
    if subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available on this filesystem")
    try:
        with pytest.raises(ValueError, match=r"cannot write into .*locked.*immutable"):
            _export(target)
        proc = _cli("integrator", "--model", "pendulum", "--out", str(target), cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("shooting-codegen: error: cannot write into")
    finally:
        subprocess.run(["chattr", "-i", str(target)])
    assert list(target.iterdir()) == []


def test_dangling_symlink_and_plot_into_a_directory(tmp_path):
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "missing")
    with pytest.raises(ValueError, match="symbolic link to .*missing, which does not exist"):
        _export(link)
    assert not (tmp_path / "missing").exists()
    proc = _cli("tableau", "rk4", "--plot", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "is a directory: give a file name" in proc.stderr
    (tmp_path / "real").mkdir()
    alias = tmp_path / "alias"
    alias.symlink_to(tmp_path / "real")
    assert _export(alias).ok and (tmp_path / "real" / "step.c").exists()  # a link to a directory is followed


def test_mount_point_destination(tmp_path):
    """An empty mounted volume as the destination: staging happens inside it, no cross-device rename."""
    volume = tmp_path / "volume"
    volume.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(volume)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root in a mount namespace)")
    try:
        assert _export(volume).ok
        _consistent(volume)
        assert _export(volume, model="cartpole").ok  # and replacing our own files there
        _consistent(volume)
    finally:
        subprocess.run(["umount", str(volume)])


def test_interrupt_between_moves_still_installs_the_whole_set(tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert _export(out).ok  # pendulum, nx = 2
    real_replace, calls = os.replace, []

    def interrupted(src, dst):
        calls.append(dst)
        real_replace(src, dst)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(_files.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _export(out, model="cartpole")  # nx = 4
    monkeypatch.undo()
    _consistent(out)
    assert json.loads((out / "manifest.json").read_text())["model"]["name"] == "cartpole"
    assert not any(p.name.startswith(".shooting") for p in out.iterdir())


def _watch_renames(out: Path, check, monkeypatch) -> list[str]:
    """Record every rename of one of our files into `out` and call ``check()`` after each (transient entries,
    the journal and staging directories, are not files of the set)."""
    real_replace, moved = os.replace, []

    def watched(src, dst):
        real_replace(src, dst)
        dst = Path(dst)
        if dst.parent == out and dst.name != _files.JOURNAL and not dst.name.startswith(_files.STAGE_PREFIX):
            moved.append(dst.name)
            check(moved)

    monkeypatch.setattr(_files.os, "replace", watched)
    return moved


@pytest.mark.parametrize("names", [["a.txt", "record.json", "zzz.txt"], ["record.json", "s.c", "s.h", "x.bin"],
                                   ["Makefile", "b.json", "record.json"]])
def test_the_record_is_installed_after_every_file_it_lists(tmp_path, monkeypatch, names):
    """Into an existing directory of ours the files are renamed one by one: the record must come last (a
    reader who sees the new record finds every file it lists, new), whatever the names' sorted order."""
    out = tmp_path / "out"

    def writer(tag: str):
        def write(stage: Path) -> None:
            for name in names:
                if name != "record.json":
                    (stage / name).write_text(f"{tag}\n")
            (stage / "record.json").write_text(json.dumps({"generator": _files.GENERATOR, "files": names,
                                                           "tag": tag}))
        return write

    def record_implies_its_files(moved: list[str]) -> None:
        if json.loads((out / "record.json").read_text())["tag"] == "new":
            for name in names:
                assert (out / name).exists(), f"the record appeared before {name}: renames {moved}"
                if name != "record.json":
                    assert (out / name).read_text() == "new\n", f"the record appeared before {name}: {moved}"

    _files.install_directory(out, writer("old"), names, "record.json")
    moved = _watch_renames(out, record_implies_its_files, monkeypatch)
    _files.install_directory(out, writer("new"), names, "record.json")
    monkeypatch.undo()
    assert sorted(moved) == sorted(names) and moved[-1] == "record.json", moved


def test_a_reexport_installs_its_manifest_last(tmp_path, monkeypatch):
    """The same through the integrator export (step.c, step.h, manifest.json: the manifest sorts first)."""
    out = tmp_path / "out"
    assert _export(out).ok  # pendulum

    def manifest_implies_its_files(moved: list[str]) -> None:
        if json.loads((out / "manifest.json").read_text())["model"]["name"] == "cartpole":
            _consistent(out, installing=True)  # the new manifest is in place: so is all it lists, the new header

    moved = _watch_renames(out, manifest_implies_its_files, monkeypatch)
    assert _export(out, model="cartpole").ok
    monkeypatch.undo()
    listed = json.loads((out / "manifest.json").read_text())["files"]
    assert moved[-1] == "manifest.json" and sorted(moved) == sorted(listed), moved
    _consistent(out)


def test_killed_install_is_completed_by_the_next_one(tmp_path):
    """A journal and a staging directory left by a killed process: recover() finishes the moves first."""
    out = tmp_path / "out"
    assert _export(out).ok
    newer = tmp_path / "newer"
    assert _export(newer, model="cartpole").ok
    stage = out / f"{_files.STAGE_PREFIX}killed"
    shutil.copytree(newer, stage)
    order = sorted(p.name for p in stage.iterdir() if p.name != "manifest.json") + ["manifest.json"]
    os.replace(stage / order[0], out / order[0])  # the kill came after the first rename
    (out / _files.JOURNAL).write_text(json.dumps({"stage": stage.name, "files": order}))
    _files.check_destination(out, [], "manifest.json")  # journal and stage count as ours: no refusal
    _files.recover(out)
    _consistent(out)
    assert json.loads((out / "manifest.json").read_text())["model"]["name"] == "cartpole"
    assert sorted(p.name for p in out.iterdir()) == sorted(order)


def test_concurrent_exports_into_one_directory(tmp_path):
    """Six processes, two models, one new directory: every run succeeds and the result is one whole set."""
    out = tmp_path / "shared"
    script = ("import sys, shooting\n"
              "from shooting.codegen import export_integrator\n"
              "F = shooting.build_integrator(shooting.load_model(sys.argv[1]), 'rk4', name='step')\n"
              "sys.exit(0 if export_integrator(F, sys.argv[2]).ok else 1)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, model, str(out)], stderr=subprocess.PIPE, text=True)
             for model in ("pendulum", "cartpole") * 3]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    _consistent(out)
