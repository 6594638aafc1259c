"""Shared fixtures: a time-varying, parameterised nonlinear test model."""

from __future__ import annotations

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
