"""Run generated C on real inputs and compare it with the CasADi Function.

Test vectors are random points around the model's nominal state and input
(inside the input bounds) at several start times; the expected outputs are
the Function evaluated by CasADi in double precision. A generated harness
calls ``NAME_step`` (or CasADi's calling convention for other Functions) on
every vector and prints the outputs, on the host or on an emulated
Cortex-M4.

Errors are normwise relative per output and vector, ``max|c - ref| /
max|ref|``, each output on its own scale (an embedded error estimate ``err``
too). The allowed error follows from the arithmetic: `SAFETY` times the
rounding spread that Monte-Carlo arithmetic finds for this Function at this
vector (`shooting.codegen.rounding`), plus `FLOOR_ULPS` units of roundoff of
the output's scale; float builds are compared with the double reference at
the float-rounded inputs. A Function too large to estimate falls back to
`FALLBACK_TOLERANCE`. When CasADi's own (double) result is not finite at a
vector, that is reported as such (the step diverges there), not as a
mismatch of the C.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import casadi as ca
import numpy as np

from shooting import _validate
from shooting.codegen import qemu_mps2, toolchain
from shooting.codegen.c_files import STEP_INPUTS, CExport
from shooting.codegen.rounding import UNIT_ROUNDOFF, rounding_spread
from shooting.model import Model

__all__ = ["FALLBACK_TOLERANCE", "FLOOR_ULPS", "SAFETY", "CheckReport", "Comparison", "check_cortex_m4",
           "check_host", "compare_outputs", "harness_source", "make_vectors"]

#: Allowed error = SAFETY x the Monte-Carlo rounding spread + FLOOR_ULPS x u x scale.
SAFETY = 5.0
FLOOR_ULPS = 8.0
#: Normwise relative tolerance for Functions too large for the rounding estimate.
FALLBACK_TOLERANCE = {"double": 1e-12, "float": 1e-3}


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
    allowed : dict of str to float
        The allowed relative error per output, at the vector that decides
        the output: where its error came closest to what is allowed (the
        largest error / allowed ratio).
    decisive : dict of str to float
        The relative error per output at that same vector: the pair
        (``decisive[k]``, ``allowed[k]``) decides the check and is what
        `summary` prints (``decisive[k] <= allowed[k]`` for every output of
        a passed check). Empty for reports with one comparison per output.
    margin : float
        The largest ratio of an error to what is allowed at its vector
        (<= 1 passes); inf for a non-finite output.
    passed : bool
    details : str
        One line when something failed (compiler, run, a non-finite reference).
    """

    target: str
    real: str
    vectors: int
    worst: dict[str, float]
    allowed: dict[str, float]
    passed: bool
    details: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    margin: float = 0.0
    decisive: dict[str, float] = field(default_factory=dict)

    @property
    def worst_error(self) -> float:
        """The largest relative error over all outputs."""
        return max(self.worst.values(), default=0.0)

    @property
    def tolerance(self) -> float:
        """The largest allowed relative error over all outputs."""
        return max(self.allowed.values(), default=0.0)

    def summary(self) -> str:
        """One line: per output, the error at its decisive vector against what is allowed there, and the verdict."""
        if not self.worst:
            return f"{self.target} {self.real}: FAILED: {self.details}"
        shown = {k: self.decisive.get(k, v) for k, v in self.worst.items()}
        parts = ", ".join(f"{k} {v:.1e} (allowed {self.allowed.get(k, 0.0):.1e})" for k, v in shown.items())
        verdict = "ok" if self.passed else f"MISMATCH{': ' + self.details if self.details else ''}"
        return f"{self.target} {self.real}: {self.vectors} vectors, relative error {parts}: {verdict}"


