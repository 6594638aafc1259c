"""QEMU's MPS2 AN386 board (Cortex-M4): startup code, linker script, build and run.

Emulated board (QEMU 7.2 ``mps2-an386``, checked with ``info mtree``)::

    0x00000000  4 MiB  ZBT SSRAM1 ("FLASH" here): vector table, code, rodata,
                       initial values of .data
    0x20000000  4 MiB  ZBT SSRAM2/3 ("RAM"): .data, .bss, heap (upwards from
                       the end of .bss), main stack (downwards from 0x20400000)

QEMU loads the ELF's segments at their load addresses and, as on silicon,
takes the initial SP and PC from the vector table at address 0. The reset
handler (`MPS2_AN386_STARTUP`) enables the FPU (CPACR), makes integer
division by zero trap (CCR.DIV_0_TRP), copies .data, zeroes .bss, opens the
semihosting stdio of newlib's ``librdimon`` and calls ``exit(main())``.
``exit`` flushes stdio and reports the status through the semihosting call
SYS_EXIT_EXTENDED (newlib 3.3 detects QEMU's support for it), so the status
of ``main`` becomes QEMU's exit code. Every fault and unexpected exception
ends the emulation with `FAULT_EXIT_CODE`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from shooting.codegen.toolchain import (
    ARM_PACKAGES,
    M4_CFLAGS,
    ToolchainError,
    find_tool,
    first_error_line,
    run_tool,
    tool_timeout,
)

__all__ = ["FAULT_EXIT_CODE", "ICOUNT_ARGS", "INSTRUCTIONS_PER_SYSTICK", "MPS2_AN386_LINKER_SCRIPT",
           "MPS2_AN386_STARTUP", "QEMU_M4_ARGS", "SYSTICK_C", "RunResult", "build_m4_elf", "have_cortex_m4_toolchain",
           "have_qemu", "run_on_cortex_m4"]

#: QEMU exit code of a program that took a fault (HardFault, or any other
#: exception the test program does not handle) on the emulated Cortex-M4.
FAULT_EXIT_CODE = 250

#: qemu-system-arm arguments before ``-kernel app.elf``: the MPS2 AN386 board,
#: no display, no monitor, UART output discarded, semihosting console on stdout.
QEMU_M4_ARGS = (
    "-M", "mps2-an386",
    "-cpu", "cortex-m4",
    "-nographic",
    "-monitor", "none",
    "-serial", "null",
    "-semihosting-config", "enable=on,target=native",
)


#: QEMU options that make the virtual clock count instructions: one instruction
#: per virtual nanosecond (``-icount shift=0``), independent of the host's speed.
ICOUNT_ARGS = ("-icount", "shift=0,align=off,sleep=off")

#: Instructions per SysTick count under `ICOUNT_ARGS`: QEMU clocks the MPS2's
#: SysTick at 25 MHz, i.e. every 40 virtual nanoseconds. Checked by the tests on
#: a loop of a known number of instructions (10,000 x (100 nops + 2)).
INSTRUCTIONS_PER_SYSTICK = 40

#: C helpers to read SysTick (24 bits, counting down) on the emulated board:
#: ``systick_start()`` once, then ``systick_now()``; the instructions between two
#: readings a, b are ``((a - b) & 0xFFFFFF) * INSTRUCTIONS_PER_SYSTICK`` under `ICOUNT_ARGS`.
SYSTICK_C = """\
#define SHOOTING_SYST_CSR (*(volatile unsigned int*)0xE000E010)
#define SHOOTING_SYST_RVR (*(volatile unsigned int*)0xE000E014)
#define SHOOTING_SYST_CVR (*(volatile unsigned int*)0xE000E018)
static void systick_start(void) { SHOOTING_SYST_RVR = 0x00FFFFFFu; SHOOTING_SYST_CVR = 0u; SHOOTING_SYST_CSR = 5u; }
static unsigned int systick_now(void) { return SHOOTING_SYST_CVR; }
"""

#: Vector table and reset/fault handlers for the MPS2 AN386 (GNU as, Thumb-2).
#: Written in assembly so that nothing runs before the FPU is enabled.
MPS2_AN386_STARTUP = f"""\
/* Startup for QEMU mps2-an386 (Cortex-M4F), written by shooting.codegen.qemu_mps2. */
    .syntax unified
    .cpu cortex-m4
    .fpu fpv4-sp-d16
    .thumb

    .section .isr_vector, "a", %progbits
    .align 2
    .globl __isr_vector
