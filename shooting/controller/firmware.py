"""Firmware for an STM32F405 around an exported controller: startup, vector table, linker script, clock, USART.

``export_controller(..., firmware="stm32f405")`` (``shooting-codegen controller --firmware stm32f405``)
writes ``firmware/`` beside the controller's files:

* ``startup_stm32f405.S``: the vector table (initial stack pointer, reset and fault handlers) and the reset
  handler: the FPU enabled before any floating-point instruction, .data copied from flash, .bss zeroed,
  ``system_init`` (the clock), ``main``, then ``shooting_exit`` with its status.
* ``system_stm32f405.c``: the clock at 168 MHz from an 8 MHz crystal (HSE / 8 x 336 / 2: the PLL's VCO at
  336 MHz; AHB 168 MHz, APB1 42 MHz, APB2 84 MHz; flash 5 wait states with the ART accelerator's caches and
  prefetch), each ready flag polled a bounded number of times so that a board whose RCC does not answer (QEMU
  does not model it) runs on from the 16 MHz internal oscillator instead of hanging; USART1 on PA9/PA10 (AF7)
  at 115200 baud; the DWT cycle counter; semihosting's exit.
* ``stm32f405.ld``: 1 MB of flash at 0x08000000, 128 KB of SRAM at 0x20000000 (SRAM1 and SRAM2), the main
  stack at its top.
* ``main.c``: the closed loop of the export's check: the controller, and the check's plant (the model
  integrated in double by `shooting.controller.board.PLANT_METHOD`) from the check's x0; per sample one line
  over USART1, ``k u_1 ... u_nu status qp_iterations cycles`` (cycles: the DWT counter around feedback, shift
  and prepare), then a summary line (samples that failed apart from those stopped by the budget, whose input
  is finite and within its bounds), then the exit. A check with a time-varying reference follows it here too.
  With an estimator (`shooting.controller.firmware_estimator`) the controller sees the EKF's estimate from the
  plant's sensors and each line ends with that estimate.
* ``Makefile``: ``make`` builds ``firmware.elf`` with arm-none-eabi-gcc and newlib-nano.

QEMU 7.2 emulates the board as ``netduinoplus2`` (its USART1 is the first ``-serial``); it models neither
the RCC nor the DWT, so there the clock line says the PLL did not lock and the cycle column is 0. On a real
board, flash the ``.elf`` with st-flash, OpenOCD or STM32CubeProgrammer; docs/controller.md ("On real
hardware") says more.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from shooting.codegen.c_files import generate_c
from shooting.codegen.emitter import literal
from shooting.codegen.qemu_mps2 import FAULT_EXIT_CODE, MPS2_AN386_LINKER_SCRIPT
from shooting.codegen.toolchain import M4_CFLAGS
from shooting.controller.board import PLANT_METHOD, PLANT_STEPS, reference_tables
from shooting.controller.c_source import ControllerSpec
from shooting.controller.firmware_estimator import FirmwareEstimator
from shooting.integrate.integrator import build_integrator
from shooting.mpc.controllers import ReferenceFunction

__all__ = ["BOARDS", "FIRMWARE_DIR", "NETDUINOPLUS2_ARGS", "firmware_files"]

FloatArray = npt.NDArray[np.float64]

#: The boards `firmware_files` writes for.
BOARDS = ("stm32f405",)

#: The folder of the export that holds the firmware.
FIRMWARE_DIR = "firmware"

#: qemu-system-arm arguments before ``-kernel firmware.elf`` (shared/CONTRACT.md).
NETDUINOPLUS2_ARGS = ("-M", "netduinoplus2", "-nographic", "-monitor", "none", "-serial", "stdio",
                      "-semihosting-config", "enable=on,target=native")

_STARTUP = f"""\
/* Startup for an STM32F405 (Cortex-M4F), written by shooting.controller.firmware. */
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
    .rept 14                    /* NMI, HardFault, MemManage, BusFault, UsageFault, reserved x4, SVCall, */
    .word Fault_Handler         /* DebugMon, reserved, PendSV, SysTick: none is expected, all end the run */
    .endr
    .rept 82                    /* the STM32F405's 82 peripheral interrupts: none is enabled */
    .word Fault_Handler
    .endr

    .text
    .align 2
    .thumb_func
    .globl Reset_Handler
    .type Reset_Handler, %function
