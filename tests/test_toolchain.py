"""shooting.codegen.toolchain: host and Cortex-M4 builds, footprint, QEMU runs.

A missing tool skips its tests locally but fails them when the environment
variable CI is set (CI installs gcc, gcc-arm-none-eabi,
libnewlib-arm-none-eabi and qemu-system-arm with apt-get).
"""

from __future__ import annotations

import math
import os
import struct
import subprocess
from pathlib import Path

import pytest

from shooting.codegen import qemu_mps2, toolchain
from shooting.codegen.qemu_mps2 import FAULT_EXIT_CODE, run_on_cortex_m4
from shooting.codegen.toolchain import (
    ToolchainError,
    compile_cortex_m4,
    compile_host,
    double_precision_symbols,
    find_tool,
    undefined_symbols,
)


def _under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _require(available: bool, what: str) -> None:
    if available:
        return
    if _under_ci():
        pytest.fail(f"{what} is missing, and CI must have it (apt-get install it in the workflow)")
    pytest.skip(f"{what} not installed")


@pytest.fixture
def host() -> None:
    _require(toolchain.have_host_compiler(), "gcc")


@pytest.fixture
def m4() -> None:
    _require(qemu_mps2.have_cortex_m4_toolchain(), "arm-none-eabi-gcc with newlib")


@pytest.fixture
def qemu(m4: None) -> None:
    _require(qemu_mps2.have_qemu(), "qemu-system-arm (mps2-an386)")


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- pure Python


def test_missing_tool_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: None)
    with pytest.raises(ToolchainError) as err:
        find_tool("arm-none-eabi-gcc")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("arm-none-eabi-gcc not found")
    assert "apt-get install gcc-arm-none-eabi libnewlib-arm-none-eabi" in message
    with pytest.raises(ToolchainError, match="apt-get install qemu-system-arm"):
        find_tool("qemu-system-arm")


def test_stack_usage_parsing_and_call_chains() -> None:
    su = (
        "/src/gen.c:12:5:outer\t48\tstatic\n"
        "/src/gen.c:30:13:inner.constprop.0\t24\tstatic\n"
        "/src/gen.c:40:6:vla\t16\tdynamic\n"
        "/src/gen.c:50:6:alloca_bounded\t64\tdynamic,bounded\n"
    )
    frames, dynamic = toolchain._parse_stack_usage(su)
    assert frames == {"outer": 48, "inner.constprop": 24, "vla": 16, "alloca_bounded": 64}
    assert dynamic == ["vla", "alloca_bounded"]

    # No call graph: the largest single frame.
    assert toolchain._worst_stack(frames, None, set())[0] == 64
    # A clone counts for its base name; an external callee counts 0 and is listed.
    stack, external, warnings = toolchain._worst_stack(frames, {"outer": ["inner", "sinf"]}, {"sinf"})
    assert (stack, external, warnings) == (72, ["sinf"], [])
    # A cycle terminates and is reported.
    stack, _, warnings = toolchain._worst_stack({"a": 8, "b": 16}, {"a": ["b"], "b": ["a"]}, set())
    assert stack == 24
    assert warnings and "recursion" in warnings[0]


def test_call_chains_join_the_names_gcc_writes_in_its_two_reports() -> None:
    """-fstack-usage writes a static clone as ``step.constprop``, -fcallgraph-info as ``gen.c:step.constprop.0``:
    the chain feedback -> linearise -> step must add all three frames (it once counted the largest alone)."""
    su = ("/src/gen.c:12:12:step.constprop\t2024\tstatic\n"
          "/src/gen.c:90:12:linearise.constprop\t1104\tstatic\n"
          "/src/gen.c:140:5:feedback\t48\tstatic\n")
    ci = ('node: { title: "gen.c:step.constprop.0" label: "step.constprop" }\n'
          'edge: { sourcename: "gen.c:linearise.constprop.0" targetname: "gen.c:step.constprop.0" label: "x" }\n'
          'edge: { sourcename: "feedback" targetname: "gen.c:linearise.constprop.0" label: "y" }\n'
          'edge: { sourcename: "gen.c:linearise.constprop.0" targetname: "memcpy" }\n')
    frames, _ = toolchain._parse_stack_usage(su)
    graph = toolchain._parse_callgraph_info(ci)
    stack, external, warnings = toolchain._worst_stack(frames, graph, {"memcpy"})
    assert (stack, external, warnings) == (48 + 1104 + 2024, ["memcpy"], [])


def test_double_precision_symbols() -> None:
    symbols = ["sinf", "cosf", "__aeabi_fmul", "__aeabi_dmul", "__aeabi_f2d", "__aeabi_i2d", "sin", "memcpy"]
    assert double_precision_symbols(symbols) == ["__aeabi_dmul", "__aeabi_f2d", "__aeabi_i2d", "sin"]


# --------------------------------------------------------------------------- host


