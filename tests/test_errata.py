"""The errata of the course notes (docs/errata.md), proved by computation: the notes' versions fail, the
corrections hold.

Items whose proof is a test of the library live with that test (docs/errata.md
names it); these are the ones that needed a test of their own.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import shooting
from shooting.tableaus.stability import e_polynomial

RK4_B = ["1/6", "1/3", "1/3", "1/6"]


def test_e1_chained_stage_states_are_first_order():
    """E1: x_3 = x_2 + h/2 f_2, x_4 = x_3 + h f_3 is the tableau below: not RK4, order 1."""
    chained = [[0, 0, 0, 0], ["1/2", 0, 0, 0], ["1/2", "1/2", 0, 0], ["1/2", "1/2", 1, 0]]
    with pytest.raises(ValueError, match=r"row 2 of A sums to 1 but c\[2\] = 1/2"):
        shooting.ButcherTableau(chained, RK4_B, [0, "1/2", "1/2", 1])
    assert shooting.ButcherTableau(chained, RK4_B).verified_order() == 1
    assert shooting.get_tableau("rk4").verified_order() == 4  # the corrected stage states


def test_e6_half_weights_are_inconsistent():
    """E6: z_{n+1} = z_n + h/2 (k1 + 2 k2 + 2 k3 + k4) has weights summing to 3."""
    with pytest.raises(ValueError, match="b sums to 3"):
        shooting.get_tableau("rk4").replace(b=["1/2", 1, 1, "1/2"])


@pytest.mark.parametrize("name, expected", [
    ("midpoint", (0, 0, Fraction(-1, 4))),
    ("heun", (0, 0, Fraction(-1, 4))),
    ("ralston", (0, 0, Fraction(-1, 4))),
    ("kutta3", (0, 0, Fraction(1, 12), Fraction(-1, 36))),
    ("rk4", (0, 0, 0, Fraction(1, 72), Fraction(-1, 576))),
])
def test_e10_oscillations_improve_from_rk3_not_rk2(name, expected):
    """E10: E(w) = |Q(iy)|^2 - |P(iy)|^2, w = y^2: negative for every y != 0 for RK2, not for RK3 and RK4."""
    E = e_polynomial(shooting.get_tableau(name))
    assert E == tuple(Fraction(e) for e in expected)
    tab = shooting.get_tableau(name)
    on_axis = np.abs(tab.stability_function(1j * np.array([0.5, 1.0, 1.5])))
    if name in ("midpoint", "heun", "ralston"):
        assert np.all(on_axis > 1)  # |R(iy)|^2 = 1 + y^4/4
    else:
        assert np.all(on_axis <= 1)  # stable on |y| <= sqrt(3) (RK3), 2 sqrt(2) (RK4)


def test_e18_parallel_axis_theorem_sign():
    """E18: M_o = M_c + m (|r|^2 I - r r^T); the printed second form (with minus) is wrong."""
    rng = np.random.default_rng(1)
    points, masses = rng.normal(size=(50, 3)), rng.uniform(0.1, 1.0, 50)

    def inertia(about: np.ndarray) -> np.ndarray:
        d = points - about
        return sum(mi * (di @ di * np.eye(3) - np.outer(di, di)) for mi, di in zip(masses, d, strict=True))

    m = masses.sum()
    c = masses @ points / m
    r = c  # from the origin o to the centre of mass
    M_o, M_c = inertia(np.zeros(3)), inertia(c)
    right = M_c + m * (r @ r * np.eye(3) - np.outer(r, r))
    wrong = M_c - m * (r @ r * np.eye(3) - np.outer(r, r))
    assert np.allclose(M_o, right, rtol=1e-12, atol=1e-12 * np.abs(M_o).max())
    assert not np.allclose(M_o, wrong, rtol=1e-3)