Reset_Handler:
    ldr r0, =0xE000ED88         /* CPACR: full access to CP10/CP11 (the FPU) before any FP instruction */
    ldr r1, [r0]
    orr r1, r1, #(0xF << 20)
    str r1, [r0]
    dsb
    isb
    ldr r0, =__data_load__      /* .data from flash */
    ldr r1, =__data_start__
    ldr r2, =__data_end__
1:  cmp r1, r2
    bhs 2f
    ldr r3, [r0], #4
    str r3, [r1], #4
    b 1b
2:  ldr r1, =__bss_start__      /* .bss zeroed */
    ldr r2, =__bss_end__
    movs r3, #0
3:  cmp r1, r2
    bhs 4f
    str r3, [r1], #4
    b 3b
4:  bl system_init
    bl main
    bl shooting_exit            /* with main's status */
    b .
    .size Reset_Handler, . - Reset_Handler

    /* Any fault: semihosting SYS_EXIT_EXTENDED (0x20), ADP_Stopped_ApplicationExit, status {FAULT_EXIT_CODE}
       (under a debugger without semihosting: a breakpoint). */
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

#: The memory of an STM32F405 and the sections of the emulated board's script (the same GNU ld layout: vector
#: table first, .data loaded from flash, .bss, the heap's `end`).
_LINKER = """\
/* Linker script for an STM32F405 (1 MB flash, 128 KB SRAM1 + SRAM2), written by shooting.controller.firmware.
   (The 64 KB of core-coupled memory at 0x10000000 is left free.) */
MEMORY
{
  FLASH (rx)  : ORIGIN = 0x08000000, LENGTH = 1024K
  RAM   (rwx) : ORIGIN = 0x20000000, LENGTH = 128K
}
ENTRY(Reset_Handler)
__stack_top = ORIGIN(RAM) + LENGTH(RAM);

""" + MPS2_AN386_LINKER_SCRIPT[MPS2_AN386_LINKER_SCRIPT.index("SECTIONS"):]

