"""Cortex-M4 cycle model: the assumptions (`CycleModel`) and the cycles of every executed Thumb-2 instruction.

A Cortex-M4F (ARMv7E-M, FPv4-SP) clocked at 168 MHz, running code from the
flash of an STM32F4 through its ART accelerator. An instruction's cycles are
those of the Cortex-M4 Technical Reference Manual (ARM DDI 0439B, table 3-1
"Cortex-M4 instruction set summary" and table 7-1 "FPU instruction set"),
with P = `CycleModel.branch_refill` cycles of pipeline refill after a taken
branch (the TRM: P = 1..3) and N the registers of a register list:

================  ==============================================================  =======================
class             mnemonics (any condition, ``s``, ``.w``/``.n``, data type)       cycles
================  ==============================================================  =======================
alu               data processing, moves, shifts, compares, extends, bit fields,   1 (1 + P writing PC)
                  saturation, parallel add/subtract, SEL, CLZ, REV, ADR
mul               MUL, SMULL, UMULL, SMLAL, UMLAL, UMAAL, the DSP multiplies        1
mla               MLA, MLS                                                         `mla_cycles` (2)
div               SDIV, UDIV                                                       2..12: `divide_cycles`
load / store      LDR, LDRB, LDRH, LDRSB, LDRSH, LDREX* / STR, STRB, STRH, STREX*   2 (pipelined: 1),
                                                                                   LDR to PC: 2 + P
load/store pair   LDRD, STRD                                                       3 (1 + N, N = 2)
multiple          LDM, STM, PUSH, POP                                              1 + N (+ P loading PC)
branch            B, BL, BLX, BX (B<cond> not taken: 1)                            1 + P
compare/branch    CBZ, CBNZ                                                        1, taken 1 + P
table branch      TBB, TBH                                                         2 + P
IT                IT, ITT, ITE, ...                                                `it_cycles` (0 folded, 1)
hint, system      NOP, PLD, DMB, DSB, MRS, MSR, CPSID, CPSIE, BKPT / ISB            1 / 1 + P
fpu               VADD, VSUB, VMUL, VNMUL, VABS, VNEG, VCVT*, VCMP, VCMPE, VMOV,    1
                  VMRS, VMSR
fpu two-register  VMOV between two core registers and two S or one D register      2
fpu mac           VMLA, VMLS, VNMLA, VNMLS, VFMA, VFMS, VFNMA, VFNMS                3
fpu divide, sqrt  VDIV, VSQRT                                                      14
fpu load, store   VLDR, VSTR of an S register (of a D register)                    2 (pipelined: 1) (3)
fpu multiple      VLDM, VSTM, VPUSH, VPOP                                          1 + N (N S registers)
================  ==============================================================  =======================

Rules between neighbouring instructions, from the TRM's section 3.3.2
"Load/store timings" (the same text as the Cortex-M3 TRM's, reproduced for
the Cortex-M4F by TI, SWCU185 section "Load/Store Timings"):

- pipelining: a single load or store (a row "load / store" or "fpu load,
  store" of an S register) right after a single load (not to PC, no base
  write-back) costs one cycle less, unless the earlier load's destination is
  one of its address registers ("LDR [any] are pipelined when possible ...
  one cycle is removed from the cost of the next instruction"). Nothing is
  pipelined after a store, LDRD/STRD or LDM/STM ("nothing can be pipelined
  after the store"; the TRM's "STR Rx,[Ry,#imm] is always one cycle" is not
  used: the table's 2 is kept);
- address interlock: a load or store whose base or offset register the
  instruction right before it computed (an integer data-processing or
  multiply instruction) costs one cycle more ("stalls the pipeline for an
  additional cycle ... there is no forwarding path");
- a conditional instruction in an IT block is costed as executed (the trace
  does not show the flags), except one that writes PC: taken when control
  did not fall through, else 1 cycle;
- VDIV and VSQRT cost their 14 cycles although the TRM lets later integer
  instructions overlap them (an upper bound); LDR Rx,[PC,#imm]'s possible
  extra cycle ("contention with the fetch unit") is not counted.

Memory: every data access hits in zero wait states (SRAM, and the ART's
data cache for constants in flash). Instruction fetches go through the ART
(RM0090 section 3.5.2): `CycleModel.flash_wait_states` wait states (5 at
168 MHz and 2.7-3.6 V, RM0090 section 3.5.1), a 128-bit flash line,
sequential fetches hidden by the prefetch buffer (optimistic for long runs
of 32-bit instructions: a line holds four and takes 1 + 5 cycles to read),
an instruction cache of 64 lines of 128 bits (assumed fully associative,
least recently used line replaced). A
non-sequential fetch (a taken branch, a call, a return) costs the wait
states unless its line is the line in use, the next (prefetched) line, or
in the cache; a line enters the cache when such a fetch misses (RM0090:
"each time a miss occurs ... the line read is copied into the instruction
cache memory").
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from shooting import _validate
from shooting.codegen.toolchain import ToolchainError, find_tool, first_error_line, run_tool

__all__ = ["CycleModel", "Instruction", "Program", "UnknownInstructionError", "cost_table", "disassemble",
           "instruction_cycles"]


@dataclass(frozen=True)
class CycleModel:
    """Assumptions of the Cortex-M4 cycle model (see the module docstring for the timings and rules).

    Parameters
    ----------
    core : str
        Name of the core the timings are those of.
    clock_hz : float
        Core clock, Hz (168 MHz: the STM32F4's maximum).
    branch_refill : int
        P, cycles of pipeline refill after a taken branch (the TRM: 1 to 3,
        by the target's alignment and width).
    flash_wait_states : int
        Wait states of a flash line read (RM0090: 5 at 168 MHz, 2.7-3.6 V);
        0 models code in zero-wait-state memory.
    icache_lines, icache_line_bytes : int
        The ART's instruction cache: 64 lines of 16 bytes (128 bits).
    divide_cycles : int
        SDIV/UDIV (the TRM: 2 to 12 by the operands; 12, the worst, by default).
    mla_cycles : int
        MLA/MLS: 2 as ARM DDI 0439B's table is usually quoted (and the
        Cortex-M3's), or 1 as TI's reproduction of the Cortex-M4F table
        (SWCU192 table 3-25) and ARM's "single-cycle 32-bit MAC" have it.
    it_cycles : int
        An IT instruction: 1, or 0 when folded onto the previous instruction.
    """

    core: str = "Cortex-M4F (ARMv7E-M, FPv4-SP)"
    clock_hz: float = 168e6
    branch_refill: int = 2
    flash_wait_states: int = 5
    icache_lines: int = 64
    icache_line_bytes: int = 16
    divide_cycles: int = 12
    mla_cycles: int = 2
    it_cycles: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.core, str) or not self.core.strip():
            raise ValueError(f"CycleModel.core must be a non-empty name, got {self.core!r}")
        _validate.positive_real(self.clock_hz, "CycleModel.clock_hz")
        _validate.integer(self.branch_refill, "CycleModel.branch_refill", minimum=1, maximum=3)
        _validate.integer(self.flash_wait_states, "CycleModel.flash_wait_states", minimum=0, maximum=15)
        _validate.integer(self.icache_lines, "CycleModel.icache_lines", minimum=1, maximum=1 << 16)
        line = _validate.integer(self.icache_line_bytes, "CycleModel.icache_line_bytes", minimum=4, maximum=4096)
        if line & (line - 1):
            raise ValueError(f"CycleModel.icache_line_bytes must be a power of two, got {line}")
        _validate.integer(self.divide_cycles, "CycleModel.divide_cycles", minimum=2, maximum=12)
        _validate.integer(self.mla_cycles, "CycleModel.mla_cycles", minimum=1, maximum=2)
        _validate.integer(self.it_cycles, "CycleModel.it_cycles", minimum=0, maximum=1)

    def as_dict(self) -> dict[str, object]:
        """Every assumption, JSON-ready (for a manifest).

        Returns
        -------
        dict
            The fields, the instruction timings by class and the rules as sentences.
        """
        p, ws = self.branch_refill, self.flash_wait_states
        return {
            "core": self.core, "clock_hz": float(self.clock_hz), "branch_refill": p, "flash_wait_states": ws,
            "icache_lines": self.icache_lines, "icache_line_bytes": self.icache_line_bytes,
            "icache_organisation": "fully associative, least recently used line replaced (assumed)",
            "divide_cycles": self.divide_cycles, "mla_cycles": self.mla_cycles, "it_cycles": self.it_cycles,
            "timings": {name: cycles.format(P=p, div=self.divide_cycles, mla=self.mla_cycles, it=self.it_cycles)
                        for name, cycles in TIMINGS.items()},
            "rules": [rule.format(P=p, ws=ws) for rule in RULES],
            "sources": ["ARM DDI 0439B (Cortex-M4 TRM) tables 3-1 and 7-1, section 3.3.2",
                        "ST RM0090 section 3.5 (STM32F4 flash, ART accelerator)"],
        }


#: Cycles of each class of instruction (TRM tables 3-1 and 7-1), as text with P, div and it.
TIMINGS = {
    "alu": "1 (1 + {P} writing PC)", "mul": "1", "mla": "{mla}", "div": "{div}",
    "load": "2, 1 pipelined; to PC 2 + {P}", "store": "2, 1 pipelined", "load_pair": "3", "store_pair": "3",
    "load_multiple": "1 + N (+ {P} loading PC)", "store_multiple": "1 + N",
    "branch": "1 + {P} taken, 1 not taken", "call": "1 + {P}", "branch_register": "1 + {P}",
    "compare_branch": "1 + {P} taken, 1 not taken", "table_branch": "2 + {P}", "it": "{it}",
    "hint": "1", "barrier": "1", "isb": "1 + {P}", "system": "1",
    "fpu": "1 (VMOV of two core registers: 2)", "fpu_mac": "3", "fpu_divide": "14", "fpu_sqrt": "14",
    "fpu_load": "2, 1 pipelined (D register: 3)", "fpu_store": "2, 1 pipelined (D register: 3)",
    "fpu_multiple": "1 + N (N single registers)",
}

#: The rules beyond the table, as the manifest states them.
RULES = (
    "a single load or store right after a single load (not to PC, no write-back) costs 1 cycle less unless "
    "that load's destination is one of its address registers; nothing is pipelined after a store, LDRD/STRD "
    "or LDM/STM",
    "a load or store whose address register the integer data-processing or multiply instruction right before "
    "it wrote costs 1 cycle more",
    "conditional instructions in IT blocks are costed as executed; one writing PC costs 1 when not taken",
    "VDIV/VSQRT cost 14 cycles, not overlapped with later instructions; no extra cycle for LDR Rx,[PC,#imm]",
    "data accesses have no wait states (SRAM; constants in flash hit the ART's data cache)",
    "sequential instruction fetches are hidden by the ART prefetch buffer",
    "a taken branch, call or return fetching a line that is neither the line in use, the next (prefetched) "
    "line nor in the instruction cache costs {ws} wait states, and the line enters the cache",
)

_MNEMONICS = {
    "alu": "adc add addw adr and asr bfc bfi bic clz cmn cmp eor lsl lsr mov movt movw mvn neg orn orr pkhbt "
           "pkhtb qadd qadd16 qadd8 qasx qdadd qdsub qsax qsub qsub16 qsub8 rbit rev rev16 revsh ror rrx rsb "
           "sadd16 sadd8 sasx sbc sbfx sel shadd16 shadd8 shasx shsax shsub16 shsub8 ssat ssat16 ssax ssub16 "
           "ssub8 sub subw sxtab sxtab16 sxtah sxtb sxtb16 sxth teq tst uadd16 uadd8 uasx ubfx uhadd16 uhadd8 "
           "uhasx uhsax uhsub16 uhsub8 uqadd16 uqadd8 uqasx uqsax uqsub16 uqsub8 usad8 usada8 usat usat16 usax "
           "usub16 usub8 uxtab uxtab16 uxtah uxtb uxtb16 uxth",
    "mul": "mul smlabb smlabt smlad smladx smlal smlalbb smlalbt smlald smlaldx smlaltb smlaltt smlatb smlatt "
           "smlawb smlawt smlsd smlsdx smlsld smlsldx smmla smmlar smmls smmlsr smmul smmulr smuad smuadx smulbb "
           "smulbt smull smultb smultt smulwb smulwt smusd smusdx umaal umlal umull",
    "mla": "mla mls", "div": "sdiv udiv",
    "load": "ldr ldrb ldrbt ldrex ldrexb ldrexh ldrh ldrht ldrsb ldrsbt ldrsh ldrsht ldrt",
    "store": "str strb strbt strex strexb strexh strh strht strt",
    "load_pair": "ldrd", "store_pair": "strd", "load_multiple": "ldm ldmia ldmfd ldmdb ldmea pop",
    "store_multiple": "stm stmia stmea stmdb stmfd push", "branch": "b", "call": "bl blx",
    "branch_register": "bx", "compare_branch": "cbz cbnz", "table_branch": "tbb tbh",
    "it": "it", "hint": "nop pld pli yield", "barrier": "dmb dsb", "isb": "isb", "system": "mrs msr cpsid cpsie bkpt",
    "fpu": "vabs vadd vcmp vcmpe vcvt vcvtb vcvtr vcvtt vmov vmrs vmsr vmul vneg vnmul vsub",
    "fpu_mac": "vfma vfms vfnma vfnms vmla vmls vnmla vnmls", "fpu_divide": "vdiv", "fpu_sqrt": "vsqrt",
    "fpu_load": "vldr", "fpu_store": "vstr", "fpu_multiple": "vldm vldmdb vldmia vpop vpush vstm vstmdb vstmia",
}
_CLASS = {name: kind for kind, names in _MNEMONICS.items() for name in names.split()}
_CONDITIONS = ("eq", "ne", "cs", "hs", "cc", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "al")
_REGISTER = re.compile(r"\b(r1[0-5]|r[0-9]|sb|sl|fp|ip|sp|lr|pc)\b")
_ALIASES = {"sb": "r9", "sl": "r10", "fp": "r11", "ip": "r12", "sp": "r13", "lr": "r14", "pc": "r15"}
_COMPARES = {"cmp", "cmn", "tst", "teq"}
_TRANSFERS = {"branch", "call", "branch_register", "compare_branch", "table_branch"}


class UnknownInstructionError(ValueError):
    """An executed instruction whose mnemonic the cycle model has no timing for (never costed 1 silently)."""

    @classmethod
    def of(cls, insn: Instruction) -> UnknownInstructionError:
        """The error naming `insn`'s mnemonic, address and function, and where the table is."""
        return cls(f"the Cortex-M4 cycle model has no timing for {insn.where()}: add its mnemonic to the table "
                   f"in shooting/codegen/cycle_model.py")


def split_mnemonic(mnemonic: str) -> tuple[str | None, bool]:
    """The table's mnemonic of an objdump mnemonic, and whether it carries a condition code.

    ``"ldr.w"`` -> ``("ldr", False)``, ``"bne.n"`` -> ``("b", True)``,
    ``"orrsne"`` -> ``("orr", True)``, ``"vmla.f32"`` -> ``("vmla", False)``,
    ``"ittet"`` -> ``("it", False)``; ``(None, False)`` when none matches.

    Parameters
    ----------
    mnemonic : str

    Returns
    -------
    tuple of (str or None, bool)
    """
    stem = mnemonic.split(".")[0].lower()
    if re.fullmatch(r"it[te]{0,3}", stem):
        return "it", False
    # UAL: <op>{s}{cond}; an exact name first, since some end like a condition ("mls", "teq", "vcmpe").
    cond = stem[-2:] in _CONDITIONS and len(stem) > 2
    candidates = [(stem, False), (stem[:-2], True) if cond else ("", False),
                  (stem[:-1], False) if stem.endswith("s") else ("", False),
                  (stem[:-3], True) if cond and stem[:-2].endswith("s") else ("", False)]
    for name, conditional in candidates:
        if name in _CLASS:
            return name, conditional
    return None, False


@dataclass(frozen=True)
class Instruction:
    """One instruction of the program, as objdump decodes it, with what the costing needs.

    Attributes
    ----------
    address, size : int
        Byte address and length (2 or 4).
    mnemonic, operands : str
        As ``arm-none-eabi-objdump -d`` prints them.
    function : str
        The symbol it belongs to.
    name : str or None
        Its mnemonic in the timing table (None: unknown, an error if it runs).
    kind : str or None
        Its class in the timing table.
    conditional : bool
        It carries a condition code.
    operand_list : tuple of str
        The operands split at top-level commas.
    address_registers, written, loaded : frozenset of str
        Core registers (``"r0"`` .. ``"r15"``) its memory address is computed
        from; that it writes as an integer data-processing or multiply
        instruction; that it loads (not a written-back base).
    """

    address: int
    size: int
    mnemonic: str
    operands: str
    function: str
    name: str | None = field(init=False)
    kind: str | None = field(init=False)
    conditional: bool = field(init=False)
    operand_list: tuple[str, ...] = field(init=False, repr=False)
    address_registers: frozenset[str] = field(init=False, repr=False)
    written: frozenset[str] = field(init=False, repr=False)
    loaded: frozenset[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        name, conditional = split_mnemonic(self.mnemonic)
        setattr_ = object.__setattr__  # frozen: the derived fields are set once, here
        setattr_(self, "name", name)
        setattr_(self, "kind", None if name is None else _CLASS[name])
        setattr_(self, "conditional", conditional)
        setattr_(self, "operand_list", _split_operands(self.operands))
        setattr_(self, "address_registers", self._address_registers())
        setattr_(self, "written", self._written())
        setattr_(self, "loaded", self._loaded())

    def where(self) -> str:
        """``"vdiv.f32 at 0x00001234 (in foo)"``, for messages."""
        return f"{self.mnemonic} at 0x{self.address:08x} (in {self.function})"

    @property
    def transfers_control(self) -> bool:
        """Whether it can send control elsewhere than the next instruction."""
        return self.kind in _TRANSFERS or "r15" in self.written or "r15" in self.loaded

    def _address_registers(self) -> frozenset[str]:
        """Core registers its memory address is computed from."""
        if self.name in ("push", "pop", "vpush", "vpop"):
            return frozenset({"r13"})
        if self.kind in ("load_multiple", "store_multiple", "fpu_multiple"):
            return _registers(self.operand_list[0].split("{")[0]) if self.operand_list else frozenset()
        inside = re.search(r"\[([^\]]*)\]", self.operands)
        return _registers(inside.group(1)) if inside else frozenset()

    def _written(self) -> frozenset[str]:
        """Core registers an integer data-processing or multiply instruction writes."""
        if self.kind not in ("alu", "mul", "mla", "div") or self.name in _COMPARES:
            return frozenset()
        ops = self.operand_list
        count = 2 if self.name in ("smull", "umull", "smlal", "umlal", "umaal") else 1
        return frozenset().union(*(_registers(op) for op in ops[:count])) if ops else frozenset()

    def _loaded(self) -> frozenset[str]:
        """Core registers a load writes (its destinations, not a written-back base)."""
        if self.kind in ("load", "load_pair"):
            return _registers(self.operands.split("[")[0])
        if self.kind == "load_multiple":
            inside = re.search(r"\{([^}]*)\}", self.operands)
            return _registers(inside.group(1)) if inside else frozenset()
        return frozenset()

    def writes_back(self) -> bool:
        """Whether it updates its base register (``[rN, #i]!``, ``[rN], #i``, ``rN!``)."""
        return "!" in self.operands or bool(re.search(r"\],\s*\S", self.operands))

    def list_words(self) -> int:
        """N of a register list, in words (a D register counts two)."""
        inside = re.search(r"\{([^}]*)\}", self.operands)
        words = 0
        for item in (inside.group(1).split(",") if inside else []):
            ends = re.findall(r"([rsd])(\d+)", item.replace("lr", "r14").replace("pc", "r15").replace("sp", "r13")
                              .replace("ip", "r12").replace("fp", "r11").replace("sl", "r10").replace("sb", "r9"))
            if not ends:
                continue
            count = int(ends[-1][1]) - int(ends[0][1]) + 1
            words += count * (2 if ends[0][0] == "d" else 1)
        return words


def _split_operands(operands: str) -> tuple[str, ...]:
    """Operands split at top-level commas (not inside ``[]`` or ``{}``)."""
    if "[" not in operands and "{" not in operands:
        return tuple(part.strip() for part in operands.split(",") if part.strip())
    parts, depth, start = [], 0, 0
    for i, char in enumerate(operands):
        depth += char in "[{"
        depth -= char in "]}"
        if char == "," and depth == 0:
            parts.append(operands[start:i].strip())
            start = i + 1
    tail = operands[start:].strip()
    return tuple(parts + [tail] if tail else parts)


def _registers(text: str) -> frozenset[str]:
    return frozenset(_ALIASES.get(r, r) for r in _REGISTER.findall(text))


def _single_load(insn: Instruction | None) -> bool:
    """A load whose next load or store may pipeline (TRM 3.3.2): single, not to PC, no write-back."""
    if insn is None or insn.writes_back():
        return False
    if insn.kind == "load":
        return "r15" not in insn.loaded
    return insn.kind == "fpu_load" and not insn.operands.lstrip().startswith("d")


def _memory_cycles(insn: Instruction, prev: Instruction | None, p: int) -> int:
    """Cycles of a load or store (single, pair, multiple; integer or FPU), before the address interlock."""
    kind = insn.kind
    if kind in ("load", "store", "fpu_load", "fpu_store"):
        if kind in ("fpu_load", "fpu_store") and insn.operands.lstrip().startswith("d"):
            return 3
        if "r15" in insn.loaded:
            return 2 + p
        # TRM 3.3.2: "LDR [any] are pipelined when possible ... one cycle is removed from the cost of the next
        # instruction" when it is an LDR or STR whose address does not use the first LDR's destination.
        pipelined = _single_load(prev) and prev is not None and not prev.loaded & insn.address_registers
        return 1 if pipelined else 2
    if kind in ("load_pair", "store_pair"):
        return 3
    words = insn.list_words()
    if words == 0:
        raise UnknownInstructionError(f"no register list in {insn.where()}: {insn.operands!r}")
    return 1 + words + (p if "r15" in insn.loaded else 0)


def instruction_cycles(insn: Instruction, prev: Instruction | None, model: CycleModel) -> tuple[int, int]:
    """Cycles of one instruction after `prev` (None: entered by a jump), without fetch wait states.

    Parameters
    ----------
    insn : Instruction
    prev : Instruction or None
        The instruction executed just before it in sequence.
    model : CycleModel

    Returns
    -------
    tuple of (int, int)
        Cycles when control falls through to the next instruction, and the
        extra cycles when it transfers control instead (a taken branch). An
        unconditional branch costs its whole 1 + P in the first number.

    Raises
    ------
    UnknownInstructionError
        A mnemonic the timing table does not have.
    """
    kind, p = insn.kind, model.branch_refill
    if kind is None:
        raise UnknownInstructionError.of(insn)
    fixed = {"mul": 1, "mla": model.mla_cycles, "div": model.divide_cycles, "it": model.it_cycles, "hint": 1,
             "barrier": 1, "isb": 1 + p, "system": 1, "fpu_mac": 3, "fpu_divide": 14, "fpu_sqrt": 14,
             "branch": 1 + p, "call": 1 + p, "branch_register": 1 + p, "compare_branch": 1 + p,
             "table_branch": 2 + p}
    if kind in fixed:
        cycles = fixed[kind]
    elif kind == "alu":
        cycles = 1 + (p if "r15" in insn.written else 0)
    elif kind == "fpu":
        cycles = 2 if insn.name == "vmov" and len(insn.operand_list) >= 3 else 1
    else:
        cycles = _memory_cycles(insn, prev, p)
    if kind not in ("fpu", "fpu_mac", "fpu_divide", "fpu_sqrt") and prev is not None and \
            insn.address_registers and prev.written & insn.address_registers:
        cycles += 1  # TRM 3.3.2: an address computed by the instruction before stalls one cycle (no forwarding)
    if insn.transfers_control and (insn.conditional or kind == "compare_branch"):
        return 1, cycles - 1  # not taken: one cycle (TRM: "conditional branch ... single cycle if not taken")
    return cycles, 0


@dataclass(frozen=True)
class Program:
    """The instructions of an ELF and its marker functions.

    Attributes
    ----------
    instructions : tuple of Instruction
        By address.
    index : dict of int to int
        Address -> position in `instructions`.
    markers : dict of str to int
        Name -> address of every function whose name starts with ``shooting_mark_``.
    """

    instructions: tuple[Instruction, ...]
    index: dict[int, int]
    markers: dict[str, int]

    def previous(self, position: int) -> Instruction | None:
        """The instruction right before the one at `position` in memory (None at a gap)."""
        if position == 0:
            return None
        before, insn = self.instructions[position - 1], self.instructions[position]
        return before if before.address + before.size == insn.address else None


_LINE = re.compile(r"^\s*([0-9a-f]+):\t([0-9a-f ]+?)\s*\t([^\t]+)(?:\t([^\t@]*))?")
_FUNCTION = re.compile(r"^([0-9a-f]+) <([^>]+)>:$")

#: Prefix of the marker functions that start segments.
MARKER_PREFIX = "shooting_mark_"


def disassemble(elf: Path, *, timeout: float = 120.0) -> Program:
    """Decode every instruction of `elf` with ``arm-none-eabi-objdump -d`` and find its markers (``nm``).

    Parameters
    ----------
    elf : pathlib.Path
    timeout : float, optional
        Seconds for each tool.

    Returns
    -------
    Program

    Raises
    ------
    ToolchainError
        A missing tool or one that fails, or two markers at one address
        (identical-code folding: define them ``__attribute__((noinline, noipa))``).
    """
    dump = _tool_output(["arm-none-eabi-objdump", "-d", str(elf)], timeout)
    instructions, function = [], "?"
    for line in dump.splitlines():
        head = _FUNCTION.match(line)
        if head:
            function = head.group(2)
            continue
        m = _LINE.match(line)
        if m is None or m.group(3).startswith("."):
            continue  # data (.word, .short), a literal pool, a header
        size = len(m.group(2).replace(" ", "")) // 2
        instructions.append(Instruction(int(m.group(1), 16), size, m.group(3).strip(), (m.group(4) or "").strip(),
                                        function))
    instructions.sort(key=lambda i: i.address)
    markers: dict[str, int] = {}
    for line in _tool_output(["arm-none-eabi-nm", "--defined-only", str(elf)], timeout).splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "Tt" and parts[2].startswith(MARKER_PREFIX):
            markers[parts[2]] = int(parts[0], 16) & ~1
    if len(set(markers.values())) != len(markers):
        raise ToolchainError(f"two marker functions share an address in {elf.name} ({sorted(markers)}): the "
                             f"compiler merged identical functions; define them __attribute__((noinline, noipa))")
    return Program(tuple(instructions), {i.address: k for k, i in enumerate(instructions)}, markers)


def _tool_output(cmd: list[str], timeout: float) -> str:
    cmd = [find_tool(cmd[0]), *cmd[1:]]
    proc = run_tool(cmd, Path(cmd[0]).name, timeout=timeout, step=f"reading {Path(cmd[-1]).name}")
    if proc.returncode != 0:
        raise ToolchainError(f"{Path(cmd[0]).name} failed on {Path(cmd[-1]).name} (exit {proc.returncode}): "
                             f"{first_error_line(proc.stderr)}")
    return proc.stdout


@dataclass(frozen=True)
class CostTable:
    """Per-instruction cycles of a `Program`, by halfword slot (slot h: the instruction at address 2h).

    Attributes
    ----------
    in_sequence : ndarray of int64, shape (n_slots,)
        Cycles after its sequential predecessor, falling through.
    solo_delta : ndarray of int64, shape (n_slots,)
        Cycles when entered by a jump (no predecessor) minus `in_sequence`.
    taken_extra : ndarray of int64, shape (n_slots,)
        Extra cycles when it transfers control.
    unknown : dict of int to Instruction
        Instructions without a timing (cost 0 here: an error once they run).
    """

    in_sequence: np.ndarray
    solo_delta: np.ndarray
    taken_extra: np.ndarray
    unknown: dict[int, Instruction]

    def write(self, path: Path, model: CycleModel, markers: list[int]) -> None:
        """The binary table the trace reader adds up (format: templates/exec_trace.c.in)."""
        n = self.in_sequence.size
        prefix = np.concatenate([[0], np.cumsum(self.in_sequence)]).astype("<i8")
        with open(path, "wb") as f:
            f.write(b"SHCYC001")
            f.write(struct.pack("<4I", n, model.icache_line_bytes, model.icache_lines, len(markers)))
            f.write(np.asarray(markers, dtype="<u4").tobytes())
            f.write(prefix.tobytes())
            f.write(self.solo_delta.astype("<i4").tobytes())
            f.write(self.taken_extra.astype("<i4").tobytes())


def cost_table(program: Program, model: CycleModel) -> CostTable:
    """Cost every instruction of `program` under `model` (see `instruction_cycles`).

    Parameters
    ----------
    program : Program
    model : CycleModel

    Returns
    -------
    CostTable
    """
    last = program.instructions[-1] if program.instructions else None
    n = 0 if last is None else (last.address + last.size + 1) // 2
    seq, solo, taken = (np.zeros(n, dtype=np.int64) for _ in range(3))
    unknown = {}
    for k, insn in enumerate(program.instructions):
        h = insn.address // 2
        try:
            seq[h], taken[h] = instruction_cycles(insn, program.previous(k), model)
            solo[h] = instruction_cycles(insn, None, model)[0] - seq[h]
        except UnknownInstructionError:
            unknown[insn.address] = insn  # an error only if it runs (objdump decodes data too)
    return CostTable(seq, solo, taken, unknown)