def make_vectors(F: ca.Function, model: Model | None = None, *, n: int = 8, dt: float | None = None,
                 seed: int = 0, centers: np.ndarray | None = None) -> list[list[np.ndarray]]:
    """Inputs for the check: one list of dense input arrays per vector.

    Parameters
    ----------
    F : casadi.Function
    model : Model, optional
        For a step Function (inputs x, u, p, t0, dt): states are drawn around
        ``model.x0`` (scale 0.3), inputs uniformly inside the finite bounds
        (else around ``model.u0``), ``p = model.p0``, start times from
        {0, 0.7, 2.3, ...} and ``dt`` (default ``model.dt``); an adjoint step's ``lam`` standard normal.
    n : int
    seed : int
    centers : ndarray, shape (m, nx), optional
        The states the vectors are drawn around, in turn (default ``model.x0``
        alone): the start and the references of the closed loop the step is
        exported for, so that the check covers where the plant will be.

    Returns
    -------
    list of list of ndarray
    """
    rng = np.random.default_rng(seed)
    vectors = []
    times = [0.0, 0.7, 2.3, 5.1]
    for k in range(n):
        names = F.name_in()
        if model is not None and names[:len(STEP_INPUTS)] == STEP_INPUTS and set(names[len(STEP_INPUTS):]) <= {"lam",
                                                                                                          "z0"}:
            lo = np.where(np.isfinite(model.u_min), model.u_min, model.u0 - 1.0)
            hi = np.where(np.isfinite(model.u_max), model.u_max, model.u0 + 1.0)
            center = model.x0 if centers is None else np.asarray(centers, dtype=float)[k % len(centers)]
            vec = [center + 0.3 * rng.normal(size=model.nx), rng.uniform(lo, hi), model.p0.copy(),
                   np.array([times[k % len(times)]]), np.array([dt or model.dt or 0.1])]
            if "lam" in names:  # (an adjoint step's: a random direction, of the scale of the state)
                vec.append(rng.normal(size=model.nx))
            if "z0" in names:
                vec.append(model.z0.copy())
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
            dae = "z" in outs
            args = f"in{j}_0, in{j}_1, in{j}_2, in{j}_3[0], in{j}_4[0], " + (f"in{j}_5, " if dae else "") + \
                   f"{ptr['x_next']}, {ptr.get('A', '0')}, {ptr.get('B', '0')}" + \
                   (f", {ptr['err']}" if "err" in outs else "") + (f", {ptr['z']}" if dae else "")
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


@dataclass
class Comparison:
    """C outputs against CasADi's on test vectors (see `CheckReport` for the fields)."""

    worst: dict[str, float]
    allowed: dict[str, float]
    passed: bool
    details: str = ""
    margin: float = 0.0
    decisive: dict[str, float] = field(default_factory=dict)


def compare_outputs(F: ca.Function, vectors: Sequence[Sequence[np.ndarray]], results: list[list[np.ndarray]],
                    real: str) -> Comparison:
    """Compare the outputs of generated C, `results`, with `F` evaluated by CasADi at `vectors`.

    Parameters
    ----------
    F : casadi.Function
    vectors : sequence of sequence of ndarray
        The inputs, one list of dense arrays per vector.
    results : list of list of ndarray
        The C's outputs (nonzeros), one list per vector.
    real : {"double", "float"}

    Returns
    -------
    Comparison
        Per output: the worst relative error over the vectors, and the
        decisive pair (error, allowed) at the vector with the largest ratio.
    """
    names = F.name_out()
    if real == "float":
        vectors = [[v.astype(np.float32).astype(float) for v in vec] for vec in vectors]
    refs = [[np.array(ca.DM(o).nonzeros(), dtype=float)
             for o in F.call([ca.DM(F.sparsity_in(i), ca.DM(v)) for i, v in enumerate(vec)])]
            for vec in vectors]
    diverged = [j for j, ref in enumerate(refs) if not all(np.isfinite(r).all() for r in ref)]
    if diverged:
        j = diverged[0]
        where = ", ".join(f"{F.name_in(i)}={_validate.vector_text(v, 3)}" for i, v in enumerate(vectors[j]))
        return Comparison({}, {}, False,
                           f"CasADi's own result is not finite at {len(diverged)} of {len(refs)} test vectors "
                           f"(first: {where}): the step itself diverges there, not the C; likely an explicit "
                           f"method outside its stability region or a singular model: more substeps, an "
                           f"implicit method, or a smaller dt")
    spread = rounding_spread(F, vectors, real)
    u = UNIT_ROUNDOFF[real]
    worst = {n: 0.0 for n in names}
    allowed = {n: 0.0 for n in names}
    decisive = {n: 0.0 for n in names}
    ratio = {n: -1.0 for n in names}
    for j, (ref, got) in enumerate(zip(refs, results, strict=True)):
        for i, name in enumerate(names):
            have = got[i]
            scale = max(float(np.max(np.abs(ref[i]), initial=0.0)), 1e-300)
            if have.shape != ref[i].shape or not np.all(np.isfinite(have)):
                worst[name] = decisive[name] = ratio[name] = np.inf
                allowed[name] = 0.0
                continue
            err = float(np.max(np.abs(have - ref[i]), initial=0.0))
            limit = (FALLBACK_TOLERANCE[real] * scale if spread is None
                     else SAFETY * spread[j][i] + FLOOR_ULPS * u * scale)
            worst[name] = max(worst[name], err / scale)
            # The allowance differs per vector: the vector that decides is the
            # one whose error comes closest to its own allowance, and its
            # error and allowance are shown together.
            if err / limit > ratio[name]:
                ratio[name], allowed[name], decisive[name] = err / limit, limit / scale, err / scale
    margin = max(ratio.values(), default=0.0)
    return Comparison(worst, allowed, margin <= 1.0, margin=margin, decisive=decisive)