_SYSTEM = """\
/* Clock, USART1, the DWT cycle counter and semihosting's exit for an STM32F405, written by
 * shooting.controller.firmware. Registers from RM0090 (STM32F405/415 reference manual, rev. 19). */
#include <stdint.h>
#include "board.h"

#define REG(addr) (*(volatile uint32_t*)(addr))
#define RCC_CR REG(0x40023800u)
#define RCC_PLLCFGR REG(0x40023804u)
#define RCC_CFGR REG(0x40023808u)
#define RCC_AHB1ENR REG(0x40023830u)
#define RCC_APB2ENR REG(0x40023844u)
#define FLASH_ACR REG(0x40023C00u)
#define GPIOA_MODER REG(0x40020000u)
#define GPIOA_AFRH REG(0x40020024u)
#define USART1_SR REG(0x40011000u)
#define USART1_DR REG(0x40011004u)
#define USART1_BRR REG(0x40011008u)
#define USART1_CR1 REG(0x4001100Cu)
#define DEMCR REG(0xE000EDFCu)
#define DWT_CTRL REG(0xE0001000u)
#define DWT_CYCCNT REG(0xE0001004u)

#ifndef HSE_HZ
#define HSE_HZ 8000000u    /* the crystal (the Crazyflie 2's; a Netduino Plus 2 or a Discovery board: set it) */
#endif
#ifndef SEMIHOSTING
#define SEMIHOSTING 1      /* 1: shooting_exit ends the run through semihosting (QEMU, a debugger) */
#endif
#define READY_POLLS 100000 /* a flag that does not come within this many reads: the board does not answer */

uint32_t shooting_clock_hz = 16000000u;  /* HSI until the PLL runs */
int shooting_pll_locked = 0;

static int wait_for(uint32_t mask) {
  int i;
  for (i = 0; i < READY_POLLS; ++i)
    if (RCC_CR & mask) return 1;
  return 0;
}

/* 168 MHz: PLL from HSE, M = HSE / 1 MHz, N = 336, P = 2 (VCO 336 MHz), Q = 7 (48 MHz for USB); flash
 * latency 5 wait states (RM0090 table 10, 2.7-3.6 V) with prefetch, instruction and data caches. */
static void clock_168mhz(void) {
  uint32_t m = HSE_HZ / 1000000u;
  RCC_CR |= 1u << 16;                                   /* HSEON */
  if (!wait_for(1u << 17)) return;                      /* HSERDY */
  RCC_PLLCFGR = m | (336u << 6) | (0u << 16) | (1u << 22) | (7u << 24);  /* M, N, P = 2, source HSE, Q */
  RCC_CR |= 1u << 24;                                   /* PLLON */
  if (!wait_for(1u << 25)) return;                      /* PLLRDY */
  FLASH_ACR = 5u | (1u << 8) | (1u << 9) | (1u << 10);  /* LATENCY 5, PRFTEN, ICEN, DCEN */
  RCC_CFGR = (0u << 4) | (5u << 10) | (4u << 13);       /* AHB /1, APB1 /4 (42 MHz), APB2 /2 (84 MHz) */
  RCC_CFGR |= 2u;                                       /* SW = PLL */
  {
    int i;
    for (i = 0; i < READY_POLLS && ((RCC_CFGR >> 2) & 3u) != 2u; ++i) continue;
    if (((RCC_CFGR >> 2) & 3u) != 2u) return;
  }
  shooting_clock_hz = 168000000u;
  shooting_pll_locked = 1;
}

/* USART1 on PA9 (TX) and PA10 (RX), alternate function 7, 8N1 at 115200 baud from APB2. */
static void usart1_init(void) {
  uint32_t apb2 = shooting_pll_locked ? shooting_clock_hz / 2 : shooting_clock_hz;
  RCC_AHB1ENR |= 1u;                                    /* GPIOA */
  RCC_APB2ENR |= 1u << 4;                               /* USART1 */
  GPIOA_MODER = (GPIOA_MODER & ~(0xFu << 18)) | (0xAu << 18);
  GPIOA_AFRH = (GPIOA_AFRH & ~(0xFFu << 4)) | (0x77u << 4);
  USART1_BRR = (apb2 + 115200u / 2) / 115200u;          /* 16x oversampling: mantissa and fraction at once */
  USART1_CR1 = (1u << 13) | (1u << 3);                  /* UE, TE */
}

void system_init(void) {
  clock_168mhz();
  usart1_init();
  DEMCR |= 1u << 24;                                    /* TRCENA */
  DWT_CYCCNT = 0;
  DWT_CTRL |= 1u;                                       /* CYCCNTENA */
}

uint32_t shooting_cycles(void) { return DWT_CYCCNT; }

void shooting_putc(char c) {
  int i;
  for (i = 0; i < READY_POLLS && !(USART1_SR & (1u << 7)); ++i) continue;  /* TXE */
  USART1_DR = (uint32_t)(unsigned char)c;
}

void shooting_puts(const char* s) {
  while (*s) shooting_putc(*s++);
}

/* Semihosting SYS_EXIT_EXTENDED (0x20) with ADP_Stopped_ApplicationExit and the status: QEMU (and a debugger
 * with semihosting on) ends the run with it. A board running without a debugger would take the breakpoint as a
 * fault: build with SEMIHOSTING=0 (make SEMIHOSTING=0) and the core sleeps instead. */
void shooting_exit(int status) {
#if SEMIHOSTING
  static volatile uint32_t block[2];
  block[0] = 0x20026u;
  block[1] = (uint32_t)status;
  {
    register uint32_t r0 __asm__("r0") = 0x20u;
    register volatile uint32_t* r1 __asm__("r1") = block;
    __asm__ volatile("bkpt 0xab" : : "r"(r0), "r"(r1) : "memory");
  }
#else
  (void)status;
#endif
  for (;;) __asm__ volatile("wfi");
}
"""

_BOARD_H = """\
/* What system_stm32f405.c gives main.c (written by shooting.controller.firmware). */
#ifndef SHOOTING_BOARD_H
#define SHOOTING_BOARD_H
#include <stdint.h>
extern uint32_t shooting_clock_hz;
extern int shooting_pll_locked;
void system_init(void);
uint32_t shooting_cycles(void);
void shooting_putc(char c);
void shooting_puts(const char* s);
void shooting_exit(int status);
#endif
"""