__isr_vector:
    .word __stack_top           /* initial main stack pointer */
    .word Reset_Handler
    .rept 14                    /* NMI, HardFault, MemManage, BusFault, UsageFault, */
    .word Fault_Handler         /* reserved x4, SVCall, DebugMon, reserved, PendSV, */
    .endr                       /* SysTick: none is expected, all end the run */

    .text
    .align 2
    .thumb_func
    .globl Reset_Handler
    .type Reset_Handler, %function
Reset_Handler:
    /* Full access to CP10/CP11 (the FPU) before any floating-point instruction. */
    ldr r0, =0xE000ED88         /* CPACR */
    ldr r1, [r0]
    orr r1, r1, #(0xF << 20)
    str r1, [r0]
    dsb
    isb
    /* Trap integer division by zero (UsageFault, escalated to HardFault). */
    ldr r0, =0xE000ED14         /* CCR */
    ldr r1, [r0]
    orr r1, r1, #(1 << 4)       /* DIV_0_TRP */
    str r1, [r0]
    /* Copy .data from its load address, zero .bss. */
    ldr r0, =__data_load__
    ldr r1, =__data_start__
    ldr r2, =__data_end__
1:  cmp r1, r2
    bhs 2f
    ldr r3, [r0], #4
    str r3, [r1], #4
    b 1b
2:  ldr r1, =__bss_start__
    ldr r2, =__bss_end__
    movs r3, #0
3:  cmp r1, r2
    bhs 4f
    str r3, [r1], #4
    b 3b
4:  bl initialise_monitor_handles   /* newlib librdimon: semihosted stdin/stdout/stderr */
    bl __libc_init_array
    bl main
    bl exit                         /* flushes stdio; SYS_EXIT_EXTENDED with main's status */
    b .
    .size Reset_Handler, . - Reset_Handler

    /* No crti/crtn (linked with -nostartfiles): empty _init/_fini for newlib. */
    .thumb_func
    .weak _init
    .type _init, %function
_init:
    bx lr
    .thumb_func
    .weak _fini
    .type _fini, %function
_fini:
    bx lr

    /* Any fault: semihosting SYS_EXIT_EXTENDED (0x20), reason
       ADP_Stopped_ApplicationExit (0x20026), status {FAULT_EXIT_CODE}. */
    .thumb_func
    .globl Fault_Handler
    .type Fault_Handler, %function
Fault_Handler:
    movs r0, #0x20
    adr r1, fault_exit_block
    bkpt 0xab
    b .
    .size Fault_Handler, . - Fault_Handler
    .align 2
fault_exit_block:
    .word 0x20026
    .word {FAULT_EXIT_CODE}
    .pool
"""

#: GNU ld script for the MPS2 AN386 as QEMU 7.2 maps it (see the module docstring).
MPS2_AN386_LINKER_SCRIPT = """\
/* Linker script for QEMU mps2-an386 (Cortex-M4F), written by shooting.codegen.qemu_mps2. */
MEMORY
{
  FLASH (rx)  : ORIGIN = 0x00000000, LENGTH = 4M   /* ZBT SSRAM1 */
  RAM   (rwx) : ORIGIN = 0x20000000, LENGTH = 4M   /* ZBT SSRAM2/3 */
}
ENTRY(Reset_Handler)
__stack_top = ORIGIN(RAM) + LENGTH(RAM);