def _write_sources(export: CExport, directory: Path, harness: str) -> list[Path]:
    for fname, text in export.files.items():
        if fname.endswith((".c", ".h")):
            (directory / fname).write_text(text)
    (directory / "check_main.c").write_text(harness)
    return [directory / f"{export.name}.c", directory / "check_main.c"]


def _failed(target: str, real: str, n: int, details: str) -> CheckReport:
    return CheckReport(target, real, n, {}, {}, False, details)


def check_host(export: CExport, F: ca.Function, vectors: Sequence[Sequence[np.ndarray]]) -> CheckReport:
    """Compile with the host gcc (-std=c99 -Wall -Wextra -pedantic -Werror), run, compare.

    Raises
    ------
    ToolchainError
        A tool that cannot run or times out (one line naming it and the step).
    """
    real = export.manifest["real"]
    extra = ("-Wdouble-promotion",) if real == "float" else ()
    n = len(vectors)
    with tempfile.TemporaryDirectory(prefix="shooting_check_") as tmp:
        d = Path(tmp)
        sources = _write_sources(export, d, harness_source(export, F, vectors))
        lib = toolchain.compile_host([sources[0]], d / "lib.o", extra_flags=extra, link=False)
        if not lib.ok:
            return _failed("host", real, n, f"gcc failed compiling {export.name}.c: "
                                            f"{toolchain.first_error_line(lib.stderr)}")
        exe = toolchain.compile_host(sources, d / "check", extra_flags=("-Wno-double-promotion",))
        if not exe.ok:
            return _failed("host", real, n, f"gcc failed building the check program: "
                                            f"{toolchain.first_error_line(exe.stderr)}")
        run = toolchain.run_tool([str(d / "check")], "the host check program", timeout=300.0,
                                 step="running the test vectors")
        if run.returncode != 0:
            return _failed("host", real, n, f"the host check program exited with {run.returncode}: "
                                            f"{toolchain.first_error_line(run.stderr + run.stdout)}")
        result = compare_outputs(F, vectors, _parse(run.stdout, F, n), real)
    return CheckReport("host", real, n, result.worst, result.allowed, result.passed, result.details,
                       seconds={"compile": lib.seconds}, margin=result.margin, decisive=result.decisive)


def check_cortex_m4(export: CExport, F: ca.Function, vectors: Sequence[Sequence[np.ndarray]]) -> CheckReport:
    """Build the harness for an emulated Cortex-M4 (QEMU mps2-an386), run it, compare.

    Raises
    ------
    ToolchainError
        A tool that cannot run, fails to build, or times out (one line).
    """
    real = export.manifest["real"]
    n = len(vectors)
    with tempfile.TemporaryDirectory(prefix="shooting_m4_") as tmp:
        d = Path(tmp)
        sources = _write_sources(export, d, harness_source(export, F, vectors))
        result = qemu_mps2.run_on_cortex_m4(sources, include_dirs=(d,), workdir=d)
        if result.exit_code != 0:
            return _failed("cortex-m4", real, n, f"the program on the emulated Cortex-M4 exited with "
                                                 f"{result.exit_code}: {toolchain.first_error_line(result.stdout)}")
        comparison = compare_outputs(F, vectors, _parse(result.stdout, F, n), real)
    return CheckReport("cortex-m4", real, n, comparison.worst, comparison.allowed, comparison.passed,
                       comparison.details, margin=comparison.margin, decisive=comparison.decisive)
