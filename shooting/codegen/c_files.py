"""The files of a C export: NAME.c, NAME.h, manifest.json, Makefile, as text.

`generate_c` is pure (same inputs, same bytes); writing them into a directory
is `shooting.codegen.pipeline`'s job.

The C has no heap (nothing calls malloc/calloc/realloc/free), no CasADi
runtime and no sparsity tables beyond CasADi's calling convention. A Function
whose inputs are ``x, u, p, t0, dt`` (a `build_integrator` step) also gets

    int NAME_step(const NAME_real* x, const NAME_real* u, const NAME_real* p,
                  NAME_real t0, NAME_real dt,
                  NAME_real* x_next, NAME_real* A, NAME_real* B);
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import casadi as ca

from shooting import _validate
from shooting._files import GENERATOR
from shooting._version import VERSION
from shooting.codegen.emitter import CEmitter
from shooting.codegen.templates import render
from shooting.options import REALS, Real

__all__ = ["DAE_STEP_INPUTS", "STEP_INPUTS", "CExport", "export_files", "generate_c"]

#: The inputs of a step Function, in order: such a Function also gets ``NAME_step``.
STEP_INPUTS = ["x", "u", "p", "t0", "dt"]

#: The inputs of the step Function of a model with algebraic states.
DAE_STEP_INPUTS = [*STEP_INPUTS, "z0"]


def export_files(name: str) -> list[str]:
    """The file names of the export called `name`, in the order they are listed."""
    return [f"{name}.c", f"{name}.h", "manifest.json", "Makefile"]


@dataclass(frozen=True)
class CExport:
    """Generated files and what the generator knows about them.

    Attributes
    ----------
    name : str
        Prefix of every C symbol and the file stem.
    files : dict of str to str
        File name -> content (``NAME.c``, ``NAME.h``, ``manifest.json``, ``Makefile``).
    manifest : dict
        The content of ``manifest.json``.
    call_graph : dict of str to list of str
        C function -> C functions it calls (for worst-case stack).
    """

    name: str
    files: dict[str, str]
    manifest: dict
    call_graph: dict[str, list[str]]

    def with_manifest(self, **updates: object) -> "CExport":
        """A copy whose manifest has extra entries (e.g. measured sizes)."""
        manifest = {**self.manifest, **updates}
        files = {**self.files, "manifest.json": _json(manifest)}
        return CExport(self.name, files, manifest, self.call_graph)


def _json(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def _is_step(F: ca.Function) -> bool:
    return F.name_in() in (STEP_INPUTS, DAE_STEP_INPUTS) and F.n_out() >= 1 and F.name_out()[0] == "x_next"


def _dae(F: ca.Function) -> bool:
    return F.name_in() == DAE_STEP_INPUTS


def _sparsity_array(sp: ca.Sparsity) -> list[int]:
    return [sp.size1(), sp.size2(), *sp.colind(), *sp.row()]


def generate_c(
    F: ca.Function,
    name: str,
    *,
    real: Real = "double",
    metadata: Mapping[str, object] | None = None,
) -> CExport:
    """Generate the C files for `F`.

    Parameters
    ----------
    F : casadi.Function
        An SX Function, or an MX Function composed of SX Functions (calls,
        slices, scalar arithmetic), such as any `build_integrator` result.
    name : str
        C identifier used as the prefix of every symbol and the file stem.
    real : {"double", "float"}
        The real type; "float" is single precision throughout.
    metadata : mapping, optional
        Extra JSON-serialisable entries for the manifest (model, tableau, ...).

    Returns
    -------
    CExport

    Raises
    ------
    ValueError
        A name that is not a C identifier, an unknown real type, or a
        Function with an operation the emitter cannot translate.
    """
    name = _validate.identifier(name, "name")
    real = _validate.choice(real, REALS, "real")
    if F.has_free():
        raise ValueError(f"Function {F.name()} has free symbols {F.free_sx() if F.is_a('SXFunction') else ''}")
    emitter = CEmitter(name, real)
    body = emitter.add(F)
    step = _is_step(F)
    R = f"{name}_real"

    manifest = {
        "generator": GENERATOR,
        "generator_version": VERSION,
        "files": export_files(name),
        "casadi_version": ca.__version__,  # type: ignore[attr-defined]
        "name": name,
        "function": F.name(),
        "real": real,
        "inputs": {F.name_in(i): [F.size1_in(i), F.size2_in(i)] for i in range(F.n_in())},
        "outputs": {F.name_out(i): [F.size1_out(i), F.size2_out(i)] for i in range(F.n_out())},
        "instructions": int(F.n_instructions()),
        "work": {"casadi_sz_w": int(F.sz_w()), "static_reals": emitter.static_reals,
                 "static_bytes": emitter.static_reals * (4 if real == "float" else 8)},
        "reentrant": emitter.reentrant,
        "heap": False,
        "step_function": f"{name}_step" if step else None,
        **dict(metadata or {}),
    }
    files = {
        f"{name}.h": _header(F, name, R, real, step, emitter.reentrant, emitter.static_reals),
        f"{name}.c": _source(F, name, R, body, emitter.source(), step),
        "manifest.json": _json(manifest),
        "Makefile": _makefile(name),
    }
    graph = dict(emitter.call_graph)
    graph[name] = [body]
    if step:
        graph[f"{name}_step"] = [body]
    return CExport(name, files, manifest, graph)


def _header(F: ca.Function, name: str, R: str, real: str, step: bool, reentrant: bool, static_reals: int) -> str:
    dims = usage = step_decl = ""
    if step:
        nx, nu, npar = F.size1_in(0), F.size1_in(1), F.size1_in(2)
        upper = name.upper()
        dims = f"#define {upper}_NX {nx}\n#define {upper}_NU {nu}\n#define {upper}_NP {npar}\n"
        no_sens = "" if "A" in F.name_out() else \
            "; this step was generated without sensitivities: A and B are ignored (may be NULL)"
        usage = (
            f"\n * Usage:\n"
            f" *   {R} x[{nx}], u[{max(nu, 1)}], p[{max(npar, 1)}], x_next[{nx}], A[{nx * nx}], "
            f"B[{max(nx * nu, 1)}];\n"
            f" *   int status = {name}_step(x, u, p, t0, dt, x_next, A, B);   (0 on success)\n"
            f" * x_next = the state at t0 + dt; A = dx_next/dx ({nx}x{nx}) and B = dx_next/du\n"
            f" * ({nx}x{nu}) are dense and column-major (A[i + {nx}*j] = d x_next[i] / d x[j]){no_sens}.\n"
            f" * p may be NULL when the model has no parameters; A and B may be NULL when not needed."
        )
        z_in, z_out = _z_arguments(F, R)
        if z_in:
            nz = F.size1_in(5)
            dims += f"#define {upper}_NZ {nz}\n"
            usage = usage.replace(f"{name}_step(x, u, p, t0, dt, x_next, A, B)",
                                  f"{name}_step(x, u, p, t0, dt, z0, x_next, A, B, z)")
            usage += (f"\n * Algebraic states: z0[{nz}] is the guess of z at x (e.g. the z of the previous step);"
                      f"\n * z[{nz}] receives the algebraic state consistent with x_next.")
        step_decl = (f"int {name}_step(const {R}* x, const {R}* u, const {R}* p, {R} t0, {R} dt,{z_in}\n"
                     f"    {R}* x_next, {R}* A, {R}* B{z_out});\n")
        if "err" in F.name_out():
            step_decl += (f"/* As {name}_step, plus the embedded error estimate err[NX] (may be NULL). */\n"
                          f"int {name}_step_err(const {R}* x, const {R}* u, const {R}* p, {R} t0, {R} dt,{z_in}\n"
                          f"    {R}* x_next, {R}* A, {R}* B, {R}* err{z_out});\n")
    memory = ("Reentrant: all work memory is on the stack (no static state)." if reentrant else
              f"NOT reentrant: {static_reals} static {real}s of work memory are shared by all calls; "
              "do not call it from two threads or interrupt levels at once.")
    summary = (f"{F.name()}: {F.n_in()} inputs ({', '.join(F.name_in())}), {F.n_out()} outputs "
               f"({', '.join(F.name_out())}), {real} precision.")
    return render("step.h.in", name=name, NAME=name.upper(), version=VERSION, summary=summary, usage=usage,
                  memory=memory, guard=f"{name.upper()}_H", real=real, R=R, dims=dims,
                  reentrant=1 if reentrant else 0, step_decl=step_decl)


def _z_arguments(F: ca.Function, R: str) -> tuple[str, str]:
    """The extra parameters of ``NAME_step`` for a model with algebraic states (else empty)."""
    if not _dae(F):
        return "", ""
    return f" const {R}* z0,", f", {R}* z"


def _step_wrappers(F: ca.Function, name: str, R: str, body: str) -> str:
    """``NAME_step`` (and ``NAME_step_err``): the documented call with named arguments."""
    outs = F.name_out()
    z_in, z_out = _z_arguments(F, R)
    named = {"x_next": "x_next", "A": "A", "B": "B", **({"z": "z"} if z_in else {})}

    def res_of(available: dict[str, str]) -> str:
        return "".join(f"  res[{i}] = {available.get(o, '0')};\n" for i, o in enumerate(outs))

    common = (f"  const {R}* arg[{F.n_in()}];\n  {R}* res[{len(outs)}];\n"
              "  arg[0] = x; arg[1] = u; arg[2] = p; arg[3] = &t0; arg[4] = &dt;\n"
              + ("  arg[5] = z0;\n" if z_in else ""))
    unused = "" if "A" in outs else "  (void)A; (void)B;\n"
    code = (f"int {name}_step(const {R}* x, const {R}* u, const {R}* p, {R} t0, {R} dt,{z_in}\n"
            f"    {R}* x_next, {R}* A, {R}* B{z_out}) {{\n{common}{unused}"
            f"{res_of(named)}  return {body}(arg, res);\n}}\n\n")
    if "err" in outs:
        code += (f"int {name}_step_err(const {R}* x, const {R}* u, const {R}* p, {R} t0, {R} dt,{z_in}\n"
                 f"    {R}* x_next, {R}* A, {R}* B, {R}* err{z_out}) {{\n{common}{unused}"
                 f"{res_of({**named, 'err': 'err'})}"
                 f"  return {body}(arg, res);\n}}\n\n")
    return code


def _source(F: ca.Function, name: str, R: str, body: str, functions: str, step: bool) -> str:
    n_in, n_out = F.n_in(), F.n_out()
    sps = [_sparsity_array(F.sparsity_in(i)) for i in range(n_in)] + \
          [_sparsity_array(F.sparsity_out(i)) for i in range(n_out)]
    sparsity = "\n".join(
        f"static const casadi_int {name}_s{k}[{len(s)}] = {{{', '.join(map(str, s))}}};" for k, s in enumerate(sps)
    )
    return render(
        "step.c.in", name=name, version=VERSION, R=R, body=body, functions=functions, sparsity=sparsity,
        n_in=n_in, n_out=n_out, n_in_1=max(n_in, 1), n_out_1=max(n_out, 1),
        names_in=", ".join(f'"{n}"' for n in F.name_in()) or "0",
        names_out=", ".join(f'"{n}"' for n in F.name_out()) or "0",
        sp_in=", ".join(f"{name}_s{k}" for k in range(n_in)) or "0",
        sp_out=", ".join(f"{name}_s{n_in + k}" for k in range(n_out)) or "0",
        step_code=_step_wrappers(F, name, R, body) if step else "",
    )


def _makefile(name: str) -> str:
    return render("Makefile.in", name=name, version=VERSION)
