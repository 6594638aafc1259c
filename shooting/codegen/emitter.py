"""Plain C99 for CasADi Functions, emitted from their instruction lists.

Why not CasADi's own code generator: its float output still calls double
``sin()`` and writes double literals (so a float build silently computes in
double), it carries a runtime of helpers and sparsity tables, and its raw
output does not pass ``-Wall -Wextra -pedantic -Werror``. Here every SX
instruction becomes one C statement on a local scalar, in the chosen real
type, with the single-precision libm call (``sinf``) and ``f``-suffixed
literals for ``float``.

Internal calling convention (all functions ``static``)::

    static int NAME_fK(const R** arg, R** res);

``arg[i]`` points to the nonzeros of input i (NULL reads as zeros) and
``res[i]`` to those of output i (NULL: not wanted), as in CasADi's own
convention, minus the work arrays: SX bodies keep their work in local
scalars (stack), MX compositions (calls of SX bodies, slices and scalar
arithmetic, e.g. `build_integrator`'s substep doubling) in static buffers
sized at generation time, which makes them non-reentrant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import casadi as ca
import numpy as np

from shooting import _validate
from shooting._c_text import literal
from shooting.codegen.lookup import LINEAR_CLASSES, SPLINE_CLASS, LinearTable, SplineTable, tables_in
from shooting.codegen.templates import render
from shooting.options import REALS

__all__ = ["CEmitter", "EmitError", "literal", "selected_nonzeros"]


#: |x| up to which the float emitter's own sine and cosine reduce x exactly (4096 pi/2, templates/sincos.c.in);
#: beyond, newlib's sinf and cosf.
TRIG_LIMIT = 4096 * 1.5707963267948966


class EmitError(ValueError):
    """The Function uses an operation this emitter does not translate."""


_OPS = {getattr(ca, k): k for k in dir(ca) if k.startswith("OP_")}

# Templates for SX operations; {0} and {1} are operands, {f} is "f" for float.
_BINARY = {
    ca.OP_ADD: "{0}+{1}", ca.OP_SUB: "{0}-{1}", ca.OP_MUL: "{0}*{1}", ca.OP_DIV: "{0}/{1}",
    ca.OP_POW: "pow{f}({0},{1})", ca.OP_CONSTPOW: "pow{f}({0},{1})", ca.OP_FMOD: "fmod{f}({0},{1})",
    ca.OP_ATAN2: "atan2{f}({0},{1})", ca.OP_FMIN: "fmin{f}({0},{1})", ca.OP_FMAX: "fmax{f}({0},{1})",
    ca.OP_COPYSIGN: "copysign{f}({0},{1})", ca.OP_HYPOT: "hypot{f}({0},{1})",
    ca.OP_LT: "(R)({0}<{1})", ca.OP_LE: "(R)({0}<={1})", ca.OP_EQ: "(R)({0}=={1})",
    ca.OP_NE: "(R)({0}!={1})", ca.OP_AND: "(R)({0}&&{1})", ca.OP_OR: "(R)({0}||{1})",
    ca.OP_IF_ELSE_ZERO: "({0}?{1}:0)", ca.OP_REMAINDER: "remainder{f}({0},{1})",
}
_UNARY = {
    ca.OP_ASSIGN: "{0}", ca.OP_NEG: "-{0}", ca.OP_SQ: "{0}*{0}", ca.OP_TWICE: "{0}+{0}",
    ca.OP_INV: "1/{0}", ca.OP_NOT: "(R)(!{0})", ca.OP_SIGN: "({0}>0?1:({0}<0?-1:{0}))",
    ca.OP_EXP: "exp{f}({0})", ca.OP_LOG: "log{f}({0})", ca.OP_SQRT: "sqrt{f}({0})",
    ca.OP_SIN: "sin{f}({0})", ca.OP_COS: "cos{f}({0})", ca.OP_TAN: "tan{f}({0})",
    ca.OP_ASIN: "asin{f}({0})", ca.OP_ACOS: "acos{f}({0})", ca.OP_ATAN: "atan{f}({0})",
    ca.OP_SINH: "sinh{f}({0})", ca.OP_COSH: "cosh{f}({0})", ca.OP_TANH: "tanh{f}({0})",
    ca.OP_ASINH: "asinh{f}({0})", ca.OP_ACOSH: "acosh{f}({0})", ca.OP_ATANH: "atanh{f}({0})",
    ca.OP_FLOOR: "floor{f}({0})", ca.OP_CEIL: "ceil{f}({0})", ca.OP_FABS: "fabs{f}({0})",
    ca.OP_ERF: "erf{f}({0})", ca.OP_LOG1P: "log1p{f}({0})", ca.OP_EXPM1: "expm1{f}({0})",
    ca.OP_ERFINV: "{p}_erfinv({0})",
}


@dataclass
class _Ref:
    """Where the nonzeros of an MX work element live: a C pointer plus offset."""

    base: str
    offset: int = 0
    nullable: bool = False  # an input pointer the caller may pass as NULL

    def read(self, j: int) -> str:
        if self.nullable:
            return f"({self.base} ? {self.base}[{self.offset + j}] : 0)"
        return f"{self.base}[{self.offset + j}]"

    def pointer(self) -> str:
        return self.base if self.offset == 0 else f"{self.base} + {self.offset}"


@dataclass
class CEmitter:
    """Translate CasADi Functions (and the Functions they call) into C.

    Parameters
    ----------
    prefix : str
        Prefix of every emitted symbol (the export name).
    real : {"double", "float"}
        C type of every real number; "float" is single precision throughout.
    """

    prefix: str
    real: str = "double"
    _names: dict[str, str] = field(default_factory=dict)
    _chunks: list[str] = field(default_factory=list)
    call_graph: dict[str, list[str]] = field(default_factory=dict)
    static_reals: int = 0
    _tables: list[LinearTable | SplineTable] = field(default_factory=list)
    _erfinv: bool = False
    _trig: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.real = _validate.choice(self.real, REALS, "real")

    @property
    def reentrant(self) -> bool:
        """True when no emitted function keeps static state."""
        return self.static_reals == 0

    def source(self) -> str:
        """All emitted function definitions, callees first, after the runtime they need."""
        runtime = []
        if self._tables:
            runtime.append(render(
                "interp_low.c.in", name=self.prefix, NAME=self.prefix.upper(), R=self.real,
                max_dim=max(t.ndim for t in self._tables),
                max_degree=max([max(t.degree) for t in self._tables if isinstance(t, SplineTable)], default=1),
                max_m=max(t.m for t in self._tables)))
            for kind, template in ((LinearTable, "interp_linear.c.in"), (SplineTable, "interp_spline.c.in")):
                if any(isinstance(t, kind) for t in self._tables):
                    runtime.append(render(template, name=self.prefix, NAME=self.prefix.upper(), R=self.real))
        if self._erfinv:
            runtime.append(render("erfinv.c.in", name=self.prefix, R=self.real,
                                  f="f" if self.real == "float" else "", newton=1 if self.real == "float" else 2))
        if self._trig:
            runtime.append(render("sincos.c.in", name=self.prefix, NAME=self.prefix.upper(),
                                  limit=literal(TRIG_LIMIT, "float"),
                                  **{fn: int(fn in self._trig) for fn in ("sin", "cos", "both")}))
        return "\n".join(runtime + self._chunks)

    def add(self, F: ca.Function) -> str:
        """Emit `F` (and what it calls) once; return its C name."""
        key = F.name()
        if key in self._names:
            return self._names[key]
        cname = f"{self.prefix}_f{len(self._names)}"
        self._names[key] = cname
        if F.is_a("SXFunction"):
            self._chunks.append(self._sx(F, cname))
        elif F.is_a("MXFunction"):
            self._chunks.append(self._mx(F, cname))
        elif F.class_name() in (*LINEAR_CLASSES, SPLINE_CLASS):
            self._chunks.append(self._table(F, cname))
        else:
            raise EmitError(
                f"cannot export a call of the CasADi function {F.name()} ({F.class_name()}): no C translation "
                f"(SX and MX Functions and linear and B-spline interpolants are translated); build it from SX "
                f"or expand it with F.expand()"
            )
        return cname

    # ---------------------------------------------------------- lookup tables
    def table_arrays(self, cname: str, table: LinearTable | SplineTable) -> list[str]:
        """Static arrays of one table; registers it for the runtime's sizes."""
        R = self.real
        self._tables.append(table)

        def reals(name: str, values: tuple[float, ...]) -> str:
            return f"static const {R} {cname}_{name}[{max(1, len(values))}] = " \
                   f"{{{', '.join(literal(v, R) for v in values) or '0'}}};"

        def ints(name: str, values: tuple[int, ...]) -> str:
            return f"static const int {cname}_{name}[{max(1, len(values))}] = {{{', '.join(map(str, values)) or '0'}}};"

        if isinstance(table, LinearTable):
            return [reals("grid", table.grid), ints("offset", table.offset), reals("values", table.values),
                    ints("lookup", table.lookup)]
        return [reals("knots", table.knots), ints("offset", table.offset), ints("degree", table.degree),
                ints("strides", table.strides), reals("coeffs", table.coeffs), ints("lookup", table.lookup)]

    def table_call(self, cname: str, table: LinearTable | SplineTable, out: str, x: str) -> str:
        """The runtime call evaluating `table` at `x` into `out` (C expressions)."""
        if isinstance(table, LinearTable):
            return (f"{self.prefix}_interpn({out}, {table.ndim}, {cname}_grid, {cname}_offset, {cname}_values, "
                    f"{x}, {cname}_lookup, {table.m}, {int(table.gradient)});")
        return (f"{self.prefix}_bspline({out}, {table.ndim}, {cname}_knots, {cname}_offset, {cname}_degree, "
                f"{cname}_strides, {cname}_coeffs, {table.m}, {x}, {cname}_lookup);")

    def _table(self, F: ca.Function, cname: str) -> str:
        tables = tables_in(F)
        if len(tables) != 1 or F.n_out() != 1 or F.nnz_in(0) != tables[0].ndim:
            raise EmitError(f"cannot export {F.name()} ({F.class_name()}): only interpolants with constant tables "
                            f"are translated (not parametric grids or values)")
        table, R = tables[0], self.real
        lines = [f"/* {F.name()}: {_signature(F)} ({F.class_name()}) */", *self.table_arrays(cname, table),
                 f"static const {R} {cname}_zeros[{table.ndim}] = {{0}};",
                 f"static int {cname}(const {R}** arg, {R}** res) {{",
                 f"  const {R}* x = arg[0] ? arg[0] : {cname}_zeros;",
                 "  if (!res[0]) return 0;",
                 f"  {self.table_call(cname, table, 'res[0]', 'x')}",
                 "  return 0;", "}", ""]
        self.call_graph[cname] = []
        return "\n".join(lines)

    # ------------------------------------------------------------------- SX
    def format_op(self, template: str, *operands: str) -> str:
        """An operation's C text: `template` (from `_BINARY`/`_UNARY`) filled for this real type."""
        if "{p}_erfinv" in template:
            self._erfinv = True
        text = template.format(*operands, f="f" if self.real == "float" else "", p=self.prefix)
        return text.replace("(R)", f"({self.real})")

    def _sx(self, F: ca.Function, cname: str) -> str:
        # NULL inputs read as zeros and NULL outputs are not wanted (CasADi's
        # convention). Both are resolved once in the prologue, through a
        # constant zero array and a scratch array on the stack, so that the
        # body is branch-free: per-element checks made arm-as fail with
        # "conditional branch out of range" on large bodies, and cost time.
        R = self.real
        body: list[str] = []
        ins_used: set[int] = set()
        outs_used: set[int] = set()
        callees: list[str] = []
        nodes = F.instructions_sx() if any(F.instruction_id(k) == ca.OP_CALL for k in range(F.n_instructions())) \
            else None
        shared, pairs = _repeated_operands(F) if R == "float" else (set(), set())
        defined: dict[int, int] = {}  # work slot -> the instruction that last wrote it
        reciprocal: dict[tuple[int, int], str] = {}
        trig: dict[tuple[int, int], tuple[str, str]] = {}
        for k in range(F.n_instructions()):
            op = F.instruction_id(k)
            ins = F.instruction_input(k)
            outs = F.instruction_output(k)
            den = ins[1] if op == ca.OP_DIV else ins[0] if op == ca.OP_INV else -1
            key = (den, defined.get(den, -1))
            angle = (ins[0], defined.get(ins[0], -1)) if op in (ca.OP_SIN, ca.OP_COS) else (-1, -1)
            for w in outs if op != ca.OP_OUTPUT else ():  # (an output's are its index and nonzero, no slots)
                defined[w] = k
            if R == "float" and op in (ca.OP_SIN, ca.OP_COS):
                # single precision's own sine and cosine (templates/sincos.c.in), both from one reduction where
                # the model takes both of one angle
                fn = "sin" if op == ca.OP_SIN else "cos"
                if angle not in pairs:
                    self._trig.add(fn)
                    body.append(f"  w{outs[0]} = {self.prefix}_{fn}f(w{ins[0]});")
                    continue
                self._trig.add("both")
                if angle not in trig:
                    trig[angle] = (f"s{len(trig)}", f"c{len(trig)}")
                    body.append(f"  {self.prefix}_sincosf(w{ins[0]}, &{trig[angle][0]}, &{trig[angle][1]});")
                body.append(f"  w{outs[0]} = {trig[angle][0 if op == ca.OP_SIN else 1]};")
                continue
            if key in shared:
                # a denominator of several divisions (a model's mass matrix determinant, its derivatives'
                # quotients): its reciprocal once, then products (VDIV costs 14 cycles on a Cortex-M4, VMUL 1)
                if key not in reciprocal:
                    reciprocal[key] = f"d{len(reciprocal)}"
                    body.append(f"  {reciprocal[key]} = 1/w{den};")
                body.append(f"  w{outs[0]} = " + (f"w{ins[0]}*{reciprocal[key]};" if op == ca.OP_DIV
                                                   else f"{reciprocal[key]};"))
                continue
            if op == ca.OP_CALL and nodes is not None:
                G = nodes[k].which_function()
                gname = self.add(G)
                callees.append(gname)
                body += self._sx_call(G, gname, ins, outs)
            elif op == ca.OP_INPUT:
                ins_used.add(ins[0])
                body.append(f"  w{outs[0]} = a{ins[0]}[{ins[1]}];")
            elif op == ca.OP_OUTPUT:
                outs_used.add(outs[0])
                body.append(f"  r{outs[0]}[{outs[1]}] = w{ins[0]};")
            elif op == ca.OP_CONST:
                body.append(f"  w{outs[0]} = {literal(F.instruction_constant(k), R)};")
            elif op in _BINARY:
                body.append(f"  w{outs[0]} = {self.format_op(_BINARY[op], f'w{ins[0]}', f'w{ins[1]}')};")
            elif op in _UNARY:
                body.append(f"  w{outs[0]} = {self.format_op(_UNARY[op], f'w{ins[0]}')};")
            else:
                raise EmitError(f"cannot export operation {_OPS.get(op, op)} in {F.name()}: no C translation")
        lines = self._sx_prologue(F, cname, body, ins_used, outs_used,
                                  list(reciprocal.values()) + [v for sc in trig.values() for v in sc])
        lines += body + ["  return 0;", "}", ""]
        self.call_graph[cname] = sorted(set(callees))
        return "\n".join(lines)

    def _sx_prologue(self, F: ca.Function, cname: str, body: list[str], ins_used: set[int], outs_used: set[int],
                     extra: list[str]) -> list[str]:
        """An SX body's signature and declarations: work scalars, `extra` scalars, NULL-resolved arguments."""
        R = self.real
        lines = [f"/* {F.name()}: {_signature(F)} */"]
        max_in = max([F.nnz_in(i) for i in ins_used], default=0)
        max_out = max([F.nnz_out(i) for i in outs_used], default=0)
        zeros = f"{cname}_zeros"
        if ins_used:
            lines.append(f"static const {R} {zeros}[{max(1, max_in)}] = {{0}};")
        lines.append(f"static int {cname}(const {R}** arg, {R}** res) {{")
        used = sorted({int(i) for line in body for i in re.findall(r"\bw(\d+)\b", line)})
        names = [f"w{i}" for i in used] + extra
        for i in range(0, len(names), 16):
            lines.append(f"  {R} {', '.join(names[i:i + 16])};")
        for i in sorted(ins_used):
            lines.append(f"  const {R}* a{i} = arg[{i}] ? arg[{i}] : {zeros};")
        if outs_used:
            lines.append(f"  {R} scratch[{max(1, max_out)}];")
            for i in sorted(outs_used):
                lines.append(f"  {R}* r{i} = res[{i}] ? res[{i}] : scratch;")
        if not ins_used:
            lines.append("  (void)arg;")
        if not outs_used:
            lines.append("  (void)res;")
        return lines

    def _sx_call(self, G: ca.Function, gname: str, ins: list[int], outs: list[int]) -> list[str]:
        """A call of `G` from an SX body: its input nonzeros gathered from work scalars, outputs scattered back."""
        R = self.real
        n_in = [G.nnz_in(i) for i in range(G.n_in())]
        n_out = [G.nnz_out(i) for i in range(G.n_out())]
        gathered = ", ".join(f"w{w}" if w >= 0 else "0" for w in ins) or "0"
        args = ", ".join(f"ci + {sum(n_in[:i])}" if n_in[i] else "0" for i in range(len(n_in))) or "0"
        results = ", ".join(f"co + {sum(n_out[:i])}" if n_out[i] else "0" for i in range(len(n_out))) or "0"
        lines = ["  {",
                 f"    {R} ci[{max(1, len(ins))}] = {{{gathered}}};",
                 f"    {R} co[{max(1, sum(n_out))}];",
                 f"    const {R}* a[{max(1, len(n_in))}] = {{{args}}};",
                 f"    {R}* r[{max(1, len(n_out))}] = {{{results}}};",
                 f"    if ({gname}(a, r)) return 1;"]
        lines += [f"    w{w} = co[{j}];" for j, w in enumerate(outs) if w >= 0]
        return lines + ["  }"]

    # ------------------------------------------------------------------- MX
    def _mx(self, F: ca.Function, cname: str) -> str:
        R = self.real
        body = _MXBody(self, F, cname)
        for k in range(F.n_instructions()):
            body.translate(k)
        self.call_graph[cname] = sorted(set(body.callees))
        self.static_reals += sum(body.statics.values())
        head = [f"/* {F.name()}: {_signature(F)} */"] + body.consts
        head += [f"static {R} {name}[{size}];" for name, size in body.statics.items()]
        fn = [f"static int {cname}(const {R}** arg, {R}** res) {{"]
        if any("for (i = 0;" in line for line in body.lines):
            fn.append("  int i;")
        fn += body.lines
        if not any("arg[" in line for line in body.lines):
            fn.append("  (void)arg;")
        if not any("res[" in line for line in body.lines):
            fn.append("  (void)res;")
        return "\n".join(head + fn + ["  return 0;", "}", ""])