SECTIONS
{
  .text :
  {
    KEEP(*(.isr_vector))
    *(.text .text.*)
    *(.rodata .rodata.*)
    . = ALIGN(4);
  } > FLASH
  .preinit_array :
  {
    PROVIDE_HIDDEN(__preinit_array_start = .);
    KEEP(*(.preinit_array))
    PROVIDE_HIDDEN(__preinit_array_end = .);
  } > FLASH
  .init_array :
  {
    PROVIDE_HIDDEN(__init_array_start = .);
    KEEP(*(SORT(.init_array.*)))
    KEEP(*(.init_array))
    PROVIDE_HIDDEN(__init_array_end = .);
  } > FLASH
  .fini_array :
  {
    PROVIDE_HIDDEN(__fini_array_start = .);
    KEEP(*(SORT(.fini_array.*)))
    KEEP(*(.fini_array))
    PROVIDE_HIDDEN(__fini_array_end = .);
  } > FLASH
  .ARM.extab : { *(.ARM.extab* .gnu.linkonce.armextab.*) } > FLASH
  .ARM.exidx :
  {
    __exidx_start = .;
    *(.ARM.exidx* .gnu.linkonce.armexidx.*)
    __exidx_end = .;
    . = ALIGN(8);
  } > FLASH

  .data : ALIGN(8)
  {
    __data_start__ = .;
    *(.data .data.*)
    . = ALIGN(4);
    __data_end__ = .;
  } > RAM AT > FLASH
  __data_load__ = LOADADDR(.data);

  .bss (NOLOAD) : ALIGN(8)
  {
    __bss_start__ = .;
    *(.bss .bss.*)
    *(COMMON)
    . = ALIGN(4);
    __bss_end__ = .;
  } > RAM

  /* newlib's _sbrk grows the heap from `end` up to the stack pointer. */
  . = ALIGN(8);
  end = .;
  __end__ = .;
}
"""


@dataclass(frozen=True)
class RunResult:
    """Outcome of a program run on the emulated Cortex-M4.

    Attributes
    ----------
    stdout : str
        What the program wrote to stdout.
    exit_code : int
        The status of ``main`` or ``exit`` modulo 256, `FAULT_EXIT_CODE` after
        a fault, 1 after ``abort()``.
    stderr : str
        What the program wrote to stderr (newlib's semihosting opens it as
        QEMU's stderr), followed by any diagnostics of QEMU itself.
    seconds : float
        Wall-clock time of the QEMU run.
    build_seconds : float
        Wall-clock time of compiling and linking.
    build_log : str
        Compiler and linker diagnostics (warnings).
    elf : pathlib.Path or None
        The linked program, when a ``workdir`` was given (else deleted).
    """

    stdout: str
    exit_code: int
    stderr: str = ""
    seconds: float = 0.0
    build_seconds: float = 0.0
    build_log: str = ""
    elf: Path | None = None

    @property
    def faulted(self) -> bool:
        """Whether the program ended in a fault handler (`FAULT_EXIT_CODE`)."""
        return self.exit_code == FAULT_EXIT_CODE


def build_m4_elf(
    sources: list[Path],
    workdir: Path,
    include_dirs: tuple[Path, ...],
    extra_flags: tuple[str, ...],
    opt: str,
    timeout: float,
) -> tuple[Path, str, float]:
    """Write startup and linker script into ``workdir`` and link ``app.elf``."""
    gcc = find_tool("arm-none-eabi-gcc")
    workdir = workdir.resolve()
    startup = workdir / "startup_mps2_an386.S"
    script = workdir / "mps2_an386.ld"
    elf = workdir / "app.elf"
    startup.write_text(MPS2_AN386_STARTUP)
    script.write_text(MPS2_AN386_LINKER_SCRIPT)
    cmd = [
        gcc, *M4_CFLAGS, "-std=c99", "-Wall", "-Wextra", opt,
        "-ffunction-sections", "-fdata-sections",
        *(f"-I{Path(d).resolve()}" for d in include_dirs),
        *extra_flags,
        "--specs=rdimon.specs", "-nostartfiles", "-T", str(script),
        "-Wl,--gc-sections", f"-Wl,-Map={workdir / 'app.map'}",
        str(startup), *(str(Path(s).resolve()) for s in sources),
        "-lm", "-o", str(elf),
    ]
    start = time.perf_counter()
    proc = run_tool(cmd, "arm-none-eabi-gcc", timeout=timeout, cwd=workdir, step="linking the Cortex-M4 program")
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        if "rdimon.specs" in proc.stderr:
            raise ToolchainError(
                f"arm-none-eabi-gcc cannot find newlib (rdimon.specs): apt-get install {ARM_PACKAGES}"
            )
        raise ToolchainError(f"arm-none-eabi-gcc failed building the Cortex-M4 program (exit {proc.returncode}): "
                             f"{first_error_line(proc.stderr)}")
    return elf, proc.stderr, seconds


def run_on_cortex_m4(
    sources: list[Path],
    *,
    include_dirs: tuple[Path, ...] = (),
    extra_flags: tuple[str, ...] = (),
    timeout: float = 120.0,
    workdir: Path | None = None,
    opt: str = "-O2",
    qemu_args: tuple[str, ...] = (),
) -> RunResult:
    """Build a C program for the MPS2 AN386 and run it in QEMU with semihosting.

    The sources hold an ordinary ``int main(void)`` that may use ``printf``
    (full newlib: ``%g``/``%.17g`` of doubles work) and ``<math.h>``. They are
    linked with `MPS2_AN386_STARTUP`, `MPS2_AN386_LINKER_SCRIPT`, newlib's
    semihosting ``librdimon`` and ``libm``, then run as
    ``qemu-system-arm`` `QEMU_M4_ARGS` ``-kernel app.elf``.

    Parameters
    ----------
    sources : list of pathlib.Path
        C (or assembly) files of the program.
    include_dirs : tuple of pathlib.Path, optional
        ``-I`` folders.
    extra_flags : tuple of str, optional
        Added to the compile/link command (``-D...``, ``-Werror`` ...).
    timeout : float, optional
        Seconds for the emulation (and, separately, for the build); QEMU is
        killed when it runs out.
    workdir : pathlib.Path, optional
        Folder for the startup file, linker script, ``app.elf`` and
        ``app.map`` (kept); by default a temporary folder that is deleted.
    opt : str, optional
        Optimisation flag, default ``"-O2"``.
    qemu_args : tuple of str, optional
        More QEMU options, e.g. `ICOUNT_ARGS` to count instructions.

    Returns
    -------
    RunResult
        The program's output and exit code; a nonzero status is not an error
        here: the caller judges it.

    Raises
    ------
    ToolchainError
        If a tool is missing, the build fails, QEMU cannot start, or the run
        exceeds ``timeout``.
    """
    qemu = find_tool("qemu-system-arm")
    find_tool("arm-none-eabi-gcc")
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="shooting-qemu-") as tmp:
            result = _build_and_run(sources, Path(tmp), include_dirs, extra_flags, opt, timeout, qemu, qemu_args)
        return dataclasses.replace(result, elf=None)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    return _build_and_run(sources, workdir, include_dirs, extra_flags, opt, timeout, qemu, qemu_args)


def _build_and_run(
    sources: list[Path],
    workdir: Path,
    include_dirs: tuple[Path, ...],
    extra_flags: tuple[str, ...],
    opt: str,
    timeout: float,
    qemu: str,
    qemu_args: tuple[str, ...] = (),
) -> RunResult:
    elf, build_log, build_seconds = build_m4_elf(sources, workdir, include_dirs, extra_flags, opt, timeout)
    cmd = [qemu, *QEMU_M4_ARGS, *qemu_args, "-kernel", str(elf)]
    timeout = tool_timeout(timeout)
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        raise ToolchainError(f"qemu-system-arm could not be started: {exc.strerror or exc}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as exc:  # a timeout, or Ctrl-C: QEMU must not outlive us
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        if not isinstance(exc, subprocess.TimeoutExpired):
            raise
        tail = " ".join(out.decode("utf-8", "replace").split()[-12:])
        raise ToolchainError(f"qemu-system-arm timed out after {timeout:g} s running {elf.name} (killed); "
                             f"last output: {tail!r}") from None
    seconds = time.perf_counter() - start
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace")
    if proc.returncode != 0 and not stdout and stderr.startswith("qemu-system-arm:"):
        raise ToolchainError(f"qemu-system-arm failed to start {elf.name}: {first_error_line(stderr)}")
    return RunResult(
        stdout=stdout,
        exit_code=proc.returncode,
        stderr=stderr,
        seconds=seconds,
        build_seconds=build_seconds,
        build_log=build_log,
        elf=elf,
    )


@functools.lru_cache(maxsize=None)
def have_cortex_m4_toolchain() -> bool:
    """Whether the Cortex-M4 toolchain works: compiler, binutils and newlib.

    Checked once per process by linking a trivial ``printf`` program with
    `MPS2_AN386_STARTUP`, `MPS2_AN386_LINKER_SCRIPT` and newlib's semihosting
    (``rdimon``) and ``libm``.

    Returns
    -------
    bool
    """
    if not all(shutil.which(t) for t in ("arm-none-eabi-gcc", "arm-none-eabi-size", "arm-none-eabi-nm")):
        return False
    with tempfile.TemporaryDirectory(prefix="shooting-m4-probe-") as tmp:
        source = Path(tmp) / "probe.c"
        source.write_text(
            "#include <math.h>\n#include <stdio.h>\n"
            "int main(void) { printf(\"%g\\n\", (double)sinf(0.5f)); return 0; }\n"
        )
        try:
            build_m4_elf([source], Path(tmp), (), (), "-O2", timeout=120.0)
        except ToolchainError:
            return False
    return True


@functools.lru_cache(maxsize=None)
def have_qemu() -> bool:
    """Whether ``qemu-system-arm`` is on ``PATH`` and has the ``mps2-an386`` machine.

    Returns
    -------
    bool
    """
    qemu = shutil.which("qemu-system-arm")
    if qemu is None:
        return False
    try:
        proc = subprocess.run([qemu, "-machine", "help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and re.search(r"^mps2-an386\s", proc.stdout, re.MULTILINE) is not None
