"""The compiled NLP kept on disk (`compile_nlp`): reused by later processes, rebuilt when wrong, never a crash.

Every test uses its own cache directory (``SHOOTING_CACHE_DIR``), never the
user's. A "process" is a real subprocess: a library loaded once stays
loaded in a process, so only a new process shows what the next run sees.
The truth is always the uncompiled (SX) solve of the same problem, which
the compiled one must equal to IPOPT's tolerance.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import shooting
from shooting.mpc import nlp_cache
from shooting.mpc.nlp_cache import NLPCacheWarning, compile_nlp_default
from shooting.mpc.nlp_compile import compiler_identity
from support import needs_gcc

pytestmark = needs_gcc

# The problem of most tests: a pendulum swing-up, short, so each compile takes about a second.
SPEC = {"model": "pendulum", "horizon": 8, "dt": 0.05, "Q": [10.0, 1.0]}

CHILD = r"""
import json, sys, warnings
import shooting
from shooting.mpc.nlp_cache import NLPCacheWarning
spec = json.loads(sys.argv[1])
model = shooting.load_model(spec["model"])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ocp = shooting.MultipleShootingOCP(model, spec["horizon"], dt=spec["dt"], Q=spec["Q"], compile_nlp=True)
sol = ocp.solve(model.x0)
rep = ocp.nlp_cache
print(json.dumps({"status": rep.status, "reason": rep.reason, "key": rep.key, "path": str(rep.path),
                  "x": sol.x.tolist(), "u": sol.u.tolist(), "cost": sol.cost, "success": sol.success,
                  "external": ocp.nlp_solver.get_function("nlp_hess_l").is_a("External"),
                  "warnings": [str(w.message) for w in caught if issubclass(w.category, NLPCacheWarning)]}))
"""


def child(cache: Path, spec: dict = SPEC, **env: str) -> subprocess.Popen:
    """A new process that builds and solves `spec` with compile_nlp=True (start it; `result` reads it)."""
    environ = {**os.environ, "SHOOTING_CACHE_DIR": str(cache), **env}
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(spec)], env=environ, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def run(cache: Path, spec: dict = SPEC, **env: str) -> dict:
    return result(child(cache, spec, **env))


def sx_solution(spec: dict = SPEC) -> shooting.OCPSolution:
    model = shooting.load_model(spec["model"])
    ocp = shooting.MultipleShootingOCP(model, spec["horizon"], dt=spec["dt"], Q=spec["Q"], compile_nlp=False)
    assert ocp.nlp_cache is None
    return ocp.solve(model.x0)


def assert_same_solution(got: dict, sol: shooting.OCPSolution) -> None:
    assert got["success"] and sol.success
    np.testing.assert_allclose(got["x"], sol.x, atol=1e-7)
    np.testing.assert_allclose(got["u"], sol.u, atol=1e-6)
    assert got["cost"] == pytest.approx(sol.cost, rel=1e-9)


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "nlp").iterdir()) if (cache / "nlp").exists() else []


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A private cache directory for this test (also in this process's environment)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("SHOOTING_CACHE_DIR", str(path))
    monkeypatch.delenv("SHOOTING_COMPILE_NLP", raising=False)
    return path


# ----------------------------------------------------------------------------- the compiled solve


@pytest.mark.parametrize("solver, hessian", [("ipopt", "exact"), ("ipopt", "gauss-newton"), ("fatrop", "exact")])
def test_compiled_solve_equals_the_sx_solve(forced, cache, solver, hessian):
    """A time-varying model with parameters, per-stage references, a warm start: the compiled functions
    are the solver's (External), and every solve equals the SX one."""
    kw = dict(horizon=10, dt=0.1, Q=[5.0, 0.5], R=[0.1], u_min=-2.0, u_max=2.0, solver=solver, hessian=hessian)
    ocp_c = shooting.MultipleShootingOCP(forced, compile_nlp=True, **kw)
    ocp_s = shooting.MultipleShootingOCP(forced, compile_nlp=False, **kw)
    assert ocp_c.nlp_cache is not None and ocp_c.nlp_cache.status == "built", ocp_c.nlp_cache
    assert ocp_c.nlp_cache.reason == "no entry" and ocp_c.nlp_cache.path.is_file()
    assert ocp_c.nlp_solver.get_function("nlp_hess_l").is_a("External")
    assert ocp_s.nlp_solver.get_function("nlp_hess_l").is_a("SXFunction")
    x_ref = np.column_stack([np.linspace(0.0, 0.3, 11), np.zeros(11)])
    p = np.tile(forced.p0, (10, 1)) * np.linspace(0.9, 1.1, 10)[:, None]
    args = dict(x_ref=x_ref, p=p, t0=0.4)
    cold = [o.solve([0.8, -0.3], **args) for o in (ocp_c, ocp_s)]
    warm = [o.solve([0.75, -0.2], warm_start=c.shifted(), **args) for o, c in zip((ocp_c, ocp_s), cold, strict=True)]
    for c, s in (cold, warm):
        assert c.success and s.success
        assert c.iterations == s.iterations
        np.testing.assert_allclose(c.w, s.w, atol=1e-8)
        np.testing.assert_allclose(c.lam_g, s.lam_g, atol=1e-6 * max(1.0, np.abs(s.lam_g).max()))
        assert c.cost == pytest.approx(s.cost, rel=1e-10)


