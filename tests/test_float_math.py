"""Single precision's own sine and cosine and the shared reciprocals of the float emitter, against exact values.

Independent truth: the C library's double-precision sin and cos (correct to
well below a float's ulp) evaluated at the same float arguments, in the same
compiled program; and for the reciprocals, CasADi's own evaluation of the
Function in double. Tolerances: the template's stated 2 ulp (measured 1.7 to
2.1: the reduction's two roundings, the polynomial's, the last addition's),
2.5 allowed; beyond the exact-reduction limit newlib's (or glibc's) sinf.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import casadi as ca
import numpy as np
import pytest

import shooting
from shooting.codegen import toolchain
from shooting.codegen.c_files import generate_c
from shooting.codegen.emitter import TRIG_LIMIT, CEmitter
from support import needs_gcc

_MAIN = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "trig.h"
/* The worst error in units of the last place of the exact value (at least 2^-20's ulp: near a zero of sin, the
 * absolute error a float argument allows), over n points of [-hi, hi], for sin and cos from one reduction
 * (s, c) and from single calls (s2 = sin(x + 0), c2 = cos(x + 0)). */
static double ulps(float v, double exact) {
  float a = (float)fabs(exact) > 9.5367431640625e-07f ? (float)fabs(exact) : 9.5367431640625e-07f;
  return fabs((double)v - exact) / (double)(nextafterf(a, INFINITY) - a);
}
int main(int argc, char** argv) {
  float x, out[4];
  const float* arg[3];
  float* res[4];
  double worst[4] = {0, 0, 0, 0}, hi;
  long i, n = 400001;
  (void)argc;
  hi = atof(argv[1]);
  arg[0] = arg[1] = arg[2] = &x;
  for (i = 0; i < 4; ++i) res[i] = out + i;
  for (i = 0; i < n; ++i) {
    double e[4];
    int j;
    x = (float)(-hi + 2 * hi * (double)i / (double)(n - 1));
    if (trig(arg, res, 0, 0, 0)) return 1;
    e[0] = sin((double)x); e[1] = cos((double)x); e[2] = sin((double)x); e[3] = cos((double)x);
    for (j = 0; j < 4; ++j) if (ulps(out[j], e[j]) > worst[j]) worst[j] = ulps(out[j], e[j]);
  }
  printf("%.3f %.3f %.3f %.3f\n", worst[0], worst[1], worst[2], worst[3]);
  return 0;
}
"""


@needs_gcc
@pytest.mark.parametrize("hi", [20.0, TRIG_LIMIT, 3 * TRIG_LIMIT])
def test_own_sine_and_cosine_are_within_two_ulp(tmp_path: Path, hi: float) -> None:
    """sin and cos of one angle (one reduction, ``_sincosf``) and of two angles each alone (``_sinf``,
    ``_cosf``) on [-hi, hi]: within 2.5 ulp of the exact values; beyond the limit the C library's (a wrong
    reduction constant, a coefficient off by a unit in its last digit or a quadrant off by one fail)."""
    x, y, z = ca.SX.sym("x"), ca.SX.sym("y"), ca.SX.sym("z")  # (the program passes the same angle to each)
    F = ca.Function("trig", [x, y, z], [ca.sin(x), ca.cos(x), ca.sin(y), ca.cos(z)], ["x", "y", "z"],
                    ["s", "c", "s2", "c2"])
    export = generate_c(F, "trig", real="float")
    source = export.files["trig.c"]
    assert all(f"trig_{fn}(w" in source for fn in ("sincosf", "sinf", "cosf"))  # (calls, not definitions)
    for name, text in export.files.items():
        if name.endswith((".c", ".h")):
            (tmp_path / name).write_text(text)
    (tmp_path / "main.c").write_text(_MAIN)
    build = toolchain.compile_host([tmp_path / "trig.c", tmp_path / "main.c"], tmp_path / "prog",
                                   extra_flags=(f"-I{tmp_path}", "-D_DEFAULT_SOURCE"))
    assert build.ok, build.stderr
    run = subprocess.run([str(tmp_path / "prog"), repr(hi)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    worst = [float(v) for v in run.stdout.split()]
    assert max(worst) <= 2.5, worst
    assert max(worst) > 0.5  # (the float result is not the double one: the comparison sees rounding)


def test_paired_angles_share_one_reduction_and_singles_do_not() -> None:
    """The emitter calls _sincosf once per angle whose sine and cosine are both taken, _sinf/_cosf otherwise,
    and only in float (double keeps the C library's sin and cos)."""
    x = ca.SX.sym("x", 2)
    F = ca.Function("g", [x], [ca.vertcat(ca.sin(x[0]) * ca.cos(x[0]), ca.sin(x[1]))])
    e = CEmitter("g", "float")
    e.add(F)
    src = e.source()
    assert src.count("g_sincosf(w") == 1 and src.count("g_sinf(w") == 1 and "g_cosf(w" not in src
    d = CEmitter("g", "double")
    d.add(F)
    assert "sincos" not in d.source() and "sin(w" in d.source()


def test_a_shared_denominator_is_divided_by_once_in_float() -> None:
    """The cart-pole's RK4 step with sensitivities divides by a few values many times: float divides by each
    once and multiplies (41 -> 8 divisions per step); double keeps every quotient (CasADi's own arithmetic)."""
    model = shooting.load_model("cartpole")
    F = shooting.build_integrator(model, "rk4", 1)
    f = CEmitter("t", "float")
    f.add(F)
    d = CEmitter("t", "double")
    d.add(F)
    divisions = lambda text: text.count("/w")  # noqa: E731
    assert divisions(d.source()) >= 4 * divisions(f.source()) > 0
    assert np.isfinite(TRIG_LIMIT)
