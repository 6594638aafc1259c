"""Hypothesis: random linear systems and random consistent tableaus."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import shooting
from conftest import evaluate
from test_integrator import discrete_linear_map, linear_model


@st.composite
def tableaus(draw):
    """A random consistent tableau: c = A 1 and sum(b) = 1 by construction."""
    s = draw(st.integers(1, 4))
    explicit = draw(st.booleans())
    entries = st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False)
    A = np.array(draw(st.lists(entries, min_size=s * s, max_size=s * s))).reshape(s, s)
    if explicit:
        A = np.tril(A, -1)
    b = np.array(draw(st.lists(st.floats(0.05, 1.0), min_size=s, max_size=s)))
    return shooting.ButcherTableau(A, b / b.sum(), name="random")


@st.composite
def linear_systems(draw):
    nx = draw(st.integers(1, 4))
    nu = draw(st.integers(1, 2))
    vals = st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False)
    Fm = np.array(draw(st.lists(vals, min_size=nx * nx, max_size=nx * nx))).reshape(nx, nx)
    Gm = np.array(draw(st.lists(vals, min_size=nx * nu, max_size=nx * nu))).reshape(nx, nu)
    return Fm, Gm


@settings(max_examples=40, deadline=None)
@given(tab=tableaus(), system=linear_systems(), steps=st.integers(1, 6),
       mode=st.sampled_from(["forward", "ad", "variational"]))
def test_random_linear_system_and_tableau(tab, system, steps, mode):
    Fm, Gm = system
    # h |F| <= 0.05 and |a_ij| <= 1 with s <= 4 keep I - A kron hF invertible and well conditioned.
    dt = 0.05 * steps / max(1.0, np.linalg.norm(Fm, 2))
    F = shooting.build_integrator(linear_model(Fm, Gm), tab, steps, mode)
    rng = np.random.default_rng(0)
    x0, u0 = rng.normal(size=Fm.shape[0]), rng.normal(size=Gm.shape[1])
    out = evaluate(F, x=x0, u=u0, dt=dt)
    Aref, Bref = discrete_linear_map(tab.A, tab.b, Fm, Gm, dt / steps, steps)
    np.testing.assert_allclose(out["A"], Aref, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(out["B"], Bref, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(out["x_next"].ravel(), Aref @ x0 + Bref @ u0, rtol=1e-11, atol=1e-12)