def _repeated_operands(F: ca.Function) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """Values (work slot, the instruction that wrote it) of the SX Function `F` that two or more divisions (and
    ``1/x``) divide by, and angles whose sine and cosine are both taken. The float emitter divides by the first
    once (its reciprocal) and multiplies: one rounding more per quotient, within the rounding the checks estimate
    and allow for; the second share one reduction (``_sincosf``)."""
    defined: dict[int, int] = {}
    count: dict[tuple[int, int], int] = {}
    trig: dict[tuple[int, int], set[int]] = {}
    for k in range(F.n_instructions()):
        op, ins = F.instruction_id(k), F.instruction_input(k)
        if op in (ca.OP_DIV, ca.OP_INV):
            den = ins[1] if op == ca.OP_DIV else ins[0]
            key = (den, defined.get(den, -1))
            count[key] = count.get(key, 0) + 1
        elif op in (ca.OP_SIN, ca.OP_COS):
            trig.setdefault((ins[0], defined.get(ins[0], -1)), set()).add(op)
        for w in F.instruction_output(k) if op != ca.OP_OUTPUT else ():
            defined[w] = k
    return {key for key, n in count.items() if n >= 2}, {key for key, ops in trig.items() if len(ops) == 2}


class _MXBody:
    """The statements of one MX Function, one instruction at a time.

    Every work element lives in a `_Ref`: an input pointer, a constant array,
    a static buffer, or a slice (an alias) of one of these.
    """

    def __init__(self, emitter: CEmitter, F: ca.Function, cname: str) -> None:
        self.emitter, self.F, self.cname, self.R = emitter, F, cname, emitter.real
        self.lines: list[str] = []
        self.statics: dict[str, int] = {}
        self.consts: list[str] = []
        self.refs: dict[int, _Ref] = {}
        self.callees: list[str] = []
        self.last_use: dict[int, int] = {}
        self.splines: list[LinearTable | SplineTable] | None = None  # F's spline nodes' tables, in order
        for k in range(F.n_instructions()):
            if F.instruction_id(k) != ca.OP_INPUT:
                for w in F.instruction_input(k):
                    self.last_use[w] = k
        self.k = 0

    def buffer(self, w: int, n: int, avoid: set[str]) -> _Ref:
        """Fresh storage for work element `w` that no live reference points into.

        A live reference is an input of this instruction, or a slice alias of
        another element still to be read: CasADi may reuse a work slot that an
        alias of ours still reads from.
        """
        live = avoid | {r.base for key, r in self.refs.items() if key != w and self.last_use.get(key, -1) >= self.k}
        name, suffix = f"{self.cname}_w{w}", 0
        while name in live:
            suffix += 1
            name = f"{self.cname}_w{w}_{suffix}"
        self.statics[name] = max(self.statics.get(name, 1), n)
        return _Ref(name)

    def translate(self, k: int) -> None:
        """Append the statements of instruction `k`."""
        self.k = k
        op = self.F.instruction_id(k)
        ins, outs = self.F.instruction_input(k), self.F.instruction_output(k)
        if op in _BINARY or op in _UNARY:
            self.elementwise(op, ins, outs)
            return
        handler = {
            ca.OP_INPUT: self.input, ca.OP_OUTPUT: self.output, ca.OP_CONST: self.const, ca.OP_CALL: self.call,
            ca.OP_GETNONZEROS: self.get_nonzeros, ca.OP_HORZCAT: self.concat, ca.OP_VERTCAT: self.concat,
            ca.OP_BSPLINE: self.bspline, ca.OP_MTIMES: self.mtimes,
        }.get(op)
        if handler is None:
            raise EmitError(f"cannot export MX operation {_OPS.get(op, op)} in {self.F.name()}")
        handler(op, ins, outs)

    def input(self, op: int, ins: list[int], outs: list[int]) -> None:
        info = self.F.instruction_MX(self.k).info()
        nnz = self.F.instruction_MX(self.k).nnz()
        if info["offset"] == 0 and nnz == self.F.nnz_in(info["ind"]):
            self.refs[outs[0]] = _Ref(f"arg[{info['ind']}]", 0, nullable=True)
        else:
            src, dst = _Ref(f"arg[{info['ind']}]", info["offset"], True), self.buffer(outs[0], nnz, set())
            self.lines += _copy(dst.base, src, nnz)
            self.refs[outs[0]] = dst

    def output(self, op: int, ins: list[int], outs: list[int]) -> None:
        src, n = self.refs[ins[0]], self.F.nnz_out(outs[0])
        self.lines.append(f"  if (res[{outs[0]}]) {{")
        self.lines += _copy(f"res[{outs[0]}]", src, n, "    ")
        self.lines.append("  }")

    def const(self, op: int, ins: list[int], outs: list[int]) -> None:
        values = np.array(ca.evalf(self.F.instruction_MX(self.k)).nonzeros(), dtype=float)
        name = f"{self.cname}_c{self.k}"
        self.consts.append(f"static const {self.R} {name}[{max(1, values.size)}] = "
                           f"{{{', '.join(literal(v, self.R) for v in values) or '0'}}};")
        self.refs[outs[0]] = _Ref(name)

    def call(self, op: int, ins: list[int], outs: list[int]) -> None:
        R = self.R
        G = self.F.instruction_MX(self.k).which_function()
        gname = self.emitter.add(G)
        self.callees.append(gname)
        in_bases = {self.refs[w].base for w in ins if w >= 0}
        args = [self.refs[w].pointer() if w >= 0 else "0" for w in ins]
        new = {w: self.buffer(w, G.nnz_out(j), in_bases) for j, w in enumerate(outs) if w >= 0}
        res = [new[w].pointer() if w >= 0 else "0" for w in outs]
        self.lines.append(f"  {{ const {R}* a[{max(1, len(ins))}] = {{{', '.join(args) or '0'}}};")
        self.lines.append(f"    {R}* r[{max(1, len(outs))}] = {{{', '.join(res) or '0'}}};")
        self.lines.append(f"    if ({gname}(a, r)) return 1; }}")
        self.refs.update(new)

    def get_nonzeros(self, op: int, ins: list[int], outs: list[int]) -> None:
        node = self.F.instruction_MX(self.k)
        nz = selected_nonzeros(node.info(), node.nnz())
        src = self.refs[ins[0]]
        contiguous = nz == list(range(nz[0], nz[0] + len(nz))) if nz else True
        if contiguous and not src.nullable:
            self.refs[outs[0]] = _Ref(src.base, src.offset + (nz[0] if nz else 0))
        else:
            dst = self.buffer(outs[0], len(nz), {src.base})
            self.lines += [f"  {dst.base}[{j}] = {src.read(i)};" for j, i in enumerate(nz)]
            self.refs[outs[0]] = dst

    def elementwise(self, op: int, ins: list[int], outs: list[int]) -> None:
        # Elementwise on dense operands; a one-nonzero operand broadcasts.
        node = self.F.instruction_MX(self.k)
        n = node.nnz()
        arity = 2 if op in _BINARY else 1
        srcs = [self.refs[w] for w in ins[:arity]]
        sizes = [node.dep(i).nnz() for i in range(arity)]
        if any(size not in (1, n) for size in sizes) or not node.sparsity().is_dense():
            raise EmitError(f"cannot export {_OPS[op]} of operands with {sizes} nonzeros in {self.F.name()}")
        dst = self.buffer(outs[0], n, {src.base for src in srcs})
        template = _BINARY[op] if arity == 2 else _UNARY[op]
        for j in range(n):
            vals = [src.read(j if size == n else 0) for src, size in zip(srcs, sizes, strict=True)]
            self.lines.append(f"  {dst.base}[{j}] = {self.emitter.format_op(template, *vals)};")
        self.refs[outs[0]] = dst

    def bspline(self, op: int, ins: list[int], outs: list[int]) -> None:
        # A spline node (an interpolant's derivative): its table is the next
        # one CasADi's own C of F evaluates.
        if self.splines is None:
            self.splines = tables_in(self.F)
        if not self.splines:
            raise EmitError(f"cannot read the spline tables of {self.F.name()}")
        table = self.splines.pop(0)
        name = f"{self.cname}_t{self.k}"
        self.consts += self.emitter.table_arrays(name, table)
        src = self.refs[ins[0]]
        if src.nullable:  # a NULL input reads as zeros: copy it first
            copy = self.buffer(self.F.sz_w() + self.k, table.ndim, set())  # an index past CasADi's work slots
            self.lines += _copy(copy.base, src, table.ndim)
            src = copy
        dst = self.buffer(outs[0], table.m, {src.base})
        self.lines.append(f"  {self.emitter.table_call(name, table, dst.base, src.pointer())}")
        self.refs[outs[0]] = dst

    def mtimes(self, op: int, ins: list[int], outs: list[int]) -> None:
        # out = z + x y on dense matrices (x: n x k, y: k x m, z: n x m), column-major
        # nonzeros; CasADi's node holds its operands as (z, x, y).
        node = self.F.instruction_MX(self.k)
        z, x, y = (node.dep(i) for i in range(3))
        if not all(d.sparsity().is_dense() for d in (x, y, z)):
            raise EmitError(f"cannot export a product of sparse matrices in {self.F.name()}")
        n, kk, m = x.size1(), x.size2(), y.size2()
        Z, X, Y = (self.refs[w] for w in ins[:3])
        dst = self.buffer(outs[0], n * m, {X.base, Y.base, Z.base})
        for j in range(m):
            for i in range(n):
                terms = " + ".join(f"{X.read(i + n * q)} * {Y.read(q + kk * j)}" for q in range(kk)) or "0"
                self.lines.append(f"  {dst.base}[{i + n * j}] = {Z.read(i + n * j)} + {terms};")
        self.refs[outs[0]] = dst

    def concat(self, op: int, ins: list[int], outs: list[int]) -> None:
        node = self.F.instruction_MX(self.k)
        if op == ca.OP_VERTCAT and any(node.dep(i).size2() != 1 for i in range(node.n_dep())):
            raise EmitError(f"cannot export a vertcat of matrices in {self.F.name()}")
        dst = self.buffer(outs[0], node.nnz(), {self.refs[w].base for w in ins})
        pos = 0
        for i, w in enumerate(ins):
            n = node.dep(i).nnz()
            self.lines += _copy(f"({dst.base} + {pos})", self.refs[w], n)
            pos += n
        self.refs[outs[0]] = dst


