"""Export a CasADi Function as embedded C: NAME.c, NAME.h, manifest.json, Makefile.

`generate_c` is pure (same inputs, same bytes); `install` writes files into a
directory without ever touching files it did not write; `export_c` does both
through a temporary directory, so a failure leaves nothing half-written.

The C has no heap (nothing calls malloc/calloc/realloc/free), no CasADi
runtime and no sparsity tables beyond CasADi's calling convention. A Function
whose inputs are ``x, u, p, t0, dt`` (a `build_integrator` step) also gets

    int NAME_step(const NAME_real* x, const NAME_real* u, const NAME_real* p,
                  NAME_real t0, NAME_real dt,
                  NAME_real* x_next, NAME_real* A, NAME_real* B);
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import casadi as ca

from shooting import files
from shooting.c_emitter import CEmitter

__all__ = ["CExport", "check_destination", "generate_c", "install", "export_c", "GENERATOR"]

GENERATOR = "shooting"
STEP_INPUTS = ["x", "u", "p", "t0", "dt"]
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
    return F.name_in() == STEP_INPUTS and F.n_out() >= 1 and F.name_out()[0] == "x_next"


def _sparsity_array(sp: ca.Sparsity) -> list[int]:
    return [sp.size1(), sp.size2(), *sp.colind(), *sp.row()]


def generate_c(
    F: ca.Function,
    name: str,
    *,
    real: str = "double",
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
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ValueError(f"name {name!r} is not a C identifier: use letters, digits and '_'")
    if real not in ("double", "float"):
        raise ValueError(f"real must be 'double' or 'float', got {real!r}")
    if F.has_free():
        raise ValueError(f"Function {F.name()} has free symbols {F.free_sx() if F.is_a('SXFunction') else ''}")
    emitter = CEmitter(name, real)
    body = emitter.add(F)
    step = _is_step(F)
    R = f"{name}_real"

    manifest = {
        "generator": GENERATOR,
        "generator_version": _version(),
        "casadi_version": ca.__version__,
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


def _version() -> str:
    from shooting import __version__

    return __version__


def _header(F: ca.Function, name: str, R: str, real: str, step: bool, reentrant: bool, static_reals: int) -> str:
    guard = f"{name.upper()}_H"
    dims = ""
    usage = ""
    if step:
        nx, nu, npar = F.size1_in(0), F.size1_in(1), F.size1_in(2)
        sens = "A" in F.name_out()
        dims = (f"#define {name.upper()}_NX {nx}\n#define {name.upper()}_NU {nu}\n"
                f"#define {name.upper()}_NP {npar}\n")
        usage = f"""
 * Usage:
 *   {R} x[{nx}], u[{max(nu, 1)}], p[{max(npar, 1)}], x_next[{nx}], A[{nx * nx}], B[{max(nx * nu, 1)}];
 *   int status = {name}_step(x, u, p, t0, dt, x_next, A, B);   (0 on success)
 * x_next = the state at t0 + dt; A = dx_next/dx ({nx}x{nx}) and B = dx_next/du
 * ({nx}x{nu}) are dense and column-major (A[i + {nx}*j] = d x_next[i] / d x[j]){'' if sens else '; this step was generated without sensitivities: A and B are ignored (may be NULL)'}.
 * p may be NULL when the model has no parameters; A and B may be NULL when not needed."""
    memory = ("Reentrant: all work memory is on the stack (no static state)." if reentrant else
              f"NOT reentrant: {static_reals} static {real}s of work memory are shared by all calls; "
              "do not call it from two threads or interrupt levels at once.")
    step_decl = ""
    if step:
        step_decl = (f"int {name}_step(const {R}* x, const {R}* u, const {R}* p, {R} t0, {R} dt,\n"
                     f"    {R}* x_next, {R}* A, {R}* B);\n")
        if "err" in F.name_out():
            step_decl += (f"/* As {name}_step, plus the embedded error estimate err[NX] (may be NULL). */\n"
                          f"int {name}_step_err(const {R}* x, const {R}* u, const {R}* p, {R} t0, {R} dt,\n"
                          f"    {R}* x_next, {R}* A, {R}* B, {R}* err);\n")
    return f"""/* {name}.h: generated by shooting {_version()}; do not edit.
 * {F.name()}: {F.n_in()} inputs ({', '.join(F.name_in())}), {F.n_out()} outputs ({', '.join(F.name_out())}), {real} precision.{usage}
 * No heap: nothing here calls malloc, calloc, realloc or free. {memory}
 */
#ifndef {guard}
#define {guard}

