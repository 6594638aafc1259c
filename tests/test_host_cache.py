"""The host build of an exported controller in the per-user cache (`shooting.controller.host_cache`): loaded again,
it is not compiled again; every load has its own memory; an altered entry is built again; the cache can be off.

Truth: the compiler made unusable (a load that needed it would fail), the entry's files and checksums, and two
controllers of one export stepped differently giving what a fresh one gives.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import shooting
import shooting.controller.host_cache as host_cache
from shooting.codegen import export_controller, load_controller
from support import needs_gcc

pytestmark = needs_gcc
X0 = np.array([0.2, 0.3, 0.0, 0.0])


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = shooting.load_model("cartpole")
    ocp = shooting.MultipleShootingOCP.from_problem(
        model, shooting.default_scenario("cartpole").problem.with_changes(horizon=15))
    out = tmp_path_factory.mktemp("cached") / "ctl"
    report = export_controller(ocp, out, x0=X0, check=True, check_steps=5)
    assert report.ok, report.problems
    return out


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / "controller").glob("[0-9a-f]*"))


def _no_compiler(*args: object, **kwargs: object) -> None:
    raise AssertionError("compiled although the build is cached")


def test_a_controller_loaded_again_is_not_compiled_again(exported: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOOTING_CACHE_DIR", str(tmp_path))
    first = load_controller(exported).step(X0, 0.0)
    (entry,) = _entries(tmp_path)
    monkeypatch.setattr(host_cache, "compile_host", _no_compiler)
    monkeypatch.setattr(host_cache, "build_shared_library", _no_compiler)
    again = load_controller(exported).step(X0, 0.0)
    assert _entries(tmp_path) == [entry]
    assert np.array_equal(again.u, first.u) and again.iterations == first.iterations


def test_every_load_has_its_own_memory(exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOOTING_CACHE_DIR", str(tmp_path))
    a, b = load_controller(exported), load_controller(exported)
    fresh = a.step(X0, 0.0)
    for k in range(1, 4):  # a goes on (warm, shifted, another state)
        a.step(X0 * (1 - 0.2 * k), 0.05 * k)
    cold = b.step(X0, 0.0)  # b is as fresh as a was
    assert np.array_equal(cold.u, fresh.u) and cold.iterations == fresh.iterations


def test_an_altered_entry_is_built_again_not_loaded(exported: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOOTING_CACHE_DIR", str(tmp_path))
    want = load_controller(exported).step(X0, 0.0)
    (entry,) = _entries(tmp_path)
    (library,) = entry.glob("controller-*.so")
    data = bytearray(library.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: its checksum no longer the recorded one
    library.write_bytes(bytes(data))
    got = load_controller(exported).step(X0, 0.0)
    assert np.array_equal(got.u, want.u)
    (rebuilt,) = entry.glob("controller-*.so")
    assert host_cache.check_entry(tmp_path / "controller", entry, key=entry.name, fmt=host_cache.CACHE_FORMAT,
                                  prefix="controller")[1] == rebuilt


def test_the_cache_can_be_turned_off(exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOOTING_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(host_cache.CACHE_ENV, "0")
    assert load_controller(exported).step(X0, 0.0).status == "ok"
    assert _entries(tmp_path) == []
