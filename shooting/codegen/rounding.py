"""How much rounding a C build of a Function picks up: Monte-Carlo arithmetic on its operations.

Every floating-point operation rounds its exact result to the nearest number
of the format, a relative error of at most u (2^-24 in float, 2^-53 in
double). Evaluating a Function's operations with each result multiplied by
``1 + d``, ``d`` uniform in ``[-u, u]`` and drawn afresh for every operation
executed, and looking at how far the outputs move over a few samples
(Monte-Carlo arithmetic: D. S. Parker, "Monte Carlo Arithmetic", UCLA
CSD-970002, 1997) estimates the rounding error of that computation:
cancellation (an embedded error estimate is a small difference of two
solutions) and ill-conditioning (a Newton solve, an unstable mode) act on the
perturbations exactly as on rounding errors. The check of generated C allows
a multiple of this estimate instead of one fixed tolerance for every Function.

The evaluation interprets CasADi's instruction lists with numpy, all samples
and test vectors at once (a column each), and follows calls into the
Functions an MX Function calls, so binary doubling's substeps each get their
own perturbations. It knows exactly the operations the C emitter translates.
Operations that are exact in floating point (negation, fabs, comparisons,
min/max, 2x, selections) are not perturbed; constants are, as a literal such
as 0.1 is rounded too.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

import casadi as ca
import numpy as np
import numpy.typing as npt

from shooting.codegen.emitter import selected_nonzeros
from shooting.codegen.lookup import LINEAR_CLASSES, SPLINE_CLASS, LinearTable, SplineTable, tables_in
from shooting.codegen.table_eval import evaluate_table

__all__ = ["MAX_FLAT_INSTRUCTIONS", "UNIT_ROUNDOFF", "flat_size", "monte_carlo_call", "rounding_spread"]

FloatArray = npt.NDArray[np.float64]

#: Unit roundoff of each real type.
UNIT_ROUNDOFF = {"float": 2.0**-24, "double": 2.0**-53}

#: Largest Function (instructions executed, calls followed) whose rounding is
#: estimated: at most about 10 s of interpretation (100k instructions/s).
MAX_FLAT_INSTRUCTIONS = 1_000_000

_erf = np.frompyfunc(math.erf, 1, 1)
_erfinv = np.frompyfunc(lambda y: statistics.NormalDist().inv_cdf((y + 1) / 2) / math.sqrt(2)
                        if -1 < y < 1 else math.copysign(math.inf, y) if abs(y) == 1 else math.nan, 1, 1)
_remainder = np.frompyfunc(lambda a, b: math.remainder(a, b) if b != 0 and math.isfinite(a) else math.nan, 2, 1)

_BINARY: dict[int, Callable[[FloatArray, FloatArray], FloatArray]] = {
    ca.OP_ADD: np.add, ca.OP_SUB: np.subtract, ca.OP_MUL: np.multiply, ca.OP_DIV: np.divide,
    ca.OP_POW: np.power, ca.OP_CONSTPOW: np.power, ca.OP_FMOD: np.fmod, ca.OP_ATAN2: np.arctan2,
    ca.OP_FMIN: np.fmin, ca.OP_FMAX: np.fmax, ca.OP_COPYSIGN: np.copysign, ca.OP_HYPOT: np.hypot,
    ca.OP_LT: lambda a, b: (a < b).astype(float), ca.OP_LE: lambda a, b: (a <= b).astype(float),
    ca.OP_EQ: lambda a, b: (a == b).astype(float), ca.OP_NE: lambda a, b: (a != b).astype(float),
    ca.OP_AND: lambda a, b: ((a != 0) & (b != 0)).astype(float),
    ca.OP_OR: lambda a, b: ((a != 0) | (b != 0)).astype(float),
    ca.OP_IF_ELSE_ZERO: lambda a, b: np.where(a != 0, b, 0.0),
    ca.OP_REMAINDER: lambda a, b: np.asarray(_remainder(a, b), dtype=float),
}
_UNARY: dict[int, Callable[[FloatArray], FloatArray]] = {
    ca.OP_ASSIGN: lambda a: a, ca.OP_NEG: np.negative, ca.OP_SQ: lambda a: a * a, ca.OP_TWICE: lambda a: a + a,
    ca.OP_INV: lambda a: 1.0 / a, ca.OP_NOT: lambda a: (a == 0).astype(float), ca.OP_SIGN: np.sign,
    ca.OP_EXP: np.exp, ca.OP_LOG: np.log, ca.OP_SQRT: np.sqrt, ca.OP_SIN: np.sin, ca.OP_COS: np.cos,
    ca.OP_TAN: np.tan, ca.OP_ASIN: np.arcsin, ca.OP_ACOS: np.arccos, ca.OP_ATAN: np.arctan, ca.OP_SINH: np.sinh,
    ca.OP_COSH: np.cosh, ca.OP_TANH: np.tanh, ca.OP_ASINH: np.arcsinh, ca.OP_ACOSH: np.arccosh,
    ca.OP_ATANH: np.arctanh, ca.OP_FLOOR: np.floor, ca.OP_CEIL: np.ceil, ca.OP_FABS: np.abs,
    ca.OP_ERF: lambda a: np.asarray(_erf(a), dtype=float), ca.OP_LOG1P: np.log1p, ca.OP_EXPM1: np.expm1,
    ca.OP_ERFINV: lambda a: np.asarray(_erfinv(a), dtype=float),
}
# CasADi's own evaluation of these is less accurate than a C library's: its
# erfinv is off by up to 3.9e-6 relative (measured against the inverse of erf
# on [-0.999999, 0.999999]); the reference the C is compared with carries that.
_CASADI_ACCURACY = {ca.OP_ERFINV: 5e-6}

_EXACT = {ca.OP_ASSIGN, ca.OP_NEG, ca.OP_FABS, ca.OP_SIGN, ca.OP_FLOOR, ca.OP_CEIL, ca.OP_TWICE, ca.OP_LT,
          ca.OP_LE, ca.OP_EQ, ca.OP_NE, ca.OP_AND, ca.OP_OR, ca.OP_NOT, ca.OP_IF_ELSE_ZERO, ca.OP_FMIN,
          ca.OP_FMAX, ca.OP_COPYSIGN}


_MX_OPS = {ca.OP_INPUT, ca.OP_OUTPUT, ca.OP_CONST, ca.OP_CALL, ca.OP_GETNONZEROS, ca.OP_HORZCAT, ca.OP_VERTCAT,
           ca.OP_BSPLINE, ca.OP_MTIMES, *_BINARY, *_UNARY}


def _numeric(F: ca.Function, args: list[FloatArray]) -> list[FloatArray]:
    """F evaluated by CasADi on every column: the outputs' nonzeros (nnz, columns)."""
    columns = args[0].shape[1] if args else 1
    outs: list[list[FloatArray]] = [[] for _ in range(F.n_out())]
    for c in range(columns):
        given = [ca.DM(F.sparsity_in(i), a[:, c]) for i, a in enumerate(args)]
        for i, value in enumerate(F.call(given)):
            outs[i].append(np.array(ca.DM(value).nonzeros(), dtype=float))
    return [np.stack(o, axis=1) if o and o[0].size else np.zeros((F.nnz_out(i), columns))
            for i, o in enumerate(outs)]