def test_off_by_default_on_by_environment(cache, monkeypatch):
    model = shooting.load_model("pendulum")
    assert shooting.MultipleShootingOCP(model, 4, dt=0.05).nlp_cache is None
    assert not cache.exists()
    monkeypatch.setenv("SHOOTING_COMPILE_NLP", "1")
    assert shooting.MultipleShootingOCP(model, 4, dt=0.05).nlp_cache.status == "built"
    assert shooting.MultipleShootingOCP(model, 4, dt=0.05, compile_nlp=False).nlp_cache is None
    assert shooting.MultipleShootingOCP(model, 4, dt=0.05, jit=False).nlp_cache.status == "hit"
    monkeypatch.setenv("SHOOTING_COMPILE_NLP", "maybe")
    with pytest.raises(ValueError, match="SHOOTING_COMPILE_NLP='maybe'"):
        shooting.MultipleShootingOCP(model, 4, dt=0.05)
    monkeypatch.setenv("SHOOTING_COMPILE_NLP", "off")
    assert compile_nlp_default(True) is False
    with pytest.raises(ValueError, match="choose one"):
        shooting.SolverSettings(jit=True, compile_nlp=True)
    with pytest.raises(ValueError, match="compile_nlp must be True or False"):
        shooting.SolverSettings(compile_nlp="yes")


# ----------------------------------------------------------------------------- reuse and keys


def test_a_second_process_loads_the_entry_without_rebuilding(cache):
    first = run(cache)
    assert first["status"] == "built" and first["external"] and not first["warnings"]
    [entry] = entries(cache)
    record = json.loads((entry / "entry.json").read_text())
    assert entry.name == first["key"] == record["key"]
    assert sorted(p.name for p in entry.iterdir()) == ["entry.json", record["library"]]
    stamps = {p.name: p.stat().st_mtime_ns for p in entry.iterdir()}
    second = run(cache)
    assert second["status"] == "hit" and second["reason"] == "" and second["key"] == first["key"]
    assert second["external"] and second["path"] == first["path"] == str(entry / record["library"])
    assert {p.name: p.stat().st_mtime_ns for p in entry.iterdir()} == stamps  # loaded, not rewritten
    assert entries(cache) == [entry]
    sol = sx_solution()
    assert_same_solution(first, sol)
    assert_same_solution(second, sol)