#ifdef __cplusplus
extern "C" {{
#endif

typedef {real} {R};

/* CasADi's integer type: 32 bits on microcontrollers, CasADi's default
 * (long long, as casadi.external expects) on hosts. */
#ifndef casadi_int
#if defined(__arm__) || defined(__thumb__) || defined(SHOOTING_INT32)
#include <stdint.h>
#define casadi_int int32_t
#else
#define casadi_int long long int
#endif
#endif

{dims}#define {name.upper()}_REENTRANT {1 if reentrant else 0}

{step_decl}
/* CasADi's calling convention (arg/res: pointers to the inputs'/outputs'
 * nonzeros; iw and w are unused and may be NULL; mem is ignored). */
int {name}(const {R}** arg, {R}** res, casadi_int* iw, {R}* w, int mem);
int {name}_work(casadi_int* sz_arg, casadi_int* sz_res, casadi_int* sz_iw, casadi_int* sz_w);
int {name}_work_bytes(casadi_int* sz_arg, casadi_int* sz_res, casadi_int* sz_iw, casadi_int* sz_w);
casadi_int {name}_n_in(void);
casadi_int {name}_n_out(void);
{R} {name}_default_in(casadi_int i);
const char* {name}_name_in(casadi_int i);
const char* {name}_name_out(casadi_int i);
const casadi_int* {name}_sparsity_in(casadi_int i);
const casadi_int* {name}_sparsity_out(casadi_int i);
void {name}_incref(void);
void {name}_decref(void);
int {name}_alloc_mem(void);
int {name}_init_mem(int mem);
void {name}_free_mem(int mem);
int {name}_checkout(void);
void {name}_release(int mem);

#ifdef __cplusplus
}}
#endif

#endif /* {guard} */
"""


def _source(F: ca.Function, name: str, R: str, body: str, functions: str, step: bool) -> str:
    n_in, n_out = F.n_in(), F.n_out()
    sps = [_sparsity_array(F.sparsity_in(i)) for i in range(n_in)] + \
          [_sparsity_array(F.sparsity_out(i)) for i in range(n_out)]
    sp_lines = "\n".join(
        f"static const casadi_int {name}_s{k}[{len(s)}] = {{{', '.join(map(str, s))}}};" for k, s in enumerate(sps)
    )
    names_in = ", ".join(f'"{n}"' for n in F.name_in())
    names_out = ", ".join(f'"{n}"' for n in F.name_out())
    sp_in = ", ".join(f"{name}_s{k}" for k in range(n_in))
    sp_out = ", ".join(f"{name}_s{n_in + k}" for k in range(n_out))
    step_code = ""
    if step:
        outs = F.name_out()

        def res_of(available: dict[str, str]) -> str:
            return "".join(f"  res[{i}] = {available.get(o, '0')};\n" for i, o in enumerate(outs))

        common = ("  const {R}* arg[5];\n  {R}* res[{n}];\n"
                  "  arg[0] = x; arg[1] = u; arg[2] = p; arg[3] = &t0; arg[4] = &dt;\n").format(R=R, n=n_out)
        unused = "" if "A" in outs else "  (void)A; (void)B;\n"
        step_code = (f"int {name}_step(const {R}* x, const {R}* u, const {R}* p, {R} t0, {R} dt,\n"
                     f"    {R}* x_next, {R}* A, {R}* B) {{\n{common}{unused}"
                     f"{res_of({'x_next': 'x_next', 'A': 'A', 'B': 'B'})}  return {body}(arg, res);\n}}\n\n")
        if "err" in outs:
            step_code += (f"int {name}_step_err(const {R}* x, const {R}* u, const {R}* p, {R} t0, {R} dt,\n"
                          f"    {R}* x_next, {R}* A, {R}* B, {R}* err) {{\n{common}{unused}"
                          f"{res_of({'x_next': 'x_next', 'A': 'A', 'B': 'B', 'err': 'err'})}"
                          f"  return {body}(arg, res);\n}}\n\n")
    return f"""/* {name}.c: generated by shooting {_version()}; do not edit. */
#include <math.h>
#include "{name}.h"

{sp_lines}
static const char* {name}_names_in[{max(n_in, 1)}] = {{{names_in or '0'}}};
static const char* {name}_names_out[{max(n_out, 1)}] = {{{names_out or '0'}}};
static const casadi_int* {name}_sp_in[{max(n_in, 1)}] = {{{sp_in or '0'}}};
static const casadi_int* {name}_sp_out[{max(n_out, 1)}] = {{{sp_out or '0'}}};

{functions}
{step_code}int {name}(const {R}** arg, {R}** res, casadi_int* iw, {R}* w, int mem) {{
  (void)iw; (void)w; (void)mem;
  return {body}(arg, res);
}}

int {name}_work(casadi_int* sz_arg, casadi_int* sz_res, casadi_int* sz_iw, casadi_int* sz_w) {{
  if (sz_arg) *sz_arg = {n_in};
  if (sz_res) *sz_res = {n_out};
  if (sz_iw) *sz_iw = 0;
  if (sz_w) *sz_w = 0;
  return 0;
}}