def flat_size(F: ca.Function) -> int:
    """Instructions executed by one call of `F`, calls followed."""
    if not F.is_a("MXFunction") and not F.is_a("SXFunction"):
        return 1  # a lookup table: one evaluation
    if not F.is_a("MXFunction"):
        return int(F.n_instructions())
    total = 0
    for k in range(F.n_instructions()):
        total += flat_size(F.instruction_MX(k).which_function()) if F.instruction_id(k) == ca.OP_CALL else 1
    return total


class _Interpreter:
    """Evaluates instruction lists on columns of samples, perturbing every rounding operation."""

    def __init__(self, u: float, rng: np.random.Generator | None) -> None:
        self.u, self.rng = u, rng
        self.tables: dict[str, list[LinearTable | SplineTable]] = {}

    def tables_of(self, F: ca.Function) -> list[LinearTable | SplineTable]:
        if F.name() not in self.tables:
            self.tables[F.name()] = tables_in(F)
        return self.tables[F.name()]

    def perturbation(self) -> Callable[[], float] | None:
        rng, u = self.rng, self.u
        return None if rng is None else (lambda: float(rng.uniform(-u, u)))

    def rounded(self, op: int, value: FloatArray) -> FloatArray:
        if self.rng is None or op in _EXACT:
            return value
        u = max(self.u, _CASADI_ACCURACY.get(op, 0.0))
        return value * (1.0 + self.rng.uniform(-u, u, value.shape))

    def call(self, F: ca.Function, args: list[FloatArray]) -> list[FloatArray]:
        """The outputs' nonzeros (nnz, columns) for the inputs' nonzeros (nnz, columns)."""
        if F.is_a("SXFunction"):
            return self._sx(F, args)
        if F.class_name() in (*LINEAR_CLASSES, SPLINE_CLASS):
            return [evaluate_table(self.tables_of(F)[0], args[0], self.perturbation())]
        if F.is_a("MXFunction") and all(F.instruction_id(k) in _MX_OPS for k in range(F.n_instructions())):
            return self._mx(F, args)
        # Anything else (a lookup table, spline nodes): evaluated by CasADi, rounded once per output.
        return [self.rounded(ca.OP_CALL, value) for value in _numeric(F, args)]

    def _sx(self, F: ca.Function, args: list[FloatArray]) -> list[FloatArray]:
        columns = args[0].shape[1] if args else 1
        work: list[FloatArray] = [np.zeros(columns)] * F.sz_w()
        outs = [np.zeros((F.nnz_out(i), columns)) for i in range(F.n_out())]
        nodes = F.instructions_sx() if any(F.instruction_id(k) == ca.OP_CALL for k in range(F.n_instructions())) \
            else None
        for k in range(F.n_instructions()):
            op, ins, res = F.instruction_id(k), F.instruction_input(k), F.instruction_output(k)
            if op == ca.OP_CALL and nodes is not None:
                G = nodes[k].which_function()
                flat = np.stack([work[w] if w >= 0 else np.zeros(columns) for w in ins])
                sizes = [G.nnz_in(i) for i in range(G.n_in())]
                given = np.split(flat, np.cumsum(sizes)[:-1]) if sizes else []
                results = np.concatenate(self.call(G, list(given)), axis=0)
                for j, w in enumerate(res):
                    if w >= 0:
                        work[w] = results[j]
            elif op == ca.OP_INPUT:
                work[res[0]] = args[ins[0]][ins[1]]
            elif op == ca.OP_OUTPUT:
                outs[res[0]][res[1]] = work[ins[0]]
            elif op == ca.OP_CONST:
                work[res[0]] = self.rounded(op, np.full(columns, F.instruction_constant(k)))
            elif op in _BINARY:
                work[res[0]] = self.rounded(op, _BINARY[op](work[ins[0]], work[ins[1]]))
            elif op in _UNARY:
                work[res[0]] = self.rounded(op, _UNARY[op](work[ins[0]]))
            else:
                raise ValueError(f"no rounding model for operation {op} in {F.name()}")
        return outs

    def _mx(self, F: ca.Function, args: list[FloatArray]) -> list[FloatArray]:
        columns = args[0].shape[1] if args else 1
        work: dict[int, FloatArray] = {}
        outs = [np.zeros((F.nnz_out(i), columns)) for i in range(F.n_out())]
        splines = 0
        for k in range(F.n_instructions()):
            op, ins, res = F.instruction_id(k), F.instruction_input(k), F.instruction_output(k)
            node = F.instruction_MX(k)
            if op == ca.OP_BSPLINE:
                work[res[0]] = evaluate_table(self.tables_of(F)[splines], work[ins[0]], self.perturbation())
                splines += 1
                continue
            if op == ca.OP_MTIMES:  # z + x y, dense, column-major nonzeros; the node's operands are (z, x, y)
                z, x, y = (node.dep(i) for i in range(3))
                n, kk, mm = x.size1(), x.size2(), y.size2()
                X = work[ins[1]].reshape(kk, n, columns).transpose(1, 0, 2)
                Y = work[ins[2]].reshape(mm, kk, columns).transpose(1, 0, 2)
                prod = np.einsum("iqc,qjc->ijc", X, Y).transpose(1, 0, 2).reshape(n * mm, columns)
                work[res[0]] = self.rounded(op, work[ins[0]] + prod)
                continue
            if op == ca.OP_INPUT:
                info = node.info()
                work[res[0]] = args[info["ind"]][info["offset"]:info["offset"] + node.nnz()]
            elif op == ca.OP_OUTPUT:
                outs[res[0]] = work[ins[0]]
            elif op == ca.OP_CONST:
                values = np.array(ca.evalf(node).nonzeros(), dtype=float)
                work[res[0]] = self.rounded(op, np.repeat(values[:, None], columns, axis=1))
            elif op == ca.OP_CALL:
                G = node.which_function()
                given = [work[w] if w >= 0 else np.zeros((G.nnz_in(i), columns)) for i, w in enumerate(ins)]
                for j, value in enumerate(self.call(G, given)):
                    if res[j] >= 0:
                        work[res[j]] = value
            elif op == ca.OP_GETNONZEROS:
                work[res[0]] = work[ins[0]][selected_nonzeros(node.info(), node.nnz())]
            elif op in _BINARY or op in _UNARY:
                operands = [work[w] for w in ins[:2 if op in _BINARY else 1]]
                value = _BINARY[op](*operands) if op in _BINARY else _UNARY[op](*operands)
                work[res[0]] = self.rounded(op, np.broadcast_to(value, (node.nnz(), columns)).copy())
            elif op in (ca.OP_HORZCAT, ca.OP_VERTCAT):
                work[res[0]] = np.concatenate([work[w] for w in ins], axis=0)
            else:
                raise ValueError(f"no rounding model for MX operation {op} in {F.name()}")
        return outs


