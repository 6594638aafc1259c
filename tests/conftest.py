"""Shared fixtures: a time-varying, parameterised nonlinear test model."""

from __future__ import annotations

from collections.abc import Iterator

import casadi as ca
import numpy as np
import pytest

import shooting

try:  # CasADi >= 3.7 warns once when numpy meets casadi values; we convert explicitly.
    ca.GlobalOptions.setNumpyMode(1)
except AttributeError:
    pass


def forced_pendulum() -> shooting.Model:
    """x1' = x2, x2' = -a sin(x1) - d x2 + u cos(w t): time-varying, with parameters (a, d, w)."""
    x = ca.SX.sym("x", 2)
    u = ca.SX.sym("u")
    p = ca.SX.sym("p", 3)
    t = ca.SX.sym("t")
    xdot = ca.vertcat(x[1], -p[0] * ca.sin(x[0]) - p[1] * x[1] + u * ca.cos(p[2] * t))
    return shooting.Model("forced", x, u, xdot, p=p, t=t, p0=[2.0, 0.1, 3.0], x0=[0.8, -0.3])


@pytest.fixture(scope="session")
def forced() -> shooting.Model:
    return forced_pendulum()


def evaluate(F: ca.Function, **kw) -> dict[str, np.ndarray]:
    """Call a Function by keyword and return numpy arrays (dense, 2-D)."""
    return {k: np.array(ca.densify(v)) for k, v in F(**kw).items()}


@pytest.fixture(scope="session", autouse=True)
def _private_nlp_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The suite never writes into the user's ~/.cache: one cache folder for the session (tests that test the
    cache set their own)."""
    import os

    os.environ.setdefault("SHOOTING_CACHE_DIR", str(tmp_path_factory.mktemp("nlp_cache")))


@pytest.fixture(scope="session", autouse=True)
def _sigint_as_a_terminal_gives_it() -> Iterator[None]:
    """Children start with SIGINT's default action, as from a terminal. A suite run as a background job of a
    script (``pytest ... &``) inherits SIGINT ignored, and so would every CLI the Ctrl-C tests start: the CLI
    keeps an ignored SIGINT ignored (`shooting._interrupt`), so those tests would send their Ctrl-C to nothing."""
    import signal
    import threading

    ignored = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


# The everyday tier is ``pytest -m "not slow"``: these modules build and run C (on the host and the emulated
# Cortex-M4), call IPOPT for references, start subprocesses, Dask clusters or benchmarks; each of their tests is
# marked slow. Chosen by measured durations (``pytest --durations=0``): the rest runs in about 6 minutes (-n 2).
SLOW_MODULES = frozenset({
    "test_adjoint", "test_check_explained", "test_check_faults", "test_check_line", "test_closed_loop",
    "test_constraints_rti", "test_controller", "test_controller_reach", "test_costs_rti", "test_cycles", "test_dae_c",
    "test_dae_mpc", "test_deadline", "test_docs", "test_examples", "test_exact_hessian", "test_export",
    "test_firmware", "test_interrupts", "test_limits", "test_mpc_cli", "test_nlp_cache", "test_ocp_qp", "test_peers",
    "test_pipeline", "test_rate_penalty", "test_reexport", "test_rti_compiled", "test_scripts", "test_soft_bounds",
    "test_sqp", "test_sweep", "test_time_varying", "test_substep_scaling", "test_manifest_safety", "test_peer_ocps",
    "test_check_scenario", "test_crane_outputs", "test_output_feedback", "test_mutations_caught_c", "test_estimator_c",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.module is not None and item.module.__name__.rsplit(".", 1)[-1] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


#: A test outside the slow tier that runs longer than this is named at the end of the run (not failed: speed is
#: the benchmarks'): mark it slow, or its module in `SLOW_MODULES`, so that the everyday tier stays everyday.
EVERYDAY_SECONDS = 30.0


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    long = sorted((report.duration, report.nodeid) for status in ("passed", "failed")
                  for report in terminalreporter.stats.get(status, [])
                  if getattr(report, "when", "") == "call" and "slow" not in getattr(report, "keywords", {})
                  and report.duration > EVERYDAY_SECONDS)
    if long:
        terminalreporter.write_sep("-", f"outside the slow tier, longer than {EVERYDAY_SECONDS:g} s: mark them slow")
        for duration, nodeid in reversed(long):
            terminalreporter.write_line(f"{duration:7.1f} s  {nodeid}")
