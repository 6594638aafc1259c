"""Run generated C on real inputs and compare it with the CasADi Function.

Test vectors are random points around the model's nominal state and input
(inside the input bounds) at several start times; the expected outputs are
the Function evaluated by CasADi in double precision. A generated harness
calls ``NAME_step`` (or CasADi's calling convention for other Functions) on
every vector and prints the outputs, on the host or on an emulated
Cortex-M4.

Errors are normwise relative per output and vector:
``max|c - ref| / max(max|ref|, 1e-300)`` (for an embedded error estimate
``err``, relative to the scale of ``x_next``, of which it is a difference). Double builds must agree to
`DOUBLE_C_TOLERANCE`; float builds are compared with the double reference
evaluated at the float-rounded inputs, to `FLOAT_C_TOLERANCE`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import casadi as ca
import numpy as np

from shooting.codegen import qemu_mps2, toolchain
from shooting.codegen.c_files import STEP_INPUTS, CExport
from shooting.model import Model

__all__ = ["DOUBLE_C_TOLERANCE", "FLOAT_C_TOLERANCE", "CheckReport", "check_cortex_m4", "check_host",
           "harness_source", "make_vectors"]

#: Normwise relative error allowed between a double C build and CasADi.
DOUBLE_C_TOLERANCE = 1e-12
#: Normwise relative error allowed between a float C build and CasADi (double).
FLOAT_C_TOLERANCE = 1e-3


@dataclass(frozen=True)
class CheckReport:
    """Outcome of running generated C on test vectors.

    Attributes
    ----------
    target : str
        "host" or "cortex-m4".
    real : str
    vectors : int
    worst : dict of str to float
        Worst normwise relative error per output name.
    tolerance : float
    passed : bool
    details : str
        Compiler or run output when something failed.
    """

    target: str
    real: str
    vectors: int
    worst: dict[str, float]
    tolerance: float
    passed: bool
    details: str = ""
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def worst_error(self) -> float:
        return max(self.worst.values(), default=0.0)

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v:.1e}" for k, v in self.worst.items())
        verdict = "ok" if self.passed else "MISMATCH"
        return (f"{self.target} {self.real}: {self.vectors} vectors, worst relative error {self.worst_error:.1e} "
                f"({parts}), tolerance {self.tolerance:.0e}: {verdict}")


def make_vectors(F: ca.Function, model: Model | None = None, *, n: int = 8, dt: float | None = None,
                 seed: int = 0) -> list[list[np.ndarray]]:
    """Inputs for the check: one list of dense input arrays per vector.

    Parameters
    ----------
    F : casadi.Function
    model : Model, optional
        For a step Function (inputs x, u, p, t0, dt): states are drawn around
        ``model.x0`` (scale 0.3), inputs uniformly inside the finite bounds
        (else around ``model.u0``), ``p = model.p0``, start times from
        {0, 0.7, 2.3, ...} and ``dt`` (default ``model.dt``).
    n : int
    seed : int

    Returns
    -------
    list of list of ndarray
    """
    rng = np.random.default_rng(seed)
    vectors = []
    times = [0.0, 0.7, 2.3, 5.1]
    for k in range(n):
        if model is not None and F.name_in() == STEP_INPUTS:
            lo = np.where(np.isfinite(model.u_min), model.u_min, model.u0 - 1.0)
            hi = np.where(np.isfinite(model.u_max), model.u_max, model.u0 + 1.0)
            vec = [model.x0 + 0.3 * rng.normal(size=model.nx), rng.uniform(lo, hi), model.p0.copy(),
                   np.array([times[k % len(times)]]), np.array([dt or model.dt or 0.1])]
        else:
            vec = [rng.normal(size=F.nnz_in(i)) for i in range(F.n_in())]
        vectors.append([np.asarray(v, dtype=float).reshape(-1) for v in vec])
    return vectors


def _literal(values: np.ndarray) -> str:
    return ", ".join(repr(float(v)) for v in values) or "0"


def harness_source(export: CExport, F: ca.Function, vectors: Sequence[Sequence[np.ndarray]]) -> str:
    """A C program that evaluates the export on `vectors` and prints every output.

    Each output is printed as a line ``o<k> v0 v1 ...`` with 17 significant
    digits (9 for float), after a line ``v<j>`` per vector; main returns 0.
    """
    name = export.name
    R = f"{name}_real"
    step = export.manifest.get("step_function") is not None
    lines = [f'#include <stdio.h>\n#include "{name}.h"\n']
    for j, vec in enumerate(vectors):
        for i, v in enumerate(vec):
            lines.append(f"static const {R} in{j}_{i}[{max(1, v.size)}] = {{{_literal(v)}}};")
    for i in range(F.n_out()):
        lines.append(f"static {R} out{i}[{max(1, F.nnz_out(i))}];")
    digits = 9 if export.manifest["real"] == "float" else 17
    lines.append("\nstatic void print_out(int k, const " + R + "* v, int n) {\n  int i;\n"
                 "  printf(\"o%d\", k);\n"
                 f"  for (i = 0; i < n; ++i) printf(\" %.{digits}g\", (double)v[i]);\n"
                 "  printf(\"\\n\");\n}\n")
    lines.append("int main(void) {\n  int status = 0;")
    for j in range(len(vectors)):
        lines.append(f"  printf(\"v{j}\\n\");")
        if step:
            outs = F.name_out()
            ptr = {o: f"out{i}" for i, o in enumerate(outs)}
            call = (f"{name}_step_err" if "err" in outs else f"{name}_step")
            args = f"in{j}_0, in{j}_1, in{j}_2, in{j}_3[0], in{j}_4[0], {ptr['x_next']}, " \
                   f"{ptr.get('A', '0')}, {ptr.get('B', '0')}" + (f", {ptr['err']}" if "err" in outs else "")
            lines.append(f"  status |= {call}({args});")
        else:
            lines.append(f"  {{ const {R}* arg[{max(1, F.n_in())}] = {{"
                         + ", ".join(f"in{j}_{i}" for i in range(F.n_in())) + "};")
            lines.append(f"    {R}* res[{max(1, F.n_out())}] = {{"
                         + ", ".join(f"out{i}" for i in range(F.n_out())) + "};")
            lines.append(f"    status |= {name}(arg, res, 0, 0, 0); }}")
        for i in range(F.n_out()):
            lines.append(f"  print_out({i}, out{i}, {F.nnz_out(i)});")
    lines.append("  return status;\n}\n")
    return "\n".join(lines)


def _parse(stdout: str, F: ca.Function, n_vectors: int) -> list[list[np.ndarray]]:
    results: list[list[np.ndarray]] = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("v"):
            results.append([np.zeros(0)] * F.n_out())
        elif line.startswith("o") and results:
            head, *vals = line.split()
            results[-1][int(head[1:])] = np.array([float(v) for v in vals])
    if len(results) != n_vectors:
        raise ValueError(f"the harness printed {len(results)} of {n_vectors} vectors:\n{stdout[-500:]}")
    return results


def _compare(F: ca.Function, vectors: Sequence[Sequence[np.ndarray]], results: list[list[np.ndarray]],
             real: str) -> dict[str, float]:
    worst = {F.name_out(i): 0.0 for i in range(F.n_out())}
    for vec, got in zip(vectors, results, strict=True):
        if real == "float":
            vec = [v.astype(np.float32).astype(float) for v in vec]
        ref = F.call([ca.DM(v) for v in vec])
        for i in range(F.n_out()):
            want = np.array(ca.DM(ref[i]).nonzeros(), dtype=float)
            have = got[i]
            if have.shape != want.shape or not np.all(np.isfinite(have)):
                worst[F.name_out(i)] = np.inf
                continue
            scale = max(float(np.max(np.abs(want), initial=0.0)), 1e-300)
            if F.name_out(i) == "err" and "x_next" in F.name_out():
                # err = x_next - x_hat is a small difference of two solutions:
                # its rounding error lives on the scale of x_next.
                x_ref = np.array(ca.DM(ref[F.name_out().index("x_next")]).nonzeros(), dtype=float)
                scale = max(scale, float(np.max(np.abs(x_ref), initial=0.0)))
            err = float(np.max(np.abs(have - want), initial=0.0)) / scale
            worst[F.name_out(i)] = max(worst[F.name_out(i)], err)
    return worst


def _write_sources(export: CExport, directory: Path, harness: str) -> list[Path]:
    for fname, text in export.files.items():
        if fname.endswith((".c", ".h")):
            (directory / fname).write_text(text)
    (directory / "check_main.c").write_text(harness)
    return [directory / f"{export.name}.c", directory / "check_main.c"]


def check_host(export: CExport, F: ca.Function, vectors: Sequence[Sequence[np.ndarray]]) -> CheckReport:
    """Compile with the host gcc (-std=c99 -Wall -Wextra -pedantic -Werror), run, compare."""
    real = export.manifest["real"]
    tol = FLOAT_C_TOLERANCE if real == "float" else DOUBLE_C_TOLERANCE
    extra = ("-Wdouble-promotion",) if real == "float" else ()
    with tempfile.TemporaryDirectory(prefix="shooting_check_") as tmp:
        d = Path(tmp)
        sources = _write_sources(export, d, harness_source(export, F, vectors))
        lib = toolchain.compile_host([sources[0]], d / "lib.o", extra_flags=extra, link=False)
        if not lib.ok:
            return CheckReport("host", real, len(vectors), {}, tol, False, lib.stderr)
        exe = toolchain.compile_host(sources, d / "check", extra_flags=("-Wno-double-promotion",))
        if not exe.ok:
            return CheckReport("host", real, len(vectors), {}, tol, False, exe.stderr)
        run = toolchain.run_tool([str(d / "check")], "the host check program", timeout=300.0)
        if run.returncode != 0:
            return CheckReport("host", real, len(vectors), {}, tol, False,
                               f"harness exited with {run.returncode}: {run.stderr[-500:]}")
        worst = _compare(F, vectors, _parse(run.stdout, F, len(vectors)), real)
    passed = all(v <= tol for v in worst.values())
    return CheckReport("host", real, len(vectors), worst, tol, passed, seconds={"compile": lib.seconds})


def check_cortex_m4(export: CExport, F: ca.Function, vectors: Sequence[Sequence[np.ndarray]]) -> CheckReport:
    """Build the harness for an emulated Cortex-M4 (QEMU mps2-an386), run it, compare."""
    real = export.manifest["real"]
    tol = FLOAT_C_TOLERANCE if real == "float" else DOUBLE_C_TOLERANCE
    with tempfile.TemporaryDirectory(prefix="shooting_m4_") as tmp:
        d = Path(tmp)
        sources = _write_sources(export, d, harness_source(export, F, vectors))
        result = qemu_mps2.run_on_cortex_m4(sources, include_dirs=(d,), workdir=d)
        if result.exit_code != 0:
            return CheckReport("cortex-m4", real, len(vectors), {}, tol, False,
                               f"harness exited with {result.exit_code}: {result.stdout[-500:]}")
        worst = _compare(F, vectors, _parse(result.stdout, F, len(vectors)), real)
    passed = all(v <= tol for v in worst.values())
    return CheckReport("cortex-m4", real, len(vectors), worst, tol, passed)