def test_a_changed_problem_gets_its_own_entry(cache):
    """Another weight (a constant of the NLP) or horizon is another key; the solver's numerical options are not."""
    model = shooting.load_model("pendulum")
    base = shooting.MultipleShootingOCP(model, 6, dt=0.05, Q=[10.0, 1.0], compile_nlp=True)
    other_q = shooting.MultipleShootingOCP(model, 6, dt=0.05, Q=[10.0, 2.0], compile_nlp=True)
    other_n = shooting.MultipleShootingOCP(model, 7, dt=0.05, Q=[10.0, 1.0], compile_nlp=True)
    tol = shooting.MultipleShootingOCP(model, 6, dt=0.05, Q=[10.0, 1.0], compile_nlp=True,
                                       solver_options={"ipopt.tol": 1e-9})
    reports = [o.nlp_cache for o in (base, other_q, other_n, tol)]
    assert [r.status for r in reports] == ["built", "built", "built", "hit"]
    assert len({r.key for r in reports}) == 3 and reports[3].key == reports[0].key
    assert len(entries(cache)) == 3
    for ocp, q, n in ((other_q, [10.0, 2.0], 6), (other_n, [10.0, 1.0], 7)):  # each solves its own problem
        sol = ocp.solve(model.x0)
        ref = sx_solution({"model": "pendulum", "horizon": n, "dt": 0.05, "Q": q})
        np.testing.assert_allclose(sol.x, ref.x, atol=1e-7)


def _copied_gcc(folder: Path) -> Path:
    """A copy of the real gcc driver in `folder`: another binary (path, time) that behaves the same once
    GCC_EXEC_PREFIX tells it where its cc1 lives, and fails without that."""
    real = Path(os.path.realpath(shutil.which("gcc")))
    install = subprocess.run([str(real), "-print-search-dirs"], capture_output=True, text=True).stdout
    prefix = Path(install.splitlines()[0].split(":", 1)[1].strip()).parent.parent  # install: PREFIX/<target>/<ver>/
    folder.mkdir()
    shutil.copy(real, folder / "gcc")
    return prefix