_MAIN = """\
/* The closed loop of the export's check on an STM32F405: {stem} and the check's plant (double), written by
 * shooting.controller.firmware. One line per sample over USART1: k u_1 ... u_nu status qp_iterations cycles. */
#include <stdio.h>
#include "board.h"
#include "{stem}.h"
#include "shooting_plant.h"
{estimator_includes}
#define STEPS {steps}
static const double x_init[{nx}] = {{{x0}}};
static const double p_plant[{np1}] = {{{p}}};
static double z_plant[{nz1}] = {{{z0}}};  /* a DAE plant's algebraic states: consistent at x0, then warm */
{reference_tables}{estimator_declarations}
static void put_line(const char* text) {{ shooting_puts(text); }}

int main(void) {{
  {stem}_mem* mem = {stem}_default();
  double x[{nx}], xn[{nx}], ud[{nu}];
  {name}_real xr[{nx}], u[{nu}];
  char line[96];
  int k, i, j, st, failed = 0, budget = 0;
  uint32_t start, cycles, worst = 0;
  (void)z_plant;
  (void)j;
  snprintf(line, sizeof line, "clock %lu Hz%s\\n", (unsigned long)shooting_clock_hz,
           shooting_pll_locked ? "" : " (PLL not locked: HSI)");
  put_line(line);
  for (i = 0; i < {nx}; ++i) x[i] = x_init[i];
  if ({stem}_init(mem) || {stem}_prepare(mem)) {{
    put_line("prepare failed\\n");
    return 3;
  }}
  for (k = 0; k < STEPS; ++k) {{
    for (i = 0; i < {nx}; ++i) xr[i] = ({name}_real){feedback_state}[i];
    start = shooting_cycles();
{set_reference}    st = {stem}_feedback(mem, xr, u);
    (void){stem}_shift(mem);
    (void){stem}_prepare(mem);
    cycles = shooting_cycles() - start;
    if (k > 0 && cycles > worst) worst = cycles;
    budget += st == {NAME}_MPC_BUDGET;  /* (a budget's input is finite and within its bounds: not a failure) */
    failed += st != 0 && st != {NAME}_MPC_BUDGET;
    snprintf(line, sizeof line, "%d", k);
    put_line(line);
    for (i = 0; i < {nu}; ++i) {{
      ud[i] = (double)u[i];
      snprintf(line, sizeof line, " %.9g", ud[i]);
      put_line(line);
    }}
    snprintf(line, sizeof line, " %d %d %lu", st, mem->qp_iterations_sample, (unsigned long)cycles);
    put_line(line);
{estimate_columns}    put_line("\\n");
    if (shooting_plant_step(x, ud, p_plant, {dt} * k, {dt}, {plant_z}xn, 0, 0{plant_z_out})) return 4;
{estimate_call}    for (i = 0; i < {nx}; ++i) x[i] = xn[i];
  }}
  snprintf(line, sizeof line, "done %d samples, %d failed, %d stopped by the budget, worst %lu cycles\\n", STEPS,
           failed, budget, (unsigned long)worst);
  put_line(line);
  return 0;
}}
"""

_MAKEFILE = """\
# Firmware for an STM32F405 around {stem}.c (written by shooting.controller.firmware).
#   make                    builds firmware.elf (arm-none-eabi-gcc, newlib-nano)
#   make run                runs it on QEMU's netduinoplus2 (an STM32F405): one line per sample, then it exits
#   make HSE_HZ=25000000    for a board with another crystal
#   make SEMIHOSTING=0      for a board without a debugger attached (the end of the run sleeps, no breakpoint)
CC = arm-none-eabi-gcc
CFLAGS = {cflags} -std=c99 -O2 -Wall -Wextra -ffunction-sections -fdata-sections -I. -I..
HSE_HZ ?= 8000000
SEMIHOSTING ?= 1
LDFLAGS = --specs=nano.specs --specs=nosys.specs -nostartfiles -T stm32f405.ld -Wl,--gc-sections -u _printf_float
SOURCES = startup_stm32f405.S system_stm32f405.c main.c shooting_plant.c ../{stem}.c{estimator_sources}

firmware.elf: $(SOURCES) board.h stm32f405.ld ../{stem}.h shooting_plant.h{estimator_headers}
\t$(CC) $(CFLAGS) -DHSE_HZ=$(HSE_HZ)u -DSEMIHOSTING=$(SEMIHOSTING) $(SOURCES) $(LDFLAGS) -lm -o $@

run: firmware.elf
\tqemu-system-arm {qemu} -kernel firmware.elf

clean:
\trm -f firmware.elf

.PHONY: run clean
"""