def test_host_compile_and_run(host: None, tmp_path: Path) -> None:
    src = write(
        tmp_path,
        "hello.c",
        "#include <math.h>\n#include <stdio.h>\n"
        "int main(void) { volatile double x = 0.5; printf(\"%.17g\\n\", sin(x)); return 0; }\n",
    )
    result = compile_host([src], tmp_path / "bin" / "hello")
    assert result.ok, result.stderr
    assert result.command[1 : 1 + len(toolchain.HOST_CFLAGS)] == list(toolchain.HOST_CFLAGS)
    assert result.seconds > 0
    out = subprocess.run([str(tmp_path / "bin" / "hello")], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "%.17g" % math.sin(0.5)


def test_host_compile_error_is_returned(host: None, tmp_path: Path) -> None:
    broken = write(tmp_path, "broken.c", "int f(void) { return undeclared_name; }\n")
    result = compile_host([broken], tmp_path / "broken.o", link=False)
    assert not result.ok
    assert "undeclared_name" in result.stderr
    # -Werror: a warning is an error too.
    unused = write(tmp_path, "unused.c", "int f(int a) { int b; return 0; }\n")
    result = compile_host([unused], tmp_path / "unused.o", link=False)
    assert not result.ok and "-Werror" in result.stderr


def test_host_object_undefined_symbols(host: None, tmp_path: Path) -> None:
    src = write(tmp_path, "uses_cos.c", "#include <math.h>\ndouble f(double x) { return cos(x); }\n")
    result = compile_host([src], tmp_path / "uses_cos.o", link=False)
    assert result.ok, result.stderr
    assert "cos" in undefined_symbols(tmp_path / "uses_cos.o")


# --------------------------------------------------------------------------- Cortex-M4 objects

FLOAT_SOURCE = """\
#include <math.h>
float gain = 2.5f;
float history[8];
float step(float x) {
    volatile float scratch[4];
    for (int i = 0; i < 4; ++i) scratch[i] = x * (float)i;
    history[0] = scratch[3];
    return gain * sinf(scratch[1]) + cosf(x);
}
"""


def test_cortex_m4_size(m4: None, tmp_path: Path) -> None:
    src = write(tmp_path, "step.c", FLOAT_SOURCE)
    result, size = compile_cortex_m4(src, tmp_path / "out" / "step.o")
    assert result.ok, result.stderr
    assert result.warnings == []
    assert size is not None
    assert size.text > 0 and size.data > 0 and size.bss > 0 and size.stack > 0
    assert size.flash == size.text + size.data
    assert size.ram == size.data + size.bss + size.stack
    assert size.stack == size.stack_by_function["step"]
    assert size.dynamic_stack == () and size.stack_warnings == ()
    assert (tmp_path / "out" / "step.o").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "step.c"]  # no .su next to the source
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["step.o"]


def test_cortex_m4_float_only_object_has_no_double(m4: None, tmp_path: Path) -> None:
    src = write(tmp_path, "step.c", FLOAT_SOURCE)
    compile_cortex_m4(src, tmp_path / "step.o")
    symbols = undefined_symbols(tmp_path / "step.o")
    assert "sinf" in symbols and "cosf" in symbols
    assert not [s for s in symbols if s.startswith("__aeabi_d")]
    assert double_precision_symbols(symbols) == []

    # The check can fail: a double literal and double libm show up.
    dbl = write(tmp_path, "dbl.c", "#include <math.h>\nfloat g(float x) { return (float)(sin(x) * 0.1); }\n")
    result, _ = compile_cortex_m4(dbl, tmp_path / "dbl.o")
    assert result.ok, result.stderr
    symbols = undefined_symbols(tmp_path / "dbl.o")
    assert [s for s in symbols if s.startswith("__aeabi_d")] or "sin" in symbols
    assert double_precision_symbols(symbols)


def test_cortex_m4_double_promotion_warning(m4: None, tmp_path: Path) -> None:
    promoted = write(tmp_path, "promoted.c", "float f(float x) { return x * 0.1; }\n")
    result, _ = compile_cortex_m4(promoted, tmp_path / "promoted.o")
    assert result.ok
    assert "-Wdouble-promotion" in result.stderr and len(result.warnings) == 1
    single = write(tmp_path, "single.c", "float f(float x) { return x * 0.1f; }\n")
    result, _ = compile_cortex_m4(single, tmp_path / "single.o")
    assert result.ok and result.stderr == ""


def test_cortex_m4_compile_error(m4: None, tmp_path: Path) -> None:
    broken = write(tmp_path, "broken.c", "float f(float x) { return x +; }\n")
    result, size = compile_cortex_m4(broken, tmp_path / "broken.o")
    assert not result.ok and size is None
    assert "error" in result.stderr
    assert not (tmp_path / "broken.o").exists()