def test_key_follows_the_compiler(cache, tmp_path, monkeypatch):
    """Another gcc binary is another key: its entries are built anew (and the old ones kept)."""
    model = shooting.load_model("pendulum")
    first = shooting.MultipleShootingOCP(model, 4, dt=0.05, compile_nlp=True).nlp_cache
    prefix = _copied_gcc(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("GCC_EXEC_PREFIX", f"{prefix}/")
    assert str(tmp_path / "bin") in compiler_identity()
    second = shooting.MultipleShootingOCP(model, 4, dt=0.05, compile_nlp=True).nlp_cache
    assert second.status == "built" and second.key != first.key
    assert len(entries(cache)) == 2


# ----------------------------------------------------------------------------- faults


def _library(entry: Path) -> Path:
    return entry / json.loads((entry / "entry.json").read_text())["library"]


def _truncate(entry: Path) -> None:
    lib = _library(entry)
    lib.write_bytes(lib.read_bytes()[: lib.stat().st_size // 2])


def _alter(entry: Path) -> None:  # same size, a few bytes of code changed
    lib = _library(entry)
    data = bytearray(lib.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 64):
        data[i] ^= 0x5A
    lib.write_bytes(bytes(data))


def _garble_record(entry: Path) -> None:
    (entry / "entry.json").write_text('{"format": 1, "key": ')


def _empty(entry: Path) -> None:  # a crash between creating and writing the file
    _library(entry).write_bytes(b"")


def _missing(entry: Path) -> None:
    _library(entry).unlink()


@pytest.mark.parametrize("damage, why", [(_truncate, "size"), (_alter, "checksum"), (_garble_record, "entry.json"),
                                         (_empty, "size"), (_missing, "missing")])
def test_a_damaged_entry_is_rebuilt(cache, damage, why):
    first = run(cache)
    [entry] = entries(cache)
    damage(entry)
    again = run(cache)
    assert again["status"] == "built" and why in again["reason"], again
    assert not again["warnings"]
    assert json.loads((entry / "entry.json").read_text())["size"] == _library(entry).stat().st_size  # whole again
    assert run(cache)["status"] == "hit"
    sol = sx_solution()
    assert_same_solution(first, sol)
    assert_same_solution(again, sol)


def test_a_library_of_another_problem_is_caught_by_evaluating_it(cache):
    """A well-formed entry whose library (checksum and all) computes another NLP: the probe evaluation
    against this problem's SX functions catches it, and the entry is rebuilt."""
    first = run(cache)
    other = run(cache, {**SPEC, "Q": [10.0, 3.0]})
    entry, foreign = cache / "nlp" / first["key"], cache / "nlp" / other["key"]
    _library(entry).unlink()
    shutil.copy(_library(foreign), entry / _library(foreign).name)
    record = json.loads((entry / "entry.json").read_text())
    record.update({k: json.loads((foreign / "entry.json").read_text())[k] for k in ("library", "size", "sha256")})
    (entry / "entry.json").write_text(json.dumps(record))
    again = run(cache)
    assert again["status"] == "built" and "differ from this problem" in again["reason"], again
    assert_same_solution(again, sx_solution())


def test_an_unwritable_cache_falls_back_to_the_sx_functions(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    got = run(blocker / "cache")  # mkdir fails (for root too)
    assert got["status"] == "fallback" and "cannot write the cache directory" in got["reason"]
    assert not got["external"] and len(got["warnings"]) == 1
    assert_same_solution(got, sx_solution())


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_cache_still_serves_its_entries(cache):
    run(cache)
    os.chmod(cache / "nlp", 0o500)
    try:
        assert run(cache)["status"] == "hit"
        got = run(cache, {**SPEC, "Q": [1.0, 1.0]})
        assert got["status"] == "fallback" and "cannot write" in got["reason"]
        assert_same_solution(got, sx_solution({**SPEC, "Q": [1.0, 1.0]}))
    finally:
        os.chmod(cache / "nlp", 0o700)


def test_an_entry_writable_by_others_is_not_loaded(cache):
    first = run(cache)
    entry = cache / "nlp" / first["key"]
    os.chmod(_library(entry), 0o777)
    again = run(cache)
    assert again["status"] == "built" and "writable by other users" in again["reason"]
    assert _library(entry).stat().st_mode & 0o022 == 0


def _processes_inside(folder: Path) -> list[str]:
    """Processes whose working directory lies in `folder` (deleted or not), from /proc (Linux; else none)."""
    found = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            if os.readlink(cwd).startswith(str(folder)):
                found.append(cwd.parent.name)
        except OSError:
            continue
    return found


def test_no_compiler_a_failing_or_a_slow_one_falls_back(cache, tmp_path, monkeypatch):
    model = shooting.load_model("pendulum")
    reference = shooting.MultipleShootingOCP(model, 5, dt=0.05, compile_nlp=False).solve(model.x0)
    monkeypatch.setenv("SHOOTING_TOOL_TIMEOUT", "0.05")  # the real gcc, killed after 50 ms
    with pytest.warns(NLPCacheWarning, match="timed out"):
        ocp = shooting.MultipleShootingOCP(model, 5, dt=0.05, compile_nlp=True)
    assert ocp.nlp_cache.status == "fallback" and not ocp.nlp_solver.get_function("nlp_hess_l").is_a("External")
    np.testing.assert_allclose(ocp.solve(model.x0).x, reference.x, atol=1e-12)
    assert entries(cache) == []  # the killed build left nothing behind
    assert not _processes_inside(cache)  # ... and no compiler running on
    monkeypatch.delenv("SHOOTING_TOOL_TIMEOUT")
    _copied_gcc(tmp_path / "broken_bin")  # a real gcc driver that cannot find its compiler proper
    monkeypatch.setenv("PATH", f"{tmp_path / 'broken_bin'}:{os.environ['PATH']}")
    with pytest.warns(NLPCacheWarning, match="gcc failed on the NLP's C: .*cc1"):
        ocp = shooting.MultipleShootingOCP(model, 5, dt=0.05, compile_nlp=True)
    assert ocp.nlp_cache.status == "fallback" and entries(cache) == []
    np.testing.assert_allclose(ocp.solve(model.x0).x, reference.x, atol=1e-12)
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.warns(NLPCacheWarning, match="gcc not found"):
        ocp = shooting.MultipleShootingOCP(model, 5, dt=0.05, compile_nlp=True)
    assert ocp.nlp_cache.status == "fallback"
    np.testing.assert_allclose(ocp.solve(model.x0).x, reference.x, atol=1e-12)


def test_an_nlp_too_large_to_compile_is_solved_uncompiled_without_a_warning(cache, monkeypatch):
    monkeypatch.setattr(nlp_cache, "MAX_INSTRUCTIONS", 100)  # the limit, scaled down to a small problem
    model = shooting.load_model("pendulum")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ocp = shooting.MultipleShootingOCP(model, 5, dt=0.05, compile_nlp=True)
    assert ocp.nlp_cache.status == "fallback" and "too large to compile" in ocp.nlp_cache.reason
    assert entries(cache) == [] and not ocp.nlp_solver.get_function("nlp_hess_l").is_a("External")
    np.testing.assert_allclose(ocp.solve(model.x0).x, sx_solution({**SPEC, "horizon": 5, "Q": None}).x, atol=1e-12)


def test_concurrent_builds_of_one_key_both_succeed(cache):
    procs = [child(cache), child(cache)]  # both miss and compile at once; one publishes, both work
    got = [result(p) for p in procs]
    assert {g["status"] for g in got} <= {"built", "hit"} and all(g["external"] for g in got)
    assert got[0]["key"] == got[1]["key"]
    assert [p.name for p in entries(cache)] == [got[0]["key"]]  # one entry, no temporary folder left
    sol = sx_solution()
    for g in got:
        assert_same_solution(g, sol)
    assert run(cache)["status"] == "hit"


# ----------------------------------------------------------------------------- the CLI


def test_cli_mpc_uses_the_cache_when_told_to(cache, tmp_path):
    """Off by default (the first run of a problem pays seconds of gcc, a later one saves a fraction of a second);
    --compile-nlp or SHOOTING_COMPILE_NLP=1 turn it on."""
    args = ["mpc", "--model", "pendulum", "--horizon", "6", "--sim-steps", "3", "-q"]
    off = subprocess.run([sys.executable, "-m", "shooting.cli", *args, "--out", "a"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert off.returncode == 0 and off.stderr == "", off.stderr
    assert not cache.exists()
    on = subprocess.run([sys.executable, "-m", "shooting.cli", *args, "--compile-nlp", "--out", "b"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=300)
    assert on.returncode == 0 and on.stderr == "", on.stderr
    [entry] = entries(cache)
    assert _library(entry).is_file()
    a = json.loads((tmp_path / "a" / "trajectory.json").read_text())
    b = json.loads((tmp_path / "b" / "trajectory.json").read_text())
    np.testing.assert_allclose(a["x"], b["x"], atol=1e-7)
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    warned = subprocess.run([sys.executable, "-m", "shooting.cli", *args, "--compile-nlp", "--out", "w"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "SHOOTING_CACHE_DIR": str(blocked / "cache")})
    assert warned.returncode == 0 and (tmp_path / "w" / "trajectory.json").is_file()
    assert warned.stderr.startswith("shooting-codegen: warning: the NLP is solved without compiled functions: "
                                    "cannot write the cache directory")
    assert len(warned.stderr.strip().splitlines()) == 1, warned.stderr
    bad = subprocess.run([sys.executable, "-m", "shooting.cli", *args, "--out", "c"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, env={**os.environ, "SHOOTING_COMPILE_NLP": "x"})
    assert bad.returncode == 2 and "SHOOTING_COMPILE_NLP" in bad.stderr and "Traceback" not in bad.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about in a normal run
        assert compile_nlp_default(True) is True
