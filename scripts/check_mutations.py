#!/usr/bin/env python3
"""Mutation check: each one-line change of issue 40, applied to a copy of the repository, must fail its tests.

    python scripts/check_mutations.py               # every change: a copy each, its tests run there (minutes)
    python scripts/check_mutations.py --only 3,8    # the changes numbered 3 and 8
    python scripts/check_mutations.py --quick       # no baseline run of the tests on the unchanged copy
    python scripts/check_mutations.py --dry-run     # only: every old text found once, every named test collected

A change is (file, exact old text, new text, test node ids). For each, the
repository's files (tracked and untracked but not ignored: work in progress
included) are copied to a temporary directory, the old text is replaced
there (it must occur exactly once: a text that is gone or ambiguous is a
vacuous entry and fails the check), and the named tests run in that copy
with ``PYTHONPATH`` set to it and a fresh ``SHOOTING_CACHE_DIR`` (no compiled
NLP, QP or controller shared with another run). The change is caught when
pytest reports failed tests (exit status 1). Before the changes, unless
--quick, the union of the named tests runs on an unchanged copy and must
pass: a test that fails anyway catches nothing.

The script prints a table (change, tests, caught) and exits 1 when a change
is not caught, an old text is not found once, or the baseline fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = "shooting/controller/templates/mpc.c.in"
TESTS = "tests/test_mutations_caught.py"
TESTS_C = "tests/test_mutations_caught_c.py"
#: Seconds one pytest run may take before it counts as an error.
TIMEOUT = 900


@dataclass(frozen=True)
class Change:
    number: int
    what: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


CHANGES = (
    Change(1, "C merit: a soft path row's excess subtracted", TEMPLATE,
           "    if (soft) {\n      *J += SLACK_L1 * e + SLACK_L2 * e * e;",
           "    if (soft) {\n      *J -= SLACK_L1 * e + SLACK_L2 * e * e;",
           (f"{TESTS_C}::test_c_solve_from_a_violated_soft_path_row_reaches_ipopts_optimum",)),
    Change(2, "least squares: Gauss-Newton Hessian halved", "shooting/mpc/costs.py",
           "return 2 * ca.mtimes([J.T, W, J]), 2 * ca.mtimes([J.T, W, r])",
           "return ca.mtimes([J.T, W, J]), 2 * ca.mtimes([J.T, W, r])",
           (f"{TESTS}::test_the_rti_qp_of_a_least_squares_cost_is_casadis_hessian_and_gradient",)),
    Change(3, "C terminal rows: right-hand side's sign", TEMPLATE,
           "      real s = -c[i];\n      for (j = 0; j < NX; ++j) s += Cx[",
           "      real s = c[i];\n      for (j = 0; j < NX; ++j) s += Cx[",
           (f"{TESTS_C}::test_c_solve_meets_a_terminal_constraint_as_ipopt_does",)),
    Change(4, "C line search: trial defects at t0 for every stage", TEMPLATE,
           "    if (mode == TRIAL) {\n      real tk = mem->t0 + (real)k * DT, dt = DT;",
           "    if (mode == TRIAL) {\n      real tk = mem->t0, dt = DT;",
           (f"{TESTS_C}::test_c_solve_of_a_time_varying_model_reaches_ipopts_optimum",)),
    Change(5, "sweep --resume: journal rows not checked against the cases", "shooting/sweeps/api.py",
           'if row["seed"] != case.seed or not (np.array_equal(row["x0"], case.x0) and '
           'np.array_equal(row["p"], case.p)):',
           "if False:",
           (f"{TESTS}::test_resume_refuses_the_journal_of_a_sweep_with_other_cases",)),
    Change(6, "Ctrl-C handler raises inside cleanup", "shooting/_interrupt.py",
           "if sys.exc_info()[1] is not None:",
           "if False:",
           (f"{TESTS}::test_a_ctrl_c_during_cleanup_lets_the_cleanup_finish_then_stops",)),
    Change(7, "Ctrl-C during the CLI's deferred imports forgotten", "shooting/_interrupt.py",
           "_state.requested = early",
           "_state.requested = False",
           (f"{TESTS}::test_a_ctrl_c_during_the_deferred_imports_stops_the_run",)),
    Change(8, "C line search: Armijo's sign flipped", TEMPLATE,
           "phit <= ref - ARMIJO * a * pred",
           "phit <= ref + ARMIJO * a * pred",
           (f"{TESTS_C}::test_c_line_search_cuts_a_full_step_that_does_not_decrease_the_merit",)),
    Change(9, "C merit weight: hard state bounds' multipliers left out", TEMPLATE,
           "if (!SOFT_BX) m = absmax(",
           "if (0) m = absmax(",
           (f"{TESTS_C}::test_c_merit_weight_exceeds_ipopts_multiplier_of_an_active_hard_state_bound",)),
)


def _files(repo: Path) -> list[str]:
    """The repository's files: tracked and untracked, not ignored (what a commit of the work tree would hold)."""
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         check=True, capture_output=True).stdout.decode()
    names = (name for name in out.split("\0") if name)
    return sorted({name for name in names if (repo / name).is_symlink() or (repo / name).is_file()})


def _copy(repo: Path, dest: Path) -> None:
    for name in _files(repo):
        source, target = repo / name, dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # (shooting/models -> ../models: the link itself, as git keeps it)
            os.symlink(os.readlink(source), target)
        else:
            shutil.copy2(source, target)


