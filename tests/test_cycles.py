"""shooting.codegen.cycles and cycle_model: the Cortex-M4 cycle model and QEMU's execution trace costed by it.

Independent truths: cycle counts written by hand from the Cortex-M4 TRM's tables (ARM DDI 0439B table 3-1 for
integer instructions, 7-1 for the FPU; P = 2), one comment per instruction of the assembly below; flash misses
derived by hand from the code's layout and the ART's rules (RM0090 3.5.2); instruction counts from SysTick under
``-icount`` on a real exported controller.

A missing tool skips the tests that need it locally but fails them when the environment variable CI is set.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import shooting
from shooting.codegen import cycles, qemu_mps2, toolchain
from shooting.codegen.cycle_model import (
    CycleModel,
    Instruction,
    UnknownInstructionError,
    cost_table,
    disassemble,
    instruction_cycles,
    split_mnemonic,
)
from support import CI


@pytest.fixture(scope="module")
def tools() -> None:
    if toolchain.have_host_compiler() and qemu_mps2.have_cortex_m4_toolchain() and qemu_mps2.have_qemu():
        return
    if CI:
        pytest.fail("gcc, arm-none-eabi-gcc with newlib or qemu-system-arm is missing, and CI must have them")
    pytest.skip("needs gcc, arm-none-eabi-gcc with newlib and qemu-system-arm")


NO_WAIT = CycleModel(flash_wait_states=0)

HEADER = """\
    .syntax unified
    .cpu cortex-m4
    .fpu fpv4-sp-d16
    .thumb
    .text
"""

# Each function on its own 16-byte flash line, 46 never-executed bytes after it: no function shares a line, or
# sits on the line after another's.
FUNCTION = """
    .p2align 4
    .global {name}
    .thumb_func
    .type {name}, %function
{name}:
{body}
    .space 46