def _copy(dst: str, src: _Ref, n: int, indent: str = "  ") -> list[str]:
    """C statements copying n nonzeros of `src` to the array expression `dst`."""
    if n <= 4:
        return [f"{indent}{dst}[{j}] = {src.read(j)};" for j in range(n)]
    if src.nullable:
        return [f"{indent}for (i = 0; i < {n}; ++i) {dst}[i] = {src.base} ? {src.base}[{src.offset} + i] : 0;"]
    return [f"{indent}for (i = 0; i < {n}; ++i) {dst}[i] = {src.base}[{src.offset} + i];"]


def selected_nonzeros(info: dict[str, Any], n: int) -> list[int]:
    """Nonzero indices selected by a GetNonzeros node (slice, nested slice or list)."""
    if "slice" in info:
        s = info["slice"]
        return list(range(s["start"], s["stop"], s["step"]))
    if "nz" in info:
        return [int(i) for i in info["nz"]]
    if "inner" in info and "outer" in info:
        inner, outer = info["inner"], info["outer"]
        return [o + i for o in range(outer["start"], outer["stop"], outer["step"])
                for i in range(inner["start"], inner["stop"], inner["step"])][:n]
    raise EmitError(f"cannot export a GetNonzeros node with info {sorted(info)}")


def _signature(F: ca.Function) -> str:
    ins = ", ".join(f"{F.name_in(i)}[{F.size1_in(i)}x{F.size2_in(i)}]" for i in range(F.n_in()))
    outs = ", ".join(f"{F.name_out(i)}[{F.size1_out(i)}x{F.size2_out(i)}]" for i in range(F.n_out()))
    return f"({ins}) -> ({outs})"