def _occurrences(repo: Path, change: Change) -> int:
    return (repo / change.path).read_text(encoding="utf-8").count(change.old)


def _apply(copy: Path, change: Change) -> None:
    path = copy / change.path
    text = path.read_text(encoding="utf-8")
    assert text.count(change.old) == 1, change.number
    path.write_text(text.replace(change.old, change.new), encoding="utf-8")


def _pytest(copy: Path, tests: tuple[str, ...], cache: Path) -> tuple[int, str, str]:
    """pytest on `tests` in `copy`: (exit status, its output's last lines, the first failure's line)."""
    env = {**os.environ, "PYTHONPATH": str(copy), "SHOOTING_CACHE_DIR": str(cache)}
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    try:
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=line", *tests],
                              cwd=copy, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {TIMEOUT} s", ""
    lines = (done.stdout + done.stderr).strip().splitlines()
    # (--tb=line: one "path:line: error" line per failure)
    failures = [line.replace(f"{copy}{os.sep}", "") for line in lines if line.startswith(str(copy))]
    return done.returncode, "\n".join(lines[-15:]), failures[0] if failures else ""


def _where_imported(copy: Path, cache: Path) -> str:
    """The package's folder that Python imports with PYTHONPATH at `copy` (it must be the copy's)."""
    env = {**os.environ, "PYTHONPATH": str(copy), "SHOOTING_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-c", "import shooting, os; print(os.path.dirname(shooting.__file__))"],
                          cwd=copy, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _copy_for(repo: Path, base: Path, label: str) -> tuple[Path, Path]:
    copy, cache = base / label, base / f"{label}_cache"
    _copy(repo, copy)
    cache.mkdir()
    where = _where_imported(copy, cache)
    if Path(where).resolve() != (copy / "shooting").resolve():
        raise SystemExit(f"check_mutations: with PYTHONPATH={copy} Python imports shooting from {where}: the copy "
                         f"would not be tested")
    return copy, cache


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated change numbers (default: all)")
    ap.add_argument("--quick", action="store_true", help="skip the baseline run on the unchanged copy")
    ap.add_argument("--dry-run", action="store_true",
                    help="check only that every old text occurs once and every named test is collected")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copies (their folder is printed)")
    ap.add_argument("--repo", type=Path, default=REPO, help=f"the repository (default {REPO})")
    args = ap.parse_args(argv)
    repo = args.repo.resolve()
    wanted = {int(n) for n in args.only.split(",") if n.strip()} if args.only else {c.number for c in CHANGES}
    unknown = wanted - {c.number for c in CHANGES}
    if unknown:
        ap.error(f"no change numbered {sorted(unknown)} (1..{len(CHANGES)})")
    changes = [c for c in CHANGES if c.number in wanted]

    problems = []
    for c in changes:
        n = _occurrences(repo, c)
        if n != 1:
            problems.append(f"change {c.number}: its old text occurs {n} times in {c.path} (must be once): "
                            f"{c.old!r:.120}")
    if args.dry_run:
        tests = sorted({t for c in changes for t in c.tests})
        env = {**os.environ, "PYTHONPATH": str(repo)}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
                               *tests], cwd=repo, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        if done.returncode != 0:
            problems.append(f"the named tests are not all collected:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        for p in problems:
            print(f"check_mutations: {p}")
        print(f"{len(changes)} changes: " + ("every old text found once, every named test collected" if not problems
                                            else f"{len(problems)} problems"))
        return 1 if problems else 0

    base = Path(tempfile.mkdtemp(prefix="check_mutations_"))
    rows: list[tuple[str, str, str, str]] = []
    try:
        if not args.quick:
            tests = tuple(sorted({t for c in changes for t in c.tests}))
            copy, cache = _copy_for(repo, base, "baseline")
            start = time.perf_counter()
            rc, tail, _ = _pytest(copy, tests, cache)
            seconds = time.perf_counter() - start
            print(f"baseline: {len(tests)} tests on the unchanged copy: exit {rc} ({seconds:.0f} s)", flush=True)
            if rc != 0:
                problems.append(f"the tests fail on the unchanged copy (exit {rc}):\n{tail}")
        for c in changes:
            if _occurrences(repo, c) != 1:
                rows.append((str(c.number), c.what, ", ".join(t.rsplit("::", 1)[-1] for t in c.tests),
                             "no (old text not found once)"))
                continue
            copy, cache = _copy_for(repo, base, f"change_{c.number}")
            _apply(copy, c)
            start = time.perf_counter()
            rc, tail, failure = _pytest(copy, c.tests, cache)
            seconds = time.perf_counter() - start
            caught = "yes" if rc == 1 else ("no" if rc == 0 else f"no (pytest exit {rc})")
            if rc != 1:
                problems.append(f"change {c.number} not caught (pytest exit {rc}):\n{tail}")
            rows.append((str(c.number), c.what, ", ".join(t.rsplit("::", 1)[-1] for t in c.tests),
                         f"{caught} ({seconds:.0f} s)"))
            print(f"change {c.number}: {caught}" + (f": {failure[:160]}" if failure else ""), flush=True)
            if not args.keep:
                shutil.rmtree(copy, ignore_errors=True)
                shutil.rmtree(cache, ignore_errors=True)
    finally:
        if args.keep:
            print(f"copies kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)

    print()
    header = ("#", "change", "tests", "caught")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for r in [header, *rows]:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    for p in problems:
        print(f"\ncheck_mutations: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
