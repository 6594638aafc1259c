"""Lookup tables, erfinv and remainder in generated C: compiled and run against CasADi and exact references."""

from __future__ import annotations

import math
import statistics

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.codegen import export_integrator, generate_c, toolchain, verify
from support import needs_gcc, needs_m4

RNG = np.random.default_rng(7)


def _table(method: str, dims: int, m: int, lookup: str) -> ca.Function:
    grids = [np.sort(RNG.uniform(-2, 2, 5 + d)) for d in range(dims)]  # uneven grids
    if lookup == "exact":
        grids = [np.linspace(-2, 2, 5 + d) for d in range(dims)]  # equidistant lookup needs even grids
    size = int(np.prod([len(g) for g in grids])) * m
    return ca.interpolant(f"t_{method}_{dims}_{m}_{lookup}", method, grids, RNG.normal(size=size),
                          {"lookup_mode": [lookup] * dims})


def _with_jacobian(table: ca.Function, dims: int) -> ca.Function:
    x = ca.SX.sym("x", dims)
    y = table(x)
    return ca.Function("f", [x], [y, ca.jacobian(y, x)], ["x"], ["y", "dy"])


def _points(dims: int) -> list[list[np.ndarray]]:
    """Inside the grid, on its edges and outside it (extrapolation / zero)."""
    pts = [RNG.uniform(-1.8, 1.8, dims) for _ in range(5)] + [np.full(dims, 2.6), np.full(dims, -2.4)]
    return [[p] for p in pts]


@needs_gcc
@pytest.mark.parametrize("method", ["linear", "bspline"])
@pytest.mark.parametrize("dims, m", [(1, 1), (2, 1), (2, 3), (3, 2)])
@pytest.mark.parametrize("lookup", ["linear", "exact", "binary"])
@pytest.mark.parametrize("real", ["double", "float"])
def test_tables_and_their_derivatives_match_casadi(method, dims, m, lookup, real):
    if method == "bspline" and lookup == "exact":
        pytest.skip("CasADi itself refuses equidistant lookup for a spline's derivative (uneven knots)")
    F = _with_jacobian(_table(method, dims, m, lookup), dims)
    report = verify.check_host(generate_c(F, "lut", real=real), F, _points(dims))
    assert report.passed, report.summary()


@needs_gcc
def test_erfinv_in_c_is_accurate_to_rounding(tmp_path):
    """Our C erfinv against the inverse of erf (CasADi's own erfinv is only good to ~4e-6)."""
    y = ca.SX.sym("y")
    F = ca.Function("inv", [y], [ca.erfinv(y), ca.remainder(y * 7.3, 1.1)])
    export = generate_c(F, "inv")
    (tmp_path / "inv.c").write_text(export.files["inv.c"])
    (tmp_path / "inv.h").write_text(export.files["inv.h"])
    result = toolchain.compile_host([tmp_path / "inv.c"], tmp_path / "inv.so", extra_flags=("-shared", "-fPIC"))
    assert result.ok, result.stderr
    ext = ca.external("inv", str(tmp_path / "inv.so"))
    for value in np.concatenate([np.linspace(-0.999, 0.999, 301), [1e-9, -0.3, 0.9999]]):
        inv, rem = (float(v) for v in ext(value))
        # Backward error: erf of the result gives the input back to a few ulps, which is what an
        # inverse computed to rounding achieves (a forward reference would itself be off by as much).
        slope = 2 / math.sqrt(math.pi) * math.exp(-inv * inv)
        assert abs(math.erf(inv) - value) <= 2 * math.ulp(value) + 4 * slope * math.ulp(inv), value
        if abs(value) > 0.05:  # (1 + y) / 2 loses the digits of a small y: no reference there
            exact = statistics.NormalDist().inv_cdf((value + 1) / 2) / math.sqrt(2)
            assert abs(inv - exact) <= 1e-13 * abs(exact), value
        assert rem == math.remainder(value * 7.3, 1.1)
    assert float(ext(1.0)[0]) == math.inf and math.isnan(float(ext(1.5)[0]))


@needs_m4
def test_model_with_tables_on_the_cortex_m4(tmp_path):
    """A track curvature (B-spline) and a drag map (2-D linear) in a model: float C on the board."""
    s_grid = np.linspace(0, 10, 21)
    kappa = ca.interpolant("kappa", "bspline", [s_grid], 0.2 * np.sin(s_grid))
    drag = ca.interpolant("drag", "linear", [np.linspace(-2, 2, 5), np.linspace(0, 3, 4)],
                          RNG.uniform(0.1, 1.0, 20))
    x, u = ca.SX.sym("x", 3), ca.SX.sym("u")
    xdot = ca.vertcat(x[1], -kappa(x[0]) * x[1] ** 2 - drag(ca.vertcat(x[2], x[1])) * x[1] + u,
                      ca.erfinv(0.5 * ca.tanh(x[0])) + ca.remainder(x[2], 1.3))
    model = shooting.Model("track", x, u, xdot, x0=[1.0, 1.0, 0.5], dt=0.05)
    F = shooting.build_integrator(model, "rk4", 6)
    report = export_integrator(F, tmp_path / "c", real="float", target="cortex-m4", check=True, vectors=4)
    assert report.ok, report.problems
    assert report.double_symbols == ()


def test_untranslatable_calls_name_the_function():
    x = ca.MX.sym("x")
    rf = ca.rootfinder("rf", "newton", ca.Function("g", [x], [x**3 - 2]))
    F = ca.Function("f", [x], [rf(x)])
    with pytest.raises(ValueError, match=r"cannot export a call of the CasADi function rf \(Newton\)"):
        generate_c(F, "f")