def firmware_files(spec: ControllerSpec, stem: str, x0: FloatArray, steps: int, board: str = "stm32f405", *,
                   real: str = "double", reference: ReferenceFunction | None = None,
                   estimator: FirmwareEstimator | None = None) -> dict[str, str]:
    """The firmware's files for the controller export `stem` (``NAME_mpc``), relative to the export's folder.

    Parameters
    ----------
    spec : ControllerSpec
    stem : str
        The controller's C file stem (``NAME_mpc``).
    x0 : ndarray, shape (nx,)
        The closed loop's initial state (the check's).
    steps : int
        Samples of the closed loop.
    board : {"stm32f405"}
    real : {"double", "float"}
        The controller's real type (of the reference's tables).
    reference : callable ``t -> (x_ref, u_ref)``, optional
        The check's time-varying reference, followed sample by sample (`shooting.controller.board.reference_tables`).
    estimator : FirmwareEstimator, optional
        Output feedback (`shooting.controller.firmware_estimator`): the controller sees the EKF's estimate from
        the plant's sensors, each sample's line ends with that estimate.

    Returns
    -------
    dict of str to str
        ``"firmware/NAME" -> text``: the Makefile, startup code, linker script, clock and USART, main.c and the
        plant's C.
    """
    if board not in BOARDS:
        raise ValueError(f"firmware for {board!r} is not written: choose one of {', '.join(BOARDS)}")
    model = spec.plant_model
    name = stem[:-len("_mpc")]
    plant = build_integrator(model, PLANT_METHOD, PLANT_STEPS, "none", name="shooting_plant")
    plant_c = generate_c(plant, "shooting_plant", real="double")
    z_start = model.consistent_z(x0, model.u0, model.p0) if model.nz else np.zeros(0)
    tables, calls = reference_tables(model, spec.dt, spec.horizon, steps, reference, real)
    main = _MAIN.format(
        stem=stem, name=name, NAME=name.upper(), reference_tables=tables.replace("REAL", f"{name}_real"),
        set_reference=calls.replace("STEM", stem), nx=model.nx, nu=model.nu, np1=max(model.np, 1), steps=steps,
        x0=", ".join(repr(float(v)) for v in x0), p=", ".join(repr(float(v)) for v in model.p0) or "0.0",
        nz1=max(model.nz, 1), z0=", ".join(repr(float(v)) for v in z_start) or "0.0",
        dt=literal(spec.dt, "double"), plant_z="z_plant, " if model.nz else "",
        plant_z_out=", z_plant" if model.nz else "", **_estimator_text(estimator, model.nx))
    headers = "" if estimator is None else "".join(f" {f}" for f in sorted(estimator.files) if f.endswith(".h"))
    files = {"Makefile": _MAKEFILE.format(stem=stem, cflags=" ".join(M4_CFLAGS), qemu=" ".join(NETDUINOPLUS2_ARGS),
                                          estimator_sources="" if estimator is None else estimator.sources,
                                          estimator_headers=headers),
             "startup_stm32f405.S": _STARTUP, "stm32f405.ld": _LINKER, "system_stm32f405.c": _SYSTEM,
             "board.h": _BOARD_H, "main.c": main}
    files.update({fname: text for fname, text in plant_c.files.items() if fname.endswith((".c", ".h"))})
    files.update({} if estimator is None else estimator.files)
    return {f"{FIRMWARE_DIR}/{fname}": text for fname, text in files.items()}


def _estimator_text(estimator: FirmwareEstimator | None, nx: int) -> dict[str, str]:
    """main.c's placeholders of output feedback (the state itself without an estimator)."""
    if estimator is None:
        return {"estimator_includes": "", "estimator_declarations": "", "feedback_state": "x",
                "estimate_columns": "", "estimate_call": ""}
    columns = (f"    for (i = 0; i < {nx}; ++i) {{\n"
               f"      snprintf(line, sizeof line, \" %.9g\", (double)ekf_x[i]);\n"
               f"      put_line(line);\n    }}\n")
    call = ("    if (estimate(k, xn, ud, p_plant)) {\n      put_line(\"estimator failed\\n\");\n      return 6;\n"
            "    }\n")
    return {"estimator_includes": estimator.includes, "estimator_declarations": estimator.declarations,
            "feedback_state": "ekf_x", "estimate_columns": columns, "estimate_call": call}