def test_cortex_m4_stack_with_call_graph(m4: None, tmp_path: Path) -> None:
    src = write(
        tmp_path,
        "chain.c",
        "#include <math.h>\n"
        "__attribute__((noinline)) float inner(float x) {\n"
        "    volatile float buf[16];\n"
        "    for (int i = 0; i < 16; ++i) buf[i] = sinf(x * (float)i);\n"
        "    return buf[5];\n"
        "}\n"
        "float outer(float x) {\n"
        "    volatile float big[32];\n"
        "    for (int i = 0; i < 32; ++i) big[i] = x;\n"
        "    return inner(big[7]) + big[3];\n"
        "}\n",
    )
    _, flat = compile_cortex_m4(src, tmp_path / "chain.o")
    _, chained = compile_cortex_m4(src, tmp_path / "chain.o", call_graph={"outer": ["inner"], "inner": ["sinf"]})
    _, auto = compile_cortex_m4(src, tmp_path / "chain.o", call_graph="auto")
    assert flat is not None and chained is not None and auto is not None
    frames = flat.stack_by_function
    assert frames["inner"] >= 64 and frames["outer"] >= 128
    assert flat.stack == max(frames.values())
    assert chained.stack == frames["outer"] + frames["inner"]
    assert chained.external_callees == ("sinf",)
    assert auto.stack == chained.stack
    assert chained.ram == chained.data + chained.bss + chained.stack


def test_cortex_m4_dynamic_stack_is_reported(m4: None, tmp_path: Path) -> None:
    src = write(tmp_path, "vla.c",
                "float f(int n) { float a[n]; for (int i = 0; i < n; ++i) a[i] = (float)i; return a[n / 2]; }\n")
    result, size = compile_cortex_m4(src, tmp_path / "vla.o")
    assert result.ok and size is not None
    assert size.dynamic_stack == ("f",)
    assert any("dynamic" in w for w in size.stack_warnings)


# --------------------------------------------------------------------------- QEMU


def test_qemu_prints_doubles_and_floats_and_returns_status(qemu: None, tmp_path: Path) -> None:
    # volatile inputs: the values come from newlib's sin/sinf on the M4, not from GCC's constant folding.
    src = write(
        tmp_path,
        "main.c",
        "#include <math.h>\n#include <stdio.h>\n"
        "volatile double xd = 0.5;\nvolatile float xf = 0.5f;\n"
        "int main(void) {\n"
        "    printf(\"double %.17g\\n\", sin(xd));\n"
        "    printf(\"float %.9g\\n\", (double)sinf(xf));\n"
        "    return 3;\n"
        "}\n",
    )
    result = run_on_cortex_m4([src], timeout=30.0)
    expected_double = "%.17g" % math.sin(0.5)
    expected_float = "%.9g" % struct.unpack("f", struct.pack("f", math.sin(0.5)))[0]
    assert result.stdout.splitlines() == [f"double {expected_double}", f"float {expected_float}"]
    assert result.exit_code == 3 and not result.faulted
    assert result.elf is None


def test_qemu_multiple_sources_include_dirs_and_workdir(qemu: None, tmp_path: Path) -> None:
    inc = tmp_path / "include"
    inc.mkdir()
    write(inc, "lib.h", "float scale(float x);\n")
    lib = write(tmp_path, "lib.c", "#include \"lib.h\"\nfloat scale(float x) { return 2.0f * x; }\n")
    main = write(
        tmp_path,
        "main.c",
        "#include <stdio.h>\n#include \"lib.h\"\n"
        "volatile float v = 1.25f;\n"
        "int main(void) { printf(\"%g\\n\", (double)scale(v)); fprintf(stderr, \"note\\n\"); return 0; }\n",
    )
    result = run_on_cortex_m4([main, lib], include_dirs=(inc,), workdir=tmp_path / "build", timeout=30.0)
    assert result.stdout == "2.5\n"
    assert result.stderr == "note\n"
    assert result.exit_code == 0
    assert result.elf == tmp_path / "build" / "app.elf" and result.elf.is_file()


@pytest.mark.parametrize(
    "body",
    [
        "volatile int zero = 0; return 7 / zero;",  # CCR.DIV_0_TRP is set by the startup
        "return *(volatile int *)0x30000000u;",  # unmapped on the AN386
    ],
    ids=["divide-by-zero", "bad-address"],
)
def test_qemu_fault_exits_nonzero(qemu: None, tmp_path: Path, body: str) -> None:
    src = write(tmp_path, "crash.c",
                "#include <stdio.h>\nint main(void) {\n    puts(\"start\");\n    " + body + "\n}\n")
    result = run_on_cortex_m4([src], timeout=10.0)
    assert result.stdout == "start\n"
    assert result.exit_code == FAULT_EXIT_CODE and result.faulted


def test_qemu_timeout_kills_the_emulator(qemu: None, tmp_path: Path) -> None:
    src = write(tmp_path, "spin.c", "int main(void) { for (;;) { } }\n")
    with pytest.raises(ToolchainError, match="timed out"):
        run_on_cortex_m4([src], timeout=0.5)


def test_qemu_build_failure_raises(qemu: None, tmp_path: Path) -> None:
    src = write(tmp_path, "bad.c", "int main(void) { return missing(); }\n")
    with pytest.raises(ToolchainError, match="arm-none-eabi-gcc failed"):
        run_on_cortex_m4([src], timeout=10.0)