int {name}_work_bytes(casadi_int* sz_arg, casadi_int* sz_res, casadi_int* sz_iw, casadi_int* sz_w) {{
  if (sz_arg) *sz_arg = {n_in} * (casadi_int)sizeof(const {R}*);
  if (sz_res) *sz_res = {n_out} * (casadi_int)sizeof({R}*);
  if (sz_iw) *sz_iw = 0;
  if (sz_w) *sz_w = 0;
  return 0;
}}

casadi_int {name}_n_in(void) {{ return {n_in}; }}
casadi_int {name}_n_out(void) {{ return {n_out}; }}
{R} {name}_default_in(casadi_int i) {{ (void)i; return 0; }}
const char* {name}_name_in(casadi_int i) {{ return (i >= 0 && i < {n_in}) ? {name}_names_in[i] : 0; }}
const char* {name}_name_out(casadi_int i) {{ return (i >= 0 && i < {n_out}) ? {name}_names_out[i] : 0; }}
const casadi_int* {name}_sparsity_in(casadi_int i) {{ return (i >= 0 && i < {n_in}) ? {name}_sp_in[i] : 0; }}
const casadi_int* {name}_sparsity_out(casadi_int i) {{ return (i >= 0 && i < {n_out}) ? {name}_sp_out[i] : 0; }}
void {name}_incref(void) {{}}
void {name}_decref(void) {{}}
int {name}_alloc_mem(void) {{ return 0; }}
int {name}_init_mem(int mem) {{ (void)mem; return 0; }}
void {name}_free_mem(int mem) {{ (void)mem; }}
int {name}_checkout(void) {{ return 0; }}
void {name}_release(int mem) {{ (void)mem; }}
"""


def _makefile(name: str) -> str:
    return f"""# Generated by shooting {_version()}: builds {name}.o for the host and a Cortex-M4.
CC ?= gcc
ARM_CC ?= arm-none-eabi-gcc
CFLAGS ?= -O2 -std=c99 -Wall -Wextra -pedantic
M4FLAGS = -mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard

all: host

host: build/host/{name}.o

cortex-m4: build/cortex-m4/{name}.o

build/host/{name}.o: {name}.c {name}.h
\tmkdir -p build/host
\t$(CC) $(CFLAGS) -c {name}.c -o $@

build/cortex-m4/{name}.o: {name}.c {name}.h
\tmkdir -p build/cortex-m4
\t$(ARM_CC) $(M4FLAGS) $(CFLAGS) -ffunction-sections -fdata-sections -fstack-usage -c {name}.c -o $@

clean:
\trm -rf build

.PHONY: all host cortex-m4 clean
"""


def _owned(directory: Path) -> set[str]:
    """Files a previous export of ours wrote into `directory` (from its manifest)."""
    manifest = directory / "manifest.json"
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return set()
    if not isinstance(data, dict) or data.get("generator") != GENERATOR:
        return set()
    name = str(data.get("name", ""))
    return {f"{name}.c", f"{name}.h", "manifest.json", "Makefile"}


def check_destination(out_dir: str | os.PathLike[str], names: set[str] | None = None, *, force: bool = False) -> None:
    """Raise ValueError unless `install` may write `names` into `out_dir`.

    Called before long work so that a refused directory is reported at once;
    the rules are `shooting.files.check_destination`'s, with the files of an
    earlier export (named in its manifest) counted as ours.
    """
    files.check_destination(out_dir, names or set(), _owned(Path(out_dir)), force=force)


def install(files_: Mapping[str, str], out_dir: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Write `files_` into `out_dir` through a temporary directory.

    A missing `out_dir` is created by one rename of the finished temporary
    directory. An existing one is accepted when it is empty or holds only
    files of an earlier export by this tool; otherwise it is refused unless
    `force`. Files we did not write are never deleted or overwritten.

    Raises
    ------
    ValueError
        `out_dir` is a file, or a non-empty directory of someone else's
        files (without `force`), or a file to write would overwrite a file
        we did not write.
    """
    def write(tmp: Path) -> None:
        for fname, text in files_.items():
            (tmp / fname).write_text(text)

    return files.install_directory(out_dir, write, set(files_), _owned(Path(out_dir)), force=force)


def export_c(
    F: ca.Function,
    out_dir: str | os.PathLike[str],
    name: str | None = None,
    *,
    real: str = "double",
    metadata: Mapping[str, object] | None = None,
    force: bool = False,
) -> CExport:
    """Generate and write ``NAME.c``, ``NAME.h``, ``manifest.json`` and a Makefile.

    Parameters
    ----------
    F : casadi.Function
        The Function to export (see `generate_c`).
    out_dir : str or path
        Destination directory (created; see `install` for the safety rules).
    name : str, optional
        C prefix and file stem (default: the Function's name).
    real : {"double", "float"}
    metadata : mapping, optional
        Extra manifest entries.
    force : bool
        Write beside someone else's files in a non-empty directory.

    Returns
    -------
    CExport
    """
    export = generate_c(F, name or F.name(), real=real, metadata=metadata)
    install(export.files, out_dir, force=force)
    return export