"""

# Hand-costed by the TRM's tables, P = 2. Offsets from hand_costed (16-byte aligned, line H0 = +0..+15, H1 ...).
HAND_COSTED = """\
    push {r4, r5, lr}       @ +0  (before the marker)
    mov r4, r0              @ +2  (before the marker)
    bl shooting_mark_work   @ +4  (before the marker); the marker's bx lr: 1 + P = 3, returns to +8 (line H0)
    movs r1, #3             @ +8  1  data processing
    adds r2, r1, #4         @ +10 1  data processing
    muls r2, r1, r2         @ +12 1  MUL
    mla r3, r1, r2, r1      @ +14 2  MLA
    str r1, [r4]            @ +18 2  STR
    str r2, [r4, #4]        @ +20 2  STR: nothing is pipelined after a store
    ldr r5, [r4]            @ +22 2  LDR after a store
    ldr r1, [r4, #4]        @ +24 1  LDR pipelined after LDR (r5 is not its address)
    str r3, [r4, #8]        @ +26 1  STR pipelined after LDR (r1 is not its address)
    adds r5, r4, #4         @ +28 1  data processing
    ldr r2, [r5, #4]        @ +30 3  LDR 2, + 1: its address r5 comes from the instruction before
    vmov s0, r1             @ +32 1  VMOV core to S register
    vcvt.f32.s32 s0, s0     @ +36 1  VCVT
    vmov.f32 s1, #2.0       @ +40 1  VMOV immediate
    vdiv.f32 s2, s0, s1     @ +44 14 VDIV
    vsqrt.f32 s3, s2        @ +48 14 VSQRT
    vmla.f32 s3, s0, s1     @ +52 3  VMLA
    vstr s3, [r4, #12]      @ +56 2  VSTR
    cmp r1, #21             @ +60 1  CMP (r1 = 21)
    beq 1f                  @ +62 3  B<cond> taken: 1 + P; to +66, on the next line (prefetched): no miss
    nop                     @ +64    skipped
1:  cmp r1, #0              @ +66 1  CMP
    beq 2f                  @ +68 1  B<cond> not taken
    bl count                @ +70 3  BL: 1 + P; miss 2 (count's line C0, never fetched)
    bl leaf                 @ +74 3  BL (count returns here, +74 on line H4: miss 4); miss 5 (leaf's line)
2:  bl shooting_mark_end    @ +78 3  BL (leaf returns here, line H4, cached since miss 4: hit)
    pop {r4, r5, pc}        @ +82    (after the marker)"""

COUNT = """\
    movs r2, #5             @ C0+0  1
    .rept 7
    movs r3, #0             @ C0+2 .. C0+14: 7 x 1
    .endr
3:  .rept 7
    adds r3, #1             @ C1+0 .. C1+12: 5 x 7 x 1 (the loop's head on line C1)
    .endr
    subs r2, #1             @ C1+14 5 x 1
    bne 3b                  @ C2+0  4 x 3 taken + 1 not taken; first taken: miss 3 (C1 never jumped to), then hits
    bx lr                   @ C2+2  3  BX: 1 + P (to +74, line H4: miss 4)"""

HAND_MAIN = """\
#include <stdio.h>
void hand_costed(unsigned *scratch);
static unsigned scratch[8];
int main(void) { hand_costed(scratch); printf("%u\\n", scratch[2]); return 0; }
"""

# 3 (the marker's BX) + 5 (+8..+14) + 12 (+18..+30) + 36 (+32..+56) + 6 (+60..+68) + 3 (BL count)
# + 64 (count: 1 + 7 + 5 x 8 + 4 x 3 + 1 + 3) + 6 (BL leaf, its BX) + 3 (BL shooting_mark_end)
HAND_CYCLES = 3 + 5 + 12 + 36 + 6 + 3 + 64 + 6 + 3
# 1 + 4 + 7 + 7 + 4 + 1 + (8 + 5 x 9 + 1) + 2 + 1
HAND_INSTRUCTIONS = 1 + 4 + 7 + 7 + 4 + 1 + 54 + 2 + 1
# Non-sequential fetches of lines that are neither the one in use, the next one, nor cached: the marker's line,
# count's C0, its loop head C1 (first pass only), the return to H4, leaf's line. (The return from the marker to
# H0 hits: main's call of hand_costed put H0 in the cache. mark_end's own miss is the next segment's.)
HAND_MISSES = 5


def _assemble(folder: Path, *functions: tuple[str, str]) -> Path:
    path = folder / "routine.S"
    path.write_text(HEADER + "".join(FUNCTION.format(name=n, body=b) for n, b in functions) + "    .ltorg\n")
    return path


def _hand_program(folder: Path) -> Path:
    source = _assemble(folder, ("shooting_mark_work", "    bx lr"), ("shooting_mark_end", "    bx lr"),
                       ("leaf", "    bx lr"), ("count", COUNT), ("hand_costed", HAND_COSTED))
    main = folder / "main.c"
    main.write_text(HAND_MAIN)
    elf, _, _ = qemu_mps2.build_m4_elf([source, main], folder, (), (), "-O2", 120.0)
    return elf


# --------------------------------------------------------------------------- pure Python


@pytest.mark.parametrize("mnemonic, expected", [
    ("ldr.w", ("ldr", False)), ("bne.n", ("b", True)), ("bls", ("b", True)), ("bl", ("bl", False)),
    ("bleq", ("bl", True)), ("blx", ("blx", False)), ("mls", ("mls", False)), ("vmls.f32", ("vmls", False)),
    ("teq", ("teq", False)), ("teqne", ("teq", True)), ("lsls", ("lsl", False)), ("movs", ("mov", False)),
    ("bics", ("bic", False)), ("adcs", ("adc", False)), ("orrsne", ("orr", True)), ("strhs", ("str", True)),
    ("vcmpe.f32", ("vcmpe", False)), ("vmovgt.f32", ("vmov", True)), ("ittet", ("it", False)),
    ("popne", ("pop", True)), ("vmrs", ("vmrs", False)), ("clrex", (None, False)),
])
def test_mnemonics_map_to_the_table(mnemonic: str, expected: tuple[str | None, bool]) -> None:
    assert split_mnemonic(mnemonic) == expected


def _insn(mnemonic: str, operands: str, address: int = 0x100) -> Instruction:
    return Instruction(address, 2, mnemonic, operands, "f")


@pytest.mark.parametrize("text, prev, expected", [
    # (instruction, the one before it, (cycles falling through, extra when taken)), from TRM tables 3-1 and 7-1
    (("pop", "{r4, r5, pc}"), None, (1 + 3 + 2, 0)),        # POP with PC: 1 + N + P
    (("popne", "{r4, pc}"), None, (1, 2 + 2)),              # conditional, not taken: 1; taken: 1 + N + P
    (("push", "{r3, r4, r5, r6, r7, lr}"), None, (7, 0)),  # PUSH: 1 + N
    (("vpush", "{d8-d9}"), None, (5, 0)),                   # VPUSH of 2 doubles: 1 + 2 x 2
    (("vmov", "r6, r7, d7"), None, (2, 0)),                 # two core registers
    (("vmov", "s15, r6"), None, (1, 0)),
    (("ldr.w", "pc, [sp], #4"), None, (2 + 2, 0)),          # load to PC: 2 + P
    (("cbz", "r3, 1f0 <f+0x10>"), None, (1, 2)),            # CBZ: 1, taken 1 + P
    (("tbh", "[pc, r3, lsl #1]"), None, (2 + 2, 0)),        # TBH: 2 + P
    (("udiv", "r0, r0, r1"), None, (12, 0)),                # the worst case, 12
    (("ldrd", "r2, r3, [r0]"), ("ldr", "r1, [r2]"), (3, 0)),  # never pipelined
    (("vldr", "s15, [r3, #4]"), ("vldr", "s14, [r3]"), (1, 0)),  # pipelined after a load
    (("vldr", "s15, [r3, #4]"), ("add", "r3, r2, #8"), (3, 0)),  # address from the instruction before: + 1
    (("ldr", "r0, [r1]"), ("ldr.w", "r2, [r3], #4"), (2, 0)),    # no pipelining after a write-back load
])
def test_instruction_timings(text: tuple[str, str], prev: tuple[str, str] | None, expected: tuple[int, int]) -> None:
    before = _insn(*prev, address=0xFE) if prev else None
    assert instruction_cycles(_insn(*text), before, CycleModel()) == expected


def test_unknown_mnemonic_is_an_error_naming_it() -> None:
    with pytest.raises(UnknownInstructionError, match=r"no timing for clrex at 0x00000100 \(in f\)"):
        instruction_cycles(_insn("clrex", ""), None, CycleModel())


def test_model_assumptions_are_recorded_and_checked() -> None:
    record = json.loads(json.dumps(CycleModel().as_dict()))
    assert record["core"] == "Cortex-M4F (ARMv7E-M, FPv4-SP)" and record["clock_hz"] == 168e6
    assert record["flash_wait_states"] == 5 and record["branch_refill"] == 2 and record["divide_cycles"] == 12
    assert record["timings"]["fpu_divide"] == "14" and record["timings"]["branch"] == "1 + 2 taken, 1 not taken"
    assert any("5 wait states" in rule for rule in record["rules"])
    for bad in (dict(branch_refill=4), dict(flash_wait_states=-1), dict(icache_line_bytes=12),
                dict(divide_cycles=1), dict(mla_cycles=3), dict(it_cycles=2), dict(clock_hz=0.0)):
        with pytest.raises(ValueError, match="CycleModel"):
            CycleModel(**bad)  # type: ignore[arg-type]


def test_marker_functions_are_c() -> None:
    text = cycles.marker_functions("feedback", "end")
    assert "__attribute__((noinline, noipa)) void shooting_mark_feedback(void)" in text
    assert "void shooting_mark_end(void);" in text
    with pytest.raises(ValueError):
        cycles.marker_functions("not a name")


# --------------------------------------------------------------------------- traced runs


@pytest.mark.usefixtures("tools")
def test_hand_costed_sequence(tmp_path: Path) -> None:
    elf = _hand_program(tmp_path)
    run = cycles.trace_segments(elf, model=NO_WAIT, timeout=120.0)
    assert run.exit_code == 0 and run.stdout.split() == ["66"]  # MLA: 3 * 21 + 3
    assert [s.marker for s in run.segments] == ["work", "end"]
    work = run.segments[0]
    assert (work.instructions, work.cycles) == (HAND_INSTRUCTIONS, HAND_CYCLES)
    assert work.seconds == pytest.approx(HAND_CYCLES / 168e6)
    flash = cycles.trace_segments(elf, timeout=120.0, buffered_log=False)  # 5 wait states, QEMU's log unbuffered
    assert flash.stats["buffered_log"] == 0
    work = flash.segments[0]
    assert (work.instructions, work.fetch_misses, work.cycles) == (HAND_INSTRUCTIONS, HAND_MISSES,
                                                                   HAND_CYCLES + 5 * HAND_MISSES)
    by = flash.breakdown("instruction", ["work"])
    assert by["vdiv"] == (1, 14) and by["vsqrt"] == (1, 14) and by[cycles.WAIT_STATES] == (0, 25)
    assert flash.breakdown("function", ["work"])["count"] == (54, 64 + 10)


SPLITS = """\
    push {r4, lr}
    mov r4, r0
    bl shooting_mark_straight
    .rept 1100
    adds r1, r1, #1         @ 1100 x 1: blocks cut by QEMU at 512 instructions and at page boundaries
    .endr
    bl shooting_mark_io     @ 3
    adds r1, r1, #1         @ 1
    ldr r2, =0xE000E018     @ 2  (SysTick's current value)
    ldr r2, [r2]            @ 2  a device read: QEMU re-executes it alone (cpu_io_recompile); not pipelined
    adds r1, r1, #1         @ 1
    bl shooting_mark_loop   @ 3
    mov r3, r4              @ 1
1:  subs r3, #1             @ N x 1
    bne 1b                  @ (N - 1) x 3 + 1; QEMU's first block runs from mov r3, r4 to here, then loops at 1
    bl shooting_mark_end    @ 3
    pop {r4, pc}"""

LOOPS = 300_000


@pytest.mark.usefixtures("tools")
def test_block_extents_survive_every_split_qemu_makes(tmp_path: Path) -> None:
    source = _assemble(tmp_path, *((f"shooting_mark_{m}", "    bx lr") for m in ("straight", "io", "loop", "end")),
                       ("splits", SPLITS))
    main = tmp_path / "main.c"
    main.write_text(f"void splits(int n);\nint main(void) {{ splits({LOOPS}); return 0; }}\n")
    run = cycles.trace_on_cortex_m4([source, main], model=NO_WAIT, timeout=120.0)
    got = {s.marker: (s.instructions, s.cycles) for s in run.segments}
    assert got["straight"] == (1 + 1100 + 1, 3 + 1100 + 3)
    assert got["io"] == (1 + 5, 3 + 1 + 2 + 2 + 1 + 3)
    assert got["loop"] == (1 + 1 + 2 * LOOPS + 1, 3 + 1 + LOOPS + 3 * (LOOPS - 1) + 1 + 3)
    # The run went through each kind of split: device reads, blocks QEMU left before their first instruction
    # (the icount budget, about every 65,000 instructions), retranslations.
    assert run.stats["io_splits"] >= 1 and run.stats["stopped"] >= 1 and run.stats["unexplained_jumps"] == 0


# Markers that read SysTick as their second instruction: a segment and its SysTick span are the same instructions.
SYSTICK_MARKERS = """\
    .syntax unified
    .cpu cortex-m4
    .thumb
    .bss
    .align 2
    .global shooting_ticks
shooting_ticks:
    .space 8
    .text
    .macro marker name, slot
    .p2align 2
    .global \\name
    .thumb_func
    .type \\name, %function
\\name:
    ldr r0, =0xE000E018
    ldr r0, [r0]
    ldr r1, =shooting_ticks
    str r0, [r1, #\\slot]
    bx lr
    .ltorg
    .endm
    marker shooting_mark_feedback, 0
    marker shooting_mark_prepare, 0
    marker shooting_mark_end, 4
"""

CONTROLLER_MAIN = """\
#include <stdio.h>
#include "cartpole_mpc.h"
{systick}
extern volatile unsigned shooting_ticks[2];
void shooting_mark_feedback(void);
void shooting_mark_prepare(void);
void shooting_mark_end(void);
int main(void) {{
  cartpole_mpc_mem* mem = cartpole_mpc_default();
  cartpole_real x[4] = {{0.1f, 3.0f, 0.0f, 0.0f}}, u[1];
  int k;
  systick_start();
  (void)systick_now;
  if (cartpole_mpc_init(mem) || cartpole_mpc_prepare(mem)) return 3;
  for (k = 0; k < 3; ++k) {{
    shooting_mark_feedback();
    (void)cartpole_mpc_feedback(mem, x, u);
    shooting_mark_end();
    printf("feedback %u\\n", (shooting_ticks[0] - shooting_ticks[1]) & 0xFFFFFFu);
    shooting_mark_prepare();
    (void)cartpole_mpc_shift(mem);
    (void)cartpole_mpc_prepare(mem);
    shooting_mark_end();
    printf("prepare %u\\n", (shooting_ticks[0] - shooting_ticks[1]) & 0xFFFFFFu);
    x[1] += 0.05f;
  }}
  return 0;
}}
"""


@pytest.mark.usefixtures("tools")
def test_exported_controller_systick_agrees_and_every_instruction_is_costed(tmp_path: Path) -> None:
    from shooting.controller.c_source import controller_spec, generate_controller

    model = shooting.load_model("cartpole")
    ocp = shooting.MultipleShootingOCP.from_problem(model, shooting.default_scenario(model).problem)
    export = generate_controller(controller_spec(ocp), "cartpole", real="float")
    for name, text in export.files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "markers.S").write_text(SYSTICK_MARKERS)
    (tmp_path / "main.c").write_text(CONTROLLER_MAIN.format(systick=qemu_mps2.SYSTICK_C))
    sources = [tmp_path / "cartpole_mpc.c", tmp_path / "markers.S", tmp_path / "main.c"]
    run = cycles.trace_on_cortex_m4(sources, include_dirs=(tmp_path,), workdir=tmp_path, timeout=300.0)
    assert run.exit_code == 0, run.stdout + run.stderr
    # Every instruction GCC and newlib put in the program has a timing, not only those that ran.
    assert not cost_table(disassemble(tmp_path / "app.elf"), CycleModel()).unknown
    ticks = [(line.split()[0], int(line.split()[1])) for line in run.stdout.splitlines()]
    spans = [s for s in run.segments if s.marker in ("feedback", "prepare")]
    assert [t[0] for t in ticks] == [s.marker for s in spans] and len(spans) == 6
    for (_, count), segment in zip(ticks, spans, strict=True):
        # SysTick under -icount: one count every 40 instructions, read at the same place of both markers.
        assert abs(segment.instructions - count * qemu_mps2.INSTRUCTIONS_PER_SYSTICK) < 40
    functions = run.breakdown("function", ["feedback", "prepare"])
    # The model's sine and cosine are the export's own single-precision ones (templates/sincos.c.in), both from
    # one reduction of an angle; newlib's (which go through a double reduction) are not linked in.
    # (they are inlined into the model's evaluation, so they are in the C, not in the breakdown)
    assert "_sincosf(" in export.files["cartpole_mpc.c"]
    assert not {"sinf", "cosf", "sin", "cos", "__kernel_sinf", "__kernel_cosf"} & set(functions)
    steady = spans[-2:]
    ratio = sum(s.cycles for s in steady) / sum(s.instructions for s in steady)
    assert 1.2 < ratio < 2.0  # cycles per instruction of an RTI sample: float arithmetic, loads, divisions


@pytest.mark.usefixtures("tools")
def test_an_executed_instruction_without_a_timing_stops_the_run(tmp_path: Path) -> None:
    source = _assemble(tmp_path, ("shooting_mark_x", "    bx lr"),
                       ("odd", "    push {lr}\n    bl shooting_mark_x\n    clrex\n    pop {pc}"))
    main = tmp_path / "main.c"
    main.write_text("void odd(void);\nint main(void) { odd(); return 0; }\n")
    with pytest.raises(UnknownInstructionError, match=r"no timing for clrex at 0x[0-9a-f]{8} \(in odd\)"):
        cycles.trace_on_cortex_m4([source, main], timeout=120.0)


@pytest.mark.usefixtures("tools")
def test_a_run_past_its_timeout_is_killed(tmp_path: Path) -> None:
    main = tmp_path / "main.c"
    main.write_text("int main(void) { volatile int spin = 1; while (spin) {} return 0; }\n")
    start = time.monotonic()
    with pytest.raises(toolchain.ToolchainError, match="timed out after 1.5 s"):
        cycles.trace_on_cortex_m4([main], timeout=1.5, workdir=tmp_path)
    assert time.monotonic() - start < 30.0
    if shutil.which("pgrep"):  # no QEMU left running the program
        assert subprocess.run(["pgrep", "-f", str(tmp_path / "app.elf")], capture_output=True).stdout == b""
