"""Compile generated C for the host and a Cortex-M4, measure it, run it under QEMU.

Dependency-free (standard library only) helpers for the C exporter and its
``--check``:

- `compile_host`: ``gcc`` with strict warnings (`HOST_CFLAGS`).
- `compile_cortex_m4`: ``arm-none-eabi-gcc`` for a Cortex-M4 with the
  single-precision FPU (`M4_CFLAGS`), then flash/RAM from
  ``arm-none-eabi-size`` and the worst call-chain stack from GCC's
  ``-fstack-usage`` (`M4Size`).
- `undefined_symbols` / `double_precision_symbols`: which library routines an object
  needs (float-only code: no ``__aeabi_dmul`` ..., no double libm ``sin`` ...).
- Running on QEMU's emulated Cortex-M4 board lives in `shooting.codegen.qemu_mps2`.

All tools are found on ``PATH``; a missing one raises `ToolchainError` naming the Debian package.
Finding and running tools and the host build (`find_tool`, `run_tool`,
`compile_host`, ...) live in the foundation module `shooting._tools` (the qp
and mpc layers compile C too) and are re-exported here, their first home.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from shooting._tools import (
    ARM_PACKAGES,
    HOST_CFLAGS,
    CompileResult,
    ToolchainError,
    compile_host,
    find_tool,
    first_error_line,
    have_host_compiler,
    run_tool,
    tool_timeout,
)
from shooting._validate import MAX_TOOL_TIMEOUT

__all__ = [
    "HOST_CFLAGS",
    "M4_CFLAGS",
    "M4_WARNING_FLAGS",
    "MAX_TOOL_TIMEOUT",
    "CompileResult",
    "M4Size",
    "ToolchainError",
    "compile_cortex_m4",
    "compile_host",
    "double_precision_symbols",
    "ARM_PACKAGES",
    "find_tool",
    "first_error_line",
    "have_host_compiler",
    "run_tool",
    "symbol_sizes",
    "tool_timeout",
    "undefined_symbols",
]

#: Code generation for a Cortex-M4F: Thumb-2, single-precision FPU, hard-float ABI.
M4_CFLAGS = ("-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard")

#: Warnings for `compile_cortex_m4` (not errors: the caller judges the stderr).
#: ``-Wdouble-promotion`` flags silent float -> double promotions, which cost a
#: software double routine on the single-precision FPU.
M4_WARNING_FLAGS = ("-std=c99", "-Wall", "-Wextra", "-pedantic", "-Wdouble-promotion")

# --------------------------------------------------------------------------- Cortex-M4 object


@dataclass(frozen=True)
class M4Size:
    """Memory footprint of one Cortex-M4 object file.

    Attributes
    ----------
    text : int
        Code and read-only data, bytes (``arm-none-eabi-size``, Berkeley format).
    data : int
        Initialised data, bytes (in flash and copied to RAM).
    bss : int
        Zero-initialised data, bytes.
    stack : int
        Worst call-chain stack, bytes: with a call graph, the largest over all
        functions of its frame plus the worst chain below it; without one, the
        largest single frame. Frames of callees outside the object (libm,
        compiler helpers) are not included: see `external_callees`.
    stack_by_function : dict of str to int
        Frame size of each function from ``-fstack-usage``; for a
        `dynamic_stack` function only its static part (or GCC's bound).
    dynamic_stack : tuple of str
        Functions whose frame is not static (``dynamic`` or
        ``dynamic,bounded``: variable-length arrays, ``alloca``). Non-empty
        means `stack` may be an underestimate.
    external_callees : tuple of str
        Callees in the call graph defined outside the object (undefined
        symbols), whose own stack `stack` does not count.
    stack_warnings : tuple of str
        One line per problem with the stack figure (dynamic frames,
        recursion, indirect calls). Empty means `stack` is a sound bound for
        the code in this object.
    flash : int
        ``text + data``.
    ram : int
        ``data + bss + stack``.
    """

    text: int
    data: int
    bss: int
    stack: int
    stack_by_function: dict[str, int]
    dynamic_stack: tuple[str, ...] = ()
    external_callees: tuple[str, ...] = ()
    stack_warnings: tuple[str, ...] = ()
    flash: int = field(init=False)
    ram: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "flash", self.text + self.data)
        object.__setattr__(self, "ram", self.data + self.bss + self.stack)


_SU_LINE = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<col>\d+):(?P<name>.+)\t(?P<bytes>\d+)\t(?P<kind>\S+)\s*$")
_CI_EDGE = re.compile(r'edge:\s*\{\s*sourcename:\s*"(?P<src>[^"]+)"\s*targetname:\s*"(?P<dst>[^"]+)"')
#: GCC's -fstack-usage writes ``linearise.constprop``, its -fcallgraph-info ``file.c:linearise.constprop.0``:
#: both become the first (`_function_name`), so that a call chain's frames add up.
_FILE_PREFIX, _CLONE_NUMBER = re.compile(r"^.*:"), re.compile(r"\.\d+$")


def _function_name(raw: str) -> str:
    return _CLONE_NUMBER.sub("", _FILE_PREFIX.sub("", raw))


def _parse_stack_usage(text: str) -> tuple[dict[str, int], list[str]]:
    """Parse a GCC ``.su`` file into (bytes per function, non-static functions)."""
    frames: dict[str, int] = {}
    dynamic: list[str] = []
    for line in text.splitlines():
        m = _SU_LINE.match(line)
        if m is None:
            continue
        name = _function_name(m["name"])
        frames[name] = max(frames.get(name, 0), int(m["bytes"]))
        if m["kind"] != "static" and name not in dynamic:
            dynamic.append(name)
    return frames, dynamic


def _parse_callgraph_info(text: str) -> dict[str, list[str]]:
    """Parse the edges of a GCC ``-fcallgraph-info`` (``.ci``, VCG) file."""
    graph: dict[str, list[str]] = {}
    for m in _CI_EDGE.finditer(text):
        callees = graph.setdefault(_function_name(m["src"]), [])
        if _function_name(m["dst"]) not in callees:
            callees.append(_function_name(m["dst"]))
    return graph


def _worst_stack(
    frames: dict[str, int],
    graph: dict[str, list[str]] | None,
    undefined: set[str],
) -> tuple[int, list[str], list[str]]:
    """Worst call-chain stack; returns (bytes, external callees, warnings)."""
    if graph is None:
        return max(frames.values(), default=0), [], []

    def own(name: str) -> int | None:
        if name in frames:
            return frames[name]
        # GCC clones (leaf.constprop.0, f.isra.0, f.part.0) carry the base name.
        clones = [v for k, v in frames.items() if k.startswith(name + ".")]
        return max(clones) if clones else None

    external: list[str] = []
    warnings: list[str] = []
    memo: dict[str, int] = {}

    def worst(name: str, path: list[str]) -> int:
        if name in memo:
            return memo[name]
        if name in path:
            warnings.append(f"recursion {' -> '.join(path[path.index(name):] + [name])}: counted once")
            return 0
        frame = own(name)
        if frame is None:
            if name == "__indirect_call":
                warnings.append(f"indirect call in {path[-1] if path else '?'}: callee stack not counted")
            elif name in undefined and name not in external:
                external.append(name)
            frame = 0  # external, or a static function inlined into its callers
        below = max((worst(c, path + [name]) for c in graph.get(name, ())), default=0)
        memo[name] = frame + below
        return memo[name]

    nodes = list(dict.fromkeys([*frames, *graph]))
    total = max((worst(n, []) for n in nodes), default=0)
    return total, sorted(external), warnings


def compile_cortex_m4(
    source: Path,
    output_object: Path,
    *,
    extra_flags: tuple[str, ...] = (),
    opt: str = "-O2",
    call_graph: dict[str, list[str]] | str | None = None,
) -> tuple[CompileResult, M4Size | None]:
    """Compile one C file for a Cortex-M4F and measure flash, RAM and stack.

    Command: ``arm-none-eabi-gcc`` `M4_CFLAGS` `M4_WARNING_FLAGS` ``opt``
    ``-ffunction-sections -fdata-sections -fstack-usage`` ``extra_flags``
    ``-c``. The compiler runs in a temporary folder, so its ``.su`` (and
    ``.ci``) files never land next to ``source``; only ``output_object`` is
    written.

    Parameters
    ----------
    source : pathlib.Path
        The C file.
    output_object : pathlib.Path
        Where the object file is written (its folder is created).
    extra_flags : tuple of str, optional
        Appended to the compile flags (``-I``, ``-D``, ``-Werror`` ...).
    opt : str, optional
        Optimisation flag, default ``"-O2"``.
    call_graph : dict of str to list of str, or "auto", or None, optional
        Caller -> callees by function name, for the worst call-chain `stack`.
        ``"auto"`` takes it from GCC's ``-fcallgraph-info``. ``None``: the
        largest single frame. Recursion is cut (and reported), GCC clones
        (``f.constprop.0``) count for ``f``, and names absent from the object
        count 0 (inlined static functions; external ones are listed in
        `M4Size.external_callees`).

    Returns
    -------
    result : CompileResult
        ``ok`` is false on a compile error (diagnostics in ``stderr``).
    size : M4Size or None
        None if the compilation failed.

    Raises
    ------
    ToolchainError
        If ``arm-none-eabi-gcc``/``-size``/``-nm`` is missing, or ``size`` fails.
    ValueError
        If ``call_graph`` is a string other than ``"auto"``.
    """
    if isinstance(call_graph, str) and call_graph != "auto":
        raise ValueError(f"call_graph must be a dict, 'auto' or None, got {call_graph!r}")
    gcc = find_tool("arm-none-eabi-gcc")
    size_tool = find_tool("arm-none-eabi-size")
    source = Path(source).resolve()
    output_object = Path(output_object)
    with tempfile.TemporaryDirectory(prefix="shooting-m4-") as tmp:
        tmpdir = Path(tmp)
        obj = tmpdir / (source.stem + ".o")
        cmd = [
            gcc, *M4_CFLAGS, *M4_WARNING_FLAGS, opt,
            "-ffunction-sections", "-fdata-sections", "-fstack-usage",
            *(["-fcallgraph-info=su"] if call_graph == "auto" else []),
            *extra_flags, "-c", str(source), "-o", str(obj),
        ]
        start = time.perf_counter()
        proc = run_tool(cmd, "arm-none-eabi-gcc", timeout=600.0, cwd=tmpdir, step=f"compiling {source.name}")
        ok, stderr = proc.returncode == 0, proc.stderr
        if ok and not obj.exists():
            ok, stderr = False, f"arm-none-eabi-gcc: error: exited 0 but wrote no {obj.name}\n{stderr}"
        result = CompileResult(ok, cmd, stderr, time.perf_counter() - start)
        if not result.ok:
            return result, None

        sized = run_tool([size_tool, "-B", str(obj)], "arm-none-eabi-size", timeout=60.0,
                         step=f"measuring {obj.name}")
        lines = sized.stdout.splitlines()
        try:
            text, data, bss = (int(v) for v in lines[1].split()[:3])
        except (IndexError, ValueError):
            text = data = bss = -1
        if sized.returncode != 0 or text < 0:
            raise ToolchainError(f"arm-none-eabi-size failed measuring {obj.name} (exit {sized.returncode}): "
                                 f"{first_error_line(sized.stderr + sized.stdout)}")

        su_files = sorted(tmpdir.glob("*.su"))
        frames, dynamic = _parse_stack_usage("".join(p.read_text() for p in su_files))
        graph: dict[str, list[str]] | None
        if call_graph == "auto":
            graph = _parse_callgraph_info("".join(p.read_text() for p in sorted(tmpdir.glob("*.ci"))))
        else:
            graph = call_graph  # type: ignore[assignment]
        undefined = set(undefined_symbols(obj)) if graph is not None else set()
        stack, external, warnings = _worst_stack(frames, graph, undefined)
        for name in dynamic:
            warnings.insert(0, f"{name}: dynamic stack frame ({frames[name]} bytes counted)")

        output_object.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(obj, output_object)
    size = M4Size(
        text=text,
        data=data,
        bss=bss,
        stack=stack,
        stack_by_function=frames,
        dynamic_stack=tuple(dynamic),
        external_callees=tuple(external),
        stack_warnings=tuple(warnings),
    )
    return result, size


def _is_arm_elf(path: Path) -> bool:
    """Whether a file is a 32-bit ARM ELF (e_machine == EM_ARM)."""
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return False
    return int.from_bytes(head[18:20], "little" if head[5] == 1 else "big") == 40


def undefined_symbols(object_file: Path, *, nm: str | None = None) -> list[str]:
    """Symbols an object file uses but does not define (``nm -u``).

    Parameters
    ----------
    object_file : pathlib.Path
        Object file, archive or executable.
    nm : str, optional
        The ``nm`` to use; by default ``arm-none-eabi-nm`` for ARM ELF files
        (read from the ELF header) and ``nm`` otherwise.

    Returns
    -------
    list of str
        Sorted symbol names, e.g. ``["__aeabi_dmul", "sinf"]``.

    Raises
    ------
    ToolchainError
        If the ``nm`` tool is missing or fails.
    """
    object_file = Path(object_file)
    if nm is None:
        nm = "arm-none-eabi-nm" if _is_arm_elf(object_file) else "nm"
    tool = find_tool(nm)
    proc = run_tool([tool, "-u", str(object_file)], nm, timeout=60.0, step=f"listing the symbols of {object_file.name}")
    if proc.returncode != 0:
        raise ToolchainError(f"{nm} failed listing the symbols of {object_file.name}: "
                             f"{first_error_line(proc.stderr)}")
    names = {line.split()[-1] for line in proc.stdout.splitlines() if line.strip() and not line.endswith(":")}
    return sorted(names)


def symbol_sizes(object_file: Path) -> dict[str, int]:
    """Bytes of every sized symbol an object defines (``nm -S``); `ToolchainError` if ``nm`` fails."""
    object_file = Path(object_file)
    nm = "arm-none-eabi-nm" if _is_arm_elf(object_file) else "nm"
    proc = run_tool([find_tool(nm), "-S", "--defined-only", str(object_file)], nm, timeout=60.0,
                    step=f"listing the symbols of {object_file.name}")
    if proc.returncode != 0:
        raise ToolchainError(f"{nm} failed listing the symbols of {object_file.name}: "
                             f"{first_error_line(proc.stderr)}")
    sizes = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4:
            sizes[parts[3]] = int(parts[1], 16)
    return sizes


#: Double-precision functions of <math.h> (their float versions end in ``f``).
_DOUBLE_LIBM = frozenset(
    "acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp2 expm1 "
    "fabs fdim floor fma fmax fmin fmod frexp hypot ilogb ldexp lgamma llrint llround log log10 "
    "log1p log2 logb lrint lround modf nan nearbyint nextafter pow remainder remquo rint round "
    "scalbln scalbn sin sinh sqrt tan tanh tgamma trunc".split()
)
_SOFT_DOUBLE = re.compile(r"^__aeabi_(d\w+|\w+2d)$|^__(add|sub|mul|div|neg|extendsf|truncdf|fix\w*|float\w*)df\w*$")


def double_precision_symbols(symbols: list[str]) -> list[str]:
    """The symbols that mean double-precision arithmetic on a single-precision FPU.

    Parameters
    ----------
    symbols : list of str
        Symbol names, e.g. from `undefined_symbols`.

    Returns
    -------
    list of str
        Software double routines of the ARM EABI (``__aeabi_dadd``,
        ``__aeabi_f2d``, ``__aeabi_i2d`` ...) or libgcc (``__muldf3`` ...)
        and double libm functions (``sin``, ``sqrt`` ...), in input order.
    """
    return [s for s in symbols if s in _DOUBLE_LIBM or _SOFT_DOUBLE.match(s)]