def rounding_spread(F: ca.Function, vectors: Sequence[Sequence[FloatArray]], real: str, *, samples: int = 8,
                    seed: int = 0, elementwise: bool = False) -> list[list[Any]] | None:
    """The largest output deviation under Monte-Carlo arithmetic, per vector and output.

    Parameters
    ----------
    F : casadi.Function
    vectors : sequence of sequences of ndarray
        Inputs of `F` (dense nonzeros), one list per vector (already rounded to `real`).
    real : {"double", "float"}
    samples : int
        Perturbed evaluations per vector.
    seed : int
    elementwise : bool
        Give each output's spread per nonzero (an array) instead of its largest.

    Returns
    -------
    list of list of float (or of ndarray), or None
        ``spread[j][i]``: max over samples of max |F_perturbed - F| for output
        i at vector j (per nonzero with `elementwise`). None when `F`
        executes more than `MAX_FLAT_INSTRUCTIONS` operations.
    """
    if flat_size(F) > MAX_FLAT_INSTRUCTIONS:
        return None
    n = len(vectors)
    # Column j*samples + s is sample s of vector j; the unperturbed run gives the baseline.
    args = [np.repeat(np.stack([np.asarray(vec[i], dtype=float).reshape(-1) for vec in vectors], axis=1),
                      samples, axis=1) for i in range(F.n_in())]
    with np.errstate(all="ignore"):
        exact = _Interpreter(UNIT_ROUNDOFF[real], None).call(F, args)
        noisy = _Interpreter(UNIT_ROUNDOFF[real], np.random.default_rng(seed)).call(F, args)
    spread = []
    for j in range(n):
        cols = slice(j * samples, (j + 1) * samples)
        if elementwise:
            spread.append([np.max(np.abs(a[:, cols] - b[:, cols]), axis=1, initial=0.0) for a, b in
                           zip(noisy, exact, strict=True)])
        else:
            spread.append([float(np.max(np.abs(a[:, cols] - b[:, cols]), initial=0.0)) for a, b in
                           zip(noisy, exact, strict=True)])
    return spread


def monte_carlo_call(F: ca.Function, args: Sequence[npt.ArrayLike], real: str, rng: np.random.Generator
                     ) -> list[FloatArray]:
    """One evaluation of `F` under Monte-Carlo arithmetic (module docstring): its outputs, dense, each with its
    sparsity's shape, as `F` evaluated by CasADi would give them with every rounding operation perturbed at
    `real`'s unit roundoff.

    Parameters
    ----------
    F : casadi.Function
        Dense inputs and outputs.
    args : sequence of array_like
        One per input (column-major for a matrix).
    real : {"double", "float"}
    rng : numpy.random.Generator
    """
    columns = [np.asarray(a, dtype=float).reshape(-1, order="F").reshape(-1, 1) for a in args]
    with np.errstate(all="ignore"):
        outs = _Interpreter(UNIT_ROUNDOFF[real], rng).call(F, columns)
    return [np.asarray(o[:, 0], dtype=float).reshape(F.size_out(i), order="F") for i, o in enumerate(outs)]
